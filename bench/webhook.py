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
import collections.abc
import contextlib
import contextvars
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
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import COMPARED, percentile

__all__ = [
    "AFTER",
    "ANSWER",
    "CHATS",
    "MESSAGES",
    "ROWS",
    "TARGET_P95_MS",
    "TURN_CHATS",
    "TURN_MESSAGES",
    "MeterSnapshot",
    "TurnMeter",
    "answer_phase",
    "floor",
    "measure",
    "run",
    "run_turn",
    "turn_table",
]

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
TURN_MESSAGES = 10
"""Messages of each chat in ``run_turn``: the first (a new person) and 9 steady turns."""
ANSWER_GOAL = 1.2
TURN_GOAL = 1.5
"""Issue 41's goals: the answer path ≤ 1.2× the floor, the whole turn ≤ 1.5× (unsaturated)."""

if TYPE_CHECKING:
    import uvicorn

    from memory.core import MemoryCore

SECRET = "bench-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(app, start_s: float = 300.0) -> tuple[uvicorn.Server, threading.Thread]:
    """``app`` served on a free loopback port as ``huiyi serve`` serves it
    (``gateway_server``, ``server_config``), in a daemon thread, once it has started (at most
    ``start_s`` seconds). Stop it with ``server.should_exit = True`` and a join.
    Raises RuntimeError when it does not start."""
    import uvicorn

    from gateway.http import serving

    # ``huiyi serve``'s server; a tree from before it (``--against``) has uvicorn's own
    server = getattr(serving, "gateway_server", uvicorn.Server)(serving.server_config(
        app, host="127.0.0.1", port=_free_port(), log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_s
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("gateway did not start")
        time.sleep(0.05)
    return server, thread


async def _load(base: str, chats: int, messages: int, warmup: int, texts: list[str],
                think: tuple[float, float] | None = None, first: int = 0) -> tuple[list[float], float]:
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
                out.append(await one(chat, first + n, texts[warmup + chat * messages + n]))
                if think:
                    await asyncio.sleep(rng.uniform(*think))
            return out

        t0 = time.perf_counter()
        results = await asyncio.gather(*(chat_loop(c) for c in range(chats)))
        wall = time.perf_counter() - t0
    return [x for r in results for x in r], wall


def _load_blocking(base: str, chats: int, messages: int, warmup: int, texts: list[str],
                   think: tuple[float, float] | None, first: int = 0) -> tuple[list[float], float]:
    return asyncio.run(_load(base, chats, messages, warmup, texts, think, first))


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

    ``parts``: the warm-up runs first and its captures are drained; then, with a
    ``TurnMeter`` on, each chat's first message (a new person: namespace and identity
    rows made), drained, then its ``messages - 1`` others, drained: ``cpu_ms`` is then
    the measured load's own CPU, and the result adds ``"parts"`` (``TurnMeter.parts``
    of all turns), ``"first"`` and ``"later"`` (of the first turns, of the others)
    and ``"floor"`` (``floor`` over ``FLOOR_TEXTS`` texts after the load, in one of
    the chats' namespaces)."""
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
    app = create_app(settings, pipeline)
    server, thread = serve_in_thread(answer_phase(app) if parts else app)
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
                meter = TurnMeter(pipeline.core, thread, pipeline.loop)
                s0 = meter.snapshot()
                lat, wall = pool.submit(_load_blocking, base, chats, 1, 0, texts[warmup:], think).result()
                _drain(pipeline)
                s1 = meter.snapshot()
                later = []
                if messages > 1:
                    later, wall2 = pool.submit(_load_blocking, base, chats, messages - 1, 0,
                                               texts[warmup + chats:], think, 1).result()
                    wall += wall2
                    _drain(pipeline)
                s2 = meter.snapshot()
                meter.close()
                cpu = s2.process - s0.process
                split = {"parts": meter.parts(len(lat) + len(later), s0, s2), "first": meter.parts(len(lat), s0, s1),
                         "later": meter.parts(len(later), s1, s2) if later else None}
                lat = lat + later
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
        out.update(split)
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


ANSWER, AFTER = "answer", "after"
"""``TurnMeter``'s two phases: from a request's arrival to its reply being sent (what the
person waits on), and what runs after it (capture, index write, marks, audit, maintenance)."""

_PHASE: contextvars.ContextVar[str] = contextvars.ContextVar("bench_turn_phase", default=AFTER)
"""The phase of the work running in this context: ``answer_phase`` sets it for each HTTP
request; anything else (the capture worker's own context, maintenance, start-up) is after."""


def answer_phase(app):
    """ASGI ``app`` whose HTTP requests run in ``TurnMeter``'s answer phase (a context
    variable, inherited by the tasks and ``asyncio.to_thread`` calls a request starts;
    the capture queue's worker runs in a context of its own, hence after)."""

    async def phased(scope, receive, send):
        if scope["type"] == "http":
            _PHASE.set(ANSWER)
        await app(scope, receive, send)

    return phased


class _Steps(collections.abc.Coroutine):
    """A task's coroutine whose every step on the loop is timed (thread CPU) into its phase."""

    __slots__ = ("_coro", "_meter")

    def __init__(self, coro, meter: TurnMeter) -> None:
        self._coro = coro
        self._meter = meter

    def send(self, value):
        t = time.thread_time()
        try:
            return self._coro.send(value)
        finally:
            self._meter._add(_PHASE.get(), "loop", "step", "", time.thread_time() - t)

    def throw(self, *exc):
        t = time.thread_time()
        try:
            return self._coro.throw(*exc)
        finally:
            self._meter._add(_PHASE.get(), "loop", "step", "", time.thread_time() - t)

    def close(self):
        return self._coro.close()

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def __getattr__(self, name):  # cr_frame, cr_code, __qualname__…: the task's repr and stack
        return getattr(self._coro, name)


class _MeteredExecutor(ThreadPoolExecutor):
    """The loop's default executor (``asyncio.to_thread``), timing each call's thread CPU
    into the phase of the context that submitted it, by the called function's name."""

    def __init__(self, meter: TurnMeter) -> None:
        super().__init__(thread_name_prefix="metered")
        self._meter = meter

    def submit(self, fn, /, *args, **kwargs):
        meter, phase, name = self._meter, _PHASE.get(), _target_name(fn)

        def run():
            meter._local.phase = phase
            meter._workers.add(threading.get_native_id())
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                meter._add(phase, "worker", "call", name, time.thread_time() - t)
                meter._local.phase = None

        return super().submit(run)


def _target_name(fn) -> str:
    """The function an executor runs: ``asyncio.to_thread`` submits ``partial(context.run, f, …)``."""
    import functools

    if isinstance(fn, functools.partial):
        inner = fn.args[0] if fn.args and getattr(fn.func, "__name__", "") == "run" else fn.func
        return _target_name(inner)
    return getattr(fn, "__qualname__", None) or type(fn).__name__


@dataclass(frozen=True)
class MeterSnapshot:
    """``TurnMeter``'s counters at one moment (``TurnMeter.snapshot``)."""

    process: float
    threads: dict[int, float]
    names: dict[int, str]
    cpu: dict[tuple[str, str, str, str], tuple[float, int]]


class TurnMeter:
    """Where a gateway's CPU goes, by phase — the answer path (a request's arrival to
    its reply being sent) and after it — and by part (``ROWS``), between two
    ``snapshot``s, measured inside the gateway's process.

    Wraps, on the instances (``close`` undoes it), ``core.index.embedder``'s
    ``embed_query`` and ``embed_documents`` and every public method of
    ``core.store``, adding each call's thread CPU (``time.thread_time``) to its part,
    its phase and its thread kind — a thread's outermost metered call only, so a store
    call inside an embedding, or the reverse, counts once. With ``loop`` (the
    gateway's event loop, on ``loop_thread``) it also times each task step on the
    loop (a task factory) and each ``asyncio.to_thread`` call (the loop's default
    executor, replaced by a metered one) into the phase of the context that runs or
    submits it (``answer_phase`` marks the requests). Each thread's CPU comes from
    ``/proc/self/task/<tid>/schedstat`` (``_thread_cpu``). Then, per phase:

    - query / document embedding, SQL: the wrapped calls;
    - Python in worker threads: the executor's calls less the wrapped calls in them;
    - event loop: the task steps less the wrapped calls in them; the loop thread's CPU
      outside any task step (HTTP parsing and sending, the selector, callbacks)
      counts to the answer path;
    - worker threads' wake-ups: the executor threads' CPU outside their calls, shared
      by the phases' counts of calls;
    - LanceDB's own threads (threads that are not Python's: LanceDB's Rust runtime;
      ONNX Runtime and BLAS run on the caller's thread), the other Python threads
      (the cache loader, LanceDB's Python event loop, the loop watch) less the
      wrapped calls in them, and what threads that ended spent: after the answer.

    Without ``loop`` every thread but ``loop_thread`` is a worker of the after phase
    and the loop thread's CPU is the answer path's event loop. Linux only
    (``/proc``); OSError elsewhere."""

    def __init__(self, core: MemoryCore, loop_thread: threading.Thread,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop_tid = loop_thread.native_id
        self._loop_ident = loop_thread.ident
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cpu: dict[tuple[str, str, str, str], list] = {}
        self._workers: set[int] = set()
        self._undo: list[tuple[object, str]] = []
        self._loop = loop
        self._executor: _MeteredExecutor | None = None
        emb = core.index.embedder
        for name, part in (("embed_query", "query embedding"), ("embed_documents", "document embedding")):
            self._wrap(emb, name, part)
        for name in dir(type(core.store)):
            if name.startswith("_") or name in ("close", "engine"):
                continue
            attr = getattr(type(core.store), name, None)
            if callable(attr) and not isinstance(attr, type):
                self._wrap(core.store, name, "SQL")
        for name in ("search_vector", "search_bm25"):  # counted, not timed: the index's searches
            self._count(core.index, name)
        # and its writes that write something (each a LanceDB fragment or deletion file) and its compactions
        self._count(core.index, "upsert", "index write", lambda a: bool(a[0]))
        self._count(core.index, "delete", "index write", lambda a: bool(a[1]))
        self._count(core.index, "optimize", "index write")
        if loop is not None:
            self._install(loop)
        self._start = self.snapshot()

    def _install(self, loop: asyncio.AbstractEventLoop) -> None:
        done = threading.Event()
        self._executor = _MeteredExecutor(self)

        def factory(lp, coro, **kw):
            return asyncio.Task(_Steps(coro, self), loop=lp, **kw)

        def swap() -> None:
            self._old = (loop.get_task_factory(), getattr(loop, "_default_executor", None))
            loop.set_task_factory(factory)
            loop.set_default_executor(self._executor)
            done.set()

        loop.call_soon_threadsafe(swap)
        if not done.wait(30):
            raise RuntimeError("the event loop did not take the meter")

    def _add(self, phase: str, where: str, part: str, name: str, dt: float) -> None:
        key = (phase, where, part, name)
        with self._lock:
            c = self._cpu.get(key)
            if c is None:
                self._cpu[key] = [dt, 1]
            else:
                c[0] += dt
                c[1] += 1

    def _where(self) -> tuple[str, str]:
        """(phase, thread kind) of the calling thread's current work."""
        phase = getattr(self._local, "phase", None)
        if threading.get_ident() == self._loop_ident:
            return _PHASE.get(), "loop"
        if phase is not None:
            return phase, "worker"
        if self._loop is None:
            return AFTER, "worker"
        return _PHASE.get(), "other"

    def _wrap(self, obj: object, name: str, part: str) -> None:
        import functools

        inner = getattr(obj, name)
        local = self._local

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
                self._add(*self._where(), part, name, time.thread_time() - t)

        setattr(obj, name, timed)
        self._undo.append((obj, name))

    def _count(self, obj: object, name: str, kind: str = "index search", when=None) -> None:
        """Count the calls of ``obj.name`` (those whose positional arguments pass ``when``) as ``kind``."""
        import functools

        inner = getattr(obj, name, None)
        if inner is None:
            return

        @functools.wraps(inner)
        def counted(*a, **kw):
            if when is None or when(a):
                self._add(self._where()[0], "-", kind, name, 0.0)
            return inner(*a, **kw)

        setattr(obj, name, counted)
        self._undo.append((obj, name))

    def close(self) -> None:
        """Remove the wrappers (the instances' own methods again), the task factory and
        the metered executor (the loop's earlier one back)."""
        for obj, name in self._undo:
            try:
                delattr(obj, name)
            except AttributeError:
                pass
        self._undo.clear()
        if self._loop is not None and self._executor is not None:
            loop, (factory, executor), done = self._loop, self._old, threading.Event()

            def back() -> None:
                loop.set_task_factory(factory)
                loop._default_executor = executor  # None: made afresh by the next to_thread
                done.set()

            if not loop.is_closed():
                loop.call_soon_threadsafe(back)
                done.wait(30)
            self._executor.shutdown(wait=False)
            self._executor = None

    def snapshot(self) -> MeterSnapshot:
        """The counters now (the process's and each thread's CPU, the timed calls)."""
        threads = _thread_cpu()
        with self._lock:
            cpu = {k: (v[0], v[1]) for k, v in self._cpu.items()}
        return MeterSnapshot(time.process_time(), threads, _thread_names(threads), cpu)

    def parts(self, turns: int, since: MeterSnapshot | None = None, until: MeterSnapshot | None = None) -> dict:
        """CPU milliseconds per turn between ``since`` (default: the construction) and
        ``until`` (default: now), over ``turns`` turns: ``{"answer": {row: ms},
        "after": {row: ms}, "answer total", "after total", "total"`` (the process's
        CPU; the two phases add up to it), ``"detail"``: ``{(phase, kind, name):
        (ms, calls)}`` per turn for each Store method (kind "SQL"), embedding, executor
        call (kind "call": the function ``asyncio.to_thread`` ran), index search and
        thread (kind "thread": ``comm`` of the threads outside the loop and the
        executor)}. Rows not measured in a phase are None. ValueError for turns < 1."""
        if turns < 1:
            raise ValueError("turns must be at least 1")
        a, b = since or self._start, until or self.snapshot()
        total = b.process - a.process
        delta = {tid: c - a.threads.get(tid, 0.0) for tid, c in b.threads.items()}
        python = {t.native_id for t in threading.enumerate()}
        cpu = {k: (v[0] - a.cpu.get(k, (0.0, 0))[0], v[1] - a.cpu.get(k, (0.0, 0))[1]) for k, v in b.cpu.items()}

        def s(phase=None, where=None, parts=None, calls=False) -> float:
            return sum(v[1 if calls else 0] for (p, w, part, _), v in cpu.items()
                       if (phase is None or p == phase) and (where is None or w == where)
                       and (parts is None or part in parts))

        timed = ("query embedding", "document embedding", "SQL")
        loop = delta.get(self._loop_tid, 0.0)
        workers = sum(c for tid, c in delta.items() if tid in self._workers)
        if self._loop is None:  # no executor of ours: every other Python thread works for the after phase
            workers = sum(c for tid, c in delta.items() if tid in python and tid != self._loop_tid)
        native = sum(c for tid, c in delta.items() if tid not in python and tid not in self._workers)
        other = sum(c for tid, c in delta.items()
                    if tid in python and tid != self._loop_tid and tid not in self._workers) if self._loop else 0.0
        ended = max(0.0, total - sum(delta.values()))
        wake = max(0.0, workers - s(where="worker", parts=("call",))) if self._loop else 0.0
        calls = s(where="worker", parts=("call",), calls=True)
        share = s(ANSWER, "worker", ("call",), calls=True) / calls if calls else 0.0
        steps = s(where="loop", parts=("step",))
        rest = max(0.0, loop - steps) if self._loop else loop - s(where="loop", parts=timed)
        out: dict = {}
        for phase in (ANSWER, AFTER):
            mine = phase == ANSWER
            rows = {"query embedding": s(phase, parts=("query embedding",)), "SQL": s(phase, parts=("SQL",)),
                    "document embedding": s(phase, parts=("document embedding",))}
            if self._loop is None:
                rows[ROWS[3]] = 0.0 if mine else max(0.0, workers - s(where="worker", parts=timed))
                rows[ROWS[4]] = rest if mine else 0.0
                rows[ROWS[5]] = None
            else:
                rows[ROWS[3]] = max(0.0, s(phase, "worker", ("call",)) - s(phase, "worker", timed))
                rows[ROWS[4]] = max(0.0, s(phase, "loop", ("step",)) - s(phase, "loop", timed)) + (rest if mine else 0)
                rows[ROWS[5]] = wake * (share if mine else 1 - share)
            rows[ROWS[6]] = None if mine else native
            rows[ROWS[7]] = None if mine else max(0.0, other - s(where="other", parts=timed)) + ended
            out[phase] = {k: None if v is None else v * 1000 / turns for k, v in rows.items()}
            out[f"{phase} total"] = sum(v for v in out[phase].values() if v is not None)
        out["total"] = total * 1000 / turns
        detail: dict[tuple[str, str, str], tuple[float, float]] = {}
        for (p, w, part, name), (c, n) in cpu.items():
            kind = "call" if part == "call" else "step" if part == "step" else part
            key = (p, kind, name)
            old = detail.get(key, (0.0, 0.0))
            detail[key] = (old[0] + c * 1000 / turns, old[1] + n / turns)
        for tid, c in delta.items():
            if tid != self._loop_tid and tid not in self._workers and c > 0:
                key = (AFTER, "thread", b.names.get(tid, "?") + ("" if tid in python else " (native)"))
                old = detail.get(key, (0.0, 0.0))
                detail[key] = (old[0] + c * 1000 / turns, 0.0)
        out["detail"] = detail
        return out


ROWS = ("query embedding", "SQL", "document embedding", "Python in worker threads (recall, capture, hops)",
        "event loop: HTTP, framework, pipeline", "worker threads' wake-ups", "LanceDB's own threads",
        "other threads (cache loader, LanceDB's loop, ended)")
"""``TurnMeter``'s parts of each phase, in the order the turn table prints them."""


def _thread_cpu() -> dict[int, float]:
    """CPU seconds of each live thread of this process, by native id: the scheduler's
    run time (``/proc/self/task/<tid>/schedstat``, nanoseconds), else user + system
    time in clock ticks (``stat``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # the thread ended between the listing and the read
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15
    return out


def _thread_names(tids) -> dict[int, str]:
    """Each thread's name as the kernel keeps it (``comm``), by native id."""
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[tid] = f.read().strip()
        except OSError:
            continue
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


def turn_table(title: str, f: dict, verbose: bool = False) -> str:
    """``measure(..., parts=True)``'s figures as issue 41's table, for the steady turns
    (each chat's later turns; all turns when there were none): each part's CPU ms per
    turn on the answer path (a request's arrival to its reply being sent), after it
    (capture, index write, marks, audit) and in the whole turn, each ÷ the floor; then
    the answer path and the turn ÷ the floor for the first turns (a new person), the
    later turns and all turns (issue 41's figure: the whole turn over all turns), and the
    turn ÷ (the floor + its document embedding: the model's work for what capture stored,
    which the floor leaves out). ``verbose``: each Store method, embedding, executor call and thread of the steady
    turns by phase, ms and calls per turn."""
    from bench import table

    fl = f["floor"]
    floor_ms = fl["floor"]
    steady = f.get("later") or f["parts"]
    rows = []
    for name in ROWS:
        a, b = steady[ANSWER][name], steady[AFTER][name]
        whole = (a or 0.0) + (b or 0.0)
        rows.append([name, "-" if a is None else a, "-" if a is None else a / floor_ms,
                     "-" if b is None else b, "-" if b is None else b / floor_ms, whole, whole / floor_ms])
    a, b = steady[f"{ANSWER} total"], steady[f"{AFTER} total"]
    rows.append(["total", a, a / floor_ms, b, b / floor_ms, steady["total"], steady["total"] / floor_ms])
    which = "later turns (each chat's 2nd on: the steady turn)" if f.get("later") else "all turns"
    out = [table(f"{title}; {which}, CPU ms per turn; floor (one query embedding + recall with the vector at hand "
                 f"+ one SQL write) {floor_ms:.1f} ms: embedding {fl['query embedding']:.1f}, recall "
                 f"{fl['recall']:.1f}, SQL write {fl['SQL write']:.1f}; {f['requests']} turns, round trip p50 "
                 f"{f['p50_ms']:.0f} ms, p95 {f['p95_ms']:.0f} ms",
                 ["part", "answer path", "÷ floor", "after the answer", "÷ floor", "the turn", "÷ floor"], rows)]
    figures = [("first turns", f.get("first")), ("later turns", f.get("later")), ("all turns", f["parts"])]
    figures = [(label, p) for label, p in figures if p is not None]
    out.append("answer path ÷ floor: " + " · ".join(
        f"{label} {p[f'{ANSWER} total'] / floor_ms:.2f}× ({p[f'{ANSWER} total']:.1f} ms)" for label, p in figures)
        + f"  (goal ≤ {ANSWER_GOAL:g})")
    out.append("turn ÷ floor: " + " · ".join(
        f"{label} {p['total'] / floor_ms:.2f}× ({p['total']:.1f} ms)" for label, p in figures)
        + f"  (goal ≤ {TURN_GOAL:g}; issue 41's figure: all turns)")
    out.append("turn ÷ (floor + the document embedding of what capture stored): " + " · ".join(
        f"{label} {p['total'] / (floor_ms + _documents(p)):.2f}× (document embedding {_documents(p):.1f} ms)"
        for label, p in figures) + "  (no goal: the turn beyond what the model must do for the line and its facts)")
    searches = sum(n for (p, kind, _), (_, n) in steady["detail"].items() if p == ANSWER and kind == "index search")
    hops = sum(n for (p, kind, _), (_, n) in steady["detail"].items() if p == ANSWER and kind == "call")
    docs = sum(n for (p, kind, name), (_, n) in steady["detail"].items()
               if p == ANSWER and kind != "call" and name == "embed_documents")
    writes = {name: sum(n for (_, kind, nm), (_, n) in steady["detail"].items() if kind == "index write" and nm == name)
              for name in ("upsert", "delete", "optimize")}
    out.append(f"on the answer path per steady turn: {hops:.1f} calls in worker threads (asyncio.to_thread), "
               f"{searches:.2f} LanceDB searches, {docs:.2f} document embedding calls; per steady turn, either "
               f"phase: {writes['upsert']:.2f} index upserts, {writes['delete']:.2f} deletes (each a LanceDB "
               f"fragment), {writes['optimize']:.3f} optimizes")
    if verbose:
        detail = sorted(steady["detail"].items(), key=lambda kv: (kv[0][0] != ANSWER, kv[0][1], -kv[1][0]))
        out.append(table(f"{which}, by phase: each Store method (SQL), embedding, call in a worker thread (call: "
                         f"its whole CPU, the parts inside included), index search and other thread",
                         ["phase", "kind", "name", "CPU ms / turn", "calls / turn"],
                         [[p, kind, name, ms, n] for (p, kind, name), (ms, n) in detail if ms >= 0.005 or n >= 0.005]))
    return "\n".join(out)


def _documents(p: dict) -> float:
    """CPU ms a turn of document embedding in ``p`` (a phase-split figure of
    ``TurnMeter.parts``), both phases: the model's work for what capture stored."""
    return (p[ANSWER]["document embedding"] or 0.0) + (p[AFTER]["document embedding"] or 0.0)


def run_turn(chats: tuple[int, ...] = TURN_CHATS, messages: int = TURN_MESSAGES, precision: str | None = None,
             emit=None, verbose: bool = False, against: str | None = None) -> list[dict]:
    """Issue 41's turn at its floor: for each count in ``chats``, that many chats at a
    person's pace (``THINK_S``) send ``messages`` fresh chat-mix lines each to a
    fresh gateway (SQLite + LanceDB + e5-small at ``precision``, None: shipped);
    prints ``turn_table`` with the load average as each run ends and returns the
    figures (``measure(..., parts=True)``). ``against``: a git revision whose gateway
    runs the same load first, each count back to back with this tree's (both in a
    child process each, the revision's code from a temporary worktree, this bench's
    code), then the ratios this ÷ that. Raises RuntimeError when a child fails or the
    revision cannot be checked out."""
    from bench.chatmix import chat_mix

    emit = emit or (lambda text: print(text, end="\n\n", flush=True))
    emit(f"the turn and its floor (issue 41): gateway CPU per turn by phase and part, no model, fresh chat-mix "
         f"texts, {messages} per chat, {os.cpu_count()} cores; load average {_loadavg()} at the start")
    out = []
    here = Path(__file__).resolve().parents[1]
    with contextlib.ExitStack() as stack:
        there = stack.enter_context(_worktree(against)) if against else None
        for n in chats:
            title = f"{n} chats, each pausing {THINK_S[0]:g}-{THINK_S[1]:g} s after an answer"
            if there is None:
                workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-turn-"))
                try:
                    f = measure(workdir, chats=n, messages=messages, think=THINK_S, precision=precision, parts=True,
                                texts=chat_mix(WARMUP + n * messages + FLOOR_TEXTS))
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                emit(turn_table(f"{title}, load average {_loadavg()}", f, verbose))
                out.append(f)
                continue
            before = _measure_in_child(there, n, messages, precision)
            emit(turn_table(f"BEFORE ({against}): {title}, load average {_loadavg()}", before, verbose))
            f = _measure_in_child(here, n, messages, precision)
            emit(turn_table(f"AFTER (this tree): {title}, load average {_loadavg()}", f, verbose))
            emit(_compare(n, before, f))
            out.append(f)
    return out


def _compare(chats: int, before: dict, after: dict) -> str:
    """After ÷ before of the answer path and the turn (each ÷ its own run's floor, and in ms)."""
    lines = [f"{chats} chats, this tree ÷ before in the same run (load average {_loadavg()}):"]
    for label in ("first", "later", "parts"):
        a, b = before.get(label), after.get(label)
        if a is None or b is None:
            continue
        fa, fb = before["floor"]["floor"], after["floor"]["floor"]
        name = {"parts": "all turns"}.get(label, f"{label} turns")
        lines.append(f"  {name}: answer path {a[f'{ANSWER} total']:.1f} → {b[f'{ANSWER} total']:.1f} ms "
                     f"({a[f'{ANSWER} total'] / fa:.2f}× → {b[f'{ANSWER} total'] / fb:.2f}× the floor), the turn "
                     f"{a['total']:.1f} → {b['total']:.1f} ms ({a['total'] / fa:.2f}× → {b['total'] / fb:.2f}×); "
                     f"the answer path less its embeddings {_beside(a):.1f} → {_beside(b):.1f} ms "
                     f"({_beside(b) / _beside(a):.2f}×)")
    return "\n".join(lines)


def _beside(p: dict) -> float:
    """The answer path's CPU ms per turn less its embeddings (the parts a change of the
    turn's own code moves; the embeddings' CPU swings most with the machine's load)."""
    return p[f"{ANSWER} total"] - p[ANSWER]["query embedding"] - p[ANSWER]["document embedding"]


@contextlib.contextmanager
def _worktree(rev: str):
    """A temporary detached git worktree of this repository at ``rev`` (removed after)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    path = Path(tempfile.mkdtemp(prefix="huiyi-bench-against-")) / "tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True,
                       check=False)
        shutil.rmtree(path.parent, ignore_errors=True)


def _measure_in_child(root: Path, chats: int, messages: int, precision: str | None) -> dict:
    """``measure(..., parts=True)`` in a child process over the gateway code of the tree
    at ``root`` and this tree's ``bench`` (a link to it first on the child's path)."""
    import subprocess

    tmp = Path(tempfile.mkdtemp(prefix="huiyi-bench-child-"))
    try:
        (tmp / "bench").symlink_to(Path(__file__).resolve().parent)
        result = tmp / "result.json"
        code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
                "from bench.webhook import _child; _child(*sys.argv[3:])")
        env = dict(os.environ, HUIYI_EVAL_DATA_DIR=str(_data_dir()))
        done = subprocess.run([sys.executable, "-c", code, str(tmp), str(root), str(chats), str(messages),
                               precision or "", str(result)], cwd=root, env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the turn bench failed in {root}: {done.stderr[-2000:]}")
        return _from_json(json.loads(result.read_text()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _data_dir() -> Path:
    import bench

    return bench.DATA_DIR


def _child(chats: str, messages: str, precision: str, result: str) -> None:
    """The child of ``_measure_in_child``: one measured run, its figures as JSON in ``result``."""
    from bench.chatmix import chat_mix

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    n, m = int(chats), int(messages)
    workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-turn-"))
    try:
        f = measure(workdir, chats=n, messages=m, think=THINK_S, precision=precision or None, parts=True,
                    texts=chat_mix(WARMUP + n * m + FLOOR_TEXTS))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Path(result).write_text(json.dumps(_to_json(f)))


def _to_json(f: dict) -> dict:
    out = dict(f)
    for label in ("parts", "first", "later"):
        if out.get(label) is not None:
            p = dict(out[label])
            p["detail"] = [[*k, *v] for k, v in p["detail"].items()]
            out[label] = p
    return out


def _from_json(f: dict) -> dict:
    for label in ("parts", "first", "later"):
        if f.get(label) is not None:
            f[label]["detail"] = {(p, kind, name): (ms, n) for p, kind, name, ms, n in f[label]["detail"]}
    return f


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run()
