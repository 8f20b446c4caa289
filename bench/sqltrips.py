"""Counting what a piece of code asks of the database: transactions and round trips.

``SqlTrips(store)`` listens on the store's real engines (no mock, nothing
patched) and counts, between ``start()`` and ``stop()`` (or inside ``with``):

- ``writes``: write transactions (``Store._write`` / ``_write_conn``: a
  SQLAlchemy ``begin`` on a connection carrying the store's ``huiyi_write``
  option);
- ``uses``: connections taken from the pool (every read and every write takes
  one; a read is a use that began no write: ``reads``);
- ``statements``: SQL statements the database ran, the transaction control
  (BEGIN, COMMIT, ROLLBACK) and PostgreSQL's pool ping left out, the DBAPI
  cursor reads of the hot paths (``StoreBase._read_many``) counted in
  (PostgreSQL: the statements pipelined in one round trip —
  ``StoreBase._write_batch``, ``_read_many`` of several — count as one);
- ``round_trips``: PostgreSQL: requests the client sent and waited for (a
  simple ``Query`` or an extended-protocol ``Sync``: BEGIN, each statement,
  COMMIT or ROLLBACK), read from libpq's own protocol trace, plus the pool's
  ping at each checkout where the pool pings (``pool_pre_ping``: one ``;``
  each; the store's pool does not); SQLite: the
  statements the library ran, transaction control included (in process, no
  network: each is a call into the database, not a round trip).

Both backends are exact: SQLite through ``sqlite3``'s trace callback,
PostgreSQL through ``PGconn.trace`` of every pooled connection, switched on at
its checkout (the ping, which runs before the checkout event, is counted per
checkout instead of traced). Counting is thread-safe, and what other threads
do meanwhile (a capture, a maintenance loop) is counted too, so count where
nothing else runs. ``start`` and ``stop`` add and remove engine listeners,
which SQLAlchemy does not allow beside a dispatch in another thread: call them
while no other thread uses the store, and take ``counts()`` in between (a
difference of two is a ``Trips`` too).
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass

from sqlalchemy import event

__all__ = ["SqlTrips", "Trips"]

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@dataclass(frozen=True)
class Trips:
    """What ``SqlTrips`` counted (counts, see the module docstring)."""

    writes: int
    uses: int
    statements: int
    round_trips: int

    @property
    def reads(self) -> int:
        """Pool uses that began no write transaction."""
        return self.uses - self.writes

    def __sub__(self, other: Trips) -> Trips:
        return Trips(self.writes - other.writes, self.uses - other.uses, self.statements - other.statements,
                     self.round_trips - other.round_trips)

    def line(self) -> str:
        """One line for a report: ``writes 1, reads 5, statements 9, round trips 21``."""
        return (f"writes {self.writes}, reads {self.reads}, statements {self.statements}, "
                f"round trips {self.round_trips}")


class SqlTrips:
    """Counts the transactions and round trips of ``store`` (a ``memory.store.Store``)."""

    def __init__(self, store) -> None:
        self.store = store
        self.engines = [e for e in (store.engine, getattr(store, "_lock_engine", None),
                                    getattr(store, "_auto_engine", None)) if e is not None]
        self.is_sqlite = store.is_sqlite
        self._lock = threading.Lock()
        self._on = False
        self._writes = self._uses = self._pings = self._sql = self._control = 0
        self._sqlite: list[object] = []  # the sqlite3 connections given a trace callback
        # id(dbapi connection) -> (its psycopg connection, the file libpq traces it into): a file
        # each, since libpq buffers its trace and two connections' blocks would interleave mid-line
        self._pg: dict[int, tuple[object, object]] = {}

    # -- listening ---------------------------------------------------------------

    def start(self) -> SqlTrips:
        """Count from zero."""
        with self._lock:
            self._writes = self._uses = self._pings = self._sql = self._control = 0
        self._handlers = [(e, self._checkout_of(e)) for e in self.engines]
        for e, checkout in self._handlers:
            event.listen(e, "checkout", checkout)
            event.listen(e, "begin", self._begin)
        self._on = True
        return self

    def stop(self) -> Trips:
        """Stop listening; the counts so far."""
        now = self.counts()
        self._on = False
        for e, checkout in self._handlers:
            event.remove(e, "checkout", checkout)
            event.remove(e, "begin", self._begin)
        for conn in self._sqlite:
            conn.set_trace_callback(None)  # type: ignore[attr-defined]
        self._sqlite.clear()
        for conn, trace in self._pg.values():
            try:
                conn.pgconn.untrace()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a connection closed meanwhile keeps nothing to untrace
                pass
            trace.close()  # type: ignore[attr-defined]
            os.unlink(trace.name)  # type: ignore[attr-defined]
        self._pg.clear()
        return now

    def __enter__(self) -> SqlTrips:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _checkout_of(self, engine):
        pings = bool(getattr(engine.pool, "_pre_ping", False))

        def checkout(dbapi_conn, _record, _proxy) -> None:
            self._checkout(dbapi_conn, pings)

        return checkout

    def _checkout(self, dbapi_conn, pings: bool) -> None:
        if not self._on:
            return
        with self._lock:
            self._uses += 1
            self._pings += pings
            key = id(dbapi_conn)
            if self.is_sqlite:
                if all(c is not dbapi_conn for c in self._sqlite):
                    self._sqlite.append(dbapi_conn)
                    dbapi_conn.set_trace_callback(self._sqlite_statement)
            elif key not in self._pg:
                trace = tempfile.NamedTemporaryFile(prefix="huiyi-pgtrace-", delete=False)
                self._pg[key] = (dbapi_conn, trace)
                dbapi_conn.pgconn.trace(trace.fileno())

    def _begin(self, conn) -> None:
        if self._on and conn.get_execution_options().get("huiyi_write"):
            with self._lock:
                self._writes += 1

    def _sqlite_statement(self, sql: str) -> None:
        if self._on:
            with self._lock:
                self._sql += 1
                if sql.lstrip().upper().startswith(_CONTROL):
                    self._control += 1

    # -- reading -----------------------------------------------------------------

    def counts(self) -> Trips:
        """The counts since ``start()`` (PostgreSQL: read from the trace, flushed first)."""
        with self._lock:
            writes, uses = self._writes, self._uses
            if self.is_sqlite:
                return Trips(writes, uses, self._sql - self._control, self._sql)
            trips, statements = self._pg_counts()
            return Trips(writes, uses, statements, trips + self._pings)

    def _pg_counts(self) -> tuple[int, int]:
        trips = statements = 0
        for conn, trace in self._pg.values():
            try:  # libpq writes through a buffered FILE*: untracing flushes it
                conn.pgconn.untrace()  # type: ignore[attr-defined]
                conn.pgconn.trace(trace.fileno())  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - closed meanwhile: what it sent is in the file already
                pass
            with open(trace.name, encoding="utf-8", errors="replace") as f:  # type: ignore[attr-defined]
                for line in f:
                    parts = line.split("\t")
                    if len(parts) < 4 or parts[1] != "F":
                        continue
                    kind = parts[3].strip()
                    if kind == "Sync":
                        trips += 1
                        statements += 1
                    elif kind == "Query":
                        sql = parts[4].strip().strip('"').lstrip().upper() if len(parts) > 4 else ""
                        if sql == ";":  # the pool's ping: counted per checkout (module docstring)
                            continue
                        trips += 1
                        if sql and not sql.startswith(_CONTROL):
                            statements += 1
        return trips, statements
