"""A turn's store calls cost PostgreSQL one round trip each (an add, a chat-log append with its claims, a
capture done with its vectors, the capture batch's reads, several reads of one call; the namespace lock two),
and a write sent as one batch or one chained statement is all or nothing — the block raising midway or a
statement failing leaves nothing written, on SQLite and PostgreSQL alike (counted on the real engine:
``bench.sqltrips``)."""

from __future__ import annotations

import time
from datetime import timedelta

import numpy as np
import psycopg
import pytest
from conftest import _make_store
from sqlalchemy.exc import IntegrityError

from bench.sqltrips import SqlTrips
from memory.errors import DuplicateDelivery, StoreError
from memory.store import ChatLine, utcnow
from memory.store.audit import AuditEntry
from memory.types import Category, ChatKind, ChatRef, Memory, Namespace

CHAT = ChatRef("tg", ChatKind.PRIVATE, "1001")
NS = Namespace("default", "tg:1001")
WINDOW = timedelta(minutes=10)


@pytest.fixture
def pg(tmp_path, request):
    """A real PostgreSQL store."""
    return _make_store("postgres", tmp_path, request)


def _line(text: str, message_id: str) -> ChatLine:
    return ChatLine("user", "1001", text, utcnow(), message_id, "小明")


def _trips(store, call) -> int:
    with SqlTrips(store) as trips:
        call()
        return trips.counts().round_trips


def _deliveries(store) -> int:
    return int(store._read_rows("SELECT count(*) FROM deliveries", ())[0][0])


def test_a_turns_store_calls_are_one_round_trip_each_on_postgresql(pg):
    """The append with its delivery id and fingerprint (a re-push still refused, a fingerprint claimed on its
    own row too), an add with its outbox, version bump and audit, a capture done with a vector, the capture
    batch's lease check, redactions and lines before, and three reads of one call: one round trip each; the
    namespace lock two (its BEGIN with the lock, and the ROLLBACK that releases it)."""
    assert _trips(pg, lambda: pg.append_chat("default", CHAT, _line("我下周去杭州出差 ✈️", "1"), capture=NS,
                                             claim="default|tg|1001|1",
                                             fingerprint=("fp|default|1001|abc", WINDOW))) == 1
    with pytest.raises(DuplicateDelivery):  # the same content under a new id, within the window
        pg.append_chat("default", CHAT, _line("我下周去杭州出差 ✈️", "2"), claim="default|tg|1001|2",
                       fingerprint=("fp|default|1001|abc", WINDOW))
    assert pg.claim_fingerprint("fp|default|1001|own", WINDOW)  # a command's claim, on its own row
    with pytest.raises(DuplicateDelivery):
        pg.append_chat("default", CHAT, _line("I moved to Berlin!", "3"), claim="default|tg|1001|3",
                       fingerprint=("fp|default|1001|own", WINDOW))
    assert _deliveries(pg) == 2 and len(pg.chat_tail("default", CHAT)) == 1
    memory = Memory(id="m1", namespace=NS, text="我下周去杭州出差", category=next(iter(Category)), key="trip")
    assert _trips(pg, lambda: pg.add(NS, memory, audit=AuditEntry("store", "capture", {}))) == 1
    assert pg.count(NS) == 1 and [o.memory_id for o in pg.pending_ops(10)] == ["m1"]
    (line_id,) = [line.id for line in pg.chat_tail("default", CHAT)]
    taken = {}
    assert _trips(pg, lambda: taken.update(r=pg.take_captures_with(
        {line_id: utcnow()}, [("default", CHAT, "1")], [line_id], renew_after=timedelta(minutes=1)))) == 1
    assert taken["r"] == ({line_id: "我下周去杭州出差 ✈️"}, set(), {})
    vec = np.arange(4, dtype=np.float32).tobytes()
    assert _trips(pg, lambda: pg.capture_done(line_id, vectors={line_id: ("e5/4/h", vec)})) == 1
    assert pg.captures_due() == 0
    assert _trips(pg, lambda: pg._read_many([("SELECT 1", ()), ("SELECT 2", ()), ("SELECT 3", ())])) == 1

    def lock() -> None:
        with pg.namespace_lock(NS):
            pass

    assert _trips(pg, lock) == 2


