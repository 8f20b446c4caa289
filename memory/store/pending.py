"""Recall marks waiting in their namespace's state row (``namespace_state.marks``):
what they hold and the rules that merge them (the writes are ``MemoryRows``':
``pend_marks``, ``fold_marks``).

A flush of recall's marks (``memory.marks.RecallMarks``) writes one row per
namespace: the access times and co-recall weight its window added, merged into
what its ``namespace_state`` row already holds (``Store.pend_marks``). Once the
row holds more than ``FOLD_AT`` memories and pairs, the same transaction folds
them into the ``memories`` rows (``access_times``) and the ``memory_links``
rows, as writing each window at once did, and clears the row: a memory or pair
marked in many windows is written once per fold instead of once per window.

Every reader of a memory's access times or of a namespace's links merges the
pending marks of that namespace (the same rule the fold applies:
``merge_times``, ``fold_pair``), so what recall scores, what ``get``/``list``,
the export, the API's ``recalled_at`` and ``/memory why`` show, and what the
association channel spreads along are the same before and after a fold.
Readers read the pending row *before* the rows (one connection): a fold that
lands between the two reads is seen twice, and merging is idempotent — a time
already stored is not added again, a pending pair whose link row was written
at or after its last co-use is already in it.

Guarantees:

- Isolation: a namespace's row holds only ids that were live memories of that
  namespace when flushed (read in the flush's transaction), and a reader merges
  only its own namespace's row into rows of that namespace.
- A forget wins: a forgotten memory's row is gone, so its pending times merge
  into nothing and a fold's UPDATE matches nothing; the transaction that
  deletes its links (forget, retract, new version: ``_unlink_links``) drops its
  pending pairs too, and a fold links only pairs of two live memories.
- A crash loses only the marks still in memory (``RecallMarks``' window), as
  before: what a flush wrote is in SQL.

A recalled link may need two co-uses (``NEW_LINK_USES``; shipped off, 1): a
pending pair not linked yet whose weight came from fewer co-uses is then
dropped at the fold, not inserted; a pair already linked keeps strengthening
with every co-use. Readers
apply the same rule (``fold_pair``), so what recall spreads along is the same
before and after a fold. The co-uses must fall between two folds of the row
(the row remembers nothing once cleared).

The row's ``marks`` text is JSON: ``{"t": {id: [ISO time, …]}, "p": [[a, b,
amount, ISO last co-use, co-uses], …]}`` (``a < b``); NULL when nothing waits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache

from memory.links import DEFAULT_HALF_LIFE_DAYS, W_MAX, decayed, grown, meaningful
from memory.store.tables import ACCESS_TIMES_KEPT
from memory.types import Memory, Namespace

__all__ = ["FOLD_AT", "NEW_LINK_USES", "NO_MARKS", "PendingMarks", "fold_pair", "merge_times"]

FOLD_AT = 128
"""Memories plus pairs a namespace's pending row may hold before a flush folds
it into the ``memories`` and ``memory_links`` rows. A person's 60 s window
marks about 6 memories and 12 pairs, so a fold comes every few windows; the
row stays a few KB (every recall reads it with the namespace's state)."""

NEW_LINK_USES = 2
"""Co-uses (turns whose prompt held both memories) a pair needs, waiting in one
pending row, before a fold makes it a ``recalled`` link; 2: a pair co-used once
stays a pending count until it is co-used again in the same row (a fold drops
it). Memories that went into one prompt together were retrieved by the same
query, so one co-use says little that BM25 and the vectors do not already say;
repetition is the evidence of an association (Hebb's rule: Hebb 1949, as ACT-R's
associative strengths learn from co-occurrence, Anderson & Lebiere 1998). A pair
already linked (entity, consolidated, or an earlier fold) keeps strengthening
with every co-use. About half the new pairs are co-used once, and they were
most of recall's link rows: ``bench scaling`` 10.8 → 9.8 rows a message. On LoCoMo
held out, at the association weight fitted with this rule (``memory.recall.ASSOC_WEIGHT``
0.25), any@10 0.761 against 0.765 with every co-used pair linked, MRR 0.476 against
0.475 (``bench associations``, 2026-12-06 20:00 UTC); 1 links every co-used pair."""


def _moment(iso: str) -> datetime:
    moment = datetime.fromisoformat(iso)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def merge_times(stored: Sequence[str], pending: Iterable[str]) -> list[str]:
    """A memory's access times (ISO 8601 strings, oldest first) with ``pending``
    ones added: the union (a time already stored is not added twice), in time
    order, the last ``ACCESS_TIMES_KEPT`` kept. What a fold writes and what a
    reader shows before it."""
    add = [t for t in pending if t not in stored]
    if not add:
        return list(stored)[-ACCESS_TIMES_KEPT:]
    return sorted({*stored, *add}, key=_moment)[-ACCESS_TIMES_KEPT:]


def fold_pair(row: tuple[float, str, datetime] | None, amount: float, at: datetime, reason: str,
              half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
              uses: int | None = None) -> tuple[float, str, datetime] | None:
    """What ``amount`` (> 0) of co-use at ``at`` (aware) leaves on a link whose row
    is ``row`` — ``(weight, reasons, updated_at)``, None when not linked —:
    the new ``(weight, reasons, updated_at)``, or None when nothing is written (a
    co-use that barely moves a strong link and adds no reason:
    ``memory.links.MIN_STRENGTH_CHANGE``; an unlinked pair whose ``uses`` — the
    co-uses ``amount`` came from, None: not counted — are fewer than
    ``NEW_LINK_USES``). The rule ``Store.strengthen_pairs`` writes by, a fold
    folds by and every reader of pending pairs applies."""
    if row is None:
        if uses is not None and uses < NEW_LINK_USES:
            return None  # one co-use: the same query's hits, no evidence of an association yet
        return grown(0.0, at, at, amount), reason, at
    weight, reasons, since = row
    new = grown(weight, since, at, amount, half_life_days)
    have = set(filter(None, reasons.split(",")))
    from memory.links import REASONS

    joined = ",".join(r for r in REASONS if r in have | {reason})
    if joined == reasons and not meaningful(decayed(weight, since, at, half_life_days), new):
        return None
    return new, joined, max(at, since)


@dataclass(frozen=True, slots=True)
class PendingMarks:
    """The marks waiting in one namespace's row: ``times`` maps a memory id to its
    pending access times (ISO 8601, oldest first, at most ``ACCESS_TIMES_KEPT``);
    ``pairs`` maps a pair ``(a, b)``, ``a < b``, to ``(amount, last, uses)``: the
    co-recall weight its co-uses added (≤ ``W_MAX``), the last of them (ISO) and
    how many there were (≥ 1; ``NEW_LINK_USES``)."""

    times: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pairs: Mapping[tuple[str, str], tuple[float, str, int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times) + len(self.pairs)

    @classmethod
    def parse(cls, text: str | None) -> PendingMarks:
        """The marks of a row's ``marks`` text (NULL or unreadable: none). Every
        recall reads its namespace's row; an unchanged text is parsed once
        (``_parsed``: the last ``PARSED_KEPT`` texts; nothing mutates the result)."""
        return _parsed(text) if text else NO_MARKS

    def dump(self) -> str | None:
        """The row's ``marks`` text (None when nothing waits)."""
        if not len(self):
            return None
        return json.dumps({"t": {i: list(ts) for i, ts in self.times.items()},
                           "p": [[a, b, w, last, n] for (a, b), (w, last, n) in self.pairs.items()]},
                          separators=(",", ":"), ensure_ascii=False)

    def added(self, times: Mapping[str, Sequence[datetime]],
              pairs: Mapping[tuple[str, str], tuple[float, datetime] | tuple[float, datetime, int]]) -> PendingMarks:
        """These marks with a window's added: ``times`` (id → aware times) and
        ``pairs`` (``(a, b)`` → (amount, last co-use[, co-uses: 1 when left
        out])), amounts summed (capped at ``W_MAX``: a link never weighs more),
        co-uses summed, the later last co-use kept."""
        t = dict(self.times)
        for i, ts in times.items():
            t[i] = tuple(merge_times(t.get(i, ()), (x.isoformat() for x in ts)))
        p = dict(self.pairs)
        for pair, (amount, at, *n) in pairs.items():
            key = pair if pair[0] < pair[1] else (pair[1], pair[0])
            had, last, uses = p.get(key, (0.0, at.isoformat(), 0))
            p[key] = (min(W_MAX, had + amount), max(last, at.isoformat(), key=_moment), uses + (n[0] if n else 1))
        return PendingMarks(t, p)

    def without(self, ids: Iterable[str], *, times: bool = True) -> PendingMarks:
        """These marks less those of ``ids`` (their pairs; their times too when ``times``)."""
        gone = set(ids)
        return PendingMarks({i: ts for i, ts in self.times.items() if not (times and i in gone)},
                            {p: v for p, v in self.pairs.items() if p[0] not in gone and p[1] not in gone})

    def access_times(self, memory_id: str, stored: str | None) -> str | None:
        """A row's ``access_times`` JSON with this memory's pending times merged
        (``merge_times``); ``stored`` unchanged when none wait."""
        pending = self.times.get(memory_id)
        if not pending:
            return stored
        return json.dumps(merge_times(json.loads(stored or "[]"), pending))

    def row(self, r: tuple, id_at: int = 0, times_at: int = 10) -> tuple:
        """A row read by position (``memory.store.memories``' ``_GET_COLUMNS``) with
        its pending access times merged."""
        if r[id_at] not in self.times:
            return r
        return (*r[:times_at], self.access_times(r[id_at], r[times_at]), *r[times_at + 1:])

    def memory(self, m: Memory) -> Memory:
        """``m`` with its pending access times merged (``m`` itself when none wait)."""
        pending = self.times.get(m.id)
        if not pending:
            return m
        merged = merge_times([t.isoformat() for t in m.access_times], pending)
        return replace(m, access_times=tuple(_moment(t) for t in merged))

    def memories(self, ms: Iterable[Memory]) -> list[Memory]:
        return [self.memory(m) for m in ms]

    def links(self, ids: Sequence[str], have: dict[tuple[str, str], tuple[float, str, datetime]],
              half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> None:
        """Merge into ``have`` (``(a, b)`` → ``(weight, reasons, updated_at)``, the
        link rows read) the pending pairs with one side among ``ids``, as a fold
        would write them (``fold_pair``: a pair not linked yet only from
        ``NEW_LINK_USES`` co-uses on); a row written at or after a pair's last
        co-use already holds it."""
        wanted = set(ids)
        for pair, (amount, last, uses) in self.pairs.items():
            if pair[0] not in wanted and pair[1] not in wanted:
                continue
            at = _moment(last)
            row = have.get(pair)
            if row is not None and row[2] >= at:
                continue
            folded = fold_pair(row, amount, at, "recalled", half_life_days, uses)
            if folded is not None:
                have[pair] = folded


NO_MARKS = PendingMarks()
"""No marks waiting (a ``namespace_state`` row whose ``marks`` is NULL)."""

PARSED_KEPT = 256
"""Pending rows' texts whose parse is kept (a few KB each, ``FOLD_AT`` entries at most)."""


@lru_cache(maxsize=PARSED_KEPT)
def _parsed(text: str) -> PendingMarks:
    try:
        raw = json.loads(text)
        return PendingMarks({i: tuple(ts) for i, ts in raw.get("t", {}).items()},
                            {(p[0], p[1]): (float(p[2]), p[3], _uses(p)) for p in raw.get("p", [])})
    except (ValueError, TypeError, AttributeError, IndexError):
        return NO_MARKS


def _uses(p: list) -> int:
    """A pending pair's co-uses: its fifth field; a row written before they were
    counted, its amount (``LinkParams.recalled``'s default adds 1 a co-use)."""
    return int(p[4]) if len(p) > 4 else max(1, round(float(p[2])))


def _drop_pending_pairs(conn, ns: Namespace | str, ids: Sequence[str], *, times: bool = False) -> None:
    """In the caller's write transaction (a Connection): drop the pending pairs of
    ``ids`` from ``ns``'s row (their links were just deleted: a forget, retract or
    new version), and their pending access times too when ``times`` (a forget:
    nothing of a forgotten memory stays in the row until a fold), writing the row
    only when it held some."""
    if not ids:
        return
    dialect = conn.dialect.name
    mark = "?" if dialect == "sqlite" else "%s"
    lock = " FOR UPDATE" if dialect == "postgresql" else ""
    row = conn.exec_driver_sql(f"SELECT marks FROM namespace_state WHERE namespace = {mark}{lock}",
                               (str(ns),)).first()
    if row is None or not row[0]:
        return
    pending = PendingMarks.parse(row[0])
    kept = pending.without(ids, times=times)
    if len(kept.pairs) != len(pending.pairs) or len(kept.times) != len(pending.times):
        conn.exec_driver_sql(f"UPDATE namespace_state SET marks = {mark} WHERE namespace = {mark}",
                             (kept.dump(), str(ns)))
