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

from sqlmodel import func, select

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
        read = self._pending_ops_sql(limit, ns=ns, memory_ids=memory_ids, kinds=kinds)
        # every index write pass reads it: through the DBAPI cursor (``_read_rows``)
        return [] if read is None else self._pending_ops_rows(self._read_rows(*read))

    def _pending_ops_sql(self, limit: int, *, ns: Namespace | None = None, memory_ids: Sequence[str] | None = None,
                         kinds: Sequence[str] | None = None) -> tuple[str, tuple] | None:
        """``pending_ops``' read (None when it can find nothing: an empty ``memory_ids`` or ``kinds``)."""
        m = self.mark
        where, params = ["1 = 1"], []
        if ns is not None:
            where.append(f"namespace = {m}")
            params.append(str(ns))
        for column, values in (("memory_id", memory_ids), ("op", kinds)):
            if values is not None:
                values = list(values)
                if not values:
                    return None
                where.append(f"{column} IN ({', '.join([m] * len(values))})")
                params += values
        sql = (f"SELECT id, namespace, memory_id, op, attempts FROM index_outbox "
               f"WHERE {' AND '.join(where)} ORDER BY id LIMIT {m}")
        return sql, (*params, int(limit))

    @staticmethod
    def _pending_ops_rows(rows: list[tuple]) -> list[IndexOp]:
        """``pending_ops``' answer from its read's rows."""
        return [IndexOp(i, Namespace.parse(n), mid, op, attempts) for i, n, mid, op, attempts in rows]

    def outbox_depth(self) -> int:
        """How many index operations are owed (all namespaces; the metrics gauge)."""
        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_IndexOpRow)).one())

    def clear_ops(self, op_ids: Sequence[int]) -> None:
        """Remove applied outbox rows."""
        if not op_ids:
            return
        ids = [int(i) for i in op_ids]
        # after every index write pass: one statement as the driver takes it (``_write_one``)
        self._write_one(f"DELETE FROM index_outbox WHERE id IN ({', '.join([self.mark] * len(ids))})", tuple(ids))

    def fail_ops(self, op_ids: Sequence[int]) -> None:
        """Count a failed attempt on outbox rows (they stay queued)."""
        if not op_ids:
            return
        with self._write() as s:
            for r in s.exec(select(_IndexOpRow).where(_IndexOpRow.id.in_(list(op_ids)))).all():  # type: ignore[attr-defined]
                r.attempts += 1
                s.add(r)
