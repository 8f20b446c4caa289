"""Recall's marks, held in process and written together: which memories went
into a prompt, and when.

Every answered turn marks the memories its recollection cited: their ACT-R
access times (``memory.scoring``'s activation reads them), a hit for a
consolidated one, and a ``recalled`` association link between each pair
(``memory.links``). Written at once that is a row update per memory and per
pair on every turn — most of a turn's SQL rows — while a person's next turns,
seconds apart, mark mostly the same memories again. ``RecallMarks`` keeps the
marks of the last ``every_s`` seconds in memory and writes them in one pass
(``flush``): per namespace one row, its ``namespace_state`` row
(``Store.pend_marks``), which holds each memory's new times and each pair's
added weight until it grows past ``memory.store.pending.FOLD_AT`` and is
folded into the memories and links rows (each memory and pair written once
per fold, however many windows marked it; the decay between co-uses is left
out, so the weights are those of marking each turn at once). A pair not linked
yet becomes a link once co-used in ``memory.store.pending.NEW_LINK_USES``
turns before the fold (2 shipped: a pair co-used once stays a count). Every reader of
access times and links merges what waits in the row (``memory.store.pending``),
so recall scores the same before and after a fold.

What this gives up, and why it is safe:

- A crash (or a kill) loses the marks not yet written: at most ``every_s``
  seconds of access times and co-recall weight. They were never acknowledged
  to anyone, nor are they a memory: activation is a ranking term, and a lost
  mark reads as a recall that was not recorded. A clean shutdown writes them
  (``MemoryCore.close``, and the gateway's lifespan).
- Until flushed, the marks are not in SQL: another replica or the API's
  ``recalled_at`` see them up to ``every_s`` seconds late (once flushed, every
  reader merges them, folded or not). A ``/memory`` command (list, why,
  export …) first writes the marks this process holds for the namespace it
  shows (``flush(ns)``).
- A forget always wins: a flush keeps only ids that are live memories of the
  namespace in SQL when it runs (checked in its transaction), a forget drops
  the forgotten memory's pending pairs, and a fold updates only live rows and
  links only two live memories, so a mark never brings back a forgotten memory
  or its links. Isolation is the store's: every write takes the namespace and
  keeps only that namespace's ids, in that namespace's row.

Thread-safe: ``note`` is called from the turns' worker threads; the one that
finds the window elapsed flushes (others keep buffering meanwhile).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from memory.links import DEFAULT_HALF_LIFE_DAYS, MAX_LINKED_IDS
from memory.types import Namespace

__all__ = ["FLUSH_EVERY_S", "MAX_PENDING", "RecallMarks"]

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 60.0
"""Seconds a mark may wait in memory before it is written (the most a crash loses). A
person's turns seconds apart mark mostly the same memories, so the longer window writes
each of them (and each pair) once for more turns: issue 41's rows per message."""
MAX_PENDING = 5000
"""Marked memories held at most before a flush is due anyway (bounds the memory held)."""


class RecallMarks:
    """The buffer (see the module docstring). ``store``: a ``memory.store.Store``;
    ``recalled``: the weight a pair gains per co-use (``LinkParams.recalled``; 0:
    no links); ``half_life_days`` (> 0): the links' decay; ``every_s`` (≥ 0, 0:
    every ``note`` writes at once); ``clock``: seconds, monotonic."""

    def __init__(self, store, *, recalled: float = 1.0, half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
                 every_s: float = FLUSH_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        if every_s < 0 or half_life_days <= 0 or recalled < 0:
            raise ValueError("every_s and recalled must be ≥ 0, half_life_days > 0")
        self.store = store
        self.recalled = recalled
        self.half_life_days = half_life_days
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._times: dict[Namespace, dict[str, list[datetime]]] = {}
        self._pairs: dict[Namespace, dict[tuple[str, str], tuple[float, datetime, int]]] = {}
        self._held = 0
        self._since = clock()

    @property
    def pending(self) -> int:
        """Memories whose marks wait to be written."""
        return self._held

    def note(self, ns: Namespace, ids: Sequence[str], at: datetime) -> None:
        """Mark that ``ids`` of ``ns`` went into one prompt at ``at`` (aware): kept
        until the next flush, which this call runs when ``every_s`` has passed
        since the last one or ``MAX_PENDING`` memories are held. The pairs are
        those ``Store.strengthen_links`` would link: among the first
        ``MAX_LINKED_IDS`` distinct ids. Raises StoreError only from a flush it runs."""
        wanted = list(dict.fromkeys(i for i in ids if i))
        if not wanted:
            return
        with self._lock:
            times = self._times.setdefault(ns, {})
            for i in wanted:
                if i not in times:
                    times[i] = []
                    self._held += 1
                times[i].append(at)
            linked = wanted[:MAX_LINKED_IDS]
            if self.recalled > 0 and len(linked) > 1:
                pairs = self._pairs.setdefault(ns, {})
                for k, a in enumerate(linked):
                    for b in linked[k + 1:]:
                        p = (a, b) if a < b else (b, a)
                        amount, last, uses = pairs.get(p, (0.0, at, 0))
                        pairs[p] = (amount + self.recalled, max(last, at), uses + 1)
            due = self._held >= MAX_PENDING or self._clock() - self._since >= self.every_s
        if due:
            self.flush()

    def due(self) -> bool:
        """Whether ``every_s`` seconds have passed since the last flush (or
        ``MAX_PENDING`` memories are held) with marks waiting."""
        with self._lock:
            return self._held > 0 and (self._held >= MAX_PENDING or self._clock() - self._since >= self.every_s)

    def flush_due(self) -> int:
        """``flush`` when ``due`` (the periodic caller's: the gateway's maintenance
        pass runs more often than the window); else 0 and nothing written."""
        return self.flush() if self.due() else 0

    def flush(self, ns: Namespace | None = None) -> int:
        """Write every mark held (per namespace: one ``Store.pend_marks``, one row
        unless it folds); returns the live memories marked. A namespace whose
        write fails keeps nothing (logged; the marks are a ranking aid, never worth
        a turn) and the others are still written. Flushes one at a time.
        ``ns``: only that namespace's marks (nothing written when it holds none),
        before a read that shows them (``/memory list`` right after a recall); the
        window of the others goes on."""
        with self._flushing:
            with self._lock:
                if ns is not None:
                    times = {ns: self._times.pop(ns)} if ns in self._times else {}
                    pairs = {ns: self._pairs.pop(ns)} if ns in self._pairs else {}
                    self._held -= len(times.get(ns, ()))
                else:
                    times, pairs = self._times, self._pairs
                    self._times, self._pairs, self._held = {}, {}, 0
                    self._since = self._clock()
            written = 0
            for ns in times.keys() | pairs.keys():
                try:
                    written += self.store.pend_marks(ns, times.get(ns, {}), pairs.get(ns, {}),
                                                     half_life_days=self.half_life_days)
                except Exception:
                    log.exception("recall marks of %s could not be written; dropped", ns)
            return written

    def fold(self) -> int:
        """``flush``, then fold every namespace's pending row into its memories and
        links rows now (``Store.fold_marks``; what a flush does by itself once a
        row grows past ``memory.store.pending.FOLD_AT``): for an operator or a
        benchmark that wants every mark in the rows. Returns the memories and
        pairs folded. A namespace whose fold fails keeps its row (logged)."""
        self.flush()
        folded = 0
        with self._flushing:
            for ns in self.store.pending_namespaces():
                try:
                    folded += self.store.fold_marks(ns, half_life_days=self.half_life_days)
                except Exception:
                    log.exception("recall marks of %s could not be folded; kept in its row", ns)
        return folded
