"""The contract between the bridges and the turn pipeline: what a bridge hands
to the pipeline (``InboundMessage``), what the pipeline hands back
(``TurnResult``, ``Outbound``) and what a bridge runtime may ask of the
pipeline (``TurnHandler``).

It sits below both layers so that imports run one way: ``gateway`` imports
``bridges`` and this contract; ``bridges`` import this contract and
``memory.types``, never ``gateway``. Ids are strings; a display name is never
an id.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from memory.types import ChatKind, ChatRef, clean_name, has_control, in_era, not_a_person, repair

__all__ = ["InboundMessage", "Withdrawal", "ReplyRef", "Outbound", "Attachment", "MAX_TEXT_CHARS", "TurnResult", "TurnHandler",
           "CallbackNonce"]

#: Longest message text accepted (characters): far above any IM platform's own
#: limit (Telegram 4096, QQ ~4500), small enough that one request cannot tie up
#: tokenising and embedding for minutes.
MAX_TEXT_CHARS = 20_000


def _plain_id(v: str) -> str:
    """``v`` when it is a usable message id: 1-128 characters, none of them a
    control character (NUL, newline…; PostgreSQL refuses NUL). Raises ValueError."""
    if not v or len(v) > 128:
        raise ValueError("message_id must be 1-128 characters")
    if has_control(v):
        raise ValueError("message_id must not contain control characters")
    return v


class ReplyRef(BaseModel):
    """The message a person replied to (quoted). Quoting never changes the speaker."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    sender_id: str | None = None
    sender_is_bot: bool = False
    text: str = ""

    @field_validator("text", mode="before")
    @classmethod
    def _repair(cls, v: object) -> object:
        return "" if v is None else repair(v)


class InboundMessage(BaseModel):
    """One person's message, platform-neutral.

    ``sender_id`` is the platform user id (string); ``platform`` is the short
    platform code used in subjects and chat keys (``tg``, ``qq``, ``wx``,
    ``web``, ``console``). ``mentions_bot`` is true when the message @-mentions
    the bot (entity, segment or text mention); ``reply_to`` is the quoted
    message, if any. ``timestamp`` is timezone-aware (UTC when the platform
    gives epoch seconds). ``language`` is the platform's language code when it
    gives one (Telegram), else None.

    ``bot_id`` is the platform id of the bot that received the message when the
    platform says (OneBot ``self_id``, the Telegram bot's id), else None; it is
    part of the content fingerprint that deduplicates re-pushes.

    Repaired, not refused: lone surrogates in ``text``, ``sender_name`` and the
    quoted text become U+FFFD (``memory.types.repair``); NUL characters are dropped
    from ``text``; ``sender_name`` is cleaned like a display name
    (``memory.types.clean_name``: invisible and filler characters removed, ``""``
    when nothing visible is left; None is ``""``).

    Validation (pydantic ValidationError, a 400 at the HTTP edge): ``message_id``
    1-128 characters, none of them a control character (NUL…); ``sender_id``
    names one person (``memory.types.not_a_person``): not a placeholder
    (``"None"``, ``"null"``, ``"undefined"``, ``"0"``, blank) nor a platform's
    shared anonymous sender (``tg:1087968824``, ``qq:80000000``…);
    ``text`` at most MAX_TEXT_CHARS characters (parsers cut platform text first,
    ``bridges.common.clip_text``); ``timestamp`` between 1970 and 2100
    (``memory.types.in_era``, also for offsets past the calendar's ends) — a naive
    timestamp is taken as UTC (parsers clamp platform times first,
    ``bridges.common.epoch_utc``).

    ``forwarded``: the text is forwarded content (Telegram ``forward_origin`` or
    the older ``forward_from*`` fields, a OneBot ``forward`` segment): someone
    else's words, never the sender's first-person statement. The pipeline keeps
    it in the chat log marked as forwarded and captures nothing from it.

    ``chat_kind`` is also read as ``chat_type`` (the generic webhook's former
    name for it).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    platform: str
    message_id: str
    sender_id: str
    sender_name: str = ""
    chat_kind: ChatKind = Field(validation_alias=AliasChoices("chat_kind", "chat_type"))
    chat_id: str
    thread_id: str | None = None
    text: str
    timestamp: datetime
    mentions_bot: bool = False
    mentions: tuple[str, ...] = ()
    reply_to: ReplyRef | None = None
    is_edit: bool = False
    is_command: bool = False
    forwarded: bool = False
    language: str | None = None
    sender_role: str | None = Field(default=None, description="group role when the platform gives one: owner/admin/member")
    bot_id: str | None = None

    @field_validator("message_id")
    @classmethod
    def _short_id(cls, v: str) -> str:
        return _plain_id(v)

    @field_validator("sender_id")
    @classmethod
    def _a_person(cls, v: str, info: ValidationInfo) -> str:
        reason = not_a_person(info.data.get("platform", ""), v)
        if reason:
            raise ValueError(f"sender_id: {reason}")
        return v

    @field_validator("text")
    @classmethod
    def _sane_text(cls, v: str) -> str:
        if len(v) > MAX_TEXT_CHARS:
            raise ValueError(f"text longer than {MAX_TEXT_CHARS} characters")
        # NUL carries nothing a person said, and PostgreSQL refuses it in text
        # columns: a platform would redeliver such a message forever
        return repair(v).replace("\x00", "")

    @field_validator("sender_name", mode="before")
    @classmethod
    def _clean_name(cls, v: object) -> object:
        return clean_name(v) if v is None or isinstance(v, str) else v

    @field_validator("mentions", mode="before")
    @classmethod
    def _repair_mentions(cls, v: object) -> object:
        return tuple(repair(m) for m in v) if isinstance(v, list | tuple) else v

    @field_validator("timestamp")
    @classmethod
    def _aware_time(cls, v: datetime) -> datetime:
        return in_era(v)

    @property
    def chat(self) -> ChatRef:
        """The chat as a core ChatRef (validated)."""
        return ChatRef(self.platform, self.chat_kind, self.chat_id, self.thread_id)


class Withdrawal(BaseModel):
    """A person withdrew (recalled) one of their messages: OneBot v11
    ``friend_recall`` / ``group_recall`` notices. ``sender_id`` is the message's
    author (the subject whose memories it taught), ``operator_id`` who withdrew
    it (an admin in a group; the author otherwise). Ids are strings;
    ``message_id`` is checked like InboundMessage's (1-128 characters, no
    control character: it is looked up in SQL)."""

    model_config = ConfigDict(frozen=True)

    platform: str
    message_id: str
    sender_id: str
    chat_kind: ChatKind
    chat_id: str
    operator_id: str | None = None
    timestamp: datetime | None = None

    @field_validator("message_id")
    @classmethod
    def _short_id(cls, v: str) -> str:
        return _plain_id(v)

    @property
    def chat(self) -> ChatRef:
        """The chat as a core ChatRef (validated)."""
        return ChatRef(self.platform, self.chat_kind, self.chat_id)


class Attachment(BaseModel):
    """A file to send with a reply (e.g. a ``/memory export``): ``data`` is the
    file's bytes; ``mime_type`` e.g. ``application/json``."""

    model_config = ConfigDict(frozen=True)

    filename: str
    mime_type: str
    data: bytes

    def to_json(self) -> dict:
        """JSON-able form (bytes as base64), as carried in ``TurnResult.attachment``."""
        import base64

        return {"filename": self.filename, "mime_type": self.mime_type, "size": len(self.data),
                "data_base64": base64.b64encode(self.data).decode("ascii")}


