"""Per-namespace write versions and live counts (``namespace_state``).

Every write that changes what a search of a namespace reads — a memory added,
given a new text, origin or visibility, deleted, or moved to another
namespace — calls ``_bump`` inside its own transaction: the namespace's
``version`` grows by one and ``live`` by the change in live memories. Readers
(``memory.cache``) stamp what they hold with the version they read *before*
the rows, so a cache is never newer than its stamp, and a stamp that differs
from the stored version means a reload: every replica sees a change at its
next recall, whatever process made it.

The same transaction logs which memories the new version changed
(``namespace_changes``; ``*`` when the write does not name them), keeping the
last ``CHANGES_KEPT`` versions: a cache stamped with a version still in the
log reloads only those memories' rows (``changes_since``), a cost that grows
with what changed instead of with the namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, update

from memory.store.base import StoreBase
from memory.store.tables import _MemoryRow, _NamespaceChangeRow, _NamespaceStateRow
from memory.types import Namespace

_T = _NamespaceStateRow.__table__  # type: ignore[attr-defined]
_C = _NamespaceChangeRow.__table__  # type: ignore[attr-defined]
_STATE_SQL = select(_T.c.version, _T.c.live).where(_T.c.namespace == bindparam("ns"))
_SINCE_SQL = select(_C.c.version, _C.c.memory_id).where(_C.c.namespace == bindparam("ns"),
                                                          _C.c.version > bindparam("since"))

CHANGES_KEPT = 256
"""Write versions per namespace whose changed memories stay in the log: a cache
more than this many writes behind reads the namespace's stamps instead."""
PRUNE_EVERY = 16
"""``_bump`` drops the versions older than ``CHANGES_KEPT`` at every this many
writes of a namespace (the log holds up to ``CHANGES_KEPT + PRUNE_EVERY``)."""
ALL = "*"
"""The ``memory_id`` of a logged version that changed memories it does not name."""


def _bump_sql(dialect: str):
    """The bump upsert for ``dialect``, built once (bound parameters ``ns``,
    ``live0`` and ``delta``; returns the new version): it runs in every memory
    write's transaction."""
    stmt = _BUMPS.get(dialect)
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        # a namespace's first write: nothing linked, in conflict or dormant yet (counted from here, ``_count``)
        stmt = insert(_T).values(namespace=bindparam("ns"), version=1, live=bindparam("live0"), links=0, conflicts=0,
                                 dormant=0)
        stmt = stmt.on_conflict_do_update(index_elements=[_T.c.namespace],
                                          set_={"version": _T.c.version + 1, "live": _T.c.live + bindparam("delta")})
        _BUMPS[dialect] = stmt = stmt.returning(_T.c.version)
    return stmt


_BUMPS: dict = {}


def _bump(conn, ns: Namespace | str, live_delta: int = 0, changed: Sequence[str] | None = None) -> None:
    """In the caller's transaction (a Connection or an ORM Session): version + 1
    and live + ``live_delta`` for ``ns``, creating its row (version 1) when
    missing (one upsert, atomic on SQLite and PostgreSQL alike); then the new
    version's ``changed`` memory ids go into the change log (None: ``ALL``, the
    write changed rows it does not name) and versions older than
    ``CHANGES_KEPT`` leave it."""
    dialect = conn.get_bind().dialect.name if hasattr(conn, "get_bind") else conn.dialect.name
    version = int(conn.execute(_bump_sql(dialect), {"ns": str(ns), "live0": max(live_delta, 0),
                                                    "delta": live_delta}).scalar_one())
    ids = (list(dict.fromkeys(changed)) if changed is not None else None) or [ALL]
    conn.execute(_C.insert(), [{"namespace": str(ns), "version": version, "memory_id": i} for i in ids])
    if version % PRUNE_EVERY == 0:  # a range delete on the key, every few writes rather than each
        conn.execute(_C.delete().where(_C.c.namespace == str(ns), _C.c.version <= version - CHANGES_KEPT))