@pytest.mark.parametrize("how", ["batch", "chain"])
def test_a_write_batch_that_raises_midway_writes_nothing(store, how):
    """Statements sent before the block raised are not committed (PostgreSQL's pipeline syncs even then: its
    transaction is begun by hand and the COMMIT queued only at a clean end; a chain sends nothing)."""
    m = store.mark
    batch = store._write_batch if how == "batch" else store._write_chain
    with pytest.raises(RuntimeError), batch() as cur:
        cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("k1", store.db_time(utcnow())))
        cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("k2", store.db_time(utcnow())))
        raise RuntimeError("the caller failed after sending two statements")
    assert _deliveries(store) == 0
    with batch() as cur:  # the connection is usable again, and a clean block commits
        cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("k3", store.db_time(utcnow())))
        cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("k4", store.db_time(utcnow())))
    assert _deliveries(store) == 2


@pytest.mark.parametrize("how", ["batch", "chain"])
def test_a_write_batch_whose_statement_fails_writes_nothing(store, how):
    """A unique violation in the second statement: IntegrityError, the first statement's row not written,
    and the pooled connections left idle (PostgreSQL)."""
    m = store.mark
    store._write_one(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("taken", store.db_time(utcnow())))
    batch = store._write_batch if how == "batch" else store._write_chain
    for wait in (0.0, 0.2):  # 0.2 s: the error is back before the block ends and queues its COMMIT
        with pytest.raises(IntegrityError), batch() as cur:
            cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("new", store.db_time(utcnow())))
            cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})",
                    ("taken", store.db_time(utcnow())))
            time.sleep(wait)
    assert store._read_rows("SELECT key FROM deliveries", ()) == [("taken",)]
    if not store.is_sqlite:
        fairy = store._auto_engine.raw_connection()
        try:
            assert fairy.dbapi_connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            fairy.close()


def test_a_lone_statement_reports_its_rowcount_and_its_errors(store):
    """``_write_one`` (a batch of one on PostgreSQL): its rowcount; a unique violation is IntegrityError and
    another database error StoreError."""
    m = store.mark
    for key in ("a", "b"):
        assert store._write_one(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})",
                                (key, store.db_time(utcnow()))) == 1
    assert store._write_one("DELETE FROM deliveries WHERE key IN ('a', 'b', 'c')", ()) == 2
    store._write_one(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", ("a", store.db_time(utcnow())))
    with pytest.raises(IntegrityError):
        store._write_one(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})",
                         ("a", store.db_time(utcnow())))
    with pytest.raises(StoreError):
        store._write_one("UPDATE no_such_table SET x = 1", ())


def test_the_senders_identity_and_pause_are_one_read(store):
    """``resolve_with_pause`` reads the identity and the pause of the namespace it resolves to in one read:
    a linked identity's pause is its person's, an unlinked one's its own, an expired pause is none."""
    from memory.identity import resolve_with_pause

    now = utcnow()
    store.pause(NS, "tg:private:1001", now - timedelta(minutes=1), None)
    store.link_identities("default", ["tg:2002"], "person:ann", "test")
    store.pause(Namespace("default", "person:ann"), "tg:private:2002", now - timedelta(minutes=1),
                now + timedelta(hours=1))
    store.pause(Namespace("default", "tg:3003"), "tg:private:3003", now - timedelta(hours=2),
                now - timedelta(hours=1))
    seen = []
    read_many = store._read_many
    store._read_many = lambda statements: seen.append(len(statements)) or read_many(statements)
    try:
        assert resolve_with_pause(store, "default", "tg", "1001", "tg:private:1001", now) == (NS, True)
        assert resolve_with_pause(store, "default", "tg", "1001", "tg:private:9", now) == (NS, False)
        assert resolve_with_pause(store, "default", "tg", "2002", "tg:private:2002", now) == (
            Namespace("default", "person:ann"), True)
        assert resolve_with_pause(store, "default", "tg", "3003", "tg:private:3003", now) == (
            Namespace("default", "tg:3003"), False)
    finally:
        del store._read_many
    assert seen == [1, 1, 1, 1]
