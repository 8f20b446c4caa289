"""Core value types of the memory layer: namespaces, chats, memories and hits.

All of them are frozen dataclasses. Strings that end up inside a SQL or
LanceDB filter expression (namespace, chat keys) are validated against strict
patterns at construction, so an invalid value can never reach a query.

String forms (documented, stable):

- ``Namespace``: ``"<tenant>/<subject>"``, e.g. ``"default/tg:123456"``.
  tenant matches ``[a-z0-9][a-z0-9_-]{0,62}``; subject is ``<kind>:<id>`` with
  kind ``[a-z][a-z0-9]{0,15}`` and id ``[A-Za-z0-9_.@-]{1,128}``.
- ``ChatRef.key``: ``"<platform>:<private|group>:<chat_id>[:<thread_id>]"``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import datetime

from memory.errors import NamespaceError

__all__ = [
    "Namespace",
    "ChatKind",
    "ChatRef",
    "Category",
    "Visibility",
    "Memory",
    "Hit",
    "ScoreParts",
    "TENANT_RE",
    "SUBJECT_RE",
]

TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
SUBJECT_KIND_RE = re.compile(r"[a-z][a-z0-9]{0,15}")
ID_RE = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
SUBJECT_RE = re.compile(rf"{SUBJECT_KIND_RE.pattern}:{ID_RE.pattern}")
PLATFORM_RE = SUBJECT_KIND_RE


def _check(pattern: re.Pattern[str], value: object, what: str) -> str:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise NamespaceError(f"invalid {what}: {value!r} (must match {pattern.pattern})")
    return value


def check_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is a safe platform id (``[A-Za-z0-9_.@-]{1,128}``).

    Raises NamespaceError otherwise (quotes, spaces, filter syntax, empty).
    """
    return _check(ID_RE, value, what)


@dataclass(frozen=True, slots=True, order=True)
class Namespace:
    """The unit of isolation: one person (subject) as one tenant knows them.

    Every store read and write takes a Namespace first. Construction raises
    NamespaceError when tenant or subject fall outside their patterns (see the
    module docstring); no wildcard or empty value exists.
    """

    tenant: str
    subject: str

    def __post_init__(self) -> None:
        _check(TENANT_RE, self.tenant, "tenant")
        _check(SUBJECT_RE, self.subject, "subject")

    def __str__(self) -> str:
        return f"{self.tenant}/{self.subject}"

    @classmethod
    def parse(cls, value: str) -> Namespace:
        """Parse ``"tenant/subject"``; raises NamespaceError on anything else."""
        if not isinstance(value, str) or value.count("/") != 1:
            raise NamespaceError(f"invalid namespace string: {value!r}")
        tenant, subject = value.split("/")
        return cls(tenant, subject)

    @classmethod
    def of(cls, tenant: str, platform: str, user_id: str) -> Namespace:
        """Namespace for a platform identity, e.g. ``of("default", "tg", "42")``."""
        return cls(tenant, f"{_check(PLATFORM_RE, platform, 'platform')}:{check_id(user_id, 'user id')}")


class ChatKind(str, enum.Enum):
    """Where a message was said."""

    PRIVATE = "private"
    GROUP = "group"


@dataclass(frozen=True, slots=True)
class ChatRef:
    """A chat on a platform: ``platform`` (``tg``, ``qq``, ``wx``, …), kind,
    ``chat_id`` and an optional ``thread_id`` (forum topic).

    Raises NamespaceError when a part is outside its pattern.
    """

    platform: str
    kind: ChatKind
    chat_id: str
    thread_id: str | None = None

    def __post_init__(self) -> None:
        _check(PLATFORM_RE, self.platform, "platform")
        object.__setattr__(self, "kind", ChatKind(self.kind))
        check_id(self.chat_id, "chat id")
        if self.thread_id is not None:
            check_id(self.thread_id, "thread id")

    @property
    def is_group(self) -> bool:
        return self.kind is ChatKind.GROUP

    @property
    def key(self) -> str:
        """``platform:kind:chat_id[:thread_id]`` — safe inside filter expressions."""
        base = f"{self.platform}:{self.kind.value}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base

    @property
    def group_key(self) -> str:
        """The chat without its thread: disclosure is per group, not per topic."""
        return f"{self.platform}:{self.kind.value}:{self.chat_id}"

    @classmethod
    def parse(cls, key: str) -> ChatRef:
        """Inverse of ``key``; raises NamespaceError on a malformed key."""
        parts = key.split(":") if isinstance(key, str) else []
        if len(parts) not in (3, 4):
            raise NamespaceError(f"invalid chat key: {key!r}")
        try:
            kind = ChatKind(parts[1])
        except ValueError as exc:
            raise NamespaceError(f"invalid chat kind in {key!r}") from exc
        return cls(parts[0], kind, parts[2], parts[3] if len(parts) == 4 else None)


class Category(str, enum.Enum):
    """What a memory is about. Half-lives differ per category (memory.scoring)."""

    PROFILE = "profile"
    PREFERENCE = "preference"
    RELATIONSHIP = "relationship"
    EVENT = "event"
    ROUTINE = "routine"
    MOOD = "mood"
    OTHER = "other"


class Visibility(str, enum.Enum):
    """Disclosure (DESIGN rule 6): PRIVATE memories are recalled only in private
    chats with the person; GROUP memories in their origin group and in private."""

    PRIVATE = "private"
    GROUP = "group"


@dataclass(frozen=True, slots=True)
class Memory:
    """One durable statement about a subject.

    valence in [-1, 1], arousal in [0, 1], importance in [0, 1]. Times are
    timezone-aware UTC datetimes. ``origin`` is the chat it was learned in;
    ``visibility`` follows from it unless a tenant tightened it. ``version``
    starts at 1 and grows by one per latest-wins update.
    """

    id: str
    namespace: Namespace
    text: str
    category: Category = Category.OTHER
    key: str = ""
    importance: float = 0.5
    valence: float = 0.0
    arousal: float = 0.0
    emotion: str = "neutral"
    origin: ChatRef | None = None
    visibility: Visibility = Visibility.PRIVATE
    source_message_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    event_time: datetime | None = None
    version: int = 1
    access_times: tuple[datetime, ...] = ()


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """Components of a hit's final score, kept for ``recall --explain``.

    rrf: reciprocal-rank-fusion score (Cormack et al. 2009, k = 60);
    retention in [0, 1]; activation: ACT-R base-level B (may be negative);
    emotion: multiplicative emotion-congruence factor (1.0 = neutral);
    importance: multiplicative importance weight.
    """

    rrf: float
    retention: float = 1.0
    activation: float = 0.0
    emotion: float = 1.0
    importance: float = 1.0


@dataclass(frozen=True, slots=True)
class Hit:
    """One recalled memory: the memory, its final score and each channel's
    1-based rank (``{"bm25": 3, "vector": 1}``; a channel that missed it is absent)."""

    memory: Memory
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    parts: ScoreParts | None = None
