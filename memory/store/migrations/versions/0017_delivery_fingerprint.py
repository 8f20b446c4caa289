"""``deliveries.fingerprint``: a plain message's content fingerprint (the key a
re-push of the same message under a new platform id repeats), claimed in the
row that claims its delivery id — one row per message instead of two (the
fingerprint had a row of its own). Unique (NULL for most rows: a command's or
an older row's fingerprint keeps its own row, keyed by it, as before).

Added nullable, with its unique index, when missing (a database whose
``deliveries`` table ``create_all`` built with the column is left as it is).
Downgrade drops both; a fingerprint claimed in a merged row is then forgotten
(a re-push inside the window after a downgrade is answered again).

Revision ID: 0017_delivery_fingerprint
Revises: 0016_token_ledger
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_delivery_fingerprint"
down_revision: str | Sequence[str] | None = "0016_token_ledger"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    return op.get_context().version_table_schema


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("deliveries", schema=_schema())}
    if "fingerprint" in have:
        return
    with op.batch_alter_table("deliveries", schema=_schema(), recreate="never") as batch:
        batch.add_column(sa.Column("fingerprint", sa.String(length=600), nullable=True))
    op.create_index("ix_deliveries_fingerprint", "deliveries", ["fingerprint"], unique=True, schema=_schema())


def downgrade() -> None:
    op.drop_index("ix_deliveries_fingerprint", table_name="deliveries", schema=_schema())
    with op.batch_alter_table("deliveries", schema=_schema()) as batch:
        batch.drop_column("fingerprint")
