"""Telegram runtime: webhook updates, long polling, replies — for every tenant
with a bot token (aiogram 3 ``Bot`` over its aiohttp session).

``TelegramRuntime.handle_update`` is the one path every update takes, from
the webhook route or from polling: a group → supergroup migration moves the
chat (``TurnHandler.migrate_chat``); anything ``parse_update`` ignores ends
there (the webhook still answers 200, so Telegram does not redeliver); a
person's message runs a turn and its reply is sent where the message was
said (``bridges.telegram.send``). From the webhook the update is
acknowledged as soon as the message is durably claimed, before the chat
model answers (``bridges.ack``): the reply always goes through the Bot API,
so Telegram never waits for the model. Polling (development) waits for each
turn. The capture runs after the reply in both. The webhook secret is
compared in constant time (``secret_ok``).

One ``Bot`` per tenant, created on first use inside the running event loop
and closed by ``close()``. ``TelegramSettings.api_base`` points the session at
another Bot API server (a local one, or the fake server of the tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from bridges.ack import AckedTurns
from bridges.telegram.parse import PLATFORM, parse_migration, parse_update
from bridges.telegram.send import outbound_for, send_outbound
from memory.types import ChatKind, ChatRef
from bridges.contract import Outbound, TurnHandler, TurnResult

if TYPE_CHECKING:
    from aiogram import Bot


__all__ = ["TelegramRuntime", "secret_ok", "make_bot", "load_aiogram", "TELEGRAM_MODULES", "set_webhook", "delete_webhook", "ALLOWED_UPDATES",
           "BotNotConfigured"]

log = logging.getLogger(__name__)

#: Update types requested from Telegram (setWebhook / getUpdates): everything
#: else would only be ignored.
ALLOWED_UPDATES = ("message", "edited_message")
_BACKOFF_S = (1, 2, 5, 10, 30)


class BotNotConfigured(LookupError):
    """The tenant has no Telegram bot token."""


def secret_ok(expected: str | None, got: str | None) -> bool:
    """True when the webhook secret header ``got`` equals the configured
    ``expected`` (constant-time compare). No configured secret → False: an
    unauthenticated webhook would let anyone speak as anyone."""
    if not expected or got is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), got.encode("utf-8"))


class TelegramRuntime:
    """Telegram for the tenants of ``pipeline``. Create and use it inside one
    event loop (the app's lifespan); ``close()`` releases the HTTP sessions."""

    def __init__(self, pipeline: TurnHandler) -> None:
        self.pipeline = pipeline
        self._bots: dict[str, Bot] = {}
        self.turns = AckedTurns(pipeline, "telegram")
        self._prepared: asyncio.Task | None = None

    # -- start-up -----------------------------------------------------------

    def prepare(self) -> None:
        """Start loading aiogram in a worker thread, then make each tenant's Bot
        and its HTTP session (``_prepare``), unless no tenant has a bot token.
        aiogram's import builds hundreds of pydantic models (13–20 s on 2 idle
        cores, far more under load): on the event loop, on a first reply, it held
        every request of the process. Call it on the loop at start-up; every send
        and the polling wait for it (``prepared``), never the webhook's answer."""
        if self._prepared is None and self.tenants_with_bots():
            self._prepared = asyncio.get_running_loop().create_task(self._prepare())

    @property
    def ready(self) -> bool:
        """True once ``prepare`` is done (or nothing was to prepare)."""
        return self._prepared is None or self._prepared.done()

    async def prepared(self) -> None:
        """Wait until ``prepare`` is done (at once when it was not started or is done)."""
        if self._prepared is not None and not self._prepared.done():
            await asyncio.shield(self._prepared)

    async def _prepare(self) -> None:
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(load_aiogram)
            for tenant in self.tenants_with_bots():
                await self.bot(tenant).session.create_session()
        except Exception as exc:  # noqa: BLE001 - the first reply loads it instead
            log.warning("telegram: preparing aiogram failed (%s: %s)", type(exc).__name__, exc)
            return
        log.info("telegram: aiogram and %d bot(s) ready in %.1f s", len(self._bots), time.perf_counter() - t0)

    # -- configuration ----------------------------------------------------

    def tenants_with_bots(self) -> list[str]:
        """Tenants that have a bot token configured."""
        return [name for name, t in self.pipeline.settings.tenants.items() if t.telegram.token]

    def identity(self, tenant: str) -> tuple[str | None, str | None]:
        """``(bot_id, bot_username)`` used to recognise mentions of the bot: the
        configured values, else the numeric prefix of the token."""
        t = self.pipeline.tenant(tenant)
        token = t.telegram.token or ""
        bot_id = t.telegram_bot_id or (token.split(":", 1)[0] if ":" in token else None)
        return bot_id, t.telegram.bot_username or t.telegram_bot_username

    def bot(self, tenant: str) -> Bot:
        """The tenant's aiogram Bot (created on first use). Raises
        BotNotConfigured without a token, UnknownTenant for an unknown tenant."""
        if tenant in self._bots:
            return self._bots[tenant]
        self._bots[tenant] = make_bot(self.pipeline.tenant(tenant).telegram, tenant)
        return self._bots[tenant]

    async def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for turns and replies in flight, then
        close every bot's HTTP session."""
        await self.turns.idle(timeout)
        if self._prepared is not None and not self._prepared.done():
            self._prepared.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._prepared
        bots, self._bots = list(self._bots.values()), {}
        for bot in bots:
            await bot.session.close()

    # -- updates ----------------------------------------------------------

    async def handle_update(self, tenant: str, payload: Any, *, wait: bool = False) -> bool:
        """Process one Update (a decoded JSON object); True when it is a person's
        message (its turn runs), False when it is not (ignored, or a migration).
        Returns as soon as the message is durably claimed and sends the reply when
        the turn ends (``bridges.ack``); with ``wait`` (polling) only once the
        turn has ended and its reply was sent. Sending failures are logged, never
        raised. Raises UnknownTenant, NamespaceError for ids outside their
        patterns, or what the turn raised before its claim."""
        migration = parse_migration(payload) if isinstance(payload, dict) else None
        if migration is not None:
            old, new = migration
            await self.pipeline.migrate_chat(tenant, ChatRef(PLATFORM, ChatKind.GROUP, old),
                                             ChatRef(PLATFORM, ChatKind.GROUP, new))
            return False
        bot_id, bot_username = self.identity(tenant)
        msg = parse_update(payload, bot_id=bot_id, bot_username=bot_username)
        if msg is None:
            return False

        async def deliver(result: TurnResult) -> None:
            await self._send(tenant, outbound_for(msg, result.reply))

        result = await self.turns.start(tenant, msg, within=math.inf if wait else 0.0, deliver=deliver)
        if result is not None and result.reply and not result.duplicate:
            if wait:
                await deliver(result)
            else:  # ended at its claim (a fast command): the reply still goes out after the answer
                self.turns.spawn(deliver(result))
        return True

    async def _send(self, tenant: str, out) -> None:
        await self.prepared()  # aiogram imported off the loop first
        from aiogram.exceptions import TelegramAPIError, TelegramMigrateToChat

        try:
            bot = self.bot(tenant)
        except BotNotConfigured:
            log.warning("telegram: tenant %s has no bot token; reply to chat %s not sent", tenant, out.chat_id)
            return
        try:
            await send_outbound(bot, out)
        except TelegramMigrateToChat as exc:
            # the group became a supergroup before we heard of it: same chat, new id
            new_id = str(exc.migrate_to_chat_id)
            await self.pipeline.migrate_chat(tenant, ChatRef(PLATFORM, ChatKind.GROUP, out.chat_id),
                                             ChatRef(PLATFORM, ChatKind.GROUP, new_id))
            try:
                await send_outbound(bot, out.model_copy(update={"chat_id": new_id}))
            except TelegramAPIError as again:
                log.warning("telegram: reply to migrated chat %s failed: %s", new_id, again)
        except TelegramAPIError as exc:
            log.warning("telegram: reply to chat %s (thread %s) failed: %s", out.chat_id, out.thread_id, exc)
        except Exception as exc:  # noqa: BLE001 - network errors: the turn is done, only the reply is lost
            log.warning("telegram: reply to chat %s failed: %s: %s", out.chat_id, type(exc).__name__, exc)

    async def send_followup(self, tenant: str, chat: ChatRef, text: str) -> None:
        """Send a follow-up question (``gateway.followups``) to ``chat`` through
        ``sendMessage`` (``send_outbound``: its own retries of 429, 5xx and network
        errors). Raises for the caller to judge:
        BotNotConfigured without a token; aiogram's TelegramAPIError subclasses
        (TelegramNetworkError: the request may have gone out)."""
        await self.prepared()
        out = Outbound(platform=PLATFORM, chat_kind=chat.kind, chat_id=chat.chat_id, thread_id=chat.thread_id,
                       text=text)
        await send_outbound(self.bot(tenant), out)

    # -- long polling (development) ----------------------------------------

    async def poll(self, tenant: str, *, stop: asyncio.Event | None = None) -> None:
        """Long-poll ``getUpdates`` for ``tenant`` until ``stop`` is set or the task
        is cancelled. Removes a registered webhook first (Telegram refuses
        getUpdates while one is set). Errors back off 1 → 30 s."""
        await self.prepared()
        bot = self.bot(tenant)
        timeout = self.pipeline.tenant(tenant).telegram.poll_timeout
        await bot.delete_webhook(drop_pending_updates=False)
        log.info("telegram: polling for tenant %s", tenant)
        offset: int | None = None
        failures = 0
        while stop is None or not stop.is_set():
            try:
                updates = await bot.get_updates(offset=offset, timeout=timeout, allowed_updates=list(ALLOWED_UPDATES))
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep polling
                delay = _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)]
                failures += 1
                log.warning("telegram: getUpdates for %s failed (%s); retrying in %d s", tenant, exc, delay)
                await asyncio.sleep(delay)
                continue
            for update in updates:
                offset = update.update_id + 1
                payload = update.model_dump(mode="json", by_alias=True, exclude_none=True)
                try:
                    await self.handle_update(tenant, payload, wait=True)
                except Exception:  # noqa: BLE001 - one bad update must not stop polling
                    log.exception("telegram: update %s of tenant %s failed", update.update_id, tenant)



