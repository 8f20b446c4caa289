"""``index_outbox`` ids are never given twice on SQLite (``AUTOINCREMENT``).

A full rebuild of the index (``memory.admin.reindex``) lists the outbox rows
pending at its start and deletes those ids at its end: its walk over SQL
supersedes them. Meanwhile the index write pass applies and deletes rows, and
SQLite gives the largest deleted rowid again (1 when the outbox is empty, as it
usually is) to the next row, so the rebuild deleted a new write's row by its
old id: a memory stored after its namespace was walked stayed out of the index
until the count check rebuilt it again. PostgreSQL's sequence never gives an
id twice; its table is left as it is.

Upgrade recreates the SQLite table with ``AUTOINCREMENT``, rows and ids kept;
downgrade recreates it without.

Revision ID: 0023_outbox_ids_never_reused
Revises: 0022_trace_last_recall_in_state
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0023_outbox_ids_never_reused"
down_revision: str | Sequence[str] | None = "0022_trace_last_recall_in_state"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _recreate(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table("index_outbox", recreate="always",
                              table_kwargs={"sqlite_autoincrement": autoincrement}):
        pass


def upgrade() -> None:
    _recreate(True)


def downgrade() -> None:
    _recreate(False)
