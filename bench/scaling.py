"""The figures of the capacity plan (``docs/scaling.md``, issue 30): what one turn
and one capture cost, on PostgreSQL, with the shipped embedder.

A real gateway pipeline (``gateway.service.build_core`` + ``Pipeline``, no chat
model) over a fresh PostgreSQL schema and a LanceDB directory in a temporary
data root, with the e5-small embedder (``memory.embed``, the ``intfloat/
multilingual-e5-small`` weights that ship with the gateway). ``people`` persons
(half English, half Chinese) each say fresh lines of the public chat logs in
order — English: LoCoMo turns of one speaker (``memory/locomo10.json``);
Chinese: DuLeMon user lines and LCCC utterances (``zh/dulemon_samples.jsonl``,
``zh/cdialgpt_lccc_toy_valid200.json``; their word-split spaces removed) — as
private, addressed messages: recall, recollection, prompt, then the capture
(``background_capture``, drained before the next turn, as ``bench.pipeline``).
A warm-up of ``warmup`` turns is not counted (tables created, model loaded).

Printed, each with the load average (``os.getloadavg``) beside it:

- CPU per turn and per capture, and of each stage inside them, in CPU
  milliseconds of the whole process (``time.process_time`` deltas, summed over
  the measured turns and divided by their number; the turns run one at a time,
  so the deltas are the turn's own work plus whatever the process's background
  threads did meanwhile). Stages are timed by wrapping the live objects'
  methods: ``embed_query`` / ``embed_documents`` of the embedder,
  ``MemoryCore.recall``, ``MemoryCore.add``, ``SearchIndex.upsert``,
  ``Store.append_chat``; a stage nested in another (the query's embedding in
  recall) is counted in both.
- SQL rows written per turn, per capture and per stored memory: the deltas of
  ``n_tup_ins + n_tup_upd + n_tup_del`` of ``pg_stat_user_tables`` over the
  schema's tables (PostgreSQL's cumulative statistics; the bench waits until
  two readings agree, ``_settled_stats``), and bytes: the delta of
  ``pg_total_relation_size`` (heap + indexes + TOAST, in 8 KiB pages, so small
  deltas are coarse) summed over the tables.
- Index bytes per memory: the LanceDB directory's size on disk (every file under
  it) divided by its live rows: with every version kept, after
  ``SearchIndex.optimize`` (compacts; keeps the versions of the last 5 minutes)
  and with only the latest version (what that leaves 5 minutes later).
- Cache bytes per namespace: ``NamespaceCache.nbytes`` (``memory.cache``'s own
  estimate of the views it holds) divided by the namespaces held, and the
  memories per namespace at that point.

- On either backend (``backend``: ``postgres``, the default, or ``sqlite``, a
  WAL file under the data root): SQL rows written per message by table, counted
  in the client (``_RowCounter``: the ``rowcount`` of every INSERT, UPDATE and
  DELETE the store's engines ran, by the table it names; an upsert counts the
  rows it inserted or updated), and the SQL CPU per message: thread CPU time
  (``time.thread_time``) spent inside the ``Store``'s methods, in whichever
  thread called them (the outermost call only, so a method calling another
  counts once; a context manager such as ``namespace_lock`` counts its entering
  and leaving, where its SQL runs): the driver, SQLAlchemy and the store's own
  Python — and, on SQLite, the database engine itself, which runs in the
  caller's thread; a PostgreSQL server's own CPU is in another process and not
  counted. Printed in all and by method (calls and CPU per turn, CPU per call).

The rows the recall marks' flushes write (``memory.marks``: access times,
co-recall links) are also counted apart, with the number of flushes. The gateway
writes them every ``memory.marks.FLUSH_EVERY_S`` of wall time, so how many rows a
message costs depends on how many of a person's turns fall in one window; the
bench runs its turns faster than people talk, so it flushes per person-paced
window instead of by its own clock: one flush every ``FLUSH_EVERY_S /
PERSON_PACE_S`` rounds (a round: each person's next line), and one after the
measured turns, counted with them. A flush writes one row per namespace (its
``namespace_state`` row, ``memory.store.pending``); after the last one every
namespace's pending marks are folded into the memories and links rows, counted
with the turns too (and printed apart): the marks' whole cost, however long the
run.

Needs PostgreSQL for ``postgres`` (``HUIYI_BENCH_PG_URL``, default the test server
``postgresql://root@127.0.0.1:5432/test``) and the public data under
``bench.DATA_DIR``; returns 2 when either is missing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import bench
from bench import peak_rss_mib, table
from memory.marks import FLUSH_EVERY_S

__all__ = ["PG_URL", "Figures", "run", "chat_lines"]

PERSON_PACE_S = 10.0
"""Seconds between a person's lines the marks' windows are laid out by (a quick chat)."""
PG_URL = os.environ.get("HUIYI_BENCH_PG_URL", "postgresql://root@127.0.0.1:5432/test")
"""The PostgreSQL server the bench makes its fresh schema on (dropped at the end)."""

_CJK_SPACE = re.compile(r"(?<=[\u3000-\u9fff\uff00-\uffef])\s+(?=[\u3000-\u9fff\uff00-\uffef])")


def _unsplit(text: str) -> str:
    """A word-split Chinese line (「我 喜欢 运动」) as it was typed (「我喜欢运动」)."""
    return _CJK_SPACE.sub("", text.strip())


def chat_lines(data_dir: Path, people: int, per_person: int, seed: int = 30) -> list[tuple[str, list[str]]]:
    """``people`` persons' lines, ``(lang, lines)`` each with up to ``per_person``
    lines in the order they were said: half ``en`` (LoCoMo, one speaker of one
    conversation each, the first turns of their sessions in order), half ``zh``
    (DuLeMon user lines of one dialogue, then LCCC utterances, spaces between
    CJK removed). Raises FileNotFoundError when a file is missing."""
    rng = random.Random(seed)
    locomo = json.loads((data_dir / "memory" / "locomo10.json").read_text(encoding="utf-8"))
    en: list[list[str]] = []
    for sample in locomo:
        conv = sample["conversation"]
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        for speaker in (conv["speaker_a"], conv["speaker_b"]):
            said = [t["text"] for s in sessions for t in conv[s] if t["speaker"] == speaker and t.get("text")]
            # one person per stretch of per_person lines: many people from ten conversations
            en += [said[i:i + per_person] for i in range(0, len(said) - per_person + 1, per_person)]
    zh_pool: list[list[str]] = []
    for line in (data_dir / "zh" / "dulemon_samples.jsonl").read_text(encoding="utf-8").splitlines():
        said = [_unsplit(u[4:].split("\t")[0]) for u in json.loads(line)["conversation"] if u.startswith("Usr:")]
        zh_pool.append([s for s in said if s])
    lccc = json.loads((data_dir / "zh" / "cdialgpt_lccc_toy_valid200.json").read_text(encoding="utf-8"))["valid"]
    loose = [_unsplit(u) for d in lccc for u in d if len(_unsplit(u)) >= 4]
    zh: list[list[str]] = []
    for i in range(people):
        own = list(zh_pool[i % len(zh_pool)]) if i < len(zh_pool) else []
        while len(own) < per_person and loose:
            own.append(loose.pop(0))
        zh.append(own[:per_person])
    rng.shuffle(en)
    half = people // 2
    return [("en", en[i]) for i in range(min(half, len(en)))] + [("zh", z) for z in zh[: people - half] if z]


@dataclass
class Figures:
    """What ``run`` measured; CPU in ms per unit, bytes per unit, each with the
    load average (1, 5, 15 min) when it was taken."""

    turns: int
    captures: int
    memories: int
    cpu_ms: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    sql_rows: dict[str, int] = field(default_factory=dict)
    client_rows: dict[str, int] = field(default_factory=dict)
    marks_rows: dict[str, int] = field(default_factory=dict)
    marks_flushes: int = 0
    fold_rows: dict[str, int] = field(default_factory=dict)
    sql_cpu_ms: float = 0.0
    sql_calls: dict[str, int] = field(default_factory=dict)
    sql_cpu_by_method: dict[str, float] = field(default_factory=dict)
    backend: str = "postgres"
    sql_bytes: int = 0
    index_bytes: int = 0
    index_bytes_optimized: int = 0
    index_bytes_pruned: int = 0
    index_rows: int = 0
    index_bytes_added: int = 0
    cache_bytes: int = 0
    cache_namespaces: int = 0
    wall_s: float = 0.0
    load: dict[str, str] = field(default_factory=dict)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _pg_stats(conn, schema: str) -> tuple[dict[str, int], int]:
    """Per table rows written so far (inserted + updated + deleted) and the schema's total bytes."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT relname, n_tup_ins + n_tup_upd + n_tup_del, pg_total_relation_size(relid) "
                        "FROM pg_stat_user_tables WHERE schemaname = %s", (schema,)).fetchall()
    return {r[0]: int(r[1]) for r in rows}, sum(int(r[2]) for r in rows)


