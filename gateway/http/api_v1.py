"""The ``/v1`` HTTP API: turns, and the memory verbs for bots that bring their own model.

Every route needs a caller (``gateway.http.auth``: an API key, or no key from
loopback for a tenant that never had one), which is checked before the body
is read. The tenant is the key's (``?tenant=`` may name it, and must match);
the person is ``{subject}`` in the path (``tg:42``, ``qq:10001``,
``person:…``), validated like every namespace (``memory.types.Namespace``)
and resolved through linked identities. An admin key reaches every person of
its tenant, a member key only its own.

Routes (request and response bodies are the pydantic models below, so
``/openapi.json`` describes all of them)::

    POST   /v1/turns                                 one message through the whole pipeline
    POST   /v1/withdrawals                           a person withdrew a message: what it taught goes
    POST   /v1/subjects/{subject}/memories           capture from messages (infer: extractor or verbatim)
    GET    /v1/subjects/{subject}/memories           list, newest first, paged
    POST   /v1/subjects/{subject}/search             hybrid search with scores (explain: components)
    GET    /v1/subjects/{subject}/memories/{id}      one memory
    PATCH  /v1/subjects/{subject}/memories/{id}      edit (new version; the old text stays in history)
    DELETE /v1/subjects/{subject}/memories/{id}      forget (tombstoned, purged), with its receipt
    GET    /v1/subjects/{subject}/memories/{id}/why  why it was or was not recalled (last turn, or ?turn=<id>)
    GET    /v1/subjects/{subject}/memories/{id}/history   every version
    POST   /v1/subjects/{subject}/memories/batch-update   edit many (per-item results)
    POST   /v1/subjects/{subject}/memories/batch-forget   forget many (per-item results)
    POST   /v1/subjects/{subject}/memories/forget-last    take back the last N minutes in a chat, with its receipt
    DELETE /v1/subjects/{subject}/memories           admin: forget a person's memories (one group's), confirmed
    DELETE /v1/subjects/{subject}                    forget everything of the person
    GET    /v1/subjects/{subject}/export             the huiyi.memories.v1 document
    POST   /v1/subjects/{subject}/import             add the memories of such a document
    POST   /v1/imports                               another bot's memories (huiyi import --from …), summarised
    POST   /v1/subjects/{subject}/recollection       recall + reconstruction for a conversation tail
    POST   /v1/subjects/{subject}/replies            record the bot's own reply in the chat's tail
    GET    /v1/people                                the tenant's people, paged, searched (admin key)

Disclosure (DESIGN rule 6): a read that names ``chat`` (a ``ChatRef.key``,
``tg:group:-100123``) shows only what may be shown there — in a group, the
memories learned in that group; without ``chat`` it is the person's own view
(a private chat). A member key neither writes into a group's tail nor reads
the stored one (other people's lines); it may send the tail itself.

Metadata (``memory.metadata``): a memory's own tags, set at capture, import
and edit, shown wherever the memory is, filtered on in list (``filters``, a
JSON object in the query) and search (``filters`` in the body) — inside the
person's namespace and the chat's disclosure, never past them. Batches answer
per item: every id is looked up in the person's namespace only, so another
person's id is ``not_found`` and never touched.
The memory logic is the core's (``MemoryCore``, ``memory.capture``,
``memory.reconstruct``, ``memory.admin``) and the commands' export.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response, Security
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from bridges.common import said_text
from bridges.contract import InboundMessage, Withdrawal
from gateway.http.auth import KEY_HEADER, Caller, authenticate
from gateway.http.bodies import json_object, read_body
from gateway.character_prompt import build_messages
from gateway.commands import MAX_EDIT_CHARS, export_document
from gateway.errors import BadPayload, ChatMismatch, Forbidden
from gateway.ledger import capped_recollection
from gateway.http import patterns
from gateway.pipeline import Pipeline
from locales import turn_language
from memory.admin import pause_learning, resume_learning
from memory.core import KEY_CHARS
from memory.errors import NotFoundError
from memory.explain import TRACE_DEPTH, record_recall, visible_in
from memory.identity import is_platform_subject, platform_subject, resolve_subject
from memory.recall import RRF_K
from memory.metadata import check_filters, check_metadata, merged
from memory.store import ChatLine, utcnow
from memory.types import (CONTEXT_CHARS, FORGET_RECEIPT_FIELDS, ID_RE, ForgetReceipt, SUBJECT_RE, TENANT_RE, Category, ChatKind, ChatRef, Hit, Memory, Namespace,
                          Visibility, clean_controls, clean_name, in_era)

__all__ = ["router", "announce", "openapi_of"]

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 20_000
MAX_MESSAGES = 50
MAX_IMPORT = 2_000
SEARCH_K_MAX = 50


class _Guarded(APIRoute):
    """A route whose caller is rate limited (``gateway.http.ratelimit``) and
    authenticated before its body is read (a keyless remote caller cannot make
    the gateway buffer anything), whose body is read
    within the size and time limits of ``gateway.http.bodies`` and whose JSON strings
    are repaired (``memory.types.repair``) before pydantic sees them."""

    def get_route_handler(self) -> Callable:
        inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            state = request.app.state
            limits = getattr(state, "api_limits", None)  # gateway.http.ratelimit: 429 before the key and the body
            if limits is not None:
                await limits.check_address(request)
            request.state.caller = await authenticate(request, lambda: state.pipeline.core.store,
                                                      getattr(state, "api_require_key", True))
            if limits is not None:
                await limits.check_caller(request, request.state.caller)
            if request.method in ("POST", "PUT", "PATCH") and (await read_body(request)).strip():
                request._json = await json_object(request)  # FastAPI reads request.json(): this cache
                if "json" not in request.headers.get("content-type", ""):
                    # a JSON object whatever the label (curl -d says form-urlencoded): read as JSON, as
                    # /v1/turns always did, instead of FastAPI refusing the body for its content type
                    request.scope["headers"] = [(k, v) for k, v in request.scope["headers"]
                                                if k.lower() != b"content-type"] + [(b"content-type",
                                                                                      b"application/json")]
                    del request._headers
            return await inner(request)

        return handler


def _no_nul(value: Any) -> Any:
    """Control characters dropped (``memory.types.clean_controls``; NUL first of
    all: PostgreSQL refuses it in text), before the length checks: a text of
    nothing else is empty, hence refused."""
    return clean_controls(value) if isinstance(value, str) else value


#: Text from outside: control characters dropped before the length checks (lone surrogates were repaired with the body).
Text = Annotated[str, BeforeValidator(_no_nul)]
#: Text that must say something: the schema says it holds a character that cleaning keeps.
Said = Annotated[Text, Field(json_schema_extra={"pattern": patterns.SAID})]
#: A time the core takes (``memory.types.in_era``: 1970-2100, UTC when naive); the schema says which years.
When = Annotated[datetime, AfterValidator(in_era), Field(json_schema_extra={"pattern": patterns.ERA_TIME})]
#: A chat key, ``platform:private|group:id[:thread]`` (``memory.types.ChatRef.key``; NamespaceError, 400, otherwise).
ChatKey = Annotated[str, Field(max_length=300, json_schema_extra={"pattern": patterns.CHAT_KEY})]


class ErrorOut(BaseModel):
    """Every error answer: the error's name and what was wrong (never the input)."""

    error: str
    detail: Any = None


_ERRORS = {code: {"model": ErrorOut, "description": text} for code, text in (
    (400, "malformed body, path or query (ids outside their patterns)"),
    (401, "no API key where one is needed, or a wrong or revoked one"),
    (403, "the key may not reach this tenant or person, or run this command"),
    (404, "unknown tenant or memory"),
    (408, "the body did not arrive in time"),
    (409, "the chat named is not one the subject speaks in (another platform, someone else's private chat)"),
    (413, "body above 1 MiB"),
    (503, "the store, index or embedder is unavailable"))}
_ERRORS[429] = {"model": ErrorOut, "description": "too many calls from this address or with this key "
                "(gateway.http.ratelimit)", "headers": {"Retry-After": {
                    "description": "seconds until the limit has room again", "schema": {"type": "integer", "minimum": 1}}}}

router = APIRouter(
    prefix="/v1", route_class=_Guarded, responses=_ERRORS,
    dependencies=[Security(APIKeyHeader(name=KEY_HEADER, auto_error=False, description="an API key: hy_…")),
                  Security(HTTPBearer(auto_error=False, description="the same key as a bearer token"))])


# -- request context ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ctx:
    pipeline: Pipeline
    caller: Caller
    tenant: str

    @property
    def core(self):
        return self.pipeline.core

    @property
    def t(self):
        return self.pipeline.tenant(self.tenant)


TenantQuery = Annotated[str | None, Query(
    description="the tenant; default: the key's (a keyless loopback caller: `default`)",
    pattern=f"^{TENANT_RE.pattern}$", max_length=63)]
SubjectPath = Annotated[str, Path(description="the person, `platform:id` (`tg:42`) or `person:…`, naming one "
                                              "person (no placeholder id such as `tg:0`, no shared anonymous sender)",
                                  pattern=f"^{SUBJECT_RE.pattern}$", max_length=145,
                                  json_schema_extra={"pattern": patterns.SUBJECT})]
MemoryIdPath = Annotated[str, Path(description="a memory id", pattern=f"^{ID_RE.pattern}$", max_length=128)]
ChatQuery = Annotated[str | None, Query(
    description="the chat the answer is for, `platform:private|group:id[:thread]`: in a group only what was "
                "learned there is shown", max_length=300, json_schema_extra={"pattern": patterns.CHAT_KEY})]


async def _ctx(request: Request, tenant: TenantQuery = None) -> _Ctx:
    p: Pipeline = request.app.state.pipeline
    caller: Caller = request.state.caller
    name = await asyncio.to_thread(caller.tenant_of, p.core.store, tenant)
    p.tenant(name)  # UnknownTenant (404)
    return _Ctx(p, caller, name)


Ctx = Annotated[_Ctx, Depends(_ctx)]


