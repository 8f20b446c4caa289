"""Memories, their history and tombstones: the namespace-scoped heart of the store.

Every method takes the ``Namespace`` first and filters on it in SQL. A write
adds its ``index_outbox`` row in the same transaction (``memory.store.outbox``
drains them). A delete removes the live row and its history, records the
tombstones it is given and, when asked, redacts the chat-log lines the memory
was learned from (``memory.store.chatlog._redact_line``), all in one
transaction. Also here: recall's reads (``candidates``, ``get_many``, ``live_if_at_most``,
``search_rows`` and ``search_stamps`` for its namespace cache, ``touch``), the group-scoped listings (DESIGN rule 6), the ids of a namespace
for index repair (``iter_ids``) and the one tenant-wide read,
``admin_namespaces`` (``memory.admin`` only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import itemgetter
from types import SimpleNamespace

from sqlalchemy import and_, func, insert
from sqlmodel import Session, delete, select

from memory.errors import NamespaceError, NotFoundError, StoreError
from memory.store.audit import AuditEntry, AuditLog
from memory.store.base import DbapiStatement, StoreBase, raw_datetime, utcnow
from memory.store.chatlog import _redact_line
from memory.store.conflicts import _unlink
from memory.store.consolidated import _awake, _count_hits, _drop_consolidated
from memory.store.events import _E as _EVENTS
from memory.store.events import ADDED, CHANGED, FORGOTTEN, _emit, new_event_uid
from memory.store.links import Links, _unlink_links
from memory.links import DEFAULT_HALF_LIFE_DAYS
from memory.store.pending import FOLD_AT, NO_MARKS, PendingMarks, _moment
from memory.store.traces import trace_json, utc
from memory.store.versions import _bump, _bump_sql
from memory.store.tables import (ACCESS_TIMES_KEPT, _aware, _AuditRow, _HistoryRow, _IndexOpRow, _meta, _meta_json,
                                 _MemoryRow, _TombstoneRow, _to_memory)
from memory.types import Category, ChatRef, ForgetReceipt, Memory, Namespace, Visibility, search_text


def _origin_or_none(key: str) -> ChatRef | None:
    """The origin chat of a stored version; None when it was not kept or does not parse."""
    try:
        return ChatRef.parse(key) if key else None
    except NamespaceError:
        return None


def _visibility_or_private(value: str) -> Visibility:
    """A stored version's visibility; PRIVATE when it was not kept (fails closed in groups)."""
    try:
        return Visibility(value)
    except ValueError:
        return Visibility.PRIVATE


@dataclass(frozen=True, slots=True)
class MemoryText:
    """What a search needs of a live memory: id, namespace, text, visibility,
    origin (the chat key it was learned in, "" when none), when read for
    recall's cache the row's own ``version`` (``Memory.version``; 0 when not read),
    and the line it answered (``Memory.context``). Read by ``live_if_at_most``,
    it keeps its whole row (a plain tuple): ``memory()`` and ``candidate()``
    build from it without a query."""

    id: str
    namespace: Namespace
    text: str
    visibility: Visibility
    origin: str
    _row: tuple | None = field(default=None, repr=False, compare=False)
    version: int = field(default=0, compare=False)
    context: str = ""

    @property
    def searched(self) -> str:
        """``memory.types.search_text(text, context)``, as ``Memory.searched``."""
        return search_text(self.text, self.context)

    def memory(self) -> Memory:
        """The whole memory, built from the row this was read from (no query);
        ValueError when it was read without its row."""
        if self._row is None:
            raise ValueError("MemoryText without its row")
        return _tuple_memory(self._row, self.namespace)

    def candidate(self) -> Candidate:
        """What recall scores this memory by (``Candidate``), from the row this was
        read from (no query); ValueError when it was read without its row."""
        if self._row is None:
            raise ValueError("MemoryText without its row")
        return Candidate(self._row)


def _seconds(value) -> float:
    """A stored timestamp (SQLite's text, PostgreSQL's datetime; naive means UTC)
    as POSIX seconds: the float ``memory.scoring.score`` takes of the aware
    datetime ``Memory`` holds, computed the same way."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def _aware_at(value) -> datetime | None:
    """A stored timestamp as the aware datetime ``Memory`` holds (None stays None)."""
    return _aware(raw_datetime(value))


_CANDIDATE_COLUMNS = ("id", "text", "context", "category", "importance", "valence", "arousal", "created_at",
                      "updated_at", "event_time", "access_times", "visibility", "origin")
"""The columns a ``Candidate`` reads by position: its scoring columns and what
recall's channels and the disclosure rule look at. They lead ``_GET_COLUMNS``."""


class Candidate(tuple):
    """One recall candidate as read (``Store.candidates``): its whole row as the
    DBAPI cursor hands it back (``_GET_COLUMNS``), no ``Memory`` built. Recall
    scores every candidate from these values and builds the whole memory
    (``memory()``) only for the hits it returns: most candidates are dropped, and
    building a Memory (chat key, enums, times, metadata) cost more than reading
    its row. One read of whole rows, not scoring columns first and the hits'
    rows after: a second round trip cost more than the extra columns on both
    backends (issue 29.3), and the hits are the rows that were scored.

    ``id``, ``text``, ``context``, ``searched`` (``Memory.searched``),
    ``category`` (its value), ``importance`` in [0, 1], ``valence`` in [-1, 1],
    ``arousal`` in [0, 1], ``visibility`` (``Visibility``), ``origin`` (the chat
    key it was learned in, "" when none), ``created_at`` / ``event_time`` (aware
    UTC datetimes or None, as on ``Memory``) and ``times()``, the POSIX seconds
    ``memory.scoring.score_seconds`` takes."""

    __slots__ = ()

    id = property(itemgetter(0))
    text = property(itemgetter(1))
    category = property(itemgetter(3))
    importance = property(itemgetter(4))
    valence = property(itemgetter(5))
    arousal = property(itemgetter(6))

    @property
    def context(self) -> str:
        return self[2] or ""

    @property
    def searched(self) -> str:
        """``memory.types.search_text(text, context)``, as ``Memory.searched``."""
        return search_text(self[1], self[2] or "")

    @property
    def created_at(self) -> datetime | None:
        return _aware_at(self[7])

    @property
    def event_time(self) -> datetime | None:
        return _aware_at(self[9])

    @property
    def event_end(self) -> datetime | None:
        """``Memory.event_end``: where the period its event names ends (exclusive), None for a day."""
        return _aware_at(self[_AT["event_end"]])

    @property
    def visibility(self) -> Visibility:
        return Visibility(self[11])

    @property
    def origin(self) -> str:
        return self[12] or ""

    def memory(self, ns: Namespace) -> Memory:
        """The whole memory, ``ns`` being the namespace it was read in (no query)."""
        return _tuple_memory(self, ns)

    def times(self) -> tuple[float | None, list[float]]:
        """``(written, times)`` in POSIX seconds, as ``memory.scoring.score_seconds``
        takes them: the last write (``updated_at``, else ``created_at``; None
        when neither) and ``created_at``, ``updated_at`` and every kept access
        time, in that order (those stored)."""
        created, updated = self[7], self[8]
        times = [_seconds(t) for t in (created, updated) if t is not None]
        if self[10]:
            times += [_seconds(t) for t in json.loads(self[10])]
        written = updated if updated is not None else created
        return (None if written is None else _seconds(written)), times


