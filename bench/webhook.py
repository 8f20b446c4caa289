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

``run_turn`` (``python -m bench turn``, issue 41) asks where a turn's CPU goes:
paced runs at 10 and 50 chats with a thread-CPU meter inside the gateway
(``TurnMeter``: the query and document embedding, every ``Store`` method, each
thread's CPU from ``/proc``), each part in CPU ms per turn beside the turn's
floor — one query embedding, recall with that vector at hand, one SQL write
(``floor``), measured in the same process just after the load.
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

__all__ = ["run", "run_turn", "measure", "floor", "TurnMeter", "PARTS", "TARGET_P95_MS", "CHATS", "MESSAGES",
           "TURN_CHATS"]

log = logging.getLogger(__name__)

TARGET_P95_MS = 30.0
"""Issue 29: a gateway turn without a chat model at 50 paced chats, fresh texts."""
CHATS = 50
MESSAGES = 4
PACED_MESSAGES = 6
THINK_S = (1.0, 4.0)
WARMUP = 20

TURN_CHATS = (10, 50)
"""Paced chats of ``run_turn``'s runs (issue 41: the turn ÷ its floor, unsaturated and at 50)."""
PARTS = ("query embedding", "SQL", "document embedding", "HTTP, framework, event loop", "LanceDB's own threads",
         "recall + capture Python")
"""``TurnMeter``'s parts, in the order issue 41's table gives them."""

if TYPE_CHECKING:
    import uvicorn

    from memory.core import MemoryCore

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

    limits = httpx.Limits(max_connections=max(1, chats), max_keepalive_connections=max(1, chats))
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
            texts: list[str] | None = None, parts: bool = False) -> dict:
    """Start a gateway with its data under ``workdir`` and run the load (``think``:
    each chat's pause after an answer, uniform in seconds; None: none;
    ``precision``: e5-small's precision of both sides, None: the shipped default;
    ``texts``: one per request, warm-up first, at least ``warmup + chats ×
    messages``, default ``bench.chatmix.chat_mix``); returns ``{"requests", "chats",
    "p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms", "per_s", "cpu_ms",
    "turn_p50_ms", "recall_p50_ms"}`` (milliseconds, requests/s; ``cpu_ms``: the
    gateway process's CPU time per request over the measured load).

    ``parts``: the warm-up runs first and its captures are drained; then the load,
    whose captures are drained too, with a ``TurnMeter`` on: ``cpu_ms`` is then the
    measured load's own CPU, and the result adds ``"parts"`` (``TurnMeter.parts``:
    CPU ms per turn by ``PARTS``) and ``"floor"`` (``floor`` over ``FLOOR_TEXTS``
    texts after the load, in one of the chats' namespaces)."""
    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    from gateway.pipeline import Pipeline
    from gateway.service import build_core

    class TimedPipeline(Pipeline):
        """The real pipeline, keeping each turn's own stage timings."""

        stages: list[dict[str, float]] = []
        loop: asyncio.AbstractEventLoop | None = None
        seen: tuple | None = None

        async def handle(self, tenant, msg, **kwargs):
            self.loop = asyncio.get_running_loop()
            result = await super().handle(tenant, msg, **kwargs)
            self.stages.append(result.latency_ms)
            return result

        async def _turn(self, tenant, t, msg, ns, *a, **kw):
            self.seen = (tenant, ns, msg.chat, msg.sender_id)
            return await super()._turn(tenant, t, msg, ns, *a, **kw)

    if texts is None:
        from bench.chatmix import chat_mix

        texts = chat_mix(warmup + chats * messages + (FLOOR_TEXTS if parts else 0))
    extra = {} if precision is None else {"embed_precision": precision, "embed_document_precision": precision}
    settings = load_settings(data_dir=workdir, database_url=f"sqlite:///{workdir / 'huiyi.db'}",
                             index_uri=str(workdir / "index"),
                             tenants={"bench": TenantSettings(webhook={"secret": SECRET})}, **extra)
    pipeline = TimedPipeline(settings, build_core(settings))
    server, thread = serve_in_thread(create_app(settings, pipeline))
    port = server.config.port
    split = None
    base = f"http://127.0.0.1:{port}"
    try:
        # the load runs in its own process: the platform is not inside the gateway's
        # interpreter, and a client sharing the GIL would be measured as gateway time
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            if parts:
                pool.submit(_load_blocking, base, 0, 0, warmup, texts[:warmup], None).result()
                _drain(pipeline)
                meter = TurnMeter(pipeline.core, thread)
                cpu0 = time.process_time()
                lat, wall = pool.submit(_load_blocking, base, chats, messages, 0, texts[warmup:], think).result()
                _drain(pipeline)
                cpu = time.process_time() - cpu0
                split = meter.parts(len(lat))
                meter.close()
                tenant, ns, chat, sender = pipeline.seen
                fl = floor(pipeline.core, tenant, ns, chat, sender, texts[warmup + chats * messages:][:FLOOR_TEXTS])
            else:
                cpu0 = time.process_time()
                lat, wall = pool.submit(_load_blocking, base, chats, messages, warmup, texts, think).result()
                cpu = time.process_time() - cpu0  # warm-up included: ~warmup / requests of it
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        pipeline.core.close()
    stages = pipeline.stages[warmup:]

    def stage(name: str) -> float:
        xs = [s[name] for s in stages if name in s]
        return statistics.median(xs) if xs else float("nan")

    out = {"requests": len(lat), "chats": chats, "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
           "p99_ms": percentile(lat, 99), "max_ms": max(lat), "mean_ms": statistics.fmean(lat),
           "per_s": len(lat) / wall, "cpu_ms": cpu * 1000 / (len(lat) + (0 if parts else warmup)),
           "turn_p50_ms": stage("total"), "recall_p50_ms": stage("recall")}
    if split is not None:
        out["parts"] = split
        out["floor"] = fl
    return out