async def _ns(ctx: _Ctx, subject: str) -> Namespace:
    return await asyncio.to_thread(ctx.caller.namespace, ctx.core.store, ctx.tenant, subject)


def _chat(key: str | None) -> ChatRef | None:
    return None if key is None else ChatRef.parse(key)


def _person_chat(subject: str, chat: ChatRef | None, caller: Caller, writing_tail: bool) -> ChatRef | None:
    """``chat`` checked as a place where ``subject`` speaks: a private chat is the
    person's own (keyed by their platform id, as the pipeline keys it); writes to
    a group's tail with a member key are refused."""
    if chat is None:
        return None
    if not is_platform_subject(subject):
        raise ChatMismatch("a chat needs a platform subject (platform:id), not a linked person")
    platform, uid = subject.split(":", 1)
    if chat.platform != platform:
        raise ChatMismatch(f"chat {chat.key} is not on the subject's platform {platform}")
    if not chat.is_group and chat.chat_id != uid:
        raise ChatMismatch(f"private chat {chat.key} is not the subject's own ({platform}:private:{uid})")
    if chat.is_group and writing_tail and not caller.admin:
        raise Forbidden("only an admin key writes into a group's tail")
    return chat


# -- shapes ---------------------------------------------------------------------


class MemoryOut(BaseModel):
    """One memory (``memory.types.Memory``): valence in [-1, 1], arousal and
    importance in [0, 1], times ISO 8601 UTC; ``origin`` the chat it was learned
    in; ``version`` from 1, +1 per edit or supersession; ``context`` the
    companion's line the memory's message answered, searched with its text ("" when none);
    ``metadata`` the caller's tags (``memory.metadata``); ``event_time`` the day
    or period start the memory's event names, ``event_end`` the end (exclusive)
    of a period it names (「下个月搬家」: the first of the month after), null for
    a single day or no date."""

    id: str
    subject: str
    text: str
    category: Category
    key: str
    importance: float
    valence: float
    arousal: float
    emotion: str
    origin: str | None
    visibility: Visibility
    version: int
    created_at: datetime | None
    updated_at: datetime | None
    valid_from: datetime | None
    valid_to: datetime | None
    event_time: datetime | None
    recalled_at: list[datetime]
    event_end: datetime | None = None
    context: str = ""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @classmethod
    def of(cls, m: Memory) -> MemoryOut:
        return cls(id=m.id, subject=m.namespace.subject, text=m.text, category=m.category, key=m.key,
                   importance=m.importance, valence=m.valence, arousal=m.arousal, emotion=m.emotion,
                   origin=m.origin.key if m.origin else None, visibility=m.visibility, version=m.version,
                   created_at=m.created_at, updated_at=m.updated_at, valid_from=m.valid_from, valid_to=m.valid_to,
                   event_time=m.event_time, event_end=m.event_end, recalled_at=list(m.access_times),
                   context=m.context, metadata=dict(m.metadata))


class MemoryPage(BaseModel):
    """A page of live memories, newest first; ``total`` counts what ``chat`` may see."""

    subject: str
    total: int
    limit: int
    offset: int
    items: list[MemoryOut]


class ScorePartsOut(BaseModel):
    """Score components (``memory.types.ScoreParts``): rrf (weighted reciprocal-rank
    fusion, its k ``memory.recall.RRF_K``), retention in [0, 1], ACT-R activation,
    emotion and importance factors."""

    rrf: float = Field(description=f"weighted reciprocal-rank fusion, Σ w / (k + rank) with k = {RRF_K} "
                                   "(Cormack et al. 2009; memory.recall)")
    retention: float
    activation: float
    emotion: float
    importance: float


class HitOut(BaseModel):
    """A recalled memory, its final score, each channel's 1-based rank
    (``bm25``, ``vector``), whether it was found only through its context
    (``memory.types.Hit.via_context``) and, with ``explain``, the score's components."""

    memory: MemoryOut
    score: float
    ranks: dict[str, int]
    via_context: bool = Field(default=False, description=(
        "true when the memory was found only through its context (the companion's line it answered, "
        "searched with its text): the query's words it matched are in that line and none in its own "
        "text — it is likely about something else; check it before acting on every hit of a topic"))
    parts: ScorePartsOut | None = None

    @classmethod
    def of(cls, h: Hit, explain: bool) -> HitOut:
        parts = None
        if explain and h.parts is not None:
            p = h.parts
            parts = ScorePartsOut(rrf=p.rrf, retention=p.retention, activation=p.activation, emotion=p.emotion,
                                  importance=p.importance)
        return cls(memory=MemoryOut.of(h.memory), score=h.score, ranks=dict(h.ranks), via_context=h.via_context,
                   parts=parts)


# -- metadata shapes (issue 26 item 17) --

def _checked_filters(value: Any) -> Any:
    check_filters(value)  # MetadataError (a ValueError): a 400 naming the rule
    return value


def _checked_patch(value: Any) -> Any:
    merged({}, value)  # keys and values within the limits; a None removes a key
    return value


_Scalar = str | int | float | bool
#: A memory's metadata: at most 16 keys ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}`` to a string (≤ 200 chars), number or
#: boolean; ≤ 2 KiB. The schema carries the key pattern (``patterns.metadata_schema``).
MetadataIn = Annotated[dict[str, _Scalar], AfterValidator(check_metadata), WithJsonSchema(patterns.metadata_schema())]
#: A metadata patch: as MetadataIn, and a key set to null is removed.
MetadataPatch = Annotated[dict[str, _Scalar | None], AfterValidator(_checked_patch),
                          WithJsonSchema(patterns.metadata_schema(patch=True))]
#: A metadata filter (``memory.metadata``): ``{key: value}``, ``{key: [values]}`` (any of), ``{key: {"$gte": …}}``
#: (a range), ``{"$or": [filter, …]}``; every key required; JSON types compared exactly.
FiltersIn = Annotated[dict[str, Any], AfterValidator(_checked_filters), WithJsonSchema(patterns.filters_schema())]
MAX_BATCH = 100


class SearchIn(BaseModel):
    """A search: the query (zh/en, ≤ 2,000 chars), at most ``k`` hits, none scoring
    below ``threshold`` (the hits' own ``score``)."""

    query: Said = Field(min_length=1, max_length=2000)
    k: int = Field(default=8, ge=1, le=SEARCH_K_MAX)
    chat: ChatKey | None = Field(default=None, description="disclose as in this chat")
    explain: bool = False
    filters: FiltersIn | None = Field(default=None, description=(
        'only memories whose metadata matches: {"topic": "pets"}, {"topic": ["pets", "food"]} (any of), '
        '{"score": {"$gte": 3, "$lt": 10}} (a range; strings compare as text, so ISO dates as dates), '
        '{"$or": [{"topic": "pets"}, {"pinned": true}]}; every key must match'))
    threshold: float | None = Field(default=None, ge=0, le=10, description=(
        f"the least score a hit may have, on the scale of the hits' score (≥ 0: weighted reciprocal-rank fusion "
        f"with k = {RRF_K} times a rescoring factor in [0.74, 1.15]; a memory ranked first by both words and "
        f"meaning scores about 2/{RRF_K + 1} ≈ 0.33, one ranked first by one channel alone about 0.17); "
        "default: none, the k best"))


class SearchOut(BaseModel):
    subject: str
    query_valence: float
    hits: list[HitOut]


class MessageIn(BaseModel):
    """A chat line: ``role`` user (the person, or with ``sender_id`` someone else
    in a group) or assistant (the bot); ``timestamp`` default now, UTC when naive,
    between 1970 and 2100 as on ``/v1/turns`` (``memory.types.in_era``)."""

    role: Literal["user", "assistant"] = "user"
    text: Said = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    message_id: str | None = Field(default=None, pattern=f"^{ID_RE.pattern}$", max_length=128)
    sender_id: str | None = Field(default=None, pattern=f"^{ID_RE.pattern}$", max_length=128,
                                  description="platform user id of a user line; default: the subject's")
    sender_name: Text | None = Field(default=None, max_length=64)
    timestamp: When | None = None

    def at(self) -> datetime:
        ts = self.timestamp or utcnow()
        return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


class CaptureIn(BaseModel):
    """Messages to learn from. ``infer`` true: the subject's own user lines go
    through the capture path (the tenant's model extractor when it has a model and
    ``extractor`` is ``auto``, else the heuristic one); false: each of them is
    stored verbatim as one memory. With ``chat`` the memories are learned in that
    chat (disclosure) and, unless ``to_tail`` is false (the lines are there
    already, e.g. from a ``record`` recollection), every line also joins that
    chat's tail (assistant lines as the bot's)."""

    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    chat: ChatKey | None = None
    infer: bool = True
    extractor: Literal["auto", "heuristic"] = "auto"
    to_tail: bool = True
    metadata: MetadataIn | None = Field(default=None, description="tags joined to every memory the call stores, "
                                                                  "revises or finds already stored")


class AddOut(BaseModel):
    """What one fact did: stored, deduped, superseded, revised, conflict or
    rejected (``reason``: tombstone, stale, weaker, category…)."""

    action: str
    reason: str = ""
    memory: MemoryOut | None = None


class CaptureOut(BaseModel):
    subject: str
    results: list[AddOut]


class UpdateIn(BaseModel):
    """An edit: a new ``text`` (a new version; the old one stays in history)
    and/or a ``metadata`` patch (in place, no new version; null removes a key)."""

    # the schema says what the validator below refuses: one of the two must be given. Inside an allOf, because
    # a generator (openapi-python-client) reads a top-level anyOf as a union of models and fails on this one
    model_config = ConfigDict(json_schema_extra={"allOf": [{"anyOf": [
        {"required": ["text"], "properties": {"text": {"type": "string"}}},
        {"required": ["metadata"], "properties": {"metadata": {"type": "object"}}}]}]})

    text: Said | None = Field(default=None, min_length=1, max_length=MAX_EDIT_CHARS)
    metadata: MetadataPatch | None = None

    @model_validator(mode="after")
    def _something(self) -> UpdateIn:
        if self.text is None and self.metadata is None:
            raise ValueError("give a text, a metadata patch or both")
        return self


