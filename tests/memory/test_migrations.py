"""Alembic owns the store's schema: a database of the previous release upgrades on
SQLite and PostgreSQL without losing a row, the revisions build what the models
say, and ``huiyi db upgrade`` reports what it did."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from datetime import datetime, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from conftest import PG_URL, TEST_DATA
from memory.errors import StoreError
from memory.store import ChatLine, Store
from memory.store.migrate import head
from memory.types import ChatKind, ChatRef, Namespace

PREVIOUS = TEST_DATA / "previous_release"
"""SQL dumps of a database written by commit 5cf7836 (scripts/make_previous_release_fixture.py)."""
TABLES = ("memories", "memory_history", "tombstones", "deliveries", "chat_log", "chat_redactions", "index_outbox",
          "audit_log", "identities", "pending_confirmations")
ZH = Namespace("default", "tg:1001")
EN = Namespace("default", "qq:20002")


def _pg_schema(request) -> str:
    """A fresh PostgreSQL schema for one test (dropped afterwards)."""
    import psycopg

    schema = f"{request.getfixturevalue('pg_schema')}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    request.addfinalizer(drop)
    return schema


def _raw(backend: str, tmp_path, request, sql: str | None = None) -> tuple[str, str | None]:
    """A database (URL, schema) loaded with ``sql`` (``__SCHEMA__`` filled in on PostgreSQL)."""
    if backend == "sqlite":
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as con:
            con.executescript(sql or "")
        return f"sqlite:///{path}", None
    import psycopg

    schema = _pg_schema(request)
    if sql:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.replace("__SCHEMA__", f'"{schema}"'))
    return PG_URL, schema


def _counts(store: Store, tables=TABLES) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {t: conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in tables}


def _drift(store: Store) -> list:
    """Differences between the database and the SQLModel tables (Alembic autogenerate)."""
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(ctx, SQLModel.metadata) if d[0] != "remove_table" or
                d[1].name != "alembic_version"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_previous_release_database_upgrades_at_start_up_without_losing_a_row(backend, tmp_path, request):
    """A database the release before Alembic wrote (5cf7836) opens: every row is
    kept and readable, history rows get the visibility column (read as private),
    the nonce table appears, the schema equals a fresh one, and it is stamped at head."""
    url, schema = _raw(backend, tmp_path, request, (PREVIOUS / f"{'sqlite' if backend == 'sqlite' else 'postgresql'}.sql")
                       .read_text(encoding="utf-8"))
    old = Store(url, schema=schema, migrate=False)
    before = _counts(old)
    assert _counts(old, ("last_recall",)) == {"last_recall": 1}
    assert old.schema_revision() is None and before["memories"] == 5 and before["memory_history"] == 1
    assert "visibility" not in {c["name"] for c in inspect(old.engine).get_columns("memory_history", schema=schema)}
    old.close()

    store = Store(url, schema=schema)  # start-up upgrades
    try:
        assert store.schema_revision() == head()
        assert _counts(store) == before
        assert _drift(store) == []
        # revision 0004 counts each namespace's live memories at version 1 (recall's cache stamps)
        assert [store.namespace_state(n) for n in (ZH, EN)] == [(1, len(store.iter_ids(n))) for n in (ZH, EN)]
        assert store.namespace_state(ZH)[1] > 0
        # revision 0022: the last recall moved into the namespace's state row (its table is gone)
        assert not inspect(store.engine).has_table("last_recall", schema=schema)
        trace = store.last_recall(ZH)
        assert (trace.chat, trace.k, [e.memory_id for e in trace.entries], trace.at) == (
            "tg:private:1001", 1, ["a1b2c3d4e5f6"], datetime(2026, 11, 20, 8, 32, tzinfo=timezone.utc))
        assert store.last_recall(EN) is None and store.recently_recalled("default", 5) == [ZH]
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT visibility FROM memory_history")).scalars().all() == [""]
        # the rows read back through today's code, Chinese, traditional, emoji and all
        assert store.get(ZH, "a1b2c3d4e5f6").text == "我养了一只叫煤球的猫🐈"
        assert store.get(ZH, "a1b2c3d4e5f6").context == ""  # revision 0008: rows before it answered nothing
        assert store.get(ZH, "a1b2c3d4e5f6").metadata == {}  # revision 0009: no tags before it
        assert inspect(store.engine).has_table("change_events", schema=schema)
        assert store.get(ZH, "0123456789ab").text == "我現在改喝拿铁了"
        assert "我喜歡喝美式咖啡，不加糖。" in [m.text for m in store.history(ZH, "0123456789ab")]
        assert store.get(EN, "c0ffee000001").text == "I run 5 km every morning 🏃"
        dm = ChatRef("tg", ChatKind.PRIVATE, "1001")
        assert [line.text for line in store.chat_tail("default", dm)][-1] == "Mixed 中英 text with emoji 😀 and ！？"
        assert [p.text for p in store.pending_captures(datetime.now(timezone.utc))] == ["明天见 see you"]
        assert store.resolve_identity("default", "qq:10001") == "person:xiaoming"
        assert store.claim_delivery("default|tg|tg:private:1001|dm-0") is False  # claimed before the upgrade
        # and today's writes work on the upgraded tables
        store.append_chat("default", dm, ChatLine("user", "1001", "升级之后 after the upgrade", datetime.now(timezone.utc),
                                                  "dm-9"))
        assert store.claim_nonce("default", "onebot", "n-1", "d") is None
        assert store.claim_nonce("default", "onebot", "n-1", "d") is not None
    finally:
        store.close()
    again = Store(url, schema=schema)  # a second start-up changes nothing
    assert again.schema_revision() == head() and _counts(again)["chat_log"] == before["chat_log"] + 1
    again.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_revisions_build_the_tables_the_models_describe(backend, tmp_path, request):
    """An empty database upgraded revision by revision has exactly the SQLModel
    tables (what the create-and-stamp fast path of start-up builds), and stays at head."""
    url, schema = _raw(backend, tmp_path, request)
    store = Store(url, schema=schema, migrate=False)
    try:
        assert store.upgrade_schema() == (None, head())
        assert _drift(store) == []
        assert store.upgrade_schema() == (head(), head())
    finally:
        store.close()
    fast = Store(f"sqlite:///{tmp_path / 'fast.db'}") if backend == "sqlite" else Store(url, schema=_pg_schema(request))
    try:
        assert fast.schema_revision() == head() and _drift(fast) == []
    finally:
        fast.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_not_null_timestamp_column_is_added_to_a_table_with_rows(backend, tmp_path, request):
    """The fault the hand-written upgrader had on PostgreSQL (DEFAULT 0 for a NOT NULL
    timestamp → DatatypeMismatch, half-migrated schema): a table of rows that lacks
    one gets it, filled with the epoch, NOT NULL, and the rows stay."""
    url, schema = _raw(backend, tmp_path, request,
                       "CREATE TABLE __SCHEMA__.deliveries (key VARCHAR(600) NOT NULL PRIMARY KEY);"
                       "INSERT INTO __SCHEMA__.deliveries VALUES ('default|tg|tg:private:1|1'), ('default|qq|群|2');"
                       if backend == "postgres" else
                       "CREATE TABLE deliveries (key VARCHAR(600) NOT NULL PRIMARY KEY);"
                       "INSERT INTO deliveries VALUES ('default|tg|tg:private:1|1'), ('default|qq|群|2');")
    store = Store(url, schema=schema)
    try:
        assert store.schema_revision() == head()
        col = {c["name"]: c for c in inspect(store.engine).get_columns("deliveries", schema=schema)}["processed_at"]
        assert col["nullable"] is False
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT key, processed_at FROM deliveries ORDER BY key")).all()
        assert [r[0] for r in rows] == ["default|qq|群|2", "default|tg|tg:private:1|1"]
        assert all(str(r[1]).startswith("1970-01-01") for r in rows)
        assert store.claim_delivery("default|qq|群|2") is False and store.claim_delivery("default|qq|群|3") is True
        assert inspect(store.engine).has_table("seen_nonces", schema=schema)
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_revision_0012_adds_the_console_sessions_table_and_its_downgrade_drops_it(backend, tmp_path, request):
    """A database at 0011 (no console_sessions) upgrades to a working sessions table with its two
    indices, the schema equal to a fresh one; a downgrade to 0011 drops it and a second upgrade restores it."""
    from alembic import command

    from memory.store import migrate

    url, schema = _raw(backend, tmp_path, request)
    store = Store(url, schema=schema, migrate=False)
    try:
        with store.engine.begin() as conn:
            command.upgrade(migrate.config(conn, schema), "0011_event_dead_letters")
        assert not inspect(store.engine).has_table("console_sessions", schema=schema)
        assert store.upgrade_schema() == ("0011_event_dead_letters", head())
        assert {i["name"] for i in inspect(store.engine).get_indexes("console_sessions", schema=schema)} == {
            "ix_console_sessions_key", "ix_console_sessions_expires_at"}
        assert _drift(store) == []
        key = store.create_api_key("default", "admin")[0]
        sid = store.open_console_session("default", key.key_id, 60)
        assert store.console_session("default", key.key_id, sid) == key
        with store.engine.begin() as conn:
            command.downgrade(migrate.config(conn, schema), "0011_event_dead_letters")
        assert not inspect(store.engine).has_table("console_sessions", schema=schema)
        assert store.upgrade_schema() == ("0011_event_dead_letters", head())
        assert store.console_session("default", key.key_id, sid) is None  # the downgrade ended it
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_revision_0014_adds_the_console_secrets_table_and_its_downgrade_drops_it(backend, tmp_path, request):
    """A database at 0013 (no console_secrets) upgrades to a working table, the schema equal to a fresh
    one; a downgrade to 0013 drops it and a second upgrade restores it, empty."""
    from alembic import command

    from memory.store import migrate

    url, schema = _raw(backend, tmp_path, request)
    store = Store(url, schema=schema, migrate=False)
    try:
        with store.engine.begin() as conn:
            command.upgrade(migrate.config(conn, schema), "0013_memory_event_end")
        assert not inspect(store.engine).has_table("console_secrets", schema=schema)
        assert store.upgrade_schema() == ("0013_memory_event_end", head())
        assert _drift(store) == []
        assert store.note_console_secret("a" * 32, "f" * 64, 60) == set()
        assert store.note_console_secret("b" * 32, "e" * 64, 60) == {"f" * 64}
        with store.engine.begin() as conn:
            command.downgrade(migrate.config(conn, schema), "0013_memory_event_end")
        assert not inspect(store.engine).has_table("console_secrets", schema=schema)
        assert store.upgrade_schema() == ("0013_memory_event_end", head())
        assert store.note_console_secret("b" * 32, "e" * 64, 60) == set()
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_revision_0016_adds_the_token_ledger_and_its_downgrade_drops_it(backend, tmp_path, request):
    """A database at 0015 (no token_ledger) upgrades to a working ledger, the schema equal to a fresh one; a
    downgrade to 0015 drops it and a second upgrade restores it, empty."""
    from datetime import date

    from alembic import command

    from memory.store import migrate

    url, schema = _raw(backend, tmp_path, request)
    store = Store(url, schema=schema, migrate=False)
    try:
        with store.engine.begin() as conn:
            command.upgrade(migrate.config(conn, schema), "0015_record_pauses")
        assert not inspect(store.engine).has_table("token_ledger", schema=schema)
        assert store.upgrade_schema() == ("0015_record_pauses", head())
        assert _drift(store) == []
        d = date(2026, 12, 6)
        assert store.record_tokens("default", "tg:1", "reply", "m", 10, 2, d) == 12
        assert store.record_tokens("default", "tg:1", "reply", "m", 10, 2, d) == 24
        with store.engine.begin() as conn:
            command.downgrade(migrate.config(conn, schema), "0015_record_pauses")
        assert not inspect(store.engine).has_table("token_ledger", schema=schema)
        assert store.upgrade_schema() == ("0015_record_pauses", head())
        assert store.tokens_spent("default", d) == 0
    finally:
        store.close()


def test_a_database_from_a_newer_version_is_refused_with_a_store_error(tmp_path):
    """A database stamped at a revision this code does not know (a newer huiyi wrote it) is not touched: StoreError."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    Store(url).close()
    with sqlite3.connect(tmp_path / "new.db") as con:
        con.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(StoreError, match="9999_from_the_future"):
        Store(url)


