"""A namespace's last recall lives in its ``namespace_state`` row: a trace held for a capture rides on the
capture's version bump (no statement of its own), is written with ``capture_done`` when the capture stored
nothing, never replaces a newer trace, and is read at once on the process that holds it while another
replica sees it when it commits — SQLite and PostgreSQL; revision 0022 moves ``last_recall`` in and out."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, inspect, text

from memory.explain import Miss, RecallTrace, TraceEntry
from memory.store import ChatLine, Store, utcnow
from memory.types import Category, ChatKind, ChatRef, Memory, Namespace, ScoreParts

CHAT = ChatRef("tg", ChatKind.PRIVATE, "1001")
NS = Namespace("default", "tg:1001")
T0 = datetime(2026, 12, 6, 19, 0, tzinfo=timezone.utc)


def _trace(at: datetime, *ids: str, reason: str = "", ns: Namespace = NS) -> RecallTrace:
    parts = ScoreParts(rrf=0.03, retention=0.9, activation=-1.5, emotion=1.1, importance=1.2)
    return RecallTrace(ns, CHAT.key, at, 1, reason, tuple(TraceEntry(i, n, 0.5 / n, {"bm25": n}, parts)
                                                          for n, i in enumerate(ids, start=1)),
                       {"bm25": 0.4, "vector": 0.8}, (Miss("zz", "vector", 0.71, 0.8),))


def _memory(mid: str, text_: str, key: str) -> Memory:
    return Memory(id=mid, namespace=NS, text=text_, category=next(iter(Category)), key=key)


def _counters(store: Store, ns: Namespace) -> tuple:
    """``(version, live, links, conflicts, dormant)`` of ``ns``'s state row."""
    s = store.namespace_stats(ns)
    return s.version, s.live, s.links, s.conflicts, s.dormant


def _replica(store: Store) -> Store:
    """Another gateway process on the same database (nothing held in common but SQL)."""
    return Store(store.url, schema=store.schema)


class _Statements:
    """The SQL statements ``store``'s engine runs (its ``before_cursor_execute`` listeners: the DBAPI
    writes of ``_write_chain`` / ``_write_one`` tell them too)."""

    def __init__(self, store: Store) -> None:
        self.store, self.sql = store, []

    def _heard(self, _conn, _cursor, statement, _params, _context, _many) -> None:
        self.sql.append(" ".join(statement.split()))

    def __enter__(self) -> _Statements:
        event.listen(self.store.engine, "before_cursor_execute", self._heard)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.store.engine, "before_cursor_execute", self._heard)

    def touching(self, table: str) -> list[str]:
        return [s for s in self.sql if table in s and not s.startswith("SELECT")]


def test_a_held_trace_rides_on_the_captures_version_bump(store):
    """The add's statements are the same with a held trace as without (its bump carries the trace): the
    trace is committed with the memory, readable by another replica, and no longer held."""
    with _Statements(store) as plain:
        store.add(NS, _memory("m1", "我养了一只叫煤球的猫 🐈", "pet"))
    store.hold_last_recall(_trace(T0, "m1"))
    other = _replica(store)
    try:
        assert other.last_recall(NS) is None  # held here, not written yet
        with _Statements(store) as traced:
            store.add(NS, _memory("m2", "I run 5 km every morning", "running"))
        assert len(traced.sql) == len(plain.sql)
        assert [s for s in traced.touching("namespace_state")] == [s for s in traced.sql if "namespace_state" in s]
        assert len(traced.touching("namespace_state")) == 1 and "trace" in traced.touching("namespace_state")[0]
        assert len(store.held_traces) == 0
        got = other.last_recall(NS)
        assert [e.memory_id for e in got.entries] == ["m1"] and got.at == T0 and got.k == 1
        assert got.floors == {"bm25": 0.4, "vector": 0.8} and got.misses == (Miss("zz", "vector", 0.71, 0.8),)
        assert got.entries[0].parts == ScoreParts(rrf=0.03, retention=0.9, activation=-1.5, emotion=1.1,
                                                  importance=1.2)
        assert store.namespace_state(NS) == (2, 2)  # the bump itself did its work
    finally:
        other.close()


def test_a_capture_that_stores_nothing_writes_the_trace_with_capture_done(store):
    """Chit-chat: the held trace goes in capture_done's transaction, one statement more beside the line's
    update, the namespace's state row made for it at version 0 with its live count (none: counters 0)."""
    line = store.append_chat("default", CHAT, ChatLine("user", "1001", "哈哈哈 好的 👍", utcnow(), "1"), capture=NS)
    store.hold_last_recall(_trace(T0, "gone", reason="nothing to recall"))
    with _Statements(store) as done:
        store.capture_done(line, recalls=[NS])
    assert len(done.touching("chat_log")) == 1 and len(done.touching("namespace_state")) == 1
    assert store.captures_due() == 0 and len(store.held_traces) == 0
    other = _replica(store)
    try:
        assert other.last_recall(NS).fallback_reason == "nothing to recall"
        assert _counters(other, NS) == (0, 0, 0, 0, 0)
    finally:
        other.close()
    # a namespace with memories but no state row yet (before its table) is counted, its counters unknown
    ns = Namespace("default", "tg:2002")
    store.add(ns, Memory(id="x1", namespace=ns, text="I like tea", category=next(iter(Category)), key="tea"))
    store._write_one(f"DELETE FROM namespace_state WHERE namespace = {store.mark}", (str(ns),))
    store.save_last_recall(_trace(T0, "x1", ns=ns))
    assert _counters(store, ns) == (0, 1, None, None, None)


