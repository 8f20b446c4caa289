"""The store's SQL tables and engine set-up: private to ``memory.store``.

One SQLModel class per table (``_MemoryRow`` → ``memories``, ``_HistoryRow`` →
``memory_history``, ``_TombstoneRow`` → ``tombstones``, ``_DeliveryRow`` →
``deliveries``, ``_ChatLogRow`` → ``chat_log``, ``_RedactionRow`` →
``chat_redactions``, ``_IndexOpRow`` → ``index_outbox``, ``_AuditRow`` →
``audit_log``, ``_IdentityRow`` → ``identities``, ``_PendingRow`` →
``pending_confirmations``, ``_ConflictRow`` →
``memory_conflicts``, ``_ApiKeyRow`` → ``api_keys``, ``_NamespaceStateRow`` →
``namespace_state``, ``_LinkRow`` → ``memory_links``, ``_ConsolidatedRow`` →
``consolidated``, ``_ConsolidationStateRow`` → ``consolidation_state``, ``_ChangeEventRow`` →
``change_events``, ``_ConsoleSessionRow`` → ``console_sessions``, ``_ConsoleSecretRow`` →
``console_secrets``, ``_PauseRow`` → ``record_pauses``, ``_TokenLedgerRow`` → ``token_ledger``,
``_FollowupPrefRow`` → ``followup_prefs``, ``_FollowupRow`` → ``followups``), registered on
``SQLModel.metadata`` when this module is imported; the row → ``Memory``
conversion; and the engine helpers (URL normalisation, SQLite pragmas and
``BEGIN IMMEDIATE``). Nothing here opens a session: transactions belong to
``memory.store.base``; the schema's revisions to ``memory.store.migrate``
(Alembic): a change to a table here needs a revision there.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from datetime import date, datetime, timezone

from sqlalchemy import Index as SAIndex
from sqlalchemy import BigInteger, LargeBinary, UniqueConstraint
from sqlmodel import Field, SQLModel

from memory.types import Category, ChatRef, Memory, Namespace, Visibility

log = logging.getLogger(__name__)

#: how many recall times (``access_times``, ISO 8601 strings) a memory row keeps
#: for ACT-R activation; older ones are dropped
ACCESS_TIMES_KEPT = 20


def _aware(dt: datetime | None) -> datetime | None:
    """``dt`` as an aware datetime: a naive one (SQLite hands back what was
    stored, in UTC, without its zone) gets UTC; None stays None."""
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


class _MemoryRow(SQLModel, table=True):
    """A live memory (``memory.types.Memory``): one per ``(namespace, key)``.
    ``norm`` is the normalised text; ``origin`` a ``ChatRef.key`` ("" when none);
    ``access_times`` a JSON list of ISO 8601 recall times (at most
    ``ACCESS_TIMES_KEPT``); ``source_fp`` the fingerprint of the evidence text;
    ``entities`` what the text names (``memory.links.stored_entities``, for entity
    linking; NULL on rows written before the column, which are tagged when read);
    ``context`` the chat line the memory answered (``Memory.context``, "" when none)."""

    __tablename__ = "memories"
    __table_args__ = (
        UniqueConstraint("namespace", "key", name="uq_memories_namespace_key"),
        SAIndex("ix_memories_namespace_updated", "namespace", "updated_at"),
    )

    id: str = Field(primary_key=True, max_length=32)
    namespace: str = Field(index=True, max_length=260)
    tenant: str = Field(index=True, max_length=64)
    text: str
    norm: str = ""
    category: str = "other"
    key: str = Field(max_length=512)
    importance: float = 0.5
    valence: float = 0.0
    arousal: float = 0.0
    emotion: str = "neutral"
    origin: str = ""
    visibility: str = "private"
    source_message_id: str | None = None
    created_at: datetime
    updated_at: datetime
    valid_from: datetime
    event_time: datetime | None = None
    #: where the period the event names ends (exclusive), NULL for a day (``Memory.event_end``)
    event_end: datetime | None = None
    version: int = 1
    access_times: str = "[]"
    source_fp: str = Field(default="", max_length=64)
    entities: str | None = None
    context: str = ""
    #: the caller's tags (``Memory.metadata``): compact key-sorted JSON, "{}" when none (issue 26 item 17)
    meta: str = "{}"


class _HistoryRow(SQLModel, table=True):
    """A superseded version of a memory, valid over ``[valid_from, valid_to)``."""

    __tablename__ = "memory_history"

    id: int | None = Field(default=None, primary_key=True)
    memory_id: str = Field(index=True, max_length=32)
    namespace: str = Field(index=True, max_length=260)
    version: int
    text: str
    category: str
    key: str = ""
    origin: str = ""
    #: the version's own disclosure (``Visibility`` value); "" on rows written
    #: before it was kept, read as PRIVATE so that they fail closed in groups
    visibility: str = ""
    source_message_id: str | None = None
    source_fp: str = Field(default="", max_length=64)
    valid_from: datetime
    valid_to: datetime


class _ConflictRow(SQLModel, table=True):
    """Two live memories of one namespace that disagree without a clear change
    (``memory.contradiction``, the unsure band): ``older_id`` was said first,
    ``newer_id`` later. Both ids are memories of ``namespace``; a forget, retract
    or new version of either side deletes the row."""

    __tablename__ = "memory_conflicts"
    __table_args__ = (UniqueConstraint("namespace", "older_id", "newer_id", name="uq_memory_conflict"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(index=True, max_length=260)
    older_id: str = Field(max_length=32)
    newer_id: str = Field(max_length=32)
    created_at: datetime


class _TombstoneRow(SQLModel, table=True):
    """The fingerprint of a forgotten text in one namespace and when it was (last) forgotten."""

    __tablename__ = "tombstones"
    __table_args__ = (UniqueConstraint("namespace", "fingerprint", name="uq_tombstone"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(index=True, max_length=260)
    fingerprint: str = Field(max_length=64)
    forgotten_at: datetime


class _DeliveryRow(SQLModel, table=True):
    """A processed platform delivery, by key (at most 600 characters, longer keys
    are cut); ``fingerprint``: the content fingerprint a plain message claimed in
    the same row (``ChatLog.append_chat``; unique, NULL when none)."""

    __tablename__ = "deliveries"
    __table_args__ = (SAIndex("ix_deliveries_fingerprint", "fingerprint", unique=True),)

    key: str = Field(primary_key=True, max_length=600)
    processed_at: datetime
    fingerprint: str | None = Field(default=None, max_length=600)


class _ChatLogRow(SQLModel, table=True):
    """One line of a chat's recent log (``chat``: a ``ChatRef.key``; ``role``:
    ``user`` or ``bot``), with the capture still due on it, if any."""

    __tablename__ = "chat_log"
    __table_args__ = (SAIndex("ix_chat_log_chat", "tenant", "chat", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    chat: str = Field(max_length=300)
    role: str = Field(max_length=16)
    sender_id: str = ""
    sender_name: str = ""
    message_id: str = ""
    text: str
    at: datetime
    #: the namespace this line still has to be captured into ("" when none is due)
    capture_ns: str = Field(default="", max_length=260)
    #: when the capture was queued (the age a stalled capture is resumed after);
    #: indexed, NULL on every other line, so the resume scan reads only due lines
    capture_queued: datetime | None = Field(default=None, index=True)
    #: the embedding the turn computed for this line (float32 bytes) and what made it:
    #: ``<embedder>/<dim>/<text hash>`` ("" when none); the next turns reuse it for the line
    vector: bytes | None = Field(default=None, sa_type=LargeBinary)
    vector_key: str = ""


class _RedactionRow(SQLModel, table=True):
    """A chat-log line removed by a forget: ids only, so that a replay of the same
    message does not put its text back into the conversation tail."""

    __tablename__ = "chat_redactions"
    __table_args__ = (UniqueConstraint("tenant", "chat", "message_id", "sender_id", name="uq_chat_redaction"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    chat: str = Field(max_length=300)
    message_id: str = Field(max_length=128)
    sender_id: str = Field(max_length=128)
    at: datetime


class _IndexOpRow(SQLModel, table=True):
    """An index operation owed (``op``: ``upsert``, ``delete`` or ``purge``) and
    how many attempts at it failed. Its ids are never given twice (SQLite:
    ``AUTOINCREMENT``, revision 0023): a rebuild deletes at its end the ids it
    found pending at its start."""

    __tablename__ = "index_outbox"
    __table_args__ = {"sqlite_autoincrement": True}

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=260)
    memory_id: str = Field(max_length=32)
    op: str = Field(max_length=8)
    attempts: int = 0
    created_at: datetime


class _AuditRow(SQLModel, table=True):
    """An audit record; ``detail`` is a JSON object (never the text of a forget)."""

    __tablename__ = "audit_log"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime
    actor: str = Field(max_length=200)
    action: str = Field(max_length=32, index=True)
    namespace: str = Field(index=True, max_length=260)
    memory_id: str | None = None
    detail: str = "{}"


class _IdentityRow(SQLModel, table=True):
    """A platform identity (``tg:123``) linked by an admin to a ``person:<id>`` subject."""

    __tablename__ = "identities"
    __table_args__ = (UniqueConstraint("tenant", "platform_subject", name="uq_identity"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    platform_subject: str = Field(max_length=200)
    subject: str = Field(index=True, max_length=200)
    linked_at: datetime
    actor: str = Field(max_length=200)


class _PendingRow(SQLModel, table=True):
    """A confirmation awaited from a person (e.g. ``/memory forget all``), shared by replicas."""

    __tablename__ = "pending_confirmations"

    key: str = Field(primary_key=True, max_length=600)
    namespace: str = Field(index=True, max_length=260)
    created_at: datetime


class _SeenNonceRow(SQLModel, table=True):
    """A signed platform callback already accepted (replay protection, ``bridges.replay``):
    unique per (tenant, platform, nonce) so a second use fails on every replica."""

    __tablename__ = "seen_nonces"
    __table_args__ = (UniqueConstraint("tenant", "platform", "nonce", name="uq_seen_nonce"),
                      SAIndex("ix_seen_nonces_seen_at", "seen_at"))

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    platform: str = Field(max_length=32)
    nonce: str = Field(max_length=128)
    digest: str = Field(default="", max_length=128)
    seen_at: datetime


class _ConsoleSessionRow(SQLModel, table=True):
    """An open session of the admin console (``memory.store.console_sessions``):
    ``digest`` the SHA-256 hex of the session id the signed cookie carries (the
    id itself is never stored), opened by admin key ``key_id`` of ``tenant`` at
    ``created_at``, valid until ``expires_at``. Deleted by a logout, a "log out
    everywhere", the key's revocation, or — once expired — the next login."""

    __tablename__ = "console_sessions"
    __table_args__ = (SAIndex("ix_console_sessions_key", "tenant", "key_id"),
                      SAIndex("ix_console_sessions_expires_at", "expires_at"))

    digest: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=64)
    key_id: str = Field(max_length=32)
    created_at: datetime
    expires_at: datetime


