"""Real concurrency on real stores: identical captures racing in one namespace
produce one memory (one process, and two cores as two replicas would), the
namespace lock holds across replicas on PostgreSQL, two replicas claiming due
captures never get the same line, and SQLite under the gateway's own
concurrency never answers "database is locked"."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

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


def test_a_forget_waits_for_another_replicas_write_in_progress_on_postgres(core, namespace):
    """PostgreSQL: while one replica holds a namespace's write lock (a capture between
    its tombstone check and its write), another replica's subject-wide forget of that
    namespace waits for it, and a write to another namespace does not."""
    if core.store.is_sqlite:
        pytest.skip("replicas need PostgreSQL; SQLite orders one process's writers only")
    other = MemoryCore(Store(core.store.url, schema=core.store.schema), core.index)
    stranger = Namespace("default", "qq:20002")
    forgot, wrote = threading.Event(), threading.Event()
    try:
        with core._locked(namespace):
            t1 = threading.Thread(target=lambda: (other.forget_everything_said_before_now(namespace), forgot.set()))
            t2 = threading.Thread(target=lambda: (other.add(stranger, other.new(stranger, "我住在台北，喜歡珍珠奶茶🧋")),
                                                  wrote.set()))
            t1.start(), t2.start()
            assert wrote.wait(10)  # another namespace: not held up
            time.sleep(0.5)
            assert not forgot.is_set()  # same namespace: waits for the holder
        assert forgot.wait(10)
        t1.join(10), t2.join(10)
        # the tombstone came after the held write: what was said before it is refused now
        said = datetime.now(timezone.utc) - timedelta(seconds=5)
        assert core.add(namespace, core.new(namespace, "I live in Hangzhou，我爱西湖"), said_at=said).action == "rejected"
    finally:
        other.store.close()


def test_two_replicas_claiming_due_captures_never_share_a_line(core):
    """Two stores (two replicas) claim the captures due at the same instant, four
    times each: every due line goes to exactly one claimer, and a claimed line is
    not due again until its lease has aged (on SQLite and PostgreSQL)."""
    other = Store(core.store.url, schema=core.store.schema)
    ns = Namespace("default", "tg:1001")
    dm = ChatRef("tg", ChatKind.PRIVATE, "1001")
    try:
        ids = {core.store.append_chat("default", dm, ChatLine("user", "1001", f"第{i}句 line {i}",
                                                               datetime.now(timezone.utc), message_id=str(i)),
                                      capture=ns) for i in range(40)}
        due = datetime.now(timezone.utc) + timedelta(seconds=1)  # every line queued before it
        lease = due + timedelta(minutes=1)  # the claim time: a claimed line is queued "then"
        stores = [core.store, other] * 4
        claimed = race([lambda s=s: [c.line_id for c in s.claim_captures(due, limit=7, now=lease)] for s in stores])
        flat = [i for batch in claimed for i in batch]
        assert len(flat) == len(set(flat)) == 40  # every line claimed, none twice
        assert set(flat) == ids
        assert core.store.claim_captures(due, limit=100) == []  # all leased
        rest = core.store.claim_captures(lease + timedelta(seconds=1), limit=100)
        assert {c.line_id for c in rest} == ids  # leases aged out: due again until done
    finally:
        other.close()


def test_a_line_runs_in_one_replica_whether_its_own_or_a_resuming_one_gets_there_first(core):
    """A capture held up past the resume age: if another replica claimed the line,
    the replica that queued it cannot take it any more; if the queuing replica took
    it first, the other cannot claim it until the new lease ages (both backends)."""
    other = Store(core.store.url, schema=core.store.schema)
    ns = Namespace("default", "tg:1001")
    dm = ChatRef("tg", ChatKind.PRIVATE, "1001")
    try:
        def queue(mid: str):
            said = ChatLine("user", "1001", f"我叫{mid}，I'm {mid}", datetime.now(timezone.utc), message_id=mid)
            line = core.store.append_chat("default", dm, said, capture=ns)
            return line, datetime.now(timezone.utc)

        late, late_queued = queue("阿杰")
        soon, soon_queued = queue("小雨")
        resume_at = datetime.now(timezone.utc) + timedelta(minutes=2)  # both lines are past the resume age then
        resumed = other.claim_captures(resume_at - timedelta(minutes=1), now=resume_at, limit=1)
        assert [c.line_id for c in resumed] == [late]
        assert core.store.take_captures({late: late_queued, soon: soon_queued}, now=resume_at) == {soon: "我叫小雨，I'm 小雨"}
        assert other.claim_captures(resume_at - timedelta(minutes=1), now=resume_at) == []  # both leased
    finally:
        other.close()


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


def test_two_index_handles_on_one_directory_see_and_keep_each_others_writes(tmp_path, embedder, namespace):
    """Two SearchIndex handles on one directory (two replicas sharing the data root):
    a write through one is read through the other at once, and concurrent upserts,
    deletes and purges through both lose no row and raise nothing."""
    from memory.index import SearchIndex
    from memory.types import Memory

    a, b = SearchIndex(tmp_path / "index", embedder), SearchIndex(tmp_path / "index", embedder)
    other = Namespace("default", "qq:20002")
    assert b.ids(namespace) == set()  # b has read the empty table before a writes
    a.upsert([Memory(id="a0", namespace=namespace, text="我住在杭州 I live in Hangzhou")])
    assert b.ids(namespace) == {"a0"}

    def writes(idx: SearchIndex, tag: str, ns: Namespace):
        for i in range(6):
            idx.upsert([Memory(id=f"{tag}{i}", namespace=ns, text=f"第{i}件事：喜歡珍珠奶茶🧋 fact {tag}{i}")])
            if i % 3 == 2:
                idx.delete(ns, [f"{tag}{i}"])
                idx.purge()
        return True

    assert race([lambda: writes(a, "x", namespace), lambda: writes(b, "y", other)]) == [True, True]
    kept = {f"{t}{i}" for t in "xy" for i in range(6) if i % 3 != 2}
    assert a.ids(namespace) | a.ids(other) == b.ids(namespace) | b.ids(other) == kept | {"a0"}


def test_a_capture_taken_soon_after_its_queueing_keeps_the_append_lease_and_writes_nothing(core):
    """``take_captures(renew_after=…)``: a line taken within that time of its queueing is read, not
    leased again — its text as edited meanwhile comes back, no other replica can claim it before the
    append's lease ages, and then one can (nothing renewed it); a line taken later is leased from now
    (both backends, zh and en text)."""
    other = Store(core.store.url, schema=core.store.schema)
    ns = Namespace("default", "tg:1001")
    try:
        said = ChatLine("user", "1001", "我叫小雨 I'm Rain", datetime.now(timezone.utc), message_id="m1")
        soon = core.store.append_chat("default", DM, said, capture=ns)
        queued = datetime.now(timezone.utc)
        core.store.edit_chat_line("default", DM, "m1", "我叫小雨，I'm Rain 🌧️")
        renew = timedelta(seconds=30)
        assert core.store.take_captures({soon: queued}, now=queued + timedelta(seconds=5), renew_after=renew) \
            == {soon: "我叫小雨，I'm Rain 🌧️"}
        age = timedelta(seconds=60)  # the resume age
        assert other.claim_captures(queued + timedelta(seconds=59) - age) == []  # the append's lease holds
        later = queued + age + timedelta(seconds=1)
        assert [c.line_id for c in other.claim_captures(later - age, now=later)] == [soon]  # not renewed
        said2 = ChatLine("user", "1001", "I live in 台北", datetime.now(timezone.utc), message_id="m2")
        late = core.store.append_chat("default", DM, said2, capture=ns)
        queued2 = datetime.now(timezone.utc)
        taken_at = queued2 + timedelta(seconds=40)  # past renew_after: leased again from then
        assert core.store.take_captures({late: queued2}, now=taken_at, renew_after=renew) == {late: "I live in 台北"}
        assert other.claim_captures(queued2 + timedelta(seconds=1)) == []  # a minute after the queueing: leased
    finally:
        other.close()
