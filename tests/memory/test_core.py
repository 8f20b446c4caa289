"""The core's write path: dedupe, latest-wins, tombstones, and index repair
after a failure between SQL and index."""

from __future__ import annotations

import threading

import pytest

from memory.errors import SearchIndexError
from memory.recall import RecallParams
from memory.types import Namespace


def test_restating_a_fact_keeps_the_row(core, namespace):
    """Saying the same thing twice dedupes onto the existing row; nothing is deleted."""
    first = core.add(namespace, core.new(namespace, "我养了一只叫煤球的黑猫"))
    again = core.add(namespace, core.new(namespace, "我養了一隻叫煤球的黑貓"))
    assert again.action == "deduped" and again.memory.id == first.memory.id
    assert core.store.count(namespace) == 1


def test_latest_wins_keeps_history(core, namespace):
    """A new text under the same key supersedes: same id, version + 1, old text in history."""
    m = core.add(namespace, core.new(namespace, "我的猫叫煤球", key="pet.name")).memory
    r = core.add(namespace, core.new(namespace, "我的猫叫雪球", key="pet.name"))
    assert r.action == "superseded" and r.memory.id == m.id and r.memory.version == 2
    versions = core.history(namespace, m.id)
    assert [v.text for v in versions] == ["我的猫叫煤球", "我的猫叫雪球"]
    assert versions[0].valid_to is not None and versions[-1].valid_to is None
    assert [h.memory.text for h in core.recall(namespace, ["雪球"])][:1] == ["我的猫叫雪球"]


def test_forget_leaves_tombstone_and_no_text(core, namespace):
    """Forgetting removes the memory from SQL and index and refuses older evidence."""
    from datetime import timedelta

    m = core.add(namespace, core.new(namespace, "我的秘密是怕黑")).memory
    core.forget(namespace, m.id)
    assert core.recall(namespace, ["怕黑"]) == []
    assert m.id not in core.index.ids(namespace)
    old = core.new(namespace, "我的秘密是怕黑", created_at=m.created_at)
    assert core.add(namespace, old, said_at=m.created_at).action == "rejected"
    later = m.created_at + timedelta(days=1, seconds=1)
    from memory.store import utcnow

    assert core.add(namespace, core.new(namespace, "我的秘密是怕黑"), said_at=max(later, utcnow())).action == "stored"


class _BrokenIndex:
    """Wraps the real index and fails writes while ``broken`` is set (a crash or
    outage between SQL and index). Reads still go to the real index."""

    def __init__(self, real):
        self.real = real
        self.broken = True

    def __getattr__(self, name):
        return getattr(self.real, name)

    def upsert(self, memories, **kw):
        if self.broken:
            raise SearchIndexError("simulated outage")
        return self.real.upsert(memories, **kw)


def test_index_outage_is_repaired_from_the_outbox(core, namespace):
    """A write whose index update failed stays in SQL with an outbox row and is
    indexed by maintain() once the index is back — never lost."""
    real = core.index
    core.index = _BrokenIndex(real)
    r = core.add(namespace, core.new(namespace, "我在杭州读研究生"))
    assert r.action == "stored"
    assert core.store.get(namespace, r.memory.id).text == "我在杭州读研究生"
    assert r.memory.id not in real.ids(namespace)
    assert [o.memory_id for o in core.store.pending_ops()] == [r.memory.id]
    with pytest.raises(SearchIndexError):
        core.maintain()
    core.index.broken = False
    assert core.maintain() == 1
    core.index = real
    assert core.store.pending_ops() == []
    assert [h.memory.id for h in core.recall(namespace, ["杭州"])] == [r.memory.id]


def test_reindex_rebuilds_from_sql(sqlite_core, namespace):
    """Dropping the index loses nothing: reindex restores every live memory."""
    from memory.admin import OPERATOR, reindex

    ids = {sqlite_core.add(namespace, sqlite_core.new(namespace, t)).memory.id
           for t in ["我喜欢喝美式咖啡", "I run every morning", "我的生日是五月三日"]}
    sqlite_core.index.reset()
    assert sqlite_core.recall(namespace, ["咖啡"], params=RecallParams(exact_max=0)) == []
    # a small namespace is searched from SQL: losing the index does not lose its recall
    assert [h.memory.text for h in sqlite_core.recall(namespace, ["咖啡"])][:1] == ["我喜欢喝美式咖啡"]
    assert reindex(sqlite_core, OPERATOR, progress=False) == 3
    assert sqlite_core.index.ids(namespace) == ids
    assert [h.memory.text for h in sqlite_core.recall(namespace, ["咖啡"], params=RecallParams(exact_max=0))][:1] \
        == ["我喜欢喝美式咖啡"]


