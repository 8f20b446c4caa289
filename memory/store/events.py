"""Change events owed to the tenants' webhooks: a transactional outbox that never
loses an event.

Every memory write of ``memory.store.memories`` (add, new version, new context,
metadata, delete) calls ``_emit`` inside its own transaction: for a tenant that
subscribed (``ChangeEvents.subscribe_events``, set by the gateway from each
tenant's ``change_events`` settings) one ``change_events`` row per memory —
``memory.added``, ``memory.changed`` or ``memory.forgotten``, its namespace, id
and version, no text. So an event exists exactly when its change committed, on
every replica and through every path (API, turns, commands, consolidation,
withdrawals, the CLI). A tenant without a webhook costs nothing: no row. A
``memory.changed`` of a memory at a version that an event not yet sent (nor
claimed) already tells is not written again: the receiver reads the memory when
that event arrives and finds the change there (an inferred capture that tags
what it stored sends one ``memory.added``, not an added and a changed of
version 1).

Ids: ``uid`` (``ChangeEvent.webhook_id`` = ``evt_<uid>``) is random, unique for
the life of the store and kept across retries and replays; the integer ``id``
only orders the outbox (SQLite gives a deleted row's rowid again).

The sender (``gateway.webhooks``) reads them with ``due_events``: per tenant in
creation order, dead letters left aside, a tenant whose oldest event is not due
yet (a failed delivery waiting out its backoff, or one claimed by a sender) is
skipped whole, so one tenant's receiver sees its events in order. A row is
claimed by moving its ``due_at`` forward by a lease and naming its ``holder``
(``UPDATE … WHERE due_at <= now``: one replica wins it), then deleted when
delivered (``events_done``), set due again later (``events_retry``), or kept as
a dead letter with its last error once given up (``events_dead``) until an
operator replays it (``events_replay``). Nothing deletes an undelivered event.

Holders: each sender takes a holder id (``events_holder_start``:
``<host>/<pid>/<random>``). A clean stop gives its claims back at once
(``events_holder_stop``). After a crash the claims of a holder proven gone are
freed by the next ``due_events`` instead of waiting out the lease: on
PostgreSQL the holder keeps a session advisory lock on a connection of its own
(``pg_advisory_lock``), which the server drops when that connection closes —
when the process dies, however it dies — so ``pg_try_advisory_lock`` by
another session proves it gone; on SQLite the holder keeps an exclusive
``flock`` on a file of its own beside the database (``<database>-holders/``),
which the kernel drops with the process, so another process that can take it
proves the holder gone — whatever hostname either ran under (a container
recreated on the same volume gets a new one). Without that file (no writable
directory there, or a holder started before lock files) a holder of this host
whose process no longer exists is gone. A holder that cannot be proven gone
keeps its claims until the lease runs out.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, func, insert, select, text, update

from memory.store.base import StoreBase, advisory_key, utcnow
from memory.store.tables import _aware, _ChangeEventRow
from memory.types import Namespace

__all__ = ["ChangeEvent", "ChangeEvents", "EventStats", "EVENT_KINDS", "ADDED", "CHANGED", "FORGOTTEN",
           "new_event_uid"]

ADDED, CHANGED, FORGOTTEN = "memory.added", "memory.changed", "memory.forgotten"
EVENT_KINDS = (ADDED, CHANGED, FORGOTTEN)
#: characters of ``ChangeEvents.events_dead``'s and ``events_retry``'s error kept (the column's width)
ERROR_CHARS = 200

_E = _ChangeEventRow.__table__  # type: ignore[attr-defined]
#: holders started in this process and not stopped: a holder of this pid not in it is gone
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()
log = logging.getLogger(__name__)


def new_event_uid() -> str:
    """A new event's ``uid``: 32 lower-case hex characters, the first 12 the
    creation time in milliseconds since the Unix epoch (so they sort by time),
    the other 20 random (80 bits): unique for the life of the store."""
    return f"{int(time.time() * 1000) & (2 ** 48 - 1):012x}{secrets.token_hex(10)}"


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change event: ``id`` (the outbox order), ``event`` (one of
    EVENT_KINDS), the memory's ``namespace`` and ``memory_id``, its ``version``
    after the change (0 for a forget), when it happened (UTC), how many
    deliveries of it failed so far, ``uid`` (``webhook_id`` is ``evt_<uid>``),
    the last failure's text and, for a dead letter, when it was given up."""

    id: int
    tenant: str
    namespace: Namespace
    memory_id: str
    event: str
    version: int
    created_at: datetime
    attempts: int
    uid: str = ""
    last_error: str = ""
    dead_at: datetime | None = None

    @property
    def webhook_id(self) -> str:
        """The Standard Webhooks ``webhook-id``: ``evt_<uid>``, the same on every
        attempt and replay of this event and never given to another."""
        return f"evt_{self.uid}"