class _ConsoleSecretRow(SQLModel, table=True):
    """One running gateway's console signing secret, as a fingerprint
    (``memory.store.console_sessions``): process ``instance`` (random hex, one
    per start) signs with the secret whose fingerprint is ``fingerprint`` (64
    hex characters; never the secret), last said at ``seen_at``. Deleted when
    that gateway stops, or by any gateway once unrefreshed past the window."""

    __tablename__ = "console_secrets"

    instance: str = Field(primary_key=True, max_length=32)
    fingerprint: str = Field(max_length=64)
    seen_at: datetime


class _PauseRow(SQLModel, table=True):
    """One person's "off the record" in one chat (``memory.store.pauses``):
    ``key`` is ``<namespace>|<chat key>``; from ``since`` until ``until`` (None:
    until resumed) nothing they say in that chat is captured. Ids and times only."""

    __tablename__ = "record_pauses"

    key: str = Field(primary_key=True, max_length=600)
    namespace: str = Field(index=True, max_length=260)
    chat: str = Field(max_length=300)
    since: datetime
    until: datetime | None = None


class _FollowupPrefRow(SQLModel, table=True):
    """A person's answer to ``/memory followups on|off`` (``memory.store.followups``):
    ``enabled``; ``lang`` the locale they asked in (the template's language);
    ``bot_id`` the platform bot that heard them (which OneBot bot sends); ids and
    times only."""

    __tablename__ = "followup_prefs"

    namespace: str = Field(primary_key=True, max_length=260)
    tenant: str = Field(index=True, max_length=64)
    enabled: bool = False
    lang: str = Field(default="", max_length=16)
    bot_id: str = Field(default="", max_length=128)
    updated_at: datetime