_NOT_IN_MEMORY = frozenset({"norm", "tenant", "source_fp", "entities"})
"""Columns of ``memories`` that ``_to_memory`` does not read."""
_GET_COLUMNS = _CANDIDATE_COLUMNS + tuple(c.name for c in _MemoryRow.__table__.c  # type: ignore[attr-defined]
                                          if c.name not in _NOT_IN_MEMORY and c.name not in _CANDIDATE_COLUMNS)
"""The columns a Memory is built from (``_tuple_memory``), ``_CANDIDATE_COLUMNS``
first: a whole row is also a ``Candidate``."""
_DATE_COLUMNS = tuple(c for c in ("created_at", "updated_at", "valid_from", "valid_to", "event_time", "event_end")
                      if c in _GET_COLUMNS)
_AT = {c: i for i, c in enumerate(_GET_COLUMNS)}


class _Raced(Exception):
    """A namespace's state row changed between a marks write's read and its write
    (another process flushed or folded): the transaction is rolled back and retried."""


_RACES = 3
"""Tries of a marks write whose state row another process keeps changing."""


def _tuple_memory(r: tuple, ns: Namespace) -> Memory:
    """The Memory of a ``_GET_COLUMNS`` row read through the DBAPI cursor (SQLite
    hands back its timestamps as text, PostgreSQL as datetimes)."""
    row = SimpleNamespace(**dict(zip(_GET_COLUMNS, r)))
    for name in _DATE_COLUMNS:
        setattr(row, name, raw_datetime(getattr(row, name)))
    return _to_memory(row, ns)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _AddStatements:
    """``MemoryRows.add``'s writes for one dialect, compiled once (``DbapiStatement``):
    the memory, its outbox row, the namespace's version bump (``_bump``'s upsert),
    its change event (``_emit``'s row) and its audit record; ``bump_trace``: the
    bump that carries a held recall trace too (``memory.store.traces``)."""

    memory: DbapiStatement
    outbox: DbapiStatement
    bump: DbapiStatement
    event: DbapiStatement
    audit: DbapiStatement
    bump_trace: DbapiStatement


_ADD_STATEMENTS: dict[str, _AddStatements] = {}


def _add_statements(dialect) -> _AddStatements:
    """The ``_AddStatements`` of ``dialect`` (built on first use)."""
    got = _ADD_STATEMENTS.get(dialect.name)
    if got is None:
        memories = _MemoryRow.__table__  # type: ignore[attr-defined]
        got = _ADD_STATEMENTS[dialect.name] = _AddStatements(
            DbapiStatement(insert(memories), dialect, [c.name for c in memories.c]),
            DbapiStatement(insert(_IndexOpRow.__table__), dialect,  # type: ignore[attr-defined]
                           ["namespace", "memory_id", "op", "created_at", "attempts"]),
            DbapiStatement(_bump_sql(dialect.name), dialect),
            # an event not yet held by a sender (holder) nor given up (dead_at): both NULL
            DbapiStatement(insert(_EVENTS), dialect, ["uid", "tenant", "namespace", "memory_id", "event", "version",
                                                      "created_at", "due_at", "attempts", "last_error"]),
            DbapiStatement(insert(_AuditRow.__table__), dialect,  # type: ignore[attr-defined]
                           ["at", "actor", "action", "namespace", "memory_id", "detail"]),
            DbapiStatement(_bump_sql(dialect.name, trace=True), dialect))
    return got


