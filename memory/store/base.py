"""The store's engine and its one transaction boundary, shared by every part.

``StoreBase`` opens the database (creating or upgrading its schema through
Alembic, ``memory.store.migrate``) and owns the only ways to talk to it:
``_write`` (an ORM session in a write transaction), ``_write_conn`` (the same
on a bare connection, for Core statements on hot paths) and ``_read``. On SQLite every
write holds a process-wide lock and starts with ``BEGIN IMMEDIATE``; on
PostgreSQL the lock is a no-op and the database orders writers. The parts of
``memory.store.Store`` (memories, chat log, outbox, audit, identities, command
state) subclass it and never open an engine connection for writing themselves.

``namespace_lock`` serialises the writers of a namespace across processes (two
gateway replicas on one PostgreSQL): a transaction-scoped advisory lock per
namespace, held on a connection of its own pool for as long as the caller's
block runs (a read, its checks and the writes they decide, in several
transactions). On SQLite it is a no-op: the core's in-process lock orders the
writers of one gateway, and replicas need PostgreSQL.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from alembic.util import CommandError
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session, create_engine

from memory.errors import StoreError
import memory.store.migrate as _migrate
from memory.store.tables import _normalise_url, _sqlite_begin, _sqlite_pragmas

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
"""PostgreSQL: seconds to establish a connection (libpq ``connect_timeout``)."""
STATEMENT_TIMEOUT_S = 30.0
"""PostgreSQL: longest statement (server-side ``statement_timeout``), seconds."""
POOL_TIMEOUT_S = 10.0
"""Seconds to wait for a free pooled connection before StoreError."""
LOCK_POOL = (4, 28)
"""PostgreSQL: (pool size, overflow) of the connections that hold namespace
locks: one per namespace being written at once in this process (the default
thread pool runs at most 32 writers)."""


def advisory_key(schema: str | None, ns: object) -> int:
    """The PostgreSQL advisory lock key of namespace ``ns`` in ``schema``: the first
    8 bytes of BLAKE2b over ``"<schema>|<namespace>"`` as a signed 64-bit integer
    (the ``bigint`` of ``pg_advisory_xact_lock``). Two namespaces sharing a key
    (odds about n²/2⁶⁵) only wait for each other; nothing is lost."""
    digest = hashlib.blake2b(f"{schema or ''}|{ns}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def utcnow() -> datetime:
    """Timezone-aware current UTC time."""
    return datetime.now(timezone.utc)


def new_memory_id() -> str:
    """A short random id (12 hex chars), safe in filters and in ``[src:ID]`` citations."""
    return uuid.uuid4().hex[:12]


class _NullLock:
    """The write lock of a PostgreSQL store: none (the database orders writers)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def raw_rows(conn, sql: str, params: tuple) -> list[tuple]:
    """``sql`` run through the DBAPI cursor of SQLAlchemy connection ``conn``
    (placeholders: ``StoreBase.mark``), its rows as plain tuples: for the hot
    reads whose rows SQLAlchemy's per-value result processing would cost more
    than the query (recall's candidates, a namespace's stamps)."""
    cur = conn.connection.cursor()
    try:
        cur.execute(sql, params)
        return cur.fetchall()
    finally:
        cur.close()


class DbapiStatement:
    """A Core statement compiled once for one dialect, to run through the DBAPI
    cursor of a write transaction (``DbapiWriter``): for the capture path's
    writes, where SQLAlchemy's per-statement work (cache key, execution context,
    result) cost more than SQLite's. ``params(values)`` gives the driver what
    SQLAlchemy would have sent: each bound value converted by its type's own
    bind processor (SQLite's datetime text, for one), the statement's literals
    filled in; ``values`` by bind name (an insert's: its column names, those of
    ``column_keys``). Raises KeyError for a required value missing."""

    def __init__(self, stmt, dialect, column_keys: list[str] | None = None) -> None:
        compiled = stmt.compile(dialect=dialect, column_keys=column_keys)
        self.sql = str(compiled)
        self._positional = bool(dialect.positional)
        binds = compiled.binds
        self._names = list(compiled.positiontup or ()) if self._positional else list(binds)
        self._fixed = {name: b.effective_value for name, b in binds.items() if not b.required}
        self._convert = {name: b.type.dialect_impl(dialect).bind_processor(dialect) for name, b in binds.items()}

    def params(self, values: dict) -> tuple | dict:
        """The driver's parameters of one execution (a tuple for a positional
        driver, sqlite3's; a dict for psycopg's named style)."""
        out = []
        for name in self._names:
            v = values[name] if name in values else self._fixed[name]
            convert = self._convert[name]
            out.append(convert(v) if convert is not None and v is not None else v)
        return tuple(out) if self._positional else dict(zip(self._names, out))


