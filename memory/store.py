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
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Index as SAIndex
from sqlalchemy import UniqueConstraint, event, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Field, Session, SQLModel, create_engine, delete, select

from memory.errors import NotFoundError, StoreError
from memory.types import Category, ChatRef, Memory, Namespace, Visibility

__all__ = ["Store", "ChatLine", "IndexOp", "new_memory_id", "utcnow"]

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
class IndexOp:
    """A pending index operation from the outbox: op is ``upsert`` or ``delete``."""

    id: int
    namespace: Namespace
    memory_id: str
    op: str
    attempts: int


def _to_memory(row: _MemoryRow) -> Memory:
    return Memory(
        id=row.id,
        namespace=Namespace.parse(row.namespace),
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


class Store:
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
        row = _MemoryRow(
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
        with self._write() as s:
            s.add(row)
            s.add(_IndexOpRow(namespace=str(ns), memory_id=memory.id, op="upsert", created_at=now))
        return _to_memory(row)

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
        with self._read() as s:
            rows = s.exec(
                select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id.in_(list(ids)))  # type: ignore[attr-defined]
            ).all()
        return {r.id: _to_memory(r) for r in rows}

    def find_by_key(self, ns: Namespace, key: str) -> Memory | None:
        """The live memory of ``ns`` with canonical ``key``, or None."""
        with self._read() as s:
            row = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.key == key)).first()
        return _to_memory(row) if row else None

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
                              source_message_id=row.source_message_id, source_fp=row.source_fp,
                              valid_from=row.valid_from, valid_to=at))
            row.text = new.text
            row.norm = normalise(new.text)
            row.category = new.category.value
            if key is not None:
                row.key = key
            row.importance = new.importance
            row.valence, row.arousal, row.emotion = new.valence, new.arousal, new.emotion
            if new.source_message_id:
                row.source_message_id = new.source_message_id
                row.origin = new.origin.key if new.origin else row.origin
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
        (``valid_to`` None). NotFoundError when neither live nor historic rows exist."""
        with self._read() as s:
            hist = s.exec(
                select(_HistoryRow)
                .where(_HistoryRow.namespace == str(ns), _HistoryRow.memory_id == memory_id)
                .order_by(_HistoryRow.version)  # type: ignore[arg-type]
            ).all()
            live = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id == memory_id)).first()
        out = [
            Memory(id=h.memory_id, namespace=ns, text=h.text, category=Category(h.category), key=h.key,
                   version=h.version, origin=ChatRef.parse(h.origin) if h.origin else None,
                   source_message_id=h.source_message_id, valid_from=_aware(h.valid_from),
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

    def tombstoned_at(self, ns: Namespace, fingerprint: str) -> datetime | None:
        """When a memory with this fingerprint was last forgotten in ``ns``, or None."""
        with self._read() as s:
            row = s.exec(select(_TombstoneRow).where(
                _TombstoneRow.namespace == str(ns), _TombstoneRow.fingerprint == fingerprint)).first()
        return _aware(row.forgotten_at) if row else None

    def redact_speaker(self, ns: Namespace) -> int:
        """Delete every chat-log line the subject of ``ns`` said in its tenant
        (``forget_subject``); returns the number of lines. A subject that is not a
        platform identity (``person:…``) has none."""
        platform, _, user_id = ns.subject.partition(":")
        with self._write() as s:
            rows = s.exec(select(_ChatLogRow.chat, _ChatLogRow.message_id).where(
                _ChatLogRow.tenant == ns.tenant, _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                _ChatLogRow.chat.startswith(f"{platform}:"))).all()  # type: ignore[attr-defined]
            for chat, message_id in set(rows):
                self._redact(s, ns, chat, message_id)
            s.exec(delete(_ChatLogRow).where(_ChatLogRow.tenant == ns.tenant, _ChatLogRow.role == "user",  # type: ignore[call-overload]
                                             _ChatLogRow.sender_id == user_id,
                                             _ChatLogRow.chat.startswith(f"{platform}:")))  # type: ignore[attr-defined]
        return len(rows)

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
        with self._write() as s:
            rows = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(ns), _MemoryRow.id.in_(list(ids)))).all()  # type: ignore[attr-defined]
            for row in rows:
                times = json.loads(row.access_times or "[]")
                times.append(at.isoformat())
                row.access_times = json.dumps(times[-ACCESS_TIMES_KEPT:])
                s.add(row)

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

    def append_chat(self, tenant: str, chat: ChatRef, line: ChatLine, keep: int = 200) -> bool:
        """Append a line to the chat's recent log, keeping at most ``keep`` lines.
        A person's line that a forget redacted (same chat, message id and sender)
        is not appended again — a replay cannot bring it back; returns False then."""
        with self._write() as s:
            if line.role == "user" and line.message_id and s.exec(select(_RedactionRow.id).where(
                    _RedactionRow.tenant == tenant, _RedactionRow.chat == chat.key,
                    _RedactionRow.message_id == line.message_id, _RedactionRow.sender_id == line.sender_id)).first():
                return False
            s.add(_ChatLogRow(tenant=tenant, chat=chat.key, role=line.role, sender_id=line.sender_id,
                              sender_name=line.sender_name, message_id=line.message_id, text=line.text, at=line.at))
            s.flush()
            cutoff = s.exec(
                select(_ChatLogRow.id).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key)
                .order_by(_ChatLogRow.id.desc()).offset(keep).limit(1)  # type: ignore[union-attr]
            ).first()
            if cutoff is not None:
                s.exec(delete(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key,  # type: ignore[call-overload]
                                                 _ChatLogRow.id <= cutoff))
        return True

    def chat_tail(self, tenant: str, chat: ChatRef, n: int = 8) -> list[ChatLine]:
        """The last ``n`` lines of the chat, oldest first."""
        with self._read() as s:
            rows = s.exec(
                select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key)
                .order_by(_ChatLogRow.id.desc()).limit(n)  # type: ignore[union-attr]
            ).all()
        return [ChatLine(r.role, r.sender_id, r.text, _aware(r.at), r.message_id, r.sender_name) for r in reversed(rows)]  # type: ignore[arg-type]

    def audit(self, ns: Namespace, action: str, actor: str, memory_id: str | None = None, **detail: object) -> None:
        """Append an audit record (append-only). Never pass memory text of a forget."""
        with self._write() as s:
            s.add(_AuditRow(at=utcnow(), actor=actor, action=action, namespace=str(ns), memory_id=memory_id,
                            detail=json.dumps(detail, ensure_ascii=False, default=str)))

    def audit_records(self, ns: Namespace, limit: int = 100) -> list[dict]:
        """Audit records of ``ns``, newest first, as plain records (for admin views)."""
        with self._read() as s:
            rows = s.exec(select(_AuditRow).where(_AuditRow.namespace == str(ns))
                          .order_by(_AuditRow.id.desc()).limit(limit)).all()  # type: ignore[union-attr]
        return [{"at": _aware(r.at), "actor": r.actor, "action": r.action, "memory_id": r.memory_id,
                 "detail": json.loads(r.detail)} for r in rows]


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