class BatchUpdateItem(UpdateIn):
    id: str = Field(pattern=f"^{ID_RE.pattern}$", max_length=128)


class BatchUpdateIn(BaseModel):
    """At most 100 edits, each id once."""

    items: list[BatchUpdateItem] = Field(min_length=1, max_length=MAX_BATCH)

    @model_validator(mode="after")
    def _distinct(self) -> BatchUpdateIn:
        if len({i.id for i in self.items}) != len(self.items):
            raise ValueError("each id at most once in a batch")
        return self


class BatchForgetIn(BaseModel):
    """At most 100 ids to forget (repeats count once)."""

    ids: list[Annotated[str, Field(pattern=f"^{ID_RE.pattern}$", max_length=128)]] = Field(
        min_length=1, max_length=MAX_BATCH)


class BatchItemOut(BaseModel):
    """One item of a batch: ``updated`` / ``forgotten``, ``not_found`` (no such
    memory of this person: nothing was done) or ``conflict`` (an edit's text is
    what another memory holds: nothing was done), with the live memory after an update."""

    id: str
    status: Literal["updated", "forgotten", "not_found", "conflict"]
    memory: MemoryOut | None = None


class ReceiptOut(BaseModel):
    """What a forget purged, counted from what each step deleted
    (``memory.types.ForgetReceipt``): the memories and their older versions,
    index rows, cache entries and their BM25 postings, chat-log lines (the
    person's lines it was learned from, the companion's lines retelling it),
    contexts of other memories that retold it, consolidated memories derived
    from it, association links, conflict links, ``memory.forgotten`` change
    events queued to ``receivers`` webhooks, and the tombstones that keep it
    from being learned again from evidence older than the forget."""

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
    def of(cls, receipt: ForgetReceipt) -> ReceiptOut:
        return cls(**{f: getattr(receipt, f) for f in FORGET_RECEIPT_FIELDS})


class BatchOut(BaseModel):
    """Per-item results; for a batch forget, ``receipt`` sums what the forgotten items purged."""

    subject: str
    results: list[BatchItemOut]
    receipt: ReceiptOut | None = None


class ForgetScopeOut(BaseModel):
    """What an admin's forget of a scope did: the person, the group (None: everything), how many memories
    went and the receipt of what was purged."""

    subject: str
    chat: str | None
    forgotten: int
    receipt: ReceiptOut


class ForgetOut(BaseModel):
    """The memory forgotten and the receipt of what was purged with it."""

    id: str
    forgotten: bool
    receipt: ReceiptOut


class HistoryOut(BaseModel):
    """Versions, oldest first, the live one last (in a group: only those said there)."""

    id: str
    versions: list[MemoryOut]


class ForgetSubjectOut(BaseModel):
    """The person forgotten, how many memories went and the receipt of what was purged."""

    subject: str
    forgotten: int
    receipt: ReceiptOut


class ExportedVersion(BaseModel):
    version: int
    text: Said = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    category: Category
    origin: ChatKey | None = None
    visibility: Visibility = Visibility.PRIVATE
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class ExportedMemory(BaseModel):
    id: str = Field(max_length=128)
    text: Said = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    category: Category = Category.OTHER
    key: Text = Field(default="", max_length=KEY_CHARS)
    importance: float = Field(default=0.5, ge=0, le=1)
    valence: float = Field(default=0.0, ge=-1, le=1)
    arousal: float = Field(default=0.0, ge=0, le=1)
    emotion: Text = Field(default="neutral", max_length=32)
    origin: ChatKey | None = None
    visibility: Visibility = Visibility.PRIVATE
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None
    valid_from: datetime | None = None
    event_time: datetime | None = None
    recalled_at: list[datetime | None] = Field(default_factory=list)
    context: str = Field(default="", max_length=4 * CONTEXT_CHARS)
    metadata: MetadataIn = Field(default_factory=dict)
    history: list[ExportedVersion] = Field(default_factory=list, max_length=200)


class ExportDoc(BaseModel):
    """``huiyi.memories.v1``: what ``/memory export`` sends and import reads."""

    model_config = ConfigDict(extra="ignore")

    format: Literal["huiyi.memories.v1"] = "huiyi.memories.v1"
    tenant: str = ""
    subject: str = ""
    identities: list[str] = Field(default_factory=list)
    exported_at: datetime | None = None
    memories: list[ExportedMemory] = Field(default_factory=list, max_length=MAX_IMPORT)


class ImportedOut(BaseModel):
    source_id: str
    action: str
    reason: str = ""
    memory_id: str | None = None


class ImportOut(BaseModel):
    subject: str
    results: list[ImportedOut]


class PromptMessage(BaseModel):
    role: str
    content: str


class RecollectIn(BaseModel):
    """The conversation the bot is about to answer: ``tail`` (oldest first, the
    subject's message last) or, when empty, the stored tail of ``chat``; ``query``
    adds a line to recall with. ``record`` (needs ``chat`` and ``tail``): the
    tail's lines join the chat's stored tail first, as a turn logs the person's
    message, and the prompt is built from the stored tail (earlier lines and the
    bot's recorded replies included)."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"anyOf": [{"required": ["tail"], "properties": {"tail": {"minItems": 1}}},
                   {"required": ["query"], "properties": {"query": {"type": "string", "pattern": patterns.SAID}}},
                   {"required": ["chat"], "properties": {"chat": {"type": "string"}}}]},
        {"anyOf": [{"not": {"required": ["record"]}}, {"properties": {"record": {"const": False}}},
                   {"required": ["tail", "chat"], "properties": {"tail": {"minItems": 1}, "chat": {"type": "string"}}}]}]})

    chat: ChatKey | None = None
    tail: list[MessageIn] = Field(default_factory=list, max_length=MAX_MESSAGES)
    query: Text | None = Field(default=None, max_length=2000)
    person_name: Text | None = Field(default=None, max_length=64)
    record: bool = False

    @model_validator(mode="after")
    def _something(self) -> RecollectIn:
        if not self.tail and not self.query and not self.chat:
            raise ValueError("give a tail, a query or a chat")
        if self.record and not (self.tail and self.chat):
            raise ValueError("record needs a chat and the tail to put into it")
        return self


class RecollectOut(BaseModel):
    """The recollection (prompt text without citation markers, "" when nothing
    was recalled), the memory ids it draws on, why the template was used (None:
    the reconstruction was accepted), the hits, and the prompt the gateway would
    send: ``[system persona + recollection block, *tail]``."""

    recollection: str
    sources: list[str]
    fallback_reason: str | None
    mode: str
    hits: list[HitOut]
    prompt: list[PromptMessage]


class ReplyIn(BaseModel):
    """The bot's own reply (made by the caller's model) to the subject."""

    text: Said = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    chat: ChatKey | None = Field(default=None, description="default: the subject's private chat")
    message_id: str | None = Field(default=None, pattern=f"^{ID_RE.pattern}$", max_length=128)
    timestamp: When | None = None


class ReplyOut(BaseModel):
    chat: str
    recorded: bool


_ID_PATTERN = {"pattern": f"^{ID_RE.pattern}$"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class TurnMessage(InboundMessage):
    """``bridges.contract.InboundMessage`` as ``/v1/turns`` takes it: ``timestamp``
    defaults to now (UTC), and the schema spells out what the pipeline checks —
    ids within their patterns, a ``sender_id`` naming one person (no placeholder,
    no shared anonymous sender: ``patterns``)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, json_schema_extra=patterns.not_shared_sender())

    platform: str = Field(json_schema_extra={"pattern": patterns.PLATFORM})
    message_id: str = Field(json_schema_extra={"pattern": patterns.PLAIN_ID})
    sender_id: str = Field(json_schema_extra={"pattern": patterns.PERSON_ID})
    chat_id: str = Field(json_schema_extra=_ID_PATTERN)
    thread_id: str | None = Field(default=None, json_schema_extra=_ID_PATTERN)
    timestamp: When = Field(default_factory=_now,
                                description="ISO 8601 between 1970 and 2100, UTC when naive; default: now")
    text: Annotated[str, AfterValidator(said_text)] = Field(
        min_length=1, json_schema_extra={"pattern": r"\S"},
        description="the person's line: at least one character besides whitespace")


class TurnRequest(BaseModel):
    """Body of ``POST /v1/turns``: one platform-neutral message (``timestamp``
    defaults to now, UTC), the tenant (default the key's), and whether to
    capture after answering (``captured`` is then empty, ``capture_pending`` true)."""

    tenant: str | None = Field(default=None, pattern=f"^{TENANT_RE.pattern}$", max_length=63)
    message: TurnMessage
    background_capture: bool = False


class WithdrawnMessage(Withdrawal):
    """``bridges.contract.Withdrawal`` with the id patterns it is checked against in the schema."""

    model_config = ConfigDict(frozen=True, json_schema_extra=patterns.not_shared_sender())

    platform: str = Field(json_schema_extra={"pattern": patterns.PLATFORM})
    message_id: str = Field(json_schema_extra={"pattern": patterns.PLAIN_ID})
    sender_id: str = Field(json_schema_extra={"pattern": patterns.PERSON_ID})
    chat_id: str = Field(json_schema_extra=_ID_PATTERN)


class WithdrawalRequest(BaseModel):
    """Body of ``POST /v1/withdrawals``: a person withdrew (recalled) one of their
    messages (``bridges.contract.Withdrawal``: OneBot's ``friend_recall`` /
    ``group_recall``), and the tenant (default the key's)."""

    tenant: str | None = Field(default=None, pattern=f"^{TENANT_RE.pattern}$", max_length=63)
    withdrawal: WithdrawnMessage


class WithdrawalOut(BaseModel):
    """The author's namespace and the memory ids the withdrawal retracted."""

    namespace: str
    retracted: list[str]


