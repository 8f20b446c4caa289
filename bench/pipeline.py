"""Single-turn pipeline overhead without a chat model.

A store of ``namespaces`` people with ``per_ns`` memories each (real offline
embedder, real SQLite + LanceDB); then ``turns`` private turns, each a new
message from one of the people: dedupe → identity → recall → template
recollection → prompt → capture. Prints p50/p95 of the whole turn and of
its recall and capture stages, in milliseconds.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import peak_rss_mib, percentile, table

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


def run(namespaces: int = 200, per_ns: int = 20, turns: int = 200, seed: int = 5) -> None:
    """Build the store, run the turns, print a table. Uses a temporary data root."""
    from gateway.config import load_settings
    from bridges.contract import InboundMessage
    from gateway.service import build_pipeline
    from memory.core import default_key
    from memory.types import ChatKind, Namespace

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-pipeline-"))
    try:
        pipeline = build_pipeline(load_settings(data_dir=root))
        core = pipeline.core
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
        total, recall, capture = [], [], []

        async def turns_loop() -> None:
            for k in range(turns):
                uid = str(1000 + rng.randrange(namespaces))
                text = rng.choice(_ASK) if k % 2 else _fact(rng)
                msg = InboundMessage(platform="tg", message_id=str(10_000 + k), sender_id=uid, sender_name="bench",
                                     chat_kind=ChatKind.PRIVATE, chat_id=uid, text=text,
                                     timestamp=base + timedelta(seconds=k))
                t = time.perf_counter()
                res = await pipeline.handle("default", msg)
                total.append((time.perf_counter() - t) * 1000)
                recall.append(res.latency_ms.get("recall", 0.0))
                capture.append(res.latency_ms.get("capture", 0.0))

        asyncio.run(turns_loop())
        rows = [(name, percentile(v, 50), percentile(v, 95)) for name, v in
                (("turn (no model)", total), ("  recall", recall), ("  capture", capture))]
        print(table(f"pipeline: {turns} private turns over {namespaces} people × {per_ns} memories "
                    f"(store built in {build_s:.1f} s), SQLite + LanceDB, offline embedder",
                    ["stage", "p50 ms", "p95 ms"], rows))
        print(f"peak RSS {peak_rss_mib():.0f} MiB")
        core.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    run()
