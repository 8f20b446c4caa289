"""Follow-ups the person agreed to, sent: ``FollowupSender`` (issue 39 item 2).

A person who sent ``/memory followups on`` (``/记忆 回访 开``) may be asked one
short question about a plan once its time has passed (「面试怎么样啦？」), in the
chat where they told it. The sender is an object of its own that the app starts
and stops (``start``/``stop``), beside the turns; each ``tick(now)``, per tenant
that allows follow-ups (``TenantSettings.followups.enabled``):

1. **drop stale claims** — a follow-up claimed more than ``lease_s`` ago and
   never reported (its sender died mid-send, a ``/v1`` caller never
   acknowledged) may have gone out: it is dropped with a log line, never sent
   again (``Store.drop_stale_claims``);
2. **schedule** — for each person who opted in, every live memory that is a
   dated plan whose last day has passed (``memory.plans.plan_state`` PAST, at
   most ``memory.followups.LOOKBACK_DAYS`` ago) and may be asked about in its
   origin chat (``memory.followups.blocked``) gets one row in SQL, due at the
   first waking moment of the day after (``Store.schedule_followup``: unique per
   plan, so every replica may schedule and only one row exists);
3. **send** — each due row is checked again now (``check``): the person still
   opted in, the memory still live (a forget or a withdrawal deletes it), the
   chat not off the record (``/memory pause``), not private-in-a-group, no
   never-store clause; outside the tenant's waking hours (the tenant's zone) it
   is postponed to the next window; then it is **claimed** (``state`` due →
   sending, with the person's ``day_key`` for the local day: unique, so two
   replicas never both send it and a person gets at most one a day — a row whose
   day is taken waits for the next day) and sent through the platform's own
   sender (``senders``: Telegram ``sendMessage``, OneBot ``send_msg``, WeChat's
   customer-service message API / WeCom's app message API). On WeChat (an
   Official Account) it is sent only within 48 hours of the person's last
   message in that chat (``memory.followups.SEND_WINDOWS``; the chat log's
   ``Store.last_heard``): outside it, it is checked again every
   ``memory.followups.RECHECK_AFTER`` — sent once the person writes, or ended as
   too old once the plan is over ``LOOKBACK_DAYS`` past.

   Sent: marked ``sent`` and written to the chat log as the companion's line, so
   the person's answer is captured with the follow-up as its context
   (``gateway.capture_queue``: the context window of an answer to a follow-up is
   ``ANSWER_WINDOW``). A send that certainly failed (the platform refused it, or
   no connection was made) is made due again after ``retry_after_s`` and
   dropped with a log line after ``attempts``; one whose outcome is unknown (a
   timeout after the request went out) is dropped at once — never sent twice.

A follow-up whose platform the gateway cannot send on (no sender, or no bot of
that tenant) is left due for the ``/v1`` due-list (``due_list``/``ack``: a bot
that brings its own sending claims it there and acknowledges it).

The question is in the person's language (the plan's own, as a turn's language
is read; else the one they opted in with): written by the tenant's chat model
from the memory once the follow-up is claimed (``models``; purpose
``followup`` in the token ledger; ``memory.followups.written_question``: kept
only when grounded in that one memory), else — no model, the tenant's
``followups.model`` off, its token cap reached, a model failure, a timeout or a
question that does not stay grounded — ``memory.followups.template_text``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from memory.errors import NotFoundError
from memory.followups import (RECHECK_AFTER, SEND_WINDOWS, Question, blocked, day_key, followup_due_at,
                              in_send_window, template_text, written_question)
from memory.plans import PlanState, plan_of, plan_state
from memory.store import ChatLine, Followup, FollowupPref, utcnow
from memory.types import ChatRef, Memory, Namespace

__all__ = ["FollowupSender", "SendFailed", "Ready", "TickReport", "ANSWER_WINDOW", "TICK_EVERY_S"]

log = logging.getLogger(__name__)

TICK_EVERY_S = 60.0
"""Seconds between two ticks of a serving gateway's sender."""
ANSWER_WINDOW = timedelta(hours=24)
"""How long after a follow-up the person's answer still takes it as its context."""
PLAN_SPAN_DAYS = 40
"""How far back a dated memory's start may lie and its plan still end within the
lookback (a month-long plan starts up to 31 days before it ends)."""


class SendFailed(Exception):
    """A platform send of a follow-up failed. ``maybe_sent``: the request may have
    reached the platform (a timeout after it went out): never retried."""

    def __init__(self, message: str, *, maybe_sent: bool = False) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


