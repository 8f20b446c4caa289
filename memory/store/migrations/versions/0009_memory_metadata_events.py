"""``memories.meta`` and the ``change_events`` outbox (issue 26 item 17: the
memory API's metadata and change events).

``memories.meta``: the caller's tags of a memory (``memory.metadata``), compact
key-sorted JSON, not null, ``'{}'`` for every row written before this revision.
``change_events``: change events owed to the tenants' webhooks
(``memory.store.events``), with an index on ``(due_at, id)`` for the sender's
scan. Each is added when missing (a database that ``create_all`` built with
them is left as it is). Downgrade drops both — the metadata and the events not
yet delivered with them.

Revision ID: 0009_memory_metadata_events
Revises: 0008_memory_context
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_memory_metadata_events"
down_revision: str | Sequence[str] | None = "0008_memory_context"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "meta" not in {c["name"] for c in inspector.get_columns("memories", schema=_schema())}:
        with op.batch_alter_table("memories", schema=_schema(), recreate="never") as batch:
            batch.add_column(sa.Column("meta", sa.String(), nullable=False, server_default="{}"))
    if not inspector.has_table("change_events", schema=_schema()):
        op.create_table(
            "change_events",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("tenant", sa.String(length=64), nullable=False),
            sa.Column("namespace", sa.String(length=260), nullable=False),
            sa.Column("memory_id", sa.String(length=32), nullable=False),
            sa.Column("event", sa.String(length=32), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
        )
        op.create_index("ix_change_events_due", "change_events", ["due_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_change_events_due", table_name="change_events")
    op.drop_table("change_events")
    with op.batch_alter_table("memories", schema=_schema()) as batch:
        batch.drop_column("meta")
