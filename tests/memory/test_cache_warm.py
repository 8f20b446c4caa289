"""Cold loads off the turn (issue 29 item 4): with background loads, a recall of
a namespace recall's cache does not hold yet is answered by the exact path —
the same hits — while its view loads in the cache's loader thread, and the next
recall is served from the view; at start-up the namespaces recalled most
recently are loaded first, never past the cache's budget. Real SQLite and
PostgreSQL, LanceDB in tmp_path, the real offline embedder."""

from __future__ import annotations

from datetime import timedelta

from memory.core import MemoryCore
from memory.explain import record_recall
from memory.recall import RecallParams
from memory.store import utcnow
from memory.types import ChatKind, ChatRef, Namespace

FACTS = ["我养了一只叫煤球的黑猫", "我喜欢喝美式咖啡，不加糖。", "I love hiking in the Alps", "My sister lives in Paris 🗼",
         "我在上海做程序员", "我對花生過敏", "I work as a nurse in Leeds"]


def _fill(core: MemoryCore, ns: Namespace) -> None:
    with core.batch():
        for t in FACTS:
            core.add(ns, core.new(ns, t))


def _shape(hits) -> list[tuple[str, float, dict]]:
    return [(h.memory.id, h.score, h.ranks) for h in hits]


def test_a_cold_namespace_is_answered_exactly_while_its_view_loads_in_the_background(core, monkeypatch):
    """The first recall of a namespace not cached returns the exact path's hits (zh and en) without
    loading the view in the recall's own thread; the loader thread loads it, and the second recall is a
    cache hit with the same hits."""
    ns = Namespace("default", "tg:5001")
    _fill(core, ns)
    hot = MemoryCore(core.store, core.index, cache_mib=64, cache_background=True)
    cache = hot.cache
    import threading

    loaded_in: list[str] = []
    real_view = cache.view

    def view(*args, **kwargs):
        loaded_in.append(threading.current_thread().name)
        return real_view(*args, **kwargs)

    monkeypatch.setattr(cache, "view", view)
    now = utcnow()
    try:
        for q, want in [("你还记得我的猫吗？", "我养了一只叫煤球的黑猫"), ("Where does my sister live?", "My sister lives in Paris 🗼")]:
            exact = core.recall(ns, [q], now=now, params=RecallParams(k=5))
            first = hot.recall(ns, [q], now=now, params=RecallParams(k=5))
            assert first[0].memory.text == want and _shape(first) == _shape(exact), q
            assert cache.idle(60) and cache.held(ns)
            second = hot.recall(ns, [q], now=now, params=RecallParams(k=5))
            assert _shape(second) == _shape(exact), q
        assert loaded_in[0].startswith("huiyi-cache-load")  # the cold load ran off the recall's thread
        assert cache.loads == 1 and cache.hits >= 2
    finally:
        hot.cache.close()


def test_without_background_loads_the_first_recall_loads_the_view_itself(sqlite_core):
    """The default (the CLI, the benchmarks): the first recall loads the view and is served from it."""
    ns = Namespace("default", "tg:5001")
    _fill(sqlite_core, ns)
    hot = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=64)
    hot.recall(ns, ["煤球"])
    assert hot.cache.held(ns) and hot.cache.loads == 1


def test_start_up_warms_the_most_recently_recalled_namespaces_within_the_budget(core):
    """warm_cache loads the namespaces recalled most recently first (zh and en memories), skips one never
    recalled, and stops before a load would evict a view: with room for two namespaces, the two newest."""
    chat = ChatRef("tg", ChatKind.PRIVATE, "1")
    people = [Namespace("default", f"tg:60{i}1") for i in range(4)]
    for ns in people:
        _fill(core, ns)
    never = Namespace("default", "tg:6991")
    _fill(core, never)
    t0 = utcnow()
    for age, ns in zip((30, 20, 10, 40), people):  # recalled 30, 20, 10 and 40 minutes ago
        hits = core.recall(ns, ["咖啡 hiking"])
        record_recall(core.store, ns, chat, hits, 5, None, t0 - timedelta(minutes=age))
    assert core.store.recently_recalled("default", 10) == [people[2], people[1], people[0], people[3]]
    assert core.store.recently_recalled("other", 10) == []
    dim = core.index.embedder.dim
    probe = MemoryCore(core.store, core.index, cache_mib=64)
    probe.warm_cache(["default"], limit=1)
    one = probe.cache.nbytes
    from memory import cache as cache_module

    estimate = len(FACTS) * (dim * 4 + cache_module._FIT_BYTES_PER_MEMORY) + cache_module._VIEW_OVERHEAD
    mib = (one + max(one, estimate) + estimate - 1) / 2**20  # room for two views, not three
    warm = MemoryCore(core.store, core.index, cache_mib=mib)
    assert warm.cache.fits(len(FACTS), dim)
    assert warm.warm_cache(["default"], limit=10) == 2
    assert [warm.cache.held(ns) for ns in people] == [False, True, True, False]
    assert not warm.cache.held(never) and warm.cache.evictions == 0
    hits = warm.recall(people[2], ["煤球"])
    assert hits and "煤球" in hits[0].memory.text and warm.cache.hits == 1
