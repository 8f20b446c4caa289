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
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bridges.contract import InboundMessage, Outbound

if TYPE_CHECKING:  # aiogram costs seconds to import; only the runtime needs it
    from aiogram import Bot

__all__ = ["TEXT_LIMIT", "split_text", "outbound_for", "send_outbound", "utf16_len"]

log = logging.getLogger(__name__)

#: Bot API sendMessage text limit, in UTF-16 code units.
TEXT_LIMIT = 4096
_BREAKS = ("\n\n", "\n", " ")


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
    sent message ids. Raises aiogram's TelegramAPIError subclasses unchanged
    (``TelegramMigrateToChat`` carries the new chat id) after the chunks that
    went out."""
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
        message = await bot.send_message(chat_id=int(out.chat_id), text=chunk, parse_mode=None, **kwargs)
        sent.append(message.message_id)
    log.debug("telegram: sent %d chunk(s) to chat %s thread %s", len(sent), out.chat_id, out.thread_id)
    return sent
