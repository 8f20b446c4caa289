"""``namespace_state.changes``: the change log of each namespace in its state row
(which memories its last write versions changed), written by the upsert that
bumps the version — one row per memory write instead of two (and the log rows'
later prune). ``namespace_changes`` is dropped: its entries are not carried
over, so a cache stamped before the upgrade reads its namespace's stamps once
(what it does for any version the log no longer holds).

The column is added nullable (NULL: nothing logged yet) when missing.
Downgrade recreates ``namespace_changes`` empty and drops the column; the
release before then reads stamps until its log fills again.

Revision ID: 0018_changes_in_state
Revises: 0017_delivery_fingerprint
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_changes_in_state"
down_revision: str | Sequence[str] | None = "0017_delivery_fingerprint"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "changes" not in {c["name"] for c in inspector.get_columns("namespace_state", schema=_schema())}:
        with op.batch_alter_table("namespace_state", schema=_schema(), recreate="never") as batch:
            batch.add_column(sa.Column("changes", sa.String(), nullable=True))
    if inspector.has_table("namespace_changes", schema=_schema()):
        op.drop_table("namespace_changes", schema=_schema())


def downgrade() -> None:
    op.create_table(
        "namespace_changes",
        sa.Column("namespace", sa.String(length=260), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("memory_id", sa.String(length=32), primary_key=True),
        schema=_schema(),
    )
    with op.batch_alter_table("namespace_state", schema=_schema()) as batch:
        batch.drop_column("changes")