def _count(conn, ns: Namespace | str, *, links: int = 0, conflicts: int = 0, dormant: int = 0) -> None:
    """In the caller's transaction (a Connection or an ORM Session), which has just
    made ``links`` association links, ``conflicts`` conflict links or ``dormant``
    dormant marks in ``ns``: count them up in its ``namespace_state`` row. A row
    whose counters are NULL stays NULL (unknown: recall keeps reading); a
    namespace without a row gets none here (``namespace_stats`` then knows
    nothing, and recall reads). Counters never go down. ``links`` is written only
    while the counter is 0 (links are made on most turns; recall asks only
    whether there are any): it holds the first links' number, not a total."""
    if links > 0:
        conn.execute(update(_T).where(_T.c.namespace == str(ns), _T.c.links == 0).values(links=int(links)))
    if conflicts <= 0 and dormant <= 0:
        return
    conn.execute(update(_T).where(_T.c.namespace == str(ns)).values(
        conflicts=_T.c.conflicts + int(max(conflicts, 0)), dormant=_T.c.dormant + int(max(dormant, 0))))


def _recount(conn, ns: Namespace | str) -> None:
    """In the caller's transaction: set ``ns``'s counters to what its tables hold
    now (after rows moved into it from another namespace, ``move_namespace``).
    Rows must be flushed before (an ORM Session)."""
    from memory.store.tables import _ConflictRow, _ConsolidatedRow, _LinkRow

    links, conflicts, consolidated = (t.__table__ for t in (_LinkRow, _ConflictRow, _ConsolidatedRow))  # type: ignore[attr-defined]
    n = str(ns)
    conn.execute(update(_T).where(_T.c.namespace == n).values(
        links=select(func.count()).select_from(links).where(links.c.namespace == n).scalar_subquery(),
        conflicts=select(func.count()).select_from(conflicts).where(conflicts.c.namespace == n).scalar_subquery(),
        dormant=select(func.count()).select_from(consolidated).where(
            consolidated.c.namespace == n, consolidated.c.dormant_since.is_not(None)).scalar_subquery()))


@dataclass(frozen=True, slots=True)
class NamespaceStats:
    """What one read of a namespace's ``namespace_state`` row tells recall:
    ``version`` (its write version, 0 when never written), ``live`` (its live
    memories), and ``links`` / ``conflicts`` / ``dormant``: how many association
    links (0 when none was ever made, else at least 1: the first links made set
    it and later ones leave it), conflict links and dormant marks it was ever
    given (never counted down), None when unknown (a row written before the
    counters, or no row)."""

    version: int
    live: int
    links: int | None = None
    conflicts: int | None = None
    dormant: int | None = None

    def may_have(self, what: str) -> bool:
        """False only when ``what`` (``links``, ``conflicts`` or ``dormant``) is
        known to be none: the read it would need can be skipped."""
        n = getattr(self, what)
        return n is None or n > 0


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

    def namespace_stats(self, ns: Namespace) -> NamespaceStats:
        """``namespace_state`` of ``ns`` with its counters (``NamespaceStats``), in
        one primary-key read; a namespace without a row is counted in
        ``memories`` (counters unknown), as ``namespace_state`` does. Raises
        StoreError."""
        # once per recall: through the DBAPI cursor (``_read_rows``)
        rows = self._read_rows("SELECT version, live, links, conflicts, dormant FROM namespace_state "
                               f"WHERE namespace = {self.mark}", (str(ns),))
        if not rows:
            version, live = self.namespace_state(ns)
            return NamespaceStats(version, live)
        version, live, links, conflicts, dormant = rows[0]
        return NamespaceStats(int(version), int(live), links, conflicts, dormant)

    def changes_since(self, ns: Namespace, version: int) -> tuple[int, set[str]] | None:
        """``(current write version, ids of the memories changed after version
        ``version``)`` of ``ns`` from the change log — the ids of writes made
        after the version was read included (a reader may see rows newer than
        its stamp, never older); None when the log cannot tell: a version it no
        longer holds (more than ``CHANGES_KEPT`` writes ago, or before the log
        existed) or a write that did not name its memories (``ALL``). Two
        indexed reads on one connection."""
        if version < 0:
            return None
        with self.engine.connect() as conn:
            state = conn.execute(_STATE_SQL, {"ns": str(ns)}).first()
            stamp = int(state.version) if state is not None else 0
            if stamp == version:
                return stamp, set()
            rows = conn.execute(_SINCE_SQL, {"ns": str(ns), "since": version}).all()
        if stamp < version or len({r.version for r in rows if r.version <= stamp}) < stamp - version \
                or any(r.memory_id == ALL for r in rows):
            return None
        return stamp, {r.memory_id for r in rows}
