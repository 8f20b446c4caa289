"""Change events out: each tenant's memory changes POSTed to its webhook (issue 26 item 17).

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
``standardwebhooks`` package signs): headers ``webhook-id`` (``evt_<n>``, the
same on every retry, for the receiver's de-duplication), ``webhook-timestamp``
(Unix seconds of this attempt) and ``webhook-signature`` =
``v1,`` + base64 of HMAC-SHA256(secret, ``"<id>.<timestamp>.<body>"``). A
receiver verifies with ``standardwebhooks.Webhook(secret).verify(body, headers)``
or any Standard Webhooks library.

Delivery: at least once. A 2xx answer delivers; anything else (an error status,
no answer within ``timeout_s``, a refused connection) is tried again after
``backoff_s`` · 2^(failures − 1) seconds (at most ``max_backoff_s``), and given
up — logged at WARNING with its ids — after ``max_attempts``. While a tenant's
oldest event waits for its retry, that tenant's later events wait behind it.
Events of a tenant without a URL are never written; those of a type the
tenant did not ask for are dropped unsent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import httpx
from standardwebhooks import Webhook

from gateway.config import ChangeEventSettings
from memory.store import ChangeEvent, Store, utcnow

__all__ = ["ChangeEventSender", "event_body", "POLL_S"]

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


class ChangeEventSender:
    """Drains the change-event outbox to each tenant's webhook (module docstring).

    ``tenants``: ``{tenant: ChangeEventSettings}`` of the tenants with a URL;
    ``http``: the app's client (its connection pool); ``poll_s``: seconds between
    looks when nothing was due. ``start`` / ``stop`` run ``run`` as a task."""

    def __init__(self, store: Store, tenants: Mapping[str, ChangeEventSettings], http: httpx.AsyncClient, *,
                 poll_s: float = POLL_S, batch: int = 100) -> None:
        self.store = store
        self.tenants = {name: cfg for name, cfg in tenants.items() if cfg.url}
        self.http = http
        self.poll_s = poll_s
        self.batch = batch
        self.delivered = 0
        self.failed = 0
        self.given_up = 0
        self._signers = {name: Webhook(cfg.secret or "") for name, cfg in self.tenants.items()}
        self._task: asyncio.Task | None = None

    async def drain(self) -> int:
        """One pass: claim what is due and deliver it; returns how many events were
        delivered. Never raises for a receiver's fault (a store error propagates)."""
        due = await asyncio.to_thread(self.store.due_events, self.batch, LEASE_S)
        by_tenant: dict[str, list[ChangeEvent]] = {}
        for e in due:
            by_tenant.setdefault(e.tenant, []).append(e)
        sent = await asyncio.gather(*(self._tenant(name, events) for name, events in by_tenant.items()))
        return sum(sent)

    async def _tenant(self, name: str, events: list[ChangeEvent]) -> int:
        """Deliver ``events`` of tenant ``name`` in order; at the first failure the
        rest go back to the outbox unattempted (behind the failed one)."""
        cfg = self.tenants.get(name)
        done: list[int] = []
        n = 0
        try:
            for i, e in enumerate(events):
                if cfg is None or e.event not in cfg.events:  # no longer wanted (config changed): dropped
                    done.append(e.id)
                    continue
                if await self._deliver(cfg, self._signers[name], e):
                    done.append(e.id)
                    n += 1
                    continue
                await asyncio.to_thread(self._failed, cfg, e)
                rest = [x.id for x in events[i + 1:]]
                if rest:
                    await asyncio.to_thread(self.store.events_release, rest)
                break
        finally:
            if done:
                await asyncio.to_thread(self.store.events_done, done)
        return n

    async def _deliver(self, cfg: ChangeEventSettings, signer: Webhook, e: ChangeEvent) -> bool:
        body = event_body(e)
        now = datetime.now(timezone.utc)
        msg_id = f"evt_{e.id}"
        headers = {"content-type": "application/json", "user-agent": "huiyi-change-events",
                   "webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                   "webhook-signature": signer.sign(msg_id, now, body)}
        try:
            r = await self.http.post(cfg.url or "", content=body.encode("utf-8"), headers=headers,
                                     timeout=cfg.timeout_s)
        except httpx.HTTPError as exc:
            log.info("change event %s of %s not delivered: %s", msg_id, e.namespace, type(exc).__name__)
            return False
        if 200 <= r.status_code < 300:
            self.delivered += 1
            return True
        log.info("change event %s of %s not delivered: HTTP %d", msg_id, e.namespace, r.status_code)
        return False

    def _failed(self, cfg: ChangeEventSettings, e: ChangeEvent) -> None:
        """Count a failed delivery: again after the backoff, or given up after ``max_attempts``."""
        self.failed += 1
        failures = e.attempts + 1
        if failures >= cfg.max_attempts:
            self.given_up += 1
            log.warning("change event evt_%d (%s of %s in %s) given up after %d attempts", e.id, e.event,
                        e.memory_id, e.namespace, failures)
            self.store.events_done([e.id])
            return
        delay = min(cfg.backoff_s * 2 ** (failures - 1), cfg.max_backoff_s)
        self.store.events_retry(e.id, utcnow() + timedelta(seconds=delay))

    async def run(self) -> None:
        """Drain until cancelled: at once again after a pass that delivered, else after ``poll_s``."""
        while True:
            try:
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
        """Cancel the task; what it had claimed and not delivered is due again after its lease."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
