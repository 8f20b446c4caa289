"""A PostgreSQL store survives the server closing its pooled connections (a
restart, an administrator's terminate) without a ping round trip per checkout:
the next read, write, ORM read and namespace lock each succeed on a fresh
connection, and the turn's hot reads run in autocommit (nothing left open)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import psycopg
import pytest
from sqlalchemy import event

from memory.store import ChatLine
from memory.types import ChatKind, ChatRef, Namespace

CHAT = ChatRef("tg", ChatKind.PRIVATE, "7")
NS = Namespace("t", "tg:7")
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path, request):
    from tests.conftest import PG_URL, _make_store

    s = _make_store("postgres", tmp_path, request)
    s.pg_url = PG_URL
    return s


def _pools(store) -> list:
    """The store's pools a read or write takes its connection from: the ORM's and the autocommit pool's."""
    return [store.engine, store._auto_engine]


def _pooled_pids(store, n: int = 3) -> list[int]:
    """Backend pids of ``n`` connections of each of the store's pools, all checked in again."""
    held = [engine.raw_connection() for engine in _pools(store) for _ in range(n)]
    pids = [c.dbapi_connection.info.backend_pid for c in held]
    for c in held:
        c.close()
    return pids


def _terminate(url: str, pids: list[int]) -> None:
    """Close these backends server-side, as a restart does (only the store's own: the server is shared)."""
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
            time.sleep(0.05)


def test_every_kind_of_call_survives_its_connections_being_terminated(store):
    """After the server closes every pooled connection, each kind of store call succeeds at once."""
    store.append_chat("t", CHAT, ChatLine("user", "7", "hello", T0, "1"))
    calls = [
        ("raw read", lambda: store.paused(NS, CHAT.key, T0)),
        ("write", lambda: store.append_chat("t", CHAT, ChatLine("user", "7", "again", T0, "2"))),
        ("ORM read", lambda: store.pending_captures(T0)),
        ("Core read", lambda: store.namespace_state(NS)),
        ("namespace lock", lambda: store.namespace_lock(NS).__enter__()),
    ]
    for name, call in calls:
        _terminate(store.pg_url, _pooled_pids(store))
        call()  # raises StoreError if a dead connection reached the statement
    assert [line.text for line in store.chat_tail("t", CHAT)] == ["hello", "again"]


def test_a_read_on_a_connection_dropped_unseen_is_retried(store):
    """A connection that died without the checkout seeing it (the check is a socket poll) is replaced and the read repeated."""
    from memory.store import base

    store.append_chat("t", CHAT, ChatLine("user", "7", "hello", T0, "1"))
    pids = _pooled_pids(store, 1)
    seen = base._dropped
    # the checkout check misses it (as for a connection whose server vanished without a packet)
    for engine in _pools(store):
        event.remove(engine, "checkout", seen)
    try:
        _terminate(store.pg_url, pids)
        assert [line.text for line in store.chat_tail("t", CHAT)] == ["hello"]
        # several reads pipelined in one round trip: retried together
        _terminate(store.pg_url, _pooled_pids(store, 1))
        assert [len(rows) for rows in store._read_many([("SELECT 1", ()), ("SELECT 2 UNION ALL SELECT 3", ())])] \
            == [1, 2]
    finally:
        for engine in _pools(store):
            event.listen(engine, "checkout", seen)


def test_hot_reads_leave_no_transaction_open(store):
    """A raw read runs in autocommit (a pool of its own) and hands its connection back idle; the ORM's pool
    stays out of autocommit."""
    store._read_rows("SELECT 1", ())
    store._read_many([("SELECT 1", ()), ("SELECT 2", ())])
    for engine, autocommit in ((store._auto_engine, True), (store.engine, False)):
        fairy = engine.raw_connection()
        try:
            conn = fairy.dbapi_connection
            assert conn.autocommit is autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            fairy.close()


def test_a_connection_handed_back_inside_a_transaction_is_replaced(store):
    """The autocommit pool resets nothing at a return: a connection left inside a transaction (a bug's, or a
    write whose ROLLBACK was lost) is replaced at its next checkout, its transaction never reused."""
    fairy = store._auto_engine.raw_connection()
    left = fairy.dbapi_connection
    left.execute("BEGIN")
    left.execute("INSERT INTO deliveries (key, processed_at) VALUES ('left-open', now())")
    fairy.close()
    assert store._read_rows("SELECT count(*) FROM deliveries WHERE key = 'left-open'", ()) == [(0,)]
    assert store._read_rows("SELECT 1", ()) == [(1,)]


def test_the_checkout_check_works_past_1024_descriptors(tmp_path, request):
    """A busy gateway holds more than FD_SETSIZE descriptors (index files, sockets): a connection whose socket
    is numbered above 1024 is still checked out, read from and replaced when the server closes it."""
    import os
    import resource

    from tests.conftest import PG_URL, _make_store

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("the descriptor limit is below 1200")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        store = _make_store("postgres", tmp_path, request)
        pids = _pooled_pids(store, 1)
        fairy = store.engine.raw_connection()
        assert fairy.dbapi_connection.fileno() > 1024
        fairy.close()
        assert store._read_rows("SELECT 1", ()) == [(1,)]
        _terminate(PG_URL, pids)
        assert store._read_rows("SELECT 2", ()) == [(2,)]
    finally:
        for fd in held:
            os.close(fd)


def test_a_socket_lost_under_a_read_counts_as_a_dropped_connection():
    """psycopg raises "connection socket closed" (no SQLSTATE) while waiting on a socket the server closed,
    before it marks the connection closed: the read is retried on a new connection, as for a closed one.
    An error the server answered (a SQLSTATE: a timeout, a terminated backend) is not taken for one."""
    from psycopg import errors

    from memory.store.base import _socket_lost

    assert _socket_lost(psycopg.OperationalError("connection socket closed"))
    assert not _socket_lost(errors.QueryCanceled("canceling statement due to statement timeout"))
    assert not _socket_lost(errors.AdminShutdown("terminating connection due to administrator command"))
    assert not _socket_lost(psycopg.ProgrammingError("syntax error"))
