"""What bridges hand to the pipeline and what the pipeline hands back.

Bridges may import this module (and the pipeline entry point) from gateway/,
nothing else. Ids are strings; a display name is never an id.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from memory.types import ChatKind, ChatRef

__all__ = ["InboundMessage", "ReplyRef", "Outbound", "Attachment"]


class ReplyRef(BaseModel):
    """The message a person replied to (quoted). Quoting never changes the speaker."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    sender_id: str | None = None
    sender_is_bot: bool = False
    text: str = ""


class InboundMessage(BaseModel):
    """One person's message, platform-neutral.

    ``sender_id`` is the platform user id (string); ``platform`` is the short
    platform code used in subjects and chat keys (``tg``, ``qq``, ``wx``,
    ``web``, ``console``). ``mentions_bot`` is true when the message @-mentions
    the bot (entity, segment or text mention); ``reply_to`` is the quoted
    message, if any. ``timestamp`` is timezone-aware (UTC when the platform
    gives epoch seconds). ``language`` is the platform's language code when it
    gives one (Telegram), else None.
    """

    model_config = ConfigDict(frozen=True)

    platform: str
    message_id: str
    sender_id: str
    sender_name: str = ""
    chat_kind: ChatKind
    chat_id: str
    thread_id: str | None = None
    text: str
    timestamp: datetime
    mentions_bot: bool = False
    mentions: tuple[str, ...] = ()
    reply_to: ReplyRef | None = None
    is_edit: bool = False
    is_command: bool = False
    language: str | None = None
    sender_role: str | None = Field(default=None, description="group role when the platform gives one: owner/admin/member")

    @property
    def chat(self) -> ChatRef:
        """The chat as a core ChatRef (validated)."""
        return ChatRef(self.platform, self.chat_kind, self.chat_id, self.thread_id)


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