def _settled_stats(conn, schema: str, timeout: float = 15.0) -> tuple[dict[str, int], int]:
    """``_pg_stats`` once every backend's pending table statistics are in: PostgreSQL 15+
    flushes an idle backend's at most once a second (before 15 the collector reports every
    500 ms), later on a loaded machine; read until two readings 0.5 s apart agree (at most
    ``timeout`` seconds), after a first wait of 1.2 s."""
    try:
        conn.execute("SELECT pg_stat_force_next_flush()")
    except Exception:  # noqa: BLE001 - before 15 there is no such function
        pass
    time.sleep(1.2)
    last = _pg_stats(conn, schema)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _pg_stats(conn, schema)
        if now[0] == last[0]:
            return now
        last = now
    return last


def _stats(admin, schema: str, root: Path) -> tuple[dict[str, int], int]:
    """PostgreSQL: ``_settled_stats``; SQLite (``admin`` None): no per-table
    statistics (the rows are the client's count) and the database files' bytes."""
    if admin is not None:
        return _settled_stats(admin, schema)
    return {}, sum(p.stat().st_size for p in root.glob("*.db*") if p.is_file())


class _Meter:
    """CPU (``time.process_time``) and calls of wrapped methods, by stage name."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.on = False

    def wrap(self, obj: object, method: str, stage: str) -> None:
        inner = getattr(obj, method)

        @functools.wraps(inner)
        def timed(*a, **kw):
            t = time.process_time()
            try:
                return inner(*a, **kw)
            finally:
                if self.on:
                    self.cpu[stage] += time.process_time() - t
                    self.calls[stage] += 1

        setattr(obj, method, timed)


_WRITE = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:\"?\w+\"?\.)?\"?(\w+)", re.IGNORECASE)


class _RowCounter:
    """Rows each table was written, counted in the client on any backend, by the
    table each INSERT, UPDATE or DELETE names, at the driver (so the statements
    the store runs on a DBAPI cursor of its own, ``memory.store.base.DbapiWriter``,
    count as the ones SQLAlchemy runs): PostgreSQL, the statement's ``rowcount``
    (an ``executemany`` reports the sum of its rows), read by a cursor class every
    pooled connection is given at its checkout; SQLite, the growth of the
    connection's ``total_changes`` from the statement to the next statement
    (sqlite3's trace callback, set at checkout: transaction control included), as
    sqlite3 counts the rows of a statement with RETURNING only as they are fetched.
    Thread-safe; counts while ``on``."""

    def __init__(self, store) -> None:
        import threading

        from sqlalchemy import event

        self.rows: dict[str, int] = defaultdict(int)
        self.marks_rows: dict[str, int] = defaultdict(int)  # of them, written by a recall marks flush
        self.marks = threading.local()  # .on in the thread running a flush
        self.on = False
        self._lock = threading.Lock()
        self._sqlite = store.is_sqlite
        self._open: dict[int, tuple[object, str, int, bool]] = {}  # id(sqlite3 conn) -> (it, table, changes, marks)
        self._cursor = None if store.is_sqlite else self._counting_cursor()
        for engine in (store.engine, getattr(store, "_lock_engine", None), getattr(store, "_auto_engine", None)):
            if engine is not None:
                event.listen(engine, "checkout", self._checkout)

    def _add(self, table: str, n: int, marks: bool) -> None:
        if self.on and n > 0:
            with self._lock:
                self.rows[table] += n
                if marks:
                    self.marks_rows[table] += n

    def _checkout(self, dbapi_conn, _record, _proxy) -> None:
        if self._sqlite:
            dbapi_conn.set_trace_callback(lambda sql, conn=dbapi_conn: self._statement(conn, sql))
        else:
            dbapi_conn.cursor_factory = self._cursor

    def _statement(self, conn, sql: str) -> None:
        """SQLite: ``sql`` begins on ``conn``; the statement before it there has ended."""
        opened = self._open.pop(id(conn), None)
        if opened is not None:
            _, table, then, marks = opened
            self._add(table, conn.total_changes - then, marks)
        m = _WRITE.match(sql)
        if m:
            self._open[id(conn)] = (conn, m.group(1), conn.total_changes, getattr(self.marks, "on", False))

    def _counting_cursor(self):
        """PostgreSQL: a psycopg cursor class that counts the rows of each write it runs."""
        import psycopg

        counter = self

        def count(query, rowcount: int) -> None:
            m = _WRITE.match(query if isinstance(query, str) else str(query))
            if m and rowcount and rowcount > 0:
                counter._add(m.group(1), rowcount, getattr(counter.marks, "on", False))

        class Counted(psycopg.Cursor):
            # in pipeline mode a statement's rowcount is known once its result arrives (``_set_results``,
            # at the pipeline's sync), not when ``execute`` returns: its query waits for it here
            _waiting: list | None = None

            def execute(self, query, *args, **kwargs):
                if self._conn._pipeline is not None:
                    if self._waiting is None:
                        self._waiting = []
                    self._waiting.append(query)
                    return super().execute(query, *args, **kwargs)
                out = super().execute(query, *args, **kwargs)
                count(query, self.rowcount)
                return out

            def _set_results(self, results):
                super()._set_results(results)
                if self._waiting:
                    count(self._waiting.pop(0), self.rowcount)

            def executemany(self, query, *args, **kwargs):
                out = super().executemany(query, *args, **kwargs)
                count(query, self.rowcount)
                return out

        return Counted


class _SqlCpu:
    """Thread CPU (``time.thread_time``) inside the public methods of a ``Store``,
    wrapped on the instance; only a thread's outermost store call is timed (a
    method that calls another counts once). ``cpu`` in seconds, ``calls`` by method."""

    def __init__(self, store) -> None:
        import threading

        self.cpu = 0.0
        self.calls: dict[str, int] = defaultdict(int)
        self.by_method: dict[str, float] = defaultdict(float)  # seconds of thread CPU, by outermost method
        self.on = False
        self._local = threading.local()
        self._lock = threading.Lock()
        for name in dir(type(store)):
            if name.startswith("_") or name in ("close", "engine"):
                continue
            attr = getattr(type(store), name, None)
            if callable(attr) and not isinstance(attr, type):
                setattr(store, name, self._timed(getattr(store, name), name))

    def _timed(self, inner, name: str):
        local = self._local

        @functools.wraps(inner)
        def timed(*a, **kw):
            if getattr(local, "depth", 0):
                return inner(*a, **kw)
            local.depth = 1
            t = time.thread_time()
            try:
                out = inner(*a, **kw)
            finally:
                local.depth = 0
                self._add(name, time.thread_time() - t, 1)
            # a lock held for a block (``namespace_lock``): its SQL runs on entering and leaving
            return _TimedBlock(out, self, name) if isinstance(out, AbstractContextManager) else out

        return timed

    def _add(self, name: str, spent: float, calls: int) -> None:
        if self.on:
            with self._lock:
                self.cpu += spent
                self.calls[name] += calls
                self.by_method[name] += spent


class _TimedBlock:
    """A ``Store`` context manager whose ``__enter__`` and ``__exit__`` count as its method's CPU
    (outermost only, as ``_SqlCpu``)."""

    def __init__(self, inner: AbstractContextManager, meter: _SqlCpu, name: str) -> None:
        self._inner, self._meter, self._name = inner, meter, name

    def _timed(self, step, *args):
        local = self._meter._local
        if getattr(local, "depth", 0):
            return step(*args)
        local.depth = 1
        t = time.thread_time()
        try:
            return step(*args)
        finally:
            local.depth = 0
            self._meter._add(self._name, time.thread_time() - t, 0)

    def __enter__(self):
        return self._timed(self._inner.__enter__)

    def __exit__(self, *exc):
        return self._timed(self._inner.__exit__, *exc)


def run(people: int = 40, per_person: int = 12, warmup: int = 20, embedder: str = "e5-small",
        pg_url: str = PG_URL, backend: str = "postgres") -> Figures | None:
    """Measure and print (see the module docstring); the figures, or None (and a
    line on stderr) when PostgreSQL or the data is unavailable. ``people`` ×
    ``per_person`` turns in all (round-robin over the people, so each person's
    lines keep their order), the first ``warmup`` not counted. ``backend``:
    ``postgres`` or ``sqlite`` (ValueError for another)."""
    if backend not in ("postgres", "sqlite"):
        raise ValueError(f"backend must be postgres or sqlite, not {backend!r}")
    import psycopg

    from bridges.contract import InboundMessage
    from gateway.config import load_settings
    from gateway.pipeline import Pipeline
    from gateway.service import build_core
    from memory.types import ChatKind

    try:
        persons = chat_lines(bench.DATA_DIR, people, per_person)
    except FileNotFoundError as e:
        print(f"scaling: public chat logs missing ({e}); see bench.DATA_DIR", file=sys.stderr)
        return None
    admin = None
    try:
        if backend == "postgres":
            admin = psycopg.connect(pg_url, autocommit=True, connect_timeout=5)
    except Exception as e:  # noqa: BLE001
        print(f"scaling: PostgreSQL unreachable at {pg_url}: {e}", file=sys.stderr)
        return None
    schema = f"huiyi_bench_scaling_{uuid.uuid4().hex[:8]}"
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-scaling-"))
    meter = _Meter()
    try:
        if admin is not None:
            settings = load_settings(data_dir=root, database_url=pg_url, embed_model=embedder)
        else:
            settings = load_settings(data_dir=root, embed_model=embedder)
        core = build_core(settings, schema=schema if admin is not None else None)
        pipeline = Pipeline(settings, core)
        counter = _RowCounter(core.store)
        flushes = [0]
        real_flush = core.marks.flush

        def flush() -> int:  # the recall marks' rows are counted apart: how many depends on the wall time
            counter.marks.on = True
            try:
                return real_flush()
            finally:
                counter.marks.on = False
                if counter.on:
                    flushes[0] += 1

        core.marks.flush = flush  # type: ignore[method-assign]
        # the marks are written per person-paced window, not by this run's wall time: a person says a line
        # every PERSON_PACE_S, so one window holds every_s / PERSON_PACE_S of each person's turns (rounds)
        rounds_per_flush = max(1, round(core.marks.every_s / PERSON_PACE_S))
        core.marks.every_s = float("inf")  # no flush by the clock inside the run
        sql_cpu = _SqlCpu(core.store)
        meter.wrap(core.index.embedder, "embed_query", "embed query")
        meter.wrap(core.index.embedder, "embed_documents", "embed documents")
        meter.wrap(core, "recall", "recall (with its embedding)")
        meter.wrap(core, "add", "memory add (SQL + outbox)")
        meter.wrap(core.index, "upsert", "index upsert (LanceDB)")
        meter.wrap(core.store, "append_chat", "chat log append (SQL)")
        order = [(p, i, line) for i in range(per_person) for p, (_, lines) in enumerate(persons) if i < len(lines)
                 for line in [lines[i]]]
        base = datetime(2026, 11, 1, tzinfo=timezone.utc)
        created: list[int] = []

        async def say(k: int, p: int, text: str) -> tuple[float, float]:
            uid = str(5000 + p)
            msg = InboundMessage(platform="tg", message_id=str(k), sender_id=uid, sender_name=f"p{p}",
                                 chat_kind=ChatKind.PRIVATE, chat_id=uid, text=text,
                                 timestamp=base + timedelta(minutes=k))
            t0 = time.process_time()
            res = await pipeline.handle("default", msg, background_capture=True)
            t1 = time.process_time()
            await pipeline.drain()
            t2 = time.process_time()
            created.append(int(bool(res.capture_pending)))
            return t1 - t0, t2 - t1

        async def turns() -> dict[str, float]:
            cpu = {"turn to reply": 0.0, "capture after it": 0.0}
            for k, (p, _, text) in enumerate(order):
                if k == warmup:
                    before.update(zip(("rows", "bytes"), _stats(admin, schema, root)))
                    before["index"] = _dir_bytes(root / "index")
                    before["memories"] = core.index.count()
                    before["wall"] = time.perf_counter()
                    meter.on = counter.on = sql_cpu.on = True
                    created.clear()
                a, b = await say(k, p, text)
                if (k + 1) % (rounds_per_flush * len(persons)) == 0:
                    core.marks.flush()
                if meter.on:
                    cpu["turn to reply"] += a
                    cpu["capture after it"] += b
            return cpu

        before: dict = {}
        load_start = _load()
        totals = asyncio.run(turns())
        core.marks.flush()  # what the measured turns marked since the last window, counted with them
        # and every mark still waiting in its namespace's row folded into the memories and links rows
        # (memory.store.pending): a fold's rows counted with the turns whose marks it writes
        folding = dict(counter.marks_rows)
        counter.marks.on = True
        try:
            for ns in core.store.pending_namespaces():
                core.store.fold_marks(ns, half_life_days=core.marks.half_life_days)
        finally:
            counter.marks.on = False
        wall = time.perf_counter() - before["wall"]
        meter.on = counter.on = sql_cpu.on = False
        load_end = _load()
        # an idle backend holds its table statistics for up to 10 s (PGSTAT_IDLE_INTERVAL); one that
        # exits reports them: close the store's connections (it reconnects if used again) before reading
        core.store.close()
        rows_after, bytes_after = _stats(admin, schema, root)
        n = len(order) - warmup
        captures = sum(created)
        memories = core.index.count() - before["memories"]
        fig = Figures(turns=n, captures=captures, memories=memories, wall_s=wall, backend=backend)
        fig.client_rows = dict(counter.rows)
        fig.marks_rows = dict(counter.marks_rows)
        fig.marks_flushes = flushes[0]
        fig.fold_rows = {t: v - folding.get(t, 0) for t, v in counter.marks_rows.items() if v - folding.get(t, 0)}
        fig.sql_cpu_ms = sql_cpu.cpu * 1000 / n
        fig.sql_calls = dict(sql_cpu.calls)
        fig.sql_cpu_by_method = {k: v * 1000 / n for k, v in sql_cpu.by_method.items()}
        fig.cpu_ms = {k: v * 1000 / n for k, v in totals.items()}
        fig.cpu_ms.update({k: v * 1000 / n for k, v in meter.cpu.items()})
        fig.calls = dict(meter.calls)
        fig.sql_rows = ({t: rows_after.get(t, 0) - before["rows"].get(t, 0) for t in rows_after}
                        if admin is not None else dict(counter.rows))
        fig.sql_bytes = bytes_after - before["bytes"]
        fig.index_bytes = _dir_bytes(root / "index")
        fig.index_rows = core.index.count()
        fig.index_bytes_added = fig.index_bytes - before["index"]
        fig.cache_bytes = core.cache.nbytes if core.cache is not None else 0
        fig.cache_namespaces = len(core.cache) if core.cache is not None else 0
        fig.load = {"start": load_start, "end": load_end}
        core.index.optimize()
        fig.index_bytes_optimized = _dir_bytes(root / "index")
        with core.index.writing(), warnings.catch_warnings():  # what optimize leaves 5 minutes later
            warnings.simplefilter("ignore", UserWarning)  # "removes every version but the latest": ours alone
            core.index._table.optimize(cleanup_older_than=timedelta(0))
        fig.index_bytes_pruned = _dir_bytes(root / "index")
        fig.load["optimize"] = _load()
        _print(fig, persons, embedder, core.index.embedder.name)
        core.close()
        return fig
    finally:
        try:
            if admin is not None:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            if admin is not None:
                admin.close()
            shutil.rmtree(root, ignore_errors=True)


def _print(fig: Figures, persons: list[tuple[str, list[str]]], embedder: str, name: str) -> None:
    n = fig.turns
    langs = {lang: sum(1 for lg, _ in persons if lg == lang) for lang in ("en", "zh")}
    head = (f"scaling [{name}]: {n} measured turns (after the warm-up) of {len(persons)} people "
            f"({langs['en']} en from LoCoMo, {langs['zh']} zh from DuLeMon/LCCC), "
            f"{'PostgreSQL' if fig.backend == 'postgres' else 'SQLite'} + LanceDB, no chat model; "
            f"{fig.captures} capture passes, {fig.memories} memories stored; {fig.wall_s:.1f} s wall; "
            f"load average {fig.load['start']} at start, {fig.load['end']} at end")
    rows = [(k, fig.cpu_ms[k], fig.calls.get(k, n) / n) for k in fig.cpu_ms]
    print(table(head + "\nCPU per turn (process_time, ms of CPU per measured turn)", ["stage", "CPU ms/turn", "calls/turn"],
                rows))
    per_cap = fig.captures or 1
    per_mem = fig.memories or 1
    sql = sorted(((t, v) for t, v in fig.sql_rows.items() if v), key=lambda x: -x[1])
    how = ("pg_stat_user_tables ins+upd+del deltas" if fig.backend == "postgres"
           else "rowcount of each INSERT, UPDATE, DELETE, counted in the client")
    print(table(f"\nSQL rows written ({how}); load average {fig.load['end']}",
                ["table", "rows", "per turn", "per capture", "per memory"],
                [(t, v, v / n, v / per_cap, v / per_mem) for t, v in sql]
                + [("all tables", sum(fig.sql_rows.values()), sum(fig.sql_rows.values()) / n,
                    sum(fig.sql_rows.values()) / per_cap, sum(fig.sql_rows.values()) / per_mem)]))
    marks = sum(fig.marks_rows.values())
    print(f"of them written by the recall marks' flushes (a window of {FLUSH_EVERY_S:.0f} s, a person's line every "
          f"{PERSON_PACE_S:.0f} s: {fig.marks_flushes} flushes in the "
          f"{fig.wall_s:.0f} s measured; counted in the client): {marks / n:.2f} per turn ("
          + ", ".join(f"{t} {v / n:.2f}" for t, v in sorted(fig.marks_rows.items(), key=lambda x: -x[1]))
          + f"); of them the final fold of every namespace's pending marks {sum(fig.fold_rows.values()) / n:.2f} ("
          + ", ".join(f"{t} {v / n:.2f}" for t, v in sorted(fig.fold_rows.items(), key=lambda x: -x[1]))
          + f"); the rest {(sum(fig.client_rows.values()) - marks) / n:.2f} per turn")
    if fig.backend == "postgres":
        print(f"rows counted in the client (rowcount): {sum(fig.client_rows.values())} "
              f"({sum(fig.client_rows.values()) / n:.2f} per turn)")
    calls = sorted(fig.sql_calls.items(), key=lambda x: -x[1])
    print(f"SQL CPU (thread CPU inside Store methods): {fig.sql_cpu_ms:.2f} ms per turn; load average "
          f"{fig.load['end']}; store calls per turn: " + ", ".join(f"{k} {v / n:.2f}" for k, v in calls))
    by_cpu = sorted(fig.sql_cpu_by_method.items(), key=lambda x: -x[1])
    print(table(f"\nSQL CPU by Store method (thread CPU, outermost call; ms per turn); load average {fig.load['end']}",
                ["method", "calls/turn", "CPU ms/turn", "CPU ms/call"],
                [(k, fig.sql_calls.get(k, 0) / n, v, v * n / max(fig.sql_calls.get(k, 1), 1)) for k, v in by_cpu]))
    what = ("pg_total_relation_size delta, heap + indexes + TOAST" if fig.backend == "postgres"
            else "database, WAL and shared-memory files' size delta")
    print(f"SQL bytes ({what}): {fig.sql_bytes} B in all, "
          f"{fig.sql_bytes / n:.0f} B per turn, {fig.sql_bytes / per_mem:.0f} B per memory")
    print(f"index: {fig.index_rows} rows, {fig.index_bytes} B on disk with every version "
          f"({fig.index_bytes / max(fig.index_rows, 1):.0f} B per memory; the measured turns added "
          f"{fig.index_bytes_added} B, {fig.index_bytes_added / per_mem:.0f} B per memory stored), "
          f"{fig.index_bytes_optimized} B after "
          f"optimize ({fig.index_bytes_optimized / max(fig.index_rows, 1):.0f} B per memory), {fig.index_bytes_pruned} B "
          f"with only the latest version ({fig.index_bytes_pruned / max(fig.index_rows, 1):.0f} B per memory); load average "
          f"{fig.load['optimize']}")
    print(f"recall cache: {fig.cache_bytes} B over {fig.cache_namespaces} namespaces "
          f"({fig.cache_bytes / max(fig.cache_namespaces, 1):.0f} B per namespace, "
          f"{fig.index_rows / max(len(persons), 1):.1f} memories per person); load average {fig.load['end']}; "
          f"peak RSS {peak_rss_mib():.0f} MiB")
