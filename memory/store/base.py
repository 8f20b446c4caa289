"""The store's engine and its one transaction boundary, shared by every part.

``StoreBase`` opens the database (creating or upgrading its schema through
Alembic, ``memory.store.migrate``) and owns the only ways to talk to it:
``_write`` (an ORM session in a write transaction), ``_write_conn`` (the same
on a bare connection, for Core or driver-level statements on hot paths),
``_write_one`` (one statement in a transaction of its own: autocommit on
PostgreSQL), ``_read`` (an ORM session) and ``_read_rows`` / ``_read_many``
(the hot reads: the DBAPI cursor, autocommit on PostgreSQL — one round trip a
call, its statements pipelined — retried once on a dropped connection) and
``_write_batch`` (statements whose results decide nothing inside the
transaction: on PostgreSQL pipelined in one round trip). On SQLite every
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

PostgreSQL connections are not pinged at checkout (a round trip each): a
connection the server closed — a restart, a terminated backend — leaves its
socket readable, which the checkout sees without a round trip and replaces
(``_dropped``); one that died silently fails its statement, and a read is
then repeated once on a fresh connection.
"""

from __future__ import annotations

import hashlib
import logging
import re
import select
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone

from alembic.util import CommandError
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session, create_engine

from memory.errors import StoreError
import memory.store.migrate as _migrate
from memory.store.tables import _normalise_url, _sqlite_begin, _sqlite_pragmas
from memory.store.traces import HeldTraces

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


_IDLE = 0  # libpq's PQTRANS_IDLE (psycopg.pq.TransactionStatus.IDLE)


def _dropped(dbapi_conn, _record, _proxy) -> None:
    """Pool checkout of a PostgreSQL connection: a connection the server closed
    (a restart, an administrator's terminate, an idle timeout) is told apart
    without a round trip. The server sends its closing notice and the socket's
    end, so an idle connection whose socket is readable — or one the driver
    knows is closed — is dropped; SQLAlchemy's pool then takes a fresh one
    (``DisconnectionError``; in place of ``pool_pre_ping``, which cost a round
    trip on every checkout). What this cannot see (a connection that dies
    silently, with no packet from the server) fails its statement: a read
    (``StoreBase._read_many``) is retried once on a new connection, a write
    becomes StoreError as any failed write does."""
    if dbapi_conn.closed:
        raise DisconnectionError("connection closed")
    poll = select.poll()  # not select(): a busy process's descriptors pass FD_SETSIZE (1024)
    try:
        poll.register(dbapi_conn.fileno(), select.POLLIN)
        ready = poll.poll(0)
    except (OSError, ValueError) as exc:
        raise DisconnectionError(str(exc)) from exc
    if ready:  # an idle connection owes nothing to read: the server spoke first (to close it), or hung up
        raise DisconnectionError("the server closed the connection")
    if dbapi_conn.info.transaction_status != _IDLE:  # handed back inside a transaction (the autocommit
        raise DisconnectionError("the connection was left inside a transaction")  # pool resets nothing)


def sqlite_time(value: datetime | None) -> str | None:
    """``value`` as SQLAlchemy writes a ``DateTime`` into SQLite (its fields as
    they are, ``YYYY-MM-DD HH:MM:SS.ffffff``, the zone left out): the parameter
    of a driver-level statement that compares with or writes such a column."""
    if value is None:
        return None
    return (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}")


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


def _socket_lost(exc: Exception) -> bool:
    """True for a driver error raised when the connection's socket went away under a
    statement: psycopg's own OperationalError without a SQLSTATE ("connection socket
    closed", raised while waiting on the socket, before the connection is marked
    closed). A server's error has a SQLSTATE: a timeout or a refused statement is
    not a lost connection."""
    return type(exc).__name__ == "OperationalError" and getattr(exc, "sqlstate", "") is None


