"""The turn: one person's message in, a reply (or nothing) out.

dedupe delivery → identity → command? → should the bot answer? → recall →
recollection → prompt → reply → capture. The chat never waits on the memory:
an index or store failure during recall degrades to no recollection, a model
failure to an apology, and capture still runs (DESIGN "Fallbacks").
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from dataclasses import asdict, dataclass, field

from gateway.config import Settings, TenantSettings
from gateway.errors import LLMError, UnknownTenant
from gateway.llm import ChatModel
from gateway.messages import InboundMessage
from gateway.prompt import build_messages
from locales import resolve_language, translate
from memory.capture import LLMExtractor, capture, capture_edit
from memory.core import MemoryCore
from memory.emotion import analyse
from memory.reconstruct import Recollection, template_recollection
from memory.store import ChatLine, utcnow
from memory.types import Namespace

__all__ = ["Pipeline", "TurnResult"]

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I can't answer right now. Please try again in a moment."
MEMORY_COMMANDS = ("/memory", "/记忆")


@dataclass
class TurnResult:
    """What one turn did. ``recalled``/``captured`` are memory ids; ``prompt`` is the
    chat messages sent (or that would be sent) to the model; ``reply`` None when no
    model is configured or the bot stays silent; ``duplicate`` True for a
    re-delivered message (nothing else was done)."""

    tenant: str
    namespace: str
    chat: str
    message_id: str
    addressed: bool = False
    duplicate: bool = False
    command: bool = False
    recalled: list[str] = field(default_factory=list)
    recollection: str = ""
    fallback_reason: str | None = ""
    prompt: list[dict[str, str]] = field(default_factory=list)
    reply: str | None = None
    captured: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        """Plain JSON-able dict (the replay line and the HTTP answer)."""
        return asdict(self)


class Pipeline:
    """Runs turns for every configured tenant over one MemoryCore.

    ``models`` caches one ChatModel per tenant with a configured model.
    """

    def __init__(self, settings: Settings, core: MemoryCore) -> None:
        self.settings = settings
        self.core = core
        self._models: dict[str, ChatModel] = {}

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
        complete = functools.partial(model.complete, temperature=0.0, max_tokens=800)
        return LLMExtractor(complete, loop=asyncio.get_running_loop(),
                            timeout=model.settings.timeout * (model.settings.max_retries + 1) + 1)

    def addressed(self, t: TenantSettings, msg: InboundMessage) -> bool:
        """Would the bot answer: always in private; in groups when mentioned, when
        the message replies to the bot, or when a configured keyword appears."""
        if not msg.chat.is_group:
            return True
        if msg.mentions_bot or (msg.reply_to is not None and msg.reply_to.sender_is_bot):
            return True
        low = msg.text.casefold()
        return any(k.casefold() in low for k in t.group_keywords if k)

    async def handle(self, tenant: str, msg: InboundMessage) -> TurnResult:
        """Run one turn. Raises UnknownTenant, or NamespaceError for ids outside
        their patterns; everything after identity degrades instead of raising."""
        t = self.tenant(tenant)
        chat = msg.chat
        ns = Namespace.of(tenant, msg.platform, msg.sender_id)
        res = TurnResult(tenant=tenant, namespace=str(ns), chat=chat.key, message_id=msg.message_id)
        delivery = f"{tenant}|{msg.platform}|{chat.key}|{msg.message_id}"
        if msg.is_edit:  # a stable digest: replays in another process must find the same key
            delivery += f"|edit|{msg.timestamp.isoformat()}|{hashlib.sha256(msg.text.encode()).hexdigest()[:16]}"
        if not await asyncio.to_thread(self.core.store.claim_delivery, delivery):
            log.info("duplicate delivery %s", delivery)
            res.duplicate = True
            return res
        started = time.perf_counter()
        lang = resolve_language(msg.language, t.language)
        if msg.is_command and msg.text.split(maxsplit=1)[0].split("@")[0] in MEMORY_COMMANDS:
            res.command = True
            return res
        res.addressed = self.addressed(t, msg)
        await asyncio.to_thread(self.core.store.append_chat, tenant, chat,
                                ChatLine("user", msg.sender_id, msg.text, msg.timestamp, msg.message_id, msg.sender_name))
        if res.addressed:
            await self._answer(tenant, t, msg, ns, lang, res)
        if res.addressed or not chat.is_group or t.capture_all_group_messages:
            t0 = time.perf_counter()
            try:
                results = await asyncio.to_thread(capture_edit if msg.is_edit else capture, self.core, ns, msg.text,
                                                  chat=chat, said_at=msg.timestamp, message_id=msg.message_id,
                                                  extractor=self.extractor(tenant), tz=t.tz)
                res.captured = [r.memory.id for r in results
                                if r.memory is not None and r.action not in ("rejected", "conflict")]
            except Exception:  # noqa: BLE001 - capture must never break the turn; the message is in the chat log
                log.exception("capture failed for %s message %s", ns, msg.message_id)
            res.latency_ms["capture"] = _ms(t0)
        res.latency_ms["total"] = _ms(started)
        return res

    async def _answer(self, tenant: str, t: TenantSettings, msg: InboundMessage, ns: Namespace, lang: str,
                      res: TurnResult) -> None:
        chat = msg.chat
        tail = await asyncio.to_thread(self.core.store.chat_tail, tenant, chat, t.tail)
        t0 = time.perf_counter()
        hits = []
        reason = ""
        try:
            from memory.recall import RecallParams

            hits = await asyncio.to_thread(self.core.recall, ns, [line.text for line in tail if line.role == "user"
                                                                  and line.sender_id == msg.sender_id] or [msg.text],
                                           chat=chat, params=RecallParams(k=t.recall_k),
                                           query_valence=analyse(msg.text).valence)
        except Exception as exc:  # noqa: BLE001 - the chat never waits on the memory
            reason = f"recall failed: {type(exc).__name__}"
            log.warning("recall failed for %s: %s", ns, exc)
        res.latency_ms["recall"] = _ms(t0)
        now = utcnow()
        rec: Recollection = template_recollection(hits, lang=lang, name=msg.sender_name or None, now=now,
                                                  limit=t.recall_k, reason=reason)
        res.recalled = [h.memory.id for h in hits]
        res.recollection = rec.text
        res.fallback_reason = rec.fallback_reason
        res.prompt = build_messages(persona=t.persona, recollection=rec.text, tail=tail, lang=lang,
                                    group=chat.is_group)
        if rec.sources:
            try:
                await asyncio.to_thread(self.core.mark_recalled, ns, list(rec.sources), now)
            except Exception:  # noqa: BLE001
                log.exception("could not record recall access for %s", ns)
        model = self.model(tenant)
        if model is None:
            return
        t1 = time.perf_counter()
        try:
            res.reply = await model.complete(res.prompt)
        except LLMError as exc:
            log.warning("reply failed for tenant %s chat %s: %s", tenant, chat.key, exc)
            res.reply = translate(lang, APOLOGY)
        res.latency_ms["reply"] = _ms(t1)
        await asyncio.to_thread(self.core.store.append_chat, tenant, chat,
                                ChatLine("bot", "bot", res.reply, utcnow(), "", t.persona_name))


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 2)
