"""Change events owed to the tenants' webhooks: a transactional outbox (issue 26 item 17).

Every memory write of ``memory.store.memories`` (add, new version, new context,
metadata, delete) calls ``_emit`` inside its own transaction: for a tenant that
subscribed (``ChangeEvents.subscribe_events``, set by the gateway from each
tenant's ``change_events`` settings) one ``change_events`` row per memory —
``memory.added``, ``memory.changed`` or ``memory.forgotten``, its namespace, id
and version, no text. So an event exists exactly when its change committed, on
every replica and through every path (API, turns, commands, consolidation,
withdrawals, the CLI). A tenant without a webhook costs nothing: no row.

The sender (``gateway.webhooks``) reads them with ``due_events``: per tenant in
creation order, a tenant whose oldest event is not due yet (a failed delivery
waiting out its backoff) is skipped whole, so one tenant's receiver sees its
events in order. A row is claimed by moving its ``due_at`` forward by a lease
(``UPDATE … WHERE due_at <= now``: one replica wins it), then deleted when
delivered (``events_done``) or given up, or set due again later
(``events_retry``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update

from memory.store.base import StoreBase, utcnow
from memory.store.tables import _aware, _ChangeEventRow
from memory.types import Namespace

__all__ = ["ChangeEvent", "ChangeEvents", "EVENT_KINDS", "ADDED", "CHANGED", "FORGOTTEN"]

ADDED, CHANGED, FORGOTTEN = "memory.added", "memory.changed", "memory.forgotten"
EVENT_KINDS = (ADDED, CHANGED, FORGOTTEN)

_E = _ChangeEventRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change event: ``id`` (the row's, unique in the store), ``event`` (one of
    EVENT_KINDS), the memory's ``namespace`` and ``memory_id``, its ``version``
    after the change (0 for a forget), when it happened (UTC) and how many
    deliveries of it failed so far."""

    id: int
    tenant: str
    namespace: Namespace
    memory_id: str
    event: str
    version: int
    created_at: datetime
    attempts: int


def _emit(conn, tenants: frozenset[str], ns: Namespace, event: str, changed: Iterable[tuple[str, int]],
          at: datetime | None = None) -> None:
    """In the caller's write transaction (a Connection or an ORM Session): one
    ``event`` row per ``(memory id, version)`` of ``changed`` when ``ns``'s tenant
    is in ``tenants``; nothing otherwise."""
    if ns.tenant not in tenants:
        return
    at = at or utcnow()
    rows = [dict(tenant=ns.tenant, namespace=str(ns), memory_id=mid, event=event, version=int(version),
                 created_at=at, due_at=at, attempts=0) for mid, version in changed]
    if rows:
        conn.execute(insert(_E), rows)


class ChangeEvents(StoreBase):
    """The ``change_events`` outbox: who subscribes, and the sender's reads and writes."""

    #: tenants whose memory writes leave change events (``subscribe_events``); none by default
    event_tenants: frozenset[str] = frozenset()

    def subscribe_events(self, tenants: Iterable[str]) -> None:
        """From now on the memory writes of ``tenants`` (in this process) leave
        change events; the others none."""
        self.event_tenants = frozenset(tenants)

    def due_events(self, limit: int = 100, lease_s: float = 60.0, now: datetime | None = None) -> list[ChangeEvent]:
        """Claim at most ``limit`` events to deliver now, oldest first: per tenant
        the run of its oldest events that are due (a tenant whose oldest event
        waits out a backoff gives none, so its order holds). Each is claimed for
        ``lease_s`` seconds (its ``due_at`` moved forward; a replica that claimed it
        first wins it, another gets the rest)."""
        now = now or utcnow()
        with self.engine.connect() as conn:
            rows = conn.execute(select(_E).order_by(_E.c.id).limit(limit * 4)).all()
        blocked: set[str] = set()
        wanted = []
        for r in rows:
            if r.tenant in blocked:
                continue
            if _aware(r.due_at) > now:
                blocked.add(r.tenant)
                continue
            wanted.append(r)
            if len(wanted) >= limit:
                break
        out: list[ChangeEvent] = []
        lease = now + timedelta(seconds=lease_s)
        lost: set[str] = set()
        with self._write_conn() as conn:
            for r in wanted:
                if r.tenant in lost:
                    continue
                got = conn.execute(update(_E).where(_E.c.id == r.id, _E.c.due_at <= now).values(due_at=lease))
                if got.rowcount != 1:  # another replica has it: keep this tenant's order, leave its rest
                    lost.add(r.tenant)
                    continue
                out.append(ChangeEvent(r.id, r.tenant, Namespace.parse(r.namespace), r.memory_id, r.event,
                                       int(r.version), _aware(r.created_at), int(r.attempts)))
        return out

    def events_done(self, ids: Sequence[int]) -> None:
        """Delete events delivered (or given up)."""
        if ids:
            with self._write_conn() as conn:
                conn.execute(delete(_E).where(_E.c.id.in_(list(ids))))

    def events_retry(self, event_id: int, due_at: datetime) -> None:
        """Count a failed delivery of ``event_id`` and make it due again at ``due_at``."""
        with self._write_conn() as conn:
            conn.execute(update(_E).where(_E.c.id == event_id).values(attempts=_E.c.attempts + 1, due_at=due_at))

    def events_release(self, ids: Sequence[int]) -> None:
        """Give claimed events back unattempted: due now again (behind a failed one of their tenant)."""
        if ids:
            with self._write_conn() as conn:
                conn.execute(update(_E).where(_E.c.id.in_(list(ids))).values(due_at=utcnow()))

    def pending_events(self, tenant: str | None = None) -> int:
        """Events not yet delivered, of ``tenant`` or of all."""
        from sqlalchemy import func

        q = select(func.count()).select_from(_E)
        if tenant is not None:
            q = q.where(_E.c.tenant == tenant)
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())
