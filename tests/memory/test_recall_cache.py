"""Recall's in-process namespace cache: the same hits as exact search (disclosure
included), a write version in SQL that makes every process reload after any
write — a forget is never served from a stale cache, across processes, on SQLite
and PostgreSQL — and a bound in MiB that it keeps."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memory.cache import _FIT_BYTES_PER_MEMORY, NamespaceCache, VectorForm
from memory.core import MemoryCore
from memory.recall import EXACT_MAX, RecallParams, channel_hits
from memory.store import utcnow
from memory.types import ChatKind, ChatRef, Namespace, Visibility

ROOT = Path(__file__).resolve().parents[2]
FACTS = ["我养了一只叫煤球的黑猫", "我喜欢喝美式咖啡，不加糖。", "I love hiking in the Alps", "我的WiFi密码忘了",
         "My sister lives in Paris 🗼", "我在上海做程序员", "我對花生過敏", "週末我常去爬山",
         "明天要去面试了有点紧张😬", "我最近在学吉他 🎸", "我女朋友叫小丽", "I work as a nurse in Leeds"]
GROUP_FACTS = ["我在群里说过我喜欢猫", "Our band plays jazz on Fridays 🎷", "我们群周末去爬山", "咖啡馆在人民广场"]
QUERIES = ["你还记得我的猫吗？", "咖啡", "hiking", "wifi 密码", "Where does my sister live?", "上海", "花生過敏",
           "爬山", "面试", "吉他", "小丽是谁", "nurse", "程序員", "煤球 🐱", "jazz", "？？？"]
GROUP = ChatRef("qq", ChatKind.GROUP, "7001")
OTHER_GROUP = ChatRef("qq", ChatKind.GROUP, "7002")


def _cached(core: MemoryCore, mib: float = 64.0) -> MemoryCore:
    """A second core over the same store and index, with a cache of ``mib`` MiB."""
    return MemoryCore(core.store, core.index, cache_mib=mib)


def _fill(core: MemoryCore, ns: Namespace) -> None:
    """17 memories of ``ns`` in one index write: every test compares recalls over the state this leaves, and
    an add reads nothing of the index (the writes of a write version are SQL's)."""
    with core.batch():
        for t in FACTS:
            core.add(ns, core.new(ns, t))
        for t in GROUP_FACTS:
            core.add(ns, core.new(ns, t, origin=GROUP, visibility=Visibility.GROUP))
        core.add(ns, core.new(ns, "群二的秘密 secret of group two", origin=OTHER_GROUP, visibility=Visibility.GROUP))


def _shape(hits) -> list[tuple[str, float, dict]]:
    return [(h.memory.id, h.score, h.ranks) for h in hits]


def test_cached_recall_equals_exact_recall_in_every_chat(core):
    """Same hits, scores and ranks as the exact search, for zh / en / mixed / traditional
    / emoji queries, in private, in the group the memories were learned in, in another
    group and in a group none was learned in; the cache holds the namespace after."""
    ns = Namespace("default", "tg:4242")
    _fill(core, ns)
    _fill(core, Namespace("default", "tg:4243"))  # another person with the same texts
    cached = _cached(core)
    now = utcnow()
    chats = [None, ChatRef("tg", ChatKind.PRIVATE, "4242"), GROUP, OTHER_GROUP, ChatRef("tg", ChatKind.GROUP, "-1")]
    for q in QUERIES:
        for chat in chats:
            for channels in (("bm25",), ("vector",), ("bm25", "vector")):
                p = RecallParams(k=10, channels=channels)
                exact = core.recall(ns, [q], chat=chat, now=now, params=RecallParams(k=10, channels=channels,
                                                                                      exact_max=EXACT_MAX))
                hot = cached.recall(ns, [q], chat=chat, params=p, now=now)
                assert _shape(hot) == _shape(exact), (q, chat, channels)
                assert {h.memory.namespace for h in hot} == {ns} or not hot
                if chat is not None and chat.is_group:
                    assert all(h.memory.origin is not None and h.memory.origin.group_key == chat.group_key
                               for h in hot), (q, chat)
    assert cached.cache is not None and len(cached.cache) == 1 and cached.cache.loads == 1
    assert cached.cache.hits > 0


def test_a_long_tail_query_ranks_the_same_on_both_paths(sqlite_core):
    """A three-line tail (weighted terms, weighted query vector) gives the same raw
    channel scores from the cache as from the exact search."""
    ns = Namespace("default", "qq:88")
    _fill(sqlite_core, ns)
    cached = _cached(sqlite_core)
    tail = ["周末去哪里玩？", "I might go hiking 🥾", "你还记得我喜欢喝什么咖啡吗"]
    exact, _ = channel_hits(sqlite_core.store, sqlite_core.index, ns, tail, params=RecallParams(exact_max=EXACT_MAX))
    hot, rows = channel_hits(sqlite_core.store, sqlite_core.index, ns, tail, cache=cached.cache)
    assert hot == exact and rows is None and hot["bm25"] and hot["vector"]


def test_writes_in_this_process_are_seen_at_the_next_recall(core):
    """Add, edit, forget and a move to another namespace each bump the write version:
    the next cached recall answers from the new state."""
    ns, other = Namespace("default", "tg:5150"), Namespace("default", "qq:5150")
    cached = _cached(core)
    cat = cached.add(ns, cached.new(ns, "我养了一只叫煤球的黑猫")).memory.id
    assert [h.memory.id for h in cached.recall(ns, ["煤球"])] == [cat]
    v0, live0 = core.store.namespace_state(ns)
    assert live0 == 1
    tea = cached.add(ns, cached.new(ns, "I drink oolong tea every morning 🍵")).memory.id
    assert tea in {h.memory.id for h in cached.recall(ns, ["oolong tea"])}
    cached.update(ns, cat, "我养了一只叫雪球的白猫")
    assert [h.memory.text for h in cached.recall(ns, ["雪球"])] == ["我养了一只叫雪球的白猫"]
    assert cached.recall(ns, ["煤球"]) == [] or all("煤球" not in h.memory.text for h in cached.recall(ns, ["煤球"]))
    cached.forget(ns, tea, purge=False)
    assert tea not in {h.memory.id for h in cached.recall(ns, ["oolong tea"])}
    v1, live1 = core.store.namespace_state(ns)
    assert v1 == v0 + 3 and live1 == 1
    core.store.move_namespace(ns, other)  # what linking two identities does to the memories
    moved_from, moved_to = ns, other
    assert cached.recall(moved_from, ["雪球"]) == []
    assert [h.memory.text for h in cached.recall(moved_to, ["雪球"])] == ["我养了一只叫雪球的白猫"]
    assert core.store.namespace_state(moved_to)[1] == 1


_OTHER_PROCESS = textwrap.dedent("""
    import json
    import sys
    import traceback
    from memory.core import MemoryCore
    from memory.embed import Usem3Embedder
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.types import Namespace

    embedder = Usem3Embedder()
    ns = Namespace("default", "tg:6060")
    print("ready", flush=True)
    for line in sys.stdin:
        url, schema, index, verb, arg = json.loads(line)
        try:  # a core of its own per request, closed after it: as a process of its own would
            core = MemoryCore(Store(url, schema=schema or None), SearchIndex(index, embedder), cache_mib=16)
            out = ""
            if verb == "forget":
                core.forget(ns, arg)
            elif verb == "edit":
                core.update(ns, arg, "我改喝拿铁了 ☕")
            else:
                out = core.add(ns, core.new(ns, arg)).memory.id
            core.close()
            print(json.dumps({"out": out}), flush=True)
        except Exception:
            print(json.dumps({"error": traceback.format_exc()}), flush=True)
""")


@pytest.fixture(scope="module")
def other_process():
    """Another Python process that writes to a store and index it is told of, one
    request a line on stdin. One process for the module: its start (imports, the
    embedder's weights) costs seconds, and what the tests pin is only that the
    write is not this process's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUIYI_") and k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.stdin.close()
    proc.wait(timeout=60)


def _in_another_process(proc: subprocess.Popen, core: MemoryCore, *args: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps([core.store.url, core.store.schema or "", str(core.index.path), *args]) + "\n")
    proc.stdin.flush()
    assert select.select([proc.stdout], [], [], 300)[0], "the other process did not answer in 300 s"
    answer = json.loads(proc.stdout.readline())
    assert "error" not in answer, answer["error"][-2000:]
    return answer["out"]


def test_a_forget_in_another_process_is_never_served_from_the_cache(core, other_process):
    """A warm cache in this process, then another process forgets, edits and adds:
    the very next recall here has the forgotten memory gone, the edit's new text and
    the new memory (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:6060")
    cached = _cached(core)
    secret = cached.add(ns, cached.new(ns, "我的银行卡密码是 2468 🔐")).memory.id
    coffee = cached.add(ns, cached.new(ns, "我喜欢喝美式咖啡")).memory.id
    cached.add(ns, cached.new(ns, "I love hiking in the Alps"))
    assert secret in {h.memory.id for h in cached.recall(ns, ["银行卡密码"])}
    assert cached.cache is not None and cached.cache.loads == 1

    _in_another_process(other_process, core, "forget", secret)
    assert secret not in {h.memory.id for h in cached.recall(ns, ["银行卡密码"])}
    assert all("2468" not in h.memory.text for h in cached.recall(ns, ["银行卡 密码 2468"]))

    _in_another_process(other_process, core, "edit", coffee)
    assert [h.memory.text for h in cached.recall(ns, ["拿铁"])] == ["我改喝拿铁了 ☕"]

    added = _in_another_process(other_process, core, "add", "My sister lives in Paris 🗼")
    assert added in {h.memory.id for h in cached.recall(ns, ["sister Paris"])}
    assert cached.cache.loads == 4


def test_the_cache_keeps_its_bound_and_evicts_the_least_recent(sqlite_core):
    """With room for about one namespace, recalling three in turn keeps the estimate
    under the bound, evicts the least recently used, and still answers correctly."""
    spaces = [Namespace("default", f"tg:71{i}") for i in range(3)]
    for ns in spaces:
        _fill(sqlite_core, ns)
    probe = _cached(sqlite_core)
    probe.recall(spaces[0], ["咖啡"])
    one = probe.cache.nbytes
    _, live = sqlite_core.store.namespace_state(spaces[0])
    estimate = live * (sqlite_core.index.embedder.dim * 4 + _FIT_BYTES_PER_MEMORY)
    assert estimate < one  # so a bound of one + estimate lets the estimate fit in its half, and not two views
    small = _cached(sqlite_core, mib=(one + estimate) / 2**20)
    for ns in spaces * 2:
        hits = small.recall(ns, ["咖啡"])
        assert hits and {h.memory.namespace for h in hits} == {ns}
        assert small.cache.nbytes <= small.cache.max_bytes
    assert small.cache.evictions >= 3 and len(small.cache) == 1


def test_a_namespace_too_big_for_the_cache_goes_through_the_index(sqlite_core):
    """A namespace whose estimate exceeds half the bound is not cached: with the index
    emptied and exact search off, its recall finds nothing (the index path ran)."""
    ns = Namespace("default", "tg:72")
    _fill(sqlite_core, ns)
    tiny = _cached(sqlite_core, mib=0.001)
    sqlite_core.index.reset()
    assert tiny.recall(ns, ["咖啡"], params=RecallParams(exact_max=0)) == []
    assert len(tiny.cache) == 0
    assert "我喜欢喝美式咖啡，不加糖。" in {h.memory.text for h in tiny.recall(ns, ["咖啡"], params=RecallParams(exact_max=EXACT_MAX))}


def test_a_cold_load_reads_stored_vectors_and_embeds_none(sqlite_core, monkeypatch):
    """A cold namespace of more than 64 memories is loaded with its vectors from the
    index in one read: nothing but the query is embedded, and the hits equal exact search."""
    ns = Namespace("default", "tg:73")
    with sqlite_core.batch():
        for i in range(80):
            sqlite_core.add(ns, sqlite_core.new(ns, f"第{i}条记忆 memory number {i} 🧠"))
        sqlite_core.add(ns, sqlite_core.new(ns, "我喜欢喝美式咖啡"))
    from memory.index import SearchIndex

    fresh = MemoryCore(sqlite_core.store, SearchIndex(sqlite_core.index.path, sqlite_core.index.embedder), cache_mib=16)
    calls = []
    real = fresh.index.embedder.embed_documents
    monkeypatch.setattr(fresh.index.embedder, "embed_documents", lambda texts: calls.append(len(texts)) or real(texts))
    now = utcnow()
    hot = fresh.recall(ns, ["咖啡"], now=now)
    assert hot[0].memory.text == "我喜欢喝美式咖啡" and calls == [1]  # the query itself, nothing of the 81
    assert _shape(hot) == _shape(sqlite_core.recall(ns, ["咖啡"], now=now, params=RecallParams(exact_max=EXACT_MAX)))


def test_rejects_a_bound_that_is_not_positive():
    """A cache of 0 MiB is a configuration error (MemoryCore turns 0 into no cache)."""
    with pytest.raises(ValueError):
        NamespaceCache(0)


def test_a_reload_after_adds_extends_the_view_and_still_equals_exact_search(core):
    """Captures after a warm recall (private and group memories, zh / en / emoji /
    traditional) reload by appending the new rows to the cached view; every recall
    equals exact search in private, in the group and in another group; a forget
    after them reloads the whole namespace and the forgotten memory is gone."""
    ns = Namespace("default", "tg:7474")
    _fill(core, ns)
    cached = _cached(core)
    assert cached.recall(ns, ["咖啡"])
    added = ["我昨天买了一双新跑鞋 👟", "I adopted a second cat called Mochi", "我們家的貓叫煤球和年糕"]
    for t in added:
        core.add(ns, core.new(ns, t))
    core.add(ns, core.new(ns, "群里约了周六去爬山 ⛰️", origin=GROUP, visibility=Visibility.GROUP))
    chats = [None, GROUP, OTHER_GROUP]
    for q in ["猫", "Mochi cat", "跑鞋", "爬山", "咖啡", "煤球 年糕"]:
        for chat in chats:
            now = utcnow()
            exact = core.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=EXACT_MAX))
            assert _shape(cached.recall(ns, [q], chat=chat, now=now)) == _shape(exact), (q, chat)
    assert cached.cache is not None and cached.cache.loads == 2 and cached.cache.appends == 1
    assert "I adopted a second cat called Mochi" in {h.memory.text for h in cached.recall(ns, ["Mochi cat"])}

    mochi = next(h.memory.id for h in cached.recall(ns, ["Mochi cat"]) if "Mochi" in h.memory.text)
    coffee = next(h.memory.id for h in cached.recall(ns, ["咖啡"]) if "美式" in h.memory.text)
    core.forget(ns, mochi)
    core.update(ns, coffee, "我现在改喝乌龙茶了 🍵")
    for q in ["Mochi cat", "咖啡", "乌龙茶", "爬山"]:
        for chat in chats:
            now = utcnow()
            exact = core.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=EXACT_MAX))
            assert _shape(cached.recall(ns, [q], chat=chat, now=now)) == _shape(exact), (q, chat)
    assert all("Mochi" not in h.memory.text and "美式" not in h.memory.text
               for q in ["Mochi cat", "咖啡"] for h in cached.recall(ns, [q]))
    assert cached.cache.appends == 2  # the forgotten row and the old text masked out, the new text appended
    version, _ = core.store.namespace_state(ns)
    assert cached.cache.get(ns, version).dead == 2

    for m in core.store.list(ns, limit=8):  # a quarter of the rows go: a whole reload
        core.forget(ns, m.id)
    now = utcnow()
    assert _shape(cached.recall(ns, ["猫"], now=now)) == _shape(
        core.recall(ns, ["猫"], now=now, params=RecallParams(exact_max=EXACT_MAX)))
    version, _ = core.store.namespace_state(ns)
    assert cached.cache.appends == 2 and cached.cache.get(ns, version).dead == 0


