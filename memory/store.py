"""The SQL store: source of truth for memories, history, tombstones, deliveries,
the recent chat log, the index outbox and the audit log.

SQLModel tables are private to this module; callers get core dataclasses
(``memory.types``). Every memory read and write takes a ``Namespace`` first and
filters on it in SQL; there is no unscoped memory query here (tenant-wide
operations live in ``memory.admin``).

Backends: SQLite (WAL, busy timeout 10 s, one writer at a time through a
process lock) under the data root by default, or PostgreSQL when the URL says
so (``postgresql://`` URLs are driven by psycopg 3). ``schema`` puts every
table of a PostgreSQL store in its own schema (tests use one per run).

SQLite never answers "database is locked" to the gateway's own concurrency:
every write transaction starts with ``BEGIN IMMEDIATE`` (the write lock is
taken up front, so the busy timeout applies and no read-to-write upgrade can
deadlock — also between two processes on one file, e.g. the gateway and the
operator CLI); reads run in deferred transactions that WAL never blocks.

What a forget leaves in SQL: nothing readable. ``delete`` removes the live row,
its history rows and the chat-log lines the memory was learned from, in one
transaction; SQLite runs with ``secure_delete`` (freed cells and pages are
zeroed) and ``scrub()`` truncates the WAL, so not even free pages keep the
text. PostgreSQL keeps dead tuples until (auto)vacuum and WAL segments until
they are recycled; run ``VACUUM`` on ``memories``, ``memory_history`` and
``chat_log`` where that matters.

Index outbox: each memory write adds an ``IndexOp`` row in the same
transaction. The index applies it and clears it; a crash between SQL and index
leaves the row, which ``SearchIndex`` maintenance re-applies. Nothing is lost.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from sqlalchemy import Index as SAIndex
from sqlalchemy import Connection, UniqueConstraint, bindparam, event, func, insert, or_, text, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Field, Session, SQLModel, create_engine, delete, select

from memory.errors import DuplicateDelivery, NamespaceError, NotFoundError, StoreError
from memory.types import Category, ChatRef, Memory, Namespace, Visibility

__all__ = ["Store", "ChatLine", "IndexOp", "TenantCounts", "new_memory_id", "utcnow", "ChatMigration", "PendingCapture",
           "MemoryText"]

log = logging.getLogger(__name__)

ACCESS_TIMES_KEPT = 20


def utcnow() -> datetime:
    """Timezone-aware current UTC time."""
    return datetime.now(timezone.utc)


def new_memory_id() -> str:
    """A short random id (12 hex chars), safe in filters and in ``[src:ID]`` citations."""
    return uuid.uuid4().hex[:12]


def _aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


class _MemoryRow(SQLModel, table=True):
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
    version: int = 1
    access_times: str = "[]"
    source_fp: str = Field(default="", max_length=64)


class _HistoryRow(SQLModel, table=True):
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


class _TombstoneRow(SQLModel, table=True):
    __tablename__ = "tombstones"
    __table_args__ = (UniqueConstraint("namespace", "fingerprint", name="uq_tombstone"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(index=True, max_length=260)
    fingerprint: str = Field(max_length=64)
    forgotten_at: datetime


class _DeliveryRow(SQLModel, table=True):
    __tablename__ = "deliveries"

    key: str = Field(primary_key=True, max_length=600)
    processed_at: datetime


class _ChatLogRow(SQLModel, table=True):
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
    __tablename__ = "index_outbox"

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=260)
    memory_id: str = Field(max_length=32)
    op: str = Field(max_length=8)
    attempts: int = 0
    created_at: datetime


class _AuditRow(SQLModel, table=True):
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


class _LastRecallRow(SQLModel, table=True):
    """The last recall of one namespace (``memory.explain.RecallTrace``), ids and numbers only."""

    __tablename__ = "last_recall"

    namespace: str = Field(primary_key=True, max_length=260)
    tenant: str = Field(index=True, max_length=64)
    chat: str = Field(max_length=300)
    at: datetime
    k: int
    fallback_reason: str = ""
    entries: str = "[]"


class _PendingRow(SQLModel, table=True):
    """A confirmation awaited from a person (e.g. ``/memory forget all``), shared by replicas."""

    __tablename__ = "pending_confirmations"

    key: str = Field(primary_key=True, max_length=600)
    namespace: str = Field(index=True, max_length=260)
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ChatLine:
    """One line of a chat's recent log. role is ``user`` or ``bot``."""

    role: str
    sender_id: str
    text: str
    at: datetime
    message_id: str = ""
    sender_name: str = ""


@dataclass(frozen=True, slots=True)
class MemoryText:
    """What a search needs of a live memory: id, namespace, text, visibility and
    origin (the chat key it was learned in, "" when none)."""

    id: str
    namespace: Namespace
    text: str
    visibility: Visibility
    origin: str
    _row: object = field(default=None, repr=False, compare=False)

    def memory(self) -> Memory:
        """The whole memory, built from the row this was read from (no query)."""
        if self._row is None:
            raise ValueError("MemoryText without its row")
        return _to_memory(self._row, self.namespace)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class PendingCapture:
    """A person's chat-log line whose capture into ``namespace`` is still due:
    ``line_id`` (for ``Store.capture_done``), where and when it was said, its text."""

    line_id: int
    tenant: str
    namespace: Namespace
    chat: ChatRef
    message_id: str
    text: str
    at: datetime


@dataclass(frozen=True, slots=True)
class ChatMigration:
    """What ``Store.migrate_chat`` moved: chat log lines, memories, and the
    namespaces those memories belong to."""

    chat_lines: int
    memories: int
    namespaces: tuple[Namespace, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexOp:
    """A pending index operation from the outbox: op is ``upsert`` or ``delete``."""

    id: int
    namespace: Namespace
    memory_id: str
    op: str
    attempts: int

@dataclass(frozen=True, slots=True)
class TenantCounts:
    """Counts over one tenant: live memories; people (namespaces holding
    memories); chats in the recent chat log; turns (deliveries processed,
    commands included); recalls (namespaces with a last-recall record) and how
    many of those last recollections fell back."""

    memories: int
    people: int
    chats: int
    turns: int
    recalls: int
    fallbacks: int


_KEY_SQL = select(_MemoryRow.__table__).where(  # type: ignore[attr-defined]
    _MemoryRow.__table__.c.namespace == bindparam("ns"), _MemoryRow.__table__.c.key == bindparam("key"))  # type: ignore[attr-defined]
_TOMBSTONE_SQL = select(func.max(_TombstoneRow.__table__.c.forgotten_at)).where(  # type: ignore[attr-defined]
    _TombstoneRow.__table__.c.namespace == bindparam("ns"),  # type: ignore[attr-defined]
    _TombstoneRow.__table__.c.fingerprint.in_(bindparam("fps", expanding=True)))  # type: ignore[attr-defined]


def _origin_or_none(key: str) -> ChatRef | None:
    """The origin chat of a stored version; None when it was not kept or does not parse."""
    try:
        return ChatRef.parse(key) if key else None
    except NamespaceError:
        return None


def _visibility_or_private(value: str) -> Visibility:
    """A stored version's visibility; PRIVATE when it was not kept (fails closed in groups)."""
    try:
        return Visibility(value)
    except ValueError:
        return Visibility.PRIVATE


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
        version=row.version,
        access_times=tuple(datetime.fromisoformat(t) for t in json.loads(row.access_times or "[]")),
    )