class DbapiWriter:
    """The DBAPI cursor of the SQLAlchemy connection ``conn`` inside its write
    transaction (``StoreBase._write_conn``: SQLAlchemy still begins, commits or
    rolls back, and sees the transaction), for ``DbapiStatement``s and SQL as
    the driver takes it. The driver's integrity error becomes SQLAlchemy's
    ``IntegrityError`` (what the callers of a Core write catch), any other
    driver error ``StoreError`` — the statement in the message, never its
    parameters. Each statement is told to the engine's ``before_cursor_execute``
    listeners first, as SQLAlchemy's own execution tells them. Use as a context
    manager: the cursors are closed at its end.

    ``batch`` (PostgreSQL, ``StoreBase._write_batch``; ``conn`` in autocommit):
    the statements are held until a second one comes; a lone statement runs
    by itself when the block ends (in autocommit, its own transaction: one
    round trip), and two or more go in psycopg's pipeline mode inside a
    transaction begun by hand — BEGIN, the statements and COMMIT sent
    together, one Sync: one round trip. Nothing is committed when the block
    raises or a statement fails (the pipeline's end syncs even then, so an
    implicit transaction would commit what was sent before the error: the
    COMMIT is queued only at a clean end). Errors of the database surface
    when the block ends."""

    def __init__(self, conn, *, batch: bool = False, chain: bool = False, events=None) -> None:
        self._dbapi = conn.dialect.dbapi
        self._conn = conn
        self._events = events if events is not None else conn  # whose before_cursor_execute listeners hear
        self._cur = conn.connection.cursor()
        self._held: list = [self._cur]  # every cursor used: closed at the block's end
        self._batch = batch or chain
        #: chain (PostgreSQL): the statements (positional SQL, parameters) sent as one at the block's end
        self._chain: list[tuple[str, tuple]] | None = [] if chain else None
        self._queue: list[tuple[str, Callable[[], None], bool]] = []  # batch: (sql, run it, needs a transaction)
        self._pipeline = None  # batch: psycopg's pipeline, once a second statement came
        self._pending: list[tuple[object, BatchRows]] = []  # rows to read when the block ends
        self._sql = ""  # the last statement sent: named in the error of a lone one
        #: the rowcount of the last ``run`` sent outside a pipeline (a lone statement's, once the block ended)
        self.rowcount = 0

    def run(self, stmt: DbapiStatement | str, values: dict | list[dict] | tuple) -> None:
        """Execute ``stmt`` with ``values`` (a list: one execution per row, one
        ``executemany``); a statement with RETURNING has its rows read and dropped.
        ``stmt`` may also be SQL as the driver takes it (placeholders: the
        store's ``mark``) with ``values`` its parameter tuple."""
        sql = stmt if isinstance(stmt, str) else stmt.sql
        cur = self._cur
        if self._chain is not None:
            if isinstance(values, list):
                raise ValueError("a chained write batch takes no executemany")
            self._chain.append((sql, values) if isinstance(stmt, str) else _positional(sql, stmt.params(values)))
            return
        if isinstance(stmt, str):
            params = values
            many = False
        elif isinstance(values, list):
            params, many = [stmt.params(v) for v in values], True
        else:
            params, many = stmt.params(values), False

        def go() -> None:
            self._announce(cur, sql, params, many)
            if many:
                cur.executemany(sql, params)
            else:
                cur.execute(sql, params)
            # in a pipeline the rows come at its sync: a fetch here would sync at once
            if self._pipeline is None:
                self.rowcount = int(cur.rowcount or 0)
                if cur.description is not None:
                    cur.fetchall()

        self._send(sql, go, many)

    def rows(self, sql: str, values: tuple) -> BatchRows:
        """Execute ``sql`` (as the driver takes it) with ``values`` on a cursor of its
        own and hand back its rows: ``BatchRows.value()``, once the block has ended
        in a batch, at once otherwise."""
        if self._chain is not None:
            raise ValueError("a chained write batch reads no rows")
        cur = self._conn.connection.cursor()
        self._held.append(cur)
        out = BatchRows()

        def go() -> None:
            self._announce(cur, sql, values, False)
            cur.execute(sql, values)
            self._pending.append((cur, out))

        self._send(sql, go, False)
        if not self._batch:
            self._read_pending()
        return out

    def _send(self, sql: str, go: Callable[[], None], transaction: bool) -> None:
        """Run ``go`` (one statement) now, or hold it (a batch's first)."""
        if self._batch and self._pipeline is None:
            self._queue.append((sql, go, transaction))
            if len(self._queue) == 1 and not transaction:
                return
            self._open()
            return
        self._sql = sql
        self._call(go, sql)

    def _call(self, go: Callable[[], None], sql: str) -> None:
        try:
            go()
        except self._dbapi.IntegrityError as exc:
            raise IntegrityError(sql, None, exc) from exc
        except self._dbapi.Error as exc:
            raise StoreError(f"{type(exc).__name__}: {exc} [{sql.split('(', 1)[0].strip()}]") from exc

    def _open(self) -> None:
        """A batch's second statement: the pipeline and its transaction, then what was held."""
        self._pipeline = self._conn.connection.dbapi_connection.pipeline()
        self._call(self._pipeline.__enter__, "BEGIN")  # type: ignore[union-attr]
        self._call(lambda: self._cur.execute("BEGIN"), "BEGIN")
        queued, self._queue = self._queue, []
        for sql, go, _ in queued:
            self._call(go, sql)

    def _go_chain(self, sql: str, params: tuple) -> Callable[[], None]:
        cur = self._cur

        def go() -> None:
            self._announce(cur, sql, params, False)
            cur.execute(sql, params)
            self.rowcount = int(cur.rowcount or 0)

        return go

    def _read_pending(self) -> None:
        for cur, out in self._pending:
            out._rows = cur.fetchall()  # type: ignore[attr-defined]
        self._pending.clear()

    def _announce(self, cur, sql: str, params, many: bool) -> None:
        """Tell the engine's ``before_cursor_execute`` listeners of a statement about to
        run, as SQLAlchemy's own execution does (no execution context: None), so
        that what watches the engine's SQL sees these statements too."""
        listeners = self._events.dispatch.before_cursor_execute
        if listeners:
            for listen in listeners:
                listen(self._conn, cur, sql, params, None, many)

    def __enter__(self) -> DbapiWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self._batch:
                return
            if self._chain is not None:
                if exc_type is None and self._chain:
                    sql, params = _chained(self._chain)
                    self._call(self._go_chain(sql, params), sql)
                return
            if self._pipeline is None:  # nothing sent yet: a lone statement runs by itself
                if exc_type is None and self._queue:
                    ((sql, go, _),) = self._queue
                    self._call(go, sql)
                    self._read_pending()
                return
            try:  # the sync: every statement's result, the first error raised
                if exc_type is None:
                    try:
                        self._cur.execute("COMMIT")
                    except self._dbapi.Error:  # a statement's error, come back already: leave
                        try:  # pipeline mode first (its sync reports the same failure), then raise it
                            self._pipeline.__exit__(None, None, None)
                        except self._dbapi.Error:
                            pass
                        raise
                self._pipeline.__exit__(exc_type, exc, tb)
            except self._dbapi.IntegrityError as err:
                raise IntegrityError("(a pipelined transaction)", None, err) from err
            except self._dbapi.Error as err:
                raise StoreError(f"{type(err).__name__}: {err}") from err
            if exc_type is None:
                self._read_pending()
        finally:
            for cur in self._held:
                cur.close()


