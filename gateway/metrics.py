"""Prometheus metrics of one gateway (prometheus-client), served at ``GET /metrics``.

Each ``Metrics`` has a registry of its own (one per pipeline, hence per app
instance), so that two apps in one process — tests, or an embedding host — never
collide on a metric name. Names, units and labels::

    huiyi_turn_stage_seconds{stage}                 histogram  recall, recollection,
                                                    reconstruct_model, reply, capture (when the
                                                    turn captures before answering), total
    huiyi_recall_seconds                            histogram  the core's recall, seen by the pipeline
    huiyi_reconstruction_fallbacks_total{reason}    counter    memory.reconstruct's codes (no_hits, disabled,
                                                    no_model, few_hits, model_error, timeout, malformed,
                                                    bad_citations, ungrounded, error) or recall_failed
    huiyi_model_errors_total{purpose, error}        counter    purpose: reply, reconstruct, extract,
                                                    consolidate; error: the exception class
    huiyi_model_tokens_total{tenant, purpose, direction}
                                                    counter    tokens the chat model's answers reported
                                                    (usage): direction input (prompt) or output
                                                    (completion); per person and day in SQL
                                                    (gateway.ledger)
    huiyi_model_cost_total{tenant, purpose}         counter    their estimated cost at the operator's
                                                    model_prices (the operator's currency)
    huiyi_token_cap_reached_total{tenant, purpose}  counter    model calls of the memory not made because
                                                    the tenant's daily token cap was reached (the
                                                    path without a model taken instead)
    huiyi_deliveries_deduplicated_total{by}         counter    by: id (same delivery id), content (a
                                                    re-push under a new id) or id_or_content (caught
                                                    by the claim the chat line is written with)
    huiyi_turns_total{outcome}                      counter    replied, no_reply (no model, or it chose
                                                    silence), command, edit, not_addressed, duplicate
    huiyi_rate_limited_total{limit, tenant}         counter    /v1 calls refused with 429 (gateway.http.ratelimit):
                                                    limit: address (gateway-wide, before the key; tenant
                                                    ""), key, tenant_address
    huiyi_rate_limit_errors_total                   counter    calls let through because the limiter's storage
                                                    (Redis) failed or was late
    huiyi_capture_queue_depth{where}                gauge      process: captures queued or running here;
                                                    database: lines whose capture is still due (all replicas)
    huiyi_index_outbox_depth                        gauge      index operations not yet applied
    huiyi_change_events_outbox_depth{tenant, state} gauge      change events not yet delivered (all replicas):
                                                    state pending (waiting or being sent) or dead
                                                    (given up, kept until replayed)
    huiyi_change_events_oldest_undelivered_seconds{tenant}
                                                    gauge      age of the tenant's oldest undelivered change
                                                    event, dead letters included (0: none)
    huiyi_change_events_delivered_total{tenant}     counter    change events this process delivered (2xx)
    huiyi_change_events_given_up_total{tenant}      counter    change events this process gave up after
                                                    max_attempts (each is a dead letter until replayed)

The gauges are read when scraped (a callback each), so they cost nothing
between scrapes; a failing read leaves the gauge out of that scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics", "CONTENT_TYPE"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format."""
#: seconds; a turn spans from a few milliseconds (no model) to tens of seconds (a slow model)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Depths(Collector):
    """The queue gauges, read at scrape time from the callbacks given."""

    def __init__(self, process: Callable[[], int], database: Callable[[], int], outbox: Callable[[], int]) -> None:
        self._process, self._database, self._outbox = process, database, outbox

    def collect(self):
        queue = GaugeMetricFamily("huiyi_capture_queue_depth", "Captures still to run", labels=["where"])
        for where, read in (("process", self._process), ("database", self._database)):
            value = _read(read, f"capture queue depth ({where})")
            if value is not None:
                queue.add_metric([where], value)
        yield queue
        outbox = _read(self._outbox, "index outbox depth")
        if outbox is not None:
            yield GaugeMetricFamily("huiyi_index_outbox_depth", "Index operations not yet applied", value=outbox)