def _normalise_url(url: str) -> str:
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


# == signed callbacks: nonces already seen (issue 13 B) =========================
# Self-contained block (one table, one mixin with its two methods), kept apart
# so that it can move as a unit. It lives in SQL, not in a process, so that a
# nonce one gateway replica accepted is refused by every other one.


class _SeenNonceRow(SQLModel, table=True):
    __tablename__ = "seen_nonces"
    __table_args__ = (UniqueConstraint("tenant", "platform", "nonce", name="uq_seen_nonce"),
                      SAIndex("ix_seen_nonces_seen_at", "seen_at"))

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    platform: str = Field(max_length=32)
    nonce: str = Field(max_length=128)
    digest: str = Field(default="", max_length=128)
    seen_at: datetime


class _SeenNonces:
    """Store methods for replay protection of signed callbacks (``bridges.replay``)."""

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None:
        """Record that a signed request with ``nonce`` (at most 128 characters; the
        caller hashes what the platform signs, e.g. timestamp + nonce) reached
        ``tenant`` on ``platform``. Returns None the first time; on a replay, the
        ``digest`` (at most 128 characters, e.g. a body hash) recorded the first time.
        Safe under concurrency and across replicas (unique constraint)."""
        try:
            with self._write() as s:  # type: ignore[attr-defined]
                s.add(_SeenNonceRow(tenant=tenant[:64], platform=platform[:32], nonce=nonce[:128],
                                    digest=digest[:128], seen_at=at or utcnow()))
            return None
        except IntegrityError:
            with self._read() as s:  # type: ignore[attr-defined]
                first = s.exec(select(_SeenNonceRow.digest).where(
                    _SeenNonceRow.tenant == tenant[:64], _SeenNonceRow.platform == platform[:32],
                    _SeenNonceRow.nonce == nonce[:128])).first()
            return first if first is not None else ""

    def prune_nonces(self, before: datetime) -> int:
        """Drop nonces recorded before ``before`` (older than every replay window:
        their timestamps are refused as stale anyway); returns how many."""
        with self._write() as s:  # type: ignore[attr-defined]
            result = s.exec(delete(_SeenNonceRow).where(_SeenNonceRow.seen_at < before))  # type: ignore[call-overload]
            return int(result.rowcount or 0)


# == end of the signed-callback block =========================================


