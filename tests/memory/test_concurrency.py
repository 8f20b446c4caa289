"""Real concurrency on real stores: identical captures racing in one namespace
produce one memory (one process, and two cores as two replicas would), and
SQLite under the gateway's own concurrency never answers "database is locked"."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from memory.capture import capture
from memory.core import MemoryCore
from memory.store import ChatLine, Store
from memory.types import ChatKind, ChatRef, Namespace

DM = ChatRef("tg", ChatKind.PRIVATE, "1001")


def race(workers) -> list:
    """Run the callables at the same instant (a barrier), return their results."""
    barrier = threading.Barrier(len(workers))
    results: list = [None] * len(workers)
    errors: list = []

    def run(i, fn):
        barrier.wait()
        try:
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    return results


def test_two_concurrent_identical_captures_store_one_memory(core, namespace):
    """Two threads capture the same message at once (a platform retry racing the
    original): one memory, one 'stored' and one 'deduped'."""
    at = datetime.now(timezone.utc) - timedelta(minutes=1)
    for n in range(5):
        text = f"我第{n}次去杭州看西湖"
        results = race([lambda: capture(core, namespace, text, chat=DM, said_at=at, message_id="1")] * 2)
        actions = sorted(r[0].action for r in results)
        assert actions == ["deduped", "stored"], actions
        assert results[0][0].memory.id == results[1][0].memory.id
    assert core.store.count(namespace) == 5


def test_two_replicas_racing_on_one_database_store_one_memory(core, namespace):
    """Two cores with their own connection pools and locks (two gateway replicas)
    race on the same key: the unique (namespace, key) constraint lets one win and
    the other dedupes onto it — on SQLite and PostgreSQL."""
    other = MemoryCore(Store(core.store.url, schema=core.store.schema), core.index)
    try:
        for n in range(5):
            texts = [f"我喜欢第{n}种茶", f"我喜欢第{n}种茶"]
            results = race([lambda c=c, t=t: c.add(namespace, c.new(namespace, t, key=f"tea.{n}"))
                            for c, t in zip((core, other), texts)])
            assert sorted(r.action for r in results) == ["deduped", "stored"]
            assert results[0].memory.id == results[1].memory.id
        assert core.store.count(namespace) == 5
    finally:
        other.store.close()


def test_sqlite_never_reports_database_is_locked(tmp_path, embedder):
    """Eight threads over two stores on one SQLite file (the gateway and the operator
    CLI) add, supersede, claim deliveries, log chat lines, touch and forget at once:
    no 'database is locked', and every write landed."""
    from memory.index import SearchIndex

    url = f"sqlite:///{tmp_path / 'huiyi.db'}"
    index = SearchIndex(tmp_path / "index", embedder)
    cores = [MemoryCore(Store(url), index), MemoryCore(Store(url), index)]

    def work(k: int):
        c = cores[k % 2]
        ns = Namespace("default", f"tg:{k % 4}")
        chat = ChatRef("tg", ChatKind.PRIVATE, str(k))
        for i in range(12):
            r = c.add(ns, c.new(ns, f"第{k}个人的第{i}件事", key=f"k{k}.{i % 3}"))
            assert c.store.claim_delivery(f"default|tg|{k}|{i}")
            c.store.append_chat("default", chat, ChatLine("user", str(k), f"line {i}", datetime.now(timezone.utc)))
            c.mark_recalled(ns, [r.memory.id])
            if i % 5 == 4:
                c.forget(ns, r.memory.id, purge=False)
        return True

    assert race([lambda k=k: work(k) for k in range(8)]) == [True] * 8
    total = sum(cores[0].store.count(Namespace("default", f"tg:{j}")) for j in range(4))
    live: set[int] = set()  # the same program, sequentially, for one worker
    for i in range(12):
        live.add(i % 3)
        if i % 5 == 4:
            live.discard(i % 3)
    assert total == 8 * len(live)
    for c in cores:
        c.store.close()
