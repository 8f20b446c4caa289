"""Core value types of the memory layer: namespaces, chats, memories and hits.

All of them are frozen dataclasses. Strings that end up inside a SQL or
LanceDB filter expression (namespace, chat keys) are validated against strict
patterns at construction, so an invalid value can never reach a query.

String forms (documented, stable):

- ``Namespace``: ``"<tenant>/<subject>"``, e.g. ``"default/tg:123456"``.
  tenant matches ``[a-z0-9][a-z0-9_-]{0,62}``; subject is ``<kind>:<id>`` with
  kind ``[a-z][a-z0-9]{0,15}`` and id ``[A-Za-z0-9_.@-]{1,128}``.
- ``ChatRef.key``: ``"<platform>:<private|group>:<chat_id>[:<thread_id>]"``.

Values that cross the boundary are checked here too, so that the bridges (which
may import only this module of the core) and the core apply one rule:
``is_placeholder_id`` (a user id that names nobody), ``not_a_person`` (a
subject that names nobody in particular: a placeholder or a platform's shared
anonymous sender, ``SHARED_SENDERS``), ``has_control`` (ids with control
characters), ``in_era`` (timestamps 1970-2100), ``repair`` / ``repair_tree``
(lone surrogates) and ``clean_name`` (display names).
"""

from __future__ import annotations

import enum
import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone

from memory.errors import NamespaceError

__all__ = [
    "PLACEHOLDER_IDS",
    "is_placeholder_id",
    "SHARED_SENDERS",
    "not_a_person",
    "has_control",
    "in_era",
    "repair",
    "clean_controls",
    "repair_tree",
    "JSON_MAX_DEPTH",
    "json_depth",
    "load_json",
    "clean_name",
    "Namespace",
    "ChatKind",
    "ChatRef",
    "Category",
    "Visibility",
    "Memory",
    "CONTEXT_CHARS",
    "CONTEXT_JOIN",
    "clip_line",
    "search_text",
    "Hit",
    "ScoreParts",
    "TENANT_RE",
    "SUBJECT_RE",
    "ForgetReceipt",
    "FORGET_RECEIPT_FIELDS",
]

TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
SUBJECT_KIND_RE = re.compile(r"[a-z][a-z0-9]{0,15}")
ID_RE = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
SUBJECT_RE = re.compile(rf"{SUBJECT_KIND_RE.pattern}:{ID_RE.pattern}")
PLATFORM_RE = SUBJECT_KIND_RE


#: User ids that a broken client sends when it has none (compared case-folded,
#: after trimming): every such caller would otherwise share one person's memories.
PLACEHOLDER_IDS = frozenset({"", "none", "null", "nil", "undefined", "nan", "unknown", "-1", "-"})


def is_placeholder_id(user_id: object) -> bool:
    """True when ``user_id`` names nobody: not a string, empty after trimming, one of
    PLACEHOLDER_IDS (``"None"``, ``"null"``, ``"undefined"``…, any case) or all zeros
    (``"0"``, ``"000"``)."""
    if not isinstance(user_id, str):
        return True
    v = user_id.strip().casefold()
    return v in PLACEHOLDER_IDS or (v.isdigit() and int(v) == 0)


#: Platform identities (``platform:id``) that stand for "someone anonymous",
#: never one person: the platforms' parsers ignore them as senders, and as a
#: subject or admin every anonymous person would share one namespace.
SHARED_SENDERS = {
    "tg:1087968824": "Telegram's GroupAnonymousBot (anonymous group admins)",
    "tg:777000": "Telegram's service account (channel posts forwarded into a group)",
    "tg:136817688": "Telegram's Channel_Bot (messages sent on behalf of a channel)",
    "qq:80000000": "QQ's anonymous group member id",
}


def not_a_person(platform: str, user_id: object) -> str | None:
    """Why ``platform:user_id`` names nobody in particular, or None when it may
    name one person: ``user_id`` is a placeholder (``is_placeholder_id``; also
    for ``person:…``) or the identity is one of SHARED_SENDERS. The reason is
    English, for a 400 or a CLI error line."""
    if is_placeholder_id(user_id):
        return f"{user_id!r} is a placeholder, not a person's id"
    shared = SHARED_SENDERS.get(f"{platform}:{user_id.strip()}")  # type: ignore[union-attr]
    if shared:
        return f"{platform}:{user_id} is {shared}, shared by every anonymous sender"
    return None


def has_control(value: str) -> bool:
    """True when ``value`` holds a control character (Unicode category Cc: NUL,
    newline, escape, DEL…): never part of a platform id, and NUL is refused by
    PostgreSQL."""
    return any(unicodedata.category(c) == "Cc" for c in value)


