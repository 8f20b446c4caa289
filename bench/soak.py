"""Memory under a long load: the gateway's resident set size (RSS) minute by minute.

A real gateway (the FastAPI app under uvicorn as ``huiyi serve`` runs it,
``gateway.http.serving``; LanceDB and the shipped e5-small embedder in a
temporary data root) on 127.0.0.1, over SQLite and over PostgreSQL (a fresh
schema on ``HUIYI_BENCH_PG_URL``, default the test server). ``chats`` private
chats at a person's pace (each sends its next line 1–4 s after its previous
answer, as ``bench.webhook``'s paced run) post signed requests to ``POST
/webhook/<tenant>`` for ``minutes`` minutes: every request a full turn whose
capture stores what the person said. The lines are the public chat logs'
(``bench.chatmix``, ~8k distinct lines): each chat says its own stretch of them,
so a namespace never hears a line twice, and a line comes back in other
namespaces only after the logs are used up (its query vector may then come from
the embedder's text cache, as a common line does in production).

Printed, one line a minute: the gateway process's RSS in MiB (``/proc/self``:
the bench process holds the gateway; the load runs in a process of its own), the
requests answered, the memories the index holds, the recall cache's estimate
(``NamespaceCache.nbytes``), LanceDB's own caches (``SearchIndex.cache_bytes``),
the turns whose captures wait in the queue (``CaptureQueue.queued``, bounded by
``MAX_QUEUED``), the lines whose readings the text caches hold (the speech-act
cache's entries, ``memory.speech_act.read``, 8,192 at most; the text caches
together hold ~45 MiB at their caps, docs/scaling.md) and the embeddings held
by text hash (``SearchIndex.vectors_held``, ~1.8 KiB each, ``VECTOR_CACHE`` =
4,096 at most), the C heap's bytes in use and free (``mallinfo2``), Python's
small-object arenas and the objects in them (``python_heap_mib``), SQLite's own
(its page caches; both backends' processes load the library, only SQLite's uses
it) and the process's threads (LanceDB's runtime starts more under load), and
the load average. At the end: the growth over the last ``judged`` minutes
(default all but the first 5, which load models and fill bounded caches) against
``GOAL_MIB``, and that growth less what the two caches with a byte cap took
meanwhile (the recall cache's views and LanceDB's caches: memory a store of
growing size is owed up to its cap, not a leak), judged against it too.

Run ``python -m bench soak --minutes 20`` (``make bench`` runs it after the other benches).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

__all__ = ["GOAL_MIB", "rss_mib", "run"]

log = logging.getLogger(__name__)

GOAL_MIB = 50.0
"""Growth of the RSS allowed over the judged minutes at 50 paced chats."""
SECRET = "bench-secret"
THINK_S = (1.0, 4.0)
PG_URL = os.environ.get("HUIYI_BENCH_PG_URL", "postgresql://root@127.0.0.1:5432/test")


def native_mib() -> tuple[float, float, float]:
    """The C heap's bytes in use and free inside its arenas (glibc's ``mallinfo2``:
    ``uordblks + hblkhd`` and ``fordblks``) and SQLite's (``sqlite3_memory_used``
    of the library the ``sqlite3`` module links, its page caches included), in MiB;
    NaN for each the C library does not answer."""
    import ctypes
    import ctypes.util

    nan = float("nan")
    used = free = sqlite = nan
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        info = libc.mallinfo2
        info.restype = _MallInfo2
        m = info()
        used, free = (m.uordblks + m.hblkhd) / 2**20, m.fordblks / 2**20
    except (OSError, AttributeError):
        pass
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        sqlite = lib.sqlite3_memory_used() / 2**20
    except (OSError, AttributeError):
        pass
    return used, free, sqlite


def python_heap_mib() -> tuple[float, float]:
    """Python's small-object heap (``pymalloc``: objects of at most 512 bytes) in MiB:
    its arenas' bytes and the bytes of the objects in them, from
    ``sys._debugmallocstats`` (which writes to file descriptor 2: redirected to a
    temporary file for the call, so another thread's log line of that moment goes
    there too); NaN for both where the report has neither line. The difference is
    room in partly used arenas, which pymalloc gives back only a whole arena at a time."""
    import re

    nan = float("nan")
    sys.stderr.flush()
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode("ascii", "replace")
    arenas = re.search(r"^(\d+) arenas \* (\d+) bytes/arena", text, re.MULTILINE)
    used = re.search(r"^# bytes in allocated blocks\s*=\s*([\d,]+)", text, re.MULTILINE)
    return (int(arenas[1]) * int(arenas[2]) / 2**20 if arenas else nan,
            int(used[1].replace(",", "")) / 2**20 if used else nan)


def _mallinfo2_type():
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
    return MallInfo2


_MallInfo2 = _mallinfo2_type()


def rss_mib() -> float:
    """This process's resident set size in MiB (``VmRSS`` of ``/proc/self/status``)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _chats(base: str, chats: int, seconds: float, texts: list[str]) -> dict[str, int]:
    """The load: ``chats`` paced chats for ``seconds``; counts of answers by kind."""
    import httpx

    from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

    counts = {"ok": 0, "refused": 0, "transport": 0}
    stretch = max(1, len(texts) // chats)
    limits = httpx.Limits(max_connections=chats, max_keepalive_connections=chats)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120.0) as client:
        end = time.monotonic() + seconds

        async def chat(c: int) -> None:
            rng = random.Random(c)
            await asyncio.sleep(rng.uniform(0.0, THINK_S[1]))
            n = 0
            while time.monotonic() < end:
                text = texts[(c * stretch + n) % len(texts)]
                body = json.dumps({"sender_id": f"u{c}", "chat_id": f"u{c}", "message_id": f"m{n}", "text": text},
                                  ensure_ascii=False).encode()
                ts = str(int(time.time()))
                try:
                    r = await client.post("/webhook/bench", content=body, headers={
                        TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(SECRET, ts, body),
                        "Content-Type": "application/json"})
                    counts["ok" if r.status_code == 200 else "refused"] += 1
                except httpx.TransportError:
                    counts["transport"] += 1
                n += 1
                await asyncio.sleep(rng.uniform(*THINK_S))

        await asyncio.gather(*(chat(c) for c in range(chats)))
    return counts


