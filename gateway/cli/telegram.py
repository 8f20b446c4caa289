"""``huiyi telegram …`` — manage a tenant's Telegram webhook.

set-webhook     register ``telegram.webhook_url`` (or ``--url``) and the secret
delete-webhook  remove it (long polling needs that; ``serve --polling`` does it too)

Messages are in the operator's language (gateway.cli.lang).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gateway.cli.lang import Voice
from gateway.config import TenantSettings, load_settings
from locales import translate

__all__ = ["telegram_app"]

telegram_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Telegram bot webhook management")

TenantOpt = Annotated[str, typer.Option(help="tenant whose bot to configure")]


def _tenant(name: str) -> tuple[TenantSettings, Voice]:
    """Tenant ``name``'s settings and the operator's voice; a usage error (exit 2) for an unknown tenant."""
    settings = load_settings()
    voice = Voice.of(name, settings)
    t = settings.tenants.get(name)
    if t is None:
        raise typer.BadParameter(translate(voice.lang, "Unknown tenant {tenant}: configure it first (HUIYI_CONFIG).",
                                           tenant=name), param_hint="--tenant")
    return t, voice


@telegram_app.command("set-webhook")
def set_webhook(tenant: TenantOpt = "default",
                url: Annotated[str | None, typer.Option(help="public HTTPS URL; default telegram.webhook_url "
                                                         "(<base>/telegram/<tenant> when it ends with /)")] = None) -> None:
    """Register the webhook URL and secret token of TENANT's bot with Telegram."""
    from bridges.telegram.runtime import set_webhook as do_set

    t, voice = _tenant(tenant)
    cfg = t.telegram
    target = url or cfg.webhook_url
    if not target:
        raise typer.BadParameter(translate(voice.lang, "no --url given and no telegram.webhook_url configured for "
                                                       "tenant {tenant}: pass --url https://… or set webhook_url under "
                                                       "[tenants.{tenant}.telegram] (HUIYI_CONFIG)", tenant=tenant),
                                 param_hint="--url")
    if target.endswith("/"):
        target += f"telegram/{tenant}"
    try:
        ok = asyncio.run(do_set(cfg, target))
    except (ValueError, LookupError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    if ok:
        voice.say("webhook for {tenant}: {url} (set)", tenant=tenant, url=target)
    else:
        voice.say("webhook for {tenant}: {url} (refused by Telegram)", tenant=tenant, url=target)
    if not ok:
        raise typer.Exit(1)


@telegram_app.command("delete-webhook")
def delete_webhook(tenant: TenantOpt = "default") -> None:
    """Remove TENANT's webhook (pending updates are kept)."""
    from bridges.telegram.runtime import delete_webhook as do_delete

    t, voice = _tenant(tenant)
    try:
        ok = asyncio.run(do_delete(t.telegram))
    except LookupError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if ok:
        voice.say("webhook for {tenant}: deleted", tenant=tenant)
    else:
        voice.say("webhook for {tenant}: refused by Telegram", tenant=tenant)
