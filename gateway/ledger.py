"""The token ledger's gateway side: ``TokenMeter`` records what each chat
model call spent and says when a tenant's daily cap is reached.

Every model call the gateway makes (``gateway.llm.ChatModels.metered``: fact
extraction, recollection, reply, consolidation) reports the tokens of its
answer's ``usage`` here; ``record`` adds them to the SQL ledger
(``memory.store.ledger``: one upsert per call into the row of tenant, UTC
day, person, purpose and model) and to the Prometheus counters
``huiyi_model_tokens_total{tenant, purpose, direction}`` and
``huiyi_model_cost_total{tenant, purpose}`` (the estimate at the operator's
``model_prices``; persons stay out of the metrics' labels, in SQL only).

The cap (``TenantSettings.model_cap_daily``) bounds the tokens of a tenant's
UTC day. ``over_cap`` answers from the day's total the last ``record`` read
back from SQL (every replica's calls included), re-read when older than
``REFRESH_S``; once reached, the memory's own calls take their paths without
a model (``gateway.llm.ChatModels.metered`` answers None) — one WARNING per
tenant and day, and ``huiyi_token_cap_reached_total{tenant, purpose}`` per
call so degraded. A ledger that cannot be written or read is logged and
never fails the call it was recording.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.metrics import Metrics
    from memory.reconstruct import Recollection
    from memory.store import Store, TokenUsage

__all__ = ["TokenMeter", "REFRESH_S", "CAP_REASON", "capped_recollection", "TenantTokens", "summarise_usage"]

log = logging.getLogger(__name__)

REFRESH_S = 30.0
"""Seconds a tenant's day total, as last read from SQL, answers ``over_cap``
before it is read again (other replicas' calls reach it by then)."""


def today() -> date:
    """The current UTC day: the ledger's day."""
    return datetime.now(timezone.utc).date()


class TokenMeter:
    """Records model calls' tokens (SQL ledger, metrics) and checks the tenants'
    daily caps (module docstring). One per pipeline."""

    def __init__(self, settings: Settings, store: Store, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        #: tenant → (UTC day, that day's total tokens as last read, monotonic time of the read)
        self._spent: dict[str, tuple[date, int, float]] = {}
        self._warned: set[tuple[str, date]] = set()
        self._pending: set[asyncio.Task] = set()

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """The estimated cost of the tokens at ``model``'s price (``Settings.model_prices``;
        0.0 for a model without one)."""
        price = self.settings.model_prices.get(model)
        return 0.0 if price is None else price.cost(input_tokens, output_tokens)

    def record_soon(self, tenant: str, subject: str, purpose: str, model: str, input_tokens: int,
                    output_tokens: int) -> None:
        """``record`` in a task of its own on the running loop, so that the SQL write
        never counts against the model call's own time bound (a recollection's
        ``timeout_s``); ``settle`` waits for those still running."""
        task = asyncio.get_running_loop().create_task(
            self.record(tenant, subject, purpose, model, input_tokens, output_tokens))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settle(self) -> None:
        """Wait for the records ``record_soon`` started (tests, a drain, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def record(self, tenant: str, subject: str, purpose: str, model: str, input_tokens: int,
                     output_tokens: int) -> None:
        """Add one call's tokens to the ledger and the metrics; ``subject`` is the
        person's ("" for none), ``purpose`` one of ``memory.store.ledger.PURPOSES``.
        Never raises: a failed write is logged (the metrics count it anyway)."""
        input_tokens, output_tokens = max(int(input_tokens), 0), max(int(output_tokens), 0)
        self.metrics.tokens.labels(tenant, purpose, "input").inc(input_tokens)
        self.metrics.tokens.labels(tenant, purpose, "output").inc(output_tokens)
        self.metrics.cost.labels(tenant, purpose).inc(self.cost(model, input_tokens, output_tokens))
        day = today()
        try:
            total = await asyncio.to_thread(self.store.record_tokens, tenant, subject, purpose, model,
                                            input_tokens, output_tokens, day)
        except Exception as exc:  # noqa: BLE001 - the ledger never fails the call it records
            log.warning("token ledger: could not record %s tokens of tenant %s: %s", purpose, tenant,
                        type(exc).__name__)
            return
        self._spent[tenant] = (day, total, time.monotonic())

    async def over_cap(self, tenant: str, purpose: str) -> bool:
        """True when ``tenant`` has a daily cap and today's tokens reached it: the
        caller then takes the path without a model for ``purpose`` (counted in
        ``huiyi_token_cap_reached_total``; logged once per tenant and day). A
        ledger that cannot be read counts as not reached."""
        cap = self.settings.tenant(tenant).model_cap_daily
        if cap <= 0:
            return False
        spent = await self.spent(tenant)
        if spent < cap:
            return False
        self.metrics.cap_reached.labels(tenant, purpose).inc()
        day = today()
        if (tenant, day) not in self._warned:
            self._warned.add((tenant, day))
            log.warning("tenant %s reached its daily token cap (%d of %d tokens on %s): the memory works "
                        "without the model until the day ends (template recollection, heuristic capture, "
                        "no consolidation)", tenant, spent, cap, day.isoformat())
        return True

    async def spent(self, tenant: str) -> int:
        """Today's tokens of ``tenant`` (every replica), from the last read when it
        is younger than ``REFRESH_S``, else read now. 0 when the ledger cannot be read."""
        day = today()
        known = self._spent.get(tenant)
        if known is not None and known[0] == day and time.monotonic() - known[2] < REFRESH_S:
            return known[1]
        try:
            total = await asyncio.to_thread(self.store.tokens_spent, tenant, day)
        except Exception as exc:  # noqa: BLE001 - an unreadable ledger never stops the memory
            log.warning("token ledger: could not read tenant %s's day: %s", tenant, type(exc).__name__)
            return 0
        self._spent[tenant] = (day, total, time.monotonic())
        return total


CAP_REASON = "token_cap"
"""The fallback reason of a recollection told by the template because the
tenant's daily token cap was reached."""


def capped_recollection(rec: Recollection, capped: bool) -> Recollection:
    """``rec`` with the fallback reason ``token_cap`` when ``capped`` (the tenant has
    a model, the cap kept it from this recollection) and the template stood in
    for the model (``no_model``); else ``rec`` as it is."""
    if capped and rec.fallback_reason == "no_model":
        log.info("recollection by the template: the tenant's daily token cap is reached")
        return replace(rec, fallback_reason=CAP_REASON)
    return rec


@dataclass
class TenantTokens:
    """One tenant's tokens over some days (``summarise_usage``): ``input_tokens``,
    ``output_tokens`` and ``calls`` in all; ``cost`` the estimate at the
    operator's prices; ``cap`` the daily cap (0: none); ``by_purpose``:
    purpose → {"input", "output", "calls", "cost"}; ``by_day``: UTC day (ISO)
    → tokens; ``by_person``: the persons who spent most, [(subject, tokens,
    cost)], most first (at most ``TOP_PERSONS``)."""

    tenant: str
    cap: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost: float = 0.0
    by_purpose: dict[str, dict[str, float]] = field(default_factory=dict)
    by_day: dict[str, int] = field(default_factory=dict)
    by_person: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def lines(self) -> list[str]:
        """Plain text for a terminal (operator output, English, like ``huiyi stats``)."""
        cap = f", daily cap {self.cap}" if self.cap else ", no daily cap"
        out = [f"tokens of tenant {self.tenant}: {self.input_tokens} in, {self.output_tokens} out in {self.calls} "
               f"calls, estimated cost {self.cost:.4f}{cap}"]
        for purpose, p in self.by_purpose.items():
            out.append(f"  {purpose:<12} {int(p['input']):>10} in {int(p['output']):>10} out "
                       f"{int(p['calls']):>6} calls  cost {p['cost']:.4f}")
        for subject, tokens, cost in self.by_person:
            out.append(f"  person {subject or '-'}: {tokens} tokens, cost {cost:.4f}")
        return out


TOP_PERSONS = 10
"""Persons listed per tenant by ``summarise_usage``."""


def summarise_usage(settings: Settings, tenant: str, rows: list[TokenUsage]) -> TenantTokens:
    """``tenant``'s ledger ``rows`` (``Store.token_usage``) summed for ``huiyi stats``
    and the console, costs at ``settings.model_prices``."""
    out = TenantTokens(tenant, cap=settings.tenant(tenant).model_cap_daily)
    persons: dict[str, list[float]] = {}
    for r in rows:
        price = settings.model_prices.get(r.model)
        cost = 0.0 if price is None else price.cost(r.input_tokens, r.output_tokens)
        out.input_tokens += r.input_tokens
        out.output_tokens += r.output_tokens
        out.calls += r.calls
        out.cost += cost
        p = out.by_purpose.setdefault(r.purpose, {"input": 0, "output": 0, "calls": 0, "cost": 0.0})
        p["input"] += r.input_tokens
        p["output"] += r.output_tokens
        p["calls"] += r.calls
        p["cost"] += cost
        out.by_day[r.day.isoformat()] = out.by_day.get(r.day.isoformat(), 0) + r.tokens
        who = persons.setdefault(r.subject, [0, 0.0])
        who[0] += r.tokens
        who[1] += cost
    out.by_person = sorted(((s, int(t), c) for s, (t, c) in persons.items()), key=lambda x: (-x[1], x[0]))[:TOP_PERSONS]
    return out