def _chats_blocking(base: str, chats: int, seconds: float, texts: list[str]) -> dict[str, int]:
    return asyncio.run(_chats(base, chats, seconds, texts))


def soak(backend: str, minutes: float, chats: int = 50, judged: float | None = None,
         emit=print) -> dict | None:
    """One soak over ``backend`` (``"sqlite"`` or ``"postgresql"``); returns
    ``{"rss": [(minute, MiB)], "growth_mib", "judged_min", "counts", "unbounded_mib"}``
    (``unbounded_mib``: ``growth_mib`` less what the byte-capped caches took) or None when
    PostgreSQL is unreachable. ``judged``: the last minutes whose growth is judged
    (default ``minutes - 5``, at least 1)."""
    from bench.chatmix import chat_mix
    from bench.webhook import serve_in_thread
    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    from gateway.pipeline import Pipeline
    from gateway.service import build_core
    from memory.speech_act import read

    judged = judged if judged is not None else max(1.0, minutes - 5)
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-soak-"))
    schema = None
    if backend == "postgresql":
        import psycopg

        try:
            psycopg.connect(PG_URL, connect_timeout=5).close()
        except Exception as e:  # noqa: BLE001
            emit(f"soak: PostgreSQL unreachable at {PG_URL}: {e}")
            return None
        url, schema = PG_URL, f"huiyi_bench_soak_{uuid.uuid4().hex[:8]}"
    else:
        url = f"sqlite:///{root / 'huiyi.db'}"
    try:
        settings = load_settings(data_dir=root, database_url=url, index_uri=str(root / "index"),
                                 tenants={"bench": TenantSettings(webhook={"secret": SECRET})})
        core = build_core(settings, schema=schema)
        pipeline = Pipeline(settings, core)
        server, thread = serve_in_thread(create_app(settings, pipeline))
        texts = chat_mix(7_900)
        port = server.config.port
        rss: list[tuple[int, float]] = [(0, rss_mib())]
        bounded: list[float] = [_bounded_mib(core)]
        emit(f"soak over {backend}: {chats} paced chats for {minutes:g} min; RSS at the start {rss[0][1]:.0f} MiB, "
             f"load average {_load()}")
        try:
            with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
                done = pool.submit(_chats_blocking, f"http://127.0.0.1:{port}", chats, minutes * 60, texts)
                t0, minute = time.monotonic(), 0
                while not done.done():
                    time.sleep(1.0)
                    if time.monotonic() - t0 >= (minute + 1) * 60:
                        minute += 1
                        rss.append((minute, rss_mib()))
                        bounded.append(_bounded_mib(core))
                        used, free, sqlite = native_mib()
                        py_arenas, py_used = python_heap_mib()
                        emit(f"  minute {minute:3d}: RSS {rss[-1][1]:7.0f} MiB  memories {core.index.count():6d}  "
                             f"recall cache {core.cache.nbytes / 2**20 if core.cache else 0:5.1f} MiB  "
                             f"LanceDB caches {core.index.cache_bytes / 2**20:5.1f} MiB  "
                             f"captures queued {pipeline.captures.queued():4d}  "
                             f"lines read {read.cache_info().currsize:5d}  vectors {core.index.vectors_held:5d}  "
                             f"malloc {used:5.0f} MiB (free {free:3.0f})  pymalloc {py_arenas:4.0f} MiB "
                             f"(objects {py_used:4.0f})  sqlite {sqlite:4.1f} MiB  "
                             f"threads {len(os.listdir('/proc/self/task')):3d}  load {_load()}")
                counts = done.result()
        finally:
            server.should_exit = True
            thread.join(timeout=60)
            core.close()
        first = max(0, len(rss) - 1 - int(judged))
        start = rss[first]
        growth = rss[-1][1] - start[1]
        unbounded = growth - (bounded[-1] - bounded[first])
        verdict = "pass" if growth <= GOAL_MIB else "MISS"
        emit(f"  requests {counts}; RSS {rss[0][1]:.0f} -> {rss[-1][1]:.0f} MiB; over the last {rss[-1][0] - start[0]} "
             f"min (from minute {start[0]}): {growth:+.0f} MiB, goal <= {GOAL_MIB:.0f} MiB: {verdict}; "
             f"less what the capped caches took (recall cache <= {settings.recall_cache_mib:g} MiB, LanceDB's "
             f"<= {settings.index_cache_mib:g} MiB: {bounded[-1] - bounded[first]:+.1f}): {unbounded:+.0f} MiB, "
             f"{'pass' if unbounded <= GOAL_MIB else 'MISS'}; load average {_load()}\n")
        return {"rss": rss, "growth_mib": growth, "judged_min": rss[-1][0] - start[0], "counts": counts,
                "unbounded_mib": unbounded}
    finally:
        if schema is not None:
            _drop_schema(schema)
        shutil.rmtree(root, ignore_errors=True)


def run(minutes: float = 20.0, chats: int = 50, backends: tuple[str, ...] = ("sqlite", "postgresql")) -> int:
    """Soak each backend in turn (module docstring); 1 when one missed ``GOAL_MIB``, else 0."""
    def emit(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    missed = False
    for backend in backends:
        f = soak(backend, minutes, chats, emit=emit)
        missed |= f is not None and f["growth_mib"] > GOAL_MIB
    return int(missed)


def _bounded_mib(core) -> float:
    """MiB the caches with a byte cap hold now: recall's namespace views
    (``NamespaceCache.nbytes``, capped by ``recall_cache_mib``) and LanceDB's
    (``SearchIndex.cache_bytes``, capped by ``index_cache_mib``)."""
    return ((core.cache.nbytes if core.cache else 0) + core.index.cache_bytes) / 2**20


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _drop_schema(schema: str) -> None:
    import psycopg

    try:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except Exception as e:  # noqa: BLE001 - a schema left behind is only clutter
        log.warning("soak: schema %s not dropped: %s", schema, e)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.exit(run())
