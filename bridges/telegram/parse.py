"""Telegram Bot API Update / Message → InboundMessage (pure dict parsing).

aiogram is deliberately not imported here: it costs seconds to import and the
parser only needs a handful of fields. Accepted shapes: a full ``Update``
(``update_id`` plus one of ``message``, ``edited_message``, …) or a bare
``Message`` object.

Only a person's text becomes a message. Ignored (None, logged at DEBUG):
channel posts, messages sent on behalf of a chat (``sender_chat``: anonymous
group admins, channels, automatic forwards), messages from bots (including
GroupAnonymousBot), messages without text or caption (service messages such
as ``new_chat_members``, ``pinned_message``, ``forum_topic_created``, stickers
and captionless media), and every non-message update (``message_reaction``,
``my_chat_member``, ``chat_member``, ``callback_query`` …: ``KNOWN_UPDATES``); an
update of a type the Bot API does not document is ignored with an INFO line.
Malformed input (not an object, no ``chat``, ``from``, ``message_id`` or
``date``) is ignored with a WARNING. ``parse_update`` raises only pydantic
ValidationError, for a sender id that is a placeholder (``from.id`` 0).

Entity offsets and lengths are in UTF-16 code units (Bot API, "MessageEntity");
they are sliced on the UTF-16 encoding, so emoji and other astral characters
before an entity are handled.
"""

from __future__ import annotations

import logging
from typing import Any

from bridges.common import clip_text, epoch_utc, ignored_kind
from bridges.contract import InboundMessage, ReplyRef
from memory.types import ID_RE, SHARED_SENDERS, ChatKind, clean_name

__all__ = ["parse_update", "parse_migration", "PLATFORM", "SERVICE_USER_IDS", "KNOWN_UPDATES"]

log = logging.getLogger(__name__)

PLATFORM = "tg"
#: Senders that stand for a chat, never a person: Telegram service
#: notifications / automatic forwards (777000), Channel_Bot (136817688) and
#: GroupAnonymousBot (1087968824) — the ``tg:`` entries of
#: ``memory.types.SHARED_SENDERS``.
SERVICE_USER_IDS = frozenset(s.split(":", 1)[1] for s in SHARED_SENDERS if s.startswith(PLATFORM + ":"))
_CHAT_KINDS = {"private": ChatKind.PRIVATE, "group": ChatKind.GROUP, "supergroup": ChatKind.GROUP}
_MESSAGE_UPDATES = {"message": False, "edited_message": True}
#: Every other kind of Update the Bot API documents (its "Update" object): ignored at
#: DEBUG, since a bot receives them routinely. A kind outside these is logged at INFO.
KNOWN_UPDATES = frozenset((
    "channel_post", "edited_channel_post", "business_connection", "business_message", "edited_business_message",
    "deleted_business_messages", "message_reaction", "message_reaction_count", "inline_query",
    "chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query", "purchased_paid_media",
    "poll", "poll_answer", "my_chat_member", "chat_member", "chat_join_request", "chat_boost", "removed_chat_boost"))
#: A message carrying any of these was forwarded: ``forward_origin`` (Bot API 7.0+,
#: types user / hidden_user / chat / channel) and the fields it replaced.
FORWARD_FIELDS = ("forward_origin", "forward_from", "forward_from_chat", "forward_from_message_id",
                  "forward_signature", "forward_sender_name", "forward_date")
_SERVICE_FIELDS = (
    "new_chat_members", "left_chat_member", "new_chat_title", "new_chat_photo", "delete_chat_photo",
    "group_chat_created", "supergroup_chat_created", "channel_chat_created", "migrate_to_chat_id",
    "migrate_from_chat_id", "pinned_message", "forum_topic_created", "forum_topic_edited",
    "forum_topic_closed", "forum_topic_reopened", "general_forum_topic_hidden",
    "general_forum_topic_unhidden", "video_chat_started", "video_chat_ended",
    "video_chat_scheduled", "video_chat_participants_invited", "message_auto_delete_timer_changed",
    "write_access_allowed", "users_shared", "chat_shared", "successful_payment",
)


def _id(value: Any) -> str | None:
    """A Bot API id (integer) as a string, or None when absent or outside ``ID_RE``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        text = str(value)
        if ID_RE.fullmatch(text):
            return text
    return None


def _utf16_slice(text: str, offset: Any, length: Any) -> str | None:
    """``text[offset:offset+length]`` counted in UTF-16 code units, or None if invalid."""
    if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
        return None
    units = text.encode("utf-16-le", "surrogatepass")  # a lone surrogate counts as the one unit it is
    if 2 * (offset + length) > len(units):
        return None
    return units[2 * offset : 2 * (offset + length)].decode("utf-16-le", errors="replace")


def _display_name(user: dict) -> str:
    """First + last name, else the username, each cleaned (``clean_name``): a
    first name of only filler or zero-width characters falls through to the
    username, and to ``""`` when nothing visible is left."""
    full = clean_name(" ".join(p for p in (user.get("first_name"), user.get("last_name")) if isinstance(p, str)))
    return full or clean_name(user.get("username"))


def _text_of(msg: dict) -> tuple[str, list]:
    """The message's text and its entities; a caption counts as text."""
    text = msg.get("text")
    if isinstance(text, str) and text:
        entities = msg.get("entities")
    else:
        text, entities = msg.get("caption"), msg.get("caption_entities")
    if not isinstance(text, str):
        text = ""
    return text, entities if isinstance(entities, list) else []