class DbapiWriter:
    """The DBAPI cursor of the SQLAlchemy connection ``conn`` inside its write
    transaction (``StoreBase._write_conn``: SQLAlchemy still begins, commits or
    rolls back, and sees the transaction), for ``DbapiStatement``s. The
    driver's integrity error becomes SQLAlchemy's ``IntegrityError`` (what the
    callers of a Core write catch), any other driver error ``StoreError`` —
    the statement in the message, never its parameters. Use as a context
    manager: the cursor is closed at its end."""

    def __init__(self, conn) -> None:
        self._dbapi = conn.dialect.dbapi
        self._cur = conn.connection.cursor()

    def run(self, stmt: DbapiStatement, values: dict | list[dict]) -> None:
        """Execute ``stmt`` with ``values`` (a list: one execution per row, one
        ``executemany``); a statement with RETURNING has its rows read and dropped."""
        try:
            if isinstance(values, list):
                self._cur.executemany(stmt.sql, [stmt.params(v) for v in values])
            else:
                self._cur.execute(stmt.sql, stmt.params(values))
                if self._cur.description is not None:
                    self._cur.fetchall()
        except self._dbapi.IntegrityError as exc:
            raise IntegrityError(stmt.sql, None, exc) from exc
        except self._dbapi.Error as exc:
            raise StoreError(f"{type(exc).__name__}: {exc} [{stmt.sql.split('(', 1)[0].strip()}]") from exc

    def __enter__(self) -> DbapiWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()


