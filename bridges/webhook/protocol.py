"""The generic JSON webhook: ``POST /webhook/<tenant>`` for any other platform.

Request
    Headers ``X-Huiyi-Timestamp: <unix seconds>`` and
    ``X-Huiyi-Signature: sha256=<hex>``, the hex HMAC-SHA256, keyed with the
    tenant's ``webhook.secret``, of ``"<timestamp>." + <raw body bytes>``. A
    timestamp more than ``webhook.window`` seconds (default 300) from the
    server's clock is refused, so a captured request cannot be replayed later;
    within the window a signature is accepted once (kept in SQL, so on every
    replica): the same signed request again is refused (401). A client that
    retries signs again with a new timestamp; a message re-sent so is then a
    duplicate by its delivery key (``message_id`` per chat) and not answered
    twice. The body is a ``WebhookMessage`` (JSON).

Answer
    Without a ``webhook.callback_url``: ``200`` with a ``WebhookReply``. With
    one: ``202 {"ok": true, "accepted": true}`` at once, and the
    ``WebhookReply`` is POSTed to the callback URL, signed with the same two
    headers over its own body. A follow-up the person agreed to (issue 39) is
    POSTed there too, unprompted, as a ``WebhookFollowup`` (``"event":
    "followup"``). Wrong or missing signature, a stale
    timestamp or a replayed signature: ``401`` and nothing is processed.

Example (shell)::

    ts=$(date +%s); body='{"sender_id":"u1","chat_id":"u1","message_id":"m1","text":"我养了一只猫"}'
    sig=$(printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$SECRET" -hex | cut -d' ' -f2)
    curl -H "X-Huiyi-Timestamp: $ts" -H "X-Huiyi-Signature: sha256=$sig" -d "$body" \\
         http://127.0.0.1:8080/webhook/default
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field

from bridges.common import said_text
from bridges.contract import InboundMessage, ReplyRef
from memory.types import ID_RE, ChatKind

__all__ = ["WebhookMessage", "WebhookReplyTo", "WebhookReply", "WebhookFollowup", "sign", "verify", "SignatureError",
           "TIMESTAMP_HEADER", "SIGNATURE_HEADER"]

TIMESTAMP_HEADER = "X-Huiyi-Timestamp"
SIGNATURE_HEADER = "X-Huiyi-Signature"
_ID = f"^{ID_RE.pattern}$"  # pydantic patterns are searched, not matched: anchor them


class SignatureError(Exception):
    """Missing, malformed or wrong signature, or a timestamp outside the window."""


class WebhookReplyTo(BaseModel):
    """The message being replied to (quoted). Quoting never changes the speaker."""

    model_config = ConfigDict(extra="forbid")

    message_id: str = Field(pattern=_ID, description="id of the quoted message")
    sender_id: str | None = Field(default=None, pattern=_ID, description="who wrote the quoted message")
    is_bot: bool = Field(default=False, description="the quoted message is the bot's own")
    text: str = Field(default="", max_length=4000, description="quoted text (context only, never captured)")


class WebhookMessage(BaseModel):
    """Body of ``POST /webhook/<tenant>``: one person's message.

    Ids match ``[A-Za-z0-9_.@-]{1,128}``; ``text`` is 1-16000 characters;
    ``timestamp`` is ISO 8601 with an offset (default: now, UTC). The subject
    becomes ``<webhook.platform>:<sender_id>``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sender_id: str = Field(pattern=_ID, description="the speaker's platform id")
    sender_name: str | None = Field(default="", max_length=200, description="display name (never an id); null is none")
    chat_id: str = Field(pattern=_ID, description="the chat; for a private chat usually the sender id")
    chat_kind: Literal["private", "group"] = Field(
        default="private", validation_alias=AliasChoices("chat_kind", "chat_type"),
        description="private or group (also accepted as `chat_type`, its former name)")
    thread_id: str | None = Field(default=None, pattern=_ID, description="topic/thread inside a group")
    message_id: str = Field(pattern=_ID, description="unique per chat; re-deliveries reuse it")
    text: Annotated[str, AfterValidator(said_text)] = Field(min_length=1, max_length=16000,
                                                            description="the message text")
    reply_to: WebhookReplyTo | None = Field(default=None, description="the quoted message, if any")
    mentions: list[str] = Field(default_factory=list, max_length=50, description="ids @-mentioned")
    mentions_bot: bool = Field(default=False, description="the message addresses the bot (@-mention)")
    timestamp: datetime | None = Field(default=None, description="when it was said (ISO 8601)")
    language: str | None = Field(default=None, max_length=16, description="language code, e.g. zh-CN")

    def to_inbound(self, platform: str) -> InboundMessage:
        """The platform-neutral message (raises NamespaceError for a bad platform)."""
        when = self.timestamp or datetime.now(UTC)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        reply = None
        if self.reply_to is not None:
            reply = ReplyRef(message_id=self.reply_to.message_id, sender_id=self.reply_to.sender_id,
                             sender_is_bot=self.reply_to.is_bot, text=self.reply_to.text)
        msg = InboundMessage(platform=platform, message_id=self.message_id, sender_id=self.sender_id,
                             sender_name=self.sender_name or "", chat_kind=ChatKind(self.chat_kind), chat_id=self.chat_id,
                             thread_id=self.thread_id if self.chat_kind == "group" else None, text=self.text,
                             timestamp=when, mentions_bot=self.mentions_bot, mentions=tuple(self.mentions),
                             reply_to=reply, is_command=self.text.startswith("/"), language=self.language)
        msg.chat  # noqa: B018 - validates platform and ids as a core ChatRef
        return msg


