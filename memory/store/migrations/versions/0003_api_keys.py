"""The ``api_keys`` table: API keys of the ``/v1`` HTTP API, kept as SHA-256
digests (``memory.store.apikeys``; issue 16 item 1).

Created when missing (a database at an earlier revision); a database that
already has it (made by ``create_all`` before this revision was stamped) is
left as it is. Downgrade drops it — and with it every key: the tenants that
had one answer keyless loopback callers again until keys are made anew.

Revision ID: 0003_api_keys
Revises: 0002_memory_conflicts
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_api_keys"
down_revision: str | Sequence[str] | None = "0002_memory_conflicts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("api_keys", schema=op.get_context().version_table_schema):
        return
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=32), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=160), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_table("api_keys")
