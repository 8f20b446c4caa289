"""Lingering index writes (``MemoryCore(index_linger_s=…)``): adds that are not
concurrent share one LanceDB write, the next recall finds a memory whose write
still lingers without embedding it again, a namespace searched through the index
has its write made first, a forget wins over a lingering write, a crash before
the write is repaired from the outbox, and closing writes what lingers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from memory.capture import capture
from memory.core import MemoryCore
from memory.index import SearchIndex
from memory.recall import RecallParams
from memory.store import Store
from memory.types import ChatKind, ChatRef, Namespace

DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
ROOT = Path(__file__).resolve().parents[2]


class CountingEmbedder:
    """The real embedder, counting its document calls (``calls``) and the documents
    they embedded (``documents``: what a recall must not make)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0
        self.documents = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_documents(self, texts):
        self.calls += 1
        self.documents += len(texts)
        return self.inner.embed_documents(texts)


def lingering(core: MemoryCore, seconds: float) -> MemoryCore:
    """A core over ``core``'s stores whose adds linger ``seconds`` before their index write."""
    return MemoryCore(core.store, core.index, index_linger_s=seconds)


def test_paced_adds_share_one_index_write(core, namespace):
    """Six adds one after another (a person's pace, not concurrent) make one index
    write, not six, each row in its own namespace; without lingering each add
    writes alone."""
    other = Namespace("default", "tg:2002")
    slow = lingering(core, 3)  # longer than six adds take on a loaded machine
    before = core.index.writes_since_optimize
    ids = {namespace: set(), other: set()}
    for n in range(6):
        ns = namespace if n % 2 else other
        ids[ns].add(slow.add(ns, slow.new(ns, f"我第{n}次去杭州看西湖", key=f"trip.{n}")).memory.id)
        time.sleep(0.02)
    deadline = time.monotonic() + 20
    while (slow.index_lingering(namespace) or slow.index_lingering(other)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slow.index_writes == 1
    assert core.index.writes_since_optimize - before == 1
    assert core.index.ids(namespace) == ids[namespace] and core.index.ids(other) == ids[other]
    assert core.store.outbox_depth() == 0
    at_once = core.index.writes_since_optimize
    for n in range(3):
        core.add(namespace, core.new(namespace, f"I read book number {n}", key=f"book.{n}"))
    assert core.index.writes_since_optimize - at_once == 3


def test_the_next_recall_finds_a_lingering_memory_without_embedding_it(core, namespace):
    """A capture whose index write still lingers is found by the next recall, from
    SQL, with the vector capture made: the recall embeds no document."""
    counting = CountingEmbedder(core.index.embedder)
    core.index.embedder = counting
    try:
        slow = lingering(core, 30)
        capture(slow, namespace, "我养了一只叫煤球的黑猫", chat=DM, said_at=datetime.now(UTC),
                message_id="1")
        assert slow.index_lingering(namespace) and core.index.ids(namespace) == set()
        made = counting.documents
        assert made >= 1  # embedded before its SQL write
        hits = slow.recall(namespace, ["我的猫叫什么名字？"])
        assert [h.memory.text for h in hits][:1] == ["我养了一只叫煤球的黑猫"]
        assert counting.documents == made
        slow.flush_index()  # its write embeds nothing either: the vector is the one capture made
        assert counting.documents == made
        assert len(core.index.ids(namespace)) == 1
    finally:
        core.index.embedder = counting.inner


def test_a_recall_through_the_index_writes_the_lingering_memory_first(core, namespace):
    """A namespace searched through the index (above ``exact_max``) has its
    lingering write made before the search, so the memory is found there too."""
    slow = lingering(core, 30)
    mem = slow.add(namespace, slow.new(namespace, "My sister Lena lives in Vienna", key="sister.city")).memory
    assert slow.index_lingering(namespace)
    hits = slow.recall(namespace, ["Where does my sister live?"], params=RecallParams(exact_max=0))
    assert mem.id in [h.memory.id for h in hits]
    assert not slow.index_lingering(namespace)


def test_a_forget_wins_over_a_lingering_write(core, namespace):
    """A memory forgotten while its index write lingers never reaches the index,
    and nothing is left in the outbox."""
    slow = lingering(core, 30)
    mem = slow.add(namespace, slow.new(namespace, "我住在成都", key="home.city")).memory
    slow.forget(namespace, mem.id)
    slow.flush_index()
    assert core.index.ids(namespace) == set()
    assert core.store.outbox_depth() == 0
    assert slow.recall(namespace, ["我住在哪里？"], params=RecallParams(exact_max=0)) == []


def test_closing_writes_what_lingers(tmp_path, embedder, namespace):
    """``close`` (the gateway's shutdown) writes the lingering index write."""
    slow = MemoryCore(Store(f"sqlite:///{tmp_path / 'huiyi.db'}"), SearchIndex(tmp_path / "index", embedder),
                      index_linger_s=60)
    mem = slow.add(namespace, slow.new(namespace, "I work as a nurse in Leeds", key="job")).memory
    slow.close()
    assert SearchIndex(tmp_path / "index", embedder).ids(namespace) == {mem.id}
    store = Store(f"sqlite:///{tmp_path / 'huiyi.db'}")
    try:
        assert store.outbox_depth() == 0
    finally:
        store.close()


CRASH = """
import os, sys
from memory.core import MemoryCore
from memory.embed import Usem3Embedder
from memory.index import SearchIndex
from memory.store import Store
from memory.types import Namespace
ns = Namespace("default", "tg:1001")
core = MemoryCore(Store(sys.argv[1]), SearchIndex(sys.argv[2], Usem3Embedder()), index_linger_s=60)
m = core.add(ns, core.new(ns, "我女儿叫朵朵", key="daughter.name")).memory
print(m.id, flush=True)
os._exit(0)  # killed before the lingering write
"""


def test_a_crash_before_the_lingering_write_is_repaired_from_the_outbox(tmp_path, embedder, namespace):
    """A process that dies while its add's index write lingers leaves the memory in
    SQL with its outbox op; the next start sees the index as whole (the op is
    pending) and maintenance writes it."""
    url, index_dir = f"sqlite:///{tmp_path / 'huiyi.db'}", tmp_path / "index"
    out = subprocess.run([sys.executable, "-c", CRASH, url, str(index_dir)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    mid = out.stdout.split()[-1]
    core = MemoryCore(Store(url), SearchIndex(index_dir, embedder))
    try:
        assert core.index.ids(namespace) == set() and core.store.outbox_depth() == 1
        assert core.index_missing() is None
        assert core.maintain() == 1
        assert core.index.ids(namespace) == {mid}
        hits = core.recall(namespace, ["我女儿叫什么？"], params=RecallParams(exact_max=0))
        assert mid in [h.memory.id for h in hits]
    finally:
        core.close()
