"""Why a memory was or was not recalled: the last recall of each namespace,
kept in SQL, and a verdict computed from it.

The pipeline records one ``RecallTrace`` per namespace after each answered
turn (``record_recall``): the top ``TRACE_DEPTH`` fused candidates with their
final score, per-channel ranks (``{"bm25": 3, "vector": 1, "assoc": 2}``: words,
meaning, the time channel, association — ``memory.recall``) and score parts
(retention, activation, emotion, importance — see ``memory.scoring``), and
``k``, how many of them went into the prompt. The trace replaces the previous
one of the same namespace (an older message's never replaces a newer one's);
it lives in SQL, in the namespace's ``namespace_state`` row, so any gateway
replica can answer ``/memory why`` about a turn another replica ran — once the
turn's capture has written it (``memory.store.traces``: the capture's own row
update carries it; the gateway that ran the turn reads it at once).

``explain(trace, memory)`` turns it into a ``Why`` verdict, one of:

- ``recalled``: among the first ``k``;
- ``below_cutoff``: a candidate, but cut at rank ``k`` (its rank, score and
  the k-th score);
- ``hidden_in_chat``: the last turn was in a group where this memory may not
  be disclosed (DESIGN rule 6), so the search never saw it;
- ``dormant``: a dormant consolidated memory (``memory.consolidate``) not
  recalled: its score was halved;
- ``decayed``: not a candidate, and its retention at the recall's time was
  below ``DECAYED_BELOW`` (the forgetting curve, ``memory.scoring``);
- ``not_ranked``: below the relevance floor — no channel ranked it among its
  candidates (no word of the message matched it, and its meaning was below the
  embedder's minimum cosine). The trace keeps the floors of that recall
  (``RecallTrace.floors``) and, for the best few each floor dropped, the
  channel, score and floor (``RecallTrace.misses``, ``memory.recall.RecallMisses``):
  ``Why.miss`` then gives the memory's own score beside the floor it missed;
- ``newer``: created or edited after the last recall (or from its message);
- ``no_trace``: nothing was recalled for this namespace yet;
- ``forgotten``: the memory was forgotten (its tombstone keeps it from coming
  back; ``Why.forgotten``, for an id no longer live).

The traces store ids and numbers only, never memory or message text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from memory.scoring import score as default_score
from memory.types import ChatRef, Hit, Memory, Namespace, ScoreParts, Visibility

__all__ = ["TRACE_DEPTH", "DECAYED_BELOW", "TraceEntry", "Miss", "RecallTrace", "Why", "trace_of", "record_recall",
           "explain", "visible_in", "trace_visible_in"]

log = logging.getLogger(__name__)

#: How many fused candidates a trace keeps (ranked, scored); the pipeline asks
#: recall for this many and uses the first ``k``.
TRACE_DEPTH = 40

DECAYED_BELOW = 0.05
"""Retention in [0, 1] under which a memory that was no candidate is told as
``decayed`` (the forgetting curve had all but faded it) rather than as below
the relevance floor."""


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One candidate of a recall: 1-based ``position`` after rescoring, final
    ``score``, channel ranks and score parts."""

    memory_id: str
    position: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    parts: ScoreParts | None = None


@dataclass(frozen=True, slots=True)
class Miss:
    """A memory a relevance floor kept out of a recall: ``channel`` ``bm25``
    (words: a BM25 score), ``vector`` (meaning: a cosine in [-1, 1]) or
    ``standout`` (its meaning was near enough but did not stand out from the
    rest, ``memory.recall.standout``), its ``score`` there and that ``floor``."""

    memory_id: str
    channel: str
    score: float
    floor: float


@dataclass(frozen=True, slots=True)
class RecallTrace:
    """The last recall of ``namespace``: in chat ``chat`` (a ``ChatRef.key``) for
    the message said at ``at`` (UTC; what it captured is written at that time
    too), the first ``k`` of ``entries`` recalled; ``fallback_reason`` ""
    when the recollection did not fall back; ``floors`` the relevance floors
    applied (``{"bm25": …, "vector": …, "standout": …}``, empty for a trace kept
    before they were) and ``misses`` the best few each dropped."""

    namespace: Namespace
    chat: str
    at: datetime
    k: int
    fallback_reason: str = ""
    entries: tuple[TraceEntry, ...] = ()
    floors: dict[str, float] = field(default_factory=dict)
    misses: tuple[Miss, ...] = ()

    def entry(self, memory_id: str) -> TraceEntry | None:
        """The candidate entry of ``memory_id``, or None."""
        return next((e for e in self.entries if e.memory_id == memory_id), None)

    def miss(self, memory_id: str) -> Miss | None:
        """What floor kept ``memory_id`` out, when it was among the best it dropped; else None."""
        return next((m for m in self.misses if m.memory_id == memory_id), None)

    @property
    def cutoff(self) -> float | None:
        """Score of the k-th candidate (the last one recalled), None when fewer."""
        return self.entries[self.k - 1].score if 0 < self.k <= len(self.entries) else None