class TurnOut(BaseModel):
    """What the turn did (``bridges.contract.TurnResult``)."""

    tenant: str
    namespace: str
    chat: str
    message_id: str
    addressed: bool
    duplicate: bool
    command: bool
    recalled: list[str]
    recollection: str
    fallback_reason: str | None
    prompt: list[PromptMessage]
    reply: str | None
    captured: list[str]
    capture_pending: bool
    attachment: dict[str, Any] | None
    latency_ms: dict[str, float]
    #: the speaker had this chat off the record (``/memory pause``): nothing captured, the line not kept
    paused: bool = False
    #: the turn's id, as in its audit record: ``?turn=`` of ``GET …/memories/{id}/why``
    turn: str = ""


# -- routes -----------------------------------------------------------------------


@router.post("/turns", response_model=TurnOut, summary="one message through the whole pipeline")
async def turns(body: TurnRequest, request: Request) -> TurnOut:
    """Recall, recollection, prompt and (with a model) the reply, then capture. A
    ``/memory`` command runs as the sender; its admin powers need an admin key.
    A member key runs only its own person's private turns: a group turn reads and
    writes the group's stored tail, other people's lines (403)."""
    ctx = await _ctx(request, body.tenant)
    msg = body.message
    msg.chat  # validates ids against their patterns (NamespaceError: 400)
    sender = platform_subject(msg.platform, msg.sender_id)
    await _ns(ctx, sender)  # a member key: its own messages only
    # a turn reads its chat's stored tail into the prompt and writes into it: in a group
    # (other people's lines) only with an admin key, as on the memory API's routes
    _person_chat(sender, msg.chat, ctx.caller, writing_tail=True)
    result = await ctx.pipeline.handle(ctx.tenant, msg, background_capture=body.background_capture,
                                       privileged=ctx.caller.admin)
    return TurnOut.model_validate(result.to_json())


@router.post("/withdrawals", response_model=WithdrawalOut, summary="a person withdrew a message")
async def withdrawals(body: WithdrawalRequest, request: Request) -> WithdrawalOut:
    """The message's chat-log line is redacted (a message that arrives after its
    withdrawal is neither logged nor captured), a capture still due on it never
    runs, and every memory it taught is retracted (``gateway.withdrawals``).
    Idempotent. A member key withdraws only its own person's messages."""
    ctx = await _ctx(request, body.tenant)
    w = body.withdrawal
    w.chat  # validates ids against their patterns (NamespaceError: 400)
    ns = await _ns(ctx, platform_subject(w.platform, w.sender_id))
    retracted = await ctx.pipeline.withdraw(ctx.tenant, w)
    return WithdrawalOut(namespace=str(ns), retracted=retracted)


def _marked(core, ns: Namespace, read, *args, **kwargs):
    """``read(*args, **kwargs)`` once the recall marks this process holds for ``ns`` are
    written (``MemoryCore.flush_marks``): a listing right after a turn gives that
    turn's recall in ``recalled_at``, as ``/memory list`` says 「上次想起：今天」."""
    core.flush_marks(ns=ns)
    return read(*args, **kwargs)


def _memories(core, ns: Namespace, chat: ChatRef | None, limit: int, offset: int) -> tuple[int, list[Memory]]:
    if chat is not None and chat.is_group:
        return (core.store.count_in_group(ns, chat.group_key),
                core.store.list_in_group(ns, chat.group_key, limit=limit, offset=offset))
    return core.store.count(ns), core.list(ns, limit=limit, offset=offset)


def _filters_query(text: str | None) -> dict | None:
    """The ``filters`` query parameter: a JSON object (``FiltersIn``), else BadPayload
    (not JSON, or nested deeper than ``memory.types.JSON_MAX_DEPTH``: ``load_json``)."""
    from memory.types import load_json

    if text is None:
        return None
    try:
        value = load_json(text)
    except ValueError:
        raise BadPayload("filters must be a JSON object, e.g. {\"topic\": \"pets\"}") from None
    check_filters(value)  # MetadataError: 400
    return value


@router.get("/subjects/{subject}/memories", response_model=MemoryPage, summary="list memories, newest first")
async def list_memories(ctx: Ctx, subject: SubjectPath, chat: ChatQuery = None,
                        limit: Annotated[int, Query(ge=1, le=200)] = 50,
                        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
                        filters: Annotated[str | None, Query(
                            max_length=4096, description='a metadata filter, a JSON object: {"topic": "pets"}, '
                                                         '{"topic": ["pets", "food"]}, {"score": {"$gte": 3}}, '
                                                         '{"$or": [{"topic": "pets"}, {"pinned": true}]}; '
                                                         'every key must match')] = None,
                        ) -> MemoryPage:
    """``total`` counts what ``chat`` may see and ``filters`` lets through."""
    ns = await _ns(ctx, subject)
    where = _chat(chat)
    wanted = _filters_query(filters)
    if wanted:
        total, items = await asyncio.to_thread(_marked, ctx.core, ns, ctx.core.find, ns, wanted, chat=where,
                                               limit=limit, offset=offset)
    else:
        total, items = await asyncio.to_thread(_marked, ctx.core, ns, _memories, ctx.core, ns, where, limit, offset)
    return MemoryPage(subject=ns.subject, total=total, limit=limit, offset=offset,
                      items=[MemoryOut.of(m) for m in items])


@router.post("/subjects/{subject}/search", response_model=SearchOut, summary="search with scores")
async def search(ctx: Ctx, subject: SubjectPath, body: SearchIn) -> SearchOut:
    """Hybrid recall (words + meaning, RRF, decay, emotion) of ``query``; with a
    group ``chat`` only what was learned there; with ``filters`` only memories
    whose metadata matches; with ``threshold`` none scoring below it."""
    from memory.emotion import analyse
    from memory.recall import RecallParams

    ns = await _ns(ctx, subject)
    where = _chat(body.chat)
    valence = analyse(body.query).valence
    hits = await asyncio.to_thread(ctx.core.recall, ns, [body.query], chat=where, params=RecallParams(k=body.k),
                                   query_valence=valence, filters=body.filters, tz=ctx.t.tz)
    if body.threshold is not None:  # a floor only drops hits: the rest keep their order and scores
        hits = [h for h in hits if h.score >= body.threshold]
    return SearchOut(subject=ns.subject, query_valence=valence, hits=[HitOut.of(h, body.explain) for h in hits])


async def _visible(ctx: _Ctx, ns: Namespace, memory_id: str, chat: ChatRef | None) -> Memory:
    m = await asyncio.to_thread(_marked, ctx.core, ns, ctx.core.get, ns, memory_id)
    if not visible_in(m, chat):
        raise NotFoundError(f"no memory {memory_id} that may be shown in {chat.key}")
    return m


@router.get("/subjects/{subject}/memories/{memory_id}", response_model=MemoryOut, summary="one memory")
async def get_memory(ctx: Ctx, subject: SubjectPath, memory_id: MemoryIdPath, chat: ChatQuery = None) -> MemoryOut:
    ns = await _ns(ctx, subject)
    return MemoryOut.of(await _visible(ctx, ns, memory_id, _chat(chat)))


class WhyOut(BaseModel):
    """Why a memory was or was not recalled in the person's last turn
    (``memory.explain.explain``, the one decision the chat and the console
    answer from): ``verdict`` the stage — ``recalled``, ``below_cutoff`` (cut
    at rank k: ``rank``, ``k``, ``score``, ``cutoff``), ``hidden_in_chat`` (not
    disclosed in that chat), ``dormant``, ``decayed`` (``retention``),
    ``not_ranked`` (below the relevance floor), ``newer``, ``no_trace`` or
    ``forgotten``; ``text`` in plain words in ``lang`` (an admin key also gets
    the stage's own term and numbers in parentheses); ``at`` and ``chat``: the
    turn (None when there was none, or it is not shown in the chat asked for),
    ``turn`` its id when one was asked for. Below the relevance floor,
    ``channel`` (``vector``: a cosine, ``bm25``: a word score, ``standout``:
    near enough but not standing out), ``score`` there and the ``floor`` it
    missed, when it was among the best few that floor dropped (else ``floors``
    alone: every floor of that recall)."""

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
    floors: dict[str, float] | None = None


@router.get("/subjects/{subject}/memories/{memory_id}/why", response_model=WhyOut,
            summary="why a memory was or was not recalled")
