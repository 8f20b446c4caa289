"""``memories.entities``: what each memory's text names
(``memory.links.stored_entities``), written with the text, so that entity
linking at add time reads it instead of part-of-speech tagging every older
memory that mentions an entity again (issue 14: the capture throughput that
entity links had halved).

Nullable and not back-filled: a row written before this revision reads NULL
and entity linking tags its text as it did before. Added when missing (a
database whose ``memories`` table ``create_all`` built with the column is left
as it is). Downgrade drops it: it is derived from the text.

Revision ID: 0007_memory_entities
Revises: 0006_namespace_changes
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_memory_entities"
down_revision: str | Sequence[str] | None = "0006_namespace_changes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("memories", schema=_schema())}
    if "entities" in have:
        return
    with op.batch_alter_table("memories", schema=_schema(), recreate="never") as batch:
        batch.add_column(sa.Column("entities", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memories", schema=_schema()) as batch:
        batch.drop_column("entities")
