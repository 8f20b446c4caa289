"""The turn: one person's message in, a reply (or nothing) out.

dedupe delivery → identity → command? → should the bot answer? → recall →
recollection → prompt → reply → capture. The chat never waits on the memory:
an index or store failure during recall degrades to no recollection, a failed
or ungrounded reconstruction to the template recollection, a reply-model
failure to an apology (or silence), and capture still runs (DESIGN
"Fallbacks"). Every answered turn leaves one audit line (gateway.observability),
one ``turn done`` log record with its ``turn_id`` (bound to every record the
turn writes, gateway.logs) and its stage latencies, and moves the metrics
(gateway.metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import logging
import re
import time
import unicodedata
from dataclasses import dataclass, replace
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta

from gateway.commands import ALL_WORDS, COMMAND_NAMES, CONFIRM_WORDS, LIST_ALL_WORDS, run_command
from gateway.config import Settings, TenantSettings
from gateway.errors import EmptyAnswer, LLMError, UnknownTenant
from gateway.llm import ChatModel
from bridges.contract import InboundMessage, TurnResult, Withdrawal
from gateway.logs import bind_turn, new_turn_id
from gateway.metrics import Metrics
from gateway.observability import turn_record, write_turn
from gateway.character_prompt import build_messages
from locales import translate, turn_language, written_language
from memory.capture import LLMExtractor, answered_line, capture, capture_edit
from memory.consolidate import SWEEP_EVERY_S, ConsolidationReport, Consolidator
from memory.core import MemoryCore
from memory.explain import TRACE_DEPTH, record_recall
from memory.identity import platform_subject
from memory.identity import resolve as resolve_identity
from memory.reconstruct import Recollection, reconstruct, without_markers
from memory.emotion import analyse
from memory.errors import DuplicateDelivery
from memory.store import ChatLine, PendingCapture, utcnow
from memory.types import ChatRef, Namespace

__all__ = ["Pipeline", "TurnResult"]

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I can't answer right now. Please try again in a moment."
CAPTURE_CONCURRENCY = 4
"""Background captures with LLM extraction running at once per pipeline."""
AFTER_BATCH = 32
"""Turns whose after-work (bookkeeping, heuristic capture) one worker batch takes."""
RESUME_AFTER_S = 60.0
"""A capture queued this many seconds ago and still not done is resumed."""
MIGRATE_DRAIN_S = 30.0
"""Seconds a chat migration waits for the captures queued before it (``migrate_chat``)."""
EDIT_WAITS_S = 30.0
"""Seconds an edit waits for the capture of its original still due in this process (``_apply_edit``)."""
CONSOLIDATION_EVERY_S = 60.0
"""Least seconds between two starts of the maintenance task's consolidation pass."""
MEMORY_COMMANDS = COMMAND_NAMES
REPUSH_WINDOW = timedelta(minutes=10)
"""A delivery with the content fingerprint of one claimed this recently is a re-push (same message, new id)."""
LANGUAGE_LOOKBACK = 8
"""Earlier lines of the person read for the language when the message itself does not say."""
#: Control words a chat model (or an agent framework prompt) uses for "say
#: nothing": NO_REPLY, NOREPLY, NO REPLY, HEARTBEAT_OK, optionally bracketed.
_SILENCE_RE = re.compile(r"(?i)(?<![A-Za-z0-9_])[\[<(]?\s*(?:NO[_ ]?REPLY|HEARTBEAT_OK)\s*[\]>)]?(?![A-Za-z0-9_])")
_PLATFORM_LABELS = {"tg": "Telegram", "qq": "QQ", "wx": "WeChat", "wecom": "WeCom"}


