"""The index outbox: LanceDB operations owed for SQL writes already committed.

Each memory write adds an ``index_outbox`` row (``upsert``, ``delete`` or
``purge``) in its own transaction; ``memory.index.SearchIndex`` reads them with
``pending_ops``, applies them and clears them, or counts a failed attempt. A
crash between SQL and index leaves the row, which index maintenance re-applies:
nothing is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import delete, func, select

from memory.store.base import StoreBase
from memory.store.tables import _IndexOpRow
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class IndexOp:
    """A pending index operation from the outbox: op is ``upsert`` or ``delete``."""

    id: int
    namespace: Namespace
    memory_id: str
    op: str
    attempts: int


class IndexOutbox(StoreBase):
    """Reading, clearing and failing index outbox rows."""

    def pending_ops(self, limit: int = 500, *, ns: Namespace | None = None, memory_ids: Sequence[str] | None = None,
                    kinds: Sequence[str] | None = None) -> list[IndexOp]:
        """Oldest pending index operations (each carries its own namespace), all of
        them or only those of ``ns`` / ``memory_ids`` / op ``kinds`` (``upsert``,
        ``delete``, ``purge``) — so that a backlog never hides a fresh write's op."""
        q = select(_IndexOpRow)
        if ns is not None:
            q = q.where(_IndexOpRow.namespace == str(ns))
        if memory_ids is not None:
            q = q.where(_IndexOpRow.memory_id.in_(list(memory_ids)))  # type: ignore[attr-defined]
        if kinds is not None:
            q = q.where(_IndexOpRow.op.in_(list(kinds)))  # type: ignore[attr-defined]
        with self._read() as s:
            rows = s.exec(q.order_by(_IndexOpRow.id).limit(limit)).all()  # type: ignore[arg-type]
        return [IndexOp(r.id, Namespace.parse(r.namespace), r.memory_id, r.op, r.attempts) for r in rows]  # type: ignore[arg-type]

    def outbox_depth(self) -> int:
        """How many index operations are owed (all namespaces; the metrics gauge)."""
        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_IndexOpRow)).one())

    def clear_ops(self, op_ids: Sequence[int]) -> None:
        """Remove applied outbox rows."""
        if not op_ids:
            return
        with self._write() as s:
            s.exec(delete(_IndexOpRow).where(_IndexOpRow.id.in_(list(op_ids))))  # type: ignore[attr-defined,call-overload]

    def fail_ops(self, op_ids: Sequence[int]) -> None:
        """Count a failed attempt on outbox rows (they stay queued)."""
        if not op_ids:
            return
        with self._write() as s:
            for r in s.exec(select(_IndexOpRow).where(_IndexOpRow.id.in_(list(op_ids)))).all():  # type: ignore[attr-defined]
                r.attempts += 1
                s.add(r)