class _FollowupRow(SQLModel, table=True):
    """One follow-up question owed about a plan (``memory.store.followups``): the
    memory it asks about, the chat it goes to (the plan's origin chat key), when
    it is due, and where it stands (``state``: due, sending, sent, dropped,
    skipped). Unique per (namespace, memory): a plan is asked about once.
    ``day_key`` (``<namespace>|<local day>``, unique, NULL unless claimed or sent)
    is set by the claim: two follow-ups of one person on one day cannot both be
    claimed, on any replica. No memory text is kept here."""

    __tablename__ = "followups"
    __table_args__ = (UniqueConstraint("namespace", "memory_id", name="uq_followups_memory"),
                      SAIndex("ix_followups_day_key", "day_key", unique=True),
                      SAIndex("ix_followups_due", "state", "due_at"))

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    namespace: str = Field(max_length=260)
    memory_id: str = Field(max_length=32)
    chat: str = Field(max_length=300)
    state: str = Field(default="due", max_length=16)
    due_at: datetime
    attempts: int = 0
    holder: str | None = Field(default=None, max_length=128)
    claimed_at: datetime | None = None
    sent_at: datetime | None = None
    day_key: str | None = Field(default=None, max_length=300)
    last_error: str = Field(default="", max_length=200)


class _TokenLedgerRow(SQLModel, table=True):
    """Tokens the tenants' chat models spent (``memory.store.ledger``): one row
    per tenant, UTC ``day``, person (``subject`` of the namespace; "" for a call
    made for nobody in particular), ``purpose`` (extract, reconstruct, reply, followup,
    consolidate) and ``model``, summed by an upsert at every call; ``calls`` is
    how many calls the sums hold. Input and output tokens as the model's
    ``usage`` reported them (``prompt_tokens``, ``completion_tokens``)."""

    __tablename__ = "token_ledger"

    tenant: str = Field(primary_key=True, max_length=64)
    day: date = Field(primary_key=True)
    subject: str = Field(primary_key=True, max_length=160)
    purpose: str = Field(primary_key=True, max_length=16)
    model: str = Field(primary_key=True, max_length=128)
    input_tokens: int = Field(default=0, sa_type=BigInteger)
    output_tokens: int = Field(default=0, sa_type=BigInteger)
    calls: int = 0


