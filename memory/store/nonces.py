"""Nonces of signed platform callbacks already accepted (replay protection).

``bridges.replay`` checks each signed callback's signature and freshness; its
nonce is claimed here — alone (``claim_nonce``), or in the transaction that
logs the message it carries (``ChatLog.append_chat`` with ``nonce``, so that
a turn writes once before its answer and a crash cannot leave the nonce
claimed but the message unlogged). The table lives in SQL, not in a process,
so that a nonce one gateway replica accepted is refused by every other one; the
maintenance task prunes what no replay window reaches any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection
from sqlmodel import delete

from memory.store.base import StoreBase, sqlite_time, utcnow
from memory.store.tables import _SeenNonceRow

__all__ = ["SeenNonces", "NonceClaim"]

_T = _SeenNonceRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class NonceClaim:
    """One signed request's nonce to claim: ``nonce`` (at most 128 characters; the
    caller hashes what the platform signs, e.g. timestamp + nonce) reached
    ``tenant`` on ``platform`` (the callback kind: ``wechat``, ``webhook``,
    ``onebot``) at ``at`` (UTC; default: when it is claimed); ``digest`` (at most
    128 characters, e.g. the body's hash) is kept with it and handed back on a
    second use."""

    tenant: str
    platform: str
    nonce: str
    digest: str = ""
    at: datetime | None = None


def claim_in(conn: Connection, claim: NonceClaim) -> str | None:
    """Claim ``claim`` in the write transaction of ``conn``: None the first time;
    on a second use the ``digest`` recorded the first time (``""`` when none), and
    nothing is inserted. ``INSERT … ON CONFLICT DO NOTHING`` on the unique
    (tenant, platform, nonce): the transaction goes on either way (PostgreSQL
    would abort it on an integrity error), and of two racing claims one wins —
    the other waits for its commit and then reads its digest."""
    sqlite = conn.dialect.name == "sqlite"
    m = "?" if sqlite else "%s"
    tenant, platform, nonce = claim.tenant[:64], claim.platform[:32], claim.nonce[:128]
    at = claim.at or utcnow()
    # as the driver takes it (every signed callback claims one); RETURNING says whether the row went in
    # (the rowcount of an INSERT that returns rows is not reliable)
    row = conn.exec_driver_sql(f"INSERT INTO seen_nonces (tenant, platform, nonce, digest, seen_at) "
                               f"VALUES ({m}, {m}, {m}, {m}, {m}) ON CONFLICT DO NOTHING RETURNING id",
                               (tenant, platform, nonce, claim.digest[:128], sqlite_time(at) if sqlite else at)).first()
    if row is not None:
        return None
    first = conn.exec_driver_sql(f"SELECT digest FROM seen_nonces WHERE tenant = {m} AND platform = {m} "
                                 f"AND nonce = {m}", (tenant, platform, nonce)).scalar()
    return first or ""


class SeenNonces(StoreBase):
    """Claiming and pruning nonces of signed callbacks (not namespaced: a callback
    is authenticated before anyone's namespace is known)."""

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """Record that a signed request with ``nonce`` reached ``tenant`` on
        ``platform`` (``NonceClaim``), in a transaction of its own: None the first
        time; on a replay, the ``digest`` recorded the first time. Safe under
        concurrency and across replicas (unique constraint). A message's turn
        claims it with the message instead (``append_chat``)."""
        with self._write_conn() as conn:
            return claim_in(conn, NonceClaim(tenant, platform, nonce, digest, at))

    def prune_nonces(self, before: datetime) -> int:
        """Drop nonces recorded before ``before`` (older than every replay window:
        their timestamps are refused as stale anyway); returns how many."""
        with self._write() as s:
            result = s.exec(delete(_SeenNonceRow).where(_SeenNonceRow.seen_at < before))  # type: ignore[call-overload]
            return int(result.rowcount or 0)