def in_era(when: datetime) -> datetime:
    """``when`` (timezone-aware; naive is taken as UTC) when its UTC year lies in
    1970..2099, else ValueError — also for an offset that would carry it past
    ``datetime.min``/``max`` (``0001-01-01T00:00:00+14:00``), which ``astimezone``
    answers with OverflowError."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        year = when.astimezone(timezone.utc).year
    except OverflowError:
        year = 0
    if not 1970 <= year < 2100:
        raise ValueError("timestamp must lie between 1970 and 2100")
    return when


def repair(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate (U+D800..U+DFFF, e.g. half of a
    broken emoji from a JSON ``"\\ud83c"`` escape) replaced by U+FFFD; a
    surrogate *pair* is joined into its character. Everything else is unchanged;
    the result always encodes as UTF-8. Used at every boundary where outside text
    enters (payloads, model output, queries, names, configuration), so that no
    encoder (SQL driver, jieba, embedder, JSON) ever sees a lone surrogate."""
    if not isinstance(text, str):
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
"""Terminal escape sequences, whole: CSI (colours, cursor moves), OSC (window titles), two-byte ones."""
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\u2060\ufeff\u202a-\u202e\u2066-\u2069"
                       "\ufdd0-\ufdef\ufffe\uffff]")


def clean_controls(text: str) -> str:
    """``repair``, then without the characters that carry no text and can only
    disturb whoever reads it back: terminal escape sequences whole (``ESC [31m``,
    an OSC title — not just their ESC, which would leave ``[31m`` in the
    text), C0/C1 control characters but tab and line
    breaks (a BEL or an ESC sequence reaching an admin's terminal), the Unicode
    bidirectional embeddings, overrides and isolates (U+202A–U+202E,
    U+2066–U+2069: right-to-left spoofing), zero-width space, word joiner and
    byte-order mark, and the noncharacters U+FDD0–U+FDEF, U+FFFE, U+FFFF. Joiners
    that emoji and scripts need (U+200C, U+200D) and variation selectors stay.
    Applied to every memory text (``MemoryCore.new``, ``MemoryCore.update``)."""
    text = repair(text)
    return _CONTROLS.sub("", _ESCAPES.sub("", text)) if isinstance(text, str) else text


def repair_tree(value):
    """``repair`` applied to every string of a decoded JSON value (dict keys too);
    other values unchanged. Returns a new structure only where something changed."""
    if isinstance(value, str):
        return repair(value)
    if isinstance(value, dict):
        return {repair(k) if isinstance(k, str) else k: repair_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repair_tree(v) for v in value]
    return value


JSON_MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a caller's JSON may have (``load_json``):
far above any payload a platform or the ``/v1`` API sends (a Telegram update, a
OneBot event with forwarded messages: about 10), far below Python's recursion
limit, which every recursive reader of the value (``repair_tree``, pydantic,
``json.dumps``) would otherwise meet."""


def json_depth(value, limit: int | None = None) -> int:
    """How deep arrays and objects nest in a decoded JSON ``value``: 0 for a
    scalar, 1 for ``[]`` or ``{"a": 1}``, 2 for ``[[1]]``. Walks without
    recursion (any depth); with ``limit`` it stops at the first node deeper than
    ``limit`` and returns that node's depth."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, depth)
        if limit is not None and deepest > limit:
            return deepest
        stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    return deepest


def load_json(raw: str | bytes, max_depth: int = JSON_MAX_DEPTH):
    """``raw`` decoded as JSON, every string repaired (``repair_tree``): how a
    caller's JSON is read outside pydantic (request bodies, a query parameter).
    Raises ValueError when ``raw`` is not JSON (``json.JSONDecodeError``, or
    ``UnicodeDecodeError`` for bytes that are not UTF-8) or nests arrays and
    objects deeper than ``max_depth`` (``json_depth``) — the depth checked
    before anything recursive reads the value, and a nesting too deep for the
    decoder itself (``RecursionError``, from about 950 levels) refused the same
    way, so a deep value is a refusal and never a crash."""
    too_deep = f"JSON nested deeper than {max_depth} levels"
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(too_deep) from None
    if json_depth(value, max_depth) > max_depth:
        raise ValueError(too_deep)
    return repair_tree(value)


#: Characters that render as nothing (or as a blank) and that people use as
#: "invisible" nicknames: the Hangul fillers (U+3164, U+115F, U+1160, U+FFA0),
#: the Braille blank U+2800, the combining grapheme joiner and the variation selectors.
_BLANK_NAME_CHARS = frozenset("\u3164\u115f\u1160\uffa0\u2800\u034f") | frozenset(chr(c) for c in range(0xFE00, 0xFE10))
NAME_MAX_CHARS = 64
"""Longest display name kept (characters); longer ones are cut (an IM nickname is at most ~30)."""