def test_an_add_in_another_process_is_appended_to_the_warm_view(core, other_process):
    """A warm cache here, an add in another process: the next recall here appends it
    (one new row read, SQLite and PostgreSQL) and finds it."""
    ns = Namespace("default", "tg:6060")
    cached = _cached(core)
    cached.add(ns, cached.new(ns, "我喜欢喝美式咖啡"))
    assert cached.recall(ns, ["咖啡"])
    added = _in_another_process(other_process, core, "add", "My sister lives in Paris 🗼，她在那边读书")
    assert added in {h.memory.id for h in cached.recall(ns, ["sister Paris"])}
    assert cached.cache is not None and cached.cache.appends == 1


def test_an_appended_view_leaves_its_predecessor_as_it_was(sqlite_core):
    """Two views appended to one predecessor: the first writes into the shared rows,
    the second gets rows of its own; each holds exactly its rows and the
    predecessor's matrix and postings are unchanged."""
    ns = Namespace("default", "tg:7575")
    _fill(sqlite_core, ns)
    cache = NamespaceCache(16)
    version, _ = sqlite_core.store.namespace_state(ns)
    base = cache.view(sqlite_core.store, sqlite_core.index, ns, version)
    before_matrix, before_terms = base.matrix.copy(), {t: base.bm25.arrays(t)[0].copy() for t in base.bm25.postings}
    a = sqlite_core.add(ns, sqlite_core.new(ns, "我在学日语 にほんご")).memory
    b = sqlite_core.add(ns, sqlite_core.new(ns, "I run 5k every Sunday 🏃")).memory
    rows_a = sqlite_core.store.search_rows(ns, [a.id])[1]
    rows_b = sqlite_core.store.search_rows(ns, [b.id])[1]
    first = base.appended(rows_a, sqlite_core.index.vectors(rows_a), [("日语",)], version + 1)
    second = base.appended(rows_b, sqlite_core.index.vectors(rows_b), [("run", "5k")], version + 2)
    assert first.ids[-1] == a.id and second.ids[-1] == b.id and len(first) == len(second) == len(base) + 1
    assert (base.matrix == before_matrix).all() and len(base.matrix) == len(base)
    assert {t: base.bm25.arrays(t)[0].tolist() for t in base.bm25.postings} == {t: v.tolist() for t, v in before_terms.items()}
    assert (first.matrix[-1] == sqlite_core.index.vectors(rows_a)[0]).all()
    assert (second.matrix[-1] == sqlite_core.index.vectors(rows_b)[0]).all()
    assert first.bm25.df("日语") == 1 and second.bm25.df("日语") == 0 and second.bm25.df("5k") == 1