class _Events(Collector):
    """The change-event outbox gauges, read at scrape time (``Store.event_stats``)."""

    def __init__(self, stats: Callable[[], list], tenants: Sequence[str] = ()) -> None:
        self._stats = stats
        self._tenants = tuple(tenants)

    def collect(self):
        try:
            stats = self._stats()
        except Exception as exc:  # noqa: BLE001 - a scrape never fails on one gauge
            log.warning("metrics: change event outbox unavailable: %s", type(exc).__name__)
            return
        depth = GaugeMetricFamily("huiyi_change_events_outbox_depth", "Change events not yet delivered",
                                  labels=["tenant", "state"])
        oldest = GaugeMetricFamily("huiyi_change_events_oldest_undelivered_seconds",
                                   "Age of the oldest undelivered change event (dead letters included)",
                                   labels=["tenant"])
        now = datetime.now(timezone.utc)
        seen = set()
        for s in stats:
            seen.add(s.tenant)
            depth.add_metric([s.tenant, "pending"], s.pending)
            depth.add_metric([s.tenant, "dead"], s.dead)
            oldest.add_metric([s.tenant], max(0.0, (now - s.oldest).total_seconds()) if s.oldest is not None else 0.0)
        for tenant in self._tenants:  # an emptied outbox reads 0, not a gap in the series
            if tenant not in seen:
                depth.add_metric([tenant, "pending"], 0)
                depth.add_metric([tenant, "dead"], 0)
                oldest.add_metric([tenant], 0.0)
        yield depth
        yield oldest


def _read(fn: Callable[[], int], what: str) -> int | None:
    try:
        return int(fn())
    except Exception as exc:  # noqa: BLE001 - a scrape never fails on one gauge
        log.warning("metrics: %s unavailable: %s", what, type(exc).__name__)
        return None


class Metrics:
    """The gateway's metrics on a registry of their own (module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.stage_seconds = Histogram("huiyi_turn_stage_seconds", "Turn latency by stage", ["stage"],
                                       buckets=BUCKETS, registry=r)
        self.recall_seconds = Histogram("huiyi_recall_seconds", "Recall latency (the core's recall, from the pipeline)",
                                        buckets=BUCKETS, registry=r)
        self.fallbacks = Counter("huiyi_reconstruction_fallbacks", "Recollections that fell back to the template",
                                 ["reason"], registry=r)
        self.model_errors = Counter("huiyi_model_errors", "Chat model calls that failed", ["purpose", "error"],
                                    registry=r)
        self.tokens = Counter("huiyi_model_tokens", "Tokens the chat model's answers reported (usage)",
                              ["tenant", "purpose", "direction"], registry=r)
        self.cost = Counter("huiyi_model_cost", "Estimated cost of the chat model's tokens (model_prices)",
                            ["tenant", "purpose"], registry=r)
        self.cap_reached = Counter("huiyi_token_cap_reached",
                                   "Model calls not made: the tenant's daily token cap was reached",
                                   ["tenant", "purpose"], registry=r)
        self.deduplicated = Counter("huiyi_deliveries_deduplicated", "Platform deliveries dropped as duplicates",
                                    ["by"], registry=r)
        self.turns = Counter("huiyi_turns", "Turns handled, by outcome", ["outcome"], registry=r)
        self.rate_limited = Counter("huiyi_rate_limited", "/v1 calls refused over a rate limit (429)",
                                    ["limit", "tenant"], registry=r)
        self.rate_limit_errors = Counter("huiyi_rate_limit_errors", "/v1 calls let through: the rate limit storage failed",
                                         registry=r)
        self.events_delivered = Counter("huiyi_change_events_delivered", "Change events delivered (2xx)", ["tenant"],
                                        registry=r)
        self.events_given_up = Counter("huiyi_change_events_given_up",
                                       "Change events given up after max_attempts (kept as dead letters)", ["tenant"],
                                       registry=r)
        self._depths: _Depths | None = None
        self._events: _Events | None = None

    def watch_queues(self, process: Callable[[], int], database: Callable[[], int], outbox: Callable[[], int]) -> None:
        """Register the scrape-time gauges (once; a second call replaces the callbacks)."""
        if self._depths is not None:
            self.registry.unregister(self._depths)
        self._depths = _Depths(process, database, outbox)
        self.registry.register(self._depths)

    def watch_events(self, stats: Callable[[], list], tenants: Sequence[str] = ()) -> None:
        """Register the change-event outbox gauges; ``stats`` returns
        ``[memory.store.EventStats]``; ``tenants``: those with a webhook, whose series
        read 0 while their outbox is empty (once; a second call replaces the callback)."""
        if self._events is not None:
            self.registry.unregister(self._events)
        self._events = _Events(stats, tenants)
        self.registry.register(self._events)

    def observe_stages(self, latency_ms: dict[str, float]) -> None:
        """Record a turn's stage latencies (milliseconds, as in ``TurnResult.latency_ms``)."""
        for stage, ms in latency_ms.items():
            if isinstance(ms, (int, float)):
                self.stage_seconds.labels(stage).observe(ms / 1000)

    def fallback(self, reason: str | None) -> None:
        """Count a template fallback (None or "": the reconstruction was accepted, nothing counted).
        A free-form reason ("recall failed: StoreError") is cut to its code."""
        if reason:
            self.fallbacks.labels(reason.split(":", 1)[0].strip().replace(" ", "_")).inc()

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
