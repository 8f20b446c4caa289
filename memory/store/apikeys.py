"""API keys of the HTTP API, stored hashed.

A key reads ``hy_<key_id>_<secret>``: ``key_id`` is 12 hex digits (public: it
names the key in listings and logs), ``secret`` 43 URL-safe characters from
``secrets.token_urlsafe(32)`` (256 random bits). Only the SHA-256 hex digest of
the whole key is kept (a fast hash is enough for a key of 256 random bits: no
dictionary to try; a slow password hash protects low-entropy secrets, which
these are not). Verification looks the row up by ``key_id`` and compares digests
with ``hmac.compare_digest`` (constant time); a malformed, unknown or revoked key
costs the same digest and comparison, so that timing does not say which.

Scopes (``KeyScope``): ``admin`` reaches every person of its tenant; ``member``
only the one ``subject`` it was made for. A tenant that has ever had a key is
"keyed" (``tenant_has_keys``): revoking every key locks it instead of opening it
again. Not namespaced: a key is checked before anyone's namespace is known.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import delete, select

from memory.errors import NamespaceError
from memory.store.base import StoreBase, utcnow
from memory.store.tables import _aware, _ApiKeyRow, _ConsoleSessionRow
from memory.types import SUBJECT_RE, TENANT_RE, not_a_person

__all__ = ["ApiKeys", "ApiKey", "KeyScope", "KEY_RE"]

#: The form of a key; anything else is refused without a lookup.
KEY_RE = re.compile(r"hy_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_DUMMY_DIGEST = hashlib.sha256(b"huiyi: no such key").hexdigest()


class KeyScope(str, enum.Enum):
    """What a key may reach within its tenant: ``admin`` every person (and admin
    commands over ``/v1/turns``), ``member`` one person's own memories."""

    ADMIN = "admin"
    MEMBER = "member"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key without its secret: ``key_id`` (12 hex digits), ``tenant``,
    ``scope``, ``subject`` (the member key's person, None for admin keys),
    ``label`` (free text, at most 200 characters), UTC ``created_at`` and
    ``revoked_at`` (None while valid)."""

    key_id: str
    tenant: str
    scope: KeyScope
    subject: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _value(row: _ApiKeyRow) -> ApiKey:
    return ApiKey(row.key_id, row.tenant, KeyScope(row.scope), row.subject or None, row.label,
                  _aware(row.created_at), _aware(row.revoked_at))


class ApiKeys(StoreBase):
    """Creating, listing, revoking and verifying API keys."""

    def create_api_key(self, tenant: str, scope: KeyScope | str, subject: str | None = None,
                       label: str = "") -> tuple[ApiKey, str]:
        """A new key of ``tenant``; returns the stored value and the key itself
        (shown once: only its digest is kept). A member key names its ``subject``
        (``tg:42``); an admin key names none. Raises NamespaceError for a tenant
        or subject outside its pattern or a subject that names nobody in particular
        (``memory.types.not_a_person``: ``tg:None``, ``tg:1087968824``…), ValueError for a member key without a
        subject or an admin key with one."""
        scope = KeyScope(scope)
        if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
            raise NamespaceError(f"invalid tenant: {tenant!r}")
        if scope is KeyScope.MEMBER:
            if not subject:
                raise ValueError("a member key names the subject it acts for")
            if not SUBJECT_RE.fullmatch(subject):
                raise NamespaceError(f"invalid subject: {subject!r}")
            if reason := not_a_person(*subject.split(":", 1)):
                raise NamespaceError(f"subject {subject}: {reason}")
        elif subject:
            raise ValueError("an admin key reaches every subject of its tenant; it names none")
        key_id = secrets.token_hex(6)
        key = f"hy_{key_id}_{secrets.token_urlsafe(32)}"
        row = _ApiKeyRow(key_id=key_id, tenant=tenant, scope=scope.value, subject=subject or "",
                         digest=_digest(key), label=label[:200], created_at=utcnow())
        with self._write() as s:
            s.add(row)
        return _value(row), key

    def list_api_keys(self, tenant: str) -> list[ApiKey]:
        """Every key of ``tenant`` (revoked ones too), oldest first."""
        with self._read() as s:
            rows = s.exec(select(_ApiKeyRow).where(_ApiKeyRow.tenant == tenant)
                          .order_by(_ApiKeyRow.created_at, _ApiKeyRow.key_id)).all()
        return [_value(r) for r in rows]

    def revoke_api_key(self, tenant: str, key_id: str) -> bool:
        """Revoke key ``key_id`` of ``tenant`` from now on; False when the tenant
        has no such key, True otherwise (revoking twice keeps the first time).
        The console sessions it opened end in the same transaction."""
        with self._write() as s:
            row = s.exec(select(_ApiKeyRow).where(_ApiKeyRow.key_id == key_id,
                                                  _ApiKeyRow.tenant == tenant)).first()
            if row is None:
                return False
            if row.revoked_at is None:
                row.revoked_at = utcnow()
                s.add(row)
            s.exec(delete(_ConsoleSessionRow).where(  # type: ignore[call-overload]
                _ConsoleSessionRow.tenant == tenant, _ConsoleSessionRow.key_id == key_id))
        return True

    def verify_api_key(self, key: str) -> ApiKey | None:
        """The valid key ``key`` stands for, or None when it is malformed, unknown,
        revoked or wrong (one SHA-256 and one constant-time comparison in every case)."""
        m = KEY_RE.fullmatch(key) if isinstance(key, str) else None
        row = None
        if m is not None:
            with self._read() as s:
                row = s.exec(select(_ApiKeyRow).where(_ApiKeyRow.key_id == m.group(1))).first()
        ok = hmac.compare_digest(_digest(key if isinstance(key, str) else ""),
                                 row.digest if row is not None else _DUMMY_DIGEST)
        if row is None or not ok or row.revoked_at is not None:
            return None
        return _value(row)

    def tenant_has_keys(self, tenant: str) -> bool:
        """True once ``tenant`` has had any key, revoked or not."""
        with self._read() as s:
            return s.exec(select(_ApiKeyRow.key_id).where(_ApiKeyRow.tenant == tenant).limit(1)).first() is not None

    def keyless_tenants(self, tenants: list[str]) -> list[str]:
        """Those of ``tenants`` that never had a key (sorted)."""
        with self._read() as s:
            keyed = set(s.exec(select(_ApiKeyRow.tenant).distinct()).all())
        return sorted(t for t in tenants if t not in keyed)
