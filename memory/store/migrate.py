"""The store's schema, owned by Alembic (``memory/store/migrations``), driven
programmatically: no ``alembic.ini`` is read at run time.

``prepare`` runs whenever a ``Store`` opens:

- an empty database (none of the store's tables, no ``alembic_version``) gets
  today's tables from the SQLModel metadata and is stamped at the head revision
  (the cheap path every test's fresh database takes; the tables are the ones the
  revisions build, which a test checks on both databases);
- a database at the head is left alone (one query);
- any other one — an older revision, or tables an older huiyi wrote before
  Alembic (no ``alembic_version``: the baseline adopts them) — is upgraded to
  the head through ``env.py``.

All of it runs in one write transaction: ``BEGIN IMMEDIATE`` on SQLite, and on
PostgreSQL an advisory transaction lock first, so that two replicas starting
at once on one database do not both create or upgrade it (DDL is
transactional on both databases: a failed upgrade leaves nothing half-done).

Errors: ``sqlalchemy`` errors propagate (``StoreBase`` turns them into
StoreError); a database at a revision this code does not know raises
``alembic.util.CommandError`` (a newer huiyi wrote it).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlmodel import SQLModel

import memory.store.tables  # noqa: F401 - registers the tables on SQLModel.metadata

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
"""The Alembic script directory (``env.py``, ``versions/``)."""
PG_LOCK_KEY = 0x68756979  # "huiy": the advisory lock that serialises schema changes on PostgreSQL


def config(connection: Connection | None = None, schema: str | None = None) -> Config:
    """An Alembic ``Config`` for the store's scripts; ``connection`` and ``schema``
    are handed to ``env.py`` (``config.attributes``)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = connection
    cfg.attributes["schema"] = schema
    return cfg


@functools.cache
def scripts() -> ScriptDirectory:
    """The revisions (read once per process)."""
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The head revision id of this code (e.g. ``0001_baseline``)."""
    rev = scripts().get_current_head()
    assert rev is not None
    return rev


def current(conn: Connection, schema: str | None = None) -> str | None:
    """The revision the database is stamped at; None when it has no
    ``alembic_version`` (empty, or written before Alembic)."""
    return MigrationContext.configure(conn, opts={"version_table_schema": schema}).get_current_revision()


def lock(conn: Connection) -> None:
    """On PostgreSQL take the schema advisory lock for this transaction (no-op on SQLite)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK_KEY})


def is_new(conn: Connection, schema: str | None = None) -> bool:
    """Whether the database on ``conn`` holds none of huiyi's tables."""
    return not set(inspect(conn).get_table_names(schema=schema)) & set(SQLModel.metadata.tables)


def upgrade(conn: Connection, schema: str | None = None) -> tuple[str | None, str]:
    """Upgrade the database on ``conn`` (inside the caller's transaction) to the
    head; returns (revision before, revision after)."""
    lock(conn)
    before = current(conn, schema)
    if before != head():
        new = before is None and is_new(conn, schema)
        command.upgrade(config(conn, schema), "head")
        if new:  # nothing to warn about: a new database got its tables
            log.info("store: new database, its tables built up to revision %s", head())
        else:
            log.warning("store: schema upgraded from %s to %s", before or "an unversioned database", head())
    return before, head()


def prepare(conn: Connection, schema: str | None = None) -> None:
    """What a store does when it opens (module docstring), inside the caller's
    write transaction on ``conn``."""
    lock(conn)
    before = current(conn, schema)
    if before == head():
        return
    if before is None and is_new(conn, schema):
        SQLModel.metadata.create_all(conn)
        MigrationContext.configure(conn, opts={"version_table_schema": schema}).stamp(scripts(), "head")
        return
    upgrade(conn, schema)
