"""The ``floors`` column of ``last_recall``: the relevance floors of a
namespace's last recall and the best few candidates each dropped, with their
scores (``memory.explain.Miss``), so "why not recalled" can say "below the
relevance floor (score 0.71, floor 0.84)". Ids and numbers only, in the one row
the namespace already has: no row per turn.

Added when missing (``create_all`` may have made it before this revision was
stamped); a row written before it reads "{}" (no floors kept). Downgrade drops it.

Revision ID: 0019_recall_floors
Revises: 0018_changes_in_state
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_recall_floors"
down_revision: str | Sequence[str] | None = "0018_changes_in_state"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("last_recall", schema=_schema()):
        return  # tables newer than the stamp: 0022 moved the traces into namespace_state
    have = {c["name"] for c in inspector.get_columns("last_recall", schema=_schema())}
    if "floors" in have:
        return
    with op.batch_alter_table("last_recall", schema=_schema(), recreate="never") as batch:
        batch.add_column(sa.Column("floors", sa.String(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("last_recall", schema=_schema()) as batch:
        batch.drop_column("floors")
