"""The ``token_ledger`` table: tokens the tenants' chat models spent, per
tenant, UTC day, person, purpose and model (``memory.store.ledger``).

Created when missing; a database that already has it (made by ``create_all``
before this revision was stamped) is left as it is. Downgrade drops it, and
with it the counts.

Revision ID: 0016_token_ledger
Revises: 0015_record_pauses
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_token_ledger"
down_revision: str | Sequence[str] | None = "0015_record_pauses"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("token_ledger", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "token_ledger",
        sa.Column("tenant", sa.String(length=64), primary_key=True),
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("subject", sa.String(length=160), primary_key=True),
        sa.Column("purpose", sa.String(length=16), primary_key=True),
        sa.Column("model", sa.String(length=128), primary_key=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("token_ledger")