def test_capture_done_with_a_trace_is_one_round_trip_on_postgresql(tmp_path, request):
    """On PostgreSQL the trace goes in the same round trip as the line's update (``_write_chain``)."""
    from conftest import _make_store

    from bench.sqltrips import SqlTrips

    pg = _make_store("postgres", tmp_path, request)
    line = pg.append_chat("default", CHAT, ChatLine("user", "1001", "ok 👌", utcnow(), "1"), capture=NS)
    pg.hold_last_recall(_trace(T0, "a"))
    with SqlTrips(pg) as trips:
        pg.capture_done(line, recalls=[NS])
        assert trips.counts().round_trips == 1
    assert pg.last_recall(NS).at == T0 and len(pg.held_traces) == 0


def test_a_newer_trace_is_never_replaced_by_an_older_one(store):
    """Captures finishing out of order (or on two replicas): whichever way an older trace is written — on its
    own, on a bump, with capture_done — the newer stays; a held older one never displaces a held newer one."""
    newer, older = _trace(T0 + timedelta(seconds=5), "new"), _trace(T0, "old")
    store.save_last_recall(newer)
    store.save_last_recall(older)
    assert [e.memory_id for e in store.last_recall(NS).entries] == ["new"]
    other = _replica(store)
    try:
        other.hold_last_recall(older)  # another replica's capture, later, of the earlier message
        other.add(NS, _memory("m1", "我周末去爬山了 ⛰️", "hike"))
        line = other.append_chat("default", CHAT, ChatLine("user", "1001", "嗯嗯", utcnow(), "2"), capture=NS)
        other.hold_last_recall(older)
        other.capture_done(line, recalls=[NS])
        assert [e.memory_id for e in other.last_recall(NS).entries] == ["new"]
    finally:
        other.close()
    store.hold_last_recall(_trace(T0 + timedelta(seconds=9), "newest"))
    store.hold_last_recall(_trace(T0 + timedelta(seconds=7), "between"))
    assert [e.memory_id for e in store.last_recall(NS).entries] == ["newest"]
    store.save_held_recall(NS)
    assert [e.memory_id for e in _stored(store).entries] == ["newest"]
    # the same message's trace written twice (a retried write) is no conflict
    store.save_last_recall(_trace(T0 + timedelta(seconds=9), "newest"))
    assert [e.memory_id for e in _stored(store).entries] == ["newest"]


def _stored(store: Store) -> RecallTrace:
    """The trace in SQL, whatever this process holds."""
    other = _replica(store)
    try:
        return other.last_recall(NS)
    finally:
        other.close()


def test_the_holding_process_reads_its_trace_before_the_capture_commits(store):
    """Read your own trace: last_recall, recently_recalled and tenant_counts on the holding process see the
    held trace (newer than the stored one) at once; another replica sees the stored one until it commits."""
    store.save_last_recall(_trace(T0, "old"))
    ns2 = Namespace("default", "qq:20002")
    store.hold_last_recall(_trace(T0 + timedelta(minutes=1), "held", reason="model timeout"))
    store.hold_last_recall(_trace(T0 + timedelta(minutes=2), ns=ns2))
    assert [e.memory_id for e in store.last_recall(NS).entries] == ["held"]
    assert store.recently_recalled("default", 5) == [ns2, NS] and store.recently_recalled("other", 5) == []
    counts = store.tenant_counts("default")
    assert (counts.recalls, counts.fallbacks) == (2, 1)
    other = _replica(store)
    try:
        assert [e.memory_id for e in other.last_recall(NS).entries] == ["old"]
        assert other.last_recall(ns2) is None and other.recently_recalled("default", 5) == [NS]
        assert (other.tenant_counts("default").recalls, other.tenant_counts("default").fallbacks) == (1, 0)
        store.save_held_recall(NS)
        store.save_held_recall(ns2)
        assert [e.memory_id for e in other.last_recall(NS).entries] == ["held"]
        assert other.recently_recalled("default", 5) == [ns2, NS]
        assert (other.tenant_counts("default").recalls, other.tenant_counts("default").fallbacks) == (2, 1)
    finally:
        other.close()


def test_closing_the_core_writes_the_traces_still_held(core):
    """A gateway shutting down with traces held (their captures did not finish) writes them on close."""
    store = core.store
    store.hold_last_recall(_trace(T0, "m1"))
    store.hold_last_recall(_trace(T0, ns=Namespace("default", "qq:20002")))
    other = _replica(store)
    try:
        assert other.last_recall(NS) is None
        core.close()
        assert other.last_recall(NS).at == T0 and other.recently_recalled("default", 5) == [
            Namespace("default", "qq:20002"), NS]
    finally:
        other.close()


