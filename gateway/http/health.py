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
- ``console_secret`` (when the console is on): every other gateway on the same
  database signs console sessions with the same secret. Each gateway records a
  fingerprint of its secret (``gateway.console.session.fingerprint_of``, never
  the secret) with each verdict and every ``SECRET_REFRESH_S`` seconds
  (``Store.note_console_secret``) and reads the others' of the last
  ``SECRET_WINDOW_S`` seconds; a different one is "failed: …" on every gateway
  involved, since behind a balancer a cookie signed by one is refused by the
  next (the login page comes back on some requests). A gateway that stops
  removes its record; one that crashed ages out after the window;
- a part of the start-up still running in the background (``telegram``:
  aiogram loading, ``TelegramRuntime.prepare``): ``pending`` until it is done.

The verdict is cached for ``CACHE_S`` seconds, so that a load balancer probing
every second costs one round of checks per few seconds, and concurrent probes
share one round. Check results hold the error's class name, never its text (no
URL with a password, no SQL in a probe answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from gateway.pipeline import Pipeline

__all__ = ["Readiness", "Verdict", "CACHE_S", "PROBE_TIMEOUT_S", "SECRET_WINDOW_S", "SECRET_REFRESH_S"]

log = logging.getLogger(__name__)

CACHE_S = 5.0
"""Seconds a readiness verdict is reused."""
PROBE_TIMEOUT_S = 2.0
"""Seconds each check may take before it counts as failed."""
SECRET_WINDOW_S = 120.0
"""Seconds another gateway's console-secret record counts after it was last refreshed."""
SECRET_REFRESH_S = 30.0
"""Seconds between a running gateway's refreshes of its console-secret record."""
#: the check's answer when another gateway signs with another secret
SECRET_DIFFERS = ("failed: another gateway on this database signs console sessions with a different secret; "
                  "set the same HUIYI_CONSOLE__SECRET on every gateway")


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
                 starting: dict[str, Callable[[], bool]] | None = None, console_fingerprint: str | None = None) -> None:
        """``starting``: name → whether that part of the start-up is done (e.g.
        ``telegram``: aiogram loaded, ``TelegramRuntime.ready``); each is a check,
        ``pending`` until it is. ``console_fingerprint``: of this gateway's
        console secret (``fingerprint_of``), None when the console is off (no
        ``console_secret`` check)."""
        self.pipeline = pipeline
        self.http = http
        self.starting = dict(starting or {})
        self.console_fingerprint = console_fingerprint
        #: this process among the gateways of the database (its console-secret record)
        self.instance = secrets.token_hex(16)
        self._cached: tuple[float, Verdict] | None = None
        self._lock = asyncio.Lock()

    async def verdict(self) -> Verdict:
        """The current verdict: cached for ``CACHE_S`` seconds, else checked now."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._cached is not None and loop.time() - self._cached[0] < CACHE_S:
                return self._cached[1]
            probes = [self._database(), self._index(), *self._models()]
            if self.console_fingerprint is not None:
                probes.append(self._console_secret())
            checks = dict(await asyncio.gather(*probes))
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

    async def _console_secret(self) -> tuple[str, str]:
        name = "console_secret"
        try:
            others = await asyncio.wait_for(asyncio.to_thread(self.note_console_secret), PROBE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the database check names the cause
            return name, f"failed: {type(exc).__name__}"
        if others:
            log.warning("console: %d other console secret(s) in use on this database", len(others))
            return name, SECRET_DIFFERS
        return name, "ok"

    def note_console_secret(self) -> set[str]:
        """Record this gateway's console-secret fingerprint now and return the
        other fingerprints said within ``SECRET_WINDOW_S`` (blocking: call it in a
        thread). Raises what the store raises."""
        assert self.console_fingerprint is not None
        return self.pipeline.core.store.note_console_secret(self.instance, self.console_fingerprint, SECRET_WINDOW_S)

    async def keep_console_secret(self) -> None:
        """Record this gateway's console-secret fingerprint now, then refresh it
        every ``SECRET_REFRESH_S`` seconds until cancelled, then remove it, so a
        gateway nobody probes still counts and one that stopped no longer does.
        The app awaits the first record before it serves and runs the rest as a
        task (``start_console_secret``). Returns at once when the console is off."""
        if self.console_fingerprint is None:
            return
        try:
            while True:
                await asyncio.sleep(SECRET_REFRESH_S)
                await self._note_logged()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(self.pipeline.core.store.drop_console_secret, self.instance))

    async def start_console_secret(self) -> asyncio.Task:
        """Record this gateway's fingerprint (before the app serves, so another
        gateway's next check sees it) and return the task that keeps it
        (``keep_console_secret``); cancel the task at shutdown."""
        if self.console_fingerprint is not None:
            await self._note_logged()
        return asyncio.create_task(self.keep_console_secret())

    async def _note_logged(self) -> None:
        try:
            await asyncio.to_thread(self.note_console_secret)
        except Exception as exc:  # noqa: BLE001 - the database check reports it; keep trying
            log.warning("console: recording the secret's fingerprint: %s", type(exc).__name__)

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