_NAMED = re.compile(r"%\((\w+)\)s")


def _positional(sql: str, params: dict) -> tuple[str, tuple]:
    """A psycopg statement with named parameters (``%(name)s``) as one with
    positional ones (``%s``) and its parameter tuple, in the order they appear."""
    names = _NAMED.findall(sql)
    return _NAMED.sub("%s", sql), tuple(params[n] for n in names)


def _chained(statements: list[tuple[str, tuple]]) -> tuple[str, tuple]:
    """PostgreSQL: ``statements`` (data-modifying, positional parameters) as one
    statement — each but the last a data-modifying ``WITH`` query, the last the
    main one. The server runs each of them once and to the end whether or not
    anything reads its result, all on one snapshot (none sees another's rows),
    and the one statement commits or fails whole."""
    if len(statements) == 1:
        return statements[0]
    parts = [f"w{i} AS ({sql})" for i, (sql, _) in enumerate(statements[:-1])]
    return (f"WITH {', '.join(parts)} {statements[-1][0]}",
            tuple(p for _, params in statements for p in params))


class BatchRows:
    """The rows of one statement of a ``DbapiWriter`` (``DbapiWriter.rows``)."""

    def __init__(self) -> None:
        self._rows: list[tuple] | None = None

    def value(self) -> list[tuple]:
        """The statement's rows as plain tuples. Raises RuntimeError before the
        pipeline that ran it has ended."""
        if self._rows is None:
            raise RuntimeError("the rows of a pipelined statement are read when its block ends")
        return self._rows


