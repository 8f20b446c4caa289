"""Rate limits on ``/v1``: per client address and per API key, with the ``limits`` package.

Two checks, both before the body is read (``api_v1._Guarded``)::

    check_address(request)         every /v1 call from one address, before its key is looked at
                                   (Settings.rate_limit.per_address; loopback exempt by default)
    check_caller(request, caller)  a keyed call: its key (the tenant's per_admin_key or
                                   per_member_key) and, if the tenant sets one, its address in
                                   that tenant (TenantRateLimits.per_address)

A call over a limit raises ``RateLimited`` (429 with ``Retry-After``, in whole
seconds, ``gateway.http.errors``) and is counted in
``huiyi_rate_limited_total{limit, tenant}`` (``gateway.metrics``). The counts
live where ``RateLimitSettings.storage_uri`` says: in this process
(``memory://``) or in Redis (``redis://…``), shared by every replica. A storage
that fails or is slower than ``timeout_s`` lets the call through, logged and
counted in ``huiyi_rate_limit_errors_total``: the limiter never takes the API down.

The platform webhooks (``/telegram``, ``/onebot``, ``/wechat``, ``/webhook``) are
not limited here: they carry the platform's own signed deliveries, and a 429
makes the platform redeliver and hold the chat's later messages (docs/api.md,
"Rate limits").
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from fastapi import Request
from limits import RateLimitItem, parse_many
from limits import strategies as sync_strategies
from limits.aio import strategies
from limits.storage import storage_from_string

from gateway.config import RateLimitSettings, Settings
from gateway.errors import RateLimited
from gateway.http.auth import Caller, is_loopback

__all__ = ["ApiLimits"]

log = logging.getLogger(__name__)

_STRATEGIES = {"moving-window": strategies.MovingWindowRateLimiter,
               "sliding-window-counter": strategies.SlidingWindowCounterRateLimiter,
               "fixed-window": strategies.FixedWindowRateLimiter}
_SYNC_STRATEGIES = {"moving-window": sync_strategies.MovingWindowRateLimiter,
                    "sliding-window-counter": sync_strategies.SlidingWindowCounterRateLimiter,
                    "fixed-window": sync_strategies.FixedWindowRateLimiter}
#: the first part of every counter's key: the gateway's counts stay apart from anything else in the Redis
PREFIX = "huiyi"


class _InProcess:
    """The in-process counters (``memory://``) behind the async limiter's two calls:
    ``limits``' synchronous storage, whose locks are threads' locks. Its async one
    binds each counter's ``asyncio.Lock`` to the first event loop that waits on it,
    and a call from another loop then raised RuntimeError, which let the call through
    (seen when test clients of one app ran on loops of their own). Each call is
    microseconds of dict work, so it runs on the calling loop."""

    def __init__(self, strategy: str) -> None:
        self.storage = storage_from_string("memory://")
        self._limiter = _SYNC_STRATEGIES[strategy](self.storage)

    async def hit(self, item: RateLimitItem, *identifiers: str) -> bool:
        return self._limiter.hit(item, *identifiers)

    async def get_window_stats(self, item: RateLimitItem, *identifiers: str):
        return self._limiter.get_window_stats(item, *identifiers)


@dataclass(frozen=True, slots=True)
class _Rule:
    """One configured limit: which counter (``address`` or ``key``, the metric's
    ``limit`` label) and its windows (each must hold)."""

    name: str
    items: tuple[RateLimitItem, ...]

    @classmethod
    def of(cls, name: str, text: str | None) -> _Rule | None:
        return cls(name, tuple(parse_many(text))) if text else None


def _storage(cfg: RateLimitSettings):
    """The async storage of a networked ``cfg.storage_uri`` (``redis://…``, through
    redis-py's asyncio client with ``cfg.timeout_s`` on every socket)."""
    uri = cfg.storage_uri if cfg.storage_uri.startswith("async+") else f"async+{cfg.storage_uri}"
    return storage_from_string(uri, implementation="redispy", socket_timeout=cfg.timeout_s,
                               socket_connect_timeout=cfg.timeout_s)


class ApiLimits:
    """The ``/v1`` limiter of one app (module docstring), built from ``Settings``
    in the app's lifespan (the in-memory storage, ``_InProcess``, serves any event loop).
    Tenants are read from ``settings.tenants``; a tenant that is not configured
    has no limits of its own (its calls answer 404 anyway)."""

    def __init__(self, settings: Settings) -> None:
        self.cfg = settings.rate_limit
        # only a networked storage can hang; the in-process one is never "unavailable", and a
        # timeout around it let calls through whenever a busy event loop was slow to come back
        self._timeout = None
        if self.cfg.storage_uri.split("://")[0].removeprefix("async+") == "memory":
            self.limiter = _InProcess(self.cfg.strategy)
            self.storage = self.limiter.storage
        else:
            self.storage = _storage(self.cfg)
            self.limiter = _STRATEGIES[self.cfg.strategy](self.storage)
            self._timeout = self.cfg.timeout_s
        self.address = _Rule.of("address", self.cfg.per_address)
        self.tenants = {name: (_Rule.of("key", t.rate_limit.per_admin_key), _Rule.of("key", t.rate_limit.per_member_key),
                               _Rule.of("tenant_address", t.rate_limit.per_address))
                        for name, t in settings.tenants.items()}

    async def check_address(self, request: Request) -> None:
        """Count a ``/v1`` call against its client address (``per_address``), before
        its key is checked. Raises RateLimited (429) over the limit; does nothing
        when limits are off, for loopback with ``exempt_loopback``, or for a call
        with no address."""
        host = request.client.host if request.client else None
        if not self.cfg.enabled or self.address is None or not host:
            return
        if self.cfg.exempt_loopback and is_loopback(host):
            return
        await self._hit(request, self.address, "", ("address", host))

    async def check_caller(self, request: Request, caller: Caller) -> None:
        """Count a keyed call against its key (the tenant's ``per_admin_key`` or
        ``per_member_key``) and, when the tenant sets ``per_address``, against its
        address in the tenant. Raises RateLimited (429) over a limit; keyless
        callers (loopback, tenant not yet known) are not counted here."""
        if not self.cfg.enabled or caller.tenant is None or caller.key_id is None:
            return
        admin, member, by_address = self.tenants.get(caller.tenant, (None, None, None))
        rule = admin if caller.admin else member
        if rule is not None:
            await self._hit(request, rule, caller.tenant, ("key", caller.tenant, caller.key_id))
        host = request.client.host if request.client else None
        if by_address is not None and host and not (self.cfg.exempt_loopback and is_loopback(host)):
            await self._hit(request, by_address, caller.tenant, ("tenant_address", caller.tenant, host))

    async def _hit(self, request: Request, rule: _Rule, tenant: str, ids: tuple[str, ...]) -> None:
        """One call against each window of ``rule``; RateLimited with the seconds
        until the refusing window has room again (at least 1)."""
        for item in rule.items:
            try:
                async with asyncio.timeout(self._timeout):
                    if await self.limiter.hit(item, PREFIX, *ids):
                        continue
                    stats = await self.limiter.get_window_stats(item, PREFIX, *ids)
            except Exception as exc:  # noqa: BLE001 - a failing limiter lets the call through
                log.warning("rate limit storage unavailable (%s): %s; %s %s let through", self.cfg.storage_uri.split("://")[0],
                            type(exc).__name__, request.method, request.url.path[:200])
                _metrics(request, lambda m: m.rate_limit_errors.inc())
                return
            retry = max(1, math.ceil(stats.reset_time - time.time()))
            _metrics(request, lambda m: m.rate_limited.labels(rule.name, tenant).inc())
            who = {"address": "this address", "tenant_address": "this address in this tenant", "key": "this API key"}
            log.info("rate limited %s %s: %s over %s (tenant %s)", request.method, request.url.path[:200], rule.name,
                     item, tenant or "-")
            raise RateLimited(f"too many requests from {who[rule.name]}: at most {item}; retry after {retry} s",
                              retry_after=retry)

    async def aclose(self) -> None:
        """Release the storage's connections (Redis); the in-process one holds none."""
        close = getattr(getattr(self.storage, "bridge", None), "storage", None)
        try:
            if close is not None and hasattr(close, "aclose"):
                await close.aclose()
        except Exception:  # noqa: BLE001 - shutting down
            log.debug("rate limit storage did not close cleanly", exc_info=True)


def _metrics(request: Request, count) -> None:
    pipeline = getattr(request.app.state, "pipeline", None)
    if pipeline is not None:
        count(pipeline.metrics)