class Pipeline:
    """Runs turns for every configured tenant over one MemoryCore.

    ``models`` caches one ChatModel per tenant with a configured model;
    ``metrics``: where turns are counted and timed (a registry of its own when
    not given).
    """

    def __init__(self, settings: Settings, core: MemoryCore, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.core = core
        self.metrics = metrics or Metrics()
        self._models: dict[str, ChatModel] = {}
        self._captures: set[asyncio.Task] = set()
        self._capturing: set[int] = set()  # chat-log line ids whose capture runs in this process
        self._capture_slots: asyncio.Semaphore | None = None
        self._after: list[_After] = []  # queued for the worker (_spawn_after)
        self._worker: asyncio.Task | None = None
        # namespace → time.monotonic() of its last turn here, oldest first; bounded (_turned)
        self._last_turn: OrderedDict[str, float] = OrderedDict()
        self._idle_horizon_s = max((t.consolidation.idle_s for t in settings.tenants.values()), default=0.0)
        self._consolidators: dict[str, Consolidator] = {}
        self._consolidating: asyncio.Task | None = None
        self._consolidation_started: float | None = None
        self.metrics.watch_queues(process=self._queued_captures, database=core.store.captures_due,
                                  outbox=core.store.outbox_depth)

    def _queued_captures(self) -> int:
        """Captures queued or running in this process (the after-work queue and model captures)."""
        return len(self._after) + sum(1 for t in self._captures if t is not self._worker)

    def _counted(self, complete: Callable, purpose: str) -> Callable:
        """``complete`` (a model call) counting its failures in the metrics by
        ``purpose`` (reply, reconstruct, extract) and exception class."""
        errors = self.metrics.model_errors

        async def call(*args, **kwargs):
            try:
                return await complete(*args, **kwargs)
            except Exception as exc:
                errors.labels(purpose, type(exc).__name__).inc()
                raise

        return call

    def tenant(self, name: str) -> TenantSettings:
        """Settings of tenant ``name``; UnknownTenant if it is not configured."""
        try:
            return self.settings.tenant(name)
        except KeyError as exc:
            raise UnknownTenant(f"unknown tenant {name!r}") from exc

    def model(self, tenant: str) -> ChatModel | None:
        """The tenant's chat model, or None when none is configured."""
        cfg = self.tenant(tenant).llm
        if not cfg.configured:
            return None
        if tenant not in self._models:
            self._models[tenant] = ChatModel(cfg)
        return self._models[tenant]

    def extractor(self, tenant: str) -> LLMExtractor | None:
        """The tenant's LLM fact extractor when it has a chat model (None: the
        heuristic one). Call it on the event loop: the model call is scheduled back
        onto this loop from capture's worker thread. Temperature 0; the model's own
        timeout bounds it, and any failure falls back to the heuristic."""
        model = self.model(tenant)
        if model is None:
            return None
        complete = self._counted(functools.partial(model.complete, temperature=0.0, max_tokens=800), "extract")
        return LLMExtractor(complete, loop=asyncio.get_running_loop(),
                            timeout=model.settings.timeout * (model.settings.max_retries + 1) + 1)

    # -- consolidation (memory.consolidate) -----------------------------------

    def last_turn(self, ns: Namespace) -> float | None:
        """``time.monotonic()`` of the last turn of ``ns`` in this process (a
        message, a command or an edit), None when it had none since start-up."""
        return self._last_turn.get(str(ns))

    def _turned(self, ns: Namespace, now: float | None = None) -> None:
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
            self._consolidators[tenant] = Consolidator(self.core, self.tenant(tenant).consolidation.params())
        return self._consolidators[tenant]

    def _consolidation_model(self, tenant: str):
        """The tenant's chat model as consolidation calls it (temperature 0.2,
        bounded by ``cluster_timeout_s``, failures counted as ``consolidate``), or None."""
        model = self.model(tenant)
        if model is None:
            return None
        cfg = self.tenant(tenant).consolidation
        return self._counted(functools.partial(model.complete, temperature=0.2, timeout=cfg.cluster_timeout_s,
                                               max_tokens=800), "consolidate")

    async def consolidate(self, tenant: str, ns: Namespace, *, force: bool = True) -> ConsolidationReport:
        """One consolidation run of ``ns`` now (``/memory consolidate``, ``huiyi
        consolidate``): ``force`` runs it even when not due. Never blocks a turn
        (the store and the clustering run in threads; the model call is awaited)."""
        t = self.tenant(tenant)
        return await self.consolidator(tenant).run(ns, self._consolidation_model(tenant), lang=t.language,
                                                   force=force, tz=t.tz)

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
                try:
                    report = await worker.run(ns, self._consolidation_model(name), lang=t.language, tz=t.tz)
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

    def start_consolidation(self, every_s: float = CONSOLIDATION_EVERY_S) -> bool:
        """Start ``consolidate_idle`` in a task unless one is still running or the
        last one started less than ``every_s`` seconds ago; True when started.
        The maintenance task calls this every tick: a long run never delays its
        index maintenance, and the candidates query runs at most once a minute."""
        if self._consolidating is not None and not self._consolidating.done():
            return False
        now = time.monotonic()
        if self._consolidation_started is not None and now - self._consolidation_started < every_s:
            return False
        self._consolidation_started = now
        self._consolidating = asyncio.create_task(self.consolidate_idle())
        return True

    async def stop_consolidation(self) -> None:
        """Cancel the consolidation pass of ``start_consolidation`` if one runs and
        wait for it to end (what it wrote stays; the fragments it had not reached
        are considered again by the next pass, the watermark not having moved)."""
        task, self._consolidating = self._consolidating, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def addressed(self, t: TenantSettings, msg: InboundMessage) -> bool:
        """Would the bot answer: always in private; in groups when mentioned, when
        the message replies to the bot, or when a configured keyword appears."""
        if not msg.chat.is_group:
            return True
        if msg.mentions_bot or (msg.reply_to is not None and msg.reply_to.sender_is_bot):
            return True
        low = msg.text.casefold()
        return any(k.casefold() in low for k in t.group_keywords if k)

    async def handle(self, tenant: str, msg: InboundMessage, *, background_capture: bool = False,
                     claimed: asyncio.Event | None = None, privileged: bool = True) -> TurnResult:
        """Run one turn. Raises UnknownTenant, or NamespaceError for ids outside
        their patterns; everything after identity degrades instead of raising.

        ``background_capture``: return as soon as the reply is ready and capture the
        message in a task of this pipeline (``drain`` awaits them): for bridges that
        answer the platform before the capture. The capture is durable either way:
        the person's chat-log line carries it until it is done, and
        ``resume_captures`` runs what a crash or failure left behind.

        ``claimed``: set once the delivery is durably claimed — for a plain message
        when its chat-log line (and with it its capture) is committed, for a
        command or an edit when its delivery key is — so that a webhook can
        acknowledge the platform then, before the reply (``bridges.ack``). Not set
        for a duplicate, nor when the turn fails before its claim.

        Every log record the turn writes carries one ``turn_id``; the turn ends
        with a ``turn done`` record (ids, counts, stage latencies; the message and
        reply text only when ``Settings.audit_fragments`` allows).

        ``privileged`` False: ``/memory`` commands of this turn get no admin powers
        (the caller's channel may act only for the sender: a member API key)."""
        with bind_turn(new_turn_id(), tenant=tenant):
            res = await self._handle(tenant, msg, background_capture=background_capture, claimed=claimed,
                                     privileged=privileged)
            self._observe(res, msg)
            return res

    def _observe(self, res: TurnResult, msg: InboundMessage) -> None:
        """The turn's metrics and its ``turn done`` log record."""
        m = self.metrics
        if res.duplicate:
            m.turns.labels("duplicate").inc()
            return
        outcome = ("command" if res.command else "edit" if msg.is_edit else "not_addressed" if not res.addressed
                   else "replied" if res.reply is not None else "no_reply")
        m.turns.labels(outcome).inc()
        m.observe_stages(res.latency_ms)
        fields: dict = {"tenant": res.tenant, "namespace": res.namespace, "chat": res.chat,
                        "message_id": res.message_id, "outcome": outcome, "recalled": len(res.recalled),
                        "captured": len(res.captured), "capture_pending": res.capture_pending,
                        "fallback_reason": res.fallback_reason, "latency_ms": dict(res.latency_ms)}
        if self.settings.audit_fragments:  # the one privacy switch: words in logs only when it is on
            fields["text"] = msg.text
            fields["reply"] = res.reply
        log.info("turn done", extra=fields)

    async def _handle(self, tenant: str, msg: InboundMessage, *, background_capture: bool = False,
                      claimed: asyncio.Event | None = None, privileged: bool = True) -> TurnResult:
        t = self.tenant(tenant)
        chat = msg.chat
        if not chat.is_group and msg.chat_id != msg.sender_id:
            # a private conversation is the person's own: its log and memories are
            # keyed by the sender, whatever chat id the platform (or a caller) names
            chat = ChatRef(msg.platform, chat.kind, msg.sender_id, chat.thread_id)
            msg = msg.model_copy(update={"chat_id": msg.sender_id})
        ns = await asyncio.to_thread(resolve_identity, self.core.store, tenant, msg.platform, msg.sender_id)
        res = TurnResult(tenant=tenant, namespace=str(ns), chat=chat.key, message_id=msg.message_id)
        delivery = f"{tenant}|{msg.platform}|{chat.key}|{msg.message_id}"
        if msg.is_edit:  # a stable digest: replays in another process must find the same key
            delivery += f"|edit|{msg.timestamp.isoformat()}|{hashlib.sha256(msg.text.encode()).hexdigest()[:16]}"
        # a plain message claims its delivery in the transaction that logs its line
        # (Store.append_chat): a crash can then not leave it claimed but unrecorded
        plain = not msg.is_edit and not _is_memory_command(msg)
        # a platform that re-pushes one message under a new id (OneBot after a
        # reconnect) is caught by its content: bot, chat, sender, platform time, text
        # (a plain message claims it with its line, like its id; a command here)
        fingerprint = None if msg.is_edit else _content_key(tenant, msg, chat)
        if fingerprint is not None and not plain and not await asyncio.to_thread(
                self.core.store.claim_fingerprint, fingerprint, REPUSH_WINDOW):
            log.info("duplicate delivery %s (same content re-pushed)", delivery)
            self.metrics.deduplicated.labels("content").inc()
            res.duplicate = True
            return res
        if not plain and not await asyncio.to_thread(self.core.store.claim_delivery, delivery):
            log.info("duplicate delivery %s", delivery)
            self.metrics.deduplicated.labels("id").inc()
            res.duplicate = True
            return res
        if not plain and claimed is not None:
            claimed.set()
        try:
            return await self._turn(tenant, t, msg, ns, res, background_capture, delivery if plain else None,
                                    fingerprint if plain else None, claimed, privileged)
        except DuplicateDelivery:
            log.info("duplicate delivery %s", delivery)
            self.metrics.deduplicated.labels("id_or_content").inc()  # the line's claim: either may have hit
            res.duplicate = True
            return res
        except BaseException:
            # the turn did not finish: let the platform's retry through instead of
            # dropping it as a duplicate (the message must not be lost)
            await asyncio.to_thread(self.core.store.release_delivery, delivery)
            if fingerprint is not None:
                await asyncio.to_thread(self.core.store.release_delivery, fingerprint)
            raise

    async def _turn(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace,
                    res: TurnResult, background_capture: bool = False, claim: str | None = None,
                    fingerprint: str | None = None, claimed: asyncio.Event | None = None,
                    privileged: bool = True) -> TurnResult:
        chat = msg.chat
        started = time.perf_counter()
        self._turned(ns)  # consolidation waits until the person is idle
        lang = await self._language(tenant, t, msg)
        if not msg.sender_name:  # nothing visible in the name: a readable one, never a bare id
            label = _PLATFORM_LABELS.get(msg.platform, msg.platform)
            msg = msg.model_copy(update={"sender_name": translate(lang, "{platform} user {id}",
                                                                  platform=translate(lang, label), id=msg.sender_id)})
        if _is_memory_command(msg):
            res.command = True  # commands and their replies are never captured
            answer = await run_command(self.core, tenant, t, msg, ns, lang, privileged=privileged,
                                       consolidate=functools.partial(self.consolidate, tenant))
            res.reply = answer.text
            res.attachment = answer.attachment.to_json() if answer.attachment else None
            return res
        res.addressed = self.addressed(t, msg)
        if msg.is_edit:
            await self._apply_edit(tenant, t, msg, ns, res)
            res.latency_ms["total"] = _ms(started)
            return res
        # forwarded text is someone else's words: logged as such, never captured
        due = (res.addressed or not chat.is_group or t.capture_all_group_messages) and not msg.forwarded
        logged = translate(lang, "[forwarded] {text}", text=msg.text) if msg.forwarded else msg.text
        line_id = await asyncio.to_thread(
            self.core.store.append_chat, tenant, chat,
            ChatLine("user", msg.sender_id, logged, msg.timestamp, msg.message_id, msg.sender_name),
            capture=ns if due else None, claim=claim,
            fingerprint=(fingerprint, REPUSH_WINDOW) if fingerprint else None)
        if claimed is not None:  # the line, its claim and its capture are committed
            claimed.set()
        queued = utcnow()  # no later than any other replica's claim of this line (Store.take_captures)
        if due and line_id is not None:
            self._capturing.add(line_id)  # before the answer: maintenance must not resume it meanwhile
        rec: Recollection | None = None
        after: list[Callable[[], None]] | None = [] if background_capture else None
        try:
            if res.addressed:
                rec = await self._answer(tenant, t, msg, ns, lang, res, after)
        except BaseException:
            self._capturing.discard(line_id or 0)  # the line keeps its capture for resume_captures
            raise
        job = PendingCapture(line_id or 0, tenant, ns, chat, msg.message_id, msg.text, msg.timestamp,
                             addressed=res.addressed, queued=queued) if due else None
        if background_capture:
            res.latency_ms["total"] = _ms(started)
            res.capture_pending = job is not None
            if job is not None or after or rec is not None:
                self._spawn_after(after or [], job, res, rec)
            return res
        if job is not None:
            t0 = time.perf_counter()
            res.captured = await self._capture(job)
            res.latency_ms["capture"] = _ms(t0)
        res.latency_ms["total"] = _ms(started)
        if rec is not None:
            await self._audit(res, rec)
        return res

    async def _language(self, tenant: str, t: TenantSettings, msg: InboundMessage) -> str:
        """The turn's language (``locales.turn_language``): what the person writes —
        for a command its arguments (keywords such as ``all`` / ``confirm`` are no
        language: ``/memory forget all`` from a Chinese speaker is answered in
        Chinese), or a Chinese command word — then their earlier
        lines in this chat (read only when the message does not say), then the
        platform's hint, then the tenant's default. Forwarded text is someone
        else's words: it does not set the language."""
        text = "" if msg.forwarded else msg.text
        if msg.is_command:
            words = text.split()
            text = " ".join(w for w in words[2:] if w.casefold() not in ALL_WORDS | LIST_ALL_WORDS | CONFIRM_WORDS)
            if written_language(text) is None and written_language(" ".join(words[:2])) == "zh_CN":
                return "zh_CN"
        if written_language(text) is not None:
            return turn_language(text)
        try:
            tail = await asyncio.to_thread(self.core.store.chat_tail, tenant, msg.chat, LANGUAGE_LOOKBACK)
        except Exception as exc:  # noqa: BLE001 - the language is a nicety; the turn goes on
            log.warning("chat tail for the language of %s unavailable: %s", msg.chat.key, exc)
            tail = []
        previous = [line.text for line in reversed(tail) if line.role == "user" and line.sender_id == msg.sender_id
                    and not line.text.startswith("/")]
        return turn_language(text, previous, msg.language, t.language)

    # -- capture after the reply --------------------------------------------

    def _capture_sync(self, job: PendingCapture, extractor: LLMExtractor | None, last_try: bool, *,
                      done: list[int] | None = None, taken: bool = False) -> list[str]:
        """In a worker thread: capture one person's line into its namespace and mark
        its chat-log line done; returns the ids stored or updated. A failure is
        logged and leaves the line for ``resume_captures`` — unless ``last_try``,
        which gives it up (logged at ERROR) so that a message that always fails is
        not retried forever. ``done``: collect the line id there instead of marking
        it (the caller marks a batch at once). A line this process queued is taken
        first (``Store.take_captures``: with its text as it is now, which an edit may
        have changed meanwhile) unless ``taken`` says the caller did (and passed the
        job with that text); one another replica claimed meanwhile is left to it."""
        if job.queued is not None and job.line_id and not taken:
            took = self.core.store.take_captures({job.line_id: job.queued})
            if job.line_id not in took:
                log.info("capture of %s message %s left to the replica that claimed it", job.namespace,
                         job.message_id)
                return []
            job = replace(job, text=took[job.line_id])
        t = self.tenant(job.tenant)
        if self.core.store.is_redacted(job.tenant, job.chat, job.message_id):
            log.info("capture of %s message %s skipped: the message was withdrawn", job.namespace, job.message_id)
            if job.line_id:
                self.core.store.capture_done(job.line_id)
            return []
        try:
            context = self._answered(job.tenant, job.chat, job.line_id, job.at)
            results = capture(self.core, job.namespace, _without_bot_mention(job.text, t), chat=job.chat,
                              said_at=job.at, message_id=job.message_id, extractor=extractor, tz=t.tz,
                              addressed=_said_to_bot(job, t), own_texts=(t.persona,), context=context)
        except Exception:  # noqa: BLE001 - capture never breaks the turn; the line keeps it for a retry
            if not last_try:
                log.exception("capture failed for %s message %s; it will be retried", job.namespace, job.message_id)
                return []
            log.exception("capture of %s message %s failed again; given up", job.namespace, job.message_id)
            results = []
        if job.line_id and done is not None:
            done.append(job.line_id)
        elif job.line_id:
            self.core.store.capture_done(job.line_id)
        if results and self.core.store.is_redacted(job.tenant, job.chat, job.message_id):
            # withdrawn while this capture ran: what it just stored goes too
            self._retract_from(job.namespace, job.chat, job.message_id)
            return []
        return [r.memory.id for r in results if r.memory is not None and r.action not in ("rejected", "conflict")]

    def _answered(self, tenant: str, chat: ChatRef, line_id: int | None, at: datetime) -> str:
        """The context of the person's line ``line_id`` of ``chat``: the companion's
        line just before it (``memory.capture.answered_line``), "" when none (and
        in a group, without reading the log)."""
        if not line_id or chat.is_group:
            return ""
        return answered_line(self.core.store.line_before(tenant, chat, line_id), at, chat,
                             persona=self.tenant(tenant).persona_name)

    def _retract_from(self, ns: Namespace, chat: ChatRef, message_id: str) -> list[str]:
        """Retract every live memory of ``ns`` learned from ``message_id`` of ``chat``."""
        gone = []
        for memory in self.core.store.find_by_source(ns, chat, message_id):
            try:
                self.core.retract(ns, memory.id, actor="withdraw")
            except LookupError:  # retracted meanwhile
                continue
            gone.append(memory.id)
        return gone

    async def withdraw(self, tenant: str, w: Withdrawal) -> list[str]:
        """A person withdrew message ``w.message_id``: its chat-log line is redacted
        (and a message that arrives after its withdrawal is neither logged nor
        captured), a capture still due on it never runs, one running now is undone,
        and every memory it taught is retracted, as an edit to nothing would
        (history gone, no tombstone: said again, it is new). Idempotent. Returns
        the ids retracted. Raises UnknownTenant, or NamespaceError for ids outside
        their patterns."""
        self.tenant(tenant)
        chat = w.chat
        if not chat.is_group and w.chat_id != w.sender_id:  # a private chat is keyed by its person
            chat = ChatRef(w.platform, chat.kind, w.sender_id, chat.thread_id)
        ns = await asyncio.to_thread(resolve_identity, self.core.store, tenant, w.platform, w.sender_id)
        # the chat log keys a line by its platform sender, also for a linked person:<id>
        author = Namespace(tenant, platform_subject(w.platform, w.sender_id))

        def work() -> list[str]:
            self.core.store.withdraw_line(author, chat, w.message_id)
            return self._retract_from(ns, chat, w.message_id)

        gone = await asyncio.to_thread(work)
        log.info("withdrawal of %s message %s in %s: %d memories retracted", ns, w.message_id, chat.key, len(gone))
        return gone

    async def _capture(self, job: PendingCapture, *, last_try: bool = False) -> list[str]:
        """``_capture_sync`` in a thread (the extractor is made here, on the loop)."""
        try:
            return await asyncio.to_thread(self._capture_sync, job, self.extractor(job.tenant), last_try)
        finally:
            self._capturing.discard(job.line_id)

    def _spawn_after(self, after: list[Callable[[], None]], job: PendingCapture | None, res: TurnResult,
                     rec: Recollection | None) -> None:
        """Queue what follows a turn answered first: its bookkeeping (recall trace,
        ACT-R access times), the capture, and the turn's audit line. One worker runs the queue in batches, each batch in one thread
        and one ``MemoryCore.batch()`` (one index write), so that the answers of
        the next turns compete with one background thread, not one per message.
        Captures that need the tenant's model (LLM extraction: a network call each)
        run as their own tasks instead, ``CAPTURE_CONCURRENCY`` at a time."""
        item = _After(after, job, res, rec)
        if job is not None and self.model(job.tenant) is not None:
            if self._capture_slots is None:
                self._capture_slots = asyncio.Semaphore(CAPTURE_CONCURRENCY)
            task = asyncio.create_task(self._run_model_capture(item, self._capture_slots))
            self._captures.add(task)
            task.add_done_callback(self._captures.discard)
            return
        self._after.append(item)
        if self._worker is None or self._worker.done():
            # a context of its own: the worker outlives the turn that started it (no stale turn_id)
            self._worker = asyncio.create_task(self._after_worker(), context=contextvars.Context())
            self._captures.add(self._worker)
            self._worker.add_done_callback(self._captures.discard)

    async def _run_model_capture(self, item: _After, slots: asyncio.Semaphore) -> None:
        async with slots:
            if item.after:
                await asyncio.to_thread(_run_all, item.after)
            item.res.captured = await self._capture(item.job)  # type: ignore[arg-type]
            if item.rec is not None:
                await self._audit(item.res, item.rec)

    async def _after_worker(self) -> None:
        while self._after:
            batch = self._after[:AFTER_BATCH]
            del self._after[:AFTER_BATCH]

            def work() -> None:
                done: list[int] = []
                mine = {item.job.line_id: item.job.queued for item in batch
                        if item.job is not None and item.job.line_id and item.job.queued is not None}
                taken = self.core.store.take_captures(mine)  # one statement for the batch
                with self.core.batch():
                    for item in batch:
                        _run_all(item.after)
                        if item.job is None:
                            continue
                        if item.job.line_id in mine and item.job.line_id not in taken:
                            log.info("capture of %s message %s left to the replica that claimed it",
                                     item.job.namespace, item.job.message_id)
                            continue
                        job = replace(item.job, text=taken[item.job.line_id]) if item.job.line_id in taken else item.job
                        item.res.captured = self._capture_sync(job, None, last_try=False, done=done, taken=True)
                self.core.store.capture_done(*done)  # after the batch's index write
                self._capturing.difference_update(item.job.line_id for item in batch if item.job is not None)
                # the turn audit lines last, once the batch is written
                for item in batch:
                    if item.rec is not None:
                        self._audit_sync(item.res, item.rec)

            try:
                await asyncio.to_thread(work)
            except Exception:  # noqa: BLE001 - the lines keep their captures for resume_captures
                log.exception("background capture batch of %d failed", len(batch))
                self._capturing.difference_update(item.job.line_id for item in batch if item.job is not None)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait for the captures running after their turns (at most ``timeout``
        seconds); True when none is left. What is not done stays durable in the
        chat log for ``resume_captures``."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self._captures or self._after:
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if left is not None and left <= 0:
                return False
            if self._captures:
                await asyncio.wait(set(self._captures), timeout=left)
            else:
                await asyncio.sleep(0)
        return True

    async def resume_captures(self, older_than_s: float = RESUME_AFTER_S, limit: int = 100) -> int:
        """Run the captures that were queued more than ``older_than_s`` seconds ago
        and never finished (the process died after the reply, or the capture
        failed), one at a time, each tried one last time; returns how many ran.
        Each line is claimed first (``Store.claim_captures``: a lease of
        ``older_than_s`` seconds in the database), so two replicas resuming at the
        same moment never run the same line; captures in flight in this process
        are left alone."""
        jobs = await asyncio.to_thread(self.core.store.claim_captures,
                                       utcnow() - timedelta(seconds=older_than_s), limit)
        ran = 0
        for job in jobs:
            if job.line_id in self._capturing:
                continue
            try:
                self.tenant(job.tenant)
            except UnknownTenant:
                log.warning("pending capture of line %d: tenant %s is no longer configured; dropped",
                            job.line_id, job.tenant)
                await asyncio.to_thread(self.core.store.capture_done, job.line_id)
                continue
            self._capturing.add(job.line_id)
            await self._capture(job, last_try=True)
            ran += 1
        if ran:
            log.info("resumed %d pending capture(s)", ran)
        return ran

    async def _audit(self, res: TurnResult, rec: Recollection) -> None:
        """``_audit_sync`` in a thread."""
        await asyncio.to_thread(self._audit_sync, res, rec)

    def _audit_sync(self, res: TurnResult, rec: Recollection) -> None:
        """Append the turn's audit record (gateway.observability); a failure is logged, never raised."""
        try:
            write_turn(self.settings.data_dir, turn_record(res, rec, fragments=self.settings.audit_fragments))
        except Exception:  # noqa: BLE001 - the audit must never break the turn
            log.exception("turn audit failed for %s message %s", res.namespace, res.message_id)

    async def _answer(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace, lang: str,
                      res: TurnResult, after: list[Callable[[], None]] | None = None) -> Recollection:
        """Recall, recollection, prompt and (with a model) the reply. The turn's
        bookkeeping — the recall trace for ``/memory why`` and the recalled
        memories' access times — is appended to ``after`` when given (run after the
        answer), else done here; a failure there is logged, never raised."""
        chat = msg.chat
        tail = await asyncio.to_thread(self.core.store.chat_tail, tenant, chat, t.tail,
                                       max_age=timedelta(seconds=t.tail_max_age) if t.tail_max_age > 0 else None,
                                       now=msg.timestamp)
        t0 = time.perf_counter()
        hits = []
        reason = ""
        try:
            from memory.recall import RecallParams

            hits = await asyncio.to_thread(self.core.recall, ns, [line.text for line in tail if line.role == "user"
                                                                  and line.sender_id == msg.sender_id] or [msg.text],
                                           chat=chat, params=RecallParams(
                                               k=max(t.recall_k, TRACE_DEPTH),
                                               dormant_factor=t.consolidation.dormant_factor),
                                           query_valence=analyse(msg.text).valence,
                                           # as of the message, as its tail is: its 「上个月」 is the month
                                           # before it was said, however late it arrives; never ahead of the clock
                                           now=min(msg.timestamp, utcnow()))
        except Exception as exc:  # noqa: BLE001 - the chat never waits on the memory
            reason = f"recall failed: {type(exc).__name__}"
            log.warning("recall failed for %s: %s", ns, exc)
        res.latency_ms["recall"] = _ms(t0)
        self.metrics.recall_seconds.observe(res.latency_ms["recall"] / 1000)
        now = utcnow()
        ranked, hits = hits, hits[: t.recall_k]  # the trace keeps the runners-up for /memory why
        # reconstruction never raises: a model error, timeout or ungrounded answer gives the template
        rc, model = t.reconstruction, self.model(tenant)
        complete = None if model is None else self._counted(functools.partial(
            model.complete, temperature=rc.temperature, timeout=rc.timeout_s, max_tokens=rc.max_chars * 2),
            "reconstruct")
        rec = await reconstruct(hits, tail=tail, complete=complete, lang=lang, now=now, persona_name=t.persona_name,
                                persona_voice=t.persona, person_name=msg.sender_name or None, enabled=rc.enabled,
                                min_hits=rc.min_hits, max_chars=rc.max_chars, timeout_s=rc.timeout_s,
                                min_grounding=rc.min_grounding,
                                embedder=self.core.index.embedder if rc.embedding_check else None,
                                limit=t.recall_k, reason=reason, tz=t.tz)
        res.latency_ms["recollection"] = rec.latency_ms
        self.metrics.fallback(rec.fallback_reason)
        if rec.attempt is not None and rec.attempt.model_ms is not None:
            self.metrics.stage_seconds.labels("reconstruct_model").observe(rec.attempt.model_ms / 1000)

        def book() -> None:
            try:
                record_recall(self.core.store, ns, chat, ranked, t.recall_k, rec.fallback_reason, msg.timestamp)
                if rec.sources:
                    self.core.mark_recalled(ns, list(rec.sources), now)
            except Exception:  # noqa: BLE001 - bookkeeping never breaks the turn
                log.exception("could not record the recall of %s", ns)

        if after is None:
            await asyncio.to_thread(book)
        else:
            after.append(book)
        res.recalled = [h.memory.id for h in hits]
        res.recollection = rec.text
        res.fallback_reason = rec.fallback_reason
        res.prompt = build_messages(persona=t.persona, recollection=rec.text, tail=tail, lang=lang,
                                    group=chat.is_group)
        if model is None:
            return rec
        t1 = time.perf_counter()
        try:
            res.reply = _spoken(await model.complete(res.prompt))
            if res.reply is None:
                log.info("reply model chose silence for tenant %s chat %s", tenant, chat.key)
        except EmptyAnswer:
            log.info("reply model answered nothing for tenant %s chat %s: silence", tenant, chat.key)
            res.reply = None
        except LLMError as exc:
            self.metrics.model_errors.labels("reply", type(exc).__name__).inc()
            log.warning("reply failed for tenant %s chat %s: %s", tenant, chat.key, exc)
            res.reply = translate(lang, APOLOGY) if t.apology is None else (t.apology or None)
        res.latency_ms["reply"] = _ms(t1)
        if res.reply is not None:
            await asyncio.to_thread(self.core.store.append_chat, tenant, chat,
                                    ChatLine("bot", "bot", res.reply, utcnow(), "", t.persona_name))
        return rec

    async def _apply_edit(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace,
                          res: TurnResult) -> None:
        """An edited message: its chat-log line takes the new text, and what was
        captured from the original follows the edit (``memory.capture.capture_edit``:
        changed facts get a new version, facts the edit no longer states are
        retracted, new ones captured). The bot does not answer an edit again.

        An edit that arrives while the original's capture is still due in this
        process (queued after its answer, or running) waits for it, at most
        ``EDIT_WAITS_S`` seconds: a capture not yet started then reads the edited
        text (``Store.take_captures``), one running finishes first, and the edit
        revises what it stored — never the original's capture landing after the
        edit and superseding it with the old words."""
        chat = msg.chat
        lines = await asyncio.to_thread(self.core.store.edit_chat_line, tenant, chat, msg.message_id, msg.text)
        deadline = time.monotonic() + EDIT_WAITS_S
        while any(line in self._capturing for line in lines) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if not (res.addressed or not chat.is_group or t.capture_all_group_messages
                or await asyncio.to_thread(self.core.store.find_by_source, ns, chat, msg.message_id)):
            return
        extractor = self.extractor(tenant)

        def recapture() -> list[str]:
            # the bot's @-mention is no part of the fact, as in the original's capture (_capture_sync)
            context = self._answered(tenant, chat, lines[0] if lines else None, msg.timestamp)
            results = capture_edit(self.core, ns, _without_bot_mention(msg.text, t), chat=chat, said_at=msg.timestamp,
                                   message_id=msg.message_id, extractor=extractor, tz=t.tz, addressed=res.addressed,
                                   context=context)
            return [r.memory.id for r in results if r.memory is not None and r.action not in ("rejected", "conflict")]

        try:
            res.captured = await asyncio.to_thread(recapture)
        except Exception:  # noqa: BLE001 - an edit must never break the bridge
            log.exception("re-capture of edited message %s failed for %s", msg.message_id, ns)

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """``bridges.contract.TurnHandler.claim_nonce``: the nonce is kept in SQL
        (``Store.claim_nonce``) so that every replica refuses a replay."""
        return self.core.store.claim_nonce(tenant, platform, nonce, digest, at)

    async def migrate_chat(self, tenant: str, old: ChatRef, new: ChatRef) -> int:
        """A group chat got a new id (Telegram group → supergroup): its chat log and
        the origin (hence disclosure) of its memories move to ``new``; returns the
        number of memories moved. Audited per namespace (``Store.migrate_chat``);
        the index catches up through the outbox. Captures queued after their
        turns (which still name the old chat) land first, so that they move too.
        Raises UnknownTenant."""
        self.tenant(tenant)
        if not await self.drain(timeout=MIGRATE_DRAIN_S):
            log.warning("chat migration of %s: captures still running after %.0f s; they keep the old chat id",
                        old.key, MIGRATE_DRAIN_S)
        moved = await asyncio.to_thread(self.core.store.migrate_chat, tenant, old, new, f"bridge:{old.platform}")
        if moved.memories:
            try:
                await asyncio.to_thread(self.core.maintain)
            except Exception as exc:  # noqa: BLE001 - the outbox keeps what failed; maintenance retries
                log.warning("index update after chat migration deferred: %s", exc)
        log.info("chat %s migrated to %s for tenant %s: %d lines, %d memories", old.key, new.key, tenant,
                 moved.chat_lines, moved.memories)
        return moved.memories


@dataclass
class _After:
    """What is left of a turn answered first (``Pipeline._spawn_after``)."""

    after: list[Callable[[], None]]
    job: PendingCapture | None
    res: TurnResult
    rec: Recollection | None


def _is_memory_command(msg: InboundMessage) -> bool:
    """True for ``/memory …`` or ``/记忆 …`` (``@botname`` allowed); blank text is none."""
    words = msg.text.split(maxsplit=1)
    return msg.is_command and bool(words) and words[0].split("@")[0] in MEMORY_COMMANDS


def _content_key(tenant: str, msg: InboundMessage, chat: ChatRef) -> str:
    """The delivery's content fingerprint key: ``fp|<tenant>|<platform>|<chat>|`` +
    a SHA-256 digest of bot id, sender id, platform time, text and how it was
    addressed (mention, command, quoted message) — a re-push repeats all of them.
    Not under the ``<tenant>|`` prefix, so it is not counted as a turn of its own."""
    parts = (msg.bot_id or "", msg.sender_id, msg.timestamp.isoformat(), msg.text, str(msg.mentions_bot),
             str(msg.is_command), msg.reply_to.message_id if msg.reply_to else "")
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]
    return f"fp|{tenant}|{msg.platform}|{chat.key}|{digest}"


