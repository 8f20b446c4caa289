"""Nonces of signed platform callbacks already accepted (replay protection).

``bridges.replay.guard`` claims each signed callback's nonce here after its
signature and freshness checks. The table lives in SQL, not in a process, so
that a nonce one gateway replica accepted is refused by every other one; the
maintenance task prunes what no replay window reaches any more.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlmodel import delete, select

from memory.store.base import StoreBase, utcnow
from memory.store.tables import _SeenNonceRow

__all__ = ["SeenNonces"]


class SeenNonces(StoreBase):
    """Claiming and pruning nonces of signed callbacks (not namespaced: a callback
    is authenticated before anyone's namespace is known)."""

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """Record that a signed request with ``nonce`` (at most 128 characters; the
        caller hashes what the platform signs, e.g. timestamp + nonce) reached
        ``tenant`` on ``platform``. Returns None the first time; on a replay, the
        ``digest`` (at most 128 characters, e.g. a body hash) recorded the first time.
        Safe under concurrency and across replicas (unique constraint)."""
        try:
            with self._write() as s:
                s.add(_SeenNonceRow(tenant=tenant[:64], platform=platform[:32], nonce=nonce[:128],
                                    digest=digest[:128], seen_at=at or utcnow()))
            return None
        except IntegrityError:
            with self._read() as s:
                first = s.exec(select(_SeenNonceRow.digest).where(
                    _SeenNonceRow.tenant == tenant[:64], _SeenNonceRow.platform == platform[:32],
                    _SeenNonceRow.nonce == nonce[:128])).first()
            return first if first is not None else ""

    def prune_nonces(self, before: datetime) -> int:
        """Drop nonces recorded before ``before`` (older than every replay window:
        their timestamps are refused as stale anyway); returns how many."""
        with self._write() as s:
            result = s.exec(delete(_SeenNonceRow).where(_SeenNonceRow.seen_at < before))  # type: ignore[call-overload]
            return int(result.rowcount or 0)