#: ``(tenant, chat, namespace, pref, text, followup_id) -> None``; raises SendFailed
Sender = Callable[[str, ChatRef, Namespace, FollowupPref, str, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Ready:
    """A due follow-up that passed every check now: the row, the memory, the chat,
    the person's choice and the question."""

    followup: Followup
    memory: Memory
    chat: ChatRef
    pref: FollowupPref
    text: str


@dataclass
class TickReport:
    """What one tick did, summed over tenants (counts)."""

    scheduled: int = 0
    sent: int = 0
    retried: int = 0
    dropped: int = 0
    skipped: int = 0
    postponed: int = 0
    left_for_api: int = 0
    skipped_why: dict[str, int] = field(default_factory=dict)


def _holder() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"[:128]


class FollowupSender:
    """Schedules and sends the follow-ups of ``tenants`` (``{name:
    TenantSettings}``) over ``store`` (a ``memory.store.Store``); ``senders``
    maps a platform (``tg``, ``qq``) to its sender, and ``can_send(tenant,
    platform)`` says whether the gateway sends on that platform for that tenant
    (default: a sender exists). ``clock`` gives "now" (aware UTC; a fake clock in
    the bench). ``models``: the tenants' chat models (``gateway.llm.ChatModels``,
    or anything with its async ``metered``); None: every question is the
    template. Use ``tick`` directly, or ``start``/``stop`` in an event loop."""

    def __init__(self, store, tenants: Mapping, senders: Mapping[str, Sender] | None = None, *,
                 can_send: Callable[[str, str], bool] | None = None, clock: Callable[[], datetime] = utcnow,
                 every_s: float = TICK_EVERY_S, holder: str | None = None, models=None) -> None:
        self.store = store
        self.models = models
        self.tenants = dict(tenants)
        self.senders = dict(senders or {})
        self._can_send = can_send
        self.clock = clock
        self.every_s = every_s
        self.holder = holder or _holder()
        self._task: asyncio.Task | None = None

    def can_send(self, tenant: str, platform: str) -> bool:
        """True when this gateway sends follow-ups of ``tenant`` on ``platform``."""
        if platform not in self.senders:
            return False
        return self._can_send(tenant, platform) if self._can_send is not None else True

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Tick every ``every_s`` seconds in a task of this loop until ``stop``."""
        if self._task is None and any(t.followups.enabled for t in self.tenants.values()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop ticking (a send in flight is cancelled: its claim is dropped after the lease)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a store outage: the next tick tries again
                log.exception("followups: tick failed")
            await asyncio.sleep(self.every_s)

    # -- one pass ----------------------------------------------------------------

    async def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over every tenant (module docstring); returns what it did."""
        now = now or self.clock()
        report = TickReport()
        for tenant, t in self.tenants.items():
            if not t.followups.enabled:
                continue
            await asyncio.to_thread(self._drop_stale, tenant, t, now)
            report.scheduled += await asyncio.to_thread(self.schedule, tenant, now)
            due = await asyncio.to_thread(self.store.due_followups, tenant, now, 200)
            for f in due:
                await self._send_one(tenant, t, f, now, report)
        return report

    def _drop_stale(self, tenant: str, t, now: datetime) -> None:
        for f in self.store.drop_stale_claims(tenant, now - timedelta(seconds=t.followups.lease_s)):
            log.warning("followups: follow-up %s of %s dropped: claimed by %s at %s and never reported "
                        "(it may have been sent; never sent twice)", f.id, f.namespace, f.holder, f.claimed_at)

    def schedule(self, tenant: str, now: datetime) -> int:
        """Schedule the follow-ups of ``tenant``'s opted-in people whose plans have
        passed (module docstring, step 2); returns how many rows were added."""
        t = self.tenants[tenant]
        if not t.followups.enabled:
            return 0
        window = t.followups.window()
        added = 0
        for pref in self.store.followup_optins(tenant):
            for m in self.store.dated_memories(pref.namespace, now - timedelta(days=PLAN_SPAN_DAYS), now):
                if m.origin is None or plan_state(m, now, t.tz) is not PlanState.PAST:
                    continue
                if blocked(m, m.origin, now, t.tz, t.never_store) is not None:
                    continue
                plan = plan_of(m.text, m.created_at, m.event_time, m.event_end, t.tz)
                assert plan is not None and plan.last is not None  # PAST means a dated plan
                due = max(followup_due_at(plan.last, window, t.tz), window.next_start(now, t.tz))
                if self.store.schedule_followup(pref.namespace, m.id, m.origin.key, due):
                    added += 1
        return added

    def check(self, tenant: str, f: Followup, now: datetime) -> tuple[str, object]:
        """Where due follow-up ``f`` stands at ``now``: ``("ready", Ready)``,
        ``("skip", reason)`` (ended: never to be asked), ``("later", when)``
        (outside waking hours: postponed). Reads only; claims nothing."""
        t = self.tenants[tenant]
        pref = self.store.followup_pref(f.namespace)
        if pref is None or not pref.enabled:
            return "skip", "opted out"
        try:
            memory = self.store.get(f.namespace, f.memory_id)
        except NotFoundError:
            return "skip", "forgotten"
        chat = ChatRef.parse(f.chat)
        if self.store.paused(f.namespace, chat.group_key if chat.is_group else chat.key, now) is not None:
            return "skip", "paused"
        why = blocked(memory, chat, now, t.tz, t.never_store)
        if why is not None:
            return "skip", why
        window = t.followups.window()
        if not window.contains(now, t.tz):
            return "later", window.next_start(now, t.tz)
        if chat.platform in SEND_WINDOWS and not in_send_window(chat.platform, self.store.last_heard(tenant, chat),
                                                                 now):
            # WeChat: only within 48 h of the person's last message; left for the next time they write (a
            # plan past LOOKBACK_DAYS is then ended as too old by ``blocked``)
            return "later", now + RECHECK_AFTER
        return "ready", Ready(f, memory, chat, pref, template_text(memory, _lang(memory, pref, t), now, t.tz))

    def claim(self, tenant: str, ready: Ready, now: datetime, holder: str | None = None) -> str:
        """Claim ``ready`` for sending: ``"claimed"``; ``"taken"`` (another replica
        has it, or it is no longer due); ``"day"`` (the person already has one
        today: postponed to the next day's window)."""
        t = self.tenants[tenant]
        f = ready.followup
        if self.store.claim_followup(f.id, holder or self.holder, day_key(f.namespace, now, t.tz), now):
            return "claimed"
        again = self.store.followup(f.id)
        if again is None or again.state != "due":
            return "taken"
        window = t.followups.window()
        tomorrow = now.astimezone(window_zone(t.tz)).replace(hour=0, minute=0, second=0, microsecond=0) \
            + timedelta(days=1)
        self.store.followup_postpone(f.id, window.next_start(tomorrow, t.tz))
        return "day"

    def record_sent(self, tenant: str, ready: Ready, now: datetime) -> bool:
        """Mark ``ready`` sent and keep its text as the companion's line of its chat
        (the person's answer takes it as context). False when it was not claimed."""
        t = self.tenants[tenant]
        if not self.store.followup_sent(ready.followup.id, now):
            return False
        self.store.append_chat(tenant, ready.chat, ChatLine("bot", "bot", ready.text, now, "", t.persona_name))
        return True

    def record_failed(self, tenant: str, f: Followup, now: datetime, error: str, *, maybe_sent: bool) -> str:
        """A claimed follow-up's send failed: ``"retry"`` (due again after
        ``retry_after_s``) or ``"dropped"`` (attempts spent, or maybe sent: never
        twice), with a log line."""
        t = self.tenants[tenant]
        if maybe_sent or f.attempts + 1 >= t.followups.attempts:
            self.store.followup_end(f.id, "dropped", error, count_attempt=True)
            log.warning("followups: follow-up %s of %s in %s dropped after %d attempt(s): %s%s", f.id, f.namespace,
                        f.chat, f.attempts + 1, error, " (it may have been sent; never sent twice)" if maybe_sent else "")
            return "dropped"
        self.store.followup_retry(f.id, now + timedelta(seconds=t.followups.retry_after_s), error)
        log.info("followups: follow-up %s of %s in %s failed (attempt %d), retried later: %s", f.id, f.namespace,
                 f.chat, f.attempts + 1, error)
        return "retry"

    async def _send_one(self, tenant: str, t, f: Followup, now: datetime, report: TickReport) -> None:
        verdict, what = await asyncio.to_thread(self.check, tenant, f, now)
        if verdict != "skip" and not self.can_send(tenant, ChatRef.parse(f.chat).platform):
            report.left_for_api += 1  # the /v1 due-list's; one that can never be asked is ended below all the same
            return
        if verdict == "skip":
            await asyncio.to_thread(self.store.followup_end, f.id, "skipped", str(what))
            report.skipped += 1
            report.skipped_why[str(what)] = report.skipped_why.get(str(what), 0) + 1
            return
        if verdict == "later":
            await asyncio.to_thread(self.store.followup_postpone, f.id, what)
            report.postponed += 1
            return
        ready: Ready = what  # type: ignore[assignment]
        got = await asyncio.to_thread(self.claim, tenant, ready, now)
        if got != "claimed":
            report.postponed += got == "day"
            return
        ready = await self.write(tenant, ready, now)
        try:
            await self.senders[ready.chat.platform](tenant, ready.chat, f.namespace, ready.pref, ready.text, f.id)
        except SendFailed as exc:
            done = await asyncio.to_thread(self.record_failed, tenant, f, now, str(exc), maybe_sent=exc.maybe_sent)
            report.retried += done == "retry"
            report.dropped += done == "dropped"
            return
        except Exception as exc:  # noqa: BLE001 - an unknown failure: it may have gone out
            done = await asyncio.to_thread(self.record_failed, tenant, f, now, f"{type(exc).__name__}: {exc}",
                                           maybe_sent=True)
            report.dropped += 1
            return
        await asyncio.to_thread(self.record_sent, tenant, ready, now)
        report.sent += 1
        log.info("followups: follow-up %s of %s sent in %s", f.id, f.namespace, f.chat)

    async def question(self, tenant: str, ready: Ready, now: datetime) -> Question:
        """The question of ``ready``: the tenant's model's when it has one, the
        tenant's ``followups.model`` is on and its daily token cap is not reached,
        and the question stays grounded in the memory; else the template
        (``memory.followups.written_question``). Never raises."""
        t = self.tenants[tenant]
        lang = _lang(ready.memory, ready.pref, t)
        complete = None
        if self.models is not None and t.followups.model:
            try:
                complete = await self.models.metered(tenant, ready.followup.namespace.subject, "followup",
                                                     temperature=0.3, max_tokens=120)
            except Exception:  # noqa: BLE001 - the ledger's outage costs the written question only
                log.exception("followups: the model of %s could not be had; template used", tenant)
        return await written_question(ready.memory, lang, now, t.tz, complete=complete, persona_name=t.persona_name,
                                      persona_voice=t.persona, timeout_s=t.followups.model_timeout_s)

    async def write(self, tenant: str, ready: Ready, now: datetime) -> Ready:
        """``ready`` with its question written (``question``); the same object
        when the template it holds already is the question."""
        q = await self.question(tenant, ready, now)
        if q.mode == "written":
            log.info("followups: question for follow-up %s written by the model (coverage %.2f)",
                     ready.followup.id, q.coverage)
        return ready if q.text == ready.text else replace(ready, text=q.text)

    # -- the /v1 due-list ---------------------------------------------------------

    def due_list(self, tenant: str, now: datetime, limit: int = 20, holder: str = "v1") -> list[Ready]:
        """Claim and return at most ``limit`` follow-ups of ``tenant`` due now on
        platforms this gateway does not send on (a ``/v1`` bot sends them, then
        calls ``ack``). Schedules first; the same checks and the same claim (one
        caller wins each; at most one a person a day) as the sender. An
        unacknowledged one is dropped after ``lease_s`` (never sent twice)."""
        t = self.tenants[tenant]
        if not t.followups.enabled:
            return []
        self._drop_stale(tenant, t, now)
        self.schedule(tenant, now)
        out: list[Ready] = []
        for f in self.store.due_followups(tenant, now, 200):
            if len(out) >= limit:
                break
            if self.can_send(tenant, ChatRef.parse(f.chat).platform):
                continue
            verdict, what = self.check(tenant, f, now)
            if verdict == "skip":
                self.store.followup_end(f.id, "skipped", str(what))
            elif verdict == "later":
                self.store.followup_postpone(f.id, what)
            elif self.claim(tenant, what, now, holder) == "claimed":  # type: ignore[arg-type]
                out.append(what)  # type: ignore[arg-type]
        return out

    def ack(self, tenant: str, followup_id: int, now: datetime, *, sent: bool, error: str = "",
            text: str = "") -> str:
        """A ``/v1`` bot's report on a follow-up it claimed from the due-list:
        ``"sent"`` (kept as the companion's line with ``text``), ``"retry"`` or
        ``"dropped"`` (a failed send), ``"unknown"`` (not a claimed follow-up of
        ``tenant``)."""
        f = self.store.followup(followup_id)
        if f is None or f.tenant != tenant or f.state != "sending":
            return "unknown"
        if not sent:
            return self.record_failed(tenant, f, now, error or "the bot could not send it", maybe_sent=False)
        chat = ChatRef.parse(f.chat)
        pref = self.store.followup_pref(f.namespace) or FollowupPref(f.namespace, True, "", "", now)
        try:
            memory = self.store.get(f.namespace, f.memory_id)
            t = self.tenants[tenant]
            said = text or template_text(memory, _lang(memory, pref, t), now, t.tz)
        except NotFoundError:  # forgotten since it was claimed: nothing of it is kept
            self.store.followup_sent(f.id, now)
            return "sent"
        self.record_sent(tenant, Ready(f, memory, chat, pref, said), now)
        return "sent"


def _lang(memory: Memory, pref: FollowupPref, t) -> str:
    """The question's language: what the plan is written in, as a turn's
    (``locales.turn_language``), else the one the person opted in with, else the
    tenant's."""
    from locales import turn_language

    return turn_language(memory.text, hint=pref.lang or None, default=t.language)


def window_zone(tz):
    """The tzinfo of zone name ``tz`` (``memory.dates.zone``)."""
    from memory.dates import zone

    return zone(tz) if isinstance(tz, str) or tz is None else tz


def platform_senders(settings, telegram=None, onebot=None, wechat=None,
                     webhook=None) -> tuple[dict[str, Sender], Callable[[str, str], bool]]:
    """The senders of a serving gateway and its ``can_send``: Telegram
    (``TelegramRuntime.send_followup``, for a tenant with a bot token), OneBot
    (``OneBotHTTP.send_followup``, when an API root is configured) and WeChat
    (``WeChatRuntime.send_followup``: platform ``wx`` for a tenant whose
    Official Account has an AppID and AppSecret, ``wecom`` for a WeCom app) and
    the generic webhook (``WebhookRuntime.send_followup``: its platform, ``web``
    unless set, for a tenant with a ``webhook.callback_url``; other tenants'
    chats of that platform stay on the ``/v1`` due-list), each mapping its
    platform's errors to SendFailed (``maybe_sent`` where the request may have
    gone out)."""
    senders: dict[str, Sender] = {}

    if telegram is not None:
        async def tg(tenant: str, chat: ChatRef, ns: Namespace, pref: FollowupPref, text: str,
                     followup_id: int = 0) -> None:
            from aiogram.exceptions import TelegramAPIError, TelegramNetworkError

            try:
                await telegram.send_followup(tenant, chat, text)
            except TelegramNetworkError as exc:
                raise SendFailed(f"telegram: {exc}", maybe_sent=True) from exc
            except (TelegramAPIError, LookupError) as exc:
                raise SendFailed(f"telegram: {type(exc).__name__}: {exc}") from exc

        senders["tg"] = tg

    if onebot is not None:
        from bridges.qq.http import OneBotAPIError

        async def qq(tenant: str, chat: ChatRef, ns: Namespace, pref: FollowupPref, text: str,
                     followup_id: int = 0) -> None:
            user = chat.chat_id if not chat.is_group else ns.subject.partition(":")[2]
            try:
                await onebot.send_followup(pref.bot_id or None, chat, user, text)
            except OneBotAPIError as exc:
                raise SendFailed(f"onebot: {exc}", maybe_sent=exc.maybe_sent) from exc

        senders["qq"] = qq

    if wechat is not None:
        from bridges.wechat.api import WeChatAPIError

        async def wx(tenant: str, chat: ChatRef, ns: Namespace, pref: FollowupPref, text: str,
                     followup_id: int = 0) -> None:
            try:
                await wechat.send_followup(tenant, chat.chat_id, text)
            except WeChatAPIError as exc:
                raise SendFailed(f"wechat: {exc}", maybe_sent=exc.maybe_sent) from exc

        senders["wx"] = senders["wecom"] = wx

    if webhook is not None:
        from bridges.webhook.runtime import FollowupCallbackError

        async def hook(tenant: str, chat: ChatRef, ns: Namespace, pref: FollowupPref, text: str,
                       followup_id: int) -> None:
            try:
                await webhook.send_followup(tenant, chat, ns.subject.partition(":")[2], followup_id, text)
            except FollowupCallbackError as exc:
                raise SendFailed(f"webhook: {exc}", maybe_sent=exc.maybe_sent) from exc
            except LookupError as exc:
                raise SendFailed(f"webhook: {exc}") from exc

        for t in settings.tenants.values():  # each tenant's webhook platform (``web`` unless set)
            if t.webhook.callback_url:
                senders.setdefault(t.webhook.platform, hook)

    def can_send(tenant: str, platform: str) -> bool:
        t = settings.tenants.get(tenant)
        if t is None:
            return False
        if platform == "tg":
            return bool(t.telegram.token)
        if platform == "qq":
            return bool(settings.onebot.api_roots)
        if t.webhook.callback_url and platform == t.webhook.platform:
            return True
        if platform in ("wx", "wecom"):
            w = t.wechat
            return bool(w.app_id and w.app_secret) and (w.kind == "wecom") == (platform == "wecom")
        return False

    return senders, can_send