def test_huiyi_db_upgrade_reports_the_revisions(tmp_path, monkeypatch):
    """``huiyi db upgrade`` upgrades the configured database of the previous release
    and says from what to what; a second run says it is already at head; ``db current`` agrees."""
    from typer.testing import CliRunner

    from gateway.cli import app

    path = tmp_path / "cli.db"
    with sqlite3.connect(path) as con:
        con.executescript((PREVIOUS / "sqlite.sql").read_text(encoding="utf-8"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{path}")
    runner = CliRunner()
    first = runner.invoke(app, ["db", "upgrade"])
    assert first.exit_code == 0, first.output
    assert f"from an unversioned schema to revision {head()}" in first.stdout
    second = runner.invoke(app, ["db", "upgrade"])
    assert second.exit_code == 0 and f"already at revision {head()}" in second.stdout
    cur = runner.invoke(app, ["db", "current"])
    assert cur.exit_code == 0 and f"database revision: {head()}" in cur.stdout
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM memories").fetchone() == (5,)


def test_huiyi_db_on_a_fresh_data_dir_says_what_it_finds(tmp_path, monkeypatch):
    """``db current`` before any database exists says so and creates nothing; ``db upgrade`` then says it
    created a new database's tables (not "upgraded from an unversioned schema")."""
    from typer.testing import CliRunner

    from gateway.cli import app

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "fresh"))
    runner = CliRunner()
    cur = runner.invoke(app, ["db", "current"])
    assert cur.exit_code == 0 and "no database yet" in cur.stdout and f"head: {head()}" in cur.stdout
    assert not (tmp_path / "fresh" / "huiyi.db").exists()
    up = runner.invoke(app, ["db", "upgrade"])
    assert up.exit_code == 0 and f"new database: today's tables created at revision {head()}" in up.stdout
    cur = runner.invoke(app, ["db", "current"])
    assert cur.exit_code == 0 and f"database revision: {head()}" in cur.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_stores_opening_one_empty_database_at_once_both_get_the_schema(backend, tmp_path, request):
    """Two replicas starting together on one empty database: the schema is created
    once (advisory lock on PostgreSQL, BEGIN IMMEDIATE on SQLite), both open, and
    both see the other's writes."""
    from concurrent.futures import ThreadPoolExecutor

    url, schema = _raw(backend, tmp_path, request)
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    barrier = threading.Barrier(2)

    def open_store() -> Store:
        barrier.wait()
        return Store(url, schema=schema)

    with ThreadPoolExecutor(2) as pool:
        a, b = [f.result(timeout=60) for f in [pool.submit(open_store) for _ in range(2)]]
    try:
        assert a.schema_revision() == b.schema_revision() == head()
        assert a.claim_delivery("default|tg|tg:private:1|一") is True
        assert b.claim_delivery("default|tg|tg:private:1|一") is False
    finally:
        a.close()
        b.close()