def _reply_ref(msg: dict, bot_key: str | None = None) -> ReplyRef | None:
    quoted = msg.get("reply_to_message")
    if not isinstance(quoted, dict):
        return None
    quoted_id = _id(quoted.get("message_id"))
    if quoted_id is None:
        return None
    # In a forum topic every message "replies" to the topic's creation message;
    # that is the topic, not a quote.
    if msg.get("is_topic_message") is True and "forum_topic_created" in quoted:
        return None
    sender = quoted.get("from") if isinstance(quoted.get("from"), dict) else {}
    text, _ = _text_of(quoted)
    quote = msg.get("quote")
    if isinstance(quote, dict) and isinstance(quote.get("text"), str):
        text = quote["text"]
    sender_id = _id(sender.get("id"))
    # with the bot's id known, only a reply to *this* bot addresses it (not to another bot in the group)
    is_this_bot = sender_id == bot_key if bot_key is not None else sender.get("is_bot") is True
    return ReplyRef(
        message_id=quoted_id,
        sender_id=sender_id,
        sender_is_bot=is_this_bot,
        text=text,
    )


def _unwrap(payload: dict) -> tuple[dict | None, bool, str]:
    """(message, is_edit, kind) from an Update or a bare Message; message None if not one."""
    if "update_id" in payload:
        kinds = [k for k in payload if k != "update_id"]
        kind = kinds[0] if kinds else "empty"
        for key, is_edit in _MESSAGE_UPDATES.items():
            if key in payload:
                msg = payload[key]
                return (msg if isinstance(msg, dict) else None), is_edit, key
        return None, False, kind
    if "message_id" in payload and "chat" in payload:
        return payload, "edit_date" in payload, "bare message"
    return None, False, "unknown"


