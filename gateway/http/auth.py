"""Who is calling ``/v1``: API keys, and the keyless loopback rule.

A ``/v1`` call is answered for one of two callers:

- **a key** (``X-API-Key: hy_…`` or ``Authorization: Bearer hy_…``; made with
  ``huiyi keys create``, stored hashed, ``memory.store.apikeys``): its tenant
  only. An ``admin`` key reaches every person of the tenant; a ``member`` key
  only the subject it was made for (and the identities linked to it), and over
  ``/v1/turns`` only messages that person sent, with no admin command
  (whatever the tenant's ``admins`` list says about the sender). A key that
  is malformed, unknown or revoked is refused (401) from anywhere.
- **no key, from loopback** (the caller's address is 127.0.0.0/8 or ::1 —
  ``is_loopback``): allowed for a tenant that never had a key, with admin
  reach (the operator's own machine: README's two-command path), unless
  ``Settings.api_require_key`` is on. Once a tenant has had a key (even a
  revoked one) it answers only keyed calls.

Anything else is 401 before the body is read. The caller's address is the one
the ASGI server reports: ``uvicorn`` replaces it with ``X-Forwarded-For`` only
when the connection comes from one of its ``forwarded_allow_ips`` (default
127.0.0.1), so a reverse proxy on the same host must send that header — or
``api_require_key`` must be on — or every caller behind it counts as loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from gateway.errors import Forbidden, Unauthorized
from memory.identity import resolve_subject
from memory.store import KeyScope
from memory.types import Namespace

__all__ = ["Caller", "is_loopback", "presented_key", "authenticate", "KEY_HEADER"]

log = logging.getLogger(__name__)

KEY_HEADER = "X-API-Key"


def is_loopback(host: str | None) -> bool:
    """True when ``host`` (the client address of an ASGI scope) is a loopback IP
    address: 127.0.0.0/8, ::1, or an IPv4-mapped ::ffff:127.x. Names are not
    addresses: ``"localhost"``, ``"testclient"`` (Starlette's TestClient), ``""``
    and None are False — only what the socket says counts."""
    if not host:
        return False
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def presented_key(request: Request) -> str | None:
    """The API key of the request: ``X-API-Key``, else ``Authorization: Bearer …``;
    None when neither is there (an empty value counts as presented and wrong)."""
    key = request.headers.get(KEY_HEADER)
    if key is not None:
        return key.strip()
    auth = request.headers.get("Authorization")
    if auth is not None:
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""
    return None


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated ``/v1`` caller. ``tenant`` None: a keyless loopback caller
    (any tenant that never had a key); ``scope`` admin or member; ``subject`` the
    member key's person (None for admin keys and keyless callers); ``key_id``
    None for keyless callers."""

    tenant: str | None
    scope: KeyScope
    subject: str | None = None
    key_id: str | None = None

    @property
    def admin(self) -> bool:
        return self.scope is KeyScope.ADMIN

    @property
    def actor(self) -> str:
        """The audit actor: ``api:<key_id>`` or ``api:loopback``."""
        return f"api:{self.key_id}" if self.key_id else "api:loopback"

    def tenant_of(self, store, named: str | None) -> str:
        """The tenant a call acts in: the key's (``named`` must be it or None; 403
        otherwise), or for a keyless caller ``named`` (default ``default``), which
        must never have had a key (401 otherwise). Blocking: call in a thread."""
        if self.tenant is not None:
            if named is not None and named != self.tenant:
                log.info("API key %s refused for tenant %s (it belongs to %s)", self.key_id, named, self.tenant)
                raise Forbidden("this API key belongs to another tenant")
            return self.tenant
        tenant = named or "default"
        if store.tenant_has_keys(tenant):
            raise Unauthorized(f"tenant {tenant!r} requires an API key ({KEY_HEADER})")
        return tenant

    def namespace(self, store, tenant: str, subject: str) -> Namespace:
        """The namespace ``subject`` resolves to in ``tenant`` (linked identities
        followed, ``memory.identity.resolve_subject``), if this caller may reach
        it: an admin reaches everyone, a member only its own person. Raises
        NamespaceError (400) for a subject outside its pattern, Forbidden (403)
        otherwise, audited as ``api_denied`` in the target's namespace.
        Blocking: call in a thread."""
        ns = resolve_subject(store, tenant, subject)
        if self.admin:
            return ns
        own = resolve_subject(store, tenant, self.subject or "")
        if ns != own:
            store.audit(ns, "api_denied", self.actor, subject=subject)
            log.info("API key %s (member %s) refused on %s", self.key_id, self.subject, ns)
            raise Forbidden("a member key reaches only its own person's memories")
        return ns


async def authenticate(request: Request, store_of: Callable[[], Any], require_key: bool) -> Caller:
    """The caller of a ``/v1`` request (module docstring), before its body is read.
    ``store_of()`` gives the store holding the keys (asked only when a key is
    presented); ``require_key``: ``Settings.api_require_key``. Raises
    Unauthorized (401) for a wrong, revoked or missing key (a keyless caller not
    on loopback, or any keyless caller with ``require_key``)."""
    key = presented_key(request)
    if key is not None:
        found = await asyncio.to_thread(store_of().verify_api_key, key)
        if found is None:
            log.info("refused %s %s: invalid or revoked API key", request.method, request.url.path)
            raise Unauthorized("invalid or revoked API key")
        return Caller(found.tenant, found.scope, found.subject, found.key_id)
    host = request.client.host if request.client else None
    if require_key or not is_loopback(host):
        log.info("refused %s %s from %s: no API key", request.method, request.url.path, host)
        raise Unauthorized(f"an API key is required ({KEY_HEADER} or Authorization: Bearer)")
    return Caller(None, KeyScope.ADMIN)
