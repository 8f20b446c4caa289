"""Single-turn pipeline overhead without a chat model.

A store of ``namespaces`` people with ``per_ns`` memories each (real offline
embedder, real SQLite + LanceDB) and one heavy person with ``big`` memories
(written in bulk by ``bench.synthetic``, pooled embeddings); then ``turns``
private turns from the small people and as many from the heavy one, half of
them questions and half new facts: dedupe → identity → recall → template
recollection → prompt, the reply returned, then the capture (as the gateway's
bridges run it: ``background_capture``, awaited before the next turn, so the
next turn sees it and competes with nothing). Prints p50/p95 of the turn to its
reply, of its recall, of the capture after it, and of both together, in
milliseconds; the goal (issue 14) is a turn without a model within 30 ms p95.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import pass_miss, peak_rss_mib, percentile, table

__all__ = ["run"]

_FACTS = ["我养了一只叫{n}的猫", "我喜欢喝{d}", "I work as a {j} in {c}", "我周末常去{c}爬山", "My sister {n} lives in {c}",
          "我对{d}过敏", "我最近在学{s}", "I love {s} and {d}"]
_FILL = {"n": ["煤球", "Mochi", "雪球", "Luna"], "d": ["美式咖啡", "乌龙茶", "oat latte", "花生"],
         "j": ["nurse", "teacher", "programmer"], "c": ["上海", "Paris", "成都", "Shenzhen"],
         "s": ["吉他", "swimming", "日语", "Python"]}
_ASK = ["你还记得我的猫吗？", "What do I do for work?", "我周末一般干嘛来着", "我对什么过敏？", "How is my sister?"]


def _fact(rng: random.Random) -> str:
    t = rng.choice(_FACTS)
    return t.format(**{k: rng.choice(v) for k, v in _FILL.items()})


TARGET_TURN_P95_MS = 30.0
"""Issue 14: a gateway turn without a model within 30 ms p95."""


def _heavy(core, subject: str, big: int) -> float:
    """Write ``big`` synthetic memories of person ``subject`` (tenant ``default``)
    in bulk with pooled embeddings of the core's own embedder; seconds taken."""
    import numpy as np

    from bench.synthetic import StoreConfig, build_index, build_sql, layout
    from memory.types import Namespace

    t0 = time.perf_counter()
    # two namespaces besides: the layout needs them; they hold a few rows of nobody who talks
    lay = layout(StoreConfig(total=big + 20, namespaces=3, sizes=(big, 10), pool=min(500, big)))
    lay.spaces = [Namespace("default", subject), Namespace("default", "tg:1"), Namespace("default", "tg:2")]
    emb = core.index.embedder
    vecs = np.vstack([emb.embed_documents(lay.pool[i:i + 64]) for i in range(0, len(lay.pool), 64)])
    build_sql(core.store, lay)
    build_index(core.index, lay, vecs)
    return time.perf_counter() - t0


def run(namespaces: int = 200, per_ns: int = 20, turns: int = 200, seed: int = 5, embedder: str | None = None,
        big: int = 10_000) -> None:
    """Build the store, run the turns, print a table. Uses a temporary data root.
    ``embedder``: the offline model (None: the configured default)."""
    from bench.synthetic import queries
    from gateway.config import load_settings
    from bridges.contract import InboundMessage
    from gateway.service import build_pipeline
    from memory.core import default_key
    from memory.types import ChatKind, Namespace

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-pipeline-"))
    try:
        settings = load_settings(data_dir=root, **({"embed_model": embedder} if embedder else {}))
        pipeline = build_pipeline(settings)
        core = pipeline.core
        heavy_uid = "999"
        heavy_s = _heavy(core, f"tg:{heavy_uid}", big) if big else 0.0
        t0 = time.perf_counter()
        batch = []
        for i in range(namespaces):
            ns = Namespace("default", f"tg:{1000 + i}")
            for text in {_fact(rng) for _ in range(per_ns)}:  # one row per canonical key
                m = core.new(ns, text)
                batch.append(core.store.add(ns, replace(m, key=default_key(m))))
        core.maintain(limit=len(batch) + 1)
        core.index.optimize()
        build_s = time.perf_counter() - t0
        base = datetime(2026, 11, 1, tzinfo=timezone.utc)
        asks = _ASK + queries(2 * turns, seed=seed)
        stages: dict[str, dict[str, list[float]]] = {}

        async def turns_loop(label: str, uids: list[str], offset: int) -> None:
            out = stages.setdefault(label, {"turn to reply": [], "  recall": [], "capture after it": [],
                                            "turn + capture": []})
            for k in range(turns):
                uid = uids[rng.randrange(len(uids))]
                # questions of the synthetic query set: new lines, each embedded (as a new message is)
                text = asks[(offset + k) % len(asks)] if k % 2 else _fact(rng)
                msg = InboundMessage(platform="tg", message_id=str(offset + k), sender_id=uid, sender_name="bench",
                                     chat_kind=ChatKind.PRIVATE, chat_id=uid, text=text,
                                     timestamp=base + timedelta(seconds=offset + k))
                t = time.perf_counter()
                res = await pipeline.handle("default", msg, background_capture=True)
                t1 = time.perf_counter()
                await pipeline.drain()
                t2 = time.perf_counter()
                out["turn to reply"].append((t1 - t) * 1000)
                out["  recall"].append(res.latency_ms.get("recall", 0.0))
                out["capture after it"].append((t2 - t1) * 1000)
                out["turn + capture"].append((t2 - t) * 1000)

        async def all_turns() -> None:
            await turns_loop(f"{namespaces} people × {per_ns}", [str(1000 + i) for i in range(namespaces)], 10_000)
            if big:
                await turns_loop(f"one person × {big}", [heavy_uid], 20_000)

        gc.collect()
        gc.freeze()  # as ``huiyi serve`` does once started (gateway.http.app.create_app's freeze_gc)
        try:
            asyncio.run(all_turns())
        finally:
            gc.unfreeze()
        rows = [(f"{label}: {name}", percentile(v, 50), percentile(v, 95))
                for label, out in stages.items() for name, v in out.items()]
        print(table(f"pipeline [{core.index.embedder.name}]: {turns} private turns over {namespaces} people × "
                    f"{per_ns} memories, then {turns} of one person with {big} (store built in {build_s:.1f} s, the "
                    f"heavy person in bulk in {heavy_s:.1f} s), SQLite + LanceDB, no chat model; load average "
                    f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
                    ["stage", "p50 ms", "p95 ms"], rows))
        for label, out in stages.items():
            p95 = percentile(out["turn to reply"], 95)
            print(f"target: turn to reply p95 <= {TARGET_TURN_P95_MS:.0f} ms ({label}): {p95:.1f} ms "
                  f"{pass_miss(p95 <= TARGET_TURN_P95_MS)}")
        print(f"peak RSS {peak_rss_mib():.0f} MiB")
        core.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    run()
