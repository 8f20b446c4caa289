"""``MemoryCore``: the verb set over the store and the index.

add / recall / get / list / update / forget / history, each taking a
``Namespace`` first (an unscoped call cannot be written). SQL is written
first, with an outbox row; the index is updated right after. If the index
write fails the outbox row stays and ``maintain()`` re-applies it: a crash or
an index outage between SQL and index is repaired, never lost.

The write rules of ``add`` (all per namespace, DESIGN rule 3):

- same canonical key + same normalised text → ``deduped``: the old row is kept
  (restating a fact never deletes it);
- same key + new text → ``superseded``: latest wins, the old version goes to
  history with its validity closed, the live row keeps its id at version + 1;
- same key, other category → ``conflict``: recorded (audit), nothing stored;
- evidence older than the live version (a replayed or edited old message) →
  ``rejected`` (reason ``stale``): an old statement never overrides a newer one;
- the text, or the evidence it was learned from, was forgotten after the
  message was said → ``rejected`` (reason ``tombstone``). Said again later, it
  is a new memory.

Conflict links (``memory.store.Conflicts``): ``add(..., conflicts_with=ID)``
stores the new memory and links it, as the newer side, to the live memory ID
that it disagrees with without a clear change (capture's unsure band,
``memory.contradiction``); both stay live. A forget or retract of either side
deletes the link; a new version of either side (supersede, edit) deletes it and
re-judges the pair with the new text, linking it again only when it is still
unsure. ``recall`` brings a hit's conflict partner along (``Hit.conflict``)
when the partner is disclosed in the chat of the recall.

Association links (``memory.links``, ``memory.store.Links``): a memory stored,
superseded or edited is linked to the older memories of its namespace that name
one of its entities (``link_entities``); ``mark_recalled`` links the memories
that went into one prompt together. Forget, retract and new versions delete a
memory's links in their own transaction; recall's association channel spreads
activation along them (``memory.recall``). ``links`` (``LinkParams``) sets the
amounts and the half-life.

Concurrency: writes of one namespace are serialised by a per-namespace lock in
this process and, on PostgreSQL, by the store's namespace lock across
processes (``Store.namespace_lock``: an advisory lock, so two gateway replicas
on one database never interleave the check and the write of one namespace —
a forget's tombstone, a capture's duplicate check). The unique
``(namespace, key)`` constraint stays as the last word (the loser of a race
dedupes onto the winner's row). Index writes of several processes go through
the index's own file lock (``memory.index``).

Methods are synchronous and thread-safe; the async gateway calls them through
``asyncio.to_thread`` so jieba and the embedder never block the event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Literal

from sqlalchemy.exc import IntegrityError

from memory.audit import AuditLog
from memory.cache import NamespaceCache, VectorForm
from memory.errors import KeyTakenError, NotFoundError, SearchIndexError, StoreError
from memory.explain import visible_in
from memory.index import SearchIndex
from memory.links import LinkParams, link_entities
from memory.marks import FLUSH_EVERY_S, RecallMarks
from memory.metadata import check_filters, check_metadata, matches, merged
from memory.metadata import loads as load_metadata
from memory.recall import RecallParams, Scorer, recall
from memory.store import Store, new_memory_id, utcnow
from memory.text import fingerprint, normalise, retells
from memory.types import (CONTEXT_CHARS, CONTEXT_JOIN, Category, ChatRef, ForgetReceipt, Hit, Memory, Namespace, Visibility,
                          clean_controls, clip_line, repair)

__all__ = ["MemoryCore", "AddResult", "default_key"]

log = logging.getLogger(__name__)

KEY_CHARS = 500
FALLBACK_EXACT_MAX = 20_000
"""Largest namespace recall searches exactly from SQL while the index cannot
serve it (each vector embedded once, then held by recall's cache in the
namespace's view; with that cache off, ``memory.index.VECTOR_CACHE`` holds the
last 4,096 and a larger namespace is embedded again at each recall); a larger
one goes to the index, however incomplete."""
FALLBACK_WARN_S = 60.0
"""At most one WARNING per this many seconds about recall falling back to the exact path."""


def subject_mark(group_key: str | None = None) -> str:
    """Tombstone "fingerprint" of a forget of everything of a subject (``*``) or of
    everything they said in one group (``*`` + 63 hex digits of the group key's
    SHA-256); no text fingerprint (a hex digest) starts with ``*``."""
    if group_key is None:
        return "*"
    return "*" + hashlib.sha256(group_key.encode("utf-8")).hexdigest()[:63]


def default_key(memory: Memory) -> str:
    """The canonical key of a memory without an explicit slot:
    ``<category>:<normalised text>`` (cut at KEY_CHARS)."""
    return f"{memory.category.value}:{normalise(memory.text)}"[:KEY_CHARS]


DAMAGED = "\ufffd"
"""The replacement character a repaired lone surrogate or broken byte leaves: a text holding it lost content."""


class AddResult:
    """Outcome of ``MemoryCore.add``: ``action`` is ``stored``, ``deduped``,
    ``superseded``, ``revised`` (an edit changed a memory in place), ``conflict``
    (same key, other category; ``memory`` is the existing one) or ``rejected``
    (tombstoned, stale or damaged; ``memory`` None); ``reason`` says why for the last two."""

    __slots__ = ("action", "memory", "reason")

    def __init__(self, action: str, memory: Memory | None, reason: str = "") -> None:
        self.action = action
        self.memory = memory
        self.reason = reason

    def __repr__(self) -> str:
        return f"AddResult({self.action!r}, {self.memory.id if self.memory else None})"


LINGER_ROWS = 256
"""Memory ids a lingering index write waits for at most: with this many queued it
writes at once, however short a time they waited (``_GroupCommit``)."""


UNINDEXED_HELD = 4096
"""How many ids of memories this process inserted, and whose index row was never
written, ``MemoryCore`` remembers (``_Unindexed``): the oldest beyond it are
written with a merge instead of an append, as if unknown."""


class _Unindexed:
    """Ids of memories this process inserted into SQL whose index write was never
    tried, in any process, as far as this one knows: their rows can be appended
    to the index (``SearchIndex.upsert``'s ``new``) instead of merged on the id,
    which reads the id index and costs ~2.5x the CPU of an append (a 3-row write
    to a 2,000-20,000-row table: 8.4-12.3 ms against 3.5-4.7, lancedb 0.40).

    An id leaves at its first write pass, whatever the outcome (``take``), so a
    write that failed, or committed and then raised, is merged the next time.
    A pass appends only ids whose outbox op is still pending under the index's
    write lock (``MemoryCore.maintain``): another process's pass that wrote the
    row cleared the op in the same locked pass. A rebuild from SQL writes rows
    outside the outbox, so nothing is appended while one runs and its end forgets
    every id (``MemoryCore.rebuild_index``). What is left is a replica that dies
    between its write and clearing the op, or ``huiyi reindex`` run in another
    process meanwhile: the id then has two equal rows, which searches read as
    one, a merge updates both and a delete removes both (``SearchIndex.upsert``).
    Thread-safe; at most ``held`` ids, the oldest dropped first (a dropped id is
    merged, which is always correct)."""

    def __init__(self, held: int = UNINDEXED_HELD) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._held = held
        self._lock = threading.Lock()

    def note(self, memory_id: str) -> None:
        """``memory_id`` was just inserted into SQL (a new id)."""
        with self._lock:
            self._ids[memory_id] = None
            while len(self._ids) > self._held:
                self._ids.popitem(last=False)

    def take(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` never tried, all of ``ids`` forgotten from now on."""
        with self._lock:
            return {i for i in ids if self._ids.pop(i, 0) is None}

    def clear(self) -> None:
        """Forget every id (a rebuild from SQL may have written any of them)."""
        with self._lock:
            self._ids.clear()


class _GroupCommit:
    """Group commit of index writes: a caller's ids join the batch being collected,
    and the first caller to find no write running writes everything collected so
    far in one go while later callers wait for the write that carries their ids.
    Each caller returns once its own ids were written (or the write failed and
    was logged), so a memory is searchable when ``add`` returns, while N
    concurrent adds cost one index write (one LanceDB fragment) instead of N.
    The idea is the database log's group commit (Gawlick & Kinkade, IMS Fast
    Path, 1985); ``write`` receives ``{namespace: memory ids}`` and must not raise.

    ``linger_s`` > 0 lets writes that are not concurrent share one too: a
    ``submit(linger=True)`` returns at once and its ids wait, in a thread of
    this object, at most ``linger_s`` seconds (or until ``linger_rows`` ids are
    queued) for the ones that follow, then go in one write — the commit delay
    of group commit (PostgreSQL's ``commit_delay``), here for a derived index
    whose outbox keeps every queued id durable in SQL meanwhile. A plain
    ``submit`` or ``flush`` writes what lingers with its own ids, at once.
    """

    def __init__(self, write, *, linger_s: float = 0.0, linger_rows: int = LINGER_ROWS) -> None:
        self._write = write
        self.linger_s = linger_s
        self._linger_rows = linger_rows
        self._cond = threading.Condition()
        self._pending: dict[Namespace, set[str]] = {}
        self._inflight: dict[Namespace, set[str]] = {}  # the batch being written
        self._collecting = 0  # number of the batch now collecting ids
        self._written = -1  # number of the last batch written
        self._busy = False
        self._since: float | None = None  # monotonic time the oldest lingering id was queued
        self._thread: threading.Thread | None = None
        self._closed = False
        #: index writes made (each one LanceDB fragment at most), for tests and benchmarks
        self.writes = 0

    def submit(self, targets: dict[Namespace, set[str]], *, linger: bool = False) -> None:
        """Write the outbox ops of ``targets`` to the index, joining concurrent callers;
        with ``linger`` (and ``linger_s`` > 0, not closed), queue them for the
        lingering write and return at once."""
        with self._cond:
            for ns, ids in targets.items():
                self._pending.setdefault(ns, set()).update(ids)
            if linger and self.linger_s > 0 and not self._closed:
                if self._since is None:
                    self._since = time.monotonic()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._linger, name="huiyi-index-linger", daemon=True)
                    self._thread.start()
                self._cond.notify_all()
                return
            self._write_through_locked()

    def holds(self, ns: Namespace) -> bool:
        """Whether ids of ``ns`` are queued or being written (not in the index yet)."""
        with self._cond:
            return ns in self._pending or (self._busy and ns in self._inflight)

    def flush(self) -> None:
        """Write what lingers now and wait for the write in flight; returns at once when there is none."""
        with self._cond:
            if self._pending or self._busy:
                self._write_through_locked()

    def close(self) -> None:
        """Stop the lingering thread after it wrote what was queued; later submits write at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        self.flush()

    def _write_through_locked(self) -> None:
        mine = self._collecting
        while self._written < mine:
            if self._busy:
                self._cond.wait()
                continue
            self._busy = True
            batch, self._pending, self._since = self._pending, {}, None
            self._inflight = batch
            number, self._collecting = self._collecting, self._collecting + 1
            self._cond.release()
            try:
                if batch:
                    self.writes += 1
                    self._write(batch)
            finally:
                self._cond.acquire()
                self._busy = False
                self._inflight = {}
                self._written = number
                self._cond.notify_all()

    def _linger(self) -> None:
        """The lingering thread: each batch waits ``linger_s`` from its oldest id, then is written."""
        with self._cond:
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return  # closed, nothing left
                while not self._closed and self._pending \
                        and sum(len(ids) for ids in self._pending.values()) < self._linger_rows:
                    since = self._since if self._since is not None else time.monotonic()
                    left = since + self.linger_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._pending:
                    self._write_through_locked()


class MemoryCore:
    """Store + index + scorer. ``scorer`` rescales fused hits (memory.scoring).

    ``audit`` is the audit trail (``memory.audit.AuditLog``); ``audit_failures``
    counts records that could not be written. ``cache_mib``: the bound, in MiB,
    of recall's in-process namespace cache (``memory.cache``; ``cache``), 0 for
    none — every recall then reads SQL (small namespaces) or the index.
    """

    def __init__(self, store: Store, index: SearchIndex, scorer: Scorer | None = None, *,
                 rebuild: Literal["now", "background", "none"] = "now", cache_mib: float = 0.0,
                 links: LinkParams = LinkParams(), cache_background: bool = False,
                 cache_spill_dir: Path | None = None, marks_every_s: float = FLUSH_EVERY_S,
                 audit_captures: bool = True, index_linger_s: float = 0.0) -> None:
        """``rebuild``: what to do when the index is found missing, unreadable,
        incomplete or made by another embedder (``index_missing``): rebuild it
        from SQL ``now`` (before returning), in a ``background`` thread while
        recall falls back to the exact path (the gateway), or not at all
        (``none``: the caller does, e.g. ``huiyi reindex``). ``links``: how
        association links are made (``memory.links.LinkParams``).
        ``cache_background``: a namespace not in recall's cache yet is loaded
        into it in the background while its recall takes the exact or index path
        (``NamespaceCache.ready_view``; the gateway), instead of inside that recall.
        ``cache_spill_dir``: where the cache keeps the float32 rows of namespaces
        it holds as int8 codes (``NamespaceCache``'s ``spill_dir``; the gateway:
        ``<data root>/cache``). ``marks_every_s``: how long the marks of
        ``note_recalled`` are held in memory before they are written
        (``memory.marks.RecallMarks``; 0: at once). ``audit_captures``: the audit
        trail records what capture learns (``memory.audit.CAPTURE_ACTIONS``; off:
        only edits, removals and commands). ``index_linger_s``: seconds an add's
        index write may wait to share one write with the adds that follow
        (``_GroupCommit``; 0: written before ``add`` returns). With it an add embeds
        its text before its SQL write, so the vector is in the index's cache
        (``SearchIndex.vectors``) by the time recall can read the memory from SQL;
        a recall that would search the index for a namespace with a write still
        lingering writes it first (``flush_index``), so the person's next turn
        finds what they just said either way; ``close`` writes what lingers, and
        the outbox keeps it for ``maintain`` after a crash. Raises ValueError
        when negative."""
        self.store = store
        self.links = links
        self.marks = RecallMarks(store, recalled=links.recalled, half_life_days=links.half_life_days,
                                 every_s=marks_every_s)
        self.index = index
        self.scorer = scorer
        self.cache = NamespaceCache(cache_mib, background=cache_background, spill_dir=cache_spill_dir) \
            if cache_mib > 0 else None
        self.audit = AuditLog(store, captures=audit_captures)
        self._ns_locks: dict[str, threading.Lock] = {}
        self._deferred = threading.local()
        if index_linger_s < 0:
            raise ValueError("index_linger_s must be >= 0")
        self._commits = _GroupCommit(self._write_index, linger_s=index_linger_s)
        self._unindexed = _Unindexed()
        self._ns_locks_guard = threading.Lock()
        self._ready = threading.Event()
        self._rebuilding = threading.Lock()
        self._rebuild_thread: threading.Thread | None = None
        self._fallback_warned = 0.0
        self._short_before = False  # the last check_index found the index short of rows
        reason = self.index_missing()
        if reason is None:
            self._ready.set()
            return
        log.warning("index: %s; recall of large namespaces falls back to the exact path until it is rebuilt "
                    "from SQL", reason)
        if rebuild == "now":
            self.rebuild_index()
        elif rebuild == "background":
            self.start_rebuild()

    # -- index health --------------------------------------------------------

    def index_missing(self) -> str | None:
        """Why the index cannot serve recall as it is, or None: it was dropped on
        opening (unreadable, another embedder or schema), or it holds fewer rows
        than SQL has live memories beyond the pending outbox (a deleted or
        replaced index directory)."""
        if self.index.needs_rebuild:
            return "the index was unreadable or made for another embedder and was replaced by an empty one"
        try:
            rows = self.index.count()
        except Exception as exc:  # noqa: BLE001 - an index that cannot count its rows cannot search them
            return f"the index cannot be read ({type(exc).__name__}: {exc})"
        live = self.store.live_total()
        if rows < live - self.store.outbox_depth():
            return f"the index holds {rows} rows for {live} live memories"
        return None

    @property
    def index_ready(self) -> bool:
        """False while the index is known to miss memories (before or during its rebuild)."""
        return self._ready.is_set()

    def wait_index(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until the index is ready; True when it is."""
        return self._ready.wait(timeout)

    def rebuild_index(self) -> int:
        """Rebuild the index from SQL (``memory.admin.reindex``; safe while
        serving) and mark it ready; returns the rows indexed. A failure is logged
        and leaves it not ready (the maintenance task tries again). Returns 0 at
        once when another rebuild is running."""
        from memory.admin import OPERATOR, reindex

        if not self._rebuilding.acquire(blocking=False):
            return 0
        try:
            t0 = time.monotonic()
            try:
                n = reindex(self, OPERATOR, progress=False)
            finally:
                self._unindexed.clear()  # it may have written any new memory's row before its op's pass
            self._ready.set()
            log.warning("index: rebuilt from SQL in %.1f s (%d memories); recall uses it again",
                        time.monotonic() - t0, n)
            return n
        except Exception:  # noqa: BLE001 - recall keeps its exact fallback; maintenance retries
            log.exception("index: rebuild from SQL failed; recall keeps falling back to the exact path")
            return 0
        finally:
            self._rebuilding.release()

    def check_index(self) -> str | None:
        """While serving: find an index that vanished or became unreadable since
        it was opened (a deleted or replaced directory, a corrupt manifest) and
        rebuild it from SQL in the background (``start_rebuild``), recall of
        large namespaces taking the exact path meanwhile, as at start-up; index
        writes fail into the outbox until the new table exists and are applied
        after it. Returns the reason it is rebuilt, or None (ready, or a rebuild
        already under way).

        An index that cannot count its rows is rebuilt at once; one that counts
        fewer rows than SQL's live memories less the outbox only when the
        previous check found it short too: between SQL's commit of a forget and
        the clearing of its outbox row the two counts can differ for a moment,
        and a full rebuild on such a glimpse would be costly. The maintenance task
        calls this every pass (``gateway.maintenance``). Raises StoreError
        when SQL cannot be read."""
        if not self.index_ready:
            return None
        reason = self.index_missing()
        short = reason is not None and reason.startswith("the index holds")
        if reason is None or (short and not self._short_before):
            self._short_before = short
            return None
        self._short_before = False
        log.warning("index: %s while serving; it is rebuilt from SQL, recall of large namespaces falls back to the "
                    "exact path meanwhile", reason)
        self._ready.clear()
        self.start_rebuild()
        return reason

    def start_rebuild(self) -> bool:
        """``rebuild_index`` in a daemon thread unless the index is ready or one
        runs already; True when a thread was started."""
        if self.index_ready or (self._rebuild_thread is not None and self._rebuild_thread.is_alive()):
            return False
        self._rebuild_thread = threading.Thread(target=self.rebuild_index, name="huiyi-index-rebuild", daemon=True)
        self._rebuild_thread.start()
        return True

    def warm_cache(self, tenants: Sequence[str], limit: int = 256) -> int:
        """Load into recall's cache the namespaces of ``tenants`` recalled most
        recently (``Store.recently_recalled``, at most ``limit`` per tenant, newest
        first, the tenants taken in turn), each only while the cache has room for
        it without evicting a view (``NamespaceCache.room_for``): a start-up's
        warm-up, bounded by the cache's budget. Blocking (the gateway runs it in a
        thread of its own after start-up); returns the views loaded. A namespace
        that fails to load is logged and skipped. 0 without a cache."""
        cache = self.cache
        if cache is None or limit <= 0:
            return 0
        lists = [self.store.recently_recalled(t, limit) for t in tenants]
        order = [ns for row in zip_longest(*lists) for ns in row if ns is not None]
        dim = self.index.embedder.dim
        loaded = 0
        for ns in order:
            version, live = self.store.namespace_state(ns)
            if not live or cache.held(ns) or not cache.fits(live, dim):
                continue
            if not cache.room_for(live, dim):
                break
            try:
                cache.view(self.store, self.index, ns, version, cache.form(ns, live, dim) or VectorForm.FLOAT32)
                loaded += 1
            except Exception as exc:  # noqa: BLE001 - its first recall loads it instead
                log.warning("cache: warming %s failed (%s: %s)", ns, type(exc).__name__, exc)
        return loaded

    @property
    def audit_failures(self) -> int:
        """Audit records lost since start-up (each one was logged at ERROR)."""
        return self.audit.failures

    # -- locking: one writer per namespace so duplicate checks cannot race --

    def _lock(self, ns: Namespace) -> threading.Lock:
        with self._ns_locks_guard:
            return self._ns_locks.setdefault(str(ns), threading.Lock())

    @contextlib.contextmanager
    def _locked(self, *namespaces: Namespace) -> Iterator[None]:
        """Hold the write lock of ``namespaces``: this process's lock of each (in
        sorted order, so two multi-namespace holders cannot deadlock), then the
        store's lock of them all against other processes (``Store.namespace_lock``;
        taken second, so one process asks the database once per namespace at a
        time). Raises StoreError when the store's lock cannot be had."""
        locks = [self._lock(n) for n in sorted(set(namespaces), key=str)]
        with contextlib.ExitStack() as held:
            for lk in locks:
                held.enter_context(lk)
            held.enter_context(self.store.namespace_lock(*namespaces))
            yield

    def namespace_lock(self, ns: Namespace) -> contextlib.AbstractContextManager[None]:
        """The write lock of ``ns`` (not re-entrant): this process's and, on
        PostgreSQL, every other replica's (``_locked``); held by every write of the
        namespace and by the index rebuild of each of its chunks."""
        return self._locked(ns)

    # -- verbs ------------------------------------------------------------

    def add(self, ns: Namespace, memory: Memory, *, said_at: datetime | None = None, actor: str = "capture",
            evidence: str | None = None, replaces: str | None = None, conflicts_with: str | None = None) -> AddResult:
        """Store ``memory`` in ``ns`` under its canonical key (rules in the module
        docstring).

        ``said_at``: when the evidence was said (default ``memory.created_at``, else
        now), compared with tombstones and with the live version's validity;
        ``evidence``: the text it was learned from (its fingerprint is checked
        against tombstones and kept for a later forget); ``replaces``: the id of a
        memory of ``ns`` this one revises (edit path) — revised in place when no
        other memory holds the new key, else retracted after the add;
        ``conflicts_with``: the id of a live memory of ``ns`` that this one
        disagrees with without a clear change — when the add stores a new memory,
        the two are linked as a conflict (that one older, this one newer; audited
        as ``conflict`` with reason ``unsure``); gone meanwhile, nothing is linked.
        A text holding U+FFFD (a lone surrogate or a broken byte repaired at the
        edge: 「我喜欢\ufffd」) is damaged content and is rejected (reason
        ``damaged``, logged), never stored as what the person said.
        Raises ValueError if ``memory.namespace`` is not ``ns``.
        """
        if memory.namespace != ns:
            raise ValueError("memory.namespace differs from the namespace of the call")
        if DAMAGED in memory.text:
            log.info("add %s: a damaged text (U+FFFD) was not stored", ns)
            self.audit.record(ns, "reject", actor, None, reason="damaged")
            return AddResult("rejected", None, "damaged")
        if not memory.key:
            memory = replace(memory, key=default_key(memory))
        if self._commits.linger_s > 0:
            self.embed_first([memory.text])
        said = said_at or memory.created_at or utcnow()
        if memory.created_at is None:
            memory = replace(memory, created_at=said)
        source_fp = fingerprint(evidence) if evidence else ""
        marks = [subject_mark()]
        if memory.origin is not None and memory.visibility is Visibility.GROUP:
            marks.append(subject_mark(memory.origin.group_key))
        with self._locked(ns):
            existing, forgotten = self.store.key_and_tombstone(
                ns, memory.key, [fingerprint(t) for t in (memory.text, evidence) if t] + marks)
            if forgotten is not None and said <= forgotten:
                self.audit.record(ns, "reject", actor, None, reason="tombstone")
                return AddResult("rejected", None, "tombstone")
            if replaces is not None and (existing is None or existing.id == replaces):
                return self._revise(ns, replaces, memory, said, source_fp, actor)
            if existing is not None:
                result = self._onto_existing(ns, existing, memory, said, source_fp, actor)
            else:
                try:
                    live = self._store_audited(ns, memory, source_fp, actor)
                    self._unindexed.note(live.id)
                    result = AddResult("stored", live)
                except IntegrityError:  # another process won the race on (ns, key)
                    existing = self.store.find_by_key(ns, memory.key)
                    self.audit.record(ns, "dedupe", actor, existing.id if existing else None, reason="race")
                    result = AddResult("deduped", existing)
            if replaces is not None:  # the edit's statement now lives under another memory
                self._retract_locked(ns, replaces, actor)
            if conflicts_with is not None and result.action == "stored" and result.memory is not None:
                self._link_locked(ns, conflicts_with, result.memory.id, actor)
        touched = [result.memory.id] if result.action in ("stored", "superseded") and result.memory else []
        if touched:
            self._link_entities(ns, result.memory, said)
        # a dedupe that joined the new line to its context (_with_context_locked) returns a new value
        regrown = ([result.memory.id] if result.action == "deduped" and result.memory is not None
                   and result.memory is not existing else [])
        if touched or regrown or replaces is not None:
            self._apply_outbox_for(ns, touched + regrown + ([replaces] if replaces is not None else []), linger=True)
        return result

    def embed_first(self, texts: Sequence[str]) -> None:
        """Embed the memory texts about to be written, in one model call for those the
        index's cache lacks (``SearchIndex.vectors``), so the index write and any
        recall that reads them from SQL before it find their vectors made. Only
        with ``index_linger_s`` > 0 (else the index write embeds them, before
        ``add`` returns). A failure is logged: the index write embeds them again."""
        if self._commits.linger_s <= 0 or not texts:
            return
        try:
            self.index.embed_ahead([clean_controls(t) for t in texts])
        except Exception as exc:  # noqa: BLE001 - the write goes on; the index write embeds what is missing
            log.warning("embedding before the write failed (%s); the index write embeds it", exc)

    def _store_audited(self, ns: Namespace, memory: Memory, source_fp: str, actor: str) -> Memory:
        """``Store.add`` with its ``store`` audit record in the same transaction (one
        commit for both). When that transaction fails for anything but the key (a
        broken audit table, a lost connection), the memory is added again alone and
        audited apart (``AuditLog.record``: a failure there is logged and counted),
        so that failing to audit never fails the write. IntegrityError as
        ``Store.add``."""
        try:
            return self.store.add(ns, memory, source_fp=source_fp,
                                  audit=self.audit.entry("store", actor, category=memory.category.value))
        except StoreError as exc:
            log.warning("add %s: the write with its audit record failed (%s); written without it", ns, exc)
        live = self.store.add(ns, memory, source_fp=source_fp)
        self.audit.record(ns, "store", actor, live.id, category=live.category.value)
        return live

    def _onto_existing(self, ns: Namespace, existing: Memory, memory: Memory, said: datetime, source_fp: str,
                       actor: str) -> AddResult:
        """Dedupe / conflict / stale / supersede of ``memory`` onto the live row with its key."""
        if normalise(existing.text) == normalise(memory.text):
            self.audit.record(ns, "dedupe", actor, existing.id)
            return AddResult("deduped", self._with_context_locked(ns, existing, memory.context))
        if existing.category is not memory.category:
            self.audit.record(ns, "conflict", actor, existing.id, category=memory.category.value,
                              existing_category=existing.category.value)
            log.info("conflict in %s: memory %s is %s, new evidence says %s", ns, existing.id,
                     existing.category.value, memory.category.value)
            return AddResult("conflict", existing, "category")
        if existing.valid_from is not None and said < existing.valid_from:
            self.audit.record(ns, "reject", actor, existing.id, reason="stale")
            return AddResult("rejected", None, "stale")
        links = self.store.conflicts(ns, [existing.id])
        live = self.store.supersede(ns, existing.id, memory, at=said, source_fp=source_fp)
        self.audit.record(ns, "supersede", actor, live.id, version=live.version)
        self._rejudge_locked(ns, live, links, actor)
        return AddResult("superseded", live)

    def _with_context_locked(self, ns: Namespace, existing: Memory, context: str) -> Memory:
        """``existing`` said again in answer to the companion's line ``context``: the
        line joins its context (``CONTEXT_JOIN``, the newest last; the two latest
        lines kept, each cut to half of ``CONTEXT_CHARS`` by ``clip_line``), so the
        same short answer to two questions ("Yes! So much fun." after the parade
        and after the concert) is found by either. Unchanged when ``context`` is
        empty or held."""
        if not context or context in existing.context:
            return existing
        lines = [*existing.context.split(CONTEXT_JOIN), context][-2:] if existing.context else [context]
        room = (CONTEXT_CHARS - len(CONTEXT_JOIN)) // len(lines)
        joined = CONTEXT_JOIN.join(clip_line(line, room) for line in lines)
        self.store.set_contexts(ns, {existing.id: joined})  # the caller applies its outbox op
        return replace(existing, context=joined, version=existing.version + 1)

    def _link_locked(self, ns: Namespace, older_id: str, newer_id: str, actor: str) -> bool:
        """Link two live memories of ``ns`` as a conflict (under the namespace lock);
        False when one is gone or they were linked already."""
        try:
            made = self.store.add_conflict(ns, older_id, newer_id)
        except (NotFoundError, ValueError):
            return False
        if made:
            self.audit.record(ns, "conflict", actor, newer_id, reason="unsure", older=older_id)
            log.info("conflict in %s: memory %s and the older %s disagree; both kept", ns, newer_id, older_id)
        return made

    def _rejudge_locked(self, ns: Namespace, live: Memory, links, actor: str) -> None:
        """After a new version of ``live`` (its links were deleted with the old text):
        link it again with each former partner the new text still disagrees with
        unsurely (``memory.contradiction.judge``, older side first)."""
        if not links:
            return
        from memory.contradiction import judge  # its lexicons load only where a conflict exists

        for c in links:
            other_id = c.other(live.id)
            try:
                other = self.store.get(ns, other_id)
            except NotFoundError:
                continue
            older, newer = (other, live) if c.older_id == other_id else (live, other)
            if judge(older.text, newer.text).conflicts:
                self._link_locked(ns, older.id, newer.id, actor)

    def _revise(self, ns: Namespace, memory_id: str, memory: Memory, said: datetime, source_fp: str,
                actor: str) -> AddResult:
        """Edit path: ``memory_id`` takes ``memory``'s text, key and category in place."""
        cur = self.store.get(ns, memory_id)
        if normalise(cur.text) == normalise(memory.text) and cur.key == memory.key:
            self.audit.record(ns, "dedupe", actor, cur.id)
            return AddResult("deduped", cur)
        at = max(said, cur.valid_from) if cur.valid_from else said
        links = self.store.conflicts(ns, [memory_id])
        try:
            live = self.store.supersede(ns, memory_id, memory, at=at, source_fp=source_fp, key=memory.key)
        except IntegrityError:  # the new key appeared meanwhile (another process)
            existing = self.store.find_by_key(ns, memory.key)
            self.audit.record(ns, "dedupe", actor, existing.id if existing else None, reason="race")
            return AddResult("deduped", existing)
        self.audit.record(ns, "edit", actor, live.id, version=live.version)
        self._rejudge_locked(ns, live, links, actor)
        self._apply_outbox_for(ns, [live.id])
        return AddResult("revised", live)

    def _retract_locked(self, ns: Namespace, memory_id: str, actor: str) -> None:
        try:
            self.store.retract(ns, memory_id)
        except LookupError:
            return
        self.audit.record(ns, "retract", actor, memory_id)
        # their index deletes stay in the outbox for maintenance (recall skips rows gone from SQL)
        self._drop_citing_locked(ns, memory_id, actor, tombstone=False)  # what went is not told here

    def _drop_citing_locked(self, ns: Namespace, memory_id: str, actor: str, *, tombstone: bool
                            ) -> tuple[list[str], ForgetReceipt]:
        """Under the namespace lock, after ``memory_id`` left ``ns``: delete every
        consolidated memory of ``ns`` citing it (an abstraction never outlives a
        fragment it rests on), with ``tombstone`` the fingerprints of each one's
        every version recorded (a forget: the same abstraction from the fragments
        said before now is refused later). Returns their ids (audited as
        ``forget``/``retract`` with reason ``source``) and what their deletes
        removed (``derived`` = how many)."""
        gone: list[str] = []
        receipt = ForgetReceipt()
        for cid in self.store.citing(ns, memory_id):
            try:
                prints = [fingerprint(v.text) for v in self.store.history(ns, cid)] if tombstone else []
                receipt += self.store.delete(ns, cid, tombstones=prints, purge=tombstone)
            except NotFoundError:
                continue
            self.audit.record(ns, "forget" if tombstone else "retract", actor, cid, reason="source", source=memory_id)
            gone.append(cid)
        return gone, replace(receipt, derived=len(gone))

    def _scrub_retellings_locked(self, ns: Namespace, gone: Sequence[Memory]) -> tuple[list[str], int]:
        """The companion often says back what the person told it (「记住啦，你对花生过敏」);
        a forgotten or withdrawn statement (the versions ``gone``) must not stay
        searchable in the context of an answer, nor come back as the next one's:
        drop the context of every live memory of ``ns`` that retells one of their
        texts (``memory.text.retells``), and the companion's lines that retell one
        from the chat log of the chats they were said in
        (``Store.drop_retelling_lines``). Returns the ids whose context was dropped
        (their index rows need rewriting) and how many chat-log lines were deleted."""
        texts = [m.text for m in gone]
        dropped = self._drop_retelling_contexts_locked(ns, texts)
        chats = sorted({m.origin.key for m in gone if m.origin is not None})
        return dropped, self.store.drop_retelling_lines(ns.tenant, chats, texts)

    def _drop_retelling_contexts_locked(self, ns: Namespace, texts: Sequence[str]) -> list[str]:
        """Clear the context of every live memory of ``ns`` that retells one of
        ``texts``; the ids cleared."""
        drop = {mid: "" for mid, line in self.store.contexts(ns).items() if any(retells(line, t) for t in texts)}
        if drop:
            self.store.set_contexts(ns, drop)
        return list(drop)

    def drop_retelling_contexts(self, ns: Namespace, texts: Sequence[str]) -> list[str]:
        """``texts`` may not be known in ``ns`` (an import refused them by tombstone):
        drop every context of ``ns`` that retells one of them (as a forget does) and
        rewrite those index rows. Returns the ids whose context was dropped."""
        with self._locked(ns):
            dropped = self._drop_retelling_contexts_locked(ns, texts)
        if dropped:
            self._apply_outbox_for(ns, dropped)
        return dropped

    def retract(self, ns: Namespace, memory_id: str, *, actor: str = "edit") -> ForgetReceipt:
        """Remove a memory whose message was edited so that it no longer says it
        (no tombstone: saying it again is new evidence), with the consolidated
        memories that cite it and the contexts that retell it (as ``forget``).
        Returns the ``ForgetReceipt`` of what went (``tombstones`` 0).
        NotFoundError if it is not in ``ns``."""
        with self._locked(ns):
            versions = self.store.history(ns, memory_id)  # every version goes, as in forget
            receipt = self.store.retract(ns, memory_id)
            self.audit.record(ns, "retract", actor, memory_id)
            derived, of_derived = self._drop_citing_locked(ns, memory_id, actor, tombstone=False)
            retold, lines = self._scrub_retellings_locked(ns, versions)
        self._apply_outbox_for(ns, [memory_id, *derived, *retold])
        return replace(receipt + of_derived, memories=receipt.memories) + ForgetReceipt(chat_lines=lines,
                                                                                         contexts=len(retold))

    def new(self, ns: Namespace, text: str, **fields) -> Memory:
        """A Memory value for ``ns`` with a fresh id (not stored yet); ``text``
        repaired and without control characters (``memory.types.clean_controls``:
        no lone surrogate reaches the stores, no BEL or right-to-left override an
        admin's terminal); a ``context`` field likewise, cut to ``CONTEXT_CHARS``
        characters by ``clip_line`` (its speaker's name and the end of its text); a
        ``metadata`` field checked (``memory.metadata.check_metadata``; MetadataError)."""
        if fields.get("context"):
            fields["context"] = clip_line(clean_controls(fields["context"]), CONTEXT_CHARS)
        if "metadata" in fields:
            fields["metadata"] = check_metadata(fields["metadata"])  # MetadataError
        return Memory(id=new_memory_id(), namespace=ns, text=clean_controls(text), **fields)

    def recall(self, ns: Namespace, tail: Sequence[str], **kwargs) -> list[Hit]:
        """Hybrid recall (see memory.recall.recall) with this core's scorer, each hit
        with its conflict partner when it has one (``with_conflicts``). The query
        lines are repaired first (``memory.types.repair``): a lone surrogate in a
        query must not reach the tokenizer or the embedder.

        A namespace above ``exact_max`` is searched exactly from SQL instead of
        through the index (up to FALLBACK_EXACT_MAX memories; a WARNING, at most
        one every FALLBACK_WARN_S seconds) while the index is not ready (missing
        or unreadable at start-up, being rebuilt), and when an index search
        fails. Raises SearchIndexError only when that fallback is not possible.

        ``filters`` (a metadata filter, ``memory.metadata.check_filters``; MetadataError):
        only memories of ``ns`` whose metadata matches are recalled — the ids are
        read from ``ns`` alone (``filtered_ids``), so a filter narrows, never widens.

        The namespace's state (``Store.namespace_stats``) is read once, before the
        search, and serves the whole recall: the path, and which of the
        association-link, dormant-mark and conflict-link reads the namespace needs
        at all (one it never had is not asked)."""
        filters = check_filters(kwargs.pop("filters", None))
        if filters:
            only = frozenset(self.filtered_ids(ns, filters, kwargs.get("chat")))
            if not only:
                return []
            kwargs["only"] = only
        if kwargs.get("stats") is None and any(q and q.strip() for q in tail):
            kwargs["stats"] = self.store.namespace_stats(ns)
        stats = kwargs.get("stats")
        hits = self._recall(ns, tail, **kwargs)
        if stats is not None and not stats.may_have("conflicts"):
            return hits
        return self.with_conflicts(ns, hits, kwargs.get("chat"))

    def with_conflicts(self, ns: Namespace, hits: Sequence[Hit], chat: ChatRef | None = None) -> list[Hit]:
        """``hits`` (same order, same length) with each one's conflict partner
        (``Hit.conflict``): the other side of its newest conflict link in ``ns``,
        taken from the hits themselves or read from ``ns`` in SQL, and only when
        disclosed in ``chat`` (``memory.explain.visible_in``: a private memory never
        joins a group's recollection). When both sides are hits, each carries the
        other; the recollection tells the pair once (``memory.reconstruct.told``).
        A store failure here is logged and gives ``hits`` unchanged: the marks are a
        refinement, never a reason to lose the recall."""
        hits = list(hits)
        if not hits:
            return hits
        try:
            links = self.store.conflicts(ns, [h.memory.id for h in hits])
            if not links:
                return hits
            by_id = {h.memory.id: h.memory for h in hits}
            partner: dict[str, str] = {}
            for c in links:  # newest link first: it wins for a memory with several
                for side in (c.older_id, c.newer_id):
                    if side in by_id:
                        partner.setdefault(side, c.other(side))
            missing = sorted({p for p in partner.values() if p not in by_id})
            fetched = self.store.get_many(ns, missing) if missing else {}
        except StoreError as exc:
            log.warning("conflict marks of %s skipped: %s", ns, exc)
            return hits
        out: list[Hit] = []
        for h in hits:
            pid = partner.get(h.memory.id)
            other = (by_id.get(pid) or fetched.get(pid)) if pid is not None else None
            if other is not None and other.namespace == ns and visible_in(other, chat):
                h = replace(h, conflict=other)
            out.append(h)
        return out

    def _recall(self, ns: Namespace, tail: Sequence[str], **kwargs) -> list[Hit]:
        """``memory.recall.recall`` with the exact fallback (see ``recall``)."""
        kwargs.setdefault("scorer", self.scorer)
        kwargs.setdefault("cache", self.cache)
        tail = [repair(q) for q in tail]
        params: RecallParams = kwargs.get("params") or RecallParams()
        stats = kwargs.get("stats")
        if self._commits.linger_s > 0 and (stats is None or stats.live > params.exact_max) \
                and self._commits.holds(ns):
            self._commits.flush()  # the index path must see what this namespace just learned
        if not self.index_ready and params.exact_max < FALLBACK_EXACT_MAX \
                and self.store.count(ns) > params.exact_max:
            self._warn_fallback(ns, "the index is being rebuilt from SQL")
            return recall(self.store, self.index, ns, tail, **{**kwargs, "params": replace(
                params, exact_max=FALLBACK_EXACT_MAX)})
        try:
            return recall(self.store, self.index, ns, tail, **kwargs)
        except SearchIndexError as exc:
            if params.exact_max >= FALLBACK_EXACT_MAX:
                raise
            self._warn_fallback(ns, f"an index search failed: {exc}")
            return recall(self.store, self.index, ns, tail, **{**kwargs, "params": replace(
                params, exact_max=FALLBACK_EXACT_MAX)})

    def _warn_fallback(self, ns: Namespace, why: str) -> None:
        now = time.monotonic()
        if now - self._fallback_warned >= FALLBACK_WARN_S:
            self._fallback_warned = now
            log.warning("recall of %s falls back to the exact path (%s)", ns, why)

    def get(self, ns: Namespace, memory_id: str) -> Memory:
        """The live memory; NotFoundError if it is not in ``ns``."""
        return self.store.get(ns, memory_id)

    def list(self, ns: Namespace, limit: int = 50, offset: int = 0) -> list[Memory]:
        """Live memories of ``ns``, newest first."""
        return self.store.list(ns, limit=limit, offset=offset)

    def history(self, ns: Namespace, memory_id: str) -> list[Memory]:
        """All versions, oldest first, live last; NotFoundError if unknown in ``ns``."""
        return self.store.history(ns, memory_id)

    # -- adminchat (issue 26 item 18): an edit takes the category and key read from its new text --
    def update(self, ns: Namespace, memory_id: str, text: str, *, actor: str = "admin",
               category: Category | None = None, key: str | None = None, importance: float | None = None,
               emotion: tuple[float, float, str] | None = None) -> Memory:
        """A new version of ``memory_id`` with ``text`` (history kept, audited as
        ``edit``; its conflict links are re-judged with the new text, module
        docstring). The text is cleaned as ``new`` cleans it.

        ``category`` / ``key`` / ``importance`` (in [0, 1]) / ``emotion``
        (valence in [-1, 1], arousal in [0, 1], label): what the new text is about
        (``memory.capture.edit`` reads them from it); None keeps the current one,
        ``key=""`` is the new text's ``default_key``. Raises NotFoundError if the memory is not in
        ``ns``; KeyTakenError (nothing written) when another live memory of ``ns``
        holds the new key — the text says what that one says."""
        text = clean_controls(text)
        with self._locked(ns):
            cur = self.store.get(ns, memory_id)
            new = replace(cur, text=text, source_message_id=None, category=category or cur.category,
                          importance=cur.importance if importance is None else importance)
            if emotion is not None:
                new = replace(new, valence=emotion[0], arousal=emotion[1], emotion=emotion[2])
            if key == "":
                key = default_key(new)
            if key is not None and key != cur.key:
                holder = self.store.find_by_key(ns, key)
                if holder is not None and holder.id != memory_id:
                    raise KeyTakenError(f"memory {holder.id} of {ns} holds that key", holder.id)
            links = self.store.conflicts(ns, [memory_id])
            try:
                live = self.store.supersede(ns, memory_id, new, key=key)
            except IntegrityError:  # another process took the key meanwhile
                holder = self.store.find_by_key(ns, key or "")
                raise KeyTakenError(f"a memory of {ns} holds that key", holder.id if holder else "") from None
            self.audit.record(ns, "edit", actor, memory_id, version=live.version)
            self._rejudge_locked(ns, live, links, actor)
        self._link_entities(ns, live, live.updated_at or utcnow())  # the old text's links went with it
        self._apply_outbox_for(ns, [memory_id])
        return live
    # -- end adminchat --

    def forget(self, ns: Namespace, memory_id: str, *, actor: str = "admin", purge: bool = True) -> ForgetReceipt:
        """Forget a memory so that it stays forgotten; returns the ``ForgetReceipt``
        of what went, counted from each step's own deletes. NotFoundError if it is
        not in ``ns``.

        - SQL: the live row and every history version are deleted, and so are the
          speaker's chat-log lines it was learned from (the chat log is the
          conversation tail that prompts are built from, not memory — but it must
          not keep feeding a forgotten statement back into prompts). SQLite zeroes
          freed pages and the WAL is truncated (``Store.scrub``).
        - Tombstones: fingerprints of every version's text and of the evidence each
          was learned from, dated now. No write path may re-create the memory from a
          message said before now; said again later, it is a new memory.
        - Audit: ``forget`` with the id only — no text, no key.
        - Index: the row is deleted and, with ``purge`` (default), LanceDB's files
          are compacted and old versions removed (``SearchIndex.purge``), so no index
          file keeps the text. ``purge=False`` leaves that to the next ``maintain()``
          (a queued ``purge`` operation; the gateway runs it every 15 s).
        - Consolidated memories citing it (``memory.consolidate``) are forgotten
          with it, their texts tombstoned, so that no later consolidation of the
          fragments said before now brings the abstraction back.
        - Contexts: another memory whose context (the companion's line it
          answered) retells one of its versions loses that context
          (``memory.text.retells``), so the forgotten statement is not found or
          told through it.
        - Cache: this process's cached view of the namespace is dropped at once (the
          text leaves process memory; the next recall reloads the namespace).
        """
        with self._locked(ns):
            versions = self.store.history(ns, memory_id)
            prints = [fingerprint(v.text) for v in versions] + sorted(self.store.fingerprints(ns, memory_id))
            receipt = self.store.delete(ns, memory_id, tombstones=prints, redact_sources=True, purge=True)
            self.audit.record(ns, "forget", actor, memory_id, versions=len(versions))
            derived, of_derived = self._drop_citing_locked(ns, memory_id, actor, tombstone=True)
            retold, lines = self._scrub_retellings_locked(ns, versions)
            rows, postings = self.cache.drop(ns, [memory_id, *derived]) if self.cache is not None else (0, 0)
        receipt = replace(receipt + of_derived, memories=receipt.memories) + ForgetReceipt(chat_lines=lines, contexts=len(retold), cache_entries=rows,
                                                       bm25_postings=postings)
        self._apply_outbox_for(ns, [memory_id, *derived, *retold])
        try:
            self.store.scrub()
        except Exception as exc:  # noqa: BLE001 - the forget itself has committed; the next scrub finishes it
            log.warning("WAL scrub after forget in %s failed: %s", ns, exc)
        if purge:
            self.purge()
        return receipt

    def purge(self) -> int:
        """Apply queued index purges (``SearchIndex.purge``) once for all of them;
        returns how many queued purges were cleared (0 when none was pending). A
        failure keeps them queued and is logged."""
        with self.index.writing():  # another replica's purge or write waits (memory.index)
            ops = self.store.pending_ops(100_000, kinds=("purge",))
            if not ops:
                return 0
            try:
                self.index.purge()
            except SearchIndexError as exc:
                log.warning("index purge deferred (%s); %d purges stay queued", exc, len(ops))
                self.store.fail_ops([o.id for o in ops])
                return 0
            self.store.clear_ops([o.id for o in ops])
            return len(ops)

    def forget_everything_said_before_now(self, ns: Namespace, group_key: str | None = None) -> None:
        """A tombstone for the whole subject of ``ns`` (or, with ``group_key``, for
        what they said in that group): from now on no write path stores anything
        of theirs learned from a message said before now — a capture still queued
        or running, a replay, an edit. Said again later, it is new. Set it before
        forgetting the existing memories of a "forget everything".

        Taken under the namespace's write lock: an ``add`` that already passed its
        tombstone check finishes first (and is then forgotten with the rest), so
        no capture running at this moment can slip a memory in after the forget."""
        with self._locked(ns):
            self.store.add_tombstone(ns, subject_mark(group_key))

    def mark_recalled(self, ns: Namespace, ids: Sequence[str], at: datetime | None = None) -> None:
        """Record that these memories went into a prompt together: their ACT-R
        access times, where a consolidated one among them also counts a hit and
        wakes up if it was dormant (``Store.touch``); and a ``recalled``
        association link between each pair of them (``Store.strengthen_links``:
        the first ``MAX_LINKED_IDS``, only live memories of ``ns``;
        ``self.links.recalled`` per co-use, 0: none)."""
        self.store.touch(ns, ids, at)
        if self.links.recalled > 0 and len(set(ids)) > 1:
            self.store.strengthen_links(ns, ids, reason="recalled", at=at, amount=self.links.recalled,
                                        half_life_days=self.links.half_life_days)

    def note_recalled(self, ns: Namespace, ids: Sequence[str], at: datetime | None = None) -> None:
        """``mark_recalled``, held in memory and written with the other turns' marks
        at most ``marks_every_s`` seconds later (``memory.marks.RecallMarks``: one
        row per namespace, its state row, folded into the memories and links rows
        once it grows; a crash loses at most that window's marks; a forget always
        wins). What a turn's bookkeeping calls; ``flush_marks`` writes them now."""
        # the links made as ``self.links`` says now (a caller may swap it, as for mark_recalled)
        self.marks.recalled, self.marks.half_life_days = self.links.recalled, self.links.half_life_days
        self.marks.note(ns, ids, at or utcnow())

    def flush_marks(self, *, due_only: bool = False, ns: Namespace | None = None) -> int:
        """Write the marks ``note_recalled`` holds (``RecallMarks.flush``); the memories
        written. ``due_only``: only when ``marks_every_s`` has passed since the last
        write (``RecallMarks.flush_due``: what a periodic pass calls, so its own
        cadence does not shorten the window). ``ns``: only that namespace's marks,
        now (a command about to show its memories' last recall)."""
        if ns is not None:
            return self.marks.flush(ns)
        return self.marks.flush_due() if due_only else self.marks.flush()

    def fold_marks(self) -> int:
        """``flush_marks``, then fold every namespace's pending marks into its
        memories and links rows (``RecallMarks.fold``); the memories and pairs
        folded. Readers see the same times and weights before and after."""
        return self.marks.fold()

    def _link_entities(self, ns: Namespace, memory: Memory, said: datetime) -> None:
        """Entity links of a memory just stored or superseded (``memory.links.link_entities``);
        inside ``batch()`` they are made at the block's end, one scan per namespace
        for the whole block. A failure is logged, never the add's."""
        deferred = getattr(self._deferred, "links", None)
        if deferred is not None:
            deferred.setdefault(ns, []).append((memory.id, memory.text, said))
            return
        self._link_entities_of({ns: [(memory.id, memory.text, said)]})

    def _link_entities_of(self, pending: dict[Namespace, list[tuple[str, str, datetime]]]) -> None:
        for ns, new in pending.items():
            try:
                link_entities(self.store, ns, new, self.links)
            except Exception:  # noqa: BLE001 - links are a recall aid; the memories are stored
                log.exception("entity links of %d memories in %s failed", len(new), ns)

    # -- metadata, batches (issue 26 item 17) -----------------------------------

    def filtered_ids(self, ns: Namespace, filters, chat: ChatRef | None = None) -> list[str]:
        """Ids of the live memories of ``ns`` whose metadata matches ``filters``
        (``memory.metadata.check_filters``; MetadataError), newest first; with a
        group ``chat`` only those disclosed there (DESIGN rule 6). Read from ``ns``
        alone: no filter reaches another namespace."""
        wanted = check_filters(filters)
        group = chat.group_key if chat is not None and chat.is_group else None
        return [mid for mid, meta in self.store.ids_with_metadata(ns, group) if matches(load_metadata(meta), wanted)]

    def find(self, ns: Namespace, filters, *, chat: ChatRef | None = None, limit: int = 50,
             offset: int = 0) -> tuple[int, list[Memory]]:
        """``(how many match, the page)``: live memories of ``ns`` (disclosed in
        ``chat``) whose metadata matches ``filters``, newest first. MetadataError
        for a bad filter."""
        ids = self.filtered_ids(ns, filters, chat)
        page = ids[offset:offset + limit]
        got = self.store.get_many(ns, page)
        return len(ids), [got[i] for i in page if i in got]

    def set_metadata(self, ns: Namespace, memory_id: str, patch, *, actor: str = "admin") -> Memory:
        """Apply a metadata ``patch`` to ``memory_id`` (``memory.metadata.merged``: a
        key set to None is removed), in place — no new version (audited
        ``metadata``, keys only). MetadataError, NotFoundError if it is not in ``ns``."""
        with self._locked(ns):
            cur = self.store.get(ns, memory_id)
            meta = merged(cur.metadata, patch)
            if meta == cur.metadata:
                return cur
            live = self.store.set_metadata(ns, memory_id, meta)
            self.audit.record(ns, "metadata", actor, memory_id, keys=len(meta))
        return live

    def edit(self, ns: Namespace, memory_id: str, *, text: str | None = None, metadata=None,
             actor: str = "admin", retext=None) -> Memory:
        """A new version with ``text`` and/or ``set_metadata`` with the patch
        ``metadata``; at least one of them (ValueError otherwise). ``retext(core, ns,
        memory_id, text) -> Memory`` writes the text (default ``update``; the
        gateway's ``memory.capture.edit`` also reads its category and key). The
        patch is checked before anything is written. MetadataError, NotFoundError,
        KeyTakenError (from ``retext``: nothing written)."""
        if text is None and metadata is None:
            raise ValueError("an edit needs a text or a metadata patch")
        if metadata is not None:
            merged(self.store.get(ns, memory_id).metadata, metadata)  # refuse a bad patch before the new version
        if text is not None:
            live = retext(self, ns, memory_id, text) if retext is not None else self.update(ns, memory_id, text,
                                                                                            actor=actor)
        else:
            live = None
        if metadata is not None:
            live = self.set_metadata(ns, memory_id, metadata, actor=actor)
        return live  # type: ignore[return-value]

    def forget_many(self, ns: Namespace, ids: Sequence[str], *, actor: str = "admin",
                    purge: bool = True) -> dict[str, ForgetReceipt | None]:
        """``forget`` each of ``ids`` in ``ns`` (tombstoned, as every forget), then
        one index purge (``purge=False``: left to the next ``maintain()``, as
        ``forget``'s): ``{id: its ForgetReceipt}`` when it was forgotten, ``{id:
        None}`` when ``ns`` has no such memory (any more: an abstraction that
        went with an earlier id of the batch) — an id of another namespace is not
        found and never touched. Per item: one id not found does not stop the others."""
        out: dict[str, ForgetReceipt | None] = {}
        for mid in dict.fromkeys(ids):
            try:
                out[mid] = self.forget(ns, mid, actor=actor, purge=False)
            except NotFoundError:
                out[mid] = None
        if purge and any(out.values()):
            self.purge()
        return out

    def edit_many(self, ns: Namespace, items: Sequence[tuple[str, str | None, object]], *,
                  actor: str = "admin", retext=None) -> dict[str, tuple[str, Memory | None]]:
        """``edit`` each ``(id, text or None, metadata patch or None)`` in ``ns``:
        ``{id: ("updated", the live memory)}``, ``("not_found", None)`` when ``ns``
        has no such memory (another namespace's id is never touched) or
        ``("conflict", None)`` when its text is what another memory holds
        (KeyTakenError: that item unchanged). Every patch is checked before
        anything is written (MetadataError: nothing changed); ids must be distinct
        (ValueError). ``retext`` as in ``edit``."""
        if len({i for i, _, _ in items}) != len(items):
            raise ValueError("each id at most once in a batch")
        for _, text, patch in items:
            if text is None and patch is None:
                raise ValueError("each item needs a text or a metadata patch")
            if patch is not None:
                merged({}, patch)  # keys and values checked (a None only removes)
        out: dict[str, tuple[str, Memory | None]] = {}
        for mid, text, patch in items:
            try:
                out[mid] = ("updated", self.edit(ns, mid, text=text, metadata=patch, actor=actor, retext=retext))
            except NotFoundError:
                out[mid] = ("not_found", None)
            except KeyTakenError:
                out[mid] = ("conflict", None)
        return out

    # -- index maintenance -------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Defer the index writes of this thread's core calls until the block ends,
        then apply them all in one index write (bulk ingest: imports, replays,
        benchmarks). SQL and the outbox are written at once as usual, so a crash
        inside the block loses no memory: maintenance applies the outbox. The
        block's entity links are made at its end too, one namespace scan for all
        (``memory.links.link_entities``); a crash inside the block loses only
        those links (a recall aid). Nested blocks join the outermost one."""
        if getattr(self._deferred, "ids", None) is not None:
            yield
            return
        self._deferred.ids = {}
        self._deferred.links = {}
        try:
            yield
        finally:
            pending: dict[Namespace, set[str]] = self._deferred.ids
            links: dict[Namespace, list[tuple[str, str, datetime]]] = self._deferred.links
            self._deferred.ids = self._deferred.links = None
            if links:
                self._link_entities_of(links)
            if pending:
                self._commits.submit(pending, linger=True)

    def _apply_outbox_for(self, ns: Namespace, ids: Sequence[str], *, linger: bool = False) -> None:
        """The index write of ``ids``' outbox ops: deferred to the end of ``batch()``,
        queued for the lingering write (``linger``: an add, with ``index_linger_s``),
        else now. Edits, forgets and moves are written now."""
        deferred = getattr(self._deferred, "ids", None)
        if deferred is not None:
            deferred.setdefault(ns, set()).update(ids)
            return
        self._commits.submit({ns: set(ids)}, linger=linger)

    @property
    def index_linger_s(self) -> float:
        """Seconds an add's index write may linger (0: none; ``__init__``)."""
        return self._commits.linger_s

    @property
    def index_writes(self) -> int:
        """Index writes made by adds, edits and forgets since opening (each one
        LanceDB fragment at most; maintenance's own passes not counted)."""
        return self._commits.writes

    def index_lingering(self, ns: Namespace) -> bool:
        """Whether memories of ``ns`` wait for their index write (``index_linger_s``)."""
        return self._commits.holds(ns)

    def flush_index(self) -> None:
        """Write the index writes that linger (``index_linger_s``) now; returns once
        they are written (or failed and were logged: the outbox keeps them)."""
        self._commits.flush()

    def _write_index(self, targets: dict[Namespace, set[str]]) -> None:
        """The group commit's write: the outbox ops of ``targets`` in one index write;
        a failure is logged and the outbox keeps the ops for maintenance."""
        try:
            self.maintain(only=targets)
        except Exception as exc:  # noqa: BLE001 - SQL has committed; the outbox keeps what failed
            log.warning("index write deferred for %d namespace(s) (%s); the outbox keeps it", len(targets), exc)

    def maintain(self, *, only: tuple[Namespace, set[str]] | dict[Namespace, set[str]] | None = None,
                 limit: int = 500) -> int:
        """Apply pending outbox operations to the index; returns how many were applied.

        ``only``: the ops of these memory ids per namespace (a ``(ns, ids)`` pair or
        a ``{ns: ids}`` map); None: the oldest ``limit`` ops of the whole outbox (the
        background pass). Deletes go per namespace; every upsert of the pass, over all
        its namespaces, goes in one index write (each row keeps its own namespace:
        rows are read back from SQL per namespace, ``Store.get_many``). Failures stay
        queued (attempt counted) and raise SearchIndexError after the pass. Without
        ``only``, queued purges run last, once.

        The whole pass holds the index's write lock (``SearchIndex.writing``), also
        against other processes on the same index: what one pass reads from SQL is
        in the index before another pass reads, so a slower replica never writes
        an older version of a memory over a newer one.
        """
        with self.index.writing():
            return self._maintain(only, limit)

    def _maintain(self, only: tuple[Namespace, set[str]] | dict[Namespace, set[str]] | None, limit: int) -> int:
        """``maintain`` under the index's write lock."""
        if isinstance(only, tuple):
            only = {only[0]: set(only[1])}
        purges = []
        read: dict[Namespace, dict[str, Memory]] | None = None
        if only is not None:  # one outbox query for the whole batch, each op kept only for its own namespace,
            # and the rows of its ids read with it (one call: the ids are known before their ops)
            wanted = {(ns, mid) for ns, ids in only.items() for mid in ids}
            found, read = self.store.pending_ops_and_rows(limit + 8 * len(wanted), only, kinds=("upsert", "delete"))
            ops = [op for op in found if (op.namespace, op.memory_id) in wanted]
        else:
            ops = self.store.pending_ops(limit, kinds=("upsert", "delete"))
            purges = self.store.pending_ops(1, kinds=("purge",))
        if not ops:
            if purges:
                self.purge()
            return 0
        by_ns: dict[Namespace, list] = {}
        for op in ops:
            by_ns.setdefault(op.namespace, []).append(op)
        done: list[int] = []
        failed: list[int] = []
        error: Exception | None = None
        upserts: list[Memory] = []
        upsert_ops: list[int] = []
        wanted = {ns: sorted({op.memory_id for op in ns_ops}) for ns, ns_ops in by_ns.items()}
        # ids never tried anywhere (_Unindexed) are appended; an op that failed before may have written its row
        new = self._unindexed.take([op.memory_id for op in ops])
        new -= {op.memory_id for op in ops if op.attempts > 0}
        if not self.index_ready or self._rebuilding.locked():  # a rebuild writes rows outside the outbox
            new = set()
        try:
            if read is not None:  # read with the ops: only the rows of ids with an op here
                lives = {ns: {i: mem for i, mem in read.get(ns, {}).items() if i in set(ids)}
                         for ns, ids in wanted.items()}
            else:
                lives = self.store.get_many_of(wanted)  # one read for every namespace of the pass
        except Exception as exc:  # noqa: BLE001 - the ops stay queued
            lives, error = None, exc
        for ns, ns_ops in by_ns.items():
            try:
                if lives is None:
                    raise error  # type: ignore[misc]
                live = lives[ns]
                self.index.delete(ns, [mid for mid in wanted[ns] if mid not in live])
            except Exception as exc:  # noqa: BLE001 - any index failure keeps the ops queued
                error = exc
                failed += [o.id for o in ns_ops]
                continue
            upserts += live.values()
            upsert_ops += [o.id for o in ns_ops]
        try:
            self.index.upsert(upserts, new=new)
            done += upsert_ops
        except Exception as exc:  # noqa: BLE001
            error = exc
            failed += upsert_ops
        self.store.clear_ops(done)
        self.store.fail_ops(failed)
        if purges and error is None:
            self.purge()  # after the deletes it compacts away
        if error is not None:
            raise SearchIndexError(f"{len(failed)} index operations still pending: {error}") from error
        return len(done)

    def close(self) -> None:
        """Write the index writes that linger, the recall marks and the recall traces
        still held (``memory.store.traces``), stop the cache's background loads and
        release the SQL connection pool."""
        self._commits.close()
        try:
            self.marks.flush()
        except Exception:  # noqa: BLE001 - closing goes on; the marks are a ranking aid
            log.exception("recall marks lost at close")
        try:
            self.store.save_held_recalls()
        except Exception:  # noqa: BLE001 - closing goes on; a trace explains, it is no memory
            log.exception("recall traces lost at close")
        if self.cache is not None:
            self.cache.close()
        self.store.close()
