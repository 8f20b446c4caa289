"""``huiyi keys`` — API keys of the ``/v1`` HTTP API (``gateway.http.auth``).

create  a new key for ``--tenant`` (``--scope admin``, the default: every person
        of the tenant; ``--scope member --subject tg:42``: that person only),
        printed once — only its SHA-256 digest is stored
list    the tenant's keys: id, scope, subject, label, created, revoked
revoke  KEY_ID — refused from now on, on every replica (the keys live in SQL)

Once a tenant has had a key, ``/v1`` answers it only with a key, loopback
callers included. Opens only the SQL store (no index, no embedder). Messages
are in the operator's language (gateway.cli.lang). Exit code 1 for an unknown
key, 2 for an invalid tenant, scope or subject (``list`` of a tenant that is
neither configured nor has a key included).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from gateway.cli.db import StoreSession
from locales import translate

__all__ = ["keys_app"]

keys_app = typer.Typer(add_completion=False, no_args_is_help=True, help="create, list and revoke API keys of /v1")

TenantOpt = Annotated[str, typer.Option(help="tenant the key belongs to")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def _record(k) -> dict:
    return {"key_id": k.key_id, "tenant": k.tenant, "scope": k.scope.value, "subject": k.subject, "label": k.label,
            "created_at": k.created_at.isoformat(), "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None}


@keys_app.command()
def create(tenant: TenantOpt = "default",
           scope: Annotated[str, typer.Option(help="admin: every person of the tenant; member: --subject only")] = "admin",
           subject: Annotated[str | None, typer.Option(help="the person a member key acts for, e.g. tg:42")] = None,
           label: Annotated[str, typer.Option(help="a note: who holds the key")] = "",
           as_json: JsonOpt = False) -> None:
    """Make a key and print it once."""
    from memory.errors import NamespaceError

    s = StoreSession()
    v = s.voice(tenant)
    if tenant not in s.settings.tenants:
        v.fail("Unknown tenant {tenant}: configure it first (HUIYI_CONFIG).", code=2, tenant=tenant)
    if scope not in ("admin", "member"):
        v.fail("The scope is admin or member, not {scope}.", code=2, scope=scope)
    with s:
        try:
            key, secret = s.store.create_api_key(tenant, scope, subject, label)
        except (NamespaceError, ValueError) as exc:
            v.fail("Cannot create the key: {detail}", code=2, detail=str(exc))
    if as_json:
        sys.stdout.write(json.dumps({**_record(key), "key": secret}, ensure_ascii=False) + "\n")
        return
    typer.echo(secret)
    v.say("Key {key_id} ({scope}) for tenant {tenant}. It is shown only now: keep it secret.", err=True,
          key_id=key.key_id, scope=key.scope.value, tenant=tenant)


@keys_app.command("list")
def list_(tenant: TenantOpt = "default", as_json: JsonOpt = False) -> None:
    """The tenant's keys, oldest first (never the keys themselves)."""
    with StoreSession() as s:
        keys = s.store.list_api_keys(tenant)
    v = s.voice(tenant)
    if as_json:
        sys.stdout.write(json.dumps([_record(k) for k in keys], ensure_ascii=False) + "\n")
    elif not keys and tenant not in s.settings.tenants:
        v.fail("Unknown tenant {tenant}: configure it first (HUIYI_CONFIG).", code=2, tenant=tenant)
    elif not keys:
        v.say("Tenant {tenant} has no API key yet: `huiyi keys create --tenant {tenant}` makes one. Until it has one, "
              "/v1 serves this tenant without a key to callers on this machine only (none at all with "
              "HUIYI_API_REQUIRE_KEY).", tenant=tenant)
    else:
        for k in keys:
            state = (translate(v.lang, "revoked {when}", when=f"{k.revoked_at:%Y-%m-%d %H:%M}") if k.revoked_at
                     else translate(v.lang, "active"))
            typer.echo(f"{k.key_id}  {k.scope.value:<6}  {k.subject or '*':<20}  {k.created_at:%Y-%m-%d %H:%M}  "
                       f"{state:<24}  {k.label}")


@keys_app.command()
def revoke(key_id: Annotated[str, typer.Argument(help="the key id (the 12 hex digits after hy_)")],
           tenant: TenantOpt = "default") -> None:
    """Refuse the key from now on."""
    with StoreSession() as s:
        found = s.store.revoke_api_key(tenant, key_id)
    v = s.voice(tenant)
    if not found:
        v.fail("Tenant {tenant} has no key {key_id}: `huiyi keys list --tenant {tenant}` shows its key ids.", code=1,
               tenant=tenant, key_id=key_id)
    v.say("Revoked key {key_id}.", key_id=key_id)