def parse_update(
    payload: dict,
    *,
    bot_id: str | None = None,
    bot_username: str | None = None,
) -> InboundMessage | None:
    """Parse a Telegram Update or bare Message into an InboundMessage, or None.

    ``bot_id`` (numeric id as a string) and ``bot_username`` (with or without
    ``@``) identify the bot; without them ``mentions_bot`` stays False.

    Result: platform ``"tg"``; chat kind PRIVATE for ``private``, GROUP for
    ``group`` and ``supergroup``; ``thread_id`` is ``message_thread_id`` only
    when ``is_topic_message`` is true (a reply thread in a non-forum group is
    not a topic); ``sender_id`` is ``str(from.id)``; ``sender_name`` is
    first + last name, else the username; ``text`` is the text or caption;
    ``mentions`` holds ``"@username"`` for each ``mention`` entity and the
    user id for each ``text_mention``; ``mentions_bot`` is true for a
    ``mention`` of ``@bot_username`` (case-insensitive), a ``text_mention`` of
    ``bot_id`` or a ``/cmd@bot_username`` command; ``is_command`` when a
    ``bot_command`` entity starts at offset 0 and is not addressed to another
    bot; ``reply_to`` from ``reply_to_message`` (its sender may be unknown;
    ``sender_is_bot`` means this bot when ``bot_id`` is given, any bot otherwise);
    ``is_edit`` for ``edited_message`` or a bare Message with ``edit_date``;
    ``timestamp`` is ``date`` as UTC (the original send time, also for
    edits; the time of receipt when out of range, ``epoch_utc``); text over
    MAX_TEXT_CHARS is cut (``clip_text``); ``sender_name`` is cleaned
    (``memory.types.clean_name``); ``language`` is ``from.language_code``;
    ``bot_id`` the given ``bot_id``; ``forwarded`` when the message carries any of
    FORWARD_FIELDS (a forwarded ``/cmd`` is no command).

    Returns None for everything listed in the module docstring. Raises
    pydantic ValidationError (a 400 at the webhook) only for a sender whose id
    is a placeholder (``from.id`` 0): it fails closed.
    """
    if not isinstance(payload, dict):
        log.warning("telegram: payload is not an object (%s), ignored", type(payload).__name__)
        return None
    msg, is_edit, kind = _unwrap(payload)
    if msg is None:
        if kind == "unknown":
            log.warning("telegram: payload is neither an Update nor a Message, ignored")
        else:
            ignored_kind(log, f"telegram: update {payload.get('update_id')}", kind, KNOWN_UPDATES)
        return None

    message_id = _id(msg.get("message_id"))
    chat = msg.get("chat")
    if message_id is None or not isinstance(chat, dict):
        log.warning("telegram: %s without valid message_id/chat, ignored", kind)
        return None
    chat_id = _id(chat.get("id"))
    chat_type = chat.get("type")
    chat_kind = _CHAT_KINDS.get(chat_type) if isinstance(chat_type, str) else None  # a list or object: no kind
    if chat_id is None:
        log.warning("telegram: message %s without valid chat id, ignored", message_id)
        return None
    if chat_kind is None:
        log.debug("telegram: message %s in chat %s of type %r ignored", message_id, chat_id, chat.get("type"))
        return None
    if msg.get("sender_chat") is not None:
        log.debug("telegram: message %s in chat %s sent on behalf of a chat, ignored", message_id, chat_id)
        return None
    sender = msg.get("from")
    sender_id = _id(sender.get("id")) if isinstance(sender, dict) else None
    if sender_id is None:
        log.warning("telegram: message %s in chat %s without valid from.id, ignored", message_id, chat_id)
        return None
    if sender.get("is_bot") is True or sender_id in SERVICE_USER_IDS:
        log.debug("telegram: message %s from bot/service user %s ignored", message_id, sender_id)
        return None

    text, entities = _text_of(msg)
    if not text.strip():
        service = next((f for f in _SERVICE_FIELDS if f in msg), None)
        log.debug("telegram: message %s in chat %s has no text (%s), ignored",
                  message_id, chat_id, service or "media or empty")
        return None

    timestamp = epoch_utc(msg.get("date"), log, f"telegram: message {message_id}")
    if timestamp is None:
        return None
    # entities were sliced on the whole text; only the kept text goes on
    kept = clip_text(text, log, f"telegram: message {message_id}")

    thread_id = None
    if msg.get("is_topic_message") is True:
        thread_id = _id(msg.get("message_thread_id"))

    bot_name = bot_username.lstrip("@").lower() if isinstance(bot_username, str) and bot_username else None
    bot_key = str(bot_id) if bot_id is not None else None
    mentions: list[str] = []
    mentions_bot = False
    is_command = False
    for entity in entities:
        if not isinstance(entity, dict):
            continue
        etype = entity.get("type")
        if etype == "text_mention":
            user = entity.get("user")
            uid = _id(user.get("id")) if isinstance(user, dict) else None
            if uid is not None:
                mentions.append(uid)
                mentions_bot = mentions_bot or uid == bot_key
            continue
        if etype not in ("mention", "bot_command"):
            continue
        span = _utf16_slice(text, entity.get("offset"), entity.get("length"))
        if span is None:
            log.debug("telegram: message %s has an entity outside its text, skipped", message_id)
            continue
        if etype == "mention":
            mentions.append(span)
            mentions_bot = mentions_bot or (bot_name is not None and span.lower() == f"@{bot_name}")
        else:
            _, at, target = span.partition("@")
            addressed_here = not at or bot_name is None or target.lower() == bot_name
            if at and bot_name is not None and target.lower() == bot_name:
                mentions_bot = True
            if entity.get("offset") == 0 and addressed_here:
                is_command = True

    language = sender.get("language_code")
    forwarded = any(msg.get(f) is not None for f in FORWARD_FIELDS)
    return InboundMessage(
        platform=PLATFORM,
        message_id=message_id,
        sender_id=sender_id,
        sender_name=_display_name(sender),
        chat_kind=chat_kind,
        chat_id=chat_id,
        thread_id=thread_id,
        text=kept,
        timestamp=timestamp,
        mentions_bot=mentions_bot,
        mentions=tuple(mentions),
        reply_to=_reply_ref(msg, bot_key),
        is_edit=is_edit,
        is_command=is_command and not forwarded,
        forwarded=forwarded,
        language=language if isinstance(language, str) and language else None,
        bot_id=bot_key,
    )


def parse_migration(payload: dict) -> tuple[str, str] | None:
    """``(old_chat_id, new_chat_id)`` when ``payload`` (an Update or a bare
    Message) announces a group → supergroup migration, else None.

    Telegram sends two service messages: ``migrate_to_chat_id`` in the old
    group (its ``chat.id`` is the old id) and ``migrate_from_chat_id`` in the
    new supergroup (often from GroupAnonymousBot on behalf of the chat). Both
    give the same pair; handling either is enough and both are idempotent.
    Never raises.
    """
    if not isinstance(payload, dict):
        return None
    msg, _, _ = _unwrap(payload)
    if msg is None or not isinstance(msg.get("chat"), dict):
        return None
    chat_id = _id(msg["chat"].get("id"))
    if chat_id is None:
        return None
    to_id = _id(msg.get("migrate_to_chat_id"))
    if to_id is not None:
        return chat_id, to_id
    from_id = _id(msg.get("migrate_from_chat_id"))
    if from_id is not None:
        return from_id, chat_id
    return None