def test_the_change_log_names_what_each_write_changed(core):
    """``changes_since`` after an add, an edit and a forget names exactly those memories (zh, en, emoji,
    traditional); nothing since the current version is an empty set; a chat migration (rows it does not
    name), a version older than the log keeps, and a negative version give None — the cache then reads
    every stamp."""
    from memory.store.versions import CHANGES_CHARS

    ns = Namespace("default", "tg:8181")
    first = core.add(ns, core.new(ns, "我養了一隻貓🐈")).memory.id
    v0, _ = core.store.namespace_state(ns)
    assert core.store.changes_since(ns, v0) == (v0, set())
    second = core.add(ns, core.new(ns, "I love hiking in the Alps ⛰️")).memory.id
    core.update(ns, first, "我养了两只猫")
    assert core.store.changes_since(ns, v0) == (v0 + 2, {second, first})
    core.forget(ns, second)
    v1, _ = core.store.namespace_state(ns)
    assert core.store.changes_since(ns, v0)[1] == {first, second} and core.store.changes_since(ns, v1 - 1)[1] == {second}
    assert core.store.changes_since(ns, -1) is None
    other = Namespace("default", "tg:8282")
    core.add(other, core.new(other, "群里说周六去爬山", origin=GROUP, visibility=Visibility.GROUP))
    before, _ = core.store.namespace_state(other)
    core.store.migrate_chat("default", GROUP, ChatRef("qq", ChatKind.GROUP, "7003"), "admin")
    assert core.store.changes_since(other, before) is None
    with core.batch():  # one index write for the lot: the log is SQL's
        for i in range(CHANGES_CHARS // 10):  # each entry is longer than 10 characters
            core.add(ns, core.new(ns, f"第{i}条 note number {i}"))
    assert core.store.changes_since(ns, v1) is None  # the log no longer reaches back that far
    v2, _ = core.store.namespace_state(ns)
    assert core.store.changes_since(ns, v2 - 3) is not None


def test_a_chat_migration_is_seen_by_a_warm_cache(core):
    """A group migrated to a new id (rows the change log does not name): the warm cache reads every stamp and
    recalls in the new group exactly as exact search does; the old group sees nothing of it."""
    ns = Namespace("default", "tg:8383")
    _fill(core, ns)
    cached = _cached(core)
    assert cached.recall(ns, ["爬山"], chat=GROUP)
    moved = ChatRef("qq", ChatKind.GROUP, "7004")
    core.store.migrate_chat("default", GROUP, moved, "admin")
    for chat in (GROUP, moved):
        now = utcnow()
        exact = core.recall(ns, ["爬山 jazz 猫"], chat=chat, now=now, params=RecallParams(exact_max=EXACT_MAX))
        assert _shape(cached.recall(ns, ["爬山 jazz 猫"], chat=chat, now=now)) == _shape(exact), chat
    assert cached.recall(ns, ["爬山 jazz 猫"], chat=GROUP) == []
    assert cached.recall(ns, ["爬山 jazz 猫"], chat=moved)


def test_a_namespace_over_the_vector_budget_keeps_its_bm25_in_process(core):
    """A cache too small for the namespace's vectors but not for its postings holds it without vectors: BM25
    with the namespace's own statistics in process, the vector channel through the index — the same hits, ranks
    and (to float32 rounding) scores as exact search in every chat, zh / en / emoji / traditional; an add and a
    forget in between are appended to it and seen (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:8484")
    _fill(core, ns)
    _, live = core.store.namespace_state(ns)
    budget = _cached(core, mib=live * _FIT_BYTES_PER_MEMORY * 2 / 2**20)  # not even int8 codes beside the postings
    assert budget.cache is not None
    assert not budget.cache.fits(live, core.index.embedder.dim) and budget.cache.fits_postings(live)

    def same(q: str, chat: ChatRef | None) -> None:
        now = utcnow()
        exact = core.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=EXACT_MAX))
        got = budget.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=0))
        assert [(h.memory.id, h.ranks) for h in got] == [(h.memory.id, h.ranks) for h in exact], (q, chat)
        assert [h.score for h in got] == pytest.approx([h.score for h in exact], rel=1e-5)

    for q in QUERIES[:10]:
        for chat in (None, GROUP, OTHER_GROUP):
            same(q, chat)
    version, _ = core.store.namespace_state(ns)
    held = budget.cache.get(ns, version, VectorForm.NONE)
    assert held is not None and held.matrix is None and held.nbytes <= budget.cache.max_bytes // 2
    assert budget.cache.form(ns, live, core.index.embedder.dim) is VectorForm.NONE  # measured: no room for codes
    loads = budget.cache.loads
    same("咖啡", None)
    assert budget.cache.loads == loads  # kept: the next recall is served from memory, not reloaded
    added = core.add(ns, core.new(ns, "我們下個月去京都看紅葉 🍁")).memory.id
    gone = next(h.memory.id for h in core.recall(ns, ["猫"]) if "煤球" in h.memory.text)
    core.forget(ns, gone)
    for q in ["京都 紅葉", "猫", "咖啡"]:
        same(q, None)
    assert added in {h.memory.id for h in budget.recall(ns, ["京都 紅葉"], params=RecallParams(exact_max=0))}
    assert budget.cache.appends >= 1


def test_bm25_k1_and_b_reach_both_in_process_paths(sqlite_core):
    """``bm25_k1``/``bm25_b``/``bm25_min_length`` set the BM25 channel's saturation
    and length normalisation on the exact and the cached path alike (same scores):
    with full length normalisation the short memory that says 「猫」 once comes
    first, without it (b = 0, or the short one floored to the long one's length)
    the long one that says it three or four times (zh and en)."""
    ns = Namespace("default", "tg:k1b")
    short = {"猫": "我有猫", "hiking": "I go hiking"}
    long = {"猫": "我喜欢猫，猫也喜欢我，我每天都和猫一起玩，晚上猫在沙发上睡觉",
            "hiking": "hiking hiking hiking every weekend with my friends in the hills around the old mill town"}
    ids = {}
    for term in short:
        ids[term] = (sqlite_core.add(ns, sqlite_core.new(ns, short[term])).memory.id,
                     sqlite_core.add(ns, sqlite_core.new(ns, long[term])).memory.id)
    cached = _cached(sqlite_core)
    for term, (s_id, l_id) in ids.items():
        for b, floor, first in ((1.0, 0, s_id), (0.0, 0, l_id), (1.0, 64, l_id)):
            p = RecallParams(channels=("bm25",), bm25_k1=2.0, bm25_b=b, bm25_min_length=floor)
            exact, _ = channel_hits(sqlite_core.store, sqlite_core.index, ns, [term], params=p)
            hot, _ = channel_hits(sqlite_core.store, sqlite_core.index, ns, [term], params=p, cache=cached.cache)
            assert hot == exact and exact["bm25"][0][0] == first, (term, b, floor)