class _ApiKeyRow(SQLModel, table=True):
    """An API key of one tenant (``memory.store.apikeys``): ``key_id`` is the
    public part of the key, ``digest`` the SHA-256 hex of the whole key (the key
    itself is never stored); ``scope`` ``admin`` or ``member``; ``subject`` the
    one person a member key acts for ("" for admin keys); ``revoked_at`` None
    while the key is valid."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True, max_length=32)
    tenant: str = Field(index=True, max_length=64)
    scope: str = Field(max_length=16)
    subject: str = Field(default="", max_length=160)
    digest: str = Field(max_length=64)
    label: str = Field(default="", max_length=200)
    created_at: datetime
    revoked_at: datetime | None = None


def _to_memory(row: _MemoryRow, ns: Namespace | None = None) -> Memory:
    """A Memory from a row (``ns``: the row's namespace when the caller knows it,
    saving the parse)."""
    return Memory(
        id=row.id,
        namespace=ns if ns is not None and row.namespace == str(ns) else Namespace.parse(row.namespace),
        text=row.text,
        category=Category(row.category),
        key=row.key,
        importance=row.importance,
        valence=row.valence,
        arousal=row.arousal,
        emotion=row.emotion,
        origin=ChatRef.parse(row.origin) if row.origin else None,
        visibility=Visibility(row.visibility),
        source_message_id=row.source_message_id,
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
        valid_from=_aware(row.valid_from),
        valid_to=None,
        event_time=_aware(row.event_time),
        event_end=_aware(getattr(row, "event_end", None)),
        version=row.version,
        access_times=tuple(datetime.fromisoformat(t) for t in json.loads(row.access_times or "[]")),
        context=row.context or "",
        metadata=_meta(getattr(row, "meta", None)),
    )


def _meta_json(metadata) -> str:
    """Metadata as the ``meta`` column keeps it (``memory.metadata.dumps``; "{}" when none)."""
    if not metadata:
        return "{}"
    from memory.metadata import dumps

    return dumps(metadata)


def _meta(text: str | None) -> dict:
    """A row's ``meta`` as a dict (``memory.metadata.loads``); "{}" and NULL are empty."""
    if not text or text == "{}":
        return {}
    from memory.metadata import loads

    return loads(text)