class Outbound(BaseModel):
    """A reply to send: where, what, which message it answers, and an optional file."""

    model_config = ConfigDict(frozen=True)

    platform: str
    chat_kind: ChatKind
    chat_id: str
    thread_id: str | None = None
    text: str
    reply_to_message_id: str | None = None
    attachment: Attachment | None = None


@dataclass
class TurnResult:
    """What one turn did. ``recalled``/``captured`` are memory ids; ``prompt`` is the
    chat messages sent (or that would be sent) to the model; ``reply`` None when no
    model is configured or the bot stays silent; ``duplicate`` True for a
    re-delivered message (nothing else was done); ``capture_pending`` True when
    the capture runs after the turn returned (``captured`` is then empty);
    ``paused`` True when the speaker had this chat off the record
    (``/memory pause``): nothing was captured and their line was not kept;
    ``turn`` the turn's id (16 hex characters), as in its log records and its
    audit record (``?turn=`` of ``GET /v1/…/memories/{id}/why``)."""

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
    capture_pending: bool = False
    attachment: dict | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    paused: bool = False
    turn: str = ""

    def to_json(self) -> dict:
        """Plain JSON-able dict (the replay line and the HTTP answer)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class CallbackNonce:
    """The nonce of a signed platform callback whose signature and freshness were
    checked (``bridges.replay.fresh_nonce``), still to be claimed: ``platform`` the
    callback kind (``wechat``, ``webhook``, ``onebot``); ``nonce`` the SHA-256 (hex)
    of what the platform signs to make the request unique; ``digest`` the
    SHA-256 (hex) of the raw body; ``at`` when it arrived (UTC);
    ``allow_identical``: the very same body again is the platform's own retry,
    answered as a duplicate instead of refused (WeChat)."""

    platform: str
    nonce: str
    digest: str
    at: datetime
    allow_identical: bool = False


class TurnHandler(Protocol):
    """What a bridge runtime asks of the turn pipeline (``gateway.pipeline.Pipeline``
    is the implementation). ``settings`` and ``tenant(name)`` are the gateway's
    configuration objects; a runtime reads only its own platform's section of a
    tenant (``.telegram``, ``.wechat``, ``.webhook``). ``tenant`` raises the
    gateway's ``UnknownTenant`` (a 404 at the HTTP edge) for an unknown name."""

    settings: Any

    def tenant(self, name: str) -> Any: ...

    def handle(self, tenant: str, msg: InboundMessage, *, background_capture: bool = False,
               claimed: Any = None, nonce: CallbackNonce | None = None) -> Awaitable[TurnResult]:
        """Run one turn. ``background_capture``: capture after the turn returns
        (durably). ``claimed``: an ``asyncio.Event`` set once the delivery is
        durably claimed (``bridges.ack``). ``nonce``: the signed callback's nonce,
        claimed with the message (in the transaction that logs it): a replay
        raises ``bridges.replay.ReplayedRequest`` before anything is processed, an
        allowed identical retry ends as a duplicate."""
        ...

    def migrate_chat(self, tenant: str, old: ChatRef, new: ChatRef) -> Awaitable[Any]: ...

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """Replay protection of a signed callback that carries no message to hand to
        ``handle`` (``bridges.replay.claim``): None the first time ``nonce`` reaches
        ``tenant`` on ``platform``, else the ``digest`` recorded then. Blocking (SQL):
        call it in a thread."""
        ...

    def withdraw(self, tenant: str, withdrawal: Withdrawal) -> Awaitable[list[str]]: ...