def clean_name(name: object) -> str:
    """A display name as it may go into a prompt or a header: lone surrogates
    repaired (``repair``), NFKC, zero-width / control / format characters and
    blank "filler" characters (U+3164 ㅤ and friends) removed, whitespace collapsed,
    at most NAME_MAX_CHARS characters. None or a non-string gives ``""``; a name
    with nothing visible left gives ``""`` too (callers then use a readable
    fallback such as ``QQ用户20005``). Case and script are kept (unlike ``normalise``)."""
    if not isinstance(name, str) or not name:
        return ""
    s = unicodedata.normalize("NFKC", repair(name))
    kept: list[str] = []
    for i, ch in enumerate(s):
        if ch in _BLANK_NAME_CHARS or ch == "\ufffd":
            continue
        cat = unicodedata.category(ch)
        if ch == "\u200d":  # ZWJ: only inside an emoji sequence (👨‍👩‍👧)
            if kept and unicodedata.category(kept[-1]) == "So" and i + 1 < len(s) and unicodedata.category(s[i + 1]) == "So":
                kept.append(ch)
            continue
        if cat in ("Cc", "Cf", "Co", "Cs", "Cn"):
            continue
        kept.append(ch)
    s = " ".join("".join(kept).split())
    return s[:NAME_MAX_CHARS].strip()



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


CONTEXT_CHARS = 200
"""The most characters of a memory's ``context`` kept (its end: a line that asks
usually asks at its end). Chosen on the development splits: 200 and 300 tie on
LoCoMo per speaker (any@5 / any@10 0.766 / 0.833 vs 0.765 / 0.837) and on
LongMemEval (0.867 / 0.967), 150 loses LoCoMo 0.014 @10; a long line (an
assistant's 300-token answer) dilutes a short memory's text, so the shorter."""
CONTEXT_JOIN = " / "
"""Between two lines of one context: the same words said again in answer to
another line keep the two latest, each in half the room (``MemoryCore.add``)."""


def clip_line(line: str, room: int, name: str | None = None) -> str:
    """``line`` (``"<name>: <text>"``) in at most ``room`` characters: whole when it
    fits, else the name and the end of the text (a line that asks usually asks at
    its end) from a sentence's start ("St. Petersburg" is no end; ``_tail``),
    whitespace collapsed; without a name (no ``": "``), its end.
    ``name``: the speaker's name when the caller knows it (it may itself hold
    ``": "``, e.g. "Bot: Mochi"); else the part before the first ``": "``."""
    line = " ".join(line.split())
    if len(line) <= room:
        return line
    if name is not None:
        name = " ".join(name.split())
    if name is not None and line.startswith(name + ": "):
        sep, text = ": ", line[len(name) + 2:]
    else:
        name, sep, text = line.partition(": ")
    if sep and len(name) + 2 < room:
        return f"{name}: {_tail(text, room - len(name) - 2)}"
    return _tail(line, room)


def _tail(text: str, room: int) -> str:
    """The end of ``text`` (longer than ``room`` characters) in at most ``room``:
    from the earliest sentence start that leaves it within ``room``
    (``memory.text.sentence_starts``: never after "St." or "Dr."); when the last
    sentence alone is longer, from the first word start within
    ``_WORD_SLACK`` characters; else (a run of Chinese without a break) its last
    ``room`` characters."""
    from memory.text import sentence_starts

    cut = len(text) - room
    at = next((s for s in sentence_starts(text) if s >= cut), None)
    if at is None:
        near = range(max(cut, 1), min(cut + _WORD_SLACK, len(text)))
        at = next((i for i in near if text[i - 1].isspace() and not text[i].isspace()), cut)
    return text[at:].strip()


#: characters a cut inside one long sentence may move forward to start at a word (longer than most words)
_WORD_SLACK = 20


def search_text(text: str, context: str = "") -> str:
    """What recall's BM25 channel searches for a memory: its
    ``text``, then the line it answered in parentheses when it has one —
    ``"It was amazing! (Mochi: How was the parade?)"``. An elliptical answer
    ("Yes, last week!", 「对，超好玩」) holds no word of its topic; the line it
    answered does. This is contextual retrieval (Anthropic, "Introducing
    Contextual Retrieval", 2024: each chunk indexed with the context that
    situates it), with the context taken from the chat instead of written by
    a model. Without a context the text alone, so rows written before the
    context existed index exactly as they did. The vector channel embeds the
    text alone: with the context in the embedded text, a short fact of the
    capture path was dominated by the line it answered (LoCoMo through
    capture, vector channel any@10 0.679 → 0.525 held-out)."""
    return f"{text} ({context})" if context else text


