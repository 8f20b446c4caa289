"""Open sessions of the admin console, kept in SQL.

A login opens a row (``open_console_session``); the console's signed cookie
carries the session id, and every request checks the row (``console_session``)
in the same read that checks the key is still an active admin key. Ending a
session deletes its row, so a copy of the cookie is refused from then on, by
every replica sharing the database — logout (``end_console_session``), "log
out everywhere" for one key (``end_console_sessions``) and revoking the key
(``ApiKeys.revoke_api_key``) all do. A row outlives nothing: it holds its
``expires_at`` (the cookie's own lifetime), is refused after it, and each
login deletes the rows already expired, so the table holds at most the logins
of one session lifetime.

The session id is ``secrets.token_urlsafe(32)`` (256 random bits); only its
SHA-256 hex digest is kept (as for API keys: a database reader learns no
usable session, and a fast hash is enough for a random secret). Not
namespaced: a session is checked before anyone's namespace is known.

The session cookie is signed with the console's secret, so every gateway on
one database must sign with the same one, or a cookie signed by one is refused
by the next behind a balancer. Each running gateway therefore says which
secret it signs with — a fingerprint of it, never the secret
(``note_console_secret``) — and reads which the others said within a window;
``/readyz`` reports a difference (``gateway.http.health``).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import bindparam
from sqlmodel import delete, func, select

from memory.store.apikeys import ApiKey, KeyScope, _value
from memory.store.base import StoreBase, utcnow
from memory.store.tables import _ApiKeyRow, _ConsoleSecretRow, _ConsoleSessionRow

__all__ = ["ConsoleSessions"]


_S = _ConsoleSessionRow
#: The read of every console request, built once (building it per call cost more than running it).
_OPEN_SESSION_KEY = (select(_ApiKeyRow).join(_S, _S.key_id == _ApiKeyRow.key_id)
                     .where(_S.digest == bindparam("digest"), _S.tenant == bindparam("tenant"),
                            _S.key_id == bindparam("key_id"), _S.expires_at > bindparam("now"),
                            _ApiKeyRow.tenant == bindparam("tenant")))


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


class ConsoleSessions(StoreBase):
    """Opening, checking, ending and pruning the console's sessions."""

    def open_console_session(self, tenant: str, key_id: str, lifetime_s: float, now: datetime | None = None) -> str:
        """A new session of admin key ``key_id`` of ``tenant``, valid for
        ``lifetime_s`` seconds from ``now`` (default: the current UTC time);
        returns its id (43 URL-safe characters, to put in the signed cookie; only
        its digest is kept). In the same transaction, deletes every session
        already expired at ``now``. Raises ValueError for a lifetime that is not
        positive. Does not check the key: the caller has just verified it."""
        if not lifetime_s > 0:
            raise ValueError("a session lifetime is a positive number of seconds")
        now = now or utcnow()
        session_id = secrets.token_urlsafe(32)
        with self._write() as s:
            s.exec(delete(_ConsoleSessionRow).where(_ConsoleSessionRow.expires_at <= now))  # type: ignore[call-overload]
            s.add(_ConsoleSessionRow(digest=_digest(session_id), tenant=tenant, key_id=key_id, created_at=now,
                                     expires_at=now + timedelta(seconds=lifetime_s)))
        return session_id

    def console_session(self, tenant: str, key_id: str, session_id: str, now: datetime | None = None) -> ApiKey | None:
        """The admin key session ``session_id`` of ``tenant`` was opened with, or
        None when there is no such open session of ``key_id`` (never opened,
        ended, expired at ``now``) or the key is no longer an active admin key of
        ``tenant``. One SELECT joining the session to its key."""
        if not isinstance(session_id, str) or not session_id:
            return None
        now = now or utcnow()
        with self._read() as s:
            row = s.exec(_OPEN_SESSION_KEY, params={"digest": _digest(session_id), "tenant": tenant,
                                                    "key_id": key_id, "now": now}).first()
        if row is None:
            return None
        key = _value(row)
        if not key.active or key.scope is not KeyScope.ADMIN:
            return None
        return key

    def end_console_session(self, tenant: str, session_id: str) -> bool:
        """End session ``session_id`` of ``tenant`` (its row is deleted); False
        when it was not open."""
        with self._write() as s:
            result = s.exec(delete(_ConsoleSessionRow).where(  # type: ignore[call-overload]
                _ConsoleSessionRow.digest == _digest(session_id), _ConsoleSessionRow.tenant == tenant))
            return bool(result.rowcount)

    def end_console_sessions(self, tenant: str, key_id: str) -> int:
        """End every session key ``key_id`` of ``tenant`` opened ("log out
        everywhere"); returns how many were open (expired ones count too)."""
        with self._write() as s:
            result = s.exec(delete(_ConsoleSessionRow).where(  # type: ignore[call-overload]
                _ConsoleSessionRow.tenant == tenant, _ConsoleSessionRow.key_id == key_id))
            return int(result.rowcount or 0)

    def console_session_counts(self, tenant: str, now: datetime | None = None) -> dict[str, int]:
        """``{key_id: open sessions}`` of ``tenant`` at ``now`` (keys without an
        open session are left out)."""
        now = now or utcnow()
        with self._read() as s:
            rows = s.exec(select(_ConsoleSessionRow.key_id, func.count())
                          .where(_ConsoleSessionRow.tenant == tenant, _ConsoleSessionRow.expires_at > now)
                          .group_by(_ConsoleSessionRow.key_id)).all()
        return {key_id: int(n) for key_id, n in rows}

    def note_console_secret(self, instance: str, fingerprint: str, window_s: float,
                            now: datetime | None = None) -> set[str]:
        """Record that gateway process ``instance`` (at most 32 characters)
        signs console sessions with the secret of ``fingerprint`` (64 hex), as of
        ``now`` (default: the current UTC time), and return the fingerprints
        other gateways said within the last ``window_s`` seconds that differ
        from it (empty: every live gateway agrees). In the same transaction,
        deletes the rows unrefreshed for longer than ``window_s`` (a gateway that
        stopped without saying so). Raises ValueError for a window that is not
        positive."""
        if not window_s > 0:
            raise ValueError("the window is a positive number of seconds")
        now = now or utcnow()
        cutoff = now - timedelta(seconds=window_s)
        _C = _ConsoleSecretRow
        with self._write() as s:
            s.exec(delete(_C).where(_C.seen_at < cutoff))  # type: ignore[call-overload]
            row = s.get(_C, instance)
            if row is None:
                s.add(_C(instance=instance, fingerprint=fingerprint, seen_at=now))
            else:
                row.fingerprint, row.seen_at = fingerprint, now
                s.add(row)
            others = s.exec(select(_C.fingerprint).where(_C.instance != instance, _C.fingerprint != fingerprint)).all()
        return set(others)

    def drop_console_secret(self, instance: str) -> None:
        """Forget gateway process ``instance``'s row (it is stopping)."""
        with self._write() as s:
            s.exec(delete(_ConsoleSecretRow).where(_ConsoleSecretRow.instance == instance))  # type: ignore[call-overload]
