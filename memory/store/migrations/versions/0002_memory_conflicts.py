"""The ``memory_conflicts`` table: pairs of live memories of one namespace that
may contradict each other, kept both and told as a change (issue 12 item 10).

Created when missing (a database at the baseline); a database that already
has it (made by ``create_all`` before this revision was stamped) is left as
it is. Downgrade drops it: the links are derived from the memories and are
judged again as memories change.

Revision ID: 0002_memory_conflicts
Revises: 0001_baseline
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_memory_conflicts"
down_revision: str | Sequence[str] | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("memory_conflicts", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "memory_conflicts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("namespace", sa.String(length=260), nullable=False),
        sa.Column("older_id", sa.String(length=32), nullable=False),
        sa.Column("newer_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("namespace", "older_id", "newer_id", name="uq_memory_conflict"),
    )
    op.create_index("ix_memory_conflicts_namespace", "memory_conflicts", ["namespace"])


def downgrade() -> None:
    op.drop_index("ix_memory_conflicts_namespace", table_name="memory_conflicts")
    op.drop_table("memory_conflicts")