@dataclass(frozen=True, slots=True)
class EventStats:
    """One tenant's undelivered events: ``pending`` (waiting or being sent),
    ``dead`` (given up, kept for a replay) and ``oldest``, the creation time
    (UTC) of the oldest of them all (None when there is none)."""

    tenant: str
    pending: int
    dead: int
    oldest: datetime | None


def _event(r) -> ChangeEvent:
    return ChangeEvent(r.id, r.tenant, Namespace.parse(r.namespace), r.memory_id, r.event, int(r.version),
                       _aware(r.created_at), int(r.attempts), r.uid, r.last_error or "", _aware(r.dead_at))


def _covered(conn, ns: Namespace, memory_id: str, version: int, at: datetime) -> bool:
    """Is there an unclaimed, undelivered ``memory.added``/``memory.changed`` of
    ``memory_id`` in ``ns`` at ``version``? It is locked for this transaction
    (a no-op UPDATE), so no sender claims it before this change commits: its
    receiver will read the memory with this change in it."""
    got = conn.execute(update(_E).where(
        _E.c.namespace == str(ns), _E.c.memory_id == memory_id, _E.c.version == int(version),
        _E.c.event.in_((ADDED, CHANGED)), _E.c.holder.is_(None), _E.c.dead_at.is_(None), _E.c.due_at <= at)
        .values(due_at=_E.c.due_at))
    return got.rowcount > 0


def _emit(conn, tenants: frozenset[str], ns: Namespace, event: str, changed: Iterable[tuple[str, int]],
          at: datetime | None = None) -> int:
    """In the caller's write transaction (a Connection or an ORM Session): one
    ``event`` row per ``(memory id, version)`` of ``changed`` when ``ns``'s tenant
    is in ``tenants`` — a ``memory.changed`` that an unsent event already tells
    (``_covered``) left out; nothing otherwise. Returns how many rows it queued."""
    if ns.tenant not in tenants:
        return 0
    at = at or utcnow()
    changed = [(mid, int(version)) for mid, version in changed]
    if event == CHANGED:
        changed = [(mid, version) for mid, version in changed if not _covered(conn, ns, mid, version, at)]
    rows = [dict(uid=new_event_uid(), tenant=ns.tenant, namespace=str(ns), memory_id=mid, event=event,
                 version=version, created_at=at, due_at=at, attempts=0, last_error="") for mid, version in changed]
    if rows:
        conn.execute(insert(_E), rows)
    return len(rows)