async def why_memory(ctx: Ctx, subject: SubjectPath, memory_id: MemoryIdPath, chat: ChatQuery = None,
                     turn: Annotated[str, Query(pattern=r"^(last|[0-9a-f]{16})$", description=(
                         "the turn asked about: ``last`` (the person's last turn) or a turn id from the "
                         "audit (``turn`` of a /v1/turns answer or of an audit record), within the days "
                         "the console shows"))] = "last",
                     lang: Annotated[Literal["zh_CN", "en"] | None, Query(
                         description="the language of ``text`` (default: the tenant's)")] = None) -> WhyOut:
    """The stage of the person's last recall (or of the audited turn ``turn``)
    that dropped (or kept) the memory. In a group ``chat`` only a memory shown
    there, and a turn of that group, are told (404 / ``no_trace`` otherwise). A
    forgotten id answers ``forgotten``; an id never held by this person is 404;
    a turn id that is not one of this person's audited turns (unknown, older than
    the days kept, another person's) is 404, a malformed one 400; a ``chat`` that
    is not the subject's (another platform, someone else's private chat) is 409.
    ``text`` names the turn's time in the tenant's zone, and a turn asked by its id
    as "that turn" (it need not be the last)."""
    from gateway.commands import why_not_text, zoned_time
    from gateway.observability import find_turn, trace_of_record
    from memory.explain import Why, explain, trace_visible_in

    ns = await _ns(ctx, subject)
    where = _person_chat(subject, _chat(chat), ctx.caller, writing_tail=False)  # not theirs: 409, as pause does
    language = lang or ctx.t.language
    admin = ctx.caller.admin
    settings = ctx.pipeline.settings

    def asked():
        if turn == "last":
            trace = ctx.core.store.last_recall(ns)
            return trace if trace is not None and trace_visible_in(trace, where) else None
        today = utcnow().date()
        days = [today - timedelta(days=i) for i in range(max(1, settings.console.turn_days))]
        record = find_turn(settings.data_dir, ctx.tenant, turn, days)
        if record is None or record.get("namespace") != str(ns):  # another person's turn is no turn of theirs
            raise NotFoundError(f"no turn {turn} of {ns.subject} in the audit of the last {len(days)} days")
        trace = trace_of_record(record)
        if not trace_visible_in(trace, where):
            raise NotFoundError(f"turn {turn} was not in {where.key}")
        return trace

    def run() -> WhyOut:
        trace = asked()
        try:
            m = ctx.core.get(ns, memory_id)
        except NotFoundError:
            if not ctx.core.store.was_forgotten(ns, memory_id):
                raise
            return WhyOut(id=memory_id, verdict="forgotten", lang=language,
                          text=why_not_text(language, Why.forgotten(trace), memory_id, admin=admin))
        if not visible_in(m, where):
            raise NotFoundError(f"no memory {memory_id} that may be shown in {where.key}")
        row = ctx.core.store.consolidated(ns, [m.id]).get(m.id)
        why = explain(trace, m, dormant=row is not None and row.dormant)
        e, tr, miss = why.entry, why.trace, why.miss
        return WhyOut(id=m.id, verdict=why.verdict, lang=language,
                      text=why_not_text(language, why, m.id, admin=admin, that_turn=turn != "last",
                                        when=zoned_time(ctx.t.tz, tr.at) if tr else "-"),
                      at=tr.at if tr else None, chat=tr.chat if tr else None, turn=None if turn == "last" else turn,
                      rank=e.position if e else None, k=tr.k if tr else None,
                      score=e.score if e else miss.score if miss else None, cutoff=tr.cutoff if tr else None,
                      retention=why.parts.retention if why.parts is not None else None,
                      channel=miss.channel if miss else None, floor=miss.floor if miss else None,
                      floors=dict(tr.floors) if tr is not None and tr.floors else None)

    return await asyncio.to_thread(run)


def _retext(ctx: _Ctx):
    """How an edit's new text is written: ``memory.capture.edit`` (category and key read from it) in the tenant's zone."""
    from memory.capture import edit

    actor, tz = ctx.caller.actor, ctx.t.tz
    return lambda core, ns, memory_id, text: edit(core, ns, memory_id, text, actor=actor, tz=tz)


@router.patch("/subjects/{subject}/memories/{memory_id}", response_model=MemoryOut, summary="edit a memory")
async def update_memory(ctx: Ctx, subject: SubjectPath, memory_id: MemoryIdPath, body: UpdateIn) -> MemoryOut:
    """A new version with ``text`` (the old one stays in its history, audited
    ``edit``; its category and key are read from the new text, ``memory.capture.edit``;
    409 when another memory already holds what it says, KeyTakenError, nothing
    written) and/or a ``metadata`` patch (in place, audited ``metadata``)."""
    ns = await _ns(ctx, subject)
    live = await asyncio.to_thread(ctx.core.edit, ns, memory_id, text=body.text, metadata=body.metadata,
                                   actor=ctx.caller.actor, retext=_retext(ctx))
    return MemoryOut.of(live)


@router.delete("/subjects/{subject}/memories/{memory_id}", response_model=ForgetOut, summary="forget a memory")
async def forget_memory(ctx: Ctx, subject: SubjectPath, memory_id: MemoryIdPath) -> ForgetOut:
    """Forgotten for good: SQL, chat log and index purged, and a tombstone keeps it
    from being learned again from older messages."""
    ns = await _ns(ctx, subject)
    receipt = await asyncio.to_thread(ctx.core.forget, ns, memory_id, actor=ctx.caller.actor)
    return ForgetOut(id=memory_id, forgotten=True, receipt=ReceiptOut.of(receipt))


# -- batches and scoped forgets (issue 26 item 17) ---------------------------------


@router.post("/subjects/{subject}/memories/batch-update", response_model=BatchOut, summary="edit many memories")
async def batch_update(ctx: Ctx, subject: SubjectPath, body: BatchUpdateIn) -> BatchOut:
    """Each item as ``PATCH …/memories/{id}``, answered per item: ``updated`` with
    the live memory, ``not_found`` when this person has no such memory (another
    person's id included: it is never touched), or ``conflict`` when its new text
    is what another memory already holds (that item unchanged). The body is checked whole before
    anything is written (a bad item: 400, nothing changed); the items are then
    applied in order, each on its own — not one transaction."""
    ns = await _ns(ctx, subject)
    done = await asyncio.to_thread(ctx.core.edit_many, ns, [(i.id, i.text, i.metadata) for i in body.items],
                                   actor=ctx.caller.actor, retext=_retext(ctx))
    return BatchOut(subject=ns.subject, results=[
        BatchItemOut(id=i, status=status, memory=MemoryOut.of(m) if m is not None else None)
        for i, (status, m) in done.items()])


@router.post("/subjects/{subject}/memories/batch-forget", response_model=BatchOut, summary="forget many memories")
async def batch_forget(ctx: Ctx, subject: SubjectPath, body: BatchForgetIn) -> BatchOut:
    """Each id forgotten as ``DELETE …/memories/{id}`` (tombstoned, purged once for
    the batch), answered per item: ``forgotten`` or ``not_found`` (no such memory
    of this person — another person's id is never touched)."""
    ns = await _ns(ctx, subject)
    done = await asyncio.to_thread(ctx.core.forget_many, ns, body.ids, actor=ctx.caller.actor)
    total = sum((r for r in done.values() if r is not None), ForgetReceipt())
    return BatchOut(subject=ns.subject, receipt=ReceiptOut.of(total),
                    results=[BatchItemOut(id=i, status="forgotten" if r is not None else "not_found")
                             for i, r in done.items()])


class ForgetLastIn(BaseModel):
    """Take back what the subject said in ``chat`` (a chat key; a group's covers
    all its topics) in the last ``duration`` ("10m", "2h", "30分钟"; at most 30
    days), as ``/memory forget last 10m`` said there."""

    model_config = ConfigDict(extra="forbid")

    chat: str = Field(max_length=300, json_schema_extra={"pattern": patterns.CHAT_KEY})
    duration: str = Field(min_length=1, max_length=40)


class ForgetLastOut(BaseModel):
    """What was taken back: the memories retracted (``ids``) from ``since`` (ISO
    8601 UTC) in ``chat``, how many of the subject's lines and of the companion's
    lines (a private chat's) left the chat log, and the receipt of what was purged
    (no tombstones: said again later, it is learned again)."""

    subject: str
    chat: str
    since: datetime
    ids: list[str]
    lines: int
    bot_lines: int
    receipt: ReceiptOut


@router.post("/subjects/{subject}/memories/forget-last", response_model=ForgetLastOut,
             summary="take back the last minutes said in a chat")
async def forget_last(ctx: Ctx, subject: SubjectPath, body: ForgetLastIn) -> ForgetLastOut:
    """As ``/memory forget last <duration>`` in that chat: each line the subject
    said there since then is withdrawn (a capture still due on it never runs)
    with every memory it taught, and every other memory of theirs learned or
    changed in that chat since then; in a private chat the companion's lines of
    that time go too. The subject must be a platform id (``tg:42``) and the
    chat one where they speak (their own private chat, or a group): else 409. A
    duration that names no time, or more than 30 days: 400, nothing changed."""
    from gateway.commands import pause_key
    from gateway.withdrawals import withdraw_since

    ns = await _ns(ctx, subject)
    where = _person_chat(subject, _chat(body.chat), ctx.caller, writing_tail=False)
    span = _span(body.duration)
    since = utcnow() - span
    done = await asyncio.to_thread(withdraw_since, ctx.core, ns, [Namespace(ns.tenant, subject)], pause_key(where),
                                   since, actor=ctx.caller.actor, private=not where.is_group,
                                   seconds=int(span.total_seconds()))
    return ForgetLastOut(subject=ns.subject, chat=pause_key(where), since=since, ids=list(done.ids),
                         lines=done.lines, bot_lines=done.bot_lines, receipt=ReceiptOut.of(done.receipt))


@router.delete("/subjects/{subject}/memories", response_model=ForgetScopeOut,
               summary="admin: forget a person's memories, or those of one group")
async def forget_scope(ctx: Ctx, subject: SubjectPath,
                       confirm: Annotated[str | None, Query(
                           max_length=145, description="required: the subject again, as in the path",
                           json_schema_extra={"pattern": patterns.SUBJECT})] = None,
                       chat: Annotated[str | None, Query(
                           max_length=300, description="a group chat: only what the person said there",
                           json_schema_extra={"pattern": patterns.CHAT_KEY})] = None,
                       ) -> ForgetScopeOut:
    """An admin key only (403 otherwise); ``confirm`` must repeat ``{subject}``
    (400 otherwise: nothing is forgotten). Without ``chat`` as ``DELETE
    /v1/subjects/{subject}``; with a group ``chat`` only the memories learned in
    that group (any topic) and the person's lines there, with a tombstone of the
    group so that nothing they said there before now is learned again."""
    from memory.admin import Authority
    from memory.admin import forget_scope as forget_in

    ns = await _ns(ctx, subject)  # a member key on another person: 403, audited
    if not ctx.caller.admin:
        raise Forbidden("only an admin key forgets a person's memories by scope")
    if confirm != subject:
        raise BadPayload("confirm must repeat the subject of the path")
    where = _person_chat(subject, _chat(chat), ctx.caller, writing_tail=False)
    if where is not None and not where.is_group:
        raise BadPayload("chat names a group; a private chat is the person's whole view: leave chat out")
    receipt = await asyncio.to_thread(forget_in, ctx.core, ns, Authority(actor=ctx.caller.actor, tenant=ctx.tenant),
                                      where.group_key if where is not None else None)
    return ForgetScopeOut(subject=ns.subject, chat=where.group_key if where is not None else None,
                          forgotten=receipt.memories, receipt=ReceiptOut.of(receipt))


