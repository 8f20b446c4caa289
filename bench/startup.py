"""First turn against second turn after start-up (issue 29's goal: the first
turn after ``/readyz`` says ready no slower than 2x the second), with and
without the start-up warm-up (``gateway.warmup``), back to back.

A data root is seeded once (one person, ``SEEDED`` memories zh and en, and a
recall of theirs on record, so the warm-up has a namespace to load). Each run
copies it and starts the real app in a fresh interpreter — nothing imported by
an earlier run — with the fake Bot API and the fake chat model of
``tests/fake_platforms.py`` / ``tests/fake_openai.py`` on loopback (``sys.path``
gains ``tests/`` for them, as ``bench.consolidation`` does). Once the app is
ready, the person sends ``TURNS`` Telegram messages one after the other; each
turn is timed from the webhook to the reply's ``sendMessage`` (the runtime's
turns idle), its capture drained before the next. A watchdog thread measures
how long the event loop takes to run a no-op throughout (the stall of issue
26 item 6). Runs alternate warm / cold, ``REPEATS`` each, so that both see the
same machine load; the load average is printed with the table.

Run ``python -m bench.startup``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

__all__ = ["run", "REPEATS", "TURNS", "SEEDED"]

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
TURNS = ("你还记得我的猫叫什么吗？", "What does my sister do in Lisbon?", "我周末一般做什么来着？")
SEEDED = ("我养了一只叫煤球的黑猫", "My sister lives in Lisbon and works as a nurse", "我周末常去西湖边跑步",
          "I started learning the guitar in May 🎸", "我对花生过敏", "我在杭州做程序员") + tuple(
    f"第{i}件小事：我今天喝了{i}杯水" for i in range(1, 31))

_SEED = textwrap.dedent('''
    import sys
    from datetime import datetime, timezone
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.explain import record_recall
    from memory.types import ChatKind, ChatRef, Namespace
    core = build_core(load_settings())
    ns = Namespace("default", "tg:555")
    with core.batch():
        for t in sys.argv[1:]:
            core.add(ns, core.new(ns, t))
    hits = core.recall(ns, ["煤球"])
    record_recall(core.store, ns, ChatRef("tg", ChatKind.PRIVATE, "555"), hits, 5, None, datetime.now(timezone.utc))
    core.close()
''')

_RUN = textwrap.dedent('''
    import asyncio, json, sys, threading, time
    from fake_openai import FakeLLM
    from fake_platforms import FakeTelegram
    llm, tg = FakeLLM().start(), FakeTelegram().start()
    from fastapi.testclient import TestClient
    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    warm = sys.argv[1] == "warm"
    settings = load_settings(llm_base_url=llm.base_url, llm_model="fake-chat", tenants={"default": TenantSettings(
        telegram={"token": "123456:B", "webhook_secret": "bench", "bot_username": "huiyi_bot", "api_base": tg.base_url})})
    t0 = time.monotonic()
    with TestClient(create_app(settings, warm=warm), client=("127.0.0.1", 50000)) as c:
        while c.get("/readyz").status_code != 200:  # aiogram loads in the background; /readyz waits for it
            time.sleep(0.2)
        start_s = time.monotonic() - t0
        pipeline = c.app.state.pipeline
        if pipeline.core.cache is not None:
            time.sleep(0.5)  # the recall cache's warm-up thread (a no-op when cold)
        lags, done = [], threading.Event()
        def watch():
            while not done.is_set():
                t = time.monotonic()
                c.portal.call(asyncio.sleep, 0)
                lags.append(time.monotonic() - t)
                time.sleep(0.02)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        stages, turns = [], []
        handle = pipeline.handle
        async def timed(*a, **k):
            res = await handle(*a, **k)
            stages.append(res.latency_ms)
            return res
        pipeline.handle = timed
        for uid, text in enumerate(sys.argv[2:], 1):
            llm.enqueue("嗯嗯 / sure")
            t = time.monotonic()
            c.post("/telegram/default", headers={"X-Telegram-Bot-Api-Secret-Token": "bench"}, json={
                "update_id": uid, "message": {"message_id": uid, "date": int(time.time()), "text": text,
                "chat": {"id": 555, "type": "private"}, "from": {"id": 555, "is_bot": False, "first_name": "Ann"}}})
            assert c.portal.call(c.app.state.telegram.turns.idle, 300)
            turns.append(time.monotonic() - t)
            assert c.portal.call(pipeline.drain, 300)
        done.set()
        watcher.join()
    print(json.dumps({"start_s": start_s, "turn_s": turns, "stages": stages, "recall_ms": [s.get("recall", 0.0) for s in stages],
                      "max_lag_s": max(lags), "sent": len(tg.sent())}))
''')


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUIYI_") and k != "DATABASE_URL"}
    env.update(HUIYI_DATA_DIR=str(data), PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return env


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(repeats: int = REPEATS, out=sys.stdout) -> list[dict]:
    """Seed once, then ``repeats`` runs each of warm and cold, alternating; prints
    a table (seconds; the ratio is turn 1 / turn 2) and returns the runs' dicts
    (``mode``, ``start_s``, ``turn_s``, ``recall_ms``, ``max_lag_s``). Raises
    RuntimeError when a run fails."""
    work = Path(tempfile.mkdtemp(prefix="huiyi-bench-startup-"))
    try:
        seed = work / "seed"
        subprocess.run([sys.executable, "-c", _SEED, *SEEDED], cwd=ROOT, env=_env(seed), check=True,
                       capture_output=True)
        runs = []
        print(f"load average {_load()} at start", file=out, flush=True)
        for i in range(repeats):
            for mode in ("warm", "cold"):
                data = work / f"{mode}-{i}"
                shutil.copytree(seed, data)
                proc = subprocess.run([sys.executable, "-c", _RUN, mode, *TURNS], cwd=ROOT, env=_env(data),
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"{mode} run failed: {proc.stderr[-2000:]}")
                runs.append({"mode": mode, **json.loads(proc.stdout.strip().splitlines()[-1])})
                shutil.rmtree(data, ignore_errors=True)
        print(f"{'mode':<5} {'start':>6} {'turn 1':>7} {'turn 2':>7} {'turn 3':>7} {'1/2':>5} "
              f"{'recall 1 ms':>11} {'recall 2 ms':>11} {'max loop lag':>12}", file=out)
        for r in runs:
            t = r["turn_s"]
            print(f"{r['mode']:<5} {r['start_s']:6.1f} {t[0]:7.3f} {t[1]:7.3f} {t[2]:7.3f} {t[0] / t[1]:5.1f} "
                  f"{r['recall_ms'][0]:11.0f} {r['recall_ms'][1]:11.0f} {r['max_lag_s']:12.3f}", file=out)
        for mode in ("warm", "cold"):
            ratios = [r["turn_s"][0] / r["turn_s"][1] for r in runs if r["mode"] == mode]
            print(f"{mode}: median turn 1 / turn 2 = {statistics.median(ratios):.1f}", file=out)
        print(f"load average {_load()} at end", file=out, flush=True)
        return runs
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else REPEATS)
