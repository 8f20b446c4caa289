"""The ``console_sessions`` table: the admin console's open sessions, one row
per login (``memory.store.console_sessions``), so that a logout ends a session
on the server — on every replica — and not only in the browser that held it.

Created when missing; a database that already has it (made by ``create_all``
before this revision was stamped) is left as it is. Downgrade drops it, and
with it every open console session: the cookies issued before are refused
until their holders log in again.

Revision ID: 0012_console_sessions
Revises: 0011_event_dead_letters
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_console_sessions"
down_revision: str | Sequence[str] | None = "0011_event_dead_letters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("console_sessions", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "console_sessions",
        sa.Column("digest", sa.String(length=64), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_key", "console_sessions", ["tenant", "key_id"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_index("ix_console_sessions_key", table_name="console_sessions")
    op.drop_table("console_sessions")