def raw_datetime(value):
    """A timestamp column as ``StoreBase._read_rows`` hands it back, as a datetime: SQLite
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
        #: the DBAPI placeholder of driver-level statements (``_read_rows``, ``_write_one``,
        #: ``exec_driver_sql``: sqlite3 ``?``, psycopg ``%s``)
        self.mark = "?" if self.is_sqlite else "%s"
        #: recall traces of this process's turns waiting for the write that carries them
        #: (``memory.store.traces``: a capture's row update, else a write of their own)
        self.held_traces = HeldTraces()
        kwargs: dict = {"pool_timeout": POOL_TIMEOUT_S}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        else:
            # a stalled database must fail a turn in seconds (503), not hold it for minutes
            options = f"-c statement_timeout={int(STATEMENT_TIMEOUT_S * 1000)}"
            if schema:
                options = f"-csearch_path={schema} {options}"
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S, "options": options}
        # no ping round trip at each checkout: ``_dropped`` looks at the socket
        # instead, and a read that still meets a dropped connection is retried
        kwargs["pool_pre_ping"] = False
        # a database error's text and traceback carry the statement, never its
        # parameters: those are what people said, and they reach logs
        kwargs["hide_parameters"] = True
        self.engine = create_engine(self.url, **kwargs)
        #: the driver's own error base (what the DBAPI cursor reads raise, unwrapped)
        self._driver_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        self._write_lock = threading.RLock() if self.is_sqlite else _NullLock()
        # namespace locks wait on their own pool: a holder never competes with the
        # writes it is about to make for a connection
        self._lock_engine = None if self.is_sqlite else create_engine(
            self.url, pool_size=LOCK_POOL[0], max_overflow=LOCK_POOL[1], **kwargs)
        # the hot reads and the writes of one pipelined transaction (``_read_many``,
        # ``_write_batch``, ``_write_one``) on PostgreSQL: a pool of its own whose
        # connections stay in autocommit — nothing to switch at each use, no ROLLBACK
        # to reset one at its return (a connection handed back inside a transaction
        # is replaced at its next checkout: ``_dropped``)
        self._auto_engine = None if self.is_sqlite else create_engine(
            self.url, isolation_level="AUTOCOMMIT", pool_reset_on_return=None, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
        else:
            for engine in (self.engine, self._lock_engine, self._auto_engine):
                event.listen(engine, "checkout", _dropped)
        # write sessions carry this option: on SQLite it makes them BEGIN IMMEDIATE
        self._write_engine = self.engine.execution_options(huiyi_write=True)
        # pipelined write transactions on PostgreSQL (``_write_batch``): the autocommit pool, as writes
        self._autocommit_engine = (None if self._auto_engine is None
                                   else self._auto_engine.execution_options(huiyi_write=True))
        try:
            if schema and not self.is_sqlite:
                with self.engine.begin() as conn:
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            if migrate:
                with self._write_lock, self._write_engine.begin() as conn:
                    _migrate.prepare(conn, self.schema)
        except (DBAPIError, PoolTimeout, CommandError) as exc:
            raise StoreError(f"cannot open database {self.engine.url.render_as_string(hide_password=True)}: {exc}") from exc

    def db_time(self, value: datetime | None):
        """``value`` as a parameter of a driver-level statement (``_read_rows``,
        ``exec_driver_sql``): as it is on PostgreSQL, ``sqlite_time`` on SQLite."""
        return sqlite_time(value) if self.is_sqlite else value

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
        dbapi = conn.connection.dbapi_connection
        try:
            # every capture's write takes one: as the driver takes it, the transaction begun by
            # hand in autocommit and pipelined with its locks — one round trip (psycopg's own
            # BEGIN would wait for its answer first), and one more for the ROLLBACK at the end
            try:
                dbapi.autocommit = True  # type: ignore[union-attr]
                cur = dbapi.cursor()  # type: ignore[union-attr]
                try:
                    with dbapi.pipeline():  # type: ignore[union-attr]
                        cur.execute("BEGIN")
                        for key in keys:
                            cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                finally:
                    cur.close()
            except self._driver_error as exc:  # the driver's own: a lost connection, the statement timeout
                self._end_lock(dbapi)
                raise StoreError(f"namespace lock unavailable: {exc}") from exc
            try:
                yield
            finally:
                self._end_lock(dbapi)  # nothing was written on it: ending the transaction releases the locks
        finally:
            conn.close()

    def _end_lock(self, dbapi) -> None:
        """End the transaction of a namespace lock on ``dbapi`` (releasing its locks) and
        take the connection out of autocommit; a lost connection has released them already."""
        try:
            dbapi.rollback()  # in autocommit too: a transaction begun by hand is rolled back
            dbapi.autocommit = False
        except self._driver_error as exc:
            log.warning("store: namespace lock release: %s", exc)

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

    @contextmanager
    def _write_chain(self) -> Iterator[DbapiWriter]:
        """``_write_batch`` for statements that each write rows no other of them
        writes or reads (INSERT, UPDATE, DELETE; no executemany, no rows read back):
        on PostgreSQL they go as one statement (``_chained``: each but the last a
        data-modifying ``WITH`` query) — one execution, in autocommit its own
        transaction, where a pipelined batch costs one per statement plus BEGIN
        and COMMIT in the client; nothing is sent when the block raises. SQLite:
        ``_write_batch``. IntegrityError as ``_write_conn``; other database
        errors become StoreError."""
        if self.is_sqlite:
            with self._write_batch() as cur:
                yield cur
            return
        with self._autocommit_writer(chain=True) as cur:
            yield cur

    @contextmanager
    def _write_batch(self) -> Iterator[DbapiWriter]:
        """A write transaction of driver-level statements whose results decide
        nothing inside it (``DbapiWriter.run``: ``DbapiStatement``s, or SQL with
        the store's ``mark`` placeholders), committed when the block ends.

        PostgreSQL: the connection is in autocommit and the transaction's
        BEGIN, statements and COMMIT are pipelined (psycopg's pipeline mode):
        sent as they come, one Sync at the block's end — one round trip where a
        ``_write_conn`` transaction costs one per statement plus BEGIN and
        COMMIT. The COMMIT is queued only when the block ends cleanly; when it
        raises, or a statement fails, nothing is committed and the transaction
        is rolled back (a second round trip, on failure only). An error of the
        database surfaces at the block's end. SQLite: a
        ``_write_conn`` transaction (BEGIN IMMEDIATE under the write lock, all in
        process). IntegrityError as ``_write_conn``; other database errors
        become StoreError."""
        if self.is_sqlite:
            with self._write_conn() as conn, DbapiWriter(conn) as cur:
                yield cur
            return
        with self._autocommit_writer(batch=True) as cur:
            yield cur

    @contextmanager
    def _autocommit_writer(self, **mode: bool) -> Iterator[DbapiWriter]:
        """PostgreSQL: a ``DbapiWriter`` on a connection of the autocommit pool
        (``mode``: ``chain=True`` for ``_write_chain``, ``batch=True`` for
        ``_write_batch``). IntegrityError as ``_write_conn``; other database errors
        become StoreError."""
        try:
            with self._autocommit_engine.begin() as conn, DbapiWriter(conn, events=self.engine, **mode) as cur:  # type: ignore[union-attr]
                yield cur
        except IntegrityError:
            raise
        except (DBAPIError, PoolTimeout) as exc:
            raise StoreError(str(exc)) from exc

    def _write_one(self, sql: str, params: tuple) -> int:
        """One write statement (placeholders: ``mark``) in a transaction of its own;
        returns its rowcount. PostgreSQL: in autocommit — the statement is its own
        transaction, without the BEGIN and COMMIT round trips; SQLite: a
        ``_write_conn`` transaction (BEGIN IMMEDIATE under the write lock, all in
        process). As the driver takes it (``exec_driver_sql``: nothing to build or
        compile), its ``before_cursor_execute`` listeners told; on PostgreSQL a
        ``_write_batch`` of one statement (the DBAPI cursor itself).
        IntegrityError as ``_write_conn``; other database errors become StoreError."""
        if self.is_sqlite:
            with self._write_conn() as conn:
                return int(conn.exec_driver_sql(sql, params).rowcount or 0)
        with self._write_batch() as cur:
            cur.run(sql, params)
        return cur.rowcount

    def _read_rows(self, sql: str, params: tuple) -> list[tuple]:
        """The rows of ``sql`` (placeholders: ``mark``; table names unqualified, as
        the schema's search path resolves them) as plain tuples, through the DBAPI
        cursor of a pooled connection: the hot reads, without SQLAlchemy's
        statement and result machinery (each cost more than its query).
        ``_read_many`` with one statement; raises StoreError."""
        return self._read_many(((sql, params),))[0]

    def _read_many(self, statements: Sequence[tuple[str, tuple]]) -> list[list[tuple]]:
        """The rows of each ``(sql, params)`` of ``statements``, in order, on one
        pooled connection (one checkout for several reads of a turn).

        PostgreSQL: the statements run in autocommit, no BEGIN or ROLLBACK around
        them — one round trip for one statement, and one for several, which are
        pipelined (``_pipelined_reads``). Each still reads its own snapshot, as every
        statement of a READ COMMITTED transaction does, so a later statement never
        sees older data than an earlier one. A connection found dropped (a server
        restart, a terminated backend: the driver's OperationalError) is thrown
        away and the reads run once more on a fresh one — a read changes nothing,
        so the retry is safe. SQLite: the driver's autocommit reads, which WAL
        never blocks. A lost connection, a timeout or a driver error becomes
        StoreError."""
        engine = self.engine if self._auto_engine is None else self._auto_engine  # PostgreSQL: in autocommit
        for attempt in (0, 1):
            try:
                fairy = engine.raw_connection()
            except (DBAPIError, PoolTimeout) as exc:
                raise StoreError(str(exc)) from exc
            dbapi = fairy.dbapi_connection
            try:
                if not self.is_sqlite and len(statements) > 1:
                    return self._pipelined_reads(dbapi, statements)
                cur = dbapi.cursor()  # type: ignore[union-attr]
                try:
                    out = []
                    for sql, params in statements:
                        cur.execute(sql, params)
                        out.append(cur.fetchall())
                    return out
                finally:
                    cur.close()
            except self._driver_error as exc:
                lost = not self.is_sqlite and (getattr(dbapi, "closed", False) or _socket_lost(exc))
                if lost:
                    fairy.invalidate(exc)
                if lost and attempt == 0:
                    log.warning("store: a pooled connection was dropped (%s); read again on a new one",
                                type(exc).__name__)
                    continue
                raise StoreError(str(exc)) from exc
            finally:
                fairy.close()
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _pipelined_reads(dbapi, statements: Sequence[tuple[str, tuple]]) -> list[list[tuple]]:
        """PostgreSQL: ``statements`` sent together in psycopg's pipeline mode on
        ``dbapi`` (in autocommit), their rows read at its one Sync: one round trip
        for all. The server runs them in order, each on its own snapshot (READ
        COMMITTED), as when they are sent one by one."""
        cursors = []
        try:
            with dbapi.pipeline():
                for sql, params in statements:
                    cur = dbapi.cursor()
                    cursors.append(cur)
                    cur.execute(sql, params)
            return [cur.fetchall() for cur in cursors]
        finally:
            for cur in cursors:
                cur.close()

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
        for engine in (self._lock_engine, self._auto_engine):
            if engine is not None:
                engine.dispose()

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
