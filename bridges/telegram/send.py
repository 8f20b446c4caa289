"""Replies to Telegram through aiogram's ``Bot`` (the one place that sends).

Where a reply goes is decided from the person's message, never guessed:
the same chat, the same forum topic (``message_thread_id``), and in groups a
reply to the addressed message (``reply_parameters`` with
``allow_sending_without_reply`` so a deleted original still gets its answer
in the same chat and topic). A reply never falls back to a private chat.

Text goes out as plain text (no ``parse_mode``): nothing the model writes is
interpreted as Markdown or HTML, so nothing needs escaping and nothing can
break the request. Texts longer than the Bot API limit (4096 characters,
counted in UTF-16 code units like every Bot API length) are split on
paragraph, line or word boundaries where one lies in the last quarter of a
chunk; only the first chunk is a reply, the rest follow in the same place.

Recoverable send errors are retried (tenacity): a forum topic that is gone
("message thread not found") → the chunk is sent again without the topic, in
the same chat; 429 → after the ``retry_after`` Telegram asks for (at most
RETRY_AFTER_MAX_S); a 5xx or a network error/timeout → at most SEND_ATTEMPTS
attempts with exponential backoff and jitter. Anything else is raised at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from bridges.contract import InboundMessage, Outbound

if TYPE_CHECKING:  # aiogram costs seconds to import; only the runtime needs it
    from aiogram import Bot

__all__ = ["TEXT_LIMIT", "split_text", "outbound_for", "send_outbound", "utf16_len", "SEND_ATTEMPTS",
           "RETRY_AFTER_MAX_S"]

log = logging.getLogger(__name__)

#: Bot API sendMessage text limit, in UTF-16 code units.
TEXT_LIMIT = 4096
_BREAKS = ("\n\n", "\n", " ")
SEND_ATTEMPTS = 4
"""Attempts per chunk for a recoverable error (429, 5xx, network) before it is raised."""
RETRY_AFTER_MAX_S = 30.0
"""Longest 429 ``retry_after`` waited for (seconds); a longer one is waited this long."""
BACKOFF_INITIAL_S = 0.5
"""First backoff after a 5xx or network error (seconds; doubles, with up to 0.5 s jitter, at most 8 s)."""


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (astral characters count 2)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _prefix_within(text: str, limit: int) -> int:
    """Largest n such that ``text[:n]`` is at most ``limit`` UTF-16 units."""
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def split_text(text: str, limit: int = TEXT_LIMIT) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` UTF-16 units.

    Cuts after a paragraph break, else a line break, else a space, when one
    lies in the last quarter of the chunk; otherwise hard at the limit (never
    inside a surrogate pair, since Python strings hold code points). Chunks
    are not stripped, so joining them gives back ``text``. An empty or blank
    text gives ``[]``. Raises ValueError for ``limit`` < 2.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 units")
    if not text.strip():
        return []
    chunks: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        cut = _prefix_within(rest, limit)
        window = rest[:cut]
        floor = cut - cut // 4
        for mark in _BREAKS:
            at = window.rfind(mark)
            if at >= floor:
                cut = at + len(mark)
                break
        chunks.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        chunks.append(rest)
    return chunks


def outbound_for(msg: InboundMessage, text: str) -> Outbound:
    """The reply to ``msg``: same chat and topic; in groups a reply to ``msg``."""
    return Outbound(platform=msg.platform, chat_kind=msg.chat_kind, chat_id=msg.chat_id, thread_id=msg.thread_id,
                    text=text, reply_to_message_id=msg.message_id if msg.chat.is_group else None)


async def send_outbound(bot: Bot, out: Outbound, *, limit: int = TEXT_LIMIT) -> list[int]:
    """Send ``out`` through ``bot`` as plain text, split at ``limit``; returns the
    sent message ids. Recoverable errors are retried per chunk (module docstring).
    Raises aiogram's TelegramAPIError subclasses unchanged (``TelegramMigrateToChat``
    carries the new chat id) after the chunks that went out, once retries are spent
    or for an error that no retry can fix."""
    from aiogram.types import ReplyParameters

    sent: list[int] = []
    chunks = [c for c in split_text(out.text, limit) if c.strip()]  # Telegram refuses blank messages
    for i, chunk in enumerate(chunks):
        kwargs: dict = {}
        if out.thread_id is not None:
            kwargs["message_thread_id"] = int(out.thread_id)
        if i == 0 and out.reply_to_message_id is not None:
            kwargs["reply_parameters"] = ReplyParameters(message_id=int(out.reply_to_message_id),
                                                         allow_sending_without_reply=True)
        message = await _send_chunk(bot, out, chunk, kwargs)
        sent.append(message.message_id)
    log.debug("telegram: sent %d chunk(s) to chat %s thread %s", len(sent), out.chat_id, out.thread_id)
    return sent


def _recoverable(exc: BaseException) -> bool:
    from aiogram.exceptions import TelegramNetworkError, TelegramRetryAfter, TelegramServerError

    return isinstance(exc, TelegramRetryAfter | TelegramServerError | TelegramNetworkError | TimeoutError)


def _wait(state) -> float:
    """Seconds before the next attempt: Telegram's ``retry_after`` for a 429, else exponential backoff."""
    from aiogram.exceptions import TelegramRetryAfter

    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, TelegramRetryAfter):
        return min(float(exc.retry_after), RETRY_AFTER_MAX_S)
    return wait_exponential_jitter(multiplier=BACKOFF_INITIAL_S, max=8.0, jitter=0.5)(state)


def _thread_gone(exc: BaseException) -> bool:
    from aiogram.exceptions import TelegramBadRequest

    return isinstance(exc, TelegramBadRequest) and "thread not found" in str(exc).lower()


async def _send_chunk(bot: Bot, out: Outbound, chunk: str, kwargs: dict):
    """One ``sendMessage`` with the retries of the module docstring; returns the Message."""
    async for attempt in AsyncRetrying(retry=retry_if_exception(_recoverable), wait=_wait,
                                       stop=stop_after_attempt(SEND_ATTEMPTS), reraise=True):
        with attempt:
            n = attempt.retry_state.attempt_number
            if n > 1:
                log.info("telegram: retrying send to chat %s (attempt %d)", out.chat_id, n)
            try:
                return await bot.send_message(chat_id=int(out.chat_id), text=chunk, parse_mode=None, **kwargs)
            except Exception as exc:
                if "message_thread_id" not in kwargs or not _thread_gone(exc):
                    raise
                # the topic was deleted or closed for good: the answer still belongs in this chat
                log.warning("telegram: thread %s of chat %s is gone; sending without it", out.thread_id, out.chat_id)
                kwargs.pop("message_thread_id")
                return await bot.send_message(chat_id=int(out.chat_id), text=chunk, parse_mode=None, **kwargs)
    raise AssertionError("unreachable: tenacity re-raises the last error")
