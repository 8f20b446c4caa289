"""OneBot v11 event → InboundMessage (pure; no IO, no nonebot import).

Only ``post_type == "message"`` events from a person become messages. Every
other event (``message_sent`` i.e. the bot's own messages, ``notice``,
``request``, ``meta_event``), anonymous group messages, messages whose sender
is the bot itself and messages without text are ignored: ``parse_event``
returns None and logs why (DEBUG; INFO for a post type OneBot does not define,
WARNING for malformed input). It raises
only pydantic ValidationError, for a sender id that is a placeholder.

Text rendering of segments: ``text`` as is; ``at`` the bot or ``all`` dropped,
``at`` anyone else as ``@<name or qq>``; ``image`` its ``summary`` when the
implementation gives one (NapCat/LLOneBot); ``face`` and everything else
dropped. The result is stripped at both ends.

Forwards: a ``forward`` (or ``node``) segment is someone else's words. When the
message has text of its own, only that is kept; when the forward is all there
is and the implementation inlines it (``data.content``: NapCat, LLOneBot,
Lagrange), its texts become the message, marked ``forwarded``; a bare
``forward`` id has no text and is ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from bridges.qq.cqcode import decode_cq
from bridges.common import clip_text, epoch_utc, ignored_kind
from bridges.contract import InboundMessage, ReplyRef, Withdrawal
from memory.types import ID_RE, SHARED_SENDERS, ChatKind, clean_name

__all__ = ["parse_event", "parse_recall", "PLATFORM", "ANONYMOUS_USER_ID", "KNOWN_POST_TYPES"]

log = logging.getLogger(__name__)

PLATFORM = "qq"
#: OneBot v11's post types beside ``message`` (``notice``, ``request``, ``meta_event``:
#: heartbeats and lifecycle) and go-cqhttp's / NapCat's ``message_sent`` (the bot's own
#: messages): ignored at DEBUG. Any other is logged at INFO.
KNOWN_POST_TYPES = frozenset(("notice", "request", "meta_event", "message_sent"))
#: Message types beside ``private`` and ``group`` that are routine where a bot meets them:
#: go-cqhttp's QQ channels (``guild``). Ignored at DEBUG; any other at INFO.
KNOWN_OTHER_MESSAGE_TYPES = frozenset(("guild",))
#: Placeholder user_id that go-cqhttp reports for anonymous group messages
#: (the ``qq:`` entry of ``memory.types.SHARED_SENDERS``).
ANONYMOUS_USER_ID = next(s.split(":", 1)[1] for s in SHARED_SENDERS if s.startswith(PLATFORM + ":"))
_ROLES = frozenset({"owner", "admin", "member"})


def _id(value: Any) -> str | None:
    """A platform id as a string, or None when absent or outside ``ID_RE``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        text = str(value)
        if ID_RE.fullmatch(text):
            return text
    return None


def _segments(message: Any) -> list[dict]:
    if isinstance(message, str):
        return decode_cq(message)
    if isinstance(message, list):
        return [seg for seg in message if isinstance(seg, dict)]
    return []


def parse_recall(event: dict) -> Withdrawal | None:
    """A OneBot v11 withdrawal notice as a Withdrawal, or None for anything else.

    ``friend_recall`` (``user_id`` wrote and withdrew ``message_id`` in a private
    chat) and ``group_recall`` (``user_id`` wrote it in ``group_id``;
    ``operator_id`` withdrew it). ``time`` as UTC when valid. Never raises."""
    if not isinstance(event, dict) or event.get("post_type") != "notice":
        return None
    kind = event.get("notice_type")
    if kind not in ("friend_recall", "group_recall"):
        return None
    user_id, message_id = _id(event.get("user_id")), _id(event.get("message_id"))
    if user_id is None or message_id is None:
        log.warning("onebot: %s notice without valid user_id/message_id, ignored", kind)
        return None
    if kind == "group_recall":
        group_id = _id(event.get("group_id"))
        if group_id is None:
            log.warning("onebot: group_recall of message %s without valid group_id, ignored", message_id)
            return None
        chat_kind, chat_id = ChatKind.GROUP, group_id
    else:
        chat_kind, chat_id = ChatKind.PRIVATE, user_id
    return Withdrawal(platform=PLATFORM, message_id=message_id, sender_id=user_id, chat_kind=chat_kind,
                      chat_id=chat_id, operator_id=_id(event.get("operator_id")) or user_id,
                      timestamp=epoch_utc(event.get("time"), log, f"onebot: recall of {message_id}"))


def _forward_text(data: dict, depth: int = 0) -> list[str]:
    """Texts of a forward/node segment's inlined ``content``: a list of message
    events (each with ``message``) or of segments; nested forwards up to 3 deep."""
    content = data.get("content")
    if isinstance(content, (str, list)) and depth < 3:
        out: list[str] = []
        items = _segments(content)
        for item in items:
            if "type" in item:
                inner = item.get("data") if isinstance(item.get("data"), dict) else {}
                if item["type"] == "text" and isinstance(inner.get("text"), str):
                    out.append(inner["text"])
                elif item["type"] in ("forward", "node"):
                    out += _forward_text(inner, depth + 1)
            elif "message" in item or "raw_message" in item:
                node = item.get("message") if item.get("message") is not None else item.get("raw_message")
                out += _forward_text({"content": node}, depth + 1)
        return out
    return []