@router.get("/subjects/{subject}/memories/{memory_id}/history", response_model=HistoryOut,
            summary="every version of a memory")
async def memory_history(ctx: Ctx, subject: SubjectPath, memory_id: MemoryIdPath,
                         chat: ChatQuery = None) -> HistoryOut:
    ns = await _ns(ctx, subject)
    where = _chat(chat)
    await _visible(ctx, ns, memory_id, where)
    versions = await asyncio.to_thread(ctx.core.history, ns, memory_id)
    return HistoryOut(id=memory_id, versions=[MemoryOut.of(v) for v in versions if visible_in(v, where)])


@router.delete("/subjects/{subject}", response_model=ForgetSubjectOut, summary="forget everything of a person")
async def forget_subject(ctx: Ctx, subject: SubjectPath) -> ForgetSubjectOut:
    """Every memory (tombstoned), every chat-log line they said in the tenant, and
    a subject-wide tombstone so that nothing said before now comes back."""
    from memory.admin import Authority
    from memory.admin import forget_subject as forget_all

    ns = await _ns(ctx, subject)
    receipt = await asyncio.to_thread(forget_all, ctx.core, ns, Authority(actor=ctx.caller.actor, tenant=ctx.tenant))
    return ForgetSubjectOut(subject=ns.subject, forgotten=receipt.memories, receipt=ReceiptOut.of(receipt))


@router.get("/subjects/{subject}/export", response_model=ExportDoc, summary="export a person's memories")
async def export(ctx: Ctx, subject: SubjectPath, chat: ChatQuery = None) -> ExportDoc:
    """Every live memory with its history; with a group ``chat`` only what that
    group may see (DESIGN rule 6, as every other read): memories learned there,
    and of each only the versions said there."""
    ns = await _ns(ctx, subject)
    where = _chat(chat)

    def run() -> dict:
        doc = _marked(ctx.core, ns, export_document, ctx.core, ns, where, utcnow())
        ctx.core.store.audit(ns, "export", ctx.caller.actor, count=len(doc["memories"]),
                             chat=where.key if where is not None else "api")
        return doc

    return ExportDoc.model_validate(await asyncio.to_thread(run))


def _import(core, ns: Namespace, doc: ExportDoc, actor: str) -> list[ImportedOut]:
    """Each memory of ``doc`` into ``ns``: its earlier versions first, then the live
    text, under one key (so they chain as versions; the core's write rules apply:
    tombstones refuse what was forgotten, restating dedupes); then no context of
    ``ns`` may retell a text the tombstones refused (``MemoryCore.drop_retelling_contexts``).
    Every step takes the live memory's category: an edit re-derives a memory's
    category from its new text, and a key whose category changes between steps
    would be judged a conflict instead of a new version."""
    for m in doc.memories:  # every origin checked before anything is written: a bad document writes nothing
        for where in [m.origin, *(v.origin for v in m.history)]:
            if where:
                ChatRef.parse(where)
    out, refused = [], []
    for m in doc.memories:
        origin = ChatRef.parse(m.origin) if m.origin else None
        key = m.key or f"{m.category.value}:import:{m.id}"[:KEY_CHARS]
        steps = [(v.text, v.category, v.valid_from, ChatRef.parse(v.origin) if v.origin else None, v.visibility)
                 for v in m.history]
        steps.append((m.text, m.category, m.valid_from or m.created_at, origin, m.visibility))
        result = None
        for n, (text, _category, at, where, vis) in enumerate(steps, start=1):
            said = (at or utcnow()) if (at is None or at.tzinfo) else at.replace(tzinfo=timezone.utc)
            memory = core.new(ns, text, category=m.category, key=key, importance=m.importance, valence=m.valence,
                              arousal=m.arousal, emotion=m.emotion, origin=where, visibility=vis,
                              event_time=m.event_time, context=m.context if n == len(steps) else "",
                              metadata=m.metadata if n == len(steps) else {})
            result = core.add(ns, memory, said_at=said, actor=actor, evidence=text)
            if result.action == "rejected" and result.reason == "tombstone":
                refused.append(text)
        out.append(ImportedOut(source_id=m.id, action=result.action, reason=result.reason,
                               memory_id=result.memory.id if result.memory else None))
    if refused:  # a context the document brought back must not retell what stays forgotten
        core.drop_retelling_contexts(ns, refused)
    return out


@router.post("/subjects/{subject}/import", response_model=ImportOut, summary="import a huiyi.memories.v1 document")
async def import_memories(ctx: Ctx, subject: SubjectPath, body: ExportDoc) -> ImportOut:
    """Adds each memory of the document (any tenant or subject's) to this person."""
    ns = await _ns(ctx, subject)
    results = await asyncio.to_thread(_import, ctx.core, ns, body, ctx.caller.actor)
    return ImportOut(subject=ns.subject, results=results)


