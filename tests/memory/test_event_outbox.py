"""The change-event outbox never loses an event: ids unique for the life of the
store, dead letters kept with their last error and replayed in place, claims
given back by a stopped sender and freed at once after a killed one, one event
for a memory tagged before its added event was sent — on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import PG_URL, _make_store
from memory.store import Store, utcnow
from memory.types import Namespace

A = Namespace("default", "tg:42")
ROOT = Path(__file__).resolve().parents[2]
ZH = "我养了一只叫煤球的黑猫"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """A real store (SQLite file or a PostgreSQL schema of its own) whose tenant ``default`` subscribed."""
    s = _make_store(request.param, tmp_path, request)
    s.subscribe_events(["default"])
    yield s
    s.close()


def _added(core_or_store, n: int = 1) -> None:
    from memory.store.events import ADDED, _emit

    with core_or_store._write_conn() as conn:
        for _ in range(n):
            _emit(conn, core_or_store.event_tenants, A, ADDED, [(uuid.uuid4().hex[:12], 1)])


def test_webhook_ids_are_not_given_again_once_the_outbox_empties(store):
    """SQLite gives an emptied table's rowid again (evt_1 for every event that trickles in): the
    webhook-id is the event's own random uid instead, never repeated, kept across claims."""
    seen = []
    for _ in range(3):
        _added(store)
        (e,) = store.due_events(limit=10)
        seen.append(e.webhook_id)
        store.events_done([e.id])
    assert len(set(seen)) == 3 and all(w.startswith("evt_") and len(w) == 36 for w in seen)


def test_a_dead_letter_is_kept_with_its_error_and_the_tenants_later_events_go_on(store):
    """Given up: the event stays (dead_at, last error, attempts), is never claimed again on its own,
    and the tenant's later events are due at once; the stats count it as dead and as the oldest."""
    _added(store, 3)
    first, *rest = store.due_events(limit=10)
    store.events_release([e.id for e in rest])
    store.events_dead(first.id, "HTTP 500")
    due = store.due_events(limit=10)
    assert [e.id for e in due] == [e.id for e in rest]
    (dead,) = store.dead_events("default")
    assert (dead.uid, dead.attempts, dead.last_error) == (first.uid, 1, "HTTP 500") and dead.dead_at is not None
    assert store.pending_events("default") == 3
    (stats,) = store.event_stats()
    assert (stats.tenant, stats.pending, stats.dead, stats.oldest) == ("default", 2, 1, first.created_at)
    store.events_done([e.id for e in due])
    assert store.due_events(limit=10) == [] and store.pending_events() == 1


def test_a_replayed_dead_letter_keeps_its_id_and_goes_before_the_tenants_waiting_events(store):
    """Replay: the dead letter is due again with no failed attempt, its uid (webhook-id) and
    creation time kept, before the tenant's later events still waiting; other tenants' uids and
    unknown uids are skipped."""
    _added(store, 1)
    (first,) = store.due_events(limit=10)
    store.events_dead(first.id, "ConnectError")
    _added(store, 1)
    assert store.events_replay("other") == [] and store.events_replay("default", ["nope"]) == []
    (replayed,) = store.events_replay("default", [first.uid])
    assert replayed.uid == first.uid
    due = store.due_events(limit=10)
    assert [e.uid for e in due][0] == first.uid and len(due) == 2
    assert (due[0].attempts, due[0].created_at, due[0].dead_at) == (0, first.created_at, None)
    assert store.dead_events("default") == []


def test_a_stopped_holder_gives_its_claims_back_due_at_once(store):
    """Clean shutdown: what a sender claimed and did not finish is due at once for the next one,
    not after the lease; events waiting out a backoff keep their time."""
    _added(store, 3)
    h1 = store.events_holder_start()
    a, b, c = store.due_events(limit=10, lease_s=120, holder=h1)
    store.events_retry(a.id, utcnow() + timedelta(hours=1), "HTTP 503")
    assert store.events_holder_stop(h1) == 2
    h2 = store.events_holder_start()
    try:
        assert store.due_events(limit=10, holder=h2) == []  # a waits out its backoff, and its tenant behind it
        store.events_retry(a.id, utcnow() - timedelta(seconds=1), "HTTP 503")
        assert [e.id for e in store.due_events(limit=10, lease_s=120, holder=h2)] == [a.id, b.id, c.id]
    finally:
        store.events_holder_stop(h2)
    if store.is_sqlite:  # each holder's lock file went with it: nothing piles up beside the database
        assert list(Path(f"{store.engine.url.database}-holders").iterdir()) == []


