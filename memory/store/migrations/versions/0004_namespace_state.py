"""The ``namespace_state`` table: each namespace's write version and live count
(issue 14). Recall's in-process cache is stamped with the version and reloads
when it changed, in whatever process the write happened; the live count picks
the recall path without reading the namespace's rows.

Created when missing and filled from ``memories`` (version 1, live = its rows
per namespace); a database that already has it (made by ``create_all`` before
this revision was stamped) is left as it is. Downgrade drops it: it is derived.

Revision ID: 0004_namespace_state
Revises: 0003_api_keys
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_namespace_state"
down_revision: str | Sequence[str] | None = "0003_api_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("namespace_state", schema=op.get_context().version_table_schema):
        return
    state = op.create_table(
        "namespace_state",
        sa.Column("namespace", sa.String(length=260), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("live", sa.Integer(), nullable=False),
    )
    memories = sa.table("memories", sa.column("namespace", sa.String()))
    op.execute(state.insert().from_select(
        ["namespace", "version", "live"],
        sa.select(memories.c.namespace, sa.literal(1), sa.func.count()).group_by(memories.c.namespace)))


def downgrade() -> None:
    op.drop_table("namespace_state")
