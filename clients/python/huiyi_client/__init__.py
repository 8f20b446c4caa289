"""Client of the huiyi gateway's ``/v1`` HTTP API (``AsyncHuiyi`` and ``Huiyi``).

Depends on httpx alone: it imports nothing of the gateway. Every call names the
person (``subject``: ``tg:42``, ``qq:10001``, ``person:…``); the tenant is the
API key's. Results are frozen dataclasses; errors are ``HuiyiError``
subclasses::

    HuiyiError              any answer that is not 2xx (status, error name, detail)
    ├── BadRequest          400, 408, 413: malformed input (ids outside their patterns…)
    │   └── RateLimited     429: too many calls; ``retry_after`` seconds (Retry-After)
    ├── AuthError           401: no key where one is needed, or a wrong or revoked one
    ├── ForbiddenError      403: another tenant, another person with a member key
    ├── NotFound            404: unknown memory or tenant
    └── Unavailable         5xx: the gateway's store, index or embedder is down
        └── Unreachable     no answer at all: connection refused, timeout, broken
                            connection (``status`` 0; the httpx error is ``__cause__``)

    SignatureError          (a ValueError, not an answer) ``verify_event``: a change event
                            whose Standard Webhooks signature or timestamp does not hold

``verify_event`` checks a change event the gateway POSTed to your webhook (its
Standard Webhooks signature, with the standard library's HMAC) and returns it as
a ``ChangeEvent``.

Text is repaired before it is sent: a lone UTF-16 surrogate (half an emoji,
e.g. ``"\ud83c"`` from a JS string) becomes U+FFFD instead of failing to encode.

Each request is described once (``_Call``: method, path, query, body and how to
read the answer) and run by either client: the sync and async classes differ
only in how they send it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

__all__ = ["AsyncHuiyi", "Huiyi", "Memory", "ScoreParts", "Hit", "Page", "AddResult", "ImportResult",
           "Recollection", "Turn", "Message", "BatchResult", "Person", "PeoplePage", "ChangeEvent", "verify_event",
           "Receipt", "Why", "Withdrawn",
           "HuiyiError", "BadRequest", "RateLimited", "AuthError", "ForbiddenError", "NotFound", "Unavailable",
           "Unreachable", "SignatureError", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8080"
T = TypeVar("T")


# -- errors ---------------------------------------------------------------------------


class HuiyiError(Exception):
    """A non-2xx answer: ``status`` (HTTP code), ``error`` (the gateway's error
    name, e.g. ``NotFoundError``) and ``detail`` (its reason, never your input)."""

    def __init__(self, status: int, error: str, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        #: seconds to wait before calling again (the answer's Retry-After), None when it named none
        self.retry_after = retry_after


class BadRequest(HuiyiError):
    """400 / 408 / 413: the request was malformed, too slow or too large."""


class RateLimited(BadRequest):
    """429: too many calls from this address or with this key; ``retry_after`` the
    seconds until the limit has room again (the answer's ``Retry-After``: the gateway
    sends whole seconds ≥ 1; None when the answer named none)."""


class AuthError(HuiyiError):
    """401: a key is needed, or the one sent is wrong or revoked."""


class ForbiddenError(HuiyiError):
    """403: the key may not reach that tenant or person."""


class NotFound(HuiyiError):
    """404: no such memory (in this person's namespace) or tenant."""


class Unavailable(HuiyiError):
    """5xx: the gateway could not serve the call now."""


class Unreachable(Unavailable):
    """The gateway did not answer: connection refused or reset, timeout, a
    protocol error (any ``httpx.TransportError``, kept as ``__cause__``).
    ``status`` is 0, ``error`` the httpx error's class name."""


def _unreachable(exc: httpx.TransportError) -> Unreachable:
    return Unreachable(0, type(exc).__name__, str(exc) or "the gateway did not answer")


def _repair(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (also inside lists,
    tuples and dict keys/values) replaced by U+FFFD, so that it encodes as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, Mapping):
        return {_repair(k): _repair(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_repair(v) for v in value]
    return value


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()
        error, detail = body.get("error", ""), body.get("detail")
    except (ValueError, AttributeError):
        error, detail = "", response.text[:500]
    code = response.status_code
    cls = {401: AuthError, 403: ForbiddenError, 404: NotFound, 429: RateLimited}.get(code)
    if cls is None:
        cls = Unavailable if code >= 500 else BadRequest
    raise cls(code, error, detail, _retry_after(response.headers.get("retry-after")))


def _retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds (RFC 9110 §10.2.3: delay-seconds or an
    HTTP date, from now, at least 0); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - time.time())


# -- change events ----------------------------------------------------------------------


class SignatureError(ValueError):
    """A change event that ``verify_event`` refuses: a header missing, a signature
    that does not match, a timestamp outside the tolerance or a body that is not an event."""


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """A change event the gateway POSTed to a tenant's webhook (docs/api.md,
    "Change events"): ``id`` the ``webhook-id`` (the same on every retry: de-duplicate
    on it), ``type`` ``memory.added`` / ``memory.changed`` / ``memory.forgotten``,
    ``timestamp`` when the change happened (aware), and the memory's ``tenant``,
    ``subject``, ``memory_id`` and ``version``; never its text (fetch it with ``get``)."""

    id: str
    type: str
    timestamp: datetime | None
    tenant: str
    namespace: str
    subject: str
    memory_id: str
    version: int | None
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


def verify_event(body: bytes | str, headers: Mapping[str, str], secret: str, *, tolerance_s: float = 300.0,
                 now: float | None = None) -> ChangeEvent:
    """The change event of a webhook request, once its Standard Webhooks signature
    holds (standardwebhooks.com): ``body`` the raw request body exactly as received
    (bytes, or a str as its UTF-8), ``headers`` the request's (any case), ``secret``
    the tenant's webhook secret as configured (``whsec_`` + base64, or the base64
    alone). The signature is ``v1,`` + base64 of HMAC-SHA256(secret, ``"<webhook-id>.
    <webhook-timestamp>.<body>"``); ``webhook-timestamp`` (Unix seconds of the
    attempt) must lie within ``tolerance_s`` seconds of ``now`` (default: the clock),
    so a captured request cannot be replayed later. Raises SignatureError."""
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, signatures = (lower.get(h, "") for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp and signatures):
        raise SignatureError("webhook-id, webhook-timestamp and webhook-signature are required")
    try:
        sent = int(stamp)
    except ValueError:
        raise SignatureError("webhook-timestamp is not Unix seconds") from None
    if abs((time.time() if now is None else now) - sent) > tolerance_s:
        raise SignatureError(f"webhook-timestamp is more than {tolerance_s:g} s away from now")
    key = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        key_bytes = base64.b64decode(key + "==")  # unpadded base64 too, as the standardwebhooks package reads it
    except ValueError:
        raise SignatureError("the secret is not base64") from None
    digest = hmac.new(key_bytes, f"{msg_id}.{sent}.".encode() + raw, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(digest).decode()
    if not any(hmac.compare_digest(expected.encode(), s.encode()) for s in signatures.split()):
        raise SignatureError("no signature matches")
    try:
        event = json.loads(raw)
        data = event["data"]
        return ChangeEvent(msg_id, event["type"], _dt(event.get("timestamp")), data["tenant"], data["namespace"],
                           data["subject"], data["memory_id"], data.get("version"), event)
    except (ValueError, KeyError, TypeError) as exc:
        raise SignatureError(f"the signed body is not a change event: {exc}") from None


# -- results --------------------------------------------------------------------------


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory: valence in [-1, 1], arousal and importance in [0, 1], times
    timezone-aware; ``origin`` the chat key it was learned in; ``version`` ≥ 1;
    ``metadata`` the caller's tags (string keys to str / int / float / bool)."""

    id: str
    subject: str
    text: str
    category: str
    key: str
    importance: float
    valence: float
    arousal: float
    emotion: str
    origin: str | None
    visibility: str
    version: int
    created_at: datetime | None
    updated_at: datetime | None
    valid_from: datetime | None
    valid_to: datetime | None
    event_time: datetime | None
    event_end: datetime | None = None
    recalled_at: tuple[datetime, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Memory:
        return cls(id=d["id"], subject=d["subject"], text=d["text"], category=d["category"], key=d["key"],
                   importance=d["importance"], valence=d["valence"], arousal=d["arousal"], emotion=d["emotion"],
                   origin=d.get("origin"), visibility=d["visibility"], version=d["version"],
                   created_at=_dt(d.get("created_at")), updated_at=_dt(d.get("updated_at")),
                   valid_from=_dt(d.get("valid_from")), valid_to=_dt(d.get("valid_to")),
                   event_time=_dt(d.get("event_time")), event_end=_dt(d.get("event_end")),
                   recalled_at=tuple(t for t in map(_dt, d.get("recalled_at") or ()) if t is not None),
                   metadata=dict(d.get("metadata") or {}))


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """Score components (``explain``): reciprocal-rank fusion, retention in [0, 1],
    ACT-R activation, emotion and importance factors."""

    rrf: float
    retention: float
    activation: float
    emotion: float
    importance: float


@dataclass(frozen=True, slots=True)
class Hit:
    """A search hit: the memory, its final score, each channel's 1-based rank;
    ``via_context`` True when it was found only through its context (the
    companion's line it answered: none of the query's words in its own text, so
    it is about something else — check it before acting on every hit of a
    topic; False from a gateway that does not say)."""

    memory: Memory
    score: float
    ranks: Mapping[str, int]
    parts: ScoreParts | None = None
    via_context: bool = False

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Hit:
        parts = ScoreParts(**d["parts"]) if d.get("parts") else None
        return cls(Memory.of(d["memory"]), d["score"], dict(d.get("ranks") or {}), parts,
                   bool(d.get("via_context", False)))


@dataclass(frozen=True, slots=True)
class Page:
    """A page of memories, newest first; ``total`` counts all of them."""

    total: int
    limit: int
    offset: int
    items: tuple[Memory, ...]


@dataclass(frozen=True, slots=True)
class Person:
    """One person of the tenant (``GET /v1/people``): ``subject``, its linked
    platform ``identities``, live ``memories``, ``last_seen`` (aware, None when
    unknown) and ``name`` (the display name they last sent, "" when none)."""

    subject: str
    identities: tuple[str, ...]
    memories: int
    last_seen: datetime | None
    name: str


@dataclass(frozen=True, slots=True)
class PeoplePage:
    """A page of people, newest seen first; ``total`` counts every match of the query."""

    total: int
    limit: int
    offset: int
    items: tuple[Person, ...]


def _people(d: Mapping[str, Any]) -> PeoplePage:
    return PeoplePage(d["total"], d["limit"], d["offset"],
                      tuple(Person(p["subject"], tuple(p["identities"]), p["memories"], _dt(p.get("last_seen")),
                                   p.get("name", "")) for p in d["items"]))


@dataclass(frozen=True, slots=True)
class AddResult:
    """What one captured fact did: ``stored``, ``deduped``, ``superseded``,
    ``revised``, ``conflict`` or ``rejected`` (``reason`` says why)."""

    action: str
    reason: str
    memory: Memory | None


@dataclass(frozen=True, slots=True)
class ImportResult:
    """One imported memory: its id in the document, what happened, its new id."""

    source_id: str
    action: str
    reason: str
    memory_id: str | None


@dataclass(frozen=True, slots=True)
class Recollection:
    """What the gateway would put into the prompt: the recollection text ("" when
    nothing was recalled), the memory ids it draws on, why the template was used
    (None: the reconstruction was accepted), the hits, and the chat messages
    (``[{"role", "content"}]``: system persona with the recollection block, then the tail)."""

    text: str
    sources: tuple[str, ...]
    fallback_reason: str | None
    mode: str
    hits: tuple[Hit, ...]
    prompt: tuple[Mapping[str, str], ...]


@dataclass(frozen=True, slots=True)
class Turn:
    """What ``POST /v1/turns`` did: the reply (None without a model or when the bot
    stays silent), the recollection and prompt, memory ids recalled and captured."""

    namespace: str
    chat: str
    reply: str | None
    recollection: str
    prompt: tuple[Mapping[str, str], ...]
    recalled: tuple[str, ...]
    captured: tuple[str, ...]
    command: bool
    duplicate: bool
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, slots=True)
class Message:
    """A chat line for capture and recollection: ``role`` ``user`` (the person,
    or with ``sender_id`` someone else in a group) or ``assistant`` (the bot)."""

    text: str
    role: str = "user"
    message_id: str | None = None
    sender_id: str | None = None
    sender_name: str | None = None
    timestamp: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "role": self.role}
        for name in ("message_id", "sender_id", "sender_name"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp.isoformat()
        return out


def _messages(items: Iterable[Message | str]) -> list[dict[str, Any]]:
    return [(Message(m) if isinstance(m, str) else m).to_json() for m in items]


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a forget purged, counted from what each step deleted: the memories and
    their older ``versions``, ``index_rows``, ``cache_entries`` and their
    ``bm25_postings``, ``chat_lines`` (the person's lines it was learned from and
    the companion's retelling it), other memories' ``contexts`` that retold it,
    consolidated memories ``derived`` from it, association ``links``,
    ``conflicts``, ``events`` (``memory.forgotten``) queued to ``receivers``
    webhooks, and the ``tombstones`` that keep it from being learned again from
    evidence older than the forget (0 for a withdrawal: said again, it is new)."""

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

    @classmethod
    def of(cls, d: Mapping[str, Any] | None) -> Receipt:
        return cls(**{k: int(v) for k, v in (d or {}).items() if k in cls.__slots__})  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Why:
    """Why a memory was or was not recalled in a turn (``GET …/memories/{id}/why``):
    ``verdict`` ``recalled``, ``below_cutoff`` (cut at rank ``k``: ``rank``,
    ``score``, ``cutoff``), ``hidden_in_chat``, ``dormant``, ``decayed``
    (``retention``), ``not_ranked`` (below the relevance floor: the recall's
    ``floors`` and, when it was among the best a floor dropped, its ``channel``,
    ``score`` and the ``floor`` it missed), ``newer``, ``no_trace`` or
    ``forgotten``; ``text`` in plain words; ``turn`` the turn id asked for (None: the last)."""

    id: str
    verdict: str
    text: str
    lang: str
    at: datetime | None = None
    chat: str | None = None
    turn: str | None = None
    rank: int | None = None
    k: int | None = None
    score: float | None = None
    cutoff: float | None = None
    retention: float | None = None
    channel: str | None = None
    floor: float | None = None
    floors: Mapping[str, float] | None = field(default=None, hash=False)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Why:
        return cls(id=d["id"], verdict=d["verdict"], text=d["text"], lang=d["lang"], at=_dt(d.get("at")),
                   chat=d.get("chat"), turn=d.get("turn"), rank=d.get("rank"), k=d.get("k"), score=d.get("score"),
                   cutoff=d.get("cutoff"), retention=d.get("retention"), channel=d.get("channel"),
                   floor=d.get("floor"), floors=d.get("floors"))


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """What ``forget_last`` took back: the memory ``ids`` retracted, from ``since``
    (aware) in ``chat``, how many of the person's ``lines`` and of the companion's
    ``bot_lines`` left the chat log, and the ``receipt``."""

    subject: str
    chat: str
    since: datetime | None
    ids: tuple[str, ...]
    lines: int
    bot_lines: int
    receipt: Receipt


def _withdrawn(d: Mapping[str, Any]) -> Withdrawn:
    return Withdrawn(d["subject"], d["chat"], _dt(d.get("since")), tuple(d["ids"]), d["lines"], d["bot_lines"],
                     Receipt.of(d.get("receipt")))


# -- calls: each request described once ------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One item of a batch: ``status`` ``updated``, ``forgotten``, ``not_found``
    (no such memory of this person: nothing was done) or ``conflict`` (an edit's
    text is what another memory holds: nothing was done); ``memory`` after an update."""

    id: str
    status: str
    memory: Memory | None = None


def _batch(d: Mapping[str, Any]) -> list[BatchResult]:
    return [BatchResult(r["id"], r["status"], Memory.of(r["memory"]) if r.get("memory") else None)
            for r in d["results"]]


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    method: str
    path: str
    read: Callable[[Any], T]
    params: Mapping[str, Any] | None = None
    body: Any = None


def _subject(subject: str) -> str:
    return "/v1/subjects/" + quote(_repair(subject), safe=":@")


def _mid(memory_id: str) -> str:
    return quote(_repair(memory_id), safe="")


def _clean(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _page(d: Mapping[str, Any]) -> Page:
    return Page(d["total"], d["limit"], d["offset"], tuple(Memory.of(m) for m in d["items"]))


def _adds(d: Mapping[str, Any]) -> list[AddResult]:
    return [AddResult(r["action"], r.get("reason", ""), Memory.of(r["memory"]) if r.get("memory") else None)
            for r in d["results"]]


def _recollection(d: Mapping[str, Any]) -> Recollection:
    return Recollection(d["recollection"], tuple(d["sources"]), d.get("fallback_reason"), d["mode"],
                        tuple(Hit.of(h) for h in d["hits"]), tuple(d["prompt"]))


def _turn(d: Mapping[str, Any]) -> Turn:
    return Turn(d["namespace"], d["chat"], d.get("reply"), d["recollection"], tuple(d["prompt"]),
                tuple(d["recalled"]), tuple(d["captured"]), d["command"], d["duplicate"], d)


class _Calls:
    """The ``_Call`` of every verb (no IO here). ``tenant`` is sent as ``?tenant=``
    when set (a keyless loopback caller choosing a tenant; with a key it must be the key's)."""

    def __init__(self, tenant: str | None) -> None:
        self.tenant = tenant

    def _q(self, **params: Any) -> dict[str, Any]:
        return _clean({"tenant": self.tenant, **params})

    def capture(self, subject: str, messages: Iterable[Message | str], chat: str | None, infer: bool,
                extractor: str, to_tail: bool, metadata: Mapping[str, Any] | None = None) -> _Call[list[AddResult]]:
        body = {"messages": _messages(messages), "chat": chat, "infer": infer, "extractor": extractor,
                "to_tail": to_tail, "metadata": dict(metadata) if metadata is not None else None}
        return _Call("POST", _subject(subject) + "/memories", _adds, self._q(), _clean(body))

    def search(self, subject: str, query: str, k: int, chat: str | None, explain: bool,
               filters: Mapping[str, Any] | None = None, threshold: float | None = None) -> _Call[list[Hit]]:
        body = _clean({"query": query, "k": k, "chat": chat, "explain": explain,
                       "filters": dict(filters) if filters else None, "threshold": threshold})
        return _Call("POST", _subject(subject) + "/search", lambda d: [Hit.of(h) for h in d["hits"]], self._q(), body)

    def list(self, subject: str, limit: int, offset: int, chat: str | None,
             filters: Mapping[str, Any] | None = None) -> _Call[Page]:
        wanted = json.dumps(dict(filters), ensure_ascii=False) if filters else None
        return _Call("GET", _subject(subject) + "/memories", _page,
                     self._q(limit=limit, offset=offset, chat=chat, filters=wanted))

    def get(self, subject: str, memory_id: str, chat: str | None) -> _Call[Memory]:
        return _Call("GET", f"{_subject(subject)}/memories/{_mid(memory_id)}", Memory.of, self._q(chat=chat))

    def update(self, subject: str, memory_id: str, text: str | None,
               metadata: Mapping[str, Any] | None = None) -> _Call[Memory]:
        return _Call("PATCH", f"{_subject(subject)}/memories/{_mid(memory_id)}", Memory.of, self._q(),
                     _clean({"text": text, "metadata": dict(metadata) if metadata is not None else None}))

    def update_many(self, subject: str, items: Iterable[Mapping[str, Any]]) -> _Call[list[BatchResult]]:
        return _Call("POST", _subject(subject) + "/memories/batch-update", _batch, self._q(),
                     {"items": [dict(i) for i in items]})

    def delete_many(self, subject: str, ids: Iterable[str]) -> _Call[list[BatchResult]]:
        return _Call("POST", _subject(subject) + "/memories/batch-forget", _batch, self._q(), {"ids": list(ids)})

    def forget_scope(self, subject: str, confirm: str, chat: str | None) -> _Call[int]:
        return _Call("DELETE", _subject(subject) + "/memories", lambda d: d["forgotten"],
                     self._q(confirm=confirm, chat=chat))

    def delete(self, subject: str, memory_id: str) -> _Call[Receipt]:
        return _Call("DELETE", f"{_subject(subject)}/memories/{_mid(memory_id)}", lambda d: Receipt.of(d["receipt"]),
                     self._q())

    def why(self, subject: str, memory_id: str, turn: str, chat: str | None, lang: str | None) -> _Call[Why]:
        return _Call("GET", f"{_subject(subject)}/memories/{_mid(memory_id)}/why", Why.of,
                     self._q(turn=turn, chat=chat, lang=lang))

    def forget_last(self, subject: str, chat: str, duration: str) -> _Call[Withdrawn]:
        return _Call("POST", _subject(subject) + "/memories/forget-last", _withdrawn, self._q(),
                     {"chat": chat, "duration": duration})

    def history(self, subject: str, memory_id: str, chat: str | None) -> _Call[list[Memory]]:
        return _Call("GET", f"{_subject(subject)}/memories/{_mid(memory_id)}/history",
                     lambda d: [Memory.of(v) for v in d["versions"]], self._q(chat=chat))

    def forget_subject(self, subject: str) -> _Call[int]:
        return _Call("DELETE", _subject(subject), lambda d: d["forgotten"], self._q())

    def export(self, subject: str, chat: str | None) -> _Call[dict[str, Any]]:
        return _Call("GET", _subject(subject) + "/export", dict, self._q(chat=chat))

    def import_memories(self, subject: str, document: Mapping[str, Any]) -> _Call[list[ImportResult]]:
        return _Call("POST", _subject(subject) + "/import",
                     lambda d: [ImportResult(r["source_id"], r["action"], r.get("reason", ""), r.get("memory_id"))
                                for r in d["results"]], self._q(), dict(document))

    def recollect(self, subject: str, tail: Iterable[Message | str], chat: str | None, query: str | None,
                  person_name: str | None, record: bool) -> _Call[Recollection]:
        body = _clean({"tail": _messages(tail), "chat": chat, "query": query, "person_name": person_name,
                       "record": record})
        return _Call("POST", _subject(subject) + "/recollection", _recollection, self._q(), body)

    def record_reply(self, subject: str, text: str, chat: str | None, message_id: str | None) -> _Call[str]:
        body = _clean({"text": text, "chat": chat, "message_id": message_id})
        return _Call("POST", _subject(subject) + "/replies", lambda d: d["chat"], self._q(), body)

    def turn(self, message: Mapping[str, Any], background_capture: bool) -> _Call[Turn]:
        body = _clean({"message": dict(message), "background_capture": background_capture, "tenant": self.tenant})
        return _Call("POST", "/v1/turns", _turn, None, body)

    def withdraw(self, withdrawal: Mapping[str, Any]) -> _Call[list[str]]:
        body = _clean({"withdrawal": dict(withdrawal), "tenant": self.tenant})
        return _Call("POST", "/v1/withdrawals", lambda d: list(d["retracted"]), None, body)

    def people(self, query: str | None, limit: int, offset: int) -> _Call[PeoplePage]:
        return _Call("GET", "/v1/people", _people, self._q(q=query, limit=limit, offset=offset))


def _headers(api_key: str | None) -> dict[str, str]:
    return {"X-API-Key": api_key} if api_key else {}


# -- the two clients ---------------------------------------------------------------------


class AsyncHuiyi:
    """Async client. ``base_url`` the gateway's root; ``api_key`` (``hy_…``; None
    only for a keyless gateway called from its own machine); ``tenant`` sent as
    ``?tenant=`` when set; ``timeout`` seconds per request; ``http`` an
    ``httpx.AsyncClient`` to use instead of a new one (e.g. with
    ``httpx.ASGITransport`` in tests). Use ``async with`` or ``await aclose()``."""

    def __init__(self, base_url: str = DEFAULT_URL, api_key: str | None = None, *, tenant: str | None = None,
                 timeout: float = 30.0, http: httpx.AsyncClient | None = None) -> None:
        self._own = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._headers = _headers(api_key)
        self._calls = _Calls(tenant)

    async def _run(self, call: _Call[T]) -> T:
        try:
            r = await self._http.request(call.method, call.path, params=_repair(call.params),
                                         json=_repair(call.body), headers=self._headers)
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        _raise_for(r)
        return call.read(r.json())

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncHuiyi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def capture(self, subject: str, messages: Iterable[Message | str], *, chat: str | None = None,
                      infer: bool = True, extractor: str = "auto", to_tail: bool = True,
                      metadata: Mapping[str, Any] | None = None) -> list[AddResult]:
        """Learn from the person's messages (strings are their own lines); with ``chat``
        they are learned there and join its tail unless ``to_tail`` is False; ``metadata``
        (at most 16 keys to str / int / float / bool) joins every memory the call stores or finds."""
        return await self._run(self._calls.capture(subject, messages, chat, infer, extractor, to_tail, metadata))

    async def search(self, subject: str, query: str, *, k: int = 8, chat: str | None = None,
                     explain: bool = False, filters: Mapping[str, Any] | None = None,
                     threshold: float | None = None) -> list[Hit]:
        """Hybrid search, best first, at most ``k`` hits; ``explain`` adds the score components;
        ``filters`` keeps memories whose metadata matches: ``{"topic": "pets"}``, ``{"topic": ["pets",
        "food"]}`` (any of), ``{"score": {"$gte": 3, "$lt": 10}}`` (a range; strings compare as text),
        ``{"$or": [{"topic": "pets"}, {"pinned": True}]}``, every key required; ``threshold`` drops
        hits scoring below it (``Hit.score``'s scale, ≥ 0: about 0.33 for a memory ranked first
        by both words and meaning, about 0.17 for one ranked first by one of them)."""
        return await self._run(self._calls.search(subject, query, k, chat, explain, filters, threshold))

    async def list(self, subject: str, *, limit: int = 50, offset: int = 0, chat: str | None = None,
                   filters: Mapping[str, Any] | None = None) -> Page:
        """A page of memories, newest first; ``filters`` as in ``search``."""
        return await self._run(self._calls.list(subject, limit, offset, chat, filters))

    async def get(self, subject: str, memory_id: str, *, chat: str | None = None) -> Memory:
        """One memory; NotFound when it is not this person's (or not shown in ``chat``)."""
        return await self._run(self._calls.get(subject, memory_id, chat))

    async def update(self, subject: str, memory_id: str, text: str | None = None, *,
                     metadata: Mapping[str, Any] | None = None) -> Memory:
        """Edit: a new version with ``text`` (the old one stays in the history) and/or a
        ``metadata`` patch (in place; a key set to None is removed)."""
        return await self._run(self._calls.update(subject, memory_id, text, metadata))

    async def update_many(self, subject: str, items: Iterable[Mapping[str, Any]]) -> list[BatchResult]:
        """Edit up to 100 memories (``{"id", "text"?, "metadata"?}`` each), answered per item:
        ``updated`` or ``not_found`` (never another person's). A bad item: BadRequest, nothing changed."""
        return await self._run(self._calls.update_many(subject, items))

    async def delete_many(self, subject: str, ids: Iterable[str]) -> list[BatchResult]:
        """Forget up to 100 memories, answered per item: ``forgotten`` or ``not_found``."""
        return await self._run(self._calls.delete_many(subject, ids))

    async def forget_scope(self, subject: str, *, confirm: str, chat: str | None = None) -> int:
        """Admin key: forget the person's memories — all of them, or with a group ``chat`` what they
        said there; ``confirm`` must repeat ``subject``. Returns how many were forgotten."""
        return await self._run(self._calls.forget_scope(subject, confirm, chat))

    async def delete(self, subject: str, memory_id: str) -> Receipt:
        """Forget one memory for good (it is not learned again from older messages); returns the
        receipt of what was purged with it."""
        return await self._run(self._calls.delete(subject, memory_id))

    async def why(self, subject: str, memory_id: str, *, turn: str = "last", chat: str | None = None,
                  lang: str | None = None) -> Why:
        """Why the memory was or was not recalled in the person's last turn, or in the audited turn
        ``turn`` (an id: ``Turn.raw["turn"]``); ``lang`` ``zh_CN`` or ``en`` for ``Why.text``. NotFound
        for a memory or turn that is not this person's; BadRequest for a malformed turn id."""
        return await self._run(self._calls.why(subject, memory_id, turn, chat, lang))

    async def forget_last(self, subject: str, chat: str, duration: str) -> Withdrawn:
        """Take back what the person (a platform subject) said in ``chat`` in the last ``duration``
        (``"10m"``, ``"10分钟"``; at most 30 days) and what it taught, as ``/memory forget last 10m``.
        BadRequest for a duration that names no time or is too long (nothing changed)."""
        return await self._run(self._calls.forget_last(subject, chat, duration))

    async def history(self, subject: str, memory_id: str, *, chat: str | None = None) -> Sequence[Memory]:
        """Every version, oldest first."""
        return await self._run(self._calls.history(subject, memory_id, chat))

    async def forget_subject(self, subject: str) -> int:
        """Forget everything of the person; returns how many memories."""
        return await self._run(self._calls.forget_subject(subject))

    async def export(self, subject: str, *, chat: str | None = None) -> dict[str, Any]:
        """The ``huiyi.memories.v1`` document; with a group ``chat`` only what that group may see."""
        return await self._run(self._calls.export(subject, chat))

    async def import_memories(self, subject: str, document: Mapping[str, Any]) -> list[ImportResult]:
        """Add the memories of a ``huiyi.memories.v1`` document to the person."""
        return await self._run(self._calls.import_memories(subject, document))

    async def recollect(self, subject: str, tail: Iterable[Message | str] = (), *, chat: str | None = None,
                        query: str | None = None, person_name: str | None = None,
                        record: bool = False) -> Recollection:
        """The recollection and prompt for a conversation (``tail`` oldest first, or the stored tail of
        ``chat``); ``record`` puts the tail into the chat's stored tail first and prompts from that."""
        return await self._run(self._calls.recollect(subject, tail, chat, query, person_name, record))

    async def record_reply(self, subject: str, text: str, *, chat: str | None = None,
                           message_id: str | None = None) -> str:
        """Put your bot's reply into the chat's tail (default the person's private chat); returns the chat key."""
        return await self._run(self._calls.record_reply(subject, text, chat, message_id))

    async def turn(self, message: Mapping[str, Any], *, background_capture: bool = False) -> Turn:
        """One platform-neutral message through the gateway's whole pipeline."""
        return await self._run(self._calls.turn(message, background_capture))

    async def withdraw(self, withdrawal: Mapping[str, Any]) -> list[str]:
        """A person withdrew one of their messages (``{"platform", "message_id", "sender_id", "chat_kind",
        "chat_id", "operator_id"?}``): its chat line is redacted and the ids of the memories it taught,
        retracted now, are returned. Idempotent."""
        return await self._run(self._calls.withdraw(withdrawal))

    async def people(self, query: str | None = None, *, limit: int = 50, offset: int = 0) -> PeoplePage:
        """The tenant's people (an admin key): newest seen first, matching ``query`` (a
        substring of a subject, linked identity or name) when given; ForbiddenError for a member key."""
        return await self._run(self._calls.people(query, limit, offset))


class Huiyi:
    """Sync client: the methods of ``AsyncHuiyi``, blocking. ``http`` an
    ``httpx.Client`` to use instead of a new one. Use ``with`` or ``close()``."""

    def __init__(self, base_url: str = DEFAULT_URL, api_key: str | None = None, *, tenant: str | None = None,
                 timeout: float = 30.0, http: httpx.Client | None = None) -> None:
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._headers = _headers(api_key)
        self._calls = _Calls(tenant)

    def _run(self, call: _Call[T]) -> T:
        try:
            r = self._http.request(call.method, call.path, params=_repair(call.params),
                                   json=_repair(call.body), headers=self._headers)
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        _raise_for(r)
        return call.read(r.json())

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> Huiyi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def capture(self, subject: str, messages: Iterable[Message | str], *, chat: str | None = None,
                infer: bool = True, extractor: str = "auto", to_tail: bool = True,
                metadata: Mapping[str, Any] | None = None) -> list[AddResult]:
        """See ``AsyncHuiyi.capture``."""
        return self._run(self._calls.capture(subject, messages, chat, infer, extractor, to_tail, metadata))

    def search(self, subject: str, query: str, *, k: int = 8, chat: str | None = None,
               explain: bool = False, filters: Mapping[str, Any] | None = None,
               threshold: float | None = None) -> list[Hit]:
        """See ``AsyncHuiyi.search``."""
        return self._run(self._calls.search(subject, query, k, chat, explain, filters, threshold))

    def list(self, subject: str, *, limit: int = 50, offset: int = 0, chat: str | None = None,
             filters: Mapping[str, Any] | None = None) -> Page:
        """See ``AsyncHuiyi.list``."""
        return self._run(self._calls.list(subject, limit, offset, chat, filters))

    def get(self, subject: str, memory_id: str, *, chat: str | None = None) -> Memory:
        """See ``AsyncHuiyi.get``."""
        return self._run(self._calls.get(subject, memory_id, chat))

    def update(self, subject: str, memory_id: str, text: str | None = None, *,
               metadata: Mapping[str, Any] | None = None) -> Memory:
        """See ``AsyncHuiyi.update``."""
        return self._run(self._calls.update(subject, memory_id, text, metadata))

    def update_many(self, subject: str, items: Iterable[Mapping[str, Any]]) -> list[BatchResult]:
        """See ``AsyncHuiyi.update_many``."""
        return self._run(self._calls.update_many(subject, items))

    def delete_many(self, subject: str, ids: Iterable[str]) -> list[BatchResult]:
        """See ``AsyncHuiyi.delete_many``."""
        return self._run(self._calls.delete_many(subject, ids))

    def forget_scope(self, subject: str, *, confirm: str, chat: str | None = None) -> int:
        """See ``AsyncHuiyi.forget_scope``."""
        return self._run(self._calls.forget_scope(subject, confirm, chat))

    def delete(self, subject: str, memory_id: str) -> Receipt:
        """See ``AsyncHuiyi.delete``."""
        return self._run(self._calls.delete(subject, memory_id))

    def why(self, subject: str, memory_id: str, *, turn: str = "last", chat: str | None = None,
            lang: str | None = None) -> Why:
        """See ``AsyncHuiyi.why``."""
        return self._run(self._calls.why(subject, memory_id, turn, chat, lang))

    def forget_last(self, subject: str, chat: str, duration: str) -> Withdrawn:
        """See ``AsyncHuiyi.forget_last``."""
        return self._run(self._calls.forget_last(subject, chat, duration))

    def history(self, subject: str, memory_id: str, *, chat: str | None = None) -> Sequence[Memory]:
        """See ``AsyncHuiyi.history``."""
        return self._run(self._calls.history(subject, memory_id, chat))

    def forget_subject(self, subject: str) -> int:
        """See ``AsyncHuiyi.forget_subject``."""
        return self._run(self._calls.forget_subject(subject))

    def export(self, subject: str, *, chat: str | None = None) -> dict[str, Any]:
        """See ``AsyncHuiyi.export``."""
        return self._run(self._calls.export(subject, chat))

    def import_memories(self, subject: str, document: Mapping[str, Any]) -> list[ImportResult]:
        """See ``AsyncHuiyi.import_memories``."""
        return self._run(self._calls.import_memories(subject, document))

    def recollect(self, subject: str, tail: Iterable[Message | str] = (), *, chat: str | None = None,
                  query: str | None = None, person_name: str | None = None, record: bool = False) -> Recollection:
        """See ``AsyncHuiyi.recollect``."""
        return self._run(self._calls.recollect(subject, tail, chat, query, person_name, record))

    def record_reply(self, subject: str, text: str, *, chat: str | None = None, message_id: str | None = None) -> str:
        """See ``AsyncHuiyi.record_reply``."""
        return self._run(self._calls.record_reply(subject, text, chat, message_id))

    def turn(self, message: Mapping[str, Any], *, background_capture: bool = False) -> Turn:
        """See ``AsyncHuiyi.turn``."""
        return self._run(self._calls.turn(message, background_capture))

    def withdraw(self, withdrawal: Mapping[str, Any]) -> list[str]:
        """See ``AsyncHuiyi.withdraw``."""
        return self._run(self._calls.withdraw(withdrawal))

    def people(self, query: str | None = None, *, limit: int = 50, offset: int = 0) -> PeoplePage:
        """See ``AsyncHuiyi.people``."""
        return self._run(self._calls.people(query, limit, offset))