def test_four_stores_opening_one_new_sqlite_file_together_never_see_it_locked(tmp_path):
    """Regression: the first ``PRAGMA journal_mode=WAL`` on a new file can answer
    "database is locked" at once while another connection creates the schema; a
    store retries it instead of failing to open (four at once, ten new files)."""
    from concurrent.futures import ThreadPoolExecutor

    for i in range(10):
        url = f"sqlite:///{tmp_path / f'new{i}.db'}"
        barrier = threading.Barrier(4)

        def open_store() -> Store:
            barrier.wait()
            return Store(url)

        with ThreadPoolExecutor(4) as pool:
            stores = [f.result(timeout=60) for f in [pool.submit(open_store) for _ in range(4)]]
        try:
            assert {s.schema_revision() for s in stores} == {head()}
        finally:
            for s in stores:
                s.close()


def test_revision_0023_keeps_the_outbox_rows_and_never_gives_an_id_twice(tmp_path):
    """SQLite at 0022: a deleted outbox row's id is given again (the largest rowid's). Upgraded to 0023,
    the pending rows keep their ids and a deleted id never comes back; a downgrade gives back the table
    that reuses ids, rows kept, and the next upgrade makes it AUTOINCREMENT again."""
    from alembic import command

    from memory.store import migrate

    url, _ = _raw("sqlite", tmp_path, None)
    store = Store(url, migrate=False)
    now = datetime(2026, 12, 7, tzinfo=timezone.utc)

    def add_op(memory_id: str) -> int:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO index_outbox (namespace, memory_id, op, attempts, created_at) "
                              "VALUES ('default/tg:1', :m, 'upsert', 0, :at)"), {"m": memory_id, "at": now})
            return conn.execute(text("SELECT max(id) FROM index_outbox")).scalar_one()

    def delete_op(op_id: int) -> None:
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM index_outbox WHERE id = :i"), {"i": op_id})

    def rows() -> list[tuple]:
        with store.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text("SELECT id, memory_id FROM index_outbox ORDER BY id"))]

    try:
        with store.engine.begin() as conn:
            command.upgrade(migrate.config(conn, None), "0022_trace_last_recall_in_state")
        first, second = add_op("a1"), add_op("b2")
        delete_op(second)
        assert add_op("c3") == second  # before: the deleted id is given again
        assert store.upgrade_schema() == ("0022_trace_last_recall_in_state", head())
        assert rows() == [(first, "a1"), (second, "c3")] and _drift(store) == []
        delete_op(second)
        assert add_op("d4") == second + 1  # after: never again
        assert [o.memory_id for o in store.pending_ops(10)] == ["a1", "d4"]
        with store.engine.begin() as conn:
            command.downgrade(migrate.config(conn, None), "0022_trace_last_recall_in_state")
        assert rows() == [(first, "a1"), (second + 1, "d4")]
        delete_op(second + 1)
        assert add_op("e5") == second  # downgraded: the largest id is given again
        assert store.upgrade_schema() == ("0022_trace_last_recall_in_state", head())
        delete_op(second)
        assert add_op("f6") == second + 1
    finally:
        store.close()
