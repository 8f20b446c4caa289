"""Per-namespace write versions, live counts and change logs (``namespace_state``).

Every write that changes what a search of a namespace reads — a memory added,
given a new text, origin or visibility, deleted, or moved to another
namespace — calls ``_bump`` inside its own transaction: the namespace's
``version`` grows by one and ``live`` by the change in live memories. Readers
(``memory.cache``) stamp what they hold with the version they read *before*
the rows, so a cache is never newer than its stamp, and a stamp that differs
from the stored version means a reload: every replica sees a change at its
next recall, whatever process made it.

The same row update logs which memories the new version changed (the row's
``changes``: ``;<version>:<id>,<id>`` appended, ``*`` when the write does not
name them, the text cut to its last ``CHANGES_CHARS`` characters): a cache
stamped with a version still in the log reloads only those memories' rows
(``changes_since``), a cost that grows with what changed instead of with the
namespace. One row written per write — the log shares the version's row, so
there is no log row to insert, nor one to prune later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import String, bindparam, case, cast, func, literal, or_, select, update

from memory.store.base import StoreBase
from memory.store.pending import NO_MARKS, PendingMarks
from memory.store.tables import _MemoryRow, _NamespaceStateRow
from memory.types import Namespace

_T = _NamespaceStateRow.__table__  # type: ignore[attr-defined]
_STATE_SQL = select(_T.c.version, _T.c.live).where(_T.c.namespace == bindparam("ns"))

CHANGES_CHARS = 1200
"""Characters of change log a namespace's row keeps (its latest entries): about
60 single-memory writes with 12-character ids, at least ``CHANGES_KEPT``. A
cache further behind reads the namespace's stamps instead."""
CHANGES_KEPT = 32
"""Write versions of one memory each that the log always still holds (ids of up
to 32 characters): a cache more writes behind than this may read the stamps."""
ALL = "*"
"""The id logged for a write version that changed memories it does not name."""


def _tail(dialect: str, text):
    """The last ``CHANGES_CHARS`` characters of ``text``, in SQL."""
    if dialect == "postgresql":
        return func.right(text, CHANGES_CHARS)
    return func.substr(text, -CHANGES_CHARS)


def _bump_sql(dialect: str, trace: bool = False):
    """The bump upsert for ``dialect``, built once (bound parameters ``ns``,
    ``live0``, ``delta`` and ``ids``, the version's logged ids joined by commas;
    returns the new version): it runs in every memory write's transaction.
    ``trace``: the variant that also sets the namespace's last recall (bound
    ``trace_at``, ``trace_reason``, ``trace``: ``memory.store.traces``), newer wins —
    the trace a capture carries in the row update it makes anyway."""
    stmt = _BUMPS.get((dialect, trace))
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        ids = bindparam("ids", type_=String)
        traced = ("trace_at", "trace_reason", "trace") if trace else ()
        # a namespace's first write: nothing linked, in conflict or dormant yet (counted from here, ``_count``)
        stmt = insert(_T).values(namespace=bindparam("ns"), version=1, live=bindparam("live0"), links=0, conflicts=0,
                                 dormant=0, changes=literal(";1:") + ids,
                                 **{c: bindparam(c, type_=_T.c[c].type) for c in traced})
        entry = literal(";") + cast(_T.c.version + 1, String) + literal(":") + ids
        set_ = {"version": _T.c.version + 1, "live": _T.c.live + bindparam("delta"),
                "changes": _tail(dialect, func.coalesce(_T.c.changes, "") + entry)}
        if trace:  # newer wins: the row's trace is replaced only by a trace of a later (or the same) message
            newer = or_(_T.c.trace_at.is_(None), _T.c.trace_at <= stmt.excluded.trace_at)
            set_.update({c: case((newer, stmt.excluded[c]), else_=_T.c[c]) for c in traced})
        stmt = stmt.on_conflict_do_update(index_elements=[_T.c.namespace], set_=set_)
        _BUMPS[(dialect, trace)] = stmt = stmt.returning(_T.c.version)
    return stmt


_BUMPS: dict = {}


def _bump(conn, ns: Namespace | str, live_delta: int = 0, changed: Sequence[str] | None = None) -> None:
    """In the caller's transaction (a Connection or an ORM Session): version + 1
    and live + ``live_delta`` for ``ns``, creating its row (version 1) when
    missing, and the new version's ``changed`` memory ids appended to its change
    log (None: ``ALL``, the write changed rows it does not name) — one upsert,
    atomic on SQLite and PostgreSQL alike."""
    dialect = conn.get_bind().dialect.name if hasattr(conn, "get_bind") else conn.dialect.name
    ids = (list(dict.fromkeys(changed)) if changed is not None else None) or [ALL]
    conn.execute(_bump_sql(dialect), {"ns": str(ns), "live0": max(live_delta, 0), "delta": live_delta,
                                      "ids": ",".join(ids)})


def _logged(changes: str | None) -> dict[int, list[str]]:
    """``{version: ids}`` of a ``changes`` text (an entry that lost its start to the
    cut is left out: it is before the first ``;``)."""
    if not changes:
        return {}
    out: dict[int, list[str]] = {}
    for p in changes.split(";")[1:]:  # before the first ";": nothing, or what is left of an entry cut
        version, sep, ids = p.partition(":")
        if sep and version.isdigit():
            out[int(version)] = ids.split(",")
    return out


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
    counters, or no row); ``marks``: the recall marks waiting in the row
    (``memory.store.pending``), which recall merges into what it reads after."""

    version: int
    live: int
    links: int | None = None
    conflicts: int | None = None
    dormant: int | None = None
    marks: PendingMarks = NO_MARKS

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
        """``namespace_state`` of ``ns`` with its counters and pending marks (``NamespaceStats``), in
        one primary-key read; a namespace without a row is counted in
        ``memories`` (counters unknown), as ``namespace_state`` does. Raises
        StoreError."""
        # once per recall: through the DBAPI cursor (``_read_rows``)
        m = self.mark
        rows = self._read_rows(f"SELECT version, live, links, conflicts, dormant, marks FROM namespace_state "
                               f"WHERE namespace = {m}", (str(ns),))
        if not rows:  # a person who never had a memory written: nothing to count, nearly always
            live = self._read_rows(f"SELECT count(*) FROM memories WHERE namespace = {m}", (str(ns),))
            return NamespaceStats(0, int(live[0][0]))
        version, live, links, conflicts, dormant, marks = rows[0]
        return NamespaceStats(int(version), int(live), links, conflicts, dormant, PendingMarks.parse(marks))

    def changes_since(self, ns: Namespace, version: int) -> tuple[int, set[str]] | None:
        """``(current write version, ids of the memories changed after version
        ``version``)`` of ``ns`` from its change log; None when the log cannot
        tell: a version it no longer holds (about ``CHANGES_CHARS`` characters
        of writes ago, at least ``CHANGES_KEPT`` writes, or before the log
        existed) or a write that did not name its memories (``ALL``). One
        primary-key read."""
        if version < 0:
            return None
        # each cache refresh: through the DBAPI cursor (``_read_rows``)
        rows = self._read_rows(f"SELECT version, changes FROM namespace_state WHERE namespace = {self.mark}",
                               (str(ns),))
        stamp = int(rows[0][0]) if rows else 0
        if stamp == version:
            return stamp, set()
        if stamp < version:
            return None
        logged = _logged(rows[0][1])
        wanted = range(version + 1, stamp + 1)
        if any(v not in logged for v in wanted):
            return None
        ids = {i for v in wanted for i in logged[v]}
        return None if ALL in ids else (stamp, ids)