class MemoryRows(StoreBase):
    """Memories, history and tombstones, one namespace per call (``admin_namespaces``
    aside, which lists the namespaces of a tenant)."""

    def add(self, ns: Namespace, memory: Memory, source_fp: str = "", audit: AuditEntry | None = None) -> Memory:
        """Insert ``memory`` into ``ns`` with an index upsert in the outbox.

        ``source_fp``: fingerprint of the text the memory was learned from (kept so
        that a forget can tombstone the evidence as well as the memory text);
        ``audit``: its audit record, written in the same transaction (one commit
        for both: the capture path's, once per stored fact).
        ``memory.namespace`` must equal ``ns`` (ValueError otherwise). Raises
        ``sqlalchemy.exc.IntegrityError`` when ``(ns, memory.key)`` already
        exists — the caller decides between dedupe and update.
        """
        if memory.namespace != ns:
            raise ValueError("memory.namespace differs from the namespace of the call")
        from memory.links import stored_entities
        from memory.text import normalise

        now = utcnow()
        created = memory.created_at or now
        values = dict(
            id=memory.id,
            namespace=str(ns),
            tenant=ns.tenant,
            text=memory.text,
            norm=normalise(memory.text),
            category=memory.category.value,
            key=memory.key,
            importance=memory.importance,
            valence=memory.valence,
            arousal=memory.arousal,
            emotion=memory.emotion,
            origin=memory.origin.key if memory.origin else "",
            visibility=memory.visibility.value,
            source_message_id=memory.source_message_id,
            created_at=created,
            updated_at=memory.updated_at or created,
            valid_from=memory.valid_from or created,
            event_time=memory.event_time,
            event_end=memory.event_end,
            version=memory.version,
            access_times=json.dumps([created.isoformat()]),
            source_fp=source_fp,
            entities=stored_entities(memory.text),
            context=memory.context,
            meta=_meta_json(memory.metadata),
        )
        # the add's statements compiled once and run on the transaction's DBAPI cursor
        # (``DbapiWriter``): this is the capture hot path, and SQLAlchemy's own work per
        # statement cost more than SQLite's (ORM rows cost more still); each writes a table
        # none of the others touches, so on PostgreSQL they go as one statement (``_write_chain``)
        sql = _add_statements(self.engine.dialect)
        tenants = self.event_tenants
        # the last recall this process holds for ``ns`` (a turn's, handed to its capture) rides in the
        # version bump's row update: no statement of its own (``memory.store.traces``)
        held = self.held_traces.get(ns)
        with self._write_chain() as cur:
            cur.run(sql.memory, values)
            cur.run(sql.outbox, dict(namespace=str(ns), memory_id=memory.id, op="upsert", created_at=now, attempts=0))
            bump = {"ns": str(ns), "live0": 1, "delta": 1, "ids": memory.id}
            if held is None:
                cur.run(sql.bump, bump)
            else:
                cur.run(sql.bump_trace, {**bump, "trace_at": utc(held.at), "trace_reason": held.fallback_reason,
                                         "trace": trace_json(held)})
            if ns.tenant in tenants:  # _emit's rows: the tenant subscribes to change events
                cur.run(sql.event, dict(uid=new_event_uid(), tenant=ns.tenant, namespace=str(ns), memory_id=memory.id,
                                        event=ADDED, version=int(memory.version), created_at=now, due_at=now,
                                        attempts=0, last_error=""))
            if audit is not None:
                cur.run(sql.audit, AuditLog._audit_values(ns, audit.action, audit.actor, memory.id, audit.detail))
        if held is not None:
            self.held_traces.written(held)
        return _to_memory(SimpleNamespace(**values))  # type: ignore[arg-type]

    def get(self, ns: Namespace, memory_id: str) -> Memory:
        """The live memory ``memory_id`` of ``ns`` (its access times with those still
        waiting in its namespace's row: ``memory.store.pending``); NotFoundError if
        it is not in ``ns``."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)).first()
        if row is None:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return pending.memory(_to_memory(row))

    def get_many(self, ns: Namespace, ids: Sequence[str]) -> dict[str, Memory]:
        """Live memories of ``ns`` among ``ids`` (ids of other namespaces are simply
        absent), their pending access times merged (``_marked_rows``)."""
        if not ids:
            return {}
        ids = list(dict.fromkeys(ids))
        return {r[0]: _tuple_memory(r, ns) for r in self._marked_rows(ns, self._by_ids_sql(len(ids)), (*ids, str(ns)))}

    def _marked_rows(self, ns: Namespace, sql: str, params: tuple, pending: PendingMarks | None = None) -> list[tuple]:
        """The ``_GET_COLUMNS`` rows of ``sql`` (``_read_rows``), of ``ns`` only, with
        the access times still waiting in ``ns``'s state row merged into them
        (``memory.store.pending``): ``pending`` when the caller read them (recall:
        ``NamespaceStats.marks``, read before the rows), else read here first, on
        the same connection (a fold between the two reads is merged twice,
        which changes nothing; never missed)."""
        if pending is None:
            state, rows = self._read_many([(f"SELECT marks FROM namespace_state WHERE namespace = {self.mark}",
                                            (str(ns),)), (sql, params)])
            pending = PendingMarks.parse(state[0][0]) if state else NO_MARKS
        else:
            rows = self._read_rows(sql, params)
        if not pending.times:
            return rows
        at = _AT["access_times"]
        return [pending.row(r, 0, at) for r in rows]

    def _by_ids_sql(self, n: int, namespaces: int | None = None) -> str:
        """The ``_GET_COLUMNS`` of ``n`` ids in one namespace (``namespaces=None``;
        parameters: the ids, then the namespace) or in any of ``namespaces``
        (the ids, then the namespaces)."""
        mark = self.mark
        # `namespace || ''`: still filtered on the namespace, but not through its index —
        # SQLite otherwise scans a large namespace for ~80 ids instead of looking each
        # up by primary key (5 ms vs 0.9 ms at 10k memories); only the columns a Memory
        # is built from (not norm, tenant, source_fp); the DBAPI cursor itself, whose
        # plain tuples skip SQLAlchemy's per-value result processing (recall's hot
        # path: ~60 candidates a turn, 2.4 → 1.3 ms p50 measured on a 3,000-memory namespace)
        where = f"= {mark}" if namespaces is None else f"IN ({', '.join([mark] * namespaces)})"
        return (f"SELECT {', '.join(_GET_COLUMNS)} FROM memories WHERE id IN ({', '.join([mark] * n)}) "
                f"AND namespace || '' {where}")

    def candidates(self, ns: Namespace, ids: Sequence[str], pending: PendingMarks | None = None) -> dict[str, Candidate]:
        """Recall's read of its candidates: ``{id: Candidate}`` of the live memories
        of ``ns`` among ``ids`` (ids of other namespaces, or forgotten meanwhile,
        are simply absent), in one query through the DBAPI cursor — ``get_many``'s
        rows, without building a Memory of each (``Candidate.memory()`` does, for
        the hits). Their access times include those still waiting in ``ns``'s
        state row (``_marked_rows``; ``pending``: recall's ``NamespaceStats.marks``,
        ``NO_MARKS`` where only texts are wanted). Raises StoreError."""
        if not ids:
            return {}
        ids = list(dict.fromkeys(ids))
        return {r[0]: Candidate(r) for r in self._marked_rows(ns, self._by_ids_sql(len(ids)), (*ids, str(ns)), pending)}

    def get_many_of(self, wanted: Mapping[Namespace, Sequence[str]]) -> dict[Namespace, dict[str, Memory]]:
        """``get_many`` of several namespaces in one query: ``{ns: {id: Memory}}``
        for each ``ns`` of ``wanted`` (an entry even when none of its ids is live),
        each id found only in the namespace it is asked for — an id asked for in
        ``ns`` that belongs to another namespace is absent, as in ``get_many``
        (the query is filtered on the namespaces asked for, and each row checked
        against its id's). For an index write pass over a capture batch's many
        people (``MemoryCore.maintain``)."""
        read = self._many_of_sql(wanted)
        return self._many_of_rows(wanted, self._read_rows(*read) if read is not None else [])

    def pending_ops_and_rows(self, limit: int, wanted: Mapping[Namespace, Sequence[str]], *,
                             kinds: Sequence[str] | None = None
                             ) -> tuple[list, dict[Namespace, dict[str, Memory]]]:
        """``pending_ops(limit, memory_ids=…, kinds=kinds)`` of the ids of ``wanted``
        and ``get_many_of(wanted)``, read in that order in one call (``_read_many``:
        one round trip on PostgreSQL) — an index write pass that knows its ids
        before it reads their ops (the capture's). The rows are never older than
        the ops. Raises StoreError."""
        ids = sorted({i for v in wanted.values() for i in v})
        ops_read = self._pending_ops_sql(limit, memory_ids=ids, kinds=kinds)
        rows_read = self._many_of_sql(wanted)
        reads = [r for r in (ops_read, rows_read) if r is not None]
        got = self._read_many(reads) if reads else []
        ops = self._pending_ops_rows(got.pop(0)) if ops_read is not None else []
        return ops, self._many_of_rows(wanted, got.pop(0) if rows_read is not None else [])

    def _many_of_sql(self, wanted: Mapping[Namespace, Sequence[str]]) -> tuple[str, tuple] | None:
        """``get_many_of``'s read (None when nothing is asked)."""
        asked = {(i, str(ns)) for ns, ids in wanted.items() for i in ids}
        if not asked:
            return None
        ids, names = sorted({i for i, _ in asked}), [str(ns) for ns in wanted]
        # each row with its own namespace's pending marks (``memory.store.pending``) in the same statement:
        # a capture batch's few rows, one round trip
        sql = self._by_ids_sql(len(ids), len(names)).replace(
            " FROM memories ", ", (SELECT s.marks FROM namespace_state s WHERE s.namespace = memories.namespace) "
                               "FROM memories ", 1)
        return sql, (*ids, *names)

    def _many_of_rows(self, wanted: Mapping[Namespace, Sequence[str]],
                      rows: list[tuple]) -> dict[Namespace, dict[str, Memory]]:
        """``get_many_of``'s answer from its read's rows (``_many_of_sql``: each row's
        namespace's pending marks its last column, merged here)."""
        asked = {(i, str(ns)) for ns, ids in wanted.items() for i in ids}
        out: dict[Namespace, dict[str, Memory]] = {ns: {} for ns in wanted}
        by_name = {str(ns): ns for ns in wanted}
        at = _AT["access_times"]
        for *r, marks in rows:
            r = PendingMarks.parse(marks).row(tuple(r), 0, at)
            row = SimpleNamespace(**dict(zip(_GET_COLUMNS, r)))
            if (row.id, row.namespace) not in asked:
                continue
            for name in _DATE_COLUMNS:
                setattr(row, name, raw_datetime(getattr(row, name)))
            ns = by_name[row.namespace]
            out[ns][row.id] = _to_memory(row, ns)  # type: ignore[arg-type]
        return out

    def live_if_at_most(self, ns: Namespace, n: int, pending: PendingMarks | None = None) -> list[MemoryText] | None:
        """Every live memory of ``ns`` when it holds at most ``n``, else None (one
        query of at most ``n + 1`` rows), as ``MemoryText``: what a search reads,
        its candidate values and whole memory built on demand from the row kept
        (``MemoryText.candidate()``, ``MemoryText.memory()``): the exact recall of
        small namespaces scores its candidates and builds only its hits. Access
        times include those waiting in ``ns``'s state row (``_marked_rows``;
        ``pending`` as ``candidates`` takes it). Raises StoreError."""
        # the DBAPI cursor: up to EXACT_MAX rows, whose per-value processing by
        # SQLAlchemy cost more than the query; the row is kept as read
        mark = self.mark
        rows = self._marked_rows(ns, f"SELECT {', '.join(_GET_COLUMNS)} FROM memories WHERE namespace = {mark} "
                                     f"LIMIT {mark}", (str(ns), int(n) + 1), pending)
        if len(rows) > n:
            return None
        i, text, vis, origin, context = (_AT[c] for c in ("id", "text", "visibility", "origin", "context"))
        return [MemoryText(r[i], ns, r[text], Visibility(r[vis]), r[origin] or "", r, context=r[context] or "")
                for r in rows]

    def search_rows(self, ns: Namespace, ids: Sequence[str] | None = None) -> tuple[int, list[MemoryText]]:
        """``(write version, every live memory of ns)`` for recall's cache — or only
        those among ``ids`` when given (the rows a cached view lacks): the version
        (``Store.namespace_state``; 0 when never written) is read first and the rows
        after it, on one connection, so the rows are never older than the version
        they are stamped with. Only the columns a search reads (id, text,
        visibility, origin, context) and the row's version; ``MemoryText.memory()`` is not
        available on them."""
        m = self.mark
        reads = [(f"SELECT version FROM namespace_state WHERE namespace = {m}", (str(ns),))]
        columns = "SELECT id, text, visibility, origin, version, context FROM memories"
        if ids is None:
            reads.append((f"{columns} WHERE namespace = {m}", (str(ns),)))
        elif ids:  # by primary key, still filtered on the namespace (`|| ''`: see get_many)
            ids = list(ids)
            reads.append((f"{columns} WHERE id IN ({', '.join([m] * len(ids))}) AND namespace || '' = {m}",
                          (*ids, str(ns))))
        # the version first, the rows after, on one connection (``_read_many``; the cursor's plain tuples)
        state, *rows = self._read_many(reads)
        return (int(state[0][0]) if state else 0,
                [MemoryText(i, ns, text, Visibility(vis), origin, None, version, context or "")
                 for i, text, vis, origin, version, context in (rows[0] if rows else [])])

    def search_stamps(self, ns: Namespace) -> tuple[int, list[tuple[str, int, str, str]]]:
        """``(write version, [(id, row version, visibility, origin)] of every live
        memory of ns)``: what tells recall's cache which rows of a namespace it
        already holds (a row's version grows with every new text; a visibility or
        origin change shows in those columns). The version is read first, the rows
        after it, on one connection (as ``search_rows``). Plain tuples, no texts:
        about a tenth of ``search_rows``' cost at 10k memories."""
        # the DBAPI cursor itself: its rows are plain tuples already, and wrapping
        # 10k of them in SQLAlchemy rows cost more than the query
        m = self.mark
        state, rows = self._read_many([(f"SELECT version FROM namespace_state WHERE namespace = {m}", (str(ns),)),
                                       (f"SELECT id, version, visibility, origin FROM memories WHERE namespace = {m}",
                                        (str(ns),))])
        return (int(state[0][0]) if state else 0, [tuple(r) for r in rows])

    def find_by_key(self, ns: Namespace, key: str) -> Memory | None:
        """The live memory of ``ns`` with canonical ``key``, or None."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.key == key)).first()
        return pending.memory(_to_memory(row)) if row else None

    def key_and_tombstone(self, ns: Namespace, key: str, fingerprints: Sequence[str]) -> tuple[Memory | None, datetime | None]:
        """What an add in ``ns`` checks first, read in one session: the live memory
        with canonical ``key`` (or None; its access times with those waiting in
        ``ns``'s state row) and the latest forget of any of ``fingerprints`` (None
        when none was forgotten)."""
        prints = sorted(set(fingerprints))
        # the DBAPI cursor on one connection (``_read_many``): on the capture hot path,
        # SQLAlchemy's statement and result handling cost more than the queries
        m = self.mark
        # the live row with its namespace's pending marks (``memory.store.pending``) in the same statement
        reads = [(f"SELECT {', '.join(_GET_COLUMNS)}, (SELECT s.marks FROM namespace_state s "
                  f"WHERE s.namespace = memories.namespace) FROM memories WHERE namespace = {m} AND key = {m} LIMIT 1",
                  (str(ns), key))]
        if prints:
            reads.append((f"SELECT max(forgotten_at) FROM tombstones WHERE namespace = {m} "
                          f"AND fingerprint IN ({', '.join([m] * len(prints))})", (str(ns), *prints)))
        rows, *tomb = self._read_many(reads)
        when = _aware(raw_datetime(tomb[0][0][0])) if tomb and tomb[0] else None
        if not rows:
            return None, when
        *row, marks = rows[0]
        return _tuple_memory(PendingMarks.parse(marks).row(tuple(row), 0, _AT["access_times"]), ns), when

    def recent_claims(self, ns: Namespace, limit: int) -> list[tuple[str, str | None, datetime | None, str]]:
        """The ``limit`` newest live memories of ``ns`` (``list``'s order) as
        ``(id, key, created_at, text)``: what capture's contradiction check reads
        of each, through the DBAPI cursor without building ``Memory`` objects or
        SQLAlchemy's per-value processing (the capture hot path, once per fact:
        ``list`` of 100 cost ~8 ms, a SQLAlchemy Core read of the four columns
        ~3 ms). Raises StoreError."""
        mark = self.mark
        rows = self._read_rows(f"SELECT id, key, created_at, text FROM memories WHERE namespace = {mark} "
                               f"ORDER BY updated_at DESC, id LIMIT {mark}", (str(ns), int(limit)))
        return [(i, key, _aware(raw_datetime(at)), text) for i, key, at, text in rows]

    def list(self, ns: Namespace, limit: int = 50, offset: int = 0, *, include_dormant: bool = True) -> list[Memory]:
        """Live memories of ``ns``, newest first; without dormant consolidated ones
        when ``include_dormant`` is False (left out in SQL, so pages stay exact).
        Access times include those waiting in ``ns``'s state row."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            rows = s.exec(
                select(_MemoryRow)
                .where(*self._wanted(ns, include_dormant))
                .order_by(_MemoryRow.updated_at.desc(), _MemoryRow.id)  # type: ignore[attr-defined]
                .offset(offset)
                .limit(limit)
            ).all()
        return pending.memories(_to_memory(r) for r in rows)

    def count(self, ns: Namespace, *, include_dormant: bool = True) -> int:
        """Number of live memories in ``ns`` (what ``list`` with the same ``include_dormant`` can return)."""

        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_MemoryRow)
                              .where(*self._wanted(ns, include_dormant))).one())

    @staticmethod
    def _wanted(ns: Namespace, include_dormant: bool) -> tuple:
        """SQL filter: the live memories of ``ns``, dormant consolidated ones only with ``include_dormant``."""
        own = (_MemoryRow.namespace == str(ns),)
        return own if include_dormant else (*own, _awake(ns, _MemoryRow.id))

    def first_said(self, ns: Namespace, group_key: str | None = None) -> datetime | None:
        """When the earliest live memory of ``ns`` was said (``created_at``, UTC);
        with ``group_key`` only of those learned in that group and visible there.
        None for an empty namespace."""

        where = self._in_group(ns, group_key) if group_key is not None else self._wanted(ns, True)
        with self._read() as s:
            first = s.exec(select(func.min(_MemoryRow.created_at)).where(*where)).one()
        if isinstance(first, str):  # SQLite's func.min returns the stored text
            first = datetime.fromisoformat(first)
        return first if first is None or first.tzinfo else first.replace(tzinfo=timezone.utc)

    def said_between(self, ns: Namespace, start: datetime, end: datetime, limit: int,
                     group_key: str | None = None) -> list[str]:
        """Ids of the live memories of ``ns`` said (``created_at``) or whose event
        falls (``event_time``; a period's, ``[event_time, event_end)``, overlaps) in
        ``[start, end)`` (UTC), earliest first, at most ``limit``; with
        ``group_key`` only those learned in that group and visible there."""
        from sqlalchemy import or_

        where = self._in_group(ns, group_key) if group_key is not None else self._wanted(ns, True)
        row = _MemoryRow
        event = and_(row.event_time < end,  # type: ignore[operator]
                     or_(and_(row.event_end.is_(None), row.event_time >= start),  # type: ignore[union-attr,operator]
                         row.event_end > start))  # type: ignore[operator]
        within = or_(and_(row.created_at >= start, row.created_at < end), event)  # type: ignore[operator]
        with self._read() as s:
            return list(s.exec(select(_MemoryRow.id).where(*where, within)
                               .order_by(_MemoryRow.created_at, _MemoryRow.id).limit(limit)).all())

    def live_total(self) -> int:
        """Live memories over all namespaces: a number only, for the index's health
        check at start-up (``MemoryCore``: an index with fewer rows is rebuilt)."""

        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_MemoryRow)).one())

    def supersede(self, ns: Namespace, memory_id: str, new: Memory, at: datetime | None = None,
                  source_fp: str = "", key: str | None = None) -> Memory:
        """Latest-wins update: the current version goes to history with its validity
        closed at ``at``; the live row keeps its id at version + 1 with ``new``'s text,
        category, emotion and importance. ``key`` (the edit path) also moves the row
        to another canonical key — IntegrityError if another memory of ``ns`` holds
        it. The memory's conflict and association links are deleted in the same
        transaction (they were about the old text). NotFoundError if the memory is not in ``ns``."""
        at = at or utcnow()
        from memory.links import stored_entities
        from memory.text import normalise

        norm, named = normalise(new.text), stored_entities(new.text)  # tagged before the write lock is taken
        with self._write() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)
                         .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in {ns}")
            s.add(_HistoryRow(memory_id=row.id, namespace=row.namespace, version=row.version, text=row.text,
                              category=row.category, key=row.key, origin=row.origin,
                              visibility=row.visibility, source_message_id=row.source_message_id,
                              source_fp=row.source_fp, valid_from=row.valid_from, valid_to=at))
            row.text = new.text
            row.norm, row.entities = norm, named
            row.category = new.category.value
            if key is not None:
                row.key = key
            row.importance = new.importance
            row.valence, row.arousal, row.emotion = new.valence, new.arousal, new.emotion
            if new.source_message_id:  # new evidence: the text now discloses as where it was said
                row.source_message_id = new.source_message_id
                if new.origin is not None:
                    row.origin = new.origin.key
                    row.visibility = new.visibility.value
            if new.source_message_id or new.context:  # said anew: searched with the line it answered then
                row.context = new.context
            row.source_fp = source_fp or row.source_fp
            if new.event_time:  # a new date brings its own period (or none: a day)
                row.event_time, row.event_end = new.event_time, new.event_end
            if new.metadata:  # the new version's tags join the memory's (metadata is kept across versions)
                row.meta = _meta_json({**_meta(row.meta), **new.metadata})
            row.version += 1
            row.updated_at = at
            row.valid_from = at
            s.add(row)
            s.add(_IndexOpRow(namespace=str(ns), memory_id=row.id, op="upsert", created_at=at))
            _bump(s, ns, 0, [row.id])
            _emit(s, self.event_tenants, ns, CHANGED, [(row.id, row.version)])
            _unlink(s, ns, [row.id])  # the disagreement was with the old text (the core re-judges the new one)
            _unlink_links(s, ns, [row.id])  # so were its associations; the new text earns its own
        return _to_memory(row)

    def contexts(self, ns: Namespace) -> dict[str, str]:
        """``{memory id: context}`` of the live memories of ``ns`` that have one
        (``Memory.context``)."""
        t = _MemoryRow.__table__  # type: ignore[attr-defined]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.id, t.c.context).where(t.c.namespace == str(ns), t.c.context != "")).all()
        return {r.id: r.context for r in rows}

    def set_contexts(self, ns: Namespace, contexts: Mapping[str, str]) -> int:
        """Give live memories of ``ns`` a new context (``{memory id: context}``; "" drops
        it): what is searched changes, so each row's version grows by one (recall's
        caches see the change) and the index re-reads it (outbox upsert). No history
        row: the text, which history keeps, did not change. Ids not in ``ns`` are
        skipped; returns how many rows changed."""
        if not contexts:
            return 0
        now = utcnow()
        changed: list[str] = []
        with self._write() as s:
            rows = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns),
                                                   _MemoryRow.id.in_(list(contexts)))  # type: ignore[attr-defined]
                          .with_for_update()).all()
            for row in rows:
                if row.context == contexts[row.id]:
                    continue
                row.context = contexts[row.id]
                row.version += 1
                s.add(row)
                s.add(_IndexOpRow(namespace=str(ns), memory_id=row.id, op="upsert", created_at=now))
                changed.append(row.id)
            if changed:
                _bump(s, ns, 0, changed)
                _emit(s, self.event_tenants, ns, CHANGED, [(r.id, r.version) for r in rows if r.id in changed], now)
        return len(changed)

    def find_by_source(self, ns: Namespace, chat: ChatRef | None, message_id: str) -> list[Memory]:
        """Live memories of ``ns`` learned from message ``message_id`` of ``chat``
        (the edit path), oldest first; access times include those waiting in
        ``ns``'s state row."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            rows = s.exec(select(_MemoryRow).where(
                _MemoryRow.namespace == str(ns), _MemoryRow.source_message_id == message_id,
                _MemoryRow.origin == (chat.key if chat else "")).order_by(_MemoryRow.created_at, _MemoryRow.id)).all()  # type: ignore[arg-type]
        return pending.memories(_to_memory(r) for r in rows)

    def fingerprints(self, ns: Namespace, memory_id: str) -> set[str]:
        """Evidence fingerprints (``source_fp``) of every version of ``memory_id`` in
        ``ns`` (empty strings left out); NotFoundError if it is unknown in ``ns``."""
        with self._read() as s:
            live = s.exec(select(_MemoryRow.source_fp).where(_MemoryRow.namespace == str(ns),
                                                             _MemoryRow.id == memory_id)).all()
            hist = s.exec(select(_HistoryRow.source_fp).where(_HistoryRow.namespace == str(ns),
                                                              _HistoryRow.memory_id == memory_id)).all()
        if not live and not hist:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return {fp for fp in [*live, *hist] if fp}

    def history(self, ns: Namespace, memory_id: str) -> list[Memory]:
        """All versions of ``memory_id`` in ``ns``, oldest first, the live one last
        (``valid_to`` None). Each version carries its own ``origin`` and
        ``visibility`` (the chat that text was said in), so a chat can apply the
        disclosure rule per version (``memory.explain.visible_in``); a version
        stored without them reads as origin None / PRIVATE (fails closed in
        groups). The live version's access times include those waiting in
        ``ns``'s state row. NotFoundError when neither live nor historic rows exist."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            hist = s.exec(
                select(_HistoryRow)
                .where(_HistoryRow.namespace == str(ns), _HistoryRow.memory_id == memory_id)
                .order_by(_HistoryRow.version)  # type: ignore[arg-type]
            ).all()
            live = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)).first()
        out = [
            Memory(id=h.memory_id, namespace=ns, text=h.text, category=Category(h.category), key=h.key,
                   version=h.version, origin=_origin_or_none(h.origin),
                   visibility=_visibility_or_private(h.visibility), source_message_id=h.source_message_id,
                   valid_from=_aware(h.valid_from),
                   valid_to=_aware(h.valid_to))
            for h in hist
        ]
        if live is not None:
            out.append(pending.memory(_to_memory(live)))
        if not out:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return out

    def delete(self, ns: Namespace, memory_id: str, tombstones: Sequence[str] = (), *,
               redact_sources: bool = False, purge: bool = False) -> ForgetReceipt:
        """Remove the live memory, its history, its conflict and association links
        and its consolidated row (``memory.store.consolidated``) from ``ns`` and
        queue its index delete, in one transaction. ``tombstones`` (fingerprints) are recorded (or
        moved forward to now) in the same transaction. ``redact_sources`` also
        deletes the speaker's chat-log lines the memory was learned from (every
        version's source message in its origin chat); ``purge`` queues an index purge
        (compaction that drops the deleted row from LanceDB's files). Returns what
        the transaction deleted and queued (``ForgetReceipt``: memories, versions,
        index_rows queued, chat_lines, links, conflicts, events, receivers,
        tombstones; from the statements' rowcounts). NotFoundError if it is not in ``ns``."""
        now = utcnow()
        with self._write() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)
                         .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in {ns}")
            hist = s.exec(select(_HistoryRow).where(_HistoryRow.namespace == str(ns),
                                                    _HistoryRow.memory_id == memory_id)).all()
            sources = {(h.origin, h.source_message_id) for h in hist} | {(row.origin, row.source_message_id)}
            s.delete(row)
            versions = s.exec(delete(_HistoryRow).where(_HistoryRow.namespace == str(ns),  # type: ignore[call-overload]
                                                        _HistoryRow.memory_id == memory_id)).rowcount
            conflicts = _unlink(s, ns, [memory_id])
            links = _unlink_links(s, ns, [memory_id], forgotten=True)
            _drop_consolidated(s, ns, [memory_id])
            prints = list(dict.fromkeys(tombstones))
            for fp in prints:
                self._put_tombstone(s, ns, fp, now)
            lines = sum(_redact_line(s, ns, origin, message_id) for origin, message_id in sources) \
                if redact_sources else 0
            s.add(_IndexOpRow(namespace=str(ns), memory_id=memory_id, op="delete", created_at=now))
            _bump(s, ns, -1, [memory_id])
            events = _emit(s, self.event_tenants, ns, FORGOTTEN, [(memory_id, 0)], now)
            if purge:
                s.add(_IndexOpRow(namespace=str(ns), memory_id=memory_id, op="purge", created_at=now))
        return ForgetReceipt(memories=1, versions=int(versions or 0), index_rows=1, chat_lines=lines, links=links,
                             conflicts=conflicts, events=events, receivers=int(ns.tenant in self.event_tenants),
                             tombstones=len(prints))

    @staticmethod
    def _put_tombstone(s: Session, ns: Namespace, fingerprint: str, at: datetime) -> None:
        """In session ``s``: record ``fingerprint`` as forgotten in ``ns`` at ``at``,
        or move an existing tombstone forward to ``at``."""
        row = s.exec(select(_TombstoneRow).where(_TombstoneRow.namespace == str(ns),
                                                 _TombstoneRow.fingerprint == fingerprint)).first()
        if row is None:
            s.add(_TombstoneRow(namespace=str(ns), fingerprint=fingerprint, forgotten_at=at))
        elif _aware(row.forgotten_at) < at:  # a second forget moves the line forward
            row.forgotten_at = at
            s.add(row)

    def retract(self, ns: Namespace, memory_id: str) -> ForgetReceipt:
        """Remove a memory whose evidence was withdrawn (its message was edited and no
        longer says it): live row and history go, no tombstone (the person did not
        ask to forget; saying it again is simply new evidence). Returns what went
        (``delete``'s receipt). NotFoundError if it is not in ``ns``."""
        return self.delete(ns, memory_id)

    def add_tombstone(self, ns: Namespace, fingerprint: str) -> None:
        """Record a tombstone fingerprint in ``ns`` (a repeated one moves forward to now)."""
        with self._write() as s:
            self._put_tombstone(s, ns, fingerprint, utcnow())

    def touch(self, ns: Namespace, ids: Sequence[str], at: datetime | None = None) -> None:
        """Record that these memories of ``ns`` were recalled into a prompt at ``at``
        (keeps the last ACCESS_TIMES_KEPT times for ACT-R activation); a
        consolidated one among them counts a hit and wakes up if it was dormant
        (``memory.store.consolidated``), in the same transaction."""
        at = at or utcnow()
        self.touch_times(ns, {i: (at,) for i in ids})

    def touch_times(self, ns: Namespace, times: Mapping[str, Sequence[datetime]]) -> int:
        """``touch`` for several recalls at once: ``times`` maps a memory id of ``ns``
        to the (aware) times it went into a prompt. In one transaction: each live
        one gets its times appended (in time order; the last ACCESS_TIMES_KEPT kept),
        one row update each; a consolidated one counts one hit per time, its
        ``last_hit_at`` the latest. An id that is not a live memory of ``ns`` —
        another namespace's, or forgotten meanwhile — is skipped: an update never
        creates a row, so nothing forgotten comes back. Returns the rows updated."""
        wanted = {i: sorted(ts) for i, ts in times.items() if i and ts}
        if not wanted:
            return 0
        m, ids = self.mark, list(wanted)
        # every flush of recall's marks: statements as the driver takes them, and a consolidated memory
        # (the only kind that counts hits) told apart in the same read, so most flushes make no hit update
        with self._write_conn() as conn:
            rows = conn.exec_driver_sql(
                f"SELECT id, access_times, EXISTS (SELECT 1 FROM consolidated c WHERE c.namespace = memories.namespace "
                f"AND c.memory_id = memories.id) FROM memories WHERE namespace = {m} "
                f"AND id IN ({', '.join([m] * len(ids))})", (str(ns), *ids)).all()
            if not rows:
                return 0
            updates = []
            for i, had, _ in rows:
                kept = json.loads(had or "[]") + [x.isoformat() for x in wanted[i]]
                updates.append((json.dumps(kept[-ACCESS_TIMES_KEPT:]), str(ns), i))
            conn.exec_driver_sql(f"UPDATE memories SET access_times = {m} WHERE namespace = {m} AND id = {m}", updates)
            by_count: dict[tuple[int, datetime], list[str]] = {}
            for i, _, consolidated in rows:
                if consolidated:
                    by_count.setdefault((len(wanted[i]), wanted[i][-1]), []).append(i)
            for (n, last), hit in by_count.items():
                _count_hits(conn, ns, hit, last, n)
        return len(rows)

    # -- recall marks waiting in the namespace's state row (memory.store.pending) ---------------
    # (tried up to ``_RACES`` times when another process wrote the row meanwhile: ``_Raced``)

    def pending_marks(self, ns: Namespace) -> PendingMarks:
        """The marks waiting in ``ns``'s row (``NO_MARKS`` when none). One
        primary-key read; raises StoreError."""
        rows = self._read_rows(f"SELECT marks FROM namespace_state WHERE namespace = {self.mark}", (str(ns),))
        return PendingMarks.parse(rows[0][0]) if rows else NO_MARKS

    def pending_namespaces(self) -> list[Namespace]:
        """Every namespace whose row holds marks not folded yet."""
        rows = self._read_rows("SELECT namespace FROM namespace_state WHERE marks IS NOT NULL", ())
        return [Namespace.parse(r[0]) for r in rows]

    def pend_marks(self, ns: Namespace, times: Mapping[str, Sequence[datetime]],
                   pairs: Mapping[tuple[str, str], tuple[float, datetime] | tuple[float, datetime, int]], *,
                   half_life_days: float = DEFAULT_HALF_LIFE_DAYS, fold_at: int = FOLD_AT) -> int:
        """One flush's marks of ``ns``, in one transaction: ``times`` (memory id →
        the aware times it went into a prompt) and ``pairs`` (``(a, b)`` → (weight
        its co-uses added, > 0; the last, aware[; how many co-uses, 1 when left
        out])). Only ids that are live memories
        of ``ns`` are kept (another namespace's, or forgotten meanwhile, are
        dropped); a consolidated one counts its hits now (it may wake up), as
        ``touch_times`` does. The rest is merged into ``ns``'s row — one row
        written — and folded into the memories and links rows when the row then
        holds more than ``fold_at`` memories and pairs (``fold_marks``: a pair
        not linked yet is linked only from ``NEW_LINK_USES`` co-uses on). A
        namespace without a state row is written at once (``touch_times``,
        ``strengthen_pairs``). Returns the live memories marked. Raises
        StoreError (ValueError for a non-positive amount or half-life)."""
        if half_life_days <= 0 or any(v[0] <= 0 for v in pairs.values()):
            raise ValueError("amount and half_life_days must be > 0")
        wanted = {i: sorted(ts) for i, ts in times.items() if i and ts}
        ids = sorted(set(wanted) | {i for p in pairs for i in p if i})
        if not ids:
            return 0
        for _ in range(_RACES):
            try:
                return self._pend(ns, wanted, ids, pairs, half_life_days, fold_at)
            except _Raced:
                continue
        raise StoreError(f"recall marks of {ns}: its state row changed under {_RACES} flushes")

    def _pend(self, ns: Namespace, wanted: dict[str, list[datetime]], ids: list[str],
              pairs: Mapping[tuple[str, str], tuple], half_life_days: float, fold_at: int) -> int:
        """``pend_marks``' transaction; raises ``_Raced`` (rolled back) when another
        process wrote the row between its read and its write."""
        m = self.mark
        # no row lock taken first: the row is written last (after any memories and links rows), in the
        # order a forget writes them, and only if it still holds what was read (else retried)
        with self._write_conn() as conn:
            state = conn.exec_driver_sql(f"SELECT marks FROM namespace_state WHERE namespace = {m}",
                                         (str(ns),)).first()
            if state is None:
                written = None
            else:
                live = {i: bool(c) for i, c in conn.exec_driver_sql(
                    f"SELECT id, EXISTS (SELECT 1 FROM consolidated c WHERE c.namespace = memories.namespace "
                    f"AND c.memory_id = memories.id) FROM memories WHERE namespace = {m} "
                    f"AND id IN ({', '.join([m] * len(ids))})", (str(ns), *ids)).all()}
                mine_times = {i: ts for i, ts in wanted.items() if i in live}
                mine_pairs = {(a, b) if a < b else (b, a): v for (a, b), v in pairs.items()
                              if a in live and b in live and a != b}
                by_count: dict[tuple[int, datetime], list[str]] = {}
                for i, ts in mine_times.items():
                    if live[i]:
                        by_count.setdefault((len(ts), ts[-1]), []).append(i)
                for (n, last), hit in by_count.items():
                    _count_hits(conn, ns, hit, last, n)
                pending = PendingMarks.parse(state[0]).added(mine_times, mine_pairs)
                if len(pending) > fold_at:
                    self._fold(conn, ns, pending, half_life_days, state[0])
                elif mine_times or mine_pairs:
                    # recall reads links only where the counter says some were made: pending pairs count
                    if not conn.exec_driver_sql(
                            f"UPDATE namespace_state SET marks = {m}, links = CASE WHEN links = 0 THEN {m} ELSE links "
                            f"END WHERE namespace = {m} AND COALESCE(marks, '') = {m}",
                            (pending.dump(), len(pending.pairs), str(ns), state[0] or "")).rowcount:
                        raise _Raced
                written = len(mine_times)
        if written is None:  # no state row (a namespace written before the table): at once, as before
            written = self.touch_times(ns, wanted)
            if pairs:
                self.strengthen_pairs(ns, pairs, reason="recalled", half_life_days=half_life_days)  # type: ignore[attr-defined]
        return written

    def fold_marks(self, ns: Namespace, *, half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> int:
        """Write the marks waiting in ``ns``'s row into its memories and links rows
        now and clear the row, in one transaction; returns the memories and
        pairs folded (0 when none waited). Raises StoreError."""
        for _ in range(_RACES):
            try:
                with self._write_conn() as conn:
                    state = conn.exec_driver_sql(f"SELECT marks FROM namespace_state WHERE namespace = {self.mark}",
                                                 (str(ns),)).first()
                    pending = PendingMarks.parse(state[0] if state else None)
                    if not len(pending):
                        return 0
                    self._fold(conn, ns, pending, half_life_days, state[0])  # type: ignore[index]
                return len(pending)
            except _Raced:
                continue
        raise StoreError(f"recall marks of {ns}: its state row changed under {_RACES} folds")

    def _fold(self, conn, ns: Namespace, pending: PendingMarks, half_life_days: float, was: str | None) -> None:
        """On ``conn`` (a write transaction): ``pending`` into the rows of the live
        memories of ``ns`` and their links (``merge_times``, ``fold_pair``: a pair
        not linked yet and co-used fewer than ``NEW_LINK_USES`` times is dropped), then the
        row's marks cleared if it still holds ``was`` (its text as read; else
        ``_Raced``, and the caller's transaction rolls back)."""
        m = self.mark
        ids = sorted(set(pending.times) | {i for p in pending.pairs for i in p})
        rows = conn.exec_driver_sql(f"SELECT id, access_times FROM memories WHERE namespace = {m} "
                                    f"AND id IN ({', '.join([m] * len(ids))})", (str(ns), *ids)).all()
        live = {i for i, _ in rows}
        updates = [(pending.access_times(i, had), str(ns), i) for i, had in rows if i in pending.times]
        if updates:
            conn.exec_driver_sql(f"UPDATE memories SET access_times = {m} WHERE namespace = {m} AND id = {m}", updates)
        pairs = {p: (w, _moment(last), n) for p, (w, last, n) in pending.pairs.items() if p[0] in live and p[1] in live}
        if pairs:
            Links._write_pairs(conn, ns, sorted(live), pairs, "recalled", half_life_days)
        if not conn.exec_driver_sql(f"UPDATE namespace_state SET marks = NULL WHERE namespace = {m} "
                                    f"AND COALESCE(marks, '') = {m}", (str(ns), was or "")).rowcount:
            raise _Raced

    def iter_ids(self, ns: Namespace) -> list[str]:
        """Ids of every live memory of ``ns`` (for index repair)."""
        with self._read() as s:
            return list(s.exec(select(_MemoryRow.id).where(_MemoryRow.namespace == str(ns))).all())

    def admin_namespaces(self, tenant: str | None) -> list[Namespace]:
        """Namespaces holding live memories, of one tenant or (None) of all.
        Only ``memory.admin`` calls this: it is the one tenant-wide read."""
        with self._read() as s:
            q = select(_MemoryRow.namespace).distinct()
            if tenant is not None:
                q = q.where(_MemoryRow.tenant == tenant)
            return [Namespace.parse(n) for n in s.exec(q).all()]

    # -- group-scoped listings (what a group may see, DESIGN rule 6) ----

    def _in_group(self, ns: Namespace, group_key: str, include_dormant: bool = True):
        """SQL filter: memories of ``ns`` visible in the group and learned in it
        (``group_key`` itself or one of its topics, ``group_key:<thread>``);
        dormant consolidated ones only with ``include_dormant``."""
        origin = _MemoryRow.origin
        return (*self._wanted(ns, include_dormant), _MemoryRow.visibility == Visibility.GROUP.value,
                (origin == group_key) | origin.startswith(group_key + ":", autoescape=True))  # type: ignore[attr-defined]

    def list_in_group(self, ns: Namespace, group_key: str, limit: int = 50, offset: int = 0, *,
                      include_dormant: bool = True) -> list[Memory]:
        """Live memories of ``ns`` learned in the group ``group_key`` (a
        ``ChatRef.group_key``, any topic) and visible there, newest first;
        without dormant consolidated ones when ``include_dormant`` is False.
        Access times include those waiting in ``ns``'s state row."""
        pending = self.pending_marks(ns)
        with self._read() as s:
            rows = s.exec(select(_MemoryRow).where(*self._in_group(ns, group_key, include_dormant))
                          .order_by(_MemoryRow.updated_at.desc(), _MemoryRow.id)  # type: ignore[attr-defined]
                          .offset(offset).limit(limit)).all()
        return pending.memories(_to_memory(r) for r in rows)

    def count_in_group(self, ns: Namespace, group_key: str, *, include_dormant: bool = True) -> int:
        """How many memories ``list_in_group`` (same ``include_dormant``) can return."""

        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_MemoryRow)
                              .where(*self._in_group(ns, group_key, include_dormant))).one())

    # -- metadata (issue 26 item 17) ---------------------------------------------

    def set_metadata(self, ns: Namespace, memory_id: str, metadata: Mapping) -> Memory:
        """Give the live memory ``memory_id`` of ``ns`` the metadata ``metadata``
        (checked by the caller, ``memory.metadata.check_metadata``), in place: no
        new version, no history row (the statement did not change) and nothing the
        index or recall's cache reads (metadata is never searched); a change event
        (``memory.changed``) when the tenant subscribed. NotFoundError if it is not in ``ns``."""
        with self._write() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)
                         .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in {ns}")
            new = _meta_json(metadata)
            if new != (row.meta or "{}"):
                row.meta = new
                s.add(row)
                _emit(s, self.event_tenants, ns, CHANGED, [(row.id, row.version)])
            s.flush()
            done = _to_memory(row)
        return self.pending_marks(ns).memory(done)

    def ids_with_metadata(self, ns: Namespace, group_key: str | None = None) -> list[tuple[str, str]]:
        """``(id, meta JSON)`` of the live memories of ``ns`` that have metadata
        (with ``group_key``: only those learned in that group and visible there,
        DESIGN rule 6), newest first as ``list`` orders them: what a metadata filter
        is matched against (``MemoryCore.find``). One namespace, always."""
        where = self._in_group(ns, group_key) if group_key is not None else self._wanted(ns, True)
        with self._read() as s:
            rows = s.exec(select(_MemoryRow.id, _MemoryRow.meta).where(*where, _MemoryRow.meta != "{}")
                          .order_by(_MemoryRow.updated_at.desc(), _MemoryRow.id)).all()  # type: ignore[attr-defined]
        return [(r[0], r[1]) for r in rows]
