"""``namespace_state.marks``: recall's marks waiting in their namespace's state row
(``memory.store.pending``): each flush writes that one row instead of a
``memories`` row per marked memory and a ``memory_links`` row per co-recalled
pair, folded into them once it grows.

The column is added nullable (NULL: nothing waits) when missing. Downgrade
drops it: marks waiting there are lost (a ranking aid; at most the time since
their last fold).

Revision ID: 0021_marksrow_pending_marks
Revises: 0020_followups
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_marksrow_pending_marks"
down_revision: str | Sequence[str] | None = "0020_followups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    if "marks" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("namespace_state", schema=_schema())}:
        with op.batch_alter_table("namespace_state", schema=_schema(), recreate="never") as batch:
            batch.add_column(sa.Column("marks", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("namespace_state", schema=_schema()) as batch:
        batch.drop_column("marks")
