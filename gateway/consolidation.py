"""When sleep consolidation runs (``memory.consolidate`` says how): for a person
idle in this process, at most one pass at a time, started by the maintenance
task (``gateway.maintenance``), or at once for ``/memory consolidate`` and
``huiyi consolidate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict

from gateway.config import Settings
from gateway.llm import ChatModels
from memory.consolidate import SWEEP_EVERY_S, ConsolidationReport, Consolidator
from memory.core import MemoryCore
from memory.types import Namespace

__all__ = ["ConsolidationScheduler", "CONSOLIDATION_EVERY_S"]

log = logging.getLogger(__name__)

CONSOLIDATION_EVERY_S = 60.0
"""Least seconds between two starts of the maintenance task's consolidation pass."""


class ConsolidationScheduler:
    """Consolidation of every tenant over one core: who is idle (``turned`` is
    told of every turn), one ``Consolidator`` per tenant, and the background pass
    (``start`` / ``stop``)."""

    def __init__(self, settings: Settings, core: MemoryCore, models: ChatModels) -> None:
        self.settings = settings
        self.core = core
        self.models = models
        # namespace → time.monotonic() of its last turn here, oldest first; bounded (turned)
        self._last_turn: OrderedDict[str, float] = OrderedDict()
        self._idle_horizon_s = max((t.consolidation.idle_s for t in settings.tenants.values()), default=0.0)
        self._consolidators: dict[str, Consolidator] = {}
        self._pass: asyncio.Task | None = None
        self._pass_started: float | None = None

    def last_turn(self, ns: Namespace) -> float | None:
        """``time.monotonic()`` of the last turn of ``ns`` in this process (a
        message, a command or an edit), None when it had none since start-up."""
        return self._last_turn.get(str(ns))

    def turned(self, ns: Namespace, now: float | None = None) -> None:
        """Record a turn of ``ns`` now (``time.monotonic()``), and forget the
        namespaces whose last turn is older than every tenant's ``idle_s`` (they
        read as idle either way), so the map holds the recently active people
        instead of growing with everyone who ever spoke to this process."""
        now = time.monotonic() if now is None else now
        self._last_turn[str(ns)] = now
        self._last_turn.move_to_end(str(ns))
        keep = self._idle_horizon_s
        while self._last_turn:
            oldest, at = next(iter(self._last_turn.items()))
            if now - at <= keep:
                break
            del self._last_turn[oldest]

    def idle(self, ns: Namespace, idle_s: float, now: float | None = None) -> bool:
        """True when ``ns`` had no turn in this process for ``idle_s`` seconds."""
        last = self.last_turn(ns)
        return last is None or (time.monotonic() if now is None else now) - last >= idle_s

    def consolidator(self, tenant: str) -> Consolidator:
        """The tenant's ``Consolidator`` (its ``consolidation`` settings), one per tenant."""
        if tenant not in self._consolidators:
            self._consolidators[tenant] = Consolidator(self.core, self.settings.tenant(tenant).consolidation.params())
        return self._consolidators[tenant]

    async def _model(self, tenant: str, ns: Namespace):
        """The tenant's chat model as consolidation of ``ns`` calls it
        (temperature 0.2, bounded by ``cluster_timeout_s``, tokens in the ledger,
        failures counted as ``consolidate``), or None when the tenant has none."""
        cfg = self.settings.tenant(tenant).consolidation
        return await self.models.metered(tenant, ns.subject, "consolidate", capped=False, temperature=0.2,
                                         timeout=cfg.cluster_timeout_s, max_tokens=800)

    async def _capped(self, tenant: str) -> bool:
        """True when the tenant has a model and its daily token cap is reached: no
        consolidation runs (its fragments wait, the watermark unmoved, for a day
        with tokens left)."""
        meter = self.models.meter
        return self.models.of(tenant) is not None and meter is not None \
            and await meter.over_cap(tenant, "consolidate")

    async def consolidate(self, tenant: str, ns: Namespace, *, force: bool = True) -> ConsolidationReport:
        """One consolidation run of ``ns`` now (``/memory consolidate``, ``huiyi
        consolidate``): ``force`` runs it even when not due. Never blocks a turn
        (the store and the clustering run in threads; the model call is awaited)."""
        t = self.settings.tenant(tenant)
        if await self._capped(tenant):
            return ConsolidationReport(ns, skipped="token_cap")
        return await self.consolidator(tenant).run(ns, await self._model(tenant, ns), lang=t.language, force=force,
                                                   tz=t.tz)

    async def consolidate_idle(self, limit: int = 20) -> list[ConsolidationReport]:
        """The maintenance task's pass: for every tenant with consolidation
        enabled, run the namespaces with enough new fragments
        (``Store.consolidation_candidates``, at most ``limit`` per tenant) whose
        person is idle (``idle``) and which are due (``Consolidator.due``), then
        the tenant's dormancy sweep. A failure is logged per namespace."""
        reports: list[ConsolidationReport] = []
        for name, t in self.settings.tenants.items():
            cfg = t.consolidation
            if not cfg.enabled:
                continue
            worker = self.consolidator(name)
            try:
                names = await asyncio.to_thread(self.core.store.consolidation_candidates, name, cfg.min_new, limit)
            except Exception as exc:  # noqa: BLE001 - keep maintaining
                log.warning("consolidation candidates of tenant %s: %s", name, exc)
                continue
            for ns in names:
                if not self.idle(ns, cfg.idle_s):
                    continue
                if await self._capped(name):
                    break
                try:
                    report = await worker.run(ns, await self._model(name, ns), lang=t.language, tz=t.tz)
                except Exception as exc:  # noqa: BLE001 - the next pass tries again
                    log.warning("consolidation of %s failed: %s", ns, exc)
                    continue
                if report.skipped is None:
                    reports.append(report)
            try:
                await worker.sweep(name, every_s=SWEEP_EVERY_S)
            except Exception as exc:  # noqa: BLE001
                log.warning("dormancy sweep of tenant %s failed: %s", name, exc)
        return reports

    def start(self, every_s: float = CONSOLIDATION_EVERY_S) -> bool:
        """Start ``consolidate_idle`` in a task unless one is still running or the
        last one started less than ``every_s`` seconds ago; True when started.
        The maintenance task calls this every tick: a long run never delays its
        index maintenance, and the candidates query runs at most once a minute."""
        if self._pass is not None and not self._pass.done():
            return False
        now = time.monotonic()
        if self._pass_started is not None and now - self._pass_started < every_s:
            return False
        self._pass_started = now
        self._pass = asyncio.create_task(self.consolidate_idle())
        return True

    async def stop(self) -> None:
        """Cancel the pass of ``start`` if one runs and wait for it to end (what it
        wrote stays; the fragments it had not reached are considered again by the
        next pass, the watermark not having moved)."""
        task, self._pass = self._pass, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