def raw_datetime(value):
    """A timestamp column as ``raw_rows`` hands it back, as a datetime: SQLite
    gives the stored text, PostgreSQL a datetime already; None stays None."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


class StoreBase:
    """Engine, schema and transactions of a ``Store`` (see ``memory.store.Store``
    for the whole surface).

    ``url``: SQLAlchemy URL (``sqlite:///path``, ``postgres://…`` or
    ``postgresql://…``; PostgreSQL URLs are driven by psycopg 3);
    ``schema``: PostgreSQL schema to create and use (None: the default; ignored
    on SQLite); ``migrate``: create an empty database's tables, or upgrade an
    older one to this code's revision (``memory.store.migrate.prepare``; off only
    for ``huiyi db`` commands, which report what they do). Raises StoreError when
    the database cannot be reached or its schema cannot be brought up to date.
    """

    def __init__(self, url: str, schema: str | None = None, *, migrate: bool = True) -> None:
        self.url = _normalise_url(url)
        self.schema = schema
        self.is_sqlite = self.url.startswith("sqlite")
        #: the DBAPI placeholder of ``raw_rows`` statements (sqlite3 ``?``, psycopg ``%s``)
        self.mark = "?" if self.is_sqlite else "%s"
        kwargs: dict = {"pool_timeout": POOL_TIMEOUT_S}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        else:
            # a stalled database must fail a turn in seconds (503), not hold it for minutes
            options = f"-c statement_timeout={int(STATEMENT_TIMEOUT_S * 1000)}"
            if schema:
                options = f"-csearch_path={schema} {options}"
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S, "options": options}
        kwargs["pool_pre_ping"] = not self.is_sqlite
        # a database error's text and traceback carry the statement, never its
        # parameters: those are what people said, and they reach logs
        kwargs["hide_parameters"] = True
        self.engine = create_engine(self.url, **kwargs)
        self._write_lock = threading.RLock() if self.is_sqlite else _NullLock()
        # namespace locks wait on their own pool: a holder never competes with the
        # writes it is about to make for a connection
        self._lock_engine = None if self.is_sqlite else create_engine(
            self.url, pool_size=LOCK_POOL[0], max_overflow=LOCK_POOL[1], **kwargs)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
        # write sessions carry this option: on SQLite it makes them BEGIN IMMEDIATE
        self._write_engine = self.engine.execution_options(huiyi_write=True)
        try:
            if schema and not self.is_sqlite:
                with self.engine.begin() as conn:
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            if migrate:
                with self._write_lock, self._write_engine.begin() as conn:
                    _migrate.prepare(conn, self.schema)
        except (DBAPIError, PoolTimeout, CommandError) as exc:
            raise StoreError(f"cannot open database {self.engine.url.render_as_string(hide_password=True)}: {exc}") from exc

    # -- schema (Alembic) ---------------------------------------------------

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at (None: empty, or written
        before Alembic). Raises StoreError when the database cannot be reached."""
        try:
            with self.engine.connect() as conn:
                return _migrate.current(conn, self.schema)
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(str(exc)) from exc

    def is_new(self) -> bool:
        """True when the database holds none of huiyi's tables (``huiyi db
        upgrade`` says it created them rather than upgraded them). Raises
        StoreError when the database cannot be reached."""
        try:
            with self.engine.connect() as conn:
                return _migrate.is_new(conn, self.schema)
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(str(exc)) from exc

    def ping(self) -> str:
        """Prove the database answers and holds the store's schema: reads the
        Alembic revision (the readiness probe). Raises StoreError otherwise."""
        try:
            with self.engine.connect() as conn:
                return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one())
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(f"database unreachable: {type(exc).__name__}") from exc
        except Exception as exc:  # noqa: BLE001 - e.g. NoResultFound: no revision stamped
            raise StoreError(f"database has no schema revision: {type(exc).__name__}") from exc

    def upgrade_schema(self) -> tuple[str | None, str]:
        """Upgrade the database to this code's head revision in one transaction;
        returns (revision before, revision after). Raises StoreError when the
        database cannot be reached or the upgrade fails (nothing is left half-done)."""
        try:
            with self._write_lock, self._write_engine.begin() as conn:
                return _migrate.upgrade(conn, self.schema)
        except (DBAPIError, PoolTimeout, CommandError) as exc:
            raise StoreError(f"schema upgrade failed: {exc}") from exc

    # -- namespace locks across processes ----------------------------------

    @contextmanager
    def namespace_lock(self, *namespaces: object) -> Iterator[None]:
        """Hold the write lock of these namespaces (``Namespace`` values or their
        string forms) against every other process on this database until the block
        ends. PostgreSQL: one transaction on a connection of the lock pool takes
        ``pg_advisory_xact_lock(advisory_key(schema, ns))`` for each, in sorted
        order (no deadlock between two multi-namespace holders), and ends with the
        block, which releases them — also when the process dies, as the server
        drops its connection. SQLite: no-op (module docstring).

        Waiting is bounded by the statement timeout (``STATEMENT_TIMEOUT_S``);
        raises StoreError when the lock cannot be had or the database is unreachable.
        Not re-entrant across calls: a block must not ask again for a namespace it holds."""
        if self._lock_engine is None or not namespaces:
            yield
            return
        keys = sorted({advisory_key(self.schema, ns) for ns in namespaces})
        try:
            conn = self._lock_engine.connect()
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(f"namespace lock unavailable: {exc}") from exc
        try:
            try:
                tx = conn.begin()
                for key in keys:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            except (DBAPIError, PoolTimeout) as exc:
                raise StoreError(f"namespace lock unavailable: {exc}") from exc
            try:
                yield
            finally:
                try:
                    tx.rollback()  # nothing was written on it: ending the transaction releases the locks
                except DBAPIError as exc:  # a lost connection has released them already
                    log.warning("store: namespace lock release: %s", exc)
        finally:
            conn.close()

    INDEX_WRITER = "~index-writer~"
    """The name whose advisory key is the index write lock (no namespace has this
    form: a namespace is ``tenant/subject``)."""

    @contextmanager
    def index_write_lock(self) -> Iterator[None]:
        """Hold the search index's write lock against every other process on this
        database until the block ends: the cross-process lock of an index on object
        storage, where no file can be locked (``memory.index.SearchIndex``'s
        ``write_lock``). PostgreSQL: ``pg_advisory_xact_lock`` of
        ``advisory_key(schema, INDEX_WRITER)`` in a transaction of the lock pool,
        released when the block ends or the holder's connection drops (a killed
        process hands it over as soon as the server sees its socket close).
        SQLite: no-op (one host; its file lock is the index's). Waiting is bounded
        by the statement timeout (``STATEMENT_TIMEOUT_S``); raises StoreError when
        the lock cannot be had. Not re-entrant (the index counts re-entries)."""
        with self.namespace_lock(self.INDEX_WRITER):
            yield

    # -- sessions: the one transaction boundary ---------------------------

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction in an ORM session, committed when the block ends.
        IntegrityError is rolled back and re-raised as is (callers turn it into
        their own answer); OperationalError becomes StoreError."""
        with self._write_lock, Session(self._write_engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except IntegrityError:
                s.rollback()
                raise
            except (DBAPIError, PoolTimeout) as exc:  # connection lost, timeout, database gone
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
            except IntegrityError:
                raise
            except (DBAPIError, PoolTimeout) as exc:
                raise StoreError(str(exc)) from exc

    def _read_rows(self, sql: str, params: tuple) -> list[tuple]:
        """``raw_rows`` of ``sql`` on a pooled connection (placeholders: ``mark``;
        table names unqualified, as the schema's search path resolves them): the
        hot reads of recall, without SQLAlchemy's statement and result machinery
        (each cost more than its query). A lost connection, a timeout or a driver
        error becomes StoreError, as in ``_read``."""
        try:
            with self.engine.connect() as conn:
                try:
                    return raw_rows(conn, sql, params)
                except conn.dialect.dbapi.Error as exc:  # the driver's own, not wrapped by SQLAlchemy
                    raise StoreError(str(exc)) from exc
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(str(exc)) from exc

    @contextmanager
    def _read(self) -> Iterator[Session]:
        """A read-only ORM session (no lock; WAL never blocks it on SQLite). A lost
        connection, a timeout or a missing database becomes StoreError (a 503)."""
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
            except (DBAPIError, PoolTimeout) as exc:
                raise StoreError(str(exc)) from exc

    def close(self) -> None:
        """Dispose of the connection pools."""
        self.engine.dispose()
        if self._lock_engine is not None:
            self._lock_engine.dispose()

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