@dataclass(frozen=True, slots=True)
class Why:
    """Verdict of ``explain`` (see the module docstring for ``verdict``).
    ``parts``: score components of the memory in that recall (recomputed at the
    recall's time with no relevance when it was not a candidate); ``entry``:
    its candidate entry when it was one."""

    verdict: str
    trace: RecallTrace | None = None
    entry: TraceEntry | None = None
    parts: ScoreParts | None = None
    #: for ``not_ranked``: the floor it missed with its score there (None when it was not among the best dropped)
    miss: Miss | None = None

    @classmethod
    def forgotten(cls, trace: RecallTrace | None = None) -> Why:
        """The verdict for a memory that was forgotten (no live row, a forget in its audit)."""
        return cls("forgotten", trace)


def trace_of(ns: Namespace, chat: ChatRef, hits: Sequence[Hit], k: int, reason: str | None,
             at: datetime, misses=None) -> RecallTrace:
    """A trace from ranked hits (best first, up to TRACE_DEPTH kept); ``misses``
    the recall's ``memory.recall.RecallMisses`` (None: no floors kept)."""
    entries = tuple(TraceEntry(h.memory.id, i, h.score, dict(h.ranks), h.parts)
                    for i, h in enumerate(hits[:TRACE_DEPTH], start=1))
    if misses is None:
        return RecallTrace(ns, chat.key, at, k, reason or "", entries)
    kept = {e.memory_id for e in entries}  # a hit of another list is no miss
    return RecallTrace(ns, chat.key, at, k, reason or "", entries, dict(misses.floors),
                       tuple(Miss(m, ch, sc, fl) for m, (ch, sc, fl) in misses.misses.items() if m not in kept))


def record_recall(store, ns: Namespace, chat: ChatRef, hits: Sequence[Hit], k: int, reason: str | None,
                  at: datetime, misses=None) -> None:
    """Save the trace of this recall for ``ns`` (``trace_of``). Never raises: a
    failure is logged, the turn goes on (the chat never waits on the memory)."""
    try:
        store.save_last_recall(trace_of(ns, chat, hits, k, reason, at, misses))
    except Exception:  # noqa: BLE001 - an explanation aid must not break a turn
        log.exception("could not record the last recall of %s", ns)


def visible_in(memory: Memory, chat: ChatRef | None) -> bool:
    """May ``memory`` be disclosed in ``chat``? Private chats (and None) see all;
    a group sees GROUP memories learned in that group (DESIGN rule 6).

    Applies to every version, not only the live one: a version of
    ``Store.history`` carries the origin and visibility of the chat its own text
    was said in, so a text said in private or in another group stays out of this
    group even when a later version was said here. A version without an origin
    (or stored before versions kept their visibility, read as PRIVATE) is not
    disclosed in any group: unknown fails closed."""
    if chat is None or not chat.is_group:
        return True
    return (memory.visibility is Visibility.GROUP and memory.origin is not None
            and memory.origin.group_key == chat.group_key)


def trace_visible_in(trace: RecallTrace, chat: ChatRef | None) -> bool:
    """May the details of ``trace`` (when, ranks, scores of a turn) be shown in
    ``chat``? Private chats (and None) see all; a group sees only traces of turns
    in that group (any topic), since a turn elsewhere is that chat's business. A
    trace whose chat key does not parse is shown in no group."""
    if chat is None or not chat.is_group:
        return True
    try:
        return ChatRef.parse(trace.chat).group_key == chat.group_key
    except ValueError:  # NamespaceError is a ValueError
        return False


def _utc(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def explain(trace: RecallTrace | None, memory: Memory, *, scorer=default_score, dormant: bool = False) -> Why:
    """Why ``memory`` was or was not recalled in ``trace`` (its namespace's last recall).

    ``scorer`` recomputes parts for a memory that was not a candidate
    (``memory.scoring.score`` signature, relevance 0); ``dormant``: the memory
    is a dormant consolidated one (``Store.consolidated``). The stages are
    checked in the order a recall drops a memory: written later, disclosure,
    dormancy, decay, the relevance floor, the cut at rank k."""
    if trace is None:
        return Why("no_trace")
    at = _utc(trace.at)
    written = memory.updated_at or memory.created_at
    if written is not None and _utc(written) >= at:  # captured from that very message, or later
        return Why("newer", trace)
    entry = trace.entry(memory.id)
    if entry is not None:
        verdict = "recalled" if entry.position <= trace.k else "dormant" if dormant else "below_cutoff"
        return Why(verdict, trace, entry, entry.parts)
    then = replace(memory, access_times=tuple(t for t in memory.access_times if _utc(t) <= at))
    parts = scorer(0.0, then, at, 0.0)
    chat = ChatRef.parse(trace.chat)
    if not visible_in(memory, chat):
        return Why("hidden_in_chat", trace, None, parts)
    if dormant:
        return Why("dormant", trace, None, parts)
    if parts.retention < DECAYED_BELOW:
        return Why("decayed", trace, None, parts)
    return Why("not_ranked", trace, None, parts, trace.miss(memory.id))
