"""The ``console_secrets`` table: which console signing secret each running
gateway uses, as a fingerprint (never the secret), so that gateways sharing
one database find out that they sign with different secrets and ``/readyz``
says so (``memory.store.console_sessions``).

Created when missing; a database that already has it (made by ``create_all``
before this revision was stamped) is left as it is. Downgrade drops it: the
running gateways write their rows again at their next readiness check.

Revision ID: 0014_console_secret
Revises: 0013_memory_event_end
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_console_secret"
down_revision: str | Sequence[str] | None = "0013_memory_event_end"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("console_secrets", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "console_secrets",
        sa.Column("instance", sa.String(length=32), primary_key=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("console_secrets")