def _spoken(answer: str) -> str | None:
    """The model's answer as it may reach a person: control words (``NO_REPLY``,
    ``[NO_REPLY]``, ``HEARTBEAT_OK``…), ``[src:…]`` citations, memory ids and the
    recollection's block tags (``memory.reconstruct.without_markers``) removed
    wherever they stand; None — stay silent — when nothing is left but
    whitespace and punctuation, or when the answer was blank to begin with."""
    spoken = without_markers(_SILENCE_RE.sub("", answer))
    if spoken != answer:
        answer = spoken
        if not any(unicodedata.category(ch)[0] in "LNS" for ch in answer):
            return None
    answer = answer.strip()
    return answer or None


def _run_all(fns: list[Callable[[], None]]) -> None:
    for f in fns:
        f()


def _said_to_bot(job: PendingCapture, t: TenantSettings) -> bool:
    """Was the line said to the bot (its subject-less statements are then the
    speaker's, memory.capture)? Private chats always; in a group what the turn
    decided, or for a line read back from the store, true when the tenant does not
    capture all group messages (then only addressed ones were queued)."""
    if not job.chat.is_group:
        return True
    if job.addressed is not None:
        return job.addressed
    return not t.capture_all_group_messages


def _without_bot_mention(text: str, t: TenantSettings) -> str:
    """The message without the @-mention of this tenant's Telegram bot: "@mochi_bot
    我养了只猫" is a fact about the cat, not about the bot's handle."""
    name = (t.telegram.bot_username or t.telegram_bot_username or "").lstrip("@")
    if not name:
        return text
    return re.sub(rf"(?i)@{re.escape(name)}\b", "", text).strip()


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 2)
