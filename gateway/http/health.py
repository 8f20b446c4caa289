"""Readiness of a running gateway (``GET /readyz``); liveness (``GET /healthz``)
needs no check of its own: the process answers.

Ready means every part a turn needs answers, each within ``PROBE_TIMEOUT_S``:

- ``database``: the store reads its schema revision (``Store.ping``): reachable,
  and migrated;
- ``index``: the LanceDB table counts its rows;
- ``model:<base_url>``: for each chat model some tenant has configured, ``GET
  <base_url>/models`` (the OpenAI API's models list) answers 2xx. A 401/403 is
  a refused key, a 404 or any other answer a wrong URL (a base URL usually ends
  in ``/v1``), a refused connection or a timeout an absent server: each is
  "failed: …" naming it, and the gateway is not ready. A listing that does not
  name the configured model is logged (some servers list only part of what
  they serve), not failed;
- a part of the start-up still running in the background (``telegram``:
  aiogram loading, ``TelegramRuntime.prepare``): ``pending`` until it is done.

The verdict is cached for ``CACHE_S`` seconds, so that a load balancer probing
every second costs one round of checks per few seconds, and concurrent probes
share one round. Check results hold the error's class name, never its text (no
URL with a password, no SQL in a probe answer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from gateway.pipeline import Pipeline

__all__ = ["Readiness", "Verdict", "CACHE_S", "PROBE_TIMEOUT_S"]

log = logging.getLogger(__name__)

CACHE_S = 5.0
"""Seconds a readiness verdict is reused."""
PROBE_TIMEOUT_S = 2.0
"""Seconds each check may take before it counts as failed."""


@dataclass(frozen=True)
class Verdict:
    """``ready`` when every check says ``ok``; ``checks``: name → ``ok`` or
    ``failed: <error class>``."""

    ready: bool
    checks: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The body of ``/readyz``: ``{"status": "ready" | "not ready", "checks": {...}}``."""
        return {"status": "ready" if self.ready else "not ready", "checks": dict(self.checks)}


class Readiness:
    """The checks of one app (module docstring). ``http``: the app's HTTP client."""

    def __init__(self, pipeline: Pipeline, http: httpx.AsyncClient,
                 starting: dict[str, Callable[[], bool]] | None = None) -> None:
        """``starting``: name → whether that part of the start-up is done (e.g.
        ``telegram``: aiogram loaded, ``TelegramRuntime.ready``); each is a check,
        ``pending`` until it is."""
        self.pipeline = pipeline
        self.http = http
        self.starting = dict(starting or {})
        self._cached: tuple[float, Verdict] | None = None
        self._lock = asyncio.Lock()

    async def verdict(self) -> Verdict:
        """The current verdict: cached for ``CACHE_S`` seconds, else checked now."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._cached is not None and loop.time() - self._cached[0] < CACHE_S:
                return self._cached[1]
            checks = dict(await asyncio.gather(self._database(), self._index(), *self._models()))
            checks.update({name: "ok" if done() else "pending" for name, done in self.starting.items()})
            verdict = Verdict(all(v == "ok" for v in checks.values()), checks)
            if not verdict.ready:
                log.warning("not ready: %s", ", ".join(f"{k} {v}" for k, v in checks.items() if v != "ok"))
            self._cached = (loop.time(), verdict)
            return verdict

    async def _probe(self, name: str, fn) -> tuple[str, str]:
        try:
            await asyncio.wait_for(asyncio.to_thread(fn), PROBE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any failure is "not ready", named
            return name, f"failed: {type(exc).__name__}"
        return name, "ok"

    def _database(self):
        return self._probe("database", self.pipeline.core.store.ping)

    def _index(self):
        return self._probe("index", self.pipeline.core.index.count)

    def _models(self) -> list:
        urls: dict[str, tuple[str | None, set[str]]] = {}
        for tenant in self.pipeline.settings.tenants:
            llm = self.pipeline.settings.tenant(tenant).llm
            if llm.configured:
                urls.setdefault(llm.base_url.rstrip("/"), (llm.api_key, set()))[1].add(llm.model)
        return [self._model(url, key, names) for url, (key, names) in sorted(urls.items())]

    async def _model(self, base_url: str, api_key: str | None, names: set[str]) -> tuple[str, str]:
        name = f"model:{base_url}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            r = await self.http.get(f"{base_url}/models", headers=headers, timeout=PROBE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - refused, timed out, bad URL: not reachable
            return name, f"failed: {type(exc).__name__}"
        if r.status_code in (401, 403):
            return name, f"failed: HTTP {r.status_code} (the API key is refused)"
        if not 200 <= r.status_code < 300:
            return name, f"failed: HTTP {r.status_code} at {base_url}/models (is the base URL right? it usually ends in /v1)"
        try:
            served = {m.get("id") for m in r.json().get("data", []) if isinstance(m, dict)}
        except (ValueError, AttributeError):
            return name, f"failed: {base_url}/models is not an OpenAI-compatible models list"
        if served and not names <= served:
            log.warning("model server %s does not list %s", base_url, ", ".join(sorted(names - served)))
        return name, "ok"
