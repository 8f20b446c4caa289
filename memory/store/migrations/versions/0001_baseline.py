"""Baseline: the store's schema as of the move to Alembic (issue 15).

On an empty database it creates every table. On a database written before
Alembic (no ``alembic_version``, tables of some older huiyi) it adopts what is
there: tables missing are created, columns added since are added, indexes
added since are created; nothing is dropped or changed, and no row is lost.
Unique constraints are not added to old tables: each has existed since its
table was first released.

A column added to a table with rows needs a value for them. NOT NULL columns
get one by type, spelt so that both databases accept it (the hand-written
upgrader this replaces wrote ``DEFAULT 0`` for every non-text column, which
PostgreSQL refuses for a timestamp): ``''`` for text, ``0`` for numbers, and
the Unix epoch for timestamps ("time unknown"). On PostgreSQL that default is
dropped again once the rows have it, so the column ends up as a fresh
database's; SQLite cannot drop a default in place and keeps it (the store
always writes the column).

The table definitions are frozen here on purpose: a later change to
``memory/store/tables.py`` needs a revision of its own.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_baseline"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("memory.store.migrate")

#: values for the rows of a table that gains a NOT NULL column, per dialect
_EPOCH = {"postgresql": "1970-01-01 00:00:00+00", "sqlite": "1970-01-01 00:00:00.000000"}


def _s(length: int | None = None) -> sa.String:
    return sa.String(length=length)


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _tables(meta: sa.MetaData) -> list[sa.Table]:
    """Today's tables (as SQLModel creates them from ``memory/store/tables.py``)."""
    C = sa.Column
    return [
        sa.Table("audit_log", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("at", _ts(), nullable=False),
                 C("actor", _s(200), nullable=False),
                 C("action", _s(32), nullable=False, index=True),
                 C("namespace", _s(260), nullable=False, index=True),
                 C("memory_id", _s(), nullable=True),
                 C("detail", _s(), nullable=False)),
        sa.Table("chat_log", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("tenant", _s(64), nullable=False),
                 C("chat", _s(300), nullable=False),
                 C("role", _s(16), nullable=False),
                 C("sender_id", _s(), nullable=False),
                 C("sender_name", _s(), nullable=False),
                 C("message_id", _s(), nullable=False),
                 C("text", _s(), nullable=False),
                 C("at", _ts(), nullable=False),
                 C("capture_ns", _s(260), nullable=False),
                 C("capture_queued", _ts(), nullable=True, index=True),
                 sa.Index("ix_chat_log_chat", "tenant", "chat", "id")),
        sa.Table("chat_redactions", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("tenant", _s(64), nullable=False),
                 C("chat", _s(300), nullable=False),
                 C("message_id", _s(128), nullable=False),
                 C("sender_id", _s(128), nullable=False),
                 C("at", _ts(), nullable=False),
                 sa.UniqueConstraint("tenant", "chat", "message_id", "sender_id", name="uq_chat_redaction")),
        sa.Table("deliveries", meta,
                 C("key", _s(600), primary_key=True),
                 C("processed_at", _ts(), nullable=False)),
        sa.Table("identities", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("tenant", _s(64), nullable=False),
                 C("platform_subject", _s(200), nullable=False),
                 C("subject", _s(200), nullable=False, index=True),
                 C("linked_at", _ts(), nullable=False),
                 C("actor", _s(200), nullable=False),
                 sa.UniqueConstraint("tenant", "platform_subject", name="uq_identity")),
        sa.Table("index_outbox", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("namespace", _s(260), nullable=False),
                 C("memory_id", _s(32), nullable=False),
                 C("op", _s(8), nullable=False),
                 C("attempts", sa.Integer(), nullable=False),
                 C("created_at", _ts(), nullable=False)),
        sa.Table("last_recall", meta,
                 C("namespace", _s(260), primary_key=True),
                 C("tenant", _s(64), nullable=False, index=True),
                 C("chat", _s(300), nullable=False),
                 C("at", _ts(), nullable=False),
                 C("k", sa.Integer(), nullable=False),
                 C("fallback_reason", _s(), nullable=False),
                 C("entries", _s(), nullable=False)),
        sa.Table("memories", meta,
                 C("id", _s(32), primary_key=True),
                 C("namespace", _s(260), nullable=False, index=True),
                 C("tenant", _s(64), nullable=False, index=True),
                 C("text", _s(), nullable=False),
                 C("norm", _s(), nullable=False),
                 C("category", _s(), nullable=False),
                 C("key", _s(512), nullable=False),
                 C("importance", sa.Float(), nullable=False),
                 C("valence", sa.Float(), nullable=False),
                 C("arousal", sa.Float(), nullable=False),
                 C("emotion", _s(), nullable=False),
                 C("origin", _s(), nullable=False),
                 C("visibility", _s(), nullable=False),
                 C("source_message_id", _s(), nullable=True),
                 C("created_at", _ts(), nullable=False),
                 C("updated_at", _ts(), nullable=False),
                 C("valid_from", _ts(), nullable=False),
                 C("event_time", _ts(), nullable=True),
                 C("version", sa.Integer(), nullable=False),
                 C("access_times", _s(), nullable=False),
                 C("source_fp", _s(64), nullable=False),
                 sa.UniqueConstraint("namespace", "key", name="uq_memories_namespace_key"),
                 sa.Index("ix_memories_namespace_updated", "namespace", "updated_at")),
        sa.Table("memory_history", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("memory_id", _s(32), nullable=False, index=True),
                 C("namespace", _s(260), nullable=False, index=True),
                 C("version", sa.Integer(), nullable=False),
                 C("text", _s(), nullable=False),
                 C("category", _s(), nullable=False),
                 C("key", _s(), nullable=False),
                 C("origin", _s(), nullable=False),
                 C("visibility", _s(), nullable=False),
                 C("source_message_id", _s(), nullable=True),
                 C("source_fp", _s(64), nullable=False),
                 C("valid_from", _ts(), nullable=False),
                 C("valid_to", _ts(), nullable=False)),
        sa.Table("pending_confirmations", meta,
                 C("key", _s(600), primary_key=True),
                 C("namespace", _s(260), nullable=False, index=True),
                 C("created_at", _ts(), nullable=False)),
        sa.Table("seen_nonces", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("tenant", _s(64), nullable=False),
                 C("platform", _s(32), nullable=False),
                 C("nonce", _s(128), nullable=False),
                 C("digest", _s(128), nullable=False),
                 C("seen_at", _ts(), nullable=False),
                 sa.UniqueConstraint("tenant", "platform", "nonce", name="uq_seen_nonce"),
                 sa.Index("ix_seen_nonces_seen_at", "seen_at")),
        sa.Table("tombstones", meta,
                 C("id", sa.Integer(), primary_key=True),
                 C("namespace", _s(260), nullable=False, index=True),
                 C("fingerprint", _s(64), nullable=False),
                 C("forgotten_at", _ts(), nullable=False),
                 sa.UniqueConstraint("namespace", "fingerprint", name="uq_tombstone")),
    ]


