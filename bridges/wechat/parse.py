"""WeChat Official Account (OA) / WeCom callback XML → InboundMessage (pure).

A callback body is one ``<xml>`` element whose children are flat fields
(``ToUserName``, ``FromUserName``, ``CreateTime``, ``MsgType``, ``Content``,
``MsgId``, WeCom adds ``AgentID``). In safe mode the body holds only
``Encrypt`` (and ``ToUserName``/``AgentID``); ``bridges.wechat.callback``
decrypts it first and hands the plaintext XML here.

Only a person's words become a message: ``text`` (``Content``) and ``voice``
with a speech ``Recognition`` result. Everything else returns None and is
logged at DEBUG: events (subscribe, menu clicks, location reports…), media
without text (image, video, voice without recognition, location, link); a
MsgType outside ``KNOWN_MSG_TYPES`` at INFO; malformed XML or a sender id
outside ``ID_RE`` is logged at WARNING. A ``<!DOCTYPE``/``<!ENTITY`` declaration is refused before parsing
(no entity expansion from the network). ``parse_message`` never raises.

Forwards: these callbacks mark no forwarded text (a forwarded text message
arrives as an ordinary ``text``), and a forwarded chat record arrives as a
non-text type (``link``, WeCom ``chatrecord``/``merged_msg``), which is
ignored: no forwarded content reaches capture as the sender's words.

Every chat is private: an OA or a WeCom app talks one to one. The chat id is
the sender, so the pipeline's per-chat delivery key makes ``MsgId`` dedupe
per sender (MsgId is not unique across users).

Why not ``wechatpy.parse_message``: it raises on malformed XML, a missing
``MsgType`` or an entity declaration, where this parser must return None, and
the few fields read here are simpler than mapping its message classes back.
wechatpy is used where it earns its place: the callback crypto
(``bridges.wechat.callback``).
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from bridges.common import clip_text, epoch_utc, ignored_kind
from bridges.contract import InboundMessage
from memory.types import ID_RE, ChatKind, is_placeholder_id

__all__ = ["parse_xml", "parse_message", "PLATFORM_OA", "PLATFORM_WECOM", "MAX_BODY_BYTES", "KNOWN_MSG_TYPES"]

log = logging.getLogger(__name__)

#: Platform codes: OA openids and WeCom user ids are different id spaces.
PLATFORM_OA = "wx"
PLATFORM_WECOM = "wecom"
#: The MsgTypes of the Official Account and WeCom callbacks that carry no text to keep
#: (media, location, link, file, mini-program card, a forwarded chat record): ignored at DEBUG. Any other is
#: logged at INFO. ``text`` and ``voice`` (its ``Recognition``) are read; ``event`` apart.
KNOWN_MSG_TYPES = frozenset(("image", "video", "shortvideo", "location", "link", "file", "miniprogrampage", "chatrecord",
                             "merged_msg"))
#: Callbacks are small; anything bigger is not one.
MAX_BODY_BYTES = 256 * 1024


def parse_xml(body: bytes | str) -> dict[str, str] | None:
    """The fields of a callback body: ``{tag: text}`` of the root's children
    (text stripped; empty elements give ``""``). None for a body that is too
    large, declares a DOCTYPE or entities, is not well-formed, or whose root
    is not ``<xml>``. Never raises."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if not isinstance(raw, bytes | bytearray) or len(raw) > MAX_BODY_BYTES:
        log.warning("wechat: body missing or larger than %d bytes, ignored", MAX_BODY_BYTES)
        return None
    try:
        # defusedxml refuses any DTD (hence entities) however the body is encoded
        # (a byte check misses UTF-16): WeChat never sends one
        root = SafeET.fromstring(raw, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        log.warning("wechat: body declares a DOCTYPE/ENTITY (%s), refused", type(exc).__name__)
        return None
    except (ET.ParseError, ValueError) as exc:
        log.warning("wechat: body is not well-formed XML (%s), ignored", exc)
        return None
    if root.tag != "xml":
        log.warning("wechat: root element %r is not <xml>, ignored", root.tag)
        return None
    return {child.tag: (child.text or "").strip() for child in root}


def parse_message(payload: dict[str, str] | bytes | str, *, platform: str = PLATFORM_OA) -> InboundMessage | None:
    """Parse a decrypted callback (its XML, or the fields from ``parse_xml``)
    into an InboundMessage, or None to ignore it.

    Result: ``platform`` as given (``wx`` for an OA, ``wecom`` for WeCom);
    chat kind PRIVATE with ``chat_id`` = ``sender_id`` = ``FromUserName``;
    ``message_id`` = ``MsgId`` (``<FromUserName>-<CreateTime>`` when a voice or
    text message lacks one); ``text`` is ``Content``, or ``Recognition`` for
    voice, cut to MAX_TEXT_CHARS (``clip_text``); ``timestamp`` is ``CreateTime``
    (epoch seconds) as UTC, the time of receipt when out of range (``epoch_utc``);
    ``is_command`` when the text starts with ``/``.

    Raises pydantic ValidationError (a 400) when ``FromUserName`` is a placeholder
    id (``"0"``, ``"null"``…): it fails closed rather than becoming a shared person.
    """
    fields = parse_xml(payload) if isinstance(payload, bytes | str) else payload
    if not isinstance(fields, dict):
        return None
    msg_type = fields.get("MsgType", "")
    if msg_type == "event":
        log.debug("wechat: event %r ignored", fields.get("Event"))
        return None
    if msg_type == "text":
        text = fields.get("Content", "")
    elif msg_type == "voice":
        text = fields.get("Recognition", "")
    else:
        ignored_kind(log, "wechat: message", msg_type, KNOWN_MSG_TYPES)
        return None
    if not text.strip():
        log.debug("wechat: %s message without text ignored", msg_type)
        return None
    sender = fields.get("FromUserName", "")
    if not ID_RE.fullmatch(sender):
        log.warning("wechat: FromUserName missing or outside the id pattern, ignored")
        return None
    try:
        created = int(fields.get("CreateTime", ""))
    except ValueError:
        log.warning("wechat: message from %s without a valid CreateTime, ignored", sender)
        return None
    timestamp = epoch_utc(created, log, f"wechat: message from {sender}")
    message_id = fields.get("MsgId") or f"{sender}-{created}"
    if not ID_RE.fullmatch(message_id):
        log.warning("wechat: MsgId of a message from %s outside the id pattern, ignored", sender)
        return None
    if is_placeholder_id(sender):
        log.warning("wechat: FromUserName %r is a placeholder, refused", sender)
    text = clip_text(text, log, f"wechat: message {message_id}")
    return InboundMessage(platform=platform, message_id=message_id, sender_id=sender, chat_kind=ChatKind.PRIVATE,
                          chat_id=sender, text=text, timestamp=timestamp, is_command=text.startswith("/"))
