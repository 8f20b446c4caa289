"""Webhook → reply overhead of the gateway without a chat model.

A real gateway (uvicorn + the FastAPI app, SQLite + LanceDB + the offline
embedder in a temporary data root) on 127.0.0.1; ``CHATS`` concurrent
private chats each send ``MESSAGES`` signed requests to ``POST
/webhook/<tenant>`` one after the other (a bounded loop: ``CHATS x
MESSAGES`` requests after a warm-up). Every request is a full turn: signature
check, delivery claim, chat log, recall, recollection, prompt; the capture of
the message runs after the answer (the webhook answers first, see
``Pipeline.handle``), on the same two cores. No model is configured, so what
is measured is huiyi's own overhead between the webhook and the moment a reply
could be generated and returned. Latency is the client-side round trip of each
request, measured by a load generator in a separate process (the platform is
not inside the gateway's interpreter; it still shares the two cores). Nothing
leaves the loopback interface.

Three runs, each in a fresh data root:

- ``CHATS`` concurrent chats at a person's pace (the target): each chat sends its
  next message ``THINK_S`` (uniform, seconds) after its previous answer — a
  very fast typist; people in IM chats write every several seconds. The load is
  open per chat but bounded: 50 conversations at once, ~20 requests/s.
- ``CHATS`` chats in a closed loop with no pause (capacity): each chat sends as soon
  as it is answered, so the machine is saturated and the latencies are queueing
  (``CHATS`` / throughput), not per-turn cost.
- one chat alone, no pause (the unqueued per-turn cost).

Every request sends a fresh text: a real chat mix from the public chat logs
(``bench.chatmix``), never repeated, so no query vector comes from a cache. The
gateway runs the shipped embedder (e5-small); the paced run is made once per
precision (``COMPARED``: q4, the shipped one, then the reference and int8, each
on both sides: questions and stored memories), back to back, so their ratios
are read under the same load.

Prints each run as it finishes: requests, concurrency, p50/p95/p99/max in ms,
throughput, the gateway process's CPU time per request (the load generator is
another process), pass/miss against ``TARGET_P95_MS`` (paced run), and where
the time goes: the median of the pipeline's own stage timings
(``TurnResult.latency_ms``: recall, whole turn) next to the median round trip;
the difference is the bridge (HTTP, signature, JSON, scheduling).

Run ``python -m bench.webhook`` (or ``run()`` from ``make bench``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from bench import COMPARED, percentile

__all__ = ["run", "measure", "TARGET_P95_MS", "CHATS", "MESSAGES"]

log = logging.getLogger(__name__)

TARGET_P95_MS = 30.0
"""Issue 29: a gateway turn without a chat model at 50 paced chats, fresh texts."""
CHATS = 50
MESSAGES = 4
PACED_MESSAGES = 6
THINK_S = (1.0, 4.0)
WARMUP = 20

if TYPE_CHECKING:
    import uvicorn

SECRET = "bench-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(app, start_s: float = 300.0) -> tuple[uvicorn.Server, threading.Thread]:
    """``app`` served on a free loopback port by uvicorn with ``huiyi serve``'s
    config (``server_config``), in a daemon thread, once it has started (at most
    ``start_s`` seconds). Stop it with ``server.should_exit = True`` and a join.
    Raises RuntimeError when it does not start."""
    import uvicorn

    from gateway.http.serving import server_config

    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=_free_port(), log_level="warning",
                                          access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_s
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("gateway did not start")
        time.sleep(0.05)
    return server, thread


async def _load(base: str, chats: int, messages: int, warmup: int, texts: list[str],
                think: tuple[float, float] | None = None) -> tuple[list[float], float]:
    import httpx

    from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

    limits = httpx.Limits(max_connections=chats, max_keepalive_connections=chats)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60.0) as client:
        async def one(chat: int, n: int, text: str) -> float:
            body = json.dumps({"sender_id": f"u{chat}", "chat_id": f"u{chat}", "message_id": f"m{n}",
                               "text": text}, ensure_ascii=False).encode()
            ts = str(int(time.time()))
            t0 = time.perf_counter()
            r = await client.post("/webhook/bench", content=body, headers={
                TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(SECRET, ts, body), "Content-Type": "application/json"})
            dt = (time.perf_counter() - t0) * 1000
            if r.status_code != 200:
                raise RuntimeError(f"webhook answered {r.status_code}: {r.text[:200]}")
            return dt

        for i in range(warmup):  # jieba, embedder, index and connection pools warm
            await one(10_000 + i, 0, texts[i])

        async def chat_loop(chat: int) -> list[float]:
            rng = random.Random(chat)
            out = []
            if think:  # the chats start spread over one pause, as people do
                await asyncio.sleep(rng.uniform(0.0, think[1]))
            for n in range(messages):
                out.append(await one(chat, n, texts[warmup + chat * messages + n]))
                if think:
                    await asyncio.sleep(rng.uniform(*think))
            return out

        t0 = time.perf_counter()
        results = await asyncio.gather(*(chat_loop(c) for c in range(chats)))
        wall = time.perf_counter() - t0
    return [x for r in results for x in r], wall


def _load_blocking(base: str, chats: int, messages: int, warmup: int, texts: list[str],
                   think: tuple[float, float] | None) -> tuple[list[float], float]:
    return asyncio.run(_load(base, chats, messages, warmup, texts, think))


def measure(workdir: Path, *, chats: int = CHATS, messages: int = MESSAGES, warmup: int = WARMUP,
            think: tuple[float, float] | None = None, precision: str | None = None,
            texts: list[str] | None = None) -> dict:
    """Start a gateway with its data under ``workdir`` and run the load (``think``:
    each chat's pause after an answer, uniform in seconds; None: none;
    ``precision``: e5-small's precision of both sides, None: the shipped default;
    ``texts``: one per request, warm-up first, at least ``warmup + chats ×
    messages``, default ``bench.chatmix.chat_mix``); returns ``{"requests", "chats",
    "p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms", "per_s", "cpu_ms",
    "turn_p50_ms", "recall_p50_ms"}`` (milliseconds, requests/s; ``cpu_ms``: the
    gateway process's CPU time per request over the measured load)."""
    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    from gateway.pipeline import Pipeline
    from gateway.service import build_core

    class TimedPipeline(Pipeline):
        """The real pipeline, keeping each turn's own stage timings."""

        stages: list[dict[str, float]] = []

        async def handle(self, tenant, msg, **kwargs):
            result = await super().handle(tenant, msg, **kwargs)
            self.stages.append(result.latency_ms)
            return result

    if texts is None:
        from bench.chatmix import chat_mix

        texts = chat_mix(warmup + chats * messages)
    extra = {} if precision is None else {"embed_precision": precision, "embed_document_precision": precision}
    settings = load_settings(data_dir=workdir, database_url=f"sqlite:///{workdir / 'huiyi.db'}",
                             index_uri=str(workdir / "index"),
                             tenants={"bench": TenantSettings(webhook={"secret": SECRET})}, **extra)
    pipeline = TimedPipeline(settings, build_core(settings))
    server, thread = serve_in_thread(create_app(settings, pipeline))
    port = server.config.port
    try:
        # the load runs in its own process: the platform is not inside the gateway's
        # interpreter, and a client sharing the GIL would be measured as gateway time
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            cpu0 = time.process_time()
            lat, wall = pool.submit(_load_blocking, f"http://127.0.0.1:{port}", chats, messages, warmup,
                                    texts, think).result()
            cpu = time.process_time() - cpu0  # warm-up included: ~warmup / requests of it
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        pipeline.core.close()
    stages = pipeline.stages[warmup:]

    def stage(name: str) -> float:
        xs = [s[name] for s in stages if name in s]
        return statistics.median(xs) if xs else float("nan")

    return {"requests": len(lat), "chats": chats, "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat), "mean_ms": statistics.fmean(lat),
            "per_s": len(lat) / wall, "cpu_ms": cpu * 1000 / (len(lat) + warmup),
            "turn_p50_ms": stage("total"), "recall_p50_ms": stage("recall")}


def _block(title: str, f: dict, target: bool) -> str:
    verdict = "pass" if f["p95_ms"] <= TARGET_P95_MS else "MISS"
    return (f"{title}\n"
            f"  requests {f['requests']} over {f['chats']} concurrent chat(s), {f['per_s']:.1f} req/s, "
            f"gateway CPU {f['cpu_ms']:.1f} ms per request\n"
            f"  round trip ms: p50 {f['p50_ms']:.1f}  p95 {f['p95_ms']:.1f}  p99 {f['p99_ms']:.1f}  "
            f"max {f['max_ms']:.1f}  mean {f['mean_ms']:.1f}\n"
            f"  inside the turn (median ms): turn {f['turn_p50_ms']:.1f}  recall {f['recall_p50_ms']:.1f}\n"
            + (f"  target p95 <= {TARGET_P95_MS:.0f} ms: {verdict}\n" if target else ""))


def run() -> None:
    """Run the benchmark, each run in a temporary data root, printing each block as it
    finishes: 50 chats at a person's pace (the target) once per precision
    (``COMPARED``), 50 chats in a closed loop for capacity and one chat
    alone for the unqueued per-turn cost (both at the shipped precision)."""
    from bench.chatmix import chat_mix
    def emit(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    emit(f"webhook → reply overhead (no model; POST /webhook, SQLite + LanceDB + e5-small, 127.0.0.1; fresh "
         f"texts from the public chat logs, bench.chatmix); load average {load} at the start")
    runs = [(f"{CHATS} concurrent chats, each pausing {THINK_S[0]:g}-{THINK_S[1]:g} s after an answer (target), "
             f"precision {p}", CHATS, PACED_MESSAGES, THINK_S, True, p) for p in COMPARED]
    runs += [(f"{CHATS} chats in a closed loop without pauses (capacity; latency = queueing)", CHATS, MESSAGES, None,
              False, None),
             ("1 chat alone (no queueing)", 1, 5 * MESSAGES, None, False, None)]
    paced = {}
    for title, chats, messages, think, target, precision in runs:
        workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-webhook-"))
        try:
            f = measure(workdir, chats=chats, messages=messages, think=think, precision=precision,
                        texts=chat_mix(WARMUP + chats * messages))
            if target:
                paced[precision] = f
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            emit(_block(title, f, target) + f"  load average {load}\n")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    a = paced["reference"]
    for p, b in paced.items():
        if p != "reference":
            emit(f"paced, {p} / reference in the same run: p50 {b['p50_ms'] / a['p50_ms']:.2f}x, "
                 f"p95 {b['p95_ms'] / a['p95_ms']:.2f}x, recall p50 {b['recall_p50_ms'] / a['recall_p50_ms']:.2f}x, "
                 f"CPU per request {b['cpu_ms'] / a['cpu_ms']:.2f}x")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    emit(f"machine: {os.cpu_count()} cores, load average {load} at the end "
         "(round trip minus turn = bridge + queueing for a worker thread)\n")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run()