@dataclass(frozen=True, slots=True)
class Memory:
    """One durable statement about a subject.

    valence in [-1, 1], arousal in [0, 1], importance in [0, 1]. Times are
    timezone-aware UTC datetimes. ``origin`` is the chat it was learned in;
    ``visibility`` follows from it unless a tenant tightened it. ``version``
    starts at 1 and grows by one per latest-wins update. ``context``: the chat
    line the memory's message answered (``"<name>: <text>"``, at most
    CONTEXT_CHARS; the companion's line in a private chat, never another
    person's nor the person's own: ``memory.capture.answered_line``), "" when
    none — searched by BM25 with the text (``search_text``), shown as what the memory
    replied to, never told or grounded as the person's words. ``metadata``: the
    caller's tags (``memory.metadata.check_metadata``: at most 16 string keys to
    str / int / float / bool), kept across versions, filtered on inside the
    namespace, never searched nor told.
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
    #: the end (exclusive, aware UTC) of the period the event names — 「下个月搬家」: January, from
    #: ``event_time`` (its first local midnight) to the first of February; None for a day or no date
    event_end: datetime | None = None
    version: int = 1
    access_times: tuple[datetime, ...] = ()
    context: str = ""
    # -- metadata (issue 26 item 17) --
    #: the caller's own tags: string keys to scalars (``memory.metadata``: limits, filters);
    #: never searched, never told; left out of the hash (a dict is not hashable)
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict, hash=False)

    @property
    def searched(self) -> str:
        """``search_text(text, context)``: what BM25 sees of it (the embedder sees ``text``)."""
        return search_text(self.text, self.context)


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
    1-based rank (``{"bm25": 3, "vector": 1}``; a channel that missed it is absent).

    ``conflict``: a live memory of the same namespace linked to this one as a
    conflict (said differently, no clear change: ``memory.contradiction``) and
    disclosed in the chat of the recall, brought along by ``MemoryCore.recall``
    so that the recollection tells both as a change, older first; None when
    there is none.

    ``via_context``: True when the memory was found only through its context
    (the companion's line it answered, searched with its text): BM25 ranked it
    for words of the query that are in that line and none in its own text — 「我姐姐安娜住在多伦多」 found for "marathon" because it answered "How
    was the marathon?" (``memory.recall.found_via_context``). Every surface that
    lists hits says so: ``/memory search`` ("in reply to …"), the console, ``/v1``."""

    memory: Memory
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    parts: ScoreParts | None = None
    conflict: Memory | None = None
    via_context: bool = False


@dataclass(frozen=True, slots=True)
class ForgetReceipt:
    """What a forget removed, counted from what each step deleted (SQL rowcounts,
    the cache's rows), never recomputed: ``memories`` live memories (the one
    asked for; ``derived`` counts the consolidated memories forgotten with it
    because they cite it, and their own rows are in every other count too);
    ``versions`` their superseded versions (history rows); ``index_rows``
    index deletes queued and applied (one per memory); ``cache_entries`` rows of
    the in-process namespace cache dropped and ``bm25_postings`` their terms'
    postings dropped with them; ``chat_lines`` chat-log lines deleted (the
    person's lines it was learned from and the companion's lines retelling
    it); ``contexts`` other memories' contexts dropped because they retold it;
    ``links`` association links; ``conflicts`` conflict links;
    ``events`` ``memory.forgotten`` change events queued, to ``receivers``
    webhook receivers (0 when the tenant has none); ``tombstones``
    fingerprints recorded (or moved forward to now) that keep it from being
    learned again from evidence older than the forget. ``+`` adds two receipts
    (``receivers`` is the larger: the same webhook)."""

    memories: int = 0
    versions: int = 0
    index_rows: int = 0
    cache_entries: int = 0
    bm25_postings: int = 0
    chat_lines: int = 0
    contexts: int = 0
    derived: int = 0
    links: int = 0
    conflicts: int = 0
    events: int = 0
    receivers: int = 0
    tombstones: int = 0

    def __add__(self, other: ForgetReceipt) -> ForgetReceipt:
        if not isinstance(other, ForgetReceipt):
            return NotImplemented
        return ForgetReceipt(**{f: (max if f == "receivers" else int.__add__)(getattr(self, f), getattr(other, f))
                                for f in FORGET_RECEIPT_FIELDS})


FORGET_RECEIPT_FIELDS = ("memories", "versions", "index_rows", "cache_entries", "bm25_postings", "chat_lines",
                         "contexts", "derived", "links", "conflicts", "events", "receivers", "tombstones")
"""``ForgetReceipt``'s counts, in the order a receipt tells them."""