def _normalise_url(url: str) -> str:
    """``url`` with ``postgres://`` and ``postgresql://`` pointed at the psycopg 3
    driver (``postgresql+psycopg://``); any other URL unchanged."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - trivial
    """On every new SQLite connection: WAL, busy timeout 10 s, synchronous NORMAL,
    secure_delete, and no implicit transactions of the driver."""
    # the driver opens no transactions of its own: _sqlite_begin does, so that a
    # write transaction takes the write lock up front (BEGIN IMMEDIATE)
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=10000")
    # switching a new file to WAL needs it exclusively; when another connection is
    # creating the schema at that moment SQLite can answer "database is locked"
    # at once instead of waiting (two replicas opening one empty file together)
    for attempt in range(100):
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.1)
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA secure_delete=ON")  # a forget leaves no text in freed pages
    cur.close()


def _sqlite_begin(conn) -> None:  # pragma: no cover - trivial
    """Write sessions start with BEGIN IMMEDIATE (the busy timeout then covers
    lock waits, and no deferred read can fail to upgrade); reads autocommit
    statement by statement, which WAL never blocks."""
    if conn.get_execution_options().get("huiyi_write"):
        # the driver's own execute: every write pays this BEGIN, and SQLAlchemy's
        # statement machinery around it cost more than SQLite's work; its error
        # becomes SQLAlchemy's, as the writers' handlers expect (a DBAPIError)
        try:
            conn.connection.driver_connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            from sqlalchemy.exc import OperationalError

            raise OperationalError("BEGIN IMMEDIATE", None, exc) from exc


class _NamespaceStateRow(SQLModel, table=True):
    """Per-namespace write version and live count. ``version`` grows by one in
    the transaction of every write that changes what a search of the namespace
    reads (a memory added, re-texted, re-disclosed, deleted or moved), so an
    in-process cache stamped with it is stale exactly when it differs;
    ``live`` is the number of live memories (``memories`` rows) of the namespace.

    ``links``, ``conflicts`` and ``dormant``: how many association links,
    conflict links and dormant marks the namespace has been given, counted up in
    the transaction that makes each one and never down (an upper bound of what
    it holds): 0 says it holds none, so recall skips that read; NULL (a row
    written without them) says nothing is known, and recall reads.

    A namespace's last recall (``trace_*``) shares its row: a turn whose capture
    writes the row anyway writes its trace in the same update. A row made by a
    trace alone (a person none of whose lines was stored yet) has version 0 and
    its live count read from ``memories``."""

    __tablename__ = "namespace_state"

    namespace: str = Field(primary_key=True, max_length=260)
    version: int = 0
    live: int = 0
    links: int | None = None
    conflicts: int | None = None
    dormant: int | None = None
    #: which memories the last write versions changed, in the write's own row
    #: update: ``;<version>:<id>,<id>…`` entries, oldest first, cut to the last
    #: ``memory.store.versions.CHANGES_CHARS`` characters (``*`` for a write that
    #: changed rows it does not name); NULL: nothing logged yet. Recall's cache reads
    #: only what changed since its stamp (``Store.changes_since``).
    changes: str | None = None
    #: recall marks not folded yet into the memories and links rows: access times and
    #: co-recall weight per flush, one row written (``memory.store.pending``); NULL: none
    marks: str | None = None
    #: the namespace's last recall (``memory.explain.RecallTrace``, ids and numbers only;
    #: ``memory.store.traces``): when its message was said (a newer one replaces it, an
    #: older one never does), its recollection's fallback reason ("" when none) and the
    #: rest as JSON; all three NULL while the namespace has no trace
    trace_at: datetime | None = None
    trace_reason: str | None = None
    trace: str | None = None


class _LinkRow(SQLModel, table=True):
    """An association between two memories of one namespace (issue 17): memories
    recalled together, consolidated (clustered) together, or sharing an entity.
    The pair is stored once, ``a_id < b_id``; both are memories of ``namespace``
    (checked in the writing transaction, so a link never joins two namespaces).
    ``weight`` (≥ 0) is the weight as of ``updated_at``: it grows on co-use and
    decays with the time since (``memory.links``); ``reasons`` is a comma-joined
    subset of ``recalled``, ``cluster``, ``entity``. A forget of either side
    deletes the row in the forget's transaction."""

    __tablename__ = "memory_links"
    __table_args__ = (UniqueConstraint("namespace", "a_id", "b_id", name="uq_memory_link"),
                      SAIndex("ix_memory_links_namespace_a", "namespace", "a_id"),
                      SAIndex("ix_memory_links_namespace_b", "namespace", "b_id"))

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=260)
    a_id: str = Field(max_length=32)
    b_id: str = Field(max_length=32)
    weight: float = 0.0
    reasons: str = Field(default="", max_length=64)
    updated_at: datetime


