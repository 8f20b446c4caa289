"""``memories.context``: the chat line each memory's message answered
(``memory.types.Memory.context``), searched with the memory's text so that an
elliptical answer ("Yes, last week!", 「对，超好玩」) is found by the topic of
the line it answered (issue 11: recall quality).

Not null, ``''`` for every row written before this revision (they had no
context, and are searched by their text alone as before). Added when missing (a
database whose ``memories`` table ``create_all`` built with the column is left
as it is). Downgrade drops it.

Revision ID: 0008_memory_context
Revises: 0007_memory_entities
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_memory_context"
down_revision: str | Sequence[str] | None = "0007_memory_entities"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("memories", schema=_schema())}
    if "context" in have:
        return
    with op.batch_alter_table("memories", schema=_schema(), recreate="never") as batch:
        batch.add_column(sa.Column("context", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("memories", schema=_schema()) as batch:
        batch.drop_column("context")