def _fill(col: sa.Column, dialect: str) -> sa.TextClause:
    """The server default that gives existing rows a value for NOT NULL ``col``."""
    if isinstance(col.type, sa.DateTime):
        return sa.text(f"'{_EPOCH.get(dialect, _EPOCH['postgresql'])}'")
    if isinstance(col.type, (sa.Integer, sa.Float)):
        return sa.text("0")
    return sa.text("''")


def _adopt(bind: sa.Connection, table: sa.Table, schema: str | None) -> None:
    """Bring an existing table of an older huiyi up to ``table``: missing columns
    and indexes are added (module docstring)."""
    insp = sa.inspect(bind)
    have = {c["name"] for c in insp.get_columns(table.name, schema=schema)}
    dialect = bind.dialect.name
    for col in table.columns:
        if col.name in have:
            continue
        new = sa.Column(col.name, col.type, nullable=col.nullable,
                        server_default=None if col.nullable else _fill(col, dialect))
        with op.batch_alter_table(table.name, schema=schema, recreate="never") as batch:
            batch.add_column(new)
        if not col.nullable and dialect == "postgresql":
            op.alter_column(table.name, col.name, server_default=None, schema=schema)
        log.warning("store: added column %s.%s (database of an older huiyi)", table.name, col.name)
    indexes = {i["name"] for i in insp.get_indexes(table.name, schema=schema)}
    for index in table.indexes:
        if index.name not in indexes:
            op.create_index(index.name, table.name, [c.name for c in index.columns], unique=bool(index.unique),
                            schema=schema)


def upgrade() -> None:
    """Create today's tables; adopt those an older huiyi left (module docstring)."""
    bind = op.get_bind()
    schema = op.get_context().version_table_schema
    insp = sa.inspect(bind)
    # unqualified: a PostgreSQL store's connections put its schema first on the search path
    # (and index names stay ix_<table>_<column>, not ix_<schema>_<table>_<column>)
    for table in _tables(sa.MetaData()):
        if insp.has_table(table.name, schema=schema):
            _adopt(bind, table, schema)
        else:
            table.create(bind)


def downgrade() -> None:
    """Drop every table of the store (all data goes with them)."""
    bind = op.get_bind()
    schema = op.get_context().version_table_schema
    for table in reversed(_tables(sa.MetaData())):
        if sa.inspect(bind).has_table(table.name, schema=schema):
            table.drop(bind)
