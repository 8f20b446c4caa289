"""The ``record_pauses`` table: a person's "off the record" per chat
(``/memory pause``, ``memory.store.pauses``), ids and times only, so that every
replica stops learning from that person in that chat.

Created when missing; a database that already has it (made by ``create_all``
before this revision was stamped) is left as it is. Downgrade drops it: every
pause ends, and learning resumes.

Revision ID: 0015_record_pauses
Revises: 0014_console_secret
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_record_pauses"
down_revision: str | Sequence[str] | None = "0014_console_secret"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("record_pauses", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "record_pauses",
        sa.Column("key", sa.String(length=600), primary_key=True),
        sa.Column("namespace", sa.String(length=260), nullable=False),
        sa.Column("chat", sa.String(length=300), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_record_pauses_namespace", "record_pauses", ["namespace"])


def downgrade() -> None:
    op.drop_index("ix_record_pauses_namespace", table_name="record_pauses")
    op.drop_table("record_pauses")