def _drain(pipeline) -> None:
    """Wait (at most 300 s) for the captures queued behind the turns, on the server's own loop."""
    if pipeline.loop is not None:
        asyncio.run_coroutine_threadsafe(pipeline.drain(300.0), pipeline.loop).result(timeout=310)


FLOOR_TEXTS = 42
"""Fresh texts the floor is measured on after a ``parts`` run (the first 2 warm it)."""


def floor(core: MemoryCore, tenant: str, ns, chat, sender: str, texts: list[str], warm: int = 2) -> dict[str, float]:
    """Issue 41's floor of a turn, per text of ``texts`` (fresh, not yet embedded; the
    first ``warm`` of them run first, untimed, so that no first-call cost counts):
    one query embedding (``SearchIndex.embed_tail`` of the text alone, as the turn's
    prefetch does: its cache keeps the vector), recall with that vector at hand
    (``MemoryCore.recall``, ``embed_older=False``: no model call) in ``ns``,
    and one SQL write (``Store.append_chat`` of the text to ``chat``'s log, as
    ``sender``). Returns the mean CPU milliseconds of each, by the calling thread's
    clock (``time.thread_time``, as ``TurnMeter`` times the turn's parts: a process
    clock would also count LanceDB's background work after a load) —
    ``{"query embedding", "recall", "SQL write", "floor"}``, the last their sum.
    Raises ValueError for no texts."""
    from memory.store import utcnow
    from memory.store.chatlog import ChatLine

    if len(texts) <= warm:
        raise ValueError(f"the floor needs more than {warm} texts")
    sums = {"query embedding": 0.0, "recall": 0.0, "SQL write": 0.0}
    for i, q in enumerate(texts[:warm]):
        core.index.embed_tail([q])
        core.recall(ns, [q], embed_older=False)
        core.store.append_chat(tenant, chat, ChatLine("user", sender, q, utcnow(), f"floor-warm-{i}"))
    texts = texts[warm:]
    for i, q in enumerate(texts):
        c0 = time.thread_time()
        core.index.embed_tail([q])
        c1 = time.thread_time()
        core.recall(ns, [q], embed_older=False)
        c2 = time.thread_time()
        core.store.append_chat(tenant, chat, ChatLine("user", sender, q, utcnow(), f"floor-{i}"))
        c3 = time.thread_time()
        sums["query embedding"] += c1 - c0
        sums["recall"] += c2 - c1
        sums["SQL write"] += c3 - c2
    out = {k: v * 1000 / len(texts) for k, v in sums.items()}
    out["floor"] = sum(out.values())
    return out


