"""Recall quality on public data with evidence labels, for ``make bench``: the same
loaders, ingest and evaluation as ``huiyi eval recall`` (``evals.recall``),
over LoCoMo (one namespace per conversation, and per speaker) and DuLeMon (per
dialogue, and every fact in one pool), with the BM25-only and vector-only channels
of the same run, per embedder, and the embedding cost that the default-embedder
decision weighs against quality.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import DATA_DIR, table
from evals.recall import (CachedEmbedder, Suite, evaluate, ingest, load_dulemon, load_locomo, metrics,
                                 report_lines)

__all__ = ["EmbedderQuality", "run", "decision_table", "embedding_cost", "SETS"]

log = logging.getLogger(__name__)

LOCOMO = DATA_DIR / "memory" / "locomo10.json"
DULEMON = DATA_DIR / "zh" / "dulemon_samples.jsonl"
BATCH = 256
KS = (1, 3, 5, 10, 20)
SETS = (("locomo", "conversation"), ("locomo", "speaker"), ("dulemon", "conversation"), ("dulemon", "pool"))
"""(dataset, layout) pairs measured by ``run``; all questions (dev and held-out)."""


def _suite(dataset: str, layout: str, quick: bool) -> Suite:
    if dataset == "locomo":
        return load_locomo(LOCOMO, conversations=2 if quick else None, layout=layout)
    return load_dulemon(DULEMON, layout=layout)


def embedding_cost(embedder, docs: Sequence[str], queries: Sequence[str]) -> tuple[float, float]:
    """(ms per stored sentence embedded in batches of 256, ms per single query)."""
    docs = list(docs)
    t0 = time.perf_counter()
    for start in range(0, len(docs), BATCH):
        embedder.embed_documents(docs[start:start + BATCH])
    doc_ms = (time.perf_counter() - t0) * 1000.0 / max(1, len(docs))
    t0 = time.perf_counter()
    for q in queries:
        embedder.embed_query(q)
    query_ms = (time.perf_counter() - t0) * 1000.0 / max(1, len(queries))
    return doc_ms, query_ms


@dataclass
class EmbedderQuality:
    """What the default-embedder decision needs from one embedder's quality run."""

    embedder: str
    locomo_at10: float
    locomo_speaker_at10: float
    dulemon_pool_at5: float
    locomo_p95_ms: float
    doc_ms: float
    query_ms: float
    load_s: float


def run(embedder_name: str, workdir: Path, quick: bool = False, cache: Path | None = None
        ) -> tuple[list[str], EmbedderQuality]:
    """Measure every (dataset, layout) of SETS with ``embedder_name`` (raw mode, as of
    each question's own time, shipped recall defaults) in stores under ``workdir``;
    returns the printed blocks and the figures for the embedder decision. ``quick``:
    2 LoCoMo conversations instead of 10; ``cache``: an embeddings cache file."""
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import initialise

    initialise()
    inner = make_embedder(embedder_name)
    t0 = time.perf_counter()
    inner.embed_documents(["warm-up"])
    load_s = time.perf_counter() - t0
    embedder = CachedEmbedder(inner, cache) if cache is not None else inner
    blocks: list[str] = []
    figures: dict[tuple[str, str], dict[str, float]] = {}
    p95 = float("nan")
    for dataset, layout in SETS:
        suite = _suite(dataset, layout, quick)
        where = workdir / f"{dataset}-{layout}"
        where.mkdir(parents=True, exist_ok=True)
        core = MemoryCore(Store(f"sqlite:///{where / 'huiyi.db'}"), SearchIndex(where / "index", embedder))
        try:
            log.info("quality[%s]: %s, %d docs, %d queries", embedder_name, suite.name, suite.n_docs,
                     len(suite.queries))
            t0 = time.perf_counter()
            key_of = ingest(core, suite, "raw")
            ingest_s = time.perf_counter() - t0
            runs = evaluate(core, suite, key_of, k=max(KS))
        finally:
            core.close()
        title = (f"recall {suite.name} [{embedder_name}, raw, as of each question]: {len(suite.queries)} queries, "
                 f"{suite.n_docs} memories in {len(suite.worlds)} namespaces (ingest {ingest_s:.1f} s)")
        blocks.append("\n".join(report_lines(suite, runs, KS, title)))
        figures[(dataset, layout)] = metrics(suite, runs["hybrid"], KS)
        if (dataset, layout) == ("locomo", "conversation"):
            lat = sorted(runs["hybrid"].latency_s)
            p95 = lat[int(0.95 * (len(lat) - 1))] * 1000.0 if lat else float("nan")
            sample_docs = [d.memory_text for docs in suite.worlds.values() for d in docs][:256]
            sample_q = [q.tail[-1] for q in suite.queries[:30]]
    dl = _suite("dulemon", "conversation", quick)
    doc_ms, query_ms = embedding_cost(inner, sample_docs, sample_q + [q.tail[-1] for q in dl.queries[:30]])
    blocks.append(f"embedding cost [{embedder_name}]: {doc_ms:.2f} ms per stored sentence (LoCoMo turns, "
                  f"batches of {BATCH}), {query_ms:.2f} ms per query (LoCoMo + DuLeMon, one at a time), "
                  f"first load {load_s:.1f} s")
    return blocks, EmbedderQuality(
        embedder=embedder_name,
        locomo_at10=figures[("locomo", "conversation")]["any@10"],
        locomo_speaker_at10=figures[("locomo", "speaker")]["any@10"],
        dulemon_pool_at5=figures[("dulemon", "pool")]["any@5"],
        locomo_p95_ms=p95,
        doc_ms=doc_ms,
        query_ms=query_ms,
        load_s=load_s,
    )


def decision_table(figures: Sequence[EmbedderQuality], quick: bool = False) -> str:
    """The default-embedder comparison: hybrid recall and embedding cost side by side."""
    rows = [[f.embedder, f.locomo_at10, f.locomo_speaker_at10, f.dulemon_pool_at5, f.locomo_p95_ms, f.doc_ms,
             f.query_ms, f.load_s] for f in figures]
    note = " (quick: 2 LoCoMo conversations)" if quick else ""
    return table(f"default embedder: hybrid recall and embedding cost{note}",
                 ["embedder", "LoCoMo any@10", "per speaker any@10", "DuLeMon pool @5", "LoCoMo p95 ms",
                  "ms/sentence", "ms/query", "load s"], rows)