def test_changed_embedder_triggers_reembed_not_crash(tmp_path, embedder, namespace):
    """Opening the index with another embedder re-embeds from SQL instead of failing."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    core = MemoryCore(store, SearchIndex(tmp_path / "index", embedder))
    mid = core.add(namespace, core.new(namespace, "我的猫叫煤球")).memory.id

    class Tiny:
        name, dim = "tiny-test", 8

        def embed_documents(self, texts):
            import numpy as np

            return np.ones((len(texts), 8), dtype=np.float32) / 8 ** 0.5

        def embed_query(self, text):
            return self.embed_documents([text])[0]

    core2 = MemoryCore(store, SearchIndex(tmp_path / "index", Tiny()))
    assert core2.index.ids(namespace) == {mid}
    assert [h.memory.id for h in core2.recall(namespace, ["煤球"])] == [mid]
    store.close()


def test_openai_embedder_through_fake_server(llm, tmp_path, namespace):
    """The OpenAI-compatible embedder talks to a loopback server through the real openai client."""
    from memory.core import MemoryCore
    from memory.embed import OpenAIEmbedder
    from memory.index import SearchIndex
    from memory.store import Store

    emb = OpenAIEmbedder(llm.base_url, "fake-embed")
    assert emb.dim == llm.dim
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", emb))
    mid = core.add(namespace, core.new(namespace, "我养了一只叫煤球的黑猫")).memory.id
    assert [h.memory.id for h in core.recall(namespace, ["煤球"])] == [mid]
    assert any(r.get("model") == "fake-embed" for r in llm.requests)
    core.close()


def test_chinese_queries_find_simplified_memory(sqlite_core):
    """煤球, 猫, traditional script and mixed WiFi text all find their memory; emoji and
    zero-width characters do not break tokenising or embedding."""
    ns = Namespace("default", "qq:10001")
    cat = sqlite_core.add(ns, sqlite_core.new(ns, "我养了一只叫煤球的黑猫")).memory.id
    wifi = sqlite_core.add(ns, sqlite_core.new(ns, "我的WiFi密码忘了😭")).memory.id
    odd = sqlite_core.add(ns, sqlite_core.new(ns, "周\u200b末去爬山🧗\u200d♀️")).memory.id
    sqlite_core.add(ns, sqlite_core.new(ns, "I work as a nurse in Shenzhen"))
    top = lambda q: sqlite_core.recall(ns, [q])[0].memory.id  # noqa: E731
    assert top("煤球") == cat
    assert top("猫") == cat
    assert top("你的貓還好嗎") == cat
    assert top("wifi 密码") == wifi
    assert top("ＷｉＦｉ") == wifi
    assert top("爬山") == odd


def test_batch_defers_index_writes_to_one_write(sqlite_core):
    """Inside core.batch() writes land in SQL and the outbox at once; the index gets
    them all, over both namespaces, in one write when the block ends."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    writes = sqlite_core.index.writes_since_optimize
    with sqlite_core.batch():
        ids = [sqlite_core.add(ns, sqlite_core.new(ns, t)).memory.id
               for ns in (a, b) for t in ("我喜欢喝美式咖啡", "I run every morning")]
        assert len(sqlite_core.store.pending_ops()) == 4 and sqlite_core.index.ids(a) == set()
    assert sqlite_core.store.pending_ops() == []
    assert sqlite_core.index.writes_since_optimize == writes + 1
    assert sqlite_core.index.ids(a) | sqlite_core.index.ids(b) == set(ids)
    assert {h.memory.namespace for h in sqlite_core.recall(b, ["咖啡"])} == {b}


def test_concurrent_adds_share_index_writes_and_each_is_searchable_on_return(core):
    """Group commit: adds racing in 12 threads (12 namespaces) coalesce into fewer
    index writes than adds, and every add finds its own memory in the index, in its
    own namespace only, the moment it returns."""
    n = 12
    start = threading.Barrier(n)
    found: dict[int, set[str]] = {}
    errors: list[BaseException] = []
    writes = core.index.writes_since_optimize

    def person(i: int) -> None:
        ns = Namespace("default", f"tg:{500 + i}")
        try:
            start.wait()
            mid = core.add(ns, core.new(ns, f"我的幸运数字是{i} lucky number {i}")).memory.id
            found[i] = core.index.ids(ns) & {mid}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=person, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(found[i]) == 1 for i in range(n))
    assert core.index.writes_since_optimize - writes < n
    assert core.store.pending_ops() == []
    for i in range(n):
        ns = Namespace("default", f"tg:{500 + i}")
        assert [h.memory.namespace for h in core.recall(ns, [f"幸运数字 {i}"])] == [ns]