class TurnMeter:
    """Where a gateway's CPU goes, by ``PARTS``, between its construction and
    ``parts`` (issue 41's table), measured inside the gateway's process.

    Wraps, on the instances (``close`` undoes it), ``core.index.embedder``'s
    ``embed_query`` and ``embed_documents`` and every public method of
    ``core.store``, adding each call's thread CPU (``time.thread_time``) to its part
    and to whether it ran on the event loop's thread (``loop_thread``, the uvicorn
    server's) — a thread's outermost metered call only, so a store call inside an
    embedding, or the reverse, counts once. Each thread's CPU comes from
    ``/proc/self/task/<tid>/stat`` (clock ticks) at both ends. Then:

    - query / document embedding, SQL: the wrapped calls;
    - HTTP, framework, event loop: the loop thread's CPU less the wrapped calls on it;
    - LanceDB's own threads: threads that are not Python's (``threading.enumerate``):
      LanceDB's Rust runtime (ONNX Runtime and BLAS run one thread, the caller's);
    - recall + capture Python: the other Python threads' CPU less the wrapped calls
      on them, plus what threads that ended before ``parts`` spent (the process's
      CPU no live thread accounts for).

    Linux only (``/proc``); OSError elsewhere."""

    def __init__(self, core: MemoryCore, loop_thread: threading.Thread) -> None:
        self._loop_tid = loop_thread.native_id
        self._loop_ident = loop_thread.ident
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cpu: dict[tuple[str, bool], float] = {}
        self._undo: list[tuple[object, str]] = []
        emb = core.index.embedder
        for name, part in (("embed_query", "query embedding"), ("embed_documents", "document embedding")):
            self._wrap(emb, name, part)
        for name in dir(type(core.store)):
            if name.startswith("_") or name in ("close", "engine"):
                continue
            attr = getattr(type(core.store), name, None)
            if callable(attr) and not isinstance(attr, type):
                self._wrap(core.store, name, "SQL")
        self._t0 = _thread_cpu()
        self._p0 = time.process_time()

    def _wrap(self, obj: object, name: str, part: str) -> None:
        import functools

        inner = getattr(obj, name)
        local, cpu, lock = self._local, self._cpu, self._lock

        @functools.wraps(inner)
        def timed(*a, **kw):
            if getattr(local, "depth", 0):
                return inner(*a, **kw)
            local.depth = 1
            t = time.thread_time()
            try:
                return inner(*a, **kw)
            finally:
                local.depth = 0
                key = (part, threading.get_ident() == self._loop_ident)
                with lock:
                    cpu[key] = cpu.get(key, 0.0) + time.thread_time() - t

        setattr(obj, name, timed)
        self._undo.append((obj, name))

    def close(self) -> None:
        """Remove the wrappers (the instances' own methods again)."""
        for obj, name in self._undo:
            try:
                delattr(obj, name)
            except AttributeError:
                pass
        self._undo.clear()

    def parts(self, turns: int) -> dict[str, float]:
        """CPU milliseconds per turn of each of ``PARTS`` since construction, over
        ``turns`` turns, and ``"total"`` (the process's CPU). ValueError for turns < 1."""
        if turns < 1:
            raise ValueError("turns must be at least 1")
        total = time.process_time() - self._p0
        t1 = _thread_cpu()
        delta = {tid: c - self._t0.get(tid, 0.0) for tid, c in t1.items()}
        python = {t.native_id for t in threading.enumerate()}
        loop = delta.get(self._loop_tid, 0.0)
        native = sum(c for tid, c in delta.items() if tid not in python)
        others = sum(c for tid, c in delta.items() if tid in python and tid != self._loop_tid)
        ended = max(0.0, total - sum(delta.values()))
        with self._lock:
            cpu = dict(self._cpu)

        def part(name: str, on_loop: bool | None = None) -> float:
            return sum(v for (p, lp), v in cpu.items() if p == name and (on_loop is None or lp == on_loop))

        metered_loop = sum(v for (_, lp), v in cpu.items() if lp)
        metered_other = sum(v for (_, lp), v in cpu.items() if not lp)
        sec = {"query embedding": part("query embedding"), "SQL": part("SQL"),
               "document embedding": part("document embedding"),
               "HTTP, framework, event loop": max(0.0, loop - metered_loop),
               "LanceDB's own threads": native,
               "recall + capture Python": max(0.0, others - metered_other) + ended}
        out = {k: sec[k] * 1000 / turns for k in PARTS}
        out["total"] = total * 1000 / turns
        return out


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # the thread ended between the listing and the read
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15
    return out


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


