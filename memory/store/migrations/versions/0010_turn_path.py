"""The turn path's columns (issue 29, items 2 and 3).

``namespace_state.links`` / ``conflicts`` / ``dormant``: how many association
links, conflict links and dormant marks each namespace was given, so that
recall skips the reads of a namespace that has none of them.

Added nullable when missing; each existing row is filled with what its
namespace holds now (a count per table). A row written later without them —
by a tool that inserts ``namespace_state`` rows itself — stays NULL, which
recall reads as "unknown" and treats as "some".

``chat_log.vector`` / ``vector_key``: the embedding a turn computed for its
person's line (float32 bytes) and what made it (``<embedder>/<dim>/<text
hash>``), so that the next turns reuse it for that line instead of a second
model call; NULL / ``''`` on every older line. Downgrade drops all five.

Revision ID: 0010_turn_path
Revises: 0009_memory_metadata_events
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_turn_path"
down_revision: str | Sequence[str] | None = "0009_memory_metadata_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("links", "conflicts", "dormant")


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    lines = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("chat_log", schema=_schema())}
    if not {"vector", "vector_key"} <= lines:
        with op.batch_alter_table("chat_log", schema=_schema(), recreate="never") as batch:
            if "vector" not in lines:
                batch.add_column(sa.Column("vector", sa.LargeBinary(), nullable=True))
            if "vector_key" not in lines:
                batch.add_column(sa.Column("vector_key", sa.String(), nullable=False, server_default=""))
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("namespace_state", schema=_schema())}
    if set(COLUMNS) <= have:
        return
    with op.batch_alter_table("namespace_state", schema=_schema(), recreate="never") as batch:
        for name in COLUMNS:
            if name not in have:
                batch.add_column(sa.Column(name, sa.Integer(), nullable=True))
    state = sa.table("namespace_state", sa.column("namespace", sa.String()), *(sa.column(c, sa.Integer())
                                                                             for c in COLUMNS), schema=_schema())
    links = sa.table("memory_links", sa.column("namespace", sa.String()), schema=_schema())
    conflicts = sa.table("memory_conflicts", sa.column("namespace", sa.String()), schema=_schema())
    consolidated = sa.table("consolidated", sa.column("namespace", sa.String()),
                            sa.column("dormant_since", sa.DateTime()), schema=_schema())

    def count(table, *where):
        return sa.select(sa.func.count()).select_from(table).where(
            table.c.namespace == state.c.namespace, *where).scalar_subquery()

    op.execute(state.update().values(links=count(links), conflicts=count(conflicts),
                                     dormant=count(consolidated, consolidated.c.dormant_since.is_not(None))))


def downgrade() -> None:
    with op.batch_alter_table("namespace_state", schema=_schema()) as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("chat_log", schema=_schema()) as batch:
        batch.drop_column("vector_key")
        batch.drop_column("vector")