def parse_event(event: dict) -> InboundMessage | None:
    """Parse one OneBot v11 event into an InboundMessage, or None to ignore it.

    ``event`` is the decoded JSON object as pushed by the implementation
    (go-cqhttp, NapCat, Lagrange, …). ``message`` may be an array of segments
    or a CQ-code string. Result: platform ``"qq"``; ``chat_id`` is the
    ``group_id`` for group messages and the ``user_id`` for private ones;
    ``mentions`` lists the ``qq`` of each ``at`` segment (``"all"`` included);
    ``mentions_bot`` is true when one of them is ``self_id``; ``reply_to``
    comes from a ``reply`` segment (sender only when the segment names ``qq``);
    ``sender_role`` is ``sender.role`` when it is owner/admin/member;
    ``timestamp`` is ``time`` as UTC (the time of receipt when out of range,
    ``epoch_utc``); text over MAX_TEXT_CHARS is cut (``clip_text``);
    ``sender_name`` is the cleaned ``sender.card``, else the cleaned
    ``sender.nickname`` (``memory.types.clean_name``), else ``""``; ``bot_id`` is
    ``self_id``; ``is_command`` when the text starts with ``/``.

    Returns None for non-message events, the bot's own messages, anonymous
    group messages (never attributed to a person), unknown message types,
    empty text and malformed events. Raises pydantic ValidationError (a 400 at
    the route) only for a ``user_id`` that is a placeholder (``0``): it fails
    closed.
    """
    if not isinstance(event, dict):
        log.warning("onebot: payload is not an object (%s), ignored", type(event).__name__)
        return None
    post_type = event.get("post_type")
    if post_type != "message":
        ignored_kind(log, "onebot: event", post_type, KNOWN_POST_TYPES)
        return None

    message_type = event.get("message_type")
    sub_type = event.get("sub_type")
    self_id = _id(event.get("self_id"))
    user_id = _id(event.get("user_id"))
    message_id = _id(event.get("message_id"))
    if user_id is None or message_id is None:
        log.warning("onebot: message event without valid user_id/message_id (message_id=%r), ignored",
                    event.get("message_id"))
        return None
    if self_id is not None and user_id == self_id:
        log.debug("onebot: own message %s ignored", message_id)
        return None

    if message_type == "group":
        if event.get("anonymous") or sub_type == "anonymous" or user_id == ANONYMOUS_USER_ID:
            log.debug("onebot: anonymous group message %s ignored", message_id)
            return None
        group_id = _id(event.get("group_id"))
        if group_id is None:
            log.warning("onebot: group message %s without valid group_id, ignored", message_id)
            return None
        chat_kind, chat_id = ChatKind.GROUP, group_id
    elif message_type == "private":
        chat_kind, chat_id = ChatKind.PRIVATE, user_id
    else:
        ignored_kind(log, f"onebot: message {message_id}", message_type, KNOWN_OTHER_MESSAGE_TYPES)
        return None

    timestamp = epoch_utc(event.get("time"), log, f"onebot: message {message_id}")
    if timestamp is None:
        return None

    message = event.get("message")
    if message is None:
        message = event.get("raw_message")
    parts: list[str] = []
    mentions: list[str] = []
    mentions_bot = False
    reply_to: ReplyRef | None = None
    forwarded_parts: list[str] = []
    for seg in _segments(message):
        kind = seg.get("type")
        data = seg.get("data") if isinstance(seg.get("data"), dict) else {}
        if kind == "text":
            if isinstance(data.get("text"), str):
                parts.append(data["text"])
        elif kind == "at":
            qq = data.get("qq")
            target = "all" if qq == "all" else _id(qq)
            if target is None:
                continue
            mentions.append(target)
            if target == self_id:
                mentions_bot = True
            elif target != "all":
                name = data.get("name")
                parts.append(f"@{name}" if isinstance(name, str) and name else f"@{target}")
        elif kind == "reply" and reply_to is None:
            reply_id = _id(data.get("id"))
            if reply_id is not None:
                reply_sender = _id(data.get("qq"))
                quoted = data.get("text")
                reply_to = ReplyRef(
                    message_id=reply_id,
                    sender_id=reply_sender,
                    sender_is_bot=reply_sender is not None and reply_sender == self_id,
                    text=quoted if isinstance(quoted, str) else "",
                )
        elif kind == "image":
            summary = data.get("summary")
            if isinstance(summary, str) and summary:
                parts.append(summary)
        elif kind in ("forward", "node"):
            forwarded_parts += [t.strip() for t in _forward_text(data) if t.strip()]
    text = "".join(parts).strip()
    forwarded = False
    if not text and forwarded_parts:
        text, forwarded = "\n".join(forwarded_parts), True
    elif forwarded_parts:
        log.debug("onebot: message %s keeps its own text; its forwarded part is not the sender's", message_id)
    if not text:
        log.debug("onebot: message %s has no text, ignored", message_id)
        return None

    text = clip_text(text, log, f"onebot: message {message_id}")
    sender = event.get("sender") if isinstance(event.get("sender"), dict) else {}
    # a group card of only filler characters ("\u3164") falls through to the nickname
    name = clean_name(sender.get("card")) or clean_name(sender.get("nickname"))
    role = sender.get("role")
    return InboundMessage(
        platform=PLATFORM,
        message_id=message_id,
        sender_id=user_id,
        sender_name=name,
        chat_kind=chat_kind,
        chat_id=chat_id,
        bot_id=self_id,
        text=text,
        timestamp=timestamp,
        mentions_bot=mentions_bot,
        mentions=tuple(mentions),
        reply_to=reply_to,
        is_command=text.startswith("/") and not forwarded,
        forwarded=forwarded,
        sender_role=role if isinstance(role, str) and role in _ROLES else None,
    )
