"""Follow-ups the person agreed to (issue 39 item 2): ``followup_prefs`` (a
person's ``/memory followups on|off``) and ``followups`` (one question owed
about a past plan: its memory id, chat, due time and state; unique per
namespace and memory, and per person and local day once claimed). Ids and
times only: no memory text.

Created when missing (a database ``create_all`` built with them is left as it
is). Downgrade drops both: every opt-in is forgotten (off, the default) and
nothing more is asked.

Revision ID: 0020_followups
Revises: 0019_recall_floors
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_followups"
down_revision: str | Sequence[str] | None = "0019_recall_floors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = sa.inspect(op.get_bind())
    if not have.has_table("followup_prefs", schema=_schema()):
        op.create_table(
            "followup_prefs",
            sa.Column("namespace", sa.String(length=260), primary_key=True),
            sa.Column("tenant", sa.String(length=64), nullable=False),
            sa.Column("enabled", sa.Boolean(), nullable=False),
            sa.Column("lang", sa.String(length=16), nullable=False),
            sa.Column("bot_id", sa.String(length=128), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            schema=_schema(),
        )
        op.create_index("ix_followup_prefs_tenant", "followup_prefs", ["tenant"], schema=_schema())
    if not have.has_table("followups", schema=_schema()):
        op.create_table(
            "followups",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("tenant", sa.String(length=64), nullable=False),
            sa.Column("namespace", sa.String(length=260), nullable=False),
            sa.Column("memory_id", sa.String(length=32), nullable=False),
            sa.Column("chat", sa.String(length=300), nullable=False),
            sa.Column("state", sa.String(length=16), nullable=False),
            sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("holder", sa.String(length=128), nullable=True),
            sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("day_key", sa.String(length=300), nullable=True),
            sa.Column("last_error", sa.String(length=200), nullable=False),
            sa.UniqueConstraint("namespace", "memory_id", name="uq_followups_memory"),
            schema=_schema(),
        )
        op.create_index("ix_followups_day_key", "followups", ["day_key"], unique=True, schema=_schema())
        op.create_index("ix_followups_due", "followups", ["state", "due_at"], schema=_schema())


def downgrade() -> None:
    op.drop_index("ix_followups_due", table_name="followups", schema=_schema())
    op.drop_index("ix_followups_day_key", table_name="followups", schema=_schema())
    op.drop_table("followups", schema=_schema())
    op.drop_index("ix_followup_prefs_tenant", table_name="followup_prefs", schema=_schema())
    op.drop_table("followup_prefs", schema=_schema())
