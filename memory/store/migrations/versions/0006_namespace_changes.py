"""``namespace_changes``: which memories each write version of a namespace
changed (issue 14), so that recall's cache reloads only those rows instead of
reading the stamp of every row of the namespace after each write.

Created when missing (one made by ``create_all`` before this revision was
stamped is left as it is). Empty at first: a cache stamped before the upgrade
finds no log for its version and reloads the namespace's stamps as before.
Downgrade drops it: it is derived.

Revision ID: 0006_namespace_changes
Revises: 0005_consolidation
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_namespace_changes"
down_revision: str | Sequence[str] | None = "0005_consolidation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("namespace_changes", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "namespace_changes",
        sa.Column("namespace", sa.String(length=260), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("memory_id", sa.String(length=32), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("namespace_changes")