class _ConsolidatedRow(SQLModel, table=True):
    """What makes a live memory (``memories`` row ``memory_id`` of the same
    namespace) a consolidated one (issue 17): its type (``fact``, ``pattern``,
    ``preference``, ``relationship``, ``mood``), its confidence in [0, 1], how
    often it was recalled (``hits``, ``last_hit_at``), the fragments it rests on
    (``sources``: a JSON list of memory ids of the same namespace, each cited as
    ``[src:ID]`` by the abstraction), and since when it is dormant (None while
    awake). Deleted with its memory; a forget of any source removes or
    re-derives it."""

    __tablename__ = "consolidated"

    memory_id: str = Field(primary_key=True, max_length=32)
    namespace: str = Field(index=True, max_length=260)
    ctype: str = Field(default="fact", max_length=16)
    confidence: float = 0.5
    hits: int = 0
    last_hit_at: datetime | None = None
    dormant_since: datetime | None = None
    sources: str = "[]"
    created_at: datetime


class _ConsolidationStateRow(SQLModel, table=True):
    """Per-namespace consolidation progress (issue 17): when the last run ended
    (``run_at``), the newest fragment creation time it considered
    (``watermark``: fragments created after it are "new"), and what the run
    made (``clusters``, ``abstractions``)."""

    __tablename__ = "consolidation_state"

    namespace: str = Field(primary_key=True, max_length=260)
    run_at: datetime | None = None
    watermark: datetime | None = None
    clusters: int = 0
    abstractions: int = 0


# -- change events (issue 26 item 17) -----------------------------------------------


class _ChangeEventRow(SQLModel, table=True):
    """A change event owed to a tenant's webhook (``memory.store.events``):
    ``event`` ``memory.added``, ``memory.changed`` or ``memory.forgotten`` of
    memory ``memory_id`` in ``namespace`` at ``version`` (0 for a forget), written
    in the transaction of the change; ids only, never a text. ``uid``: the
    event's id for the receiver (``webhook-id: evt_<uid>``), random and unique
    for the life of the store, kept across retries and replays (``id`` orders
    the outbox; SQLite may give a deleted row's ``id`` again). ``due_at``: when
    the next attempt may run (a sender claims a row by moving it forward);
    ``holder``: the sender that holds the claim (None when unclaimed);
    ``attempts``: failed deliveries so far; ``last_error``: the last failure
    ("HTTP 500", "ConnectTimeout"); ``dead_at``: when it was given up (a dead
    letter, kept until replayed and delivered). Deleted once delivered."""

    __tablename__ = "change_events"
    __table_args__ = (SAIndex("ix_change_events_due", "due_at", "id"),
                      SAIndex("ix_change_events_uid", "uid", unique=True))

    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(max_length=32)
    tenant: str = Field(max_length=64)
    namespace: str = Field(max_length=260)
    memory_id: str = Field(max_length=32)
    event: str = Field(max_length=32)
    version: int = 0
    created_at: datetime
    due_at: datetime
    attempts: int = 0
    holder: str | None = Field(default=None, max_length=96)
    last_error: str = Field(default="", max_length=200)
    dead_at: datetime | None = None
