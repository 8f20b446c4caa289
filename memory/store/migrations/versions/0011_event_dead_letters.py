"""Change events that are never lost, with ids unique for the life of the store.

``change_events.uid``: the event's id for the receiver (``webhook-id:
evt_<uid>``), random for every new event; a row already waiting gets its
``id`` as text, so its ``webhook-id`` stays ``evt_<id>`` across the upgrade
(a receiver that saw an attempt de-duplicates the next). Unique.
``holder``: the sender that holds a row's claim (NULL: unclaimed).
``last_error`` / ``dead_at``: a delivery given up is kept as a dead letter
with its last failure, until an operator replays it.

Each is added when missing (a database that ``create_all`` built with them is
left as it is). Downgrade drops them, dead letters included (the old code
would deliver them again: they are deleted first).

Revision ID: 0011_event_dead_letters
Revises: 0010_turn_path
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_event_dead_letters"
down_revision: str | Sequence[str] | None = "0010_turn_path"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("change_events", schema=_schema())}
    if {"uid", "holder", "last_error", "dead_at"} <= have:
        return
    with op.batch_alter_table("change_events", schema=_schema(), recreate="never") as batch:
        if "uid" not in have:
            batch.add_column(sa.Column("uid", sa.String(length=32), nullable=True))
        if "holder" not in have:
            batch.add_column(sa.Column("holder", sa.String(length=96), nullable=True))
        if "last_error" not in have:
            batch.add_column(sa.Column("last_error", sa.String(length=200), nullable=False, server_default=""))
        if "dead_at" not in have:
            batch.add_column(sa.Column("dead_at", sa.DateTime(timezone=True), nullable=True))
    events = sa.table("change_events", sa.column("id", sa.Integer()), sa.column("uid", sa.String()),
                      schema=_schema())
    op.execute(events.update().where(events.c.uid.is_(None)).values(uid=sa.cast(events.c.id, sa.String())))
    # SQLite cannot make a column NOT NULL in place: batch mode copies the table
    with op.batch_alter_table("change_events", schema=_schema()) as batch:
        batch.alter_column("uid", existing_type=sa.String(length=32), nullable=False)
        batch.create_index("ix_change_events_uid", ["uid"], unique=True)


def downgrade() -> None:
    events = sa.table("change_events", sa.column("dead_at", sa.DateTime()), schema=_schema())
    op.execute(events.delete().where(events.c.dead_at.is_not(None)))
    with op.batch_alter_table("change_events", schema=_schema()) as batch:
        batch.drop_index("ix_change_events_uid")
        batch.drop_column("dead_at")
        batch.drop_column("last_error")
        batch.drop_column("holder")
        batch.drop_column("uid")
