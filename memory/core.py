"""``MemoryCore``: the verb set over the store and the index.

add / recall / get / list / update / forget / history, each taking a
``Namespace`` first (an unscoped call cannot be written). SQL is written
first, with an outbox row; the index is updated right after. If the index
write fails the outbox row stays and ``maintain()`` re-applies it: a crash or
an index outage between SQL and index is repaired, never lost.

Methods are synchronous and thread-safe; the async gateway calls them through
``asyncio.to_thread`` so jieba and the embedder never block the event loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy.exc import IntegrityError

from memory.errors import SearchIndexError
from memory.index import SearchIndex
from memory.recall import RecallParams, Scorer, recall
from memory.store import Store, new_memory_id, utcnow
from memory.text import fingerprint, normalise
from memory.types import Hit, Memory, Namespace

__all__ = ["MemoryCore", "AddResult"]

log = logging.getLogger(__name__)


class AddResult:
    """Outcome of ``MemoryCore.add``: ``action`` is ``stored``, ``deduped``,
    ``superseded`` or ``rejected`` (tombstoned); ``memory`` is the live memory
    (None when rejected)."""

    __slots__ = ("action", "memory")

    def __init__(self, action: str, memory: Memory | None) -> None:
        self.action = action
        self.memory = memory

    def __repr__(self) -> str:
        return f"AddResult({self.action!r}, {self.memory.id if self.memory else None})"


class MemoryCore:
    """Store + index + scorer. ``scorer`` rescales fused hits (memory.scoring)."""

    def __init__(self, store: Store, index: SearchIndex, scorer: Scorer | None = None) -> None:
        self.store = store
        self.index = index
        self.scorer = scorer
        self._ns_locks: dict[str, threading.Lock] = {}
        self._ns_locks_guard = threading.Lock()
        if index.needs_rebuild:
            from memory.admin import OPERATOR, reindex

            reindex(self, OPERATOR)

    # -- locking: one writer per namespace so duplicate checks cannot race --

    def _lock(self, ns: Namespace) -> threading.Lock:
        with self._ns_locks_guard:
            return self._ns_locks.setdefault(str(ns), threading.Lock())

    # -- verbs ------------------------------------------------------------

    def add(self, ns: Namespace, memory: Memory, *, said_at: datetime | None = None, actor: str = "capture") -> AddResult:
        """Store ``memory`` in ``ns`` under its canonical key.

        Same key + same normalised text → ``deduped`` (the old row is kept);
        same key + new text → ``superseded`` (latest wins, history kept); a
        fingerprint forgotten after ``said_at`` → ``rejected``. Raises
        ValueError if ``memory.namespace`` is not ``ns``.
        """
        if memory.namespace != ns:
            raise ValueError("memory.namespace differs from the namespace of the call")
        if not memory.key:
            memory = replace(memory, key=f"{memory.category.value}:{normalise(memory.text)}"[:500])
        with self._lock(ns):
            forgotten = self.store.tombstoned_at(ns, fingerprint(memory.text))
            said = said_at or memory.created_at or utcnow()
            if forgotten is not None and said <= forgotten:
                self.store.audit(ns, "reject", actor, None, reason="tombstone")
                return AddResult("rejected", None)
            existing = self.store.find_by_key(ns, memory.key)
            if existing is not None:
                if normalise(existing.text) == normalise(memory.text):
                    self.store.audit(ns, "dedupe", actor, existing.id)
                    return AddResult("deduped", existing)
                live = self.store.supersede(ns, existing.id, memory, at=said)
                self.store.audit(ns, "supersede", actor, live.id, version=live.version)
                action = "superseded"
            else:
                try:
                    live = self.store.add(ns, memory)
                except IntegrityError:  # another process won the race on (ns, key)
                    existing = self.store.find_by_key(ns, memory.key)
                    return AddResult("deduped", existing)
                self.store.audit(ns, "store", actor, live.id, category=live.category.value)
                action = "stored"
        self._apply_outbox_for(ns, [live.id])
        return AddResult(action, live)

    def new(self, ns: Namespace, text: str, **fields) -> Memory:
        """A Memory value for ``ns`` with a fresh id (not stored yet)."""
        return Memory(id=new_memory_id(), namespace=ns, text=text, **fields)

    def recall(self, ns: Namespace, tail: Sequence[str], **kwargs) -> list[Hit]:
        """Hybrid recall (see memory.recall.recall) with this core's scorer."""
        kwargs.setdefault("scorer", self.scorer)
        return recall(self.store, self.index, ns, tail, **kwargs)

    def get(self, ns: Namespace, memory_id: str) -> Memory:
        """The live memory; NotFoundError if it is not in ``ns``."""
        return self.store.get(ns, memory_id)

    def list(self, ns: Namespace, limit: int = 50, offset: int = 0) -> list[Memory]:
        """Live memories of ``ns``, newest first."""
        return self.store.list(ns, limit=limit, offset=offset)

    def history(self, ns: Namespace, memory_id: str) -> list[Memory]:
        """All versions, oldest first, live last; NotFoundError if unknown in ``ns``."""
        return self.store.history(ns, memory_id)

    def update(self, ns: Namespace, memory_id: str, text: str, *, actor: str = "admin") -> Memory:
        """A new version of ``memory_id`` with ``text`` (history kept, audited)."""
        with self._lock(ns):
            cur = self.store.get(ns, memory_id)
            live = self.store.supersede(ns, memory_id, replace(cur, text=text))
            self.store.audit(ns, "edit", actor, memory_id, version=live.version)
        self._apply_outbox_for(ns, [memory_id])
        return live

    def forget(self, ns: Namespace, memory_id: str, *, actor: str = "admin") -> None:
        """Remove the memory from SQL and index, keep no copy of its text, and leave
        a tombstone (fingerprint of the normalised text) in ``ns``. NotFoundError if
        it is not in ``ns``."""
        with self._lock(ns):
            cur = self.store.get(ns, memory_id)
            prints = {fingerprint(m.text) for m in self.store.history(ns, memory_id)} | {fingerprint(cur.text)}
            self.store.delete(ns, memory_id, tombstone=fingerprint(cur.text))
            for fp in prints - {fingerprint(cur.text)}:
                self.store.add_tombstone(ns, fp)
            self.store.audit(ns, "forget", actor, memory_id)
        self._apply_outbox_for(ns, [memory_id])

    def mark_recalled(self, ns: Namespace, ids: Sequence[str], at: datetime | None = None) -> None:
        """Record that these memories went into a prompt (ACT-R access times)."""
        self.store.touch(ns, ids, at)

    # -- index maintenance -------------------------------------------------

    def _apply_outbox_for(self, ns: Namespace, ids: Sequence[str]) -> None:
        try:
            self.maintain(only=(ns, set(ids)))
        except SearchIndexError as exc:
            log.warning("index write deferred for %s (%s); the outbox keeps it", ns, exc)

    def maintain(self, *, only: tuple[Namespace, set[str]] | None = None, limit: int = 500) -> int:
        """Apply pending outbox operations to the index; returns how many were applied.

        Upserts are batched per namespace into one index write. Failures stay
        queued (attempt counted) and raise SearchIndexError after the batch.
        """
        ops = self.store.pending_ops(limit)
        if only is not None:
            ns_only, ids_only = only
            ops = [o for o in ops if o.namespace == ns_only and o.memory_id in ids_only]
        if not ops:
            return 0
        by_ns: dict[Namespace, list] = {}
        for op in ops:
            by_ns.setdefault(op.namespace, []).append(op)
        done: list[int] = []
        failed: list[int] = []
        error: Exception | None = None
        for ns, ns_ops in by_ns.items():
            latest: dict[str, object] = {}
            for op in ns_ops:  # the last op per memory decides
                latest[op.memory_id] = op
            try:
                live = self.store.get_many(ns, list(latest))
                gone = [mid for mid in latest if mid not in live]
                self.index.delete(ns, gone)
                self.index.upsert(list(live.values()))
                done += [o.id for o in ns_ops]
            except Exception as exc:  # noqa: BLE001 - any index failure keeps the ops queued
                error = exc
                failed += [o.id for o in ns_ops]
        self.store.clear_ops(done)
        self.store.fail_ops(failed)
        if error is not None:
            raise SearchIndexError(f"{len(failed)} index operations still pending: {error}") from error
        return len(done)

    def close(self) -> None:
        """Release the SQL connection pool."""
        self.store.close()
