"""Hybrid recall for one namespace: BM25 over jieba tokens + vector search,
fused by reciprocal rank fusion, then rescored.

RRF (Cormack, Clarke & Büttcher 2009, "Reciprocal Rank Fusion outperforms
Condorcet and individual rank learning methods"): ``rrf(d) = Σ_c 1 / (k + rank_c(d))``
with k = 60 over the channels c that returned d.

The query is the conversation tail: the latest user message weighs most
(weight 1.0), older lines less (``TAIL_DECAY`` per step back). Both channels
are prefiltered by the namespace inside the index; ids are then resolved
against SQL *in the same namespace*, so a stale index row can never surface a
memory of someone else. An empty namespace returns ``[]`` and nothing ever
widens a search that found nothing (DESIGN rule 4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from memory.index import SearchIndex
from memory.scoring import final
from memory.scoring import score as default_score
from memory.store import Store, utcnow
from memory.text import tokens
from memory.types import ChatRef, Hit, Memory, Namespace, ScoreParts

__all__ = ["RecallParams", "recall", "rrf_fuse", "Scorer"]

log = logging.getLogger(__name__)

RRF_K = 60
TAIL_DECAY = 0.5

Scorer = Callable[[float, Memory, datetime, float], ScoreParts]
"""(rrf score, memory, now, query valence in [-1, 1]) -> ScoreParts; the final
score is ``memory.scoring.final(parts)``. Default: ``memory.scoring.score``."""


@dataclass(frozen=True, slots=True)
class RecallParams:
    """k: hits returned; candidates: per-channel depth before fusion;
    channels: which of ``bm25``/``vector`` run (benchmarks compare them);
    tail: how many tail lines form the query."""

    k: int = 8
    candidates: int = 40
    channels: tuple[str, ...] = ("bm25", "vector")
    tail: int = 3
    rrf_k: int = RRF_K


def rrf_fuse(channels: dict[str, Sequence[str]], k: int = RRF_K) -> list[tuple[str, float, dict[str, int]]]:
    """Fuse ranked id lists: ``[(id, rrf score, {channel: 1-based rank})]``, best
    first; ties broken by id for determinism."""
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name, ids in channels.items():
        for rank, mid in enumerate(ids, start=1):
            if mid in ranks and name in ranks[mid]:
                continue
            scores[mid] = scores.get(mid, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(mid, {})[name] = rank
    return sorted(((m, s, ranks[m]) for m, s in scores.items()), key=lambda x: (-x[1], x[0]))


def recall(store: Store, index: SearchIndex, ns: Namespace, tail: Sequence[str], *,
           chat: ChatRef | None = None, params: RecallParams = RecallParams(),
           scorer: Scorer | None = None, query_valence: float = 0.0, now: datetime | None = None) -> list[Hit]:
    """Recall memories of ``ns`` for a conversation tail (oldest first, latest last).

    Returns at most ``params.k`` Hits, best first, each with its per-channel ranks
    and score parts. ``chat`` applies disclosure (group chats see only what was
    learned in that group). Raises SearchIndexError when the index fails (the
    pipeline degrades to no recollection).
    """
    lines = [t for t in tail if t and t.strip()][-params.tail:]
    if not lines:
        return []
    weights = [TAIL_DECAY ** (len(lines) - 1 - i) for i in range(len(lines))]
    ranked: dict[str, list[str]] = {}
    if "bm25" in params.channels:
        q_tokens: list[str] = []
        q_weights: list[float] = []
        for line, w in zip(lines, weights):
            toks = tokens(line)
            q_tokens += toks
            q_weights += [w] * len(toks)
        hits = index.search_bm25(ns, q_tokens, params.candidates, chat=chat,
                                 weights=q_weights if len(lines) > 1 else None)
        ranked["bm25"] = [h.id for h in hits]
    if "vector" in params.channels:
        vecs = index.embedder.embed_documents(lines) if len(lines) > 1 else index.embedder.embed_query(lines[0])[None, :]
        if len(lines) > 1:
            # the latest line is embedded as a query (e5 prefixes matter), older lines as context
            vecs[-1] = index.embedder.embed_query(lines[-1])
        q = np.average(vecs, axis=0, weights=weights)
        n = np.linalg.norm(q)
        if n > 0:
            ranked["vector"] = [h.id for h in index.search_vector(ns, q / n, params.candidates, chat=chat)]
    fused = rrf_fuse(ranked, params.rrf_k)
    if not fused:
        return []
    memories = store.get_many(ns, [m for m, _, _ in fused])
    now = now or utcnow()
    scorer = scorer or default_score
    out: list[Hit] = []
    for mid, rrf, ranks in fused:
        mem = memories.get(mid)
        if mem is None:  # stale index row (deleted in SQL, index not yet repaired)
            continue
        parts = scorer(rrf, mem, now, query_valence)
        out.append(Hit(memory=mem, score=final(parts), ranks=ranks, parts=parts))
    out.sort(key=lambda h: (-h.score, h.memory.id))
    return out[: params.k]