def test_a_live_holders_claims_are_left_alone(store):
    """Another sender that runs keeps its claims for the lease: nothing is sent twice."""
    _added(store, 2)
    h1, h2 = store.events_holder_start(), store.events_holder_start()
    try:
        assert len(store.due_events(limit=10, lease_s=120, holder=h1)) == 2
        assert store.due_events(limit=10, lease_s=120, holder=h2) == []
    finally:
        store.events_holder_stop(h2)
        store.events_holder_stop(h1)


_CLAIMER = """
import socket, sys, time
from memory.store import Store
store = Store(sys.argv[1], schema=sys.argv[2] or None)
if sys.argv[3]:  # a container recreated under a new hostname, the same data volume
    socket.gethostname = lambda: sys.argv[3]
holder = store.events_holder_start()
got = store.due_events(limit=10, lease_s=120, holder=holder)
print(len(got), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("hostname", ["", "容器-3f2a9c"], ids=["this-host", "another-hostname"])
def test_claims_of_a_killed_sender_are_freed_at_once_not_after_the_lease(store, tmp_path, hostname):
    """kill -9 of a sender holding claims with a 120 s lease: the next sender proves it gone
    (PostgreSQL: its advisory lock went with its connection; SQLite: its lock file is no longer
    locked) and delivers the backlog in its first pass — also where the sender ran under another
    hostname, as a container recreated on the same volume does."""
    _added(store, 3)
    url = str(store.engine.url.render_as_string(hide_password=False))
    proc = subprocess.Popen([sys.executable, "-c", _CLAIMER, url, store.schema or "", hostname], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "3"
        h = store.events_holder_start()
        assert store.due_events(limit=10, holder=h) == []  # alive: its claims hold
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 10  # PostgreSQL notices the closed socket within moments
        got = []
        while not got and time.monotonic() < deadline:
            got = store.due_events(limit=10, holder=h)
            time.sleep(0.05)
        assert len(got) == 3
        store.events_holder_stop(h)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


def test_a_memory_tagged_before_its_added_event_is_sent_leaves_one_event(core):
    """An inferred capture stores, then tags what it stored: one memory.added of version 1 (the
    receiver reads the tags with it), not an added and a changed of the same version; a tag after
    the added event was claimed is an event of its own."""
    core.store.subscribe_events(["default"])
    m = core.add(A, core.new(A, ZH)).memory
    core.set_metadata(A, m.id, {"topic": "pets"})
    (added,) = core.store.due_events(limit=10)
    assert (added.event, added.version) == ("memory.added", 1)
    core.set_metadata(A, m.id, {"topic": "cats"})  # the added event is claimed: the receiver may have read it
    core.store.events_done([added.id])
    assert [(e.event, e.version) for e in core.store.due_events(limit=10)] == [("memory.changed", 1)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_event_waiting_at_the_upgrade_keeps_its_webhook_id(backend, tmp_path, request):
    """Revision 0011 on a database at 0010 with an event waiting: the row stays, its uid is its old
    id (so its webhook-id is the evt_<n> a receiver may have seen), the schema equals the models',
    and a downgrade drops the dead letters with the columns."""
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlmodel import SQLModel

    from memory.store.migrate import config, head

    if backend == "sqlite":
        url, schema = f"sqlite:///{tmp_path / 'old.db'}", None
    else:
        url, schema = PG_URL, f"{request.getfixturevalue('pg_schema')}_{uuid.uuid4().hex[:6]}"
        request.addfinalizer(lambda: _drop(schema))
    old = Store(url, schema=schema, migrate=False)
    with old.engine.begin() as conn:
        command.upgrade(config(conn, schema), "0010_turn_path")
        conn.execute(text("INSERT INTO change_events (tenant, namespace, memory_id, event, version, created_at, "
                          "due_at, attempts) VALUES ('default', 'default/tg:42', 'a1b2c3d4e5f6', 'memory.added', 1, "
                          ":t, :t, 2)"), {"t": utcnow()})
        n = conn.execute(text("SELECT id FROM change_events")).scalar_one()
    old.close()
    store = Store(url, schema=schema)
    try:
        assert store.schema_revision() == head()
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            assert [d for d in compare_metadata(ctx, SQLModel.metadata)
                    if d[0] != "remove_table" or d[1].name != "alembic_version"] == []
        (e,) = store.due_events(limit=10)
        assert (e.webhook_id, e.attempts, e.memory_id) == (f"evt_{n}", 2, "a1b2c3d4e5f6")
        store.events_dead(e.id, "HTTP 500")
        with store.engine.begin() as conn:
            command.downgrade(config(conn, schema), "0010_turn_path")
            assert conn.execute(text("SELECT count(*) FROM change_events")).scalar_one() == 0
    finally:
        store.close()


def _drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