def test_a_forgotten_memory_in_the_trace_is_told_forgotten_and_a_move_takes_the_trace(store):
    """As before the trace moved: a forget leaves the trace's ids (``/memory why`` tells a forgotten id by
    its audit, not by the trace), and ``move_namespace`` drops the source's trace, held or stored."""
    store.add(NS, _memory("m1", "我怕黑 🌙", "dark"))
    store.save_last_recall(_trace(T0, "m1"))
    store.delete(NS, "m1")
    assert [e.memory_id for e in store.last_recall(NS).entries] == ["m1"]
    dst = Namespace("default", "person:ming")
    store.add(NS, _memory("m2", "I like jazz", "music"))
    store.hold_last_recall(_trace(T0 + timedelta(seconds=1), "m2"))
    store.move_namespace(NS, dst)
    assert store.last_recall(NS) is None and store.last_recall(dst) is None


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_revision_0022_moves_last_recall_into_namespace_state_and_back(backend, tmp_path, request):
    """A database at 0021 with last_recall rows upgrades: each row lands in its namespace's state row (one
    made at version 0 where none was: live counted, counters 0 without memories, NULL with), the table is
    gone and the schema equals a fresh one; a downgrade brings the table and its rows back, and an upgrade
    again keeps them."""
    from alembic import command
    from test_migrations import _drift, _raw

    from memory.store import migrate

    url, schema = _raw(backend, tmp_path, request)
    store = Store(url, schema=schema, migrate=False)
    a, b, c = (Namespace("default", s) for s in ("tg:1", "tg:2", "tg:3"))
    rows = [(a, "tg:private:1", "", [{"id": "m1", "pos": 1, "score": 0.9, "ranks": {"bm25": 1}, "parts": None}],
             {"floors": {"bm25": 0.4}, "misses": [["m9", "bm25", 0.1, 0.4]]}),
            (b, "tg:group:-100", "recall failed: X", [], {}),
            (c, "tg:private:3", "", [], {})]
    try:
        with store.engine.begin() as conn:
            command.upgrade(migrate.config(conn, schema), "0021_marksrow_pending_marks")
        with store.engine.begin() as conn:
            at = T0.replace(tzinfo=None)
            for i, (ns, chat, reason, entries, floors) in enumerate(rows):
                conn.execute(text("INSERT INTO last_recall (namespace, tenant, chat, at, k, fallback_reason, entries, "
                                  "floors) VALUES (:ns, 'default', :chat, :at, 6, :r, :e, :f)"),
                             {"ns": str(ns), "chat": chat, "at": at + timedelta(minutes=i), "r": reason,
                              "e": json.dumps(entries), "f": json.dumps(floors)})
            conn.execute(text("INSERT INTO memories (id, namespace, tenant, text, norm, category, key, importance, "
                              "valence, arousal, emotion, origin, visibility, source_message_id, created_at, updated_at,"
                              " valid_from, version, access_times, source_fp, entities, context, meta) VALUES ('m1', "
                              ":ns, 'default', 'I like tea', 'i like tea', 'preference', 'tea', 0.5, 0, 0, '', '', "
                              "'private', '', :at, :at, :at, 1, '[]', '', '', '', '')"), {"ns": str(b), "at": at})
            conn.execute(text("INSERT INTO namespace_state (namespace, version, live, links, conflicts, dormant) "
                              "VALUES (:ns, 4, 0, 0, 0, 0)"), {"ns": str(a)})
        assert store.upgrade_schema() == ("0021_marksrow_pending_marks", migrate.head())
        assert not inspect(store.engine).has_table("last_recall", schema=schema)
        assert _drift(store) == []
        got = store.last_recall(a)
        assert (got.chat, got.k, got.at, [e.memory_id for e in got.entries], got.floors, got.misses) == (
            "tg:private:1", 6, T0, ["m1"], {"bm25": 0.4}, (Miss("m9", "bm25", 0.1, 0.4),))
        assert store.last_recall(b).fallback_reason == "recall failed: X"
        assert [_counters(store, n) for n in (a, b, c)] == [(4, 0, 0, 0, 0), (0, 1, None, None, None),
                                                                   (0, 0, 0, 0, 0)]
        assert store.recently_recalled("default", 5) == [c, b, a]
        with store.engine.begin() as conn:
            command.downgrade(migrate.config(conn, schema), "0021_marksrow_pending_marks")
        with store.engine.connect() as conn:
            back = conn.execute(text("SELECT namespace, chat, k, fallback_reason, entries, floors FROM last_recall "
                                     "ORDER BY namespace")).all()
        assert [(r[0], r[1], r[2], r[3], json.loads(r[4]), json.loads(r[5])) for r in back] == [
            (str(ns), chat, 6, reason, entries, floors) for ns, chat, reason, entries, floors in rows]
        assert "trace" not in {col["name"] for col in inspect(store.engine).get_columns("namespace_state",
                                                                                           schema=schema)}
        assert store.upgrade_schema() == ("0021_marksrow_pending_marks", migrate.head())
        assert store.last_recall(b).fallback_reason == "recall failed: X" and store.last_recall(a).at == T0
    finally:
        store.close()
