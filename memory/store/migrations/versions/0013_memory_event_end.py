"""``memories.event_end``: where the period a memory's event names ends
(``memory.types.Memory.event_end``: 「下个月搬家」 is January 2027, not 1 January),
an aware UTC instant, exclusive; NULL for a memory whose event is a day or has
no date (every row written before this revision: each was read as a day).

Added nullable when missing (a database whose ``memories`` table ``create_all``
built with the column is left as it is). Downgrade drops it.

Revision ID: 0013_memory_event_end
Revises: 0012_console_sessions
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_memory_event_end"
down_revision: str | Sequence[str] | None = "0012_console_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("memories", schema=_schema())}
    if "event_end" in have:
        return
    with op.batch_alter_table("memories", schema=_schema(), recreate="never") as batch:
        batch.add_column(sa.Column("event_end", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memories", schema=_schema()) as batch:
        batch.drop_column("event_end")