def turn_table(title: str, f: dict) -> str:
    """``measure(..., parts=True)``'s figures as issue 41's table: each part's CPU ms
    per turn, its share of the turn, the floor's own part where it has one, and the
    part ÷ the floor (the rows add up to the turn ÷ its floor)."""
    from bench import table

    fl, parts = f["floor"], f["parts"]
    twin = {"query embedding": "query embedding", "SQL": "SQL write", "recall + capture Python": "recall"}
    rows = []
    for name in PARTS:
        ms = parts[name]
        rows.append([name, ms, ms / parts["total"] if parts["total"] else float("nan"),
                     fl[twin[name]] if name in twin else "-", ms / fl["floor"]])
    rows.append(["the turn (process CPU)", parts["total"], 1.0, fl["floor"], parts["total"] / fl["floor"]])
    return table(f"{title}; floor (one query embedding + recall with the vector at hand + one SQL write) "
                 f"{fl['floor']:.1f} ms CPU: embedding {fl['query embedding']:.1f}, recall {fl['recall']:.1f}, "
                 f"SQL write {fl['SQL write']:.1f}; {f['requests']} turns, round trip p50 {f['p50_ms']:.0f} ms, "
                 f"p95 {f['p95_ms']:.0f} ms",
                 ["part", "CPU ms / turn", "share of the turn", "the floor's part, ms", "÷ the floor"], rows)


def run_turn(chats: tuple[int, ...] = TURN_CHATS, messages: int = PACED_MESSAGES, precision: str | None = None,
             emit=None) -> list[dict]:
    """Issue 41's turn at its floor: for each count in ``chats``, that many chats at a
    person's pace (``THINK_S``) send ``messages`` fresh chat-mix lines each to a
    fresh gateway (SQLite + LanceDB + e5-small at ``precision``, None: shipped);
    prints ``turn_table`` with the load average as each run ends and returns the
    figures (``measure(..., parts=True)``)."""
    from bench.chatmix import chat_mix

    emit = emit or (lambda text: print(text, end="\n\n", flush=True))
    emit(f"the turn and its floor (issue 41): gateway CPU per turn by part, no model, fresh chat-mix texts, "
         f"{os.cpu_count()} cores; load average {_loadavg()} at the start")
    out = []
    for n in chats:
        workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-turn-"))
        try:
            f = measure(workdir, chats=n, messages=messages, think=THINK_S, precision=precision, parts=True,
                        texts=chat_mix(WARMUP + n * messages + FLOOR_TEXTS))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        out.append(f)
        emit(turn_table(f"{n} chats, each pausing {THINK_S[0]:g}-{THINK_S[1]:g} s after an answer, load average "
                        f"{_loadavg()}", f))
    return out


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run()
