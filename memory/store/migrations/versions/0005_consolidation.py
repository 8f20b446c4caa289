"""The tables of consolidation and association (issue 17): ``memory_links``
(weighted links between two memories of one namespace), ``consolidated`` (what
makes a memory a consolidated one: type, confidence, hits, sources, dormancy)
and ``consolidation_state`` (each namespace's last run and watermark).

Each is created when missing; one that already exists (made by ``create_all``
before this revision was stamped) is left as it is. Downgrade drops them: links
and state are derived, and a consolidated memory's row in ``memories`` stays
(it becomes an ordinary memory).

Revision ID: 0005_consolidation
Revises: 0004_namespace_state
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_consolidation"
down_revision: str | Sequence[str] | None = "0004_namespace_state"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _missing(table: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(table, schema=op.get_context().version_table_schema)


def upgrade() -> None:
    if _missing("memory_links"):
        op.create_table(
            "memory_links",
            sa.Column("id", sa.Integer(), primary_key=True),
            sa.Column("namespace", sa.String(length=260), nullable=False),
            sa.Column("a_id", sa.String(length=32), nullable=False),
            sa.Column("b_id", sa.String(length=32), nullable=False),
            sa.Column("weight", sa.Float(), nullable=False),
            sa.Column("reasons", sa.String(length=64), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.UniqueConstraint("namespace", "a_id", "b_id", name="uq_memory_link"),
        )
        op.create_index("ix_memory_links_namespace_a", "memory_links", ["namespace", "a_id"])
        op.create_index("ix_memory_links_namespace_b", "memory_links", ["namespace", "b_id"])
    if _missing("consolidated"):
        op.create_table(
            "consolidated",
            sa.Column("memory_id", sa.String(length=32), primary_key=True),
            sa.Column("namespace", sa.String(length=260), nullable=False),
            sa.Column("ctype", sa.String(length=16), nullable=False),
            sa.Column("confidence", sa.Float(), nullable=False),
            sa.Column("hits", sa.Integer(), nullable=False),
            sa.Column("last_hit_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("dormant_since", sa.DateTime(timezone=True), nullable=True),
            sa.Column("sources", sa.String(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        )
        op.create_index("ix_consolidated_namespace", "consolidated", ["namespace"])
    if _missing("consolidation_state"):
        op.create_table(
            "consolidation_state",
            sa.Column("namespace", sa.String(length=260), primary_key=True),
            sa.Column("run_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("watermark", sa.DateTime(timezone=True), nullable=True),
            sa.Column("clusters", sa.Integer(), nullable=False),
            sa.Column("abstractions", sa.Integer(), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("consolidation_state")
    op.drop_index("ix_consolidated_namespace", table_name="consolidated")
    op.drop_table("consolidated")
    op.drop_index("ix_memory_links_namespace_b", table_name="memory_links")
    op.drop_index("ix_memory_links_namespace_a", table_name="memory_links")
    op.drop_table("memory_links")
