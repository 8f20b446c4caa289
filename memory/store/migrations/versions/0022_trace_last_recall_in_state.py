"""Each namespace's last recall moves into its ``namespace_state`` row
(``trace_at``, ``trace_reason``, ``trace``: ``memory.store.traces``), so that a
turn whose capture writes that row anyway writes its trace in the same update
instead of a ``last_recall`` row of its own.

Upgrade adds the three columns (nullable: NULL while a namespace has no trace),
copies every ``last_recall`` row into its namespace's state row — a namespace
without one gets a row at version 0, its live count read from ``memories``, its
counters 0 when it has no memory and NULL (unknown) otherwise, as a trace's
first write makes it — and drops ``last_recall``. Downgrade recreates
``last_recall`` (with its tenant index) from the state rows' traces and drops
the columns; the rows made for a trace alone stay (version 0, harmless).

Revision ID: 0022_trace_last_recall_in_state
Revises: 0021_marksrow_pending_marks
Create Date: 2026-12-06
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_trace_last_recall_in_state"
down_revision: str | Sequence[str] | None = "0021_marksrow_pending_marks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("trace_at", sa.DateTime(timezone=True)), ("trace_reason", sa.String()), ("trace", sa.String()))


def _schema() -> str | None:
    return op.get_context().version_table_schema


def _state() -> sa.Table:
    return sa.table("namespace_state", sa.column("namespace", sa.String()), sa.column("version", sa.Integer()),
                    sa.column("live", sa.Integer()), sa.column("links", sa.Integer()),
                    sa.column("conflicts", sa.Integer()), sa.column("dormant", sa.Integer()),
                    *(sa.column(name, kind) for name, kind in _COLUMNS), schema=_schema())


def _last_recall() -> sa.Table:
    return sa.table("last_recall", sa.column("namespace", sa.String()), sa.column("tenant", sa.String()),
                    sa.column("chat", sa.String()), sa.column("at", sa.DateTime(timezone=True)), sa.column("k", sa.Integer()),
                    sa.column("fallback_reason", sa.String()), sa.column("entries", sa.String()),
                    sa.column("floors", sa.String()), schema=_schema())


def _trace(chat: str, k: int, entries: str | None, floors: str | None) -> str:
    """The ``trace`` JSON of a ``last_recall`` row (``memory.store.traces``)."""
    kept = json.loads(floors or "{}")
    return json.dumps({"chat": chat, "k": int(k), "entries": json.loads(entries or "[]"),
                       "floors": kept.get("floors") or {}, "misses": kept.get("misses") or []},
                      separators=(",", ":"), ensure_ascii=False)


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    have = {c["name"] for c in inspector.get_columns("namespace_state", schema=_schema())}
    missing = [(name, kind) for name, kind in _COLUMNS if name not in have]
    if missing:
        with op.batch_alter_table("namespace_state", schema=_schema(), recreate="never") as batch:
            for name, kind in missing:
                batch.add_column(sa.Column(name, kind, nullable=True))
    if not inspector.has_table("last_recall", schema=_schema()):
        return
    state, old = _state(), _last_recall()
    memories = sa.table("memories", sa.column("namespace", sa.String()), schema=_schema())
    rows = bind.execute(sa.select(old.c.namespace, old.c.chat, old.c.at, old.c.k, old.c.fallback_reason,
                                  old.c.entries, old.c.floors)).all()
    known = set(bind.execute(sa.select(state.c.namespace)).scalars())
    for r in rows:
        values = dict(trace_at=r.at, trace_reason=r.fallback_reason or "", trace=_trace(r.chat, r.k, r.entries, r.floors))
        if r.namespace in known:
            bind.execute(state.update().where(state.c.namespace == r.namespace).values(**values))
            continue
        live = bind.execute(sa.select(sa.func.count()).select_from(memories).where(
            memories.c.namespace == r.namespace)).scalar_one()
        counter = 0 if live == 0 else None
        bind.execute(state.insert().values(namespace=r.namespace, version=0, live=live, links=counter,
                                           conflicts=counter, dormant=counter, **values))
    op.drop_table("last_recall", schema=_schema())


def downgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "last_recall",
        sa.Column("namespace", sa.String(length=260), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("chat", sa.String(length=300), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("fallback_reason", sa.String(), nullable=False),
        sa.Column("entries", sa.String(), nullable=False),
        sa.Column("floors", sa.String(), nullable=False),
        schema=_schema(),
    )
    op.create_index("ix_last_recall_tenant", "last_recall", ["tenant"], schema=_schema())
    state, old = _state(), _last_recall()
    for r in bind.execute(sa.select(state.c.namespace, state.c.trace_at, state.c.trace_reason, state.c.trace).where(
            state.c.trace_at.is_not(None))).all():
        kept = json.loads(r.trace or "{}")
        floors = {"floors": kept.get("floors"), "misses": kept.get("misses") or []} if kept.get("floors") else {}
        bind.execute(old.insert().values(namespace=r.namespace, tenant=r.namespace.split("/", 1)[0],
                                         chat=kept.get("chat", ""), at=r.trace_at, k=int(kept.get("k", 0)),
                                         fallback_reason=r.trace_reason or "",
                                         entries=json.dumps(kept.get("entries") or []), floors=json.dumps(floors)))
    with op.batch_alter_table("namespace_state", schema=_schema()) as batch:
        for name, _kind in reversed(_COLUMNS):
            batch.drop_column(name)