class WebhookReply(BaseModel):
    """The answer (or callback body): where to post ``reply`` and what it is.
    ``reply`` is None when the bot stays silent (not addressed in a group, a
    duplicate, or no model configured)."""

    ok: bool = True
    tenant: str
    chat_id: str
    chat_kind: str
    chat_type: str = Field(description="the same as chat_kind, under its former name (deprecated)")
    thread_id: str | None = None
    message_id: str
    reply_to_message_id: str | None = Field(default=None, description="set in groups: answer as a reply to it")
    reply: str | None = None
    addressed: bool = False
    duplicate: bool = False


class WebhookFollowup(BaseModel):
    """The callback body of a follow-up (issue 39): the companion asks, unprompted,
    about a past plan of a person who turned follow-ups on. Posted to
    ``webhook.callback_url``, signed like a reply, once (a lost answer is never
    sent again). ``reply`` is the question, to be posted to ``chat_id`` as a
    reply would be; ``event`` tells it from a reply."""

    ok: bool = True
    event: Literal["followup"] = "followup"
    tenant: str
    chat_id: str
    chat_kind: str
    thread_id: str | None = None
    person_id: str = Field(description="the person asked (their sender_id)")
    followup_id: int
    reply: str = Field(description="the question to post in the chat")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value: ``sha256=`` + hex HMAC-SHA256 of ``timestamp.body``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str | None, timestamp: str | None, signature: str | None, body: bytes, *,
           now: float, window: int) -> None:
    """Check a request's signature and freshness. ``now`` in unix seconds,
    ``window`` in seconds. Raises SignatureError (also when no secret is
    configured: an unsigned webhook would let anyone speak as anyone)."""
    if not secret:
        raise SignatureError("webhook secret not configured")
    if not timestamp or not signature:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise SignatureError("timestamp is not unix seconds")
    if abs(now - int(timestamp)) > window:
        raise SignatureError("timestamp outside the replay window")
    if not hmac.compare_digest(sign(secret, timestamp, body).encode("ascii"), signature.encode("utf-8", "replace")):
        raise SignatureError("wrong signature")