class Store(_SeenNonces):
    """SQL source of truth. Thread-safe; methods are synchronous (call them in a
    thread from async code).

    ``url``: SQLAlchemy URL (``sqlite:///path`` or ``postgresql://…``);
    ``schema``: PostgreSQL schema to create and use (None: the default).
    Raises StoreError when the database cannot be reached.
    """

    def __init__(self, url: str, schema: str | None = None) -> None:
        self.url = _normalise_url(url)
        self.schema = schema
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict = {}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        elif schema:
            kwargs["connect_args"] = {"options": f"-csearch_path={schema}"}
        kwargs["pool_pre_ping"] = not self.is_sqlite
        self.engine = create_engine(self.url, **kwargs)
        self._write_lock = threading.RLock() if self.is_sqlite else _NullLock()
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
        # write sessions carry this option: on SQLite it makes them BEGIN IMMEDIATE
        self._write_engine = self.engine.execution_options(huiyi_write=True)
        try:
            if schema and not self.is_sqlite:
                with self.engine.begin() as conn:
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            SQLModel.metadata.create_all(self.engine)
            self._add_missing_columns()
        except OperationalError as exc:
            raise StoreError(f"cannot open database {self.engine.url.render_as_string(hide_password=True)}: {exc}") from exc

    def _add_missing_columns(self) -> None:
        """Bring tables of an older huiyi up to date: columns added since (all of
        them nullable or with an empty default) are added in place, so an existing
        data root keeps working. Never drops or changes a column."""
        from sqlalchemy import inspect as sa_inspect

        insp = sa_inspect(self.engine)
        for table in SQLModel.metadata.sorted_tables:
            if not insp.has_table(table.name, schema=self.schema):
                continue
            have = {c["name"] for c in insp.get_columns(table.name, schema=self.schema)}
            for col in table.columns:
                if col.name in have:
                    continue
                kind = col.type.compile(dialect=self.engine.dialect)
                default = "" if col.nullable else " NOT NULL DEFAULT ''" if kind.upper().startswith(("VARCHAR", "TEXT")) \
                    else " NOT NULL DEFAULT 0"
                with self.engine.begin() as conn:
                    conn.execute(text(f'ALTER TABLE "{table.name}" ADD COLUMN "{col.name}" {kind}{default}'))
                log.warning("store: added column %s.%s (schema from an older version)", table.name, col.name)
            for index in table.indexes:  # indexes added since (create_all skips existing tables)
                index.create(self.engine, checkfirst=True)

    # -- sessions -------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._write_lock, Session(self._write_engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except IntegrityError:
                s.rollback()
                raise
            except OperationalError as exc:
                s.rollback()
                raise StoreError(str(exc)) from exc

    @contextmanager
    def _write_conn(self) -> Iterator[Connection]:
        """A write transaction on a bare connection (Core statements only): what
        ``_write`` does without the ORM session's own cost, for the hot paths."""
        with self._write_lock:
            try:
                with self._write_engine.begin() as conn:
                    yield conn
            except OperationalError as exc:
                raise StoreError(str(exc)) from exc

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            yield s

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()

    # -- memories -------------------------------------------------------

    def add(self, ns: Namespace, memory: Memory, source_fp: str = "") -> Memory:
        """Insert ``memory`` into ``ns`` with an index upsert in the outbox.

        ``source_fp``: fingerprint of the text the memory was learned from (kept so
        that a forget can tombstone the evidence as well as the memory text).
        ``memory.namespace`` must equal ``ns`` (ValueError otherwise). Raises
        ``sqlalchemy.exc.IntegrityError`` when ``(ns, memory.key)`` already
        exists — the caller decides between dedupe and update.
        """
        if memory.namespace != ns:
            raise ValueError("memory.namespace differs from the namespace of the call")
        from memory.text import normalise

        now = utcnow()
        created = memory.created_at or now
        values = dict(
            id=memory.id,
            namespace=str(ns),
            tenant=ns.tenant,
            text=memory.text,
            norm=normalise(memory.text),
            category=memory.category.value,
            key=memory.key,
            importance=memory.importance,
            valence=memory.valence,
            arousal=memory.arousal,
            emotion=memory.emotion,
            origin=memory.origin.key if memory.origin else "",
            visibility=memory.visibility.value,
            source_message_id=memory.source_message_id,
            created_at=created,
            updated_at=memory.updated_at or created,
            valid_from=memory.valid_from or created,
            event_time=memory.event_time,
            version=memory.version,
            access_times=json.dumps([created.isoformat()]),
            source_fp=source_fp,
        )
        # Core inserts, not ORM objects: this is the capture hot path, and building
        # SQLModel rows (validation, attribute instrumentation) cost more than the SQL
        with self._write_conn() as conn:
            conn.execute(insert(_MemoryRow.__table__), [values])  # type: ignore[attr-defined]
            conn.execute(insert(_IndexOpRow.__table__),  # type: ignore[attr-defined]
                         [dict(namespace=str(ns), memory_id=memory.id, op="upsert", created_at=now, attempts=0)])
        return _to_memory(SimpleNamespace(**values))  # type: ignore[arg-type]

    def get(self, ns: Namespace, memory_id: str) -> Memory:
        """The live memory ``memory_id`` of ``ns``; NotFoundError if it is not in ``ns``."""
        with self._read() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)).first()
        if row is None:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return _to_memory(row)

    def get_many(self, ns: Namespace, ids: Sequence[str]) -> dict[str, Memory]:
        """Live memories of ``ns`` among ``ids`` (ids of other namespaces are simply absent)."""
        if not ids:
            return {}
        t = _MemoryRow.__table__  # type: ignore[attr-defined]
        # `namespace || ''`: still filtered on the namespace, but not through its index —
        # SQLite otherwise scans a large namespace for ~80 ids instead of looking each
        # up by primary key (5 ms vs 0.9 ms at 10k memories)
        q = select(t).where(t.c.id.in_(list(ids)), t.c.namespace.concat("") == str(ns))
        with self.engine.connect() as conn:  # plain rows, not ORM objects: recall reads ~80 per turn
            rows = conn.execute(q).all()
        return {r.id: _to_memory(r, ns) for r in rows}  # type: ignore[arg-type]

    def live_if_at_most(self, ns: Namespace, n: int) -> list[MemoryText] | None:
        """Every live memory of ``ns`` when it holds at most ``n``, else None (one
        query of at most ``n + 1`` rows), as ``MemoryText``: what a search reads,
        with the whole memory built on demand (``MemoryText.memory()``) — the exact
        recall of small namespaces builds only its candidates."""
        t = _MemoryRow.__table__  # type: ignore[attr-defined]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.namespace == str(ns)).limit(n + 1)).all()
        if len(rows) > n:
            return None
        return [MemoryText(r.id, ns, r.text, Visibility(r.visibility), r.origin, r) for r in rows]

    def find_by_key(self, ns: Namespace, key: str) -> Memory | None:
        """The live memory of ``ns`` with canonical ``key``, or None."""
        with self._read() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.key == key)).first()
        return _to_memory(row) if row else None

    def key_and_tombstone(self, ns: Namespace, key: str, fingerprints: Sequence[str]) -> tuple[Memory | None, datetime | None]:
        """What an add in ``ns`` checks first, read in one session: the live memory
        with canonical ``key`` (or None) and the latest forget of any of
        ``fingerprints`` (None when none was forgotten)."""
        prints = sorted(set(fingerprints))
        # statements built once (module level) and run on a bare connection: on the
        # capture hot path, building and hashing ORM statements cost more than SQLite
        with self.engine.connect() as conn:
            row = conn.execute(_KEY_SQL, {"ns": str(ns), "key": key}).first()
            forgotten = conn.execute(_TOMBSTONE_SQL, {"ns": str(ns), "fps": prints}).scalar() if prints else None
        when = _aware(forgotten)
        return (_to_memory(row, ns) if row else None), when  # type: ignore[arg-type]

    def list(self, ns: Namespace, limit: int = 50, offset: int = 0) -> list[Memory]:
        """Live memories of ``ns``, newest first."""
        with self._read() as s:
            rows = s.exec(
                select(_MemoryRow)
                .where(_MemoryRow.namespace == str(ns))
                .order_by(_MemoryRow.updated_at.desc(), _MemoryRow.id)  # type: ignore[attr-defined]
                .offset(offset)
                .limit(limit)
            ).all()
        return [_to_memory(r) for r in rows]

    def count(self, ns: Namespace) -> int:
        """Number of live memories in ``ns``."""
        from sqlalchemy import func

        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_MemoryRow).where(_MemoryRow.namespace == str(ns))).one())

    def supersede(self, ns: Namespace, memory_id: str, new: Memory, at: datetime | None = None,
                  source_fp: str = "", key: str | None = None) -> Memory:
        """Latest-wins update: the current version goes to history with its validity
        closed at ``at``; the live row keeps its id at version + 1 with ``new``'s text,
        category, emotion and importance. ``key`` (the edit path) also moves the row
        to another canonical key — IntegrityError if another memory of ``ns`` holds
        it. NotFoundError if the memory is not in ``ns``."""
        at = at or utcnow()
        from memory.text import normalise

        with self._write() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)
                         .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in {ns}")
            s.add(_HistoryRow(memory_id=row.id, namespace=row.namespace, version=row.version, text=row.text,
                              category=row.category, key=row.key, origin=row.origin,
                              visibility=row.visibility, source_message_id=row.source_message_id,
                              source_fp=row.source_fp, valid_from=row.valid_from, valid_to=at))
            row.text = new.text
            row.norm = normalise(new.text)
            row.category = new.category.value
            if key is not None:
                row.key = key
            row.importance = new.importance
            row.valence, row.arousal, row.emotion = new.valence, new.arousal, new.emotion
            if new.source_message_id:  # new evidence: the text now discloses as where it was said
                row.source_message_id = new.source_message_id
                if new.origin is not None:
                    row.origin = new.origin.key
                    row.visibility = new.visibility.value
            row.source_fp = source_fp or row.source_fp
            row.event_time = new.event_time or row.event_time
            row.version += 1
            row.updated_at = at
            row.valid_from = at
            s.add(row)
            s.add(_IndexOpRow(namespace=str(ns), memory_id=row.id, op="upsert", created_at=at))
        return _to_memory(row)

    def find_by_source(self, ns: Namespace, chat: ChatRef | None, message_id: str) -> list[Memory]:
        """Live memories of ``ns`` learned from message ``message_id`` of ``chat``
        (the edit path), oldest first."""
        with self._read() as s:
            rows = s.exec(select(_MemoryRow).where(
                _MemoryRow.namespace == str(ns), _MemoryRow.source_message_id == message_id,
                _MemoryRow.origin == (chat.key if chat else "")).order_by(_MemoryRow.created_at, _MemoryRow.id)).all()  # type: ignore[arg-type]
        return [_to_memory(r) for r in rows]

    def fingerprints(self, ns: Namespace, memory_id: str) -> set[str]:
        """Evidence fingerprints (``source_fp``) of every version of ``memory_id`` in
        ``ns`` (empty strings left out); NotFoundError if it is unknown in ``ns``."""
        with self._read() as s:
            live = s.exec(select(_MemoryRow.source_fp).where(_MemoryRow.namespace == str(ns),
                                                             _MemoryRow.id == memory_id)).all()
            hist = s.exec(select(_HistoryRow.source_fp).where(_HistoryRow.namespace == str(ns),
                                                              _HistoryRow.memory_id == memory_id)).all()
        if not live and not hist:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return {fp for fp in [*live, *hist] if fp}

    def history(self, ns: Namespace, memory_id: str) -> list[Memory]:
        """All versions of ``memory_id`` in ``ns``, oldest first, the live one last
        (``valid_to`` None). Each version carries its own ``origin`` and
        ``visibility`` (the chat that text was said in), so a chat can apply the
        disclosure rule per version (``memory.explain.visible_in``); a version
        stored without them reads as origin None / PRIVATE (fails closed in
        groups). NotFoundError when neither live nor historic rows exist."""
        with self._read() as s:
            hist = s.exec(
                select(_HistoryRow)
                .where(_HistoryRow.namespace == str(ns), _HistoryRow.memory_id == memory_id)
                .order_by(_HistoryRow.version)  # type: ignore[arg-type]
            ).all()
            live = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)).first()
        out = [
            Memory(id=h.memory_id, namespace=ns, text=h.text, category=Category(h.category), key=h.key,
                   version=h.version, origin=_origin_or_none(h.origin),
                   visibility=_visibility_or_private(h.visibility), source_message_id=h.source_message_id, valid_from=_aware(h.valid_from),
                   valid_to=_aware(h.valid_to))
            for h in hist
        ]
        if live is not None:
            out.append(_to_memory(live))
        if not out:
            raise NotFoundError(f"no memory {memory_id!r} in {ns}")
        return out

    def delete(self, ns: Namespace, memory_id: str, tombstones: Sequence[str] = (), *,
               redact_sources: bool = False, purge: bool = False) -> None:
        """Remove the live memory and its history from ``ns`` and queue its index
        delete, in one transaction. ``tombstones`` (fingerprints) are recorded (or
        moved forward to now) in the same transaction. ``redact_sources`` also
        deletes the speaker's chat-log lines the memory was learned from (every
        version's source message in its origin chat); ``purge`` queues an index purge
        (compaction that drops the deleted row from LanceDB's files). NotFoundError
        if it is not in ``ns``."""
        now = utcnow()
        with self._write() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)
                         .with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in {ns}")
            hist = s.exec(select(_HistoryRow).where(_HistoryRow.namespace == str(ns),
                                                    _HistoryRow.memory_id == memory_id)).all()
            sources = {(h.origin, h.source_message_id) for h in hist} | {(row.origin, row.source_message_id)}
            s.delete(row)
            s.exec(delete(_HistoryRow).where(_HistoryRow.namespace == str(ns), _HistoryRow.memory_id == memory_id))  # type: ignore[call-overload]
            for fp in dict.fromkeys(tombstones):
                self._put_tombstone(s, ns, fp, now)
            if redact_sources:
                for origin, message_id in sources:
                    self._redact(s, ns, origin, message_id)
            s.add(_IndexOpRow(namespace=str(ns), memory_id=memory_id, op="delete", created_at=now))
            if purge:
                s.add(_IndexOpRow(namespace=str(ns), memory_id=memory_id, op="purge", created_at=now))

    @staticmethod
    def _put_tombstone(s: Session, ns: Namespace, fingerprint: str, at: datetime) -> None:
        row = s.exec(select(_TombstoneRow).where(_TombstoneRow.namespace == str(ns),
                                                 _TombstoneRow.fingerprint == fingerprint)).first()
        if row is None:
            s.add(_TombstoneRow(namespace=str(ns), fingerprint=fingerprint, forgotten_at=at))
        elif _aware(row.forgotten_at) < at:  # a second forget moves the line forward
            row.forgotten_at = at
            s.add(row)

    @staticmethod
    def _redact(s: Session, ns: Namespace, origin: str, message_id: str | None) -> None:
        """Delete the subject's own chat-log line ``message_id`` of chat ``origin``."""
        if not origin or not message_id:
            return
        platform, _, user_id = ns.subject.partition(":")
        if origin.split(":", 1)[0] != platform:  # a linked person:<id> subject has no platform line
            return
        s.exec(delete(_ChatLogRow).where(_ChatLogRow.tenant == ns.tenant, _ChatLogRow.chat == origin,  # type: ignore[call-overload]
                                         _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                                         _ChatLogRow.message_id == message_id))
        if not s.exec(select(_RedactionRow.id).where(
                _RedactionRow.tenant == ns.tenant, _RedactionRow.chat == origin, _RedactionRow.message_id == message_id,
                _RedactionRow.sender_id == user_id)).first():
            s.add(_RedactionRow(tenant=ns.tenant, chat=origin, message_id=message_id[:128], sender_id=user_id[:128],
                                at=utcnow()))

    def retract(self, ns: Namespace, memory_id: str) -> None:
        """Remove a memory whose evidence was withdrawn (its message was edited and no
        longer says it): live row and history go, no tombstone (the person did not
        ask to forget; saying it again is simply new evidence). NotFoundError if it
        is not in ``ns``."""
        self.delete(ns, memory_id)

    def add_tombstone(self, ns: Namespace, fingerprint: str) -> None:
        """Record a tombstone fingerprint in ``ns`` (a repeated one moves forward to now)."""
        with self._write() as s:
            self._put_tombstone(s, ns, fingerprint, utcnow())

    def _speaker_lines(self, ns: Namespace, group_key: str | None) -> list:
        """Filter on the chat-log lines the subject of ``ns`` said in its tenant (in
        group ``group_key`` and its topics only, when given)."""
        platform, _, user_id = ns.subject.partition(":")
        where = [_ChatLogRow.tenant == ns.tenant, _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                 _ChatLogRow.chat.startswith(f"{platform}:")]  # type: ignore[attr-defined]
        if group_key is not None:
            where.append(or_(_ChatLogRow.chat == group_key, _ChatLogRow.chat.startswith(f"{group_key}:")))  # type: ignore[attr-defined]
        return where

    def redact_speaker(self, ns: Namespace, group_key: str | None = None) -> int:
        """Delete every chat-log line the subject of ``ns`` said in its tenant, or in
        group ``group_key`` (any topic) only — captures still due on them included
        (``forget_subject``, ``/memory forget all``); returns the number of lines.
        A subject that is not a platform identity (``person:…``) has none."""
        where = self._speaker_lines(ns, group_key)
        with self._write() as s:
            rows = s.exec(select(_ChatLogRow.chat, _ChatLogRow.message_id).where(*where)).all()
            for chat, message_id in set(rows):
                self._redact(s, ns, chat, message_id)
            s.exec(delete(_ChatLogRow).where(*where))  # type: ignore[call-overload]
        return len(rows)

    def pending_capture_count(self, ns: Namespace, group_key: str | None = None) -> int:
        """How many of the lines the subject of ``ns`` said (in group ``group_key``
        only, when given) still have their capture into ``ns`` due."""
        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_ChatLogRow).where(
                *self._speaker_lines(ns, group_key), _ChatLogRow.capture_queued.is_not(None),  # type: ignore[union-attr]
                _ChatLogRow.capture_ns == str(ns))).one())

    def scrub(self) -> None:
        """After a forget: on SQLite, checkpoint and truncate the WAL so that no old
        page image with forgotten text stays in it (deleted cells are already zeroed
        by ``secure_delete``). Readers still inside a snapshot can make the truncate
        partial; that is logged and the next scrub finishes it. No-op on PostgreSQL."""
        if not self.is_sqlite:
            return
        with self._write_lock:
            raw = self.engine.raw_connection()
            try:
                busy, _log, _done = raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                raw.close()
        if busy:
            log.warning("store: WAL truncate after a forget was partial (a reader was active)")

    def touch(self, ns: Namespace, ids: Sequence[str], at: datetime | None = None) -> None:
        """Record that these memories of ``ns`` were recalled into a prompt at ``at``
        (keeps the last ACCESS_TIMES_KEPT times for ACT-R activation)."""
        if not ids:
            return
        at = at or utcnow()
        t = _MemoryRow.__table__  # type: ignore[attr-defined]
        with self._write_conn() as conn:
            rows = conn.execute(select(t.c.id, t.c.access_times).where(t.c.namespace == str(ns),
                                                                       t.c.id.in_(list(ids)))).all()
            if rows:
                conn.execute(update(t).where(t.c.namespace == str(ns), t.c.id == bindparam("mid"))
                             .values(access_times=bindparam("times")),
                             [{"mid": r.id, "times": json.dumps((json.loads(r.access_times or "[]")
                                                                 + [at.isoformat()])[-ACCESS_TIMES_KEPT:])}
                              for r in rows])

    def iter_ids(self, ns: Namespace) -> list[str]:
        """Ids of every live memory of ``ns`` (for index repair)."""
        with self._read() as s:
            return list(s.exec(select(_MemoryRow.id).where(_MemoryRow.namespace == str(ns))).all())

    def admin_namespaces(self, tenant: str | None) -> list[Namespace]:
        """Namespaces holding live memories, of one tenant or (None) of all.
        Only ``memory.admin`` calls this: it is the one tenant-wide read."""
        with self._read() as s:
            q = select(_MemoryRow.namespace).distinct()
            if tenant is not None:
                q = q.where(_MemoryRow.tenant == tenant)
            return [Namespace.parse(n) for n in s.exec(q).all()]

    # -- outbox ---------------------------------------------------------

    def pending_ops(self, limit: int = 500, *, ns: Namespace | None = None, memory_ids: Sequence[str] | None = None,
                    kinds: Sequence[str] | None = None) -> list[IndexOp]:
        """Oldest pending index operations (each carries its own namespace), all of
        them or only those of ``ns`` / ``memory_ids`` / op ``kinds`` (``upsert``,
        ``delete``, ``purge``) — so that a backlog never hides a fresh write's op."""
        q = select(_IndexOpRow)
        if ns is not None:
            q = q.where(_IndexOpRow.namespace == str(ns))
        if memory_ids is not None:
            q = q.where(_IndexOpRow.memory_id.in_(list(memory_ids)))  # type: ignore[attr-defined]
        if kinds is not None:
            q = q.where(_IndexOpRow.op.in_(list(kinds)))  # type: ignore[attr-defined]
        with self._read() as s:
            rows = s.exec(q.order_by(_IndexOpRow.id).limit(limit)).all()  # type: ignore[arg-type]
        return [IndexOp(r.id, Namespace.parse(r.namespace), r.memory_id, r.op, r.attempts) for r in rows]  # type: ignore[arg-type]

    def clear_ops(self, op_ids: Sequence[int]) -> None:
        """Remove applied outbox rows."""
        if not op_ids:
            return
        with self._write() as s:
            s.exec(delete(_IndexOpRow).where(_IndexOpRow.id.in_(list(op_ids))))  # type: ignore[attr-defined,call-overload]

    def fail_ops(self, op_ids: Sequence[int]) -> None:
        """Count a failed attempt on outbox rows (they stay queued)."""
        if not op_ids:
            return
        with self._write() as s:
            for r in s.exec(select(_IndexOpRow).where(_IndexOpRow.id.in_(list(op_ids)))).all():  # type: ignore[attr-defined]
                r.attempts += 1
                s.add(r)

    # -- deliveries, chat log, audit ------------------------------------

    def claim_delivery(self, key: str) -> bool:
        """Mark a platform delivery as processed. True the first time, False for a
        re-delivery of the same key (unique constraint; safe under concurrency)."""
        try:
            with self._write() as s:
                s.add(_DeliveryRow(key=key[:600], processed_at=utcnow()))
            return True
        except IntegrityError:
            return False

    def release_delivery(self, key: str) -> None:
        """Forget that a delivery was claimed (its turn failed before finishing), so
        the platform's retry is processed instead of dropped as a duplicate."""
        with self._write() as s:
            s.exec(delete(_DeliveryRow).where(_DeliveryRow.key == key[:600]))  # type: ignore[call-overload]

    def append_chat(self, tenant: str, chat: ChatRef, line: ChatLine, keep: int = 200, *,
                    capture: Namespace | None = None, claim: str | None = None) -> int | None:
        """Append a line to the chat's recent log, keeping at most ``keep`` lines;
        returns the line's id. A person's line that a forget redacted (same chat,
        message id and sender) is not appended again — a replay cannot bring it
        back; returns None then.

        ``capture``: the line still has to be captured into this namespace (the
        durable half of a capture that runs after the reply: ``pending_captures``
        finds it until ``capture_done``). A line with a capture due is not pruned.
        ``claim``: claim this delivery key (``claim_delivery``) in the same
        transaction, so that a crash cannot leave a claimed delivery without its
        line; raises DuplicateDelivery (and writes nothing) when it was claimed before."""
        table = _ChatLogRow.__table__  # type: ignore[attr-defined]
        try:
            return self._append_chat(table, tenant, chat, line, keep, capture, claim)
        except IntegrityError:
            if claim is None:
                raise
            raise DuplicateDelivery(claim) from None

    def _append_chat(self, table, tenant: str, chat: ChatRef, line: ChatLine, keep: int, capture: Namespace | None,
                     claim: str | None) -> int | None:
        with self._write() as s:
            if claim is not None:
                s.add(_DeliveryRow(key=claim[:600], processed_at=utcnow()))
                s.flush()
            if line.role == "user" and line.message_id and s.exec(select(_RedactionRow.id).where(
                    _RedactionRow.tenant == tenant, _RedactionRow.chat == chat.key,
                    _RedactionRow.message_id == line.message_id, _RedactionRow.sender_id == line.sender_id)).first():
                return None
            line_id = s.execute(insert(table).returning(table.c.id), [dict(
                tenant=tenant, chat=chat.key, role=line.role, sender_id=line.sender_id, sender_name=line.sender_name,
                message_id=line.message_id, text=line.text, at=line.at, capture_ns=str(capture) if capture else "",
                capture_queued=utcnow() if capture else None)]).scalar_one()
            cutoff = s.exec(
                select(_ChatLogRow.id).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key)
                .order_by(_ChatLogRow.id.desc()).offset(keep).limit(1)  # type: ignore[union-attr]
            ).first()
            if cutoff is not None:
                s.exec(delete(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key,  # type: ignore[call-overload]
                                                 _ChatLogRow.id <= cutoff, _ChatLogRow.capture_ns == ""))
        return int(line_id)

    def pending_captures(self, older_than: datetime, limit: int = 100) -> list[PendingCapture]:
        """Chat-log lines whose capture was queued before ``older_than`` and has not
        been marked done (a crash or a failure after the reply), oldest first."""
        with self._read() as s:
            rows = s.exec(select(_ChatLogRow).where(_ChatLogRow.capture_queued < older_than,  # type: ignore[operator]
                                                    _ChatLogRow.capture_ns != "")
                          .order_by(_ChatLogRow.id).limit(limit)).all()  # type: ignore[arg-type]
        return [PendingCapture(r.id, r.tenant, Namespace.parse(r.capture_ns), ChatRef.parse(r.chat), r.message_id,  # type: ignore[arg-type]
                               r.text, _aware(r.at)) for r in rows]  # type: ignore[arg-type]

    def capture_done(self, *line_ids: int) -> None:
        """Mark the captures of these chat-log lines done, in one transaction (a
        line pruned or redacted meanwhile is simply gone)."""
        if not line_ids:
            return
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        with self._write_conn() as conn:
            conn.execute(update(t).where(t.c.id.in_(list(line_ids))).values(capture_ns="", capture_queued=None))

    def chat_tail(self, tenant: str, chat: ChatRef, n: int = 8, *, max_age: timedelta | None = None,
                  now: datetime | None = None) -> list[ChatLine]:
        """The last ``n`` lines of the chat (of its topic when ``chat`` has a
        thread), oldest first; with ``max_age`` only lines said after
        ``now - max_age`` (``now`` defaults to the current UTC time)."""
        with self._read() as s:
            q = select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key)
            if max_age is not None:
                q = q.where(_ChatLogRow.at >= (now or utcnow()) - max_age)
            rows = s.exec(q.order_by(_ChatLogRow.id.desc()).limit(n)).all()  # type: ignore[union-attr]
        return [ChatLine(r.role, r.sender_id, r.text, _aware(r.at), r.message_id, r.sender_name) for r in reversed(rows)]  # type: ignore[arg-type]

    def audit(self, ns: Namespace, action: str, actor: str, memory_id: str | None = None, **detail: object) -> None:
        """Append an audit record (append-only). Never pass memory text of a forget."""
        with self._write_conn() as conn:
            conn.execute(insert(_AuditRow.__table__), [self._audit_values(ns, action, actor, memory_id, detail)])  # type: ignore[attr-defined]

    @staticmethod
    def _audit_values(ns: Namespace, action: str, actor: str, memory_id: str | None,
                      detail: dict[str, object]) -> dict[str, object]:
        return dict(at=utcnow(), actor=actor, action=action, namespace=str(ns), memory_id=memory_id,
                    detail=json.dumps(detail, ensure_ascii=False, default=str))

    def audit_records(self, ns: Namespace, limit: int = 100) -> list[dict]:
        """Audit records of ``ns``, newest first, as plain records (for admin views)."""
        with self._read() as s:
            rows = s.exec(select(_AuditRow).where(_AuditRow.namespace == str(ns))
                          .order_by(_AuditRow.id.desc()).limit(limit)).all()  # type: ignore[union-attr]
        return [{"at": _aware(r.at), "actor": r.actor, "action": r.action, "memory_id": r.memory_id,
                 "detail": json.loads(r.detail)} for r in rows]

    # -- identities (links written by memory.admin only) ----------------

    def resolve_identity(self, tenant: str, platform_subject: str) -> str | None:
        """The subject a platform identity (``tg:123``) is linked to in ``tenant``, or None."""
        with self._read() as s:
            row = s.exec(select(_IdentityRow).where(_IdentityRow.tenant == tenant,
                                                    _IdentityRow.platform_subject == platform_subject)).first()
        return row.subject if row else None

    def identities(self, ns: Namespace) -> list[str]:
        """Platform identities linked to ``ns``'s subject, sorted (empty when none)."""
        with self._read() as s:
            rows = s.exec(select(_IdentityRow.platform_subject).where(
                _IdentityRow.tenant == ns.tenant, _IdentityRow.subject == ns.subject)).all()
        return sorted(rows)

    def link_identities(self, tenant: str, platform_subjects: Sequence[str], subject: str, actor: str) -> None:
        """Point each platform identity of ``tenant`` at ``subject`` (insert or re-point)."""
        now = utcnow()
        with self._write() as s:
            for ps in platform_subjects:
                row = s.exec(select(_IdentityRow).where(_IdentityRow.tenant == tenant,
                                                        _IdentityRow.platform_subject == ps)).first()
                if row is None:
                    row = _IdentityRow(tenant=tenant, platform_subject=ps, subject=subject, linked_at=now, actor=actor)
                else:
                    row.subject, row.linked_at, row.actor = subject, now, actor
                s.add(row)

    def move_namespace(self, src: Namespace, dst: Namespace) -> tuple[list[str], list[str]]:
        """Move every memory, its history and the tombstones of ``src`` into ``dst``
        (same tenant; ValueError otherwise), in one transaction, with index outbox
        rows for both sides. Returns (ids gone from ``src``, ids changed in ``dst``).

        A memory whose canonical key already exists in ``dst`` is merged into that
        row: identical normalised text keeps the ``dst`` row (access times joined);
        a different text is a latest-wins update (the older text goes to history).
        """
        if src.tenant != dst.tenant:
            raise ValueError("identities can only be merged within one tenant")
        if src == dst:
            return [], []
        now = utcnow()
        gone: list[str] = []
        changed: list[str] = []
        with self._write() as s:
            rows = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(src))).all()
            by_key = {r.key: r for r in s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(dst))).all()}
            for r in rows:
                gone.append(r.id)
                other = by_key.get(r.key)
                hist = s.exec(select(_HistoryRow).where(_HistoryRow.namespace == str(src),
                                                        _HistoryRow.memory_id == r.id)).all()
                if other is None:
                    for h in hist:
                        h.namespace = str(dst)
                        s.add(h)
                    r.namespace = str(dst)
                    s.add(r)
                    changed.append(r.id)
                    s.add(_IndexOpRow(namespace=str(src), memory_id=r.id, op="delete", created_at=now))
                    s.add(_IndexOpRow(namespace=str(dst), memory_id=r.id, op="upsert", created_at=now))
                    continue
                for h in hist:
                    h.namespace, h.memory_id = str(dst), other.id
                    s.add(h)
                times = sorted(set(json.loads(other.access_times or "[]")) | set(json.loads(r.access_times or "[]")))
                other.access_times = json.dumps(times[-ACCESS_TIMES_KEPT:])
                if r.norm != other.norm:
                    newer, older = (r, other) if _aware(r.updated_at) > _aware(other.updated_at) else (other, r)
                    s.add(_HistoryRow(memory_id=other.id, namespace=str(dst), version=other.version,
                                      text=older.text, category=older.category, key=older.key,
                                      origin=older.origin, visibility=older.visibility,
                                      source_message_id=older.source_message_id, source_fp=older.source_fp,
                                      valid_from=older.valid_from, valid_to=newer.valid_from))
                    if newer is r:
                        other.text, other.norm, other.category = r.text, r.norm, r.category
                        # the text discloses as where it was said, not as the row it lands in
                        other.origin, other.visibility = r.origin, r.visibility
                        other.source_message_id, other.source_fp = r.source_message_id, r.source_fp
                        other.importance, other.valence, other.arousal, other.emotion = (
                            r.importance, r.valence, r.arousal, r.emotion)
                        other.updated_at, other.valid_from = r.updated_at, r.valid_from
                    other.version += 1
                s.add(other)
                s.delete(r)
                changed.append(other.id)
                s.add(_IndexOpRow(namespace=str(src), memory_id=r.id, op="delete", created_at=now))
                s.add(_IndexOpRow(namespace=str(dst), memory_id=other.id, op="upsert", created_at=now))
            s.flush()
            have = set(s.exec(select(_TombstoneRow.fingerprint).where(_TombstoneRow.namespace == str(dst))).all())
            for t in s.exec(select(_TombstoneRow).where(_TombstoneRow.namespace == str(src))).all():
                if t.fingerprint not in have:
                    s.add(_TombstoneRow(namespace=str(dst), fingerprint=t.fingerprint, forgotten_at=t.forgotten_at))
                s.delete(t)
            s.exec(delete(_LastRecallRow).where(_LastRecallRow.namespace == str(src)))  # type: ignore[call-overload]
        return gone, sorted(set(changed))

    # -- group-scoped listings (what a group may see, DESIGN rule 6) ----

    def _in_group(self, ns: Namespace, group_key: str):
        origin = _MemoryRow.origin
        return (_MemoryRow.namespace == str(ns), _MemoryRow.visibility == Visibility.GROUP.value,
                (origin == group_key) | origin.startswith(group_key + ":", autoescape=True))  # type: ignore[attr-defined]

    def list_in_group(self, ns: Namespace, group_key: str, limit: int = 50, offset: int = 0) -> list[Memory]:
        """Live memories of ``ns`` learned in the group ``group_key`` (a
        ``ChatRef.group_key``, any topic) and visible there, newest first."""
        with self._read() as s:
            rows = s.exec(select(_MemoryRow).where(*self._in_group(ns, group_key))
                          .order_by(_MemoryRow.updated_at.desc(), _MemoryRow.id)  # type: ignore[attr-defined]
                          .offset(offset).limit(limit)).all()
        return [_to_memory(r) for r in rows]

    def count_in_group(self, ns: Namespace, group_key: str) -> int:
        """How many memories ``list_in_group`` can return."""
        from sqlalchemy import func

        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_MemoryRow).where(*self._in_group(ns, group_key))).one())

    # -- last recall per namespace (memory.explain) ----------------------

    def save_last_recall(self, trace) -> None:
        """Replace the last-recall record of ``trace.namespace`` (a ``memory.explain.RecallTrace``)."""
        entries = json.dumps([{"id": e.memory_id, "pos": e.position, "score": e.score, "ranks": e.ranks,
                               "parts": None if e.parts is None else [e.parts.rrf, e.parts.retention,
                                                                      e.parts.activation, e.parts.emotion,
                                                                      e.parts.importance]}
                              for e in trace.entries])
        ns = trace.namespace
        t = _LastRecallRow.__table__  # type: ignore[attr-defined]
        values = dict(chat=trace.chat, at=trace.at, k=trace.k, fallback_reason=trace.fallback_reason, entries=entries)
        for attempt in (1, 2):  # two replicas may insert the first record at once
            try:
                with self._write_conn() as conn:
                    if conn.execute(update(t).where(t.c.namespace == str(ns)).values(**values)).rowcount == 0:
                        conn.execute(insert(t), [dict(namespace=str(ns), tenant=ns.tenant, **values)])
                return
            except IntegrityError:
                if attempt == 2:
                    raise

    def last_recall(self, ns: Namespace):
        """The last-recall record of ``ns`` (``memory.explain.RecallTrace``), or None."""
        from memory.explain import RecallTrace, TraceEntry
        from memory.types import ScoreParts

        with self._read() as s:
            row = s.get(_LastRecallRow, str(ns))
        if row is None:
            return None
        entries = tuple(TraceEntry(e["id"], e["pos"], e["score"], e["ranks"],
                                   ScoreParts(*e["parts"]) if e.get("parts") else None)
                        for e in json.loads(row.entries))
        return RecallTrace(ns, row.chat, _aware(row.at), row.k, row.fallback_reason, entries)  # type: ignore[arg-type]

    # -- confirmations awaited (shared by every replica) -----------------

    def put_pending(self, ns: Namespace, key: str, at: datetime) -> None:
        """Record (or renew) a confirmation awaited under ``key`` for ``ns`` at ``at``."""
        full = f"{ns}|{key}"[:600]
        with self._write() as s:
            row = s.get(_PendingRow, full)
            if row is None:
                row = _PendingRow(key=full, namespace=str(ns), created_at=at)
            row.created_at = at
            s.add(row)

    def take_pending(self, ns: Namespace, key: str) -> datetime | None:
        """Remove the confirmation awaited under ``key`` for ``ns``; when it was
        asked for, or None. Only one caller (of any replica) gets it."""
        full = f"{ns}|{key}"[:600]
        with self._write() as s:
            row = s.get(_PendingRow, full)
            if row is None:
                return None
            at = _aware(row.created_at)
            n = s.exec(delete(_PendingRow).where(_PendingRow.key == full)).rowcount  # type: ignore[call-overload]
        return at if n else None

    # -- tenant-wide counts (memory.admin.stats only) --------------------

    def tenant_counts(self, tenant: str) -> TenantCounts:
        """Counts over one tenant for ``memory.admin.stats``: the one tenant-wide
        aggregate read besides ``admin_namespaces``."""
        from sqlalchemy import func

        like = tenant.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"
        with self._read() as s:
            memories = s.exec(select(func.count()).select_from(_MemoryRow).where(_MemoryRow.tenant == tenant)).one()
            people = s.exec(select(func.count(func.distinct(_MemoryRow.namespace))).where(
                _MemoryRow.tenant == tenant)).one()
            chats = s.exec(select(func.count(func.distinct(_ChatLogRow.chat))).where(
                _ChatLogRow.tenant == tenant)).one()
            turns = s.exec(select(func.count()).select_from(_DeliveryRow).where(
                _DeliveryRow.key.like(like, escape="\\"))).one()  # type: ignore[attr-defined]
            recalls = s.exec(select(func.count()).select_from(_LastRecallRow).where(
                _LastRecallRow.tenant == tenant)).one()
            fallbacks = s.exec(select(func.count()).select_from(_LastRecallRow).where(
                _LastRecallRow.tenant == tenant, _LastRecallRow.fallback_reason != "")).one()
        return TenantCounts(int(memories), int(people), int(chats), int(turns), int(recalls), int(fallbacks))

    # -- edits and chat migration (Telegram) ------------------------------

    def edit_chat_line(self, tenant: str, chat: ChatRef, message_id: str, text: str) -> bool:
        """Replace the text of the person's line ``message_id`` in the chat log (an
        edited message); False when the line is no longer in the log."""
        with self._write() as s:
            rows = s.exec(select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key,
                                                    _ChatLogRow.role == "user", _ChatLogRow.message_id == message_id)).all()
            for row in rows:
                row.text = text
                s.add(row)
        return bool(rows)

    def migrate_chat(self, tenant: str, old: ChatRef, new: ChatRef, actor: str) -> ChatMigration:
        """Move one tenant's chat to a new id (Telegram group → supergroup): its chat
        log lines (every topic) and the origin of its memories follow, in one
        transaction; each moved memory gets an index upsert in the outbox (the
        index derives disclosure from the origin) and each namespace touched an
        audit record ``migrate_chat`` by ``actor``. Rows of other tenants are
        never read or written.

        ``old`` and ``new`` must be group chats of the same platform, without a
        thread (ValueError otherwise). Calling it again moves nothing.
        """
        if old.platform != new.platform or not (old.is_group and new.is_group) or old.thread_id or new.thread_id:
            raise ValueError("a chat migrates between group chats of one platform, without a topic")
        from sqlalchemy import or_

        now = utcnow()
        base, target = old.group_key, new.group_key
        touched: dict[str, int] = {}
        with self._write() as s:
            lines = s.exec(select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, or_(
                _ChatLogRow.chat == base, _ChatLogRow.chat.startswith(base + ":", autoescape=True)))).all()  # type: ignore[attr-defined]
            for line in lines:
                line.chat = target + line.chat[len(base):]
                s.add(line)
            mems = s.exec(select(_MemoryRow).where(_MemoryRow.tenant == tenant, or_(
                _MemoryRow.origin == base, _MemoryRow.origin.startswith(base + ":", autoescape=True)))).all()  # type: ignore[attr-defined]
            for mem in mems:
                mem.origin = target + mem.origin[len(base):]
                s.add(mem)
                s.add(_IndexOpRow(namespace=mem.namespace, memory_id=mem.id, op="upsert", created_at=now))
                touched[mem.namespace] = touched.get(mem.namespace, 0) + 1
            for ns, n in touched.items():
                s.add(_AuditRow(at=now, actor=actor, action="migrate_chat", namespace=ns, memory_id=None,
                                detail=json.dumps({"from": base, "to": target, "memories": n})))
        return ChatMigration(chat_lines=len(lines), memories=len(mems),
                             namespaces=tuple(Namespace.parse(n) for n in sorted(touched)))


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - trivial
    # the driver opens no transactions of its own: _sqlite_begin does, so that a
    # write transaction takes the write lock up front (BEGIN IMMEDIATE)
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA secure_delete=ON")  # a forget leaves no text in freed pages
    cur.close()


def _sqlite_begin(conn) -> None:  # pragma: no cover - trivial
    """Write sessions start with BEGIN IMMEDIATE (the busy timeout then covers
    lock waits, and no deferred read can fail to upgrade); reads autocommit
    statement by statement, which WAL never blocks."""
    if conn.get_execution_options().get("huiyi_write"):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