TELEGRAM_MODULES = ("aiogram", "aiogram.exceptions", "aiogram.types", "aiogram.client.session.aiohttp",
                    "aiogram.client.telegram")
"""What this bridge imports on its first reply (``make_bot``, ``send_outbound``, ``_send``)."""


def load_aiogram() -> None:
    """Import what the first reply would (``TELEGRAM_MODULES``) and build the
    response models aiogram makes on a method's first answer: the session reads
    every answer as ``Response[<the method's result>]``, a pydantic generic built
    on first use — sendMessage's (Message's schema is most of aiogram's) and
    polling's. Blocking: for a worker thread (``TelegramRuntime.prepare``)."""
    import importlib

    for name in TELEGRAM_MODULES:
        importlib.import_module(name)
    from aiogram.methods.base import Response
    from aiogram.types import Message, Update

    for result in (Message, bool, list[Update]):
        Response[result]  # noqa: B018 - the subscription builds and caches the model


def make_bot(cfg: Any, tenant: str = "") -> Bot:
    """An aiogram Bot for ``TelegramSettings`` ``cfg``, its session pointed at
    ``cfg.api_base``. Raises BotNotConfigured without a token."""
    if not cfg.token:
        raise BotNotConfigured(f"tenant {tenant!r} has no Telegram bot token")
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    return Bot(cfg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(cfg.api_base)))


async def set_webhook(cfg: Any, url: str) -> bool:
    """Register ``url`` and ``cfg.webhook_secret`` with Telegram (``setWebhook``,
    only the update types huiyi reads). Raises BotNotConfigured, ValueError when
    no webhook secret is set (the webhook would refuse every update), and
    aiogram's TelegramAPIError when Telegram refuses."""
    if not cfg.webhook_secret:
        raise ValueError("telegram.webhook_secret is not set; the webhook would refuse every update")
    bot = make_bot(cfg)
    try:
        return await bot.set_webhook(url, secret_token=cfg.webhook_secret, allowed_updates=list(ALLOWED_UPDATES))
    finally:
        await bot.session.close()


async def delete_webhook(cfg: Any) -> bool:
    """Remove the bot's webhook, keeping pending updates. Raises BotNotConfigured."""
    bot = make_bot(cfg)
    try:
        return await bot.delete_webhook(drop_pending_updates=False)
    finally:
        await bot.session.close()
