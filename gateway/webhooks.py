"""Change events out: each tenant's memory changes POSTed to its webhook.

The events are written by the store in the transaction of each change
(``memory.store.events``: ``memory.added``, ``memory.changed``,
``memory.forgotten``); ``ChangeEventSender`` — an object of its own that the
app starts and stops beside the maintenance task — drains them off the request
path: every ``poll_s`` seconds it claims what is due and POSTs it, one event per
request, each tenant's events in the order they happened.

What an event carries: the event type, when it happened, and the memory's
tenant, namespace, subject, id and version — never its text, context or
metadata. A receiver's own key decides what it may read: it fetches the memory
through ``GET /v1/subjects/{subject}/memories/{id}`` (a forgotten one answers
404), so an event discloses nothing beyond the ids a key of that tenant could
list. The body (Standard Webhooks' shape)::

    {"type": "memory.changed", "timestamp": "2026-12-02T01:02:03.456789+00:00",
     "data": {"tenant": "default", "namespace": "default/tg:42", "subject": "tg:42",
              "memory_id": "a1b2c3d4e5f6", "version": 2}}

Signature: the Standard Webhooks scheme (standardwebhooks.com; the
``standardwebhooks`` package signs): headers ``webhook-id`` (``evt_<uid>``:
random, unique for the life of the store, the same on every retry and replay,
for the receiver's de-duplication), ``webhook-timestamp`` (Unix seconds of this
attempt) and ``webhook-signature`` = ``v1,`` + base64 of HMAC-SHA256(secret,
``"<id>.<timestamp>.<body>"``). A receiver verifies with
``standardwebhooks.Webhook(secret).verify(body, headers)`` or any Standard
Webhooks library.

Delivery: at least once, never lost. A 2xx answer delivers; anything else (an
error status, no answer within ``timeout_s``, a refused connection) is tried
again after ``backoff_s`` · 2^(failures − 1) seconds (at most
``max_backoff_s``). While a tenant's oldest event waits for its retry, that
tenant's later events wait behind it. After ``max_attempts`` failures the event
becomes a dead letter — kept in the outbox with its last error, logged at
WARNING with its ids, counted (``huiyi_change_events_given_up_total``) — and the
tenant's later events go on without it; an operator replays it (``huiyi events
replay``, the console's Events page) once the receiver is fixed, and it is sent
again with its original id and timestamp before the tenant's events still
waiting (docs/api.md says why the queue does not stop behind it). Events of a
tenant without a URL are never written; those of a type the tenant no longer
asks for are dropped unsent.

Claims: each sender is a holder (``Store.events_holder_start``); what it
claimed is its own for ``LEASE_S`` seconds. ``stop`` gives back what it claimed
and did not finish, due at once for the next sender; after a crash another
sender frees the claims as soon as it can prove the holder gone (PostgreSQL:
the holder's session advisory lock is gone with its connection; SQLite: no
process of that id on this host), else when the lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

import httpx
from standardwebhooks import Webhook

from gateway.config import ChangeEventSettings
from gateway.metrics import Metrics
from memory.store import ChangeEvent, Store, utcnow

__all__ = ["ChangeEventSender", "event_body", "replay_dead_letters", "POLL_S"]

log = logging.getLogger(__name__)

POLL_S = 1.0
"""Seconds between two looks at the outbox when the last one found nothing due."""
LEASE_S = 120.0
"""Seconds a claimed event belongs to this sender (past every delivery's timeout)."""


def event_body(e: ChangeEvent) -> str:
    """The JSON body of ``e`` (module docstring): ids and the version, no text."""
    return json.dumps({"type": e.event, "timestamp": e.created_at.isoformat(),
                       "data": {"tenant": e.tenant, "namespace": str(e.namespace), "subject": e.namespace.subject,
                                "memory_id": e.memory_id, "version": e.version}},
                      ensure_ascii=False, separators=(",", ":"))


def replay_dead_letters(store: Store, tenant: str, actor: str, ids: Sequence[str] | None = None) -> list[ChangeEvent]:
    """Send dead letters of ``tenant`` again (``Store.events_replay``): those named
    in ``ids`` (``evt_<uid>`` or the bare uid), or every one with None. Each is
    audited in its namespace as ``event_replay`` by ``actor`` (the memory id,
    the event type and its webhook-id; never a text). Returns the events replayed,
    oldest first. The CLI and the console both replay through here."""
    # a webhook-id as a receiver may log it: any case, with or without its prefix
    uids = None if ids is None else [i.strip().lower().removeprefix("evt_") for i in ids]
    replayed = store.events_replay(tenant, uids)
    for e in replayed:
        store.audit(e.namespace, "event_replay", actor, e.memory_id, event=e.event, webhook_id=e.webhook_id,
                    version=e.version, attempts=e.attempts, last_error=e.last_error)
    if replayed:
        log.info("change events: %d dead letter(s) of %s replayed by %s", len(replayed), tenant, actor)
    return replayed


class ChangeEventSender:
    """Drains the change-event outbox to each tenant's webhook (module docstring).

    ``tenants``: ``{tenant: ChangeEventSettings}`` of the tenants with a URL;
    ``http``: the app's client (its connection pool); ``poll_s``: seconds between
    looks when nothing was due; ``metrics``: the gateway's (``gateway.metrics``),
    whose delivered and given-up counters it feeds. ``start`` / ``stop`` run
    ``run`` as a task under a holder id of its own."""

    def __init__(self, store: Store, tenants: Mapping[str, ChangeEventSettings], http: httpx.AsyncClient, *,
                 poll_s: float = POLL_S, batch: int = 100, metrics: Metrics | None = None) -> None:
        self.store = store
        self.tenants = {name: cfg for name, cfg in tenants.items() if cfg.url}
        self.http = http
        self.poll_s = poll_s
        self.batch = batch
        self.metrics = metrics
        self.delivered = 0
        self.failed = 0
        self.given_up = 0
        #: this sender's holder id (``Store.events_holder_start``) while it runs; None before and after
        self.holder: str | None = None
        self._signers = {name: Webhook(cfg.secret or "") for name, cfg in self.tenants.items()}
        self._task: asyncio.Task | None = None

    async def drain(self) -> int:
        """One pass: claim what is due and deliver it; returns how many events were
        delivered. Never raises for a receiver's fault (a store error propagates)."""
        due = await asyncio.to_thread(self.store.due_events, self.batch, LEASE_S, None, self.holder)
        by_tenant: dict[str, list[ChangeEvent]] = {}
        for e in due:
            by_tenant.setdefault(e.tenant, []).append(e)
        sent = await asyncio.gather(*(self._tenant(name, events) for name, events in by_tenant.items()))
        return sum(sent)

    async def _tenant(self, name: str, events: list[ChangeEvent]) -> int:
        """Deliver ``events`` of tenant ``name`` in order. A failure that will be
        retried gives the rest back to the outbox unattempted (behind it); one
        that was the last attempt leaves a dead letter and the rest go on."""
        cfg = self.tenants.get(name)
        done: list[int] = []
        n = 0
        try:
            for i, e in enumerate(events):
                if cfg is None or e.event not in cfg.events:  # no longer wanted (config changed): dropped
                    done.append(e.id)
                    continue
                error = await self._deliver(cfg, self._signers[name], e)
                if error is None:
                    done.append(e.id)
                    n += 1
                    continue
                if await asyncio.to_thread(self._failed, cfg, e, error):
                    continue  # a dead letter: the tenant's later events are not held behind it
                rest = [x.id for x in events[i + 1:]]
                if rest:
                    await asyncio.to_thread(self.store.events_release, rest)
                break
        finally:
            if done:
                await asyncio.to_thread(self.store.events_done, done)
        return n

    async def _deliver(self, cfg: ChangeEventSettings, signer: Webhook, e: ChangeEvent) -> str | None:
        """POST ``e`` once; None when delivered, else what failed ("HTTP 500", "ConnectError")."""
        body = event_body(e)
        now = datetime.now(timezone.utc)
        msg_id = e.webhook_id
        headers = {"content-type": "application/json", "user-agent": "huiyi-change-events",
                   "webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                   "webhook-signature": signer.sign(msg_id, now, body)}
        try:
            r = await self.http.post(cfg.url or "", content=body.encode("utf-8"), headers=headers,
                                     timeout=cfg.timeout_s)
        except httpx.HTTPError as exc:
            log.info("change event %s of %s not delivered: %s", msg_id, e.namespace, type(exc).__name__)
            return type(exc).__name__
        if 200 <= r.status_code < 300:
            self.delivered += 1
            if self.metrics is not None:
                self.metrics.events_delivered.labels(e.tenant).inc()
            return None
        log.info("change event %s of %s not delivered: HTTP %d", msg_id, e.namespace, r.status_code)
        return f"HTTP {r.status_code}"

    def _failed(self, cfg: ChangeEventSettings, e: ChangeEvent, error: str) -> bool:
        """Count a failed delivery: again after the backoff (False), or a dead
        letter after ``max_attempts`` (True)."""
        self.failed += 1
        failures = e.attempts + 1
        if failures >= cfg.max_attempts:
            self.given_up += 1
            if self.metrics is not None:
                self.metrics.events_given_up.labels(e.tenant).inc()
            log.warning("change event %s (%s of %s in %s) given up after %d attempts (%s): kept as a dead letter",
                        e.webhook_id, e.event, e.memory_id, e.namespace, failures, error)
            self.store.events_dead(e.id, error)
            return True
        delay = min(cfg.backoff_s * 2 ** (failures - 1), cfg.max_backoff_s)
        self.store.events_retry(e.id, utcnow() + timedelta(seconds=delay), error)
        return False

    async def run(self) -> None:
        """Drain until cancelled: at once again after a pass that delivered, else after ``poll_s``."""
        while True:
            try:
                if self.holder is None:
                    self.holder = await asyncio.to_thread(self.store.events_holder_start)
                n = await self.drain()
            except Exception as exc:  # noqa: BLE001 - the store is down: the events wait in it
                log.warning("change events: %s", exc)
                n = 0
            await asyncio.sleep(0 if n else self.poll_s)

    def start(self) -> bool:
        """Run the sender as a task when some tenant has a URL; True when started."""
        if not self.tenants or (self._task is not None and not self._task.done()):
            return False
        self._task = asyncio.create_task(self.run(), name="huiyi-change-events")
        return True

    async def stop(self) -> None:
        """Cancel the task and give back what it had claimed and not delivered (due
        at once for the next sender, here or on another replica)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self.holder is not None:
            holder, self.holder = self.holder, None
            try:
                n = await asyncio.to_thread(self.store.events_holder_stop, holder)
            except Exception as exc:  # noqa: BLE001 - the store is down: the claims wait for the liveness check
                log.warning("change events: claims of %s not given back: %s", holder, exc)
            else:
                if n:
                    log.info("change events: %d claimed event(s) given back at shutdown", n)