class SourceImportIn(BaseModel):
    """Body of ``POST /v1/imports``: one file of another bot (``gateway.importers``:
    ``source`` as ``huiyi import --from``) as ``content`` (its text) or ``content_base64``
    (its bytes: a MaiBot database, a character card PNG), and whose it is: ``person``
    (every record, e.g. ``tg:1001``; a file of several people's ids is refused) or
    ``mapping`` (the source's person id → subject; an admin key only). With a member
    key, no ``person`` means the key's own person."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"oneOf": [{"required": ["content"]}, {"required": ["content_base64"]}]},
        {"not": {"required": ["person", "mapping"]}}]})

    source: Literal["sillytavern", "mem0", "livingmemory", "maibot", "jsonl"]
    content: str | None = Field(default=None, max_length=1 << 20)
    content_base64: str | None = Field(default=None, max_length=1 << 20)
    person: str | None = Field(default=None, pattern=f"^{SUBJECT_RE.pattern}$", max_length=145,
                               json_schema_extra={"pattern": patterns.SUBJECT})
    mapping: dict[Annotated[str, Field(max_length=200)],
                  Annotated[str, Field(pattern=f"^{SUBJECT_RE.pattern}$", max_length=145)]] | None = \
        Field(default=None, max_length=10_000)

    @model_validator(mode="after")
    def _one_each(self) -> SourceImportIn:
        if self.content is None and self.content_base64 is None:
            raise ValueError("give the file as content or content_base64")
        if self.content is not None and self.content_base64 is not None:
            raise ValueError("give the file as content or as content_base64, not both")
        if self.person is not None and self.mapping is not None:
            raise ValueError("name the person (person) or map the source's ids (mapping), not both")
        return self


class ImportProblemOut(BaseModel):
    """A line or entry not imported for a fault of its own: its 1-based ``line``
    (a MaiBot row's rowid), the ``reason`` (``malformed`` or ``error``) and what was wrong."""

    line: int
    reason: str
    detail: str


class SourceImportOut(BaseModel):
    """What ``POST /v1/imports`` did (``gateway.importers.Summary``): records ``read``,
    records that stored a memory (``imported``), ``memories`` stored, ``skipped`` by
    reason (``malformed``, ``empty``, ``disabled``, ``not_the_person``, ``system``,
    ``unmapped``, ``forgotten``, ``already``, ``no_fact``, ``refused``, ``error``) and
    each malformed or failed line with its number."""

    source: str
    read: int
    imported: int
    memories: int
    skipped: dict[str, int]
    problems: list[ImportProblemOut]


@router.post("/imports", response_model=SourceImportOut, summary="import another bot's memories")
async def import_source(ctx: Ctx, body: SourceImportIn) -> SourceImportOut:
    """The importers of ``huiyi import --from …`` over a file sent in the body (1 MiB at
    most): each record through the capture path at its own time, in the tenant's zone;
    tombstones honoured (nothing forgotten comes back); idempotent (a record imported
    once is skipped as ``already``); a malformed line reported with its number and
    skipped. A member key imports only into its own person (``person``, which it may
    leave out; a ``mapping`` is 403); a file that is not the source at all, or one
    holding several people's ids for one ``person``, is 400 with nothing written."""
    import base64
    import binascii

    from gateway.importers import SourceError, import_records, records_of

    if body.mapping is not None and not ctx.caller.admin:
        raise Forbidden("only an admin key maps a file's people (a member key names its own person)")
    named = body.person if body.person is not None or body.mapping is not None else ctx.caller.subject
    if named is None and body.mapping is None:
        raise BadPayload("name the person (person) or map the source's ids (mapping)")
    if body.content is not None:
        data = body.content.encode("utf-8")
    else:
        try:
            data = base64.b64decode(body.content_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise BadPayload("content_base64 is not base64") from None
    tz = ctx.t.tz

    def run() -> SourceImportOut:
        person = ctx.caller.namespace(ctx.core.store, ctx.tenant, named).subject if named else None
        mapping = None
        if body.mapping is not None:  # each subject as the API resolves it (linked identities followed)
            mapping = {k: resolve_subject(ctx.core.store, ctx.tenant, v).subject for k, v in body.mapping.items()}
        try:
            records = records_of(body.source, data, tz)
            summary = import_records(ctx.core, ctx.tenant, records, source=body.source, person=person,
                                     mapping=mapping, tz=tz)
        except SourceError as exc:  # ManyOwners too: refused before anything is written
            raise BadPayload(f"cannot import this {body.source} file: {exc}") from None
        log.info("/v1 import %s into %s by %s: %d read, %d memories", body.source, ctx.tenant, ctx.caller.actor,
                 summary.read, summary.memories)
        return SourceImportOut(source=body.source, read=summary.read, imported=summary.imported,
                               memories=summary.memories, skipped=dict(summary.skipped),
                               problems=[ImportProblemOut(line=p.line, reason=p.reason, detail=p.detail)
                                         for p in summary.problems])

    return await asyncio.to_thread(run)


def _line(subject: str, m: MessageIn) -> ChatLine:
    uid = subject.split(":", 1)[1]
    name = clean_name(m.sender_name)  # goes into prompts: no invisible or control characters
    if m.role == "assistant":
        return ChatLine("bot", "bot", m.text, m.at(), m.message_id or "", name)
    return ChatLine("user", m.sender_id or uid, m.text, m.at(), m.message_id or "", name)


_TAGGED = frozenset({"stored", "superseded", "revised", "deduped"})
"""The capture results a call's ``metadata`` joins: what it stored, revised or found already stored."""


@router.post("/subjects/{subject}/memories", response_model=CaptureOut, summary="capture from messages")
async def capture_messages(ctx: Ctx, subject: SubjectPath, body: CaptureIn) -> CaptureOut:
    """Learn from the subject's own lines (others' lines and the bot's only join the tail)."""
    from memory.capture import answered_line, capture

    ns = await _ns(ctx, subject)
    where = _person_chat(subject, _chat(body.chat), ctx.caller, writing_tail=True)
    t = ctx.t
    own_id = subject.split(":", 1)[1]
    extractor = await ctx.pipeline.models.extractor(ctx.tenant, ns.subject) \
        if body.infer and body.extractor == "auto" else None

    def run() -> list[AddOut]:
        from gateway.commands import pause_key
        from memory.never_store import without_never_store

        out: list[AddOut] = []
        before = None  # the message before this one: a line of the bot's is what it answered
        # off the record in that chat (/memory pause): nothing is learned, and no line joins the tail
        if where is not None and ctx.core.store.paused(ns, pause_key(where), utcnow()):
            return out
        for m in body.messages:
            line = _line(subject, m)
            if where is not None and body.to_tail:
                ctx.core.store.append_chat(ctx.tenant, where, line)
            answered, before = answered_line(before, line.at, where, persona=t.persona_name), line
            if m.role != "user" or (m.sender_id or own_id) != own_id:
                continue
            if body.infer:  # the caller hands these lines to the bot: they are said to it
                # a memory it stores carries the tags in its own write: a separate tagging after it
                # let the event sender deliver memory.added in between, then a memory.changed of the
                # same version (what set_metadata below still does for a memory capture only revisits)
                results = capture(ctx.core, ns, m.text, chat=where, said_at=m.at(), message_id=m.message_id,
                                  extractor=extractor, tz=t.tz, own_texts=(t.persona,), addressed=True,
                                  context=answered, never_store=t.never_store, metadata=body.metadata or None)
            elif not (kept := without_never_store(m.text, t.never_store)[0]):
                continue  # a never-store clause is not kept verbatim either
            else:
                memory = ctx.core.new(ns, kept, category=Category.OTHER, origin=where,
                                      visibility=Visibility.GROUP if where and where.is_group else Visibility.PRIVATE,
                                      source_message_id=m.message_id, context=answered, metadata=body.metadata or {})
                results = [ctx.core.add(ns, memory, said_at=m.at(), actor=ctx.caller.actor, evidence=m.text)]
            for r in results:
                live = r.memory
                if body.metadata and live is not None and r.action in _TAGGED:
                    live = ctx.core.set_metadata(ns, live.id, body.metadata, actor=ctx.caller.actor)
                out.append(AddOut(action=r.action, reason=r.reason, memory=MemoryOut.of(live) if live else None))
        return out

    return CaptureOut(subject=ns.subject, results=await asyncio.to_thread(run))


@router.post("/subjects/{subject}/replies", response_model=ReplyOut, summary="record the bot's own reply")
async def record_reply(ctx: Ctx, subject: SubjectPath, body: ReplyIn) -> ReplyOut:
    """The reply the caller's model produced joins the chat's tail (default the
    subject's private chat), so the next recollection and prompt see it. Never captured."""
    await _ns(ctx, subject)
    if body.chat is None:
        if not is_platform_subject(subject):
            raise ChatMismatch("a linked person has no private chat of their own: name the chat")
        platform, uid = subject.split(":", 1)
        where = ChatRef(platform, ChatKind.PRIVATE, uid)
    else:
        where = _person_chat(subject, _chat(body.chat), ctx.caller, writing_tail=True)
    line = ChatLine("bot", "bot", body.text, MessageIn(text=body.text, timestamp=body.timestamp).at(),
                    body.message_id or "", ctx.t.persona_name)
    line_id = await asyncio.to_thread(ctx.core.store.append_chat, ctx.tenant, where, line)
    return ReplyOut(chat=where.key, recorded=line_id is not None)


@router.post("/subjects/{subject}/recollection", response_model=RecollectOut,
             summary="recall + reconstruction for a conversation tail")
async def recollection(ctx: Ctx, subject: SubjectPath, body: RecollectIn) -> RecollectOut:
    """What the gateway would put into the prompt for this conversation: recall on
    the subject's own lines of the tail (or ``query``), the reconstruction (the
    tenant's model, validated against the memories; else the template), and the
    prompt. Recall failing degrades to no recollection (``fallback_reason``)."""
    from datetime import timedelta

    from memory.emotion import analyse
    from memory.reconstruct import reconstruct
    from memory.recall import RecallMisses, RecallParams

    ns = await _ns(ctx, subject)
    t = ctx.t
    where = _chat(body.chat)
    if where is not None and is_platform_subject(subject):
        where = _person_chat(subject, where, ctx.caller, writing_tail=False)
    uid = subject.split(":", 1)[1]
    if body.record:
        where = _person_chat(subject, where, ctx.caller, writing_tail=True)

        def log_lines() -> None:
            for m in body.tail:
                ctx.core.store.append_chat(ctx.tenant, where, _line(subject, m))

        await asyncio.to_thread(log_lines)
    if body.tail and not body.record:
        tail = [_line(subject, m) for m in body.tail]
    elif where is not None:
        if where.is_group and not ctx.caller.admin:  # other people's lines: nothing proves the key's holder is there
            raise Forbidden("only an admin key reads a group's stored tail; send the tail instead")
        tail = await asyncio.to_thread(ctx.core.store.chat_tail, ctx.tenant, where, t.tail,
                                       max_age=timedelta(seconds=t.tail_max_age) if t.tail_max_age > 0 else None)
    else:
        tail = []
    own = [line.text for line in tail if line.role == "user" and line.sender_id == uid]
    queries = own + ([body.query] if body.query else []) or [line.text for line in tail if line.role == "user"]
    last = queries[-1] if queries else ""
    lang = turn_language(last, list(reversed(own[:-1])), None, t.language)
    hits: list[Hit] = []
    reason = ""
    misses = RecallMisses()
    if queries:
        try:
            hits = await asyncio.to_thread(ctx.core.recall, ns, queries, chat=where,
                                           params=RecallParams(k=max(t.recall_k, TRACE_DEPTH)),
                                           query_valence=analyse(last).valence, tz=t.tz, misses=misses)
        except Exception as exc:  # noqa: BLE001 - a recollection degrades, it never fails the caller's reply
            reason = f"recall failed: {type(exc).__name__}"
            log.warning("recall failed for %s: %s", ns, exc)
    ranked, hits = hits, hits[: t.recall_k]
    rc, model = t.reconstruction, ctx.pipeline.models.of(ctx.tenant)
    complete = await ctx.pipeline.models.metered(ctx.tenant, ns.subject, "reconstruct", temperature=rc.temperature,
                                                 timeout=rc.timeout_s, max_tokens=rc.max_chars * 2)
    now = utcnow()
    rec = await reconstruct(hits, tail=tail, complete=complete, lang=lang, now=now, persona_name=t.persona_name,
                            persona_voice=t.persona, person_name=clean_name(body.person_name) or None, enabled=rc.enabled,
                            min_hits=rc.min_hits, max_chars=rc.max_chars, timeout_s=rc.timeout_s,
                            min_grounding=rc.min_grounding,
                            embedder=ctx.core.index.embedder if rc.embedding_check else None,
                            limit=t.recall_k, reason=reason, tz=t.tz)
    rec = capped_recollection(rec, model is not None and complete is None)

    def book() -> None:
        try:
            if where is not None:
                record_recall(ctx.core.store, ns, where, ranked, t.recall_k, rec.fallback_reason, now, misses)
            if rec.sources:
                ctx.core.mark_recalled(ns, list(rec.sources), now)
        except Exception:  # noqa: BLE001 - bookkeeping never fails the answer
            log.exception("could not record the recall of %s", ns)

    await asyncio.to_thread(book)
    prompt = build_messages(persona=t.persona, recollection=rec.text, tail=tail, lang=lang,
                            group=where is not None and where.is_group)
    return RecollectOut(recollection=rec.text, sources=list(rec.sources), fallback_reason=rec.fallback_reason,
                        mode=rec.mode, hits=[HitOut.of(h, False) for h in hits],
                        prompt=[PromptMessage(**m) for m in prompt])


# -- people (issue 26.17; the console's People page calls the same memory.admin.people) --


class PersonOut(BaseModel):
    """One person of the tenant (``memory.admin.Person``): ``subject``, the platform
    ``identities`` linked to it, live ``memories``, ``last_seen`` (UTC, None when
    unknown), ``name`` (the display name they last sent, "" when none)."""

    subject: str
    identities: list[str]
    memories: int
    last_seen: datetime | None
    name: str


class PeopleOut(BaseModel):
    """A page of people, newest seen first; ``total`` counts every match of ``q``."""

    tenant: str
    q: str
    total: int
    limit: int
    offset: int
    items: list[PersonOut]


# -- off the record (/memory pause on /v1) ------------------------------------------


class PauseIn(BaseModel):
    """Pause learning from the subject in ``chat`` (a chat key,
    ``platform:private|group:id``; a group's pause covers all its topics), for
    ``duration`` ("2h", "30m", "30分钟", "一个半小时"; at most 30 days; omitted:
    until resumed)."""

    model_config = ConfigDict(extra="forbid")

    chat: str = Field(max_length=300, json_schema_extra={"pattern": patterns.CHAT_KEY})
    duration: str | None = Field(default=None, max_length=40)


class PauseOut(BaseModel):
    """Whether learning from ``subject`` in ``chat`` is paused now: from ``since``
    until ``until`` (ISO 8601 UTC; None: until resumed). Recall of what was
    learned before goes on either way."""

    subject: str
    chat: str
    paused: bool
    since: datetime | None = None
    until: datetime | None = None


def _pause_chat(ctx: _Ctx, subject: str, chat: str | None) -> str:
    from gateway.commands import pause_key

    where = _person_chat(subject, _chat(chat), ctx.caller, writing_tail=False)
    if where is None:
        raise BadPayload("chat is required: a pause is per chat")
    return pause_key(where)


def _span(text: str) -> timedelta:
    """The duration ``text`` names (``gateway.durations``); BadPayload (400) saying
    which is wrong — no length of time, or longer than the 30 days allowed."""
    from gateway.durations import DurationTooLong, parse_duration

    try:
        span = parse_duration(text)
    except DurationTooLong:
        raise BadPayload(f"duration {text[:40]!r} is too long: at most 30 days") from None
    if span is None:
        raise BadPayload(f"duration {text[:40]!r} names no length of time (e.g. 2h, 30m, 30分钟)")
    return span


def _pause_out(ns: Namespace, chat: str, pause) -> PauseOut:
    if pause is None:
        return PauseOut(subject=ns.subject, chat=chat, paused=False)
    return PauseOut(subject=ns.subject, chat=chat, paused=True, since=pause.since, until=pause.until)


@router.get("/subjects/{subject}/pause", response_model=PauseOut, summary="is learning paused in a chat")
async def get_pause(ctx: Ctx, subject: SubjectPath, chat: ChatQuery = None) -> PauseOut:
    ns = await _ns(ctx, subject)
    key = _pause_chat(ctx, subject, chat)
    return _pause_out(ns, key, await asyncio.to_thread(ctx.core.store.paused, ns, key, utcnow()))


@router.put("/subjects/{subject}/pause", response_model=PauseOut, summary="off the record in a chat")
async def put_pause(ctx: Ctx, subject: SubjectPath, body: PauseIn) -> PauseOut:
    """As ``/memory pause [duration]`` in that chat: nothing the subject says there
    is captured, consolidated or kept past the reply, on every replica, until
    ``DELETE`` or the duration ends. A duration that is none (or over 30 days):
    400, nothing changed."""
    ns = await _ns(ctx, subject)
    key = _pause_chat(ctx, subject, body.chat)
    now = utcnow()
    until = None if body.duration is None else now + _span(body.duration)

    pause = await asyncio.to_thread(pause_learning, ctx.core, ns, key, now, until, ctx.caller.actor)
    return _pause_out(ns, key, pause)


@router.delete("/subjects/{subject}/pause", response_model=PauseOut, summary="back on the record in a chat")
async def delete_pause(ctx: Ctx, subject: SubjectPath, chat: ChatQuery = None) -> PauseOut:
    """As ``/memory resume``: learning from the subject in that chat goes on; idempotent."""
    ns = await _ns(ctx, subject)
    key = _pause_chat(ctx, subject, chat)

    await asyncio.to_thread(resume_learning, ctx.core, ns, key, utcnow(), ctx.caller.actor)
    return PauseOut(subject=ns.subject, chat=key, paused=False)


# -- follow-ups for bots that send their own messages (issue 39 item 2) ------------------


class FollowupOut(BaseModel):
    """A follow-up question claimed for the calling bot to send: ``id`` (to
    acknowledge), the person (``subject``), the chat to send it in (``chat``, a
    chat key: the chat where the plan was told), the question (``text``, in the
    person's language), the memory it asks about (``memory_id``) and when it
    became due."""

    id: int
    subject: str
    chat: str
    text: str
    memory_id: str
    due_at: datetime


class FollowupsDueOut(BaseModel):
    """Follow-ups claimed by this call (each for ``lease_s`` seconds: one not
    acknowledged by then is dropped, never offered again)."""

    tenant: str
    lease_s: float
    items: list[FollowupOut]


class FollowupAckIn(BaseModel):
    """The calling bot's report on a claimed follow-up: ``sent`` true once the
    platform accepted it (``text``: what was sent, if it was not ours as given);
    false with ``error`` when it certainly did not go out (retried later, then
    dropped)."""

    model_config = ConfigDict(extra="forbid")

    sent: bool
    error: str = Field(default="", max_length=200)
    text: str = Field(default="", max_length=2000)


class FollowupAckOut(BaseModel):
    """What the acknowledgement did: ``sent``, ``retry`` or ``dropped``."""

    id: int
    state: str


def _followups(request: Request, ctx: _Ctx):
    if not ctx.caller.admin:
        raise Forbidden("only an admin key takes the tenant's follow-ups")
    return request.app.state.followups


@router.get("/followups/due", response_model=FollowupsDueOut, summary="claim follow-ups for this bot to send")
async def followups_due(request: Request, ctx: Ctx,
                        limit: Annotated[int, Query(ge=1, le=100)] = 20) -> FollowupsDueOut:
    """Follow-ups due now that this gateway does not send itself (chats of a
    platform it has no bot for): the people who turned them on, plans past,
    inside the tenant's waking hours, at most one a person a day. Each is claimed
    for this caller: send it, then ``POST /v1/followups/{id}/ack``. Each ``text``
    is written by the tenant's chat model when it stays grounded in the memory,
    else the template (the calls side by side, each bounded by the tenant's
    ``followups.model_timeout_s``). Admin key."""
    sender = _followups(request, ctx)
    now = utcnow()
    items = await asyncio.to_thread(sender.due_list, ctx.tenant, now, limit, f"v1:{ctx.caller.actor}")
    items = list(await asyncio.gather(*(sender.write(ctx.tenant, r, now) for r in items)))
    return FollowupsDueOut(tenant=ctx.tenant, lease_s=ctx.t.followups.lease_s, items=[
        FollowupOut(id=r.followup.id, subject=r.followup.namespace.subject, chat=r.followup.chat, text=r.text,
                    memory_id=r.followup.memory_id, due_at=r.followup.due_at) for r in items])


@router.post("/followups/{followup_id}/ack", response_model=FollowupAckOut, summary="report a follow-up sent or not")
async def followup_ack(request: Request, ctx: Ctx, body: FollowupAckIn,
                       followup_id: Annotated[int, Path(ge=1, le=2**62)]) -> FollowupAckOut:
    """Report a follow-up claimed from ``/v1/followups/due``: sent (kept as the
    companion's line of its chat, so the answer is captured with it as context)
    or not (retried later, then dropped). 404 when it is not a follow-up claimed
    and unreported of this tenant. Admin key."""
    sender = _followups(request, ctx)
    state = await asyncio.to_thread(sender.ack, ctx.tenant, followup_id, utcnow(), sent=body.sent,
                                    error=clean_controls(body.error), text=clean_controls(body.text))
    if state == "unknown":
        raise NotFoundError(f"no claimed follow-up {followup_id}")
    return FollowupAckOut(id=followup_id, state=state)


@router.get("/people", response_model=PeopleOut, summary="the tenant's people (admin key)")
async def list_people(ctx: Ctx, q: Annotated[str | None, Query(max_length=200, description=(
                          "a substring of a subject, a linked identity or a name (case-insensitive)"))] = None,
                      limit: Annotated[int, Query(ge=1, le=200)] = 50,
                      offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0) -> PeopleOut:
    """Everyone the tenant knows (``memory.admin.people``); a member key is refused (403)."""
    from memory.admin import Authority, people

    if not ctx.caller.admin:
        raise Forbidden("only an admin key lists the tenant's people")
    page = await asyncio.to_thread(people, ctx.core, Authority(ctx.caller.actor, ctx.tenant), ctx.tenant,
                                   query=clean_controls(q or ""), limit=limit, offset=offset)
    return PeopleOut(tenant=page.tenant, q=page.query, total=page.total, limit=page.limit, offset=page.offset,
                     items=[PersonOut(subject=p.subject, identities=list(p.identities), memories=p.memories,
                                      last_seen=p.last_seen, name=p.name) for p in page.items])


async def announce(pipeline: Pipeline) -> None:
    """Log at start-up who may call ``/v1`` (gateway.http.auth): the tenants without a
    key answer keyless loopback callers only, or nobody with ``api_require_key``."""
    try:
        keyless = await asyncio.to_thread(pipeline.core.store.keyless_tenants, sorted(pipeline.settings.tenants))
    except Exception as exc:  # noqa: BLE001 - the log line is a courtesy; every request checks again
        log.warning("API keys unreadable at start-up: %s", exc)
        return
    if pipeline.settings.api_require_key:
        log.info("/v1 needs an API key for every tenant (api_require_key); tenants without one: %s",
                 ", ".join(keyless) or "none")
    elif keyless:
        log.warning("/v1 answers tenant(s) %s without an API key to loopback callers only (127.0.0.1, ::1); "
                    "create keys with `huiyi keys create --tenant T` to serve other hosts", ", ".join(keyless))
    else:
        log.info("/v1 needs an API key for every tenant")


def openapi_of(app) -> dict:
    """``app``'s OpenAPI document as the ``/v1`` routes really answer: FastAPI
    declares a 422 for every route with parameters, but a request that does not
    validate is a 400 with ``ErrorOut`` here (``gateway.http.errors``), so the 422s
    and their schemas are dropped. Built once and cached on the app."""
    from fastapi.openapi.utils import get_openapi

    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
        for item in doc.get("paths", {}).values():
            for op in item.values():
                if isinstance(op, dict):
                    op.get("responses", {}).pop("422", None)
        schemas = doc.get("components", {}).get("schemas", {})
        text = str(doc.get("paths"))
        for name in ("HTTPValidationError", "ValidationError"):
            if f"/{name}'" not in text:
                schemas.pop(name, None)
        app.openapi_schema = doc
    return app.openapi_schema
