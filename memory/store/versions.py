"""Per-namespace write versions and live counts (``namespace_state``).

Every write that changes what a search of a namespace reads — a memory added,
given a new text, origin or visibility, deleted, or moved to another
namespace — calls ``_bump`` inside its own transaction: the namespace's
``version`` grows by one and ``live`` by the change in live memories. Readers
(``memory.cache``) stamp what they hold with the version they read *before*
the rows, so a cache is never newer than its stamp, and a stamp that differs
from the stored version means a reload: every replica sees a change at its
next recall, whatever process made it.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select

from memory.store.base import StoreBase
from memory.store.tables import _MemoryRow, _NamespaceStateRow
from memory.types import Namespace

_T = _NamespaceStateRow.__table__  # type: ignore[attr-defined]
_STATE_SQL = select(_T.c.version, _T.c.live).where(_T.c.namespace == bindparam("ns"))


def _bump_sql(dialect: str):
    """The bump upsert for ``dialect``, built once (bound parameters ``ns``,
    ``live0`` and ``delta``): it runs in every memory write's transaction."""
    stmt = _BUMPS.get(dialect)
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(_T).values(namespace=bindparam("ns"), version=1, live=bindparam("live0"))
        stmt = stmt.on_conflict_do_update(index_elements=[_T.c.namespace],
                                          set_={"version": _T.c.version + 1, "live": _T.c.live + bindparam("delta")})
        _BUMPS[dialect] = stmt
    return stmt


_BUMPS: dict = {}


def _bump(conn, ns: Namespace | str, live_delta: int = 0) -> None:
    """In the caller's transaction (a Connection or an ORM Session): version + 1
    and live + ``live_delta`` for ``ns``, creating its row (version 1) when
    missing. One upsert statement, atomic on SQLite and PostgreSQL alike."""
    dialect = conn.get_bind().dialect.name if hasattr(conn, "get_bind") else conn.dialect.name
    conn.execute(_bump_sql(dialect), {"ns": str(ns), "live0": max(live_delta, 0), "delta": live_delta})


class NamespaceVersions(StoreBase):
    """Reads of ``namespace_state`` (writes happen inside the other parts' transactions)."""

    def namespace_state(self, ns: Namespace) -> tuple[int, int]:
        """``(version, live)`` of ``ns``: its write version (0 when it was never
        written) and its number of live memories. One primary-key read; a
        namespace without a state row (never written since the table exists)
        is counted in ``memories`` instead."""
        with self.engine.connect() as conn:
            row = conn.execute(_STATE_SQL, {"ns": str(ns)}).first()
            if row is not None:
                return int(row.version), int(row.live)
            from sqlalchemy import func

            m = _MemoryRow.__table__  # type: ignore[attr-defined]
            n = conn.execute(select(func.count()).select_from(m).where(m.c.namespace == str(ns))).scalar()
        return 0, int(n or 0)
