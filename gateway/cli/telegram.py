"""``huiyi telegram …`` — manage a tenant's Telegram webhook.

set-webhook     register ``telegram.webhook_url`` (or ``--url``) and the secret
delete-webhook  remove it (long polling needs that; ``serve --polling`` does it too)
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gateway.config import TenantSettings, load_settings

__all__ = ["telegram_app"]

telegram_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Telegram bot webhook management")

TenantOpt = Annotated[str, typer.Option(help="tenant whose bot to configure")]


def _tenant(name: str) -> TenantSettings:
    t = load_settings().tenants.get(name)
    if t is None:
        raise typer.BadParameter(f"unknown tenant {name!r}", param_hint="--tenant")
    return t


@telegram_app.command("set-webhook")
def set_webhook(tenant: TenantOpt = "default",
                url: Annotated[str | None, typer.Option(help="public HTTPS URL; default telegram.webhook_url "
                                                         "(<base>/telegram/<tenant> when it ends with /)")] = None) -> None:
    """Register the webhook URL and secret token of TENANT's bot with Telegram."""
    from bridges.telegram.runtime import set_webhook as do_set

    cfg = _tenant(tenant).telegram
    target = url or cfg.webhook_url
    if not target:
        raise typer.BadParameter("no --url and no telegram.webhook_url configured", param_hint="--url")
    if target.endswith("/"):
        target += f"telegram/{tenant}"
    try:
        ok = asyncio.run(do_set(cfg, target))
    except (ValueError, LookupError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"webhook for {tenant}: {target} ({'set' if ok else 'refused'})")
    if not ok:
        raise typer.Exit(1)


@telegram_app.command("delete-webhook")
def delete_webhook(tenant: TenantOpt = "default") -> None:
    """Remove TENANT's webhook (pending updates are kept)."""
    from bridges.telegram.runtime import delete_webhook as do_delete

    try:
        ok = asyncio.run(do_delete(_tenant(tenant).telegram))
    except LookupError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"webhook for {tenant}: {'deleted' if ok else 'refused'}")