class ChangeEvents(StoreBase):
    """The ``change_events`` outbox: who subscribes, the sender's reads and
    writes, its holders, and the dead letters an operator lists and replays."""

    #: tenants whose memory writes leave change events (``subscribe_events``); none by default
    event_tenants: frozenset[str] = frozenset()

    def subscribe_events(self, tenants: Iterable[str]) -> None:
        """From now on the memory writes of ``tenants`` (in this process) leave
        change events; the others none."""
        self.event_tenants = frozenset(tenants)

    # -- holders ------------------------------------------------------------------------

    def events_holder_start(self) -> str:
        """A new holder id for one sender (``<host>/<pid>/<8 hex>``, at most 96
        characters). On PostgreSQL its liveness lock is taken on a connection held
        until ``events_holder_stop`` (or until the process dies). Raises StoreError
        when the database cannot be reached."""
        holder = f"{socket.gethostname()[:64]}/{os.getpid()}/{secrets.token_hex(4)}"
        if not self.is_sqlite:
            from sqlalchemy.exc import DBAPIError

            from memory.errors import StoreError

            conn = self._lock_engine.connect()
            try:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self._holder_key(holder)})
                conn.commit()  # a session lock outlives the transaction: the connection is not left in one
            except DBAPIError as exc:
                conn.close()
                raise StoreError(str(exc)) from exc
            self._holder_conns()[holder] = conn
        else:
            self._holder_lock_take(holder)
        with _LIVE_LOCK:
            _LIVE.add(holder)
        return holder

    def events_holder_stop(self, holder: str) -> int:
        """Give back what ``holder`` claimed and did not finish (due at once again,
        for any sender) and end the holder; returns how many events were given
        back. A store error while giving back leaves them to the next sender's
        liveness check."""
        try:
            return self.events_release(holder=holder)
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(holder)
            conn = self._holder_conns().pop(holder, None)
            lock = self._holder_lock_files().pop(holder, None)
            if lock is not None:  # the file goes first, so no one sees it unlocked while it exists
                self._holder_lock_path(holder).unlink(missing_ok=True)
                os.close(lock)
            if conn is not None:
                try:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._holder_key(holder)})
                    conn.commit()
                finally:
                    conn.close()

    def _holder_conns(self) -> dict:
        conns = self.__dict__.get("_event_holder_conns")
        if conns is None:
            conns = self.__dict__["_event_holder_conns"] = {}
        return conns

    def _holder_lock_files(self) -> dict:
        files = self.__dict__.get("_event_holder_files")
        if files is None:
            files = self.__dict__["_event_holder_files"] = {}
        return files

    def _holder_lock_path(self, holder: str) -> Path | None:
        """SQLite: the holder's lock file, ``<database>-holders/<sha256 of the id, 32 hex>.lock``
        (None for an in-memory database)."""
        database = self.engine.url.database
        if not database or database == ":memory:":
            return None
        return Path(f"{database}-holders") / f"{hashlib.sha256(holder.encode()).hexdigest()[:32]}.lock"

    def _holder_lock_take(self, holder: str) -> None:
        """SQLite: create the holder's lock file and hold an exclusive flock on it until
        ``events_holder_stop`` or the process ends. A directory that cannot be written leaves the
        holder without one (proven gone only on this host, by its pid; logged)."""
        path = self._holder_lock_path(holder)
        if path is None:
            return
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.warning("change events: no holder lock file in %s: %s", path.parent, exc)
            return
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new, random file: nobody else holds it
        self._holder_lock_files()[holder] = fd

    def _holder_lock_free(self, holder: str) -> bool | None:
        """SQLite: True when the holder's lock file exists and nobody holds it (its process is
        gone; the file is removed), False while it is held, None without a file."""
        path = self._holder_lock_path(holder)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # closing our only descriptor of it also drops the lock we may have taken
        path.unlink(missing_ok=True)
        return True

    def _holder_key(self, holder: str) -> int:
        return advisory_key(self.schema, f"change-events-holder|{holder}")

    def _holder_gone(self, holder: str) -> bool:
        """Proven gone (module docstring); False when it cannot be told."""
        if not self.is_sqlite:
            with self._lock_engine.connect() as conn:
                key = self._holder_key(holder)
                free = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one())
                if free:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
                return free
        free = self._holder_lock_free(holder)
        if free is not None:
            return free
        host, _, rest = holder.partition("/")
        pid_text = rest.partition("/")[0]
        if host != socket.gethostname()[:64] or not pid_text.isdigit():
            return False
        pid = int(pid_text)
        if pid == os.getpid():
            with _LIVE_LOCK:
                return holder not in _LIVE
        try:
            os.kill(pid, 0)  # signal 0: is there such a process (no signal is sent)
        except ProcessLookupError:
            return True
        except PermissionError:  # a process of another user: alive
            return False
        return False

    def _free_gone(self, holders: set[str], now: datetime) -> bool:
        """Free the claims of the ``holders`` proven gone; True when any were freed."""
        gone = [h for h in sorted(holders) if self._holder_gone(h)]
        if not gone:
            return False
        with self._write_conn() as conn:
            freed = conn.execute(update(_E).where(_E.c.holder.in_(gone), _E.c.dead_at.is_(None))
                                 .values(due_at=now, holder=None)).rowcount
        return freed > 0

    # -- the sender -----------------------------------------------------------------

    def due_events(self, limit: int = 100, lease_s: float = 60.0, now: datetime | None = None,
                   holder: str | None = None) -> list[ChangeEvent]:
        """Claim at most ``limit`` events to deliver now, oldest first: per tenant
        the run of its oldest events that are due, dead letters left aside (a
        tenant whose oldest event waits out a backoff, or is claimed, gives none,
        so its order holds). Each is claimed for ``lease_s`` seconds by ``holder``
        (its ``due_at`` moved forward; a replica that claimed it first wins it,
        another gets the rest). Claims of another holder that is proven gone are
        freed first (module docstring)."""
        now = now or utcnow()
        for attempt in range(2):
            with self.engine.connect() as conn:
                rows = conn.execute(select(_E).where(_E.c.dead_at.is_(None)).order_by(_E.c.id)
                                    .limit(limit * 4)).all()
            blocked: set[str] = set()
            held: set[str] = set()
            wanted = []
            for r in rows:
                if r.tenant in blocked:
                    continue
                if _aware(r.due_at) > now:
                    blocked.add(r.tenant)
                    if r.holder is not None and r.holder != holder:
                        held.add(r.holder)
                    continue
                wanted.append(r)
                if len(wanted) >= limit:
                    break
            if attempt or not held or not self._free_gone(held, now):
                break
        out: list[ChangeEvent] = []
        lease = now + timedelta(seconds=lease_s)
        lost: set[str] = set()
        with self._write_conn() as conn:
            for r in wanted:
                if r.tenant in lost:
                    continue
                got = conn.execute(update(_E).where(_E.c.id == r.id, _E.c.due_at <= now, _E.c.dead_at.is_(None))
                                   .values(due_at=lease, holder=holder))
                if got.rowcount != 1:  # another replica has it: keep this tenant's order, leave its rest
                    lost.add(r.tenant)
                    continue
                out.append(_event(r))
        return out

    def events_done(self, ids: Sequence[int]) -> None:
        """Delete events delivered (or no longer wanted: the tenant's settings dropped their type)."""
        if ids:
            with self._write_conn() as conn:
                conn.execute(delete(_E).where(_E.c.id.in_(list(ids))))

    def events_retry(self, event_id: int, due_at: datetime, error: str = "") -> None:
        """Count a failed delivery of ``event_id`` (``error``: what failed, cut to
        200 characters) and make it due again at ``due_at``, unclaimed."""
        with self._write_conn() as conn:
            conn.execute(update(_E).where(_E.c.id == event_id).values(
                attempts=_E.c.attempts + 1, due_at=due_at, holder=None, last_error=error[:ERROR_CHARS]))

    def events_dead(self, event_id: int, error: str = "", now: datetime | None = None) -> None:
        """Count the last failed delivery of ``event_id`` and keep it as a dead
        letter (``dead_at`` now, ``error`` its last failure): never sent again
        until ``events_replay``; its tenant's later events go on without it."""
        now = now or utcnow()
        with self._write_conn() as conn:
            conn.execute(update(_E).where(_E.c.id == event_id).values(
                attempts=_E.c.attempts + 1, dead_at=now, holder=None, last_error=error[:ERROR_CHARS]))

    def events_release(self, ids: Sequence[int] = (), holder: str | None = None) -> int:
        """Give claimed events back unattempted, due now again: ``ids``, and with
        ``holder`` every event that holder still claims. Returns how many."""
        n = 0
        with self._write_conn() as conn:
            if ids:
                n += conn.execute(update(_E).where(_E.c.id.in_(list(ids)), _E.c.dead_at.is_(None))
                                  .values(due_at=utcnow(), holder=None)).rowcount
            if holder is not None:
                n += conn.execute(update(_E).where(_E.c.holder == holder, _E.c.dead_at.is_(None))
                                  .values(due_at=utcnow(), holder=None)).rowcount
        return n

    # -- the operator ------------------------------------------------------------------

    def dead_events(self, tenant: str, limit: int = 100, offset: int = 0) -> list[ChangeEvent]:
        """The dead letters of ``tenant``, oldest first (``limit`` 1..1000 of them
        from ``offset``)."""
        limit = max(1, min(int(limit), 1000))
        with self.engine.connect() as conn:
            rows = conn.execute(select(_E).where(_E.c.tenant == tenant, _E.c.dead_at.is_not(None))
                                .order_by(_E.c.id).limit(limit).offset(max(0, int(offset)))).all()
        return [_event(r) for r in rows]

    def events_replay(self, tenant: str, uids: Sequence[str] | None = None) -> list[ChangeEvent]:
        """Send dead letters of ``tenant`` again — those whose ``uid`` is in
        ``uids``, or all with None: each becomes due at once with no failed
        attempt, its ``uid`` (hence its ``webhook-id``), creation time and place in
        its tenant's order kept (it goes before the tenant's later events still
        waiting). Returns the events replayed (uids not dead, or of another
        tenant, are skipped)."""
        where = [_E.c.tenant == tenant, _E.c.dead_at.is_not(None)]
        if uids is not None:
            if not uids:
                return []
            where.append(_E.c.uid.in_(list(uids)))
        with self._write_conn() as conn:
            rows = conn.execute(select(_E).where(*where).order_by(_E.c.id)).all()
            if rows:
                conn.execute(update(_E).where(_E.c.id.in_([r.id for r in rows]))
                             .values(dead_at=None, attempts=0, due_at=utcnow(), holder=None))
        return [_event(r) for r in rows]

    def pending_events(self, tenant: str | None = None) -> int:
        """Events not yet delivered (dead letters included), of ``tenant`` or of all."""
        q = select(func.count()).select_from(_E)
        if tenant is not None:
            q = q.where(_E.c.tenant == tenant)
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def event_stats(self) -> list[EventStats]:
        """Per tenant with undelivered events: how many wait, how many are dead
        letters, and the oldest one's creation time (one grouped read; the
        metrics' gauges)."""
        dead = _E.c.dead_at.is_not(None)
        with self.engine.connect() as conn:
            rows = conn.execute(select(_E.c.tenant, dead.label("dead"), func.count(), func.min(_E.c.created_at))
                                .group_by(_E.c.tenant, dead)).all()
        by: dict[str, list] = {}
        for tenant, is_dead, n, oldest in rows:
            s = by.setdefault(tenant, [0, 0, None])
            s[1 if is_dead else 0] += int(n)
            oldest = _aware(oldest) if isinstance(oldest, datetime) else (
                _aware(datetime.fromisoformat(oldest)) if oldest else None)
            if oldest is not None and (s[2] is None or oldest < s[2]):
                s[2] = oldest
        return [EventStats(t, p, d, o) for t, (p, d, o) in sorted(by.items())]
