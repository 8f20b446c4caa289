"""Recall's cache holding a namespace's vectors as int8 codes (``VectorForm.INT8``):
the same channel as exact search, the memory bound kept, each namespace's rows its own."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memory.cache import _FIT_BYTES_PER_MEMORY, RESCORE, NamespaceCache, NamespaceView, VectorForm, _Int8Rows, _room
from memory.core import MemoryCore
from memory.recall import EXACT_MAX, RecallParams
from memory.store import MemoryText, utcnow
from memory.types import ChatKind, ChatRef, Namespace, Visibility

GROUP = ChatRef("tg", ChatKind.GROUP, "-100777")
OTHER_GROUP = ChatRef("tg", ChatKind.GROUP, "-100778")

FACTS = [
    "我养了一只猫，叫煤球", "I love hiking in the mountains on weekends", "周末常去西湖边跑步",
    "My sister lives in Berlin and works as a nurse", "我对花生过敏", "I play the cello in a small orchestra",
    "最近在学做川菜，麻婆豆腐最拿手", "We adopted a rescue dog named Biscuit 🐶", "我在杭州一家游戏公司上班",
    "I'm training for a half marathon in October", "小時候住在台北的外婆家", "Coffee keeps me up, so I drink tea",
    "我女朋友下个月生日，想送她一条围巾", "I'm reading The Three-Body Problem again", "周三晚上有篮球局",
    "My favourite band is Radiohead", "去年冬天去了哈尔滨看冰雕 ❄️", "I get nervous before presentations",
]
GROUP_FACTS = ["群里约好周六一起爬山", "I'm bringing the board games to the meetup", "我们小组的项目快上线了"]
QUERIES = ["猫", "hiking", "跑步 西湖", "my sister", "过敏", "music orchestra", "做饭 川菜", "dog", "工作 公司",
           "marathon", "台北", "tea or coffee", "生日礼物", "books", "篮球", "band", "旅行 冬天", "nervous",
           "爬山", "board games", "项目", "🐶", "天氣 台北"]


def _rows(n: int, ns: Namespace = Namespace("default", "tg:1")) -> list[MemoryText]:
    return [MemoryText(f"{i:012x}", ns, f"m{i}", Visibility.PRIVATE, "") for i in range(n)]


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around a few shared directions: cosines packed close together,
    as a sentence embedder's are, so the error bounds overlap many rows."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, dim))
    x = centres[rng.integers(0, 8, n)] * 3 + rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _int8_view(rows: list[MemoryText], x: np.ndarray) -> NamespaceView:
    room = _Int8Rows.allocate(len(rows) + 64, x.shape[1])
    room.staging(len(rows))[:] = x
    room.seal(len(rows))
    return NamespaceView(rows, None, 0, [("t",)] * len(rows), sig=[(m.id, 0, "private", "") for m in rows],
                         room=room)


def test_int8_nearest_equals_the_float32_top_and_prunes():
    """On 3,000 clustered 96-d vectors, ``nearest`` of the int8 view gives the float32 view's ids, order and
    cosines for every depth and mask, and re-scores a small share of the rows; its codes are a quarter of the
    float32 bytes, and each row's bound holds."""
    rows = _rows(3000)
    x = _clustered(3000, 96, seed=1)
    exact = NamespaceView(rows, x)
    small = _int8_view(rows, x)
    assert small.form is VectorForm.INT8 and exact.form is VectorForm.FLOAT32
    assert small.vector_nbytes < x.nbytes / 3 and small.spilled >= x.nbytes
    rng = np.random.default_rng(2)
    mask = rng.random(3000) < 0.3
    for i in range(40):
        q = x[i * 7] + 0.6 * rng.standard_normal(96).astype(np.float32)
        q /= np.linalg.norm(q)
        for n, m in ((40, None), (10, None), (40, mask), (1, mask)):
            want = exact.top(exact.cosine(q), m, n, positive=False)
            got = small.nearest(q, m, n)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    room = small._rows
    approx = room.approx(q, 3000)
    assert (np.abs(x @ q - approx) <= room.slack[:3000] + 1e-4).all()


def test_int8_nearest_re_scores_only_what_the_bounds_leave(monkeypatch):
    """The pruning is real: on well-spread vectors a search re-scores far fewer rows than the view holds, and
    a namespace smaller than ``RESCORE`` × depth is re-scored whole."""
    rows = _rows(4000)
    x = _clustered(4000, 64, seed=3)
    view = _int8_view(rows, x)
    seen: list[int] = []
    real = NamespaceView._exact

    def counting(r, which, q):
        seen.append(len(which))
        return real(r, which, q)

    monkeypatch.setattr(NamespaceView, "_exact", staticmethod(counting))
    q = x[5]
    view.nearest(q, None, 10)
    assert seen[0] == RESCORE * 10 and seen[1] < 1000
    seen.clear()
    _int8_view(rows[:30], x[:30]).nearest(q, None, 10)
    assert seen == [30]


def test_int8_view_appends_in_place_and_keeps_older_views_as_they_were():
    """Appending to an int8 view writes the new rows' codes and float32 rows past the old view's, which still
    searches its own rows only; a view that runs out of room grows into new rows (and a new spill file)."""
    rows = _rows(100)
    x = _clustered(170, 32, seed=4)
    base = _int8_view(rows, x[:100])
    more = [MemoryText(f"{i:012x}", rows[0].namespace, f"m{i}", Visibility.PRIVATE, "") for i in range(100, 150)]
    grown = base.appended(more, x[100:150], [("t",)] * 50, 1)
    assert grown._rows is base._rows and len(base) == 100 and len(grown) == 150
    last = [MemoryText(f"{i:012x}", rows[0].namespace, f"m{i}", Visibility.PRIVATE, "") for i in range(150, 170)]
    moved = grown.appended(last, x[150:170], [("t",)] * 20, 2, gone=[3])
    assert moved._rows is not grown._rows and moved._rows.capacity > 170
    q = x[160]
    want = NamespaceView(rows + more + last, x).top(x @ q, moved.disclosed(None), 40, positive=False)
    got = moved.nearest(q, moved.disclosed(None), 40)
    assert [i for i, _ in got] == [i for i, _ in want] and rows[3].id not in {i for i, _ in got}
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    assert all(i in {m.id for m in rows} for i, _ in base.nearest(q, None, 40))
    assert (moved.floats([0, 120, 165]) == x[[0, 120, 165]]).all()


def _fill(core: MemoryCore, ns: Namespace) -> None:
    with core.batch():
        for t in FACTS:
            core.add(ns, core.new(ns, t))
        for t in GROUP_FACTS:
            core.add(ns, core.new(ns, t, origin=GROUP, visibility=Visibility.GROUP))
        core.add(ns, core.new(ns, "群二的秘密 secret of group two", origin=OTHER_GROUP, visibility=Visibility.GROUP))


def _routine(core: MemoryCore, ns: Namespace) -> None:
    """240 memories that share their words (who likes what, which day): a namespace that measures well under
    the cache's per-memory estimate."""
    people, things = ["我妹妹", "我同事", "my neighbour", "my cousin", "老王"], ["猫", "咖啡", "hiking", "jazz",
                                                                          "篮球", "tea", "火锅", "chess"]
    with core.batch():
        for day in range(1, 7):
            for p in people:
                for t in things:
                    core.add(ns, core.new(ns, f"{p} likes {t} 周{day}"))


def _measured(core: MemoryCore, ns: Namespace) -> tuple[int, int]:
    """``(live, bytes per memory beyond its vector)`` of ``ns`` as ``NamespaceCache.form`` measures them."""
    version, live = core.store.namespace_state(ns)
    view = NamespaceCache(64).view(core.store, core.index, ns, version, VectorForm.NONE)
    return live, math.ceil((view.nbytes - view.vector_nbytes) / len(view))


def _same_as_exact(core: MemoryCore, cached: MemoryCore, ns: Namespace, q: str, chat: ChatRef | None) -> None:
    now = utcnow()
    exact = core.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=EXACT_MAX))
    got = cached.recall(ns, [q], chat=chat, now=now, params=RecallParams(exact_max=0))
    assert [(h.memory.id, h.ranks) for h in got] == [(h.memory.id, h.ranks) for h in exact], (q, chat)
    assert [h.score for h in got] == pytest.approx([h.score for h in exact], rel=1e-5)


def test_a_namespace_too_big_for_float32_is_held_as_int8_and_recalls_as_exact_search(core, tmp_path):
    """A budget whose half holds the namespace's postings and int8 codes but not its float32 matrix (the
    threshold lowered through ``max_mib``): after its first recall measures it (a view without vectors, which
    serves that recall), the namespace is held
    ``INT8`` within the bound, its float32 rows in a spill file under ``spill_dir``, and every recall —
    zh / en / emoji / traditional, private and in both groups, after an add and a forget — has exact
    search's hits, ranks and scores (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:9191")
    _fill(core, ns)
    _routine(core, ns)
    live, per = _measured(core, ns)
    dim = core.index.embedder.dim
    # int8 codes (dim + 8 bytes a row of room) fit beside the postings, float32 rows (4 dim) do not
    half = (live + 2) * per + _room(live + 2) * (dim + 8) + live * dim // 2
    assert half < live * per + _room(live) * dim * 4
    cached = MemoryCore(core.store, core.index, cache_mib=half * 2 / 2**20, cache_spill_dir=tmp_path / "cache")
    assert cached.cache is not None and not cached.cache.fits(live, dim)
    for q in QUERIES[:3]:
        _same_as_exact(core, cached, ns, q, None)
    version, _ = core.store.namespace_state(ns)
    held = cached.cache.get(ns, version, VectorForm.INT8)
    assert held is not None and held.matrix is None and cached.cache.nbytes <= cached.cache.max_bytes
    assert held.spilled > 0 and (tmp_path / "cache").is_dir()
    assert not list((tmp_path / "cache").iterdir())  # unlinked: nothing left on disk by a crash
    loads = cached.cache.loads
    for q in QUERIES:
        for chat in (None, GROUP, OTHER_GROUP):
            _same_as_exact(core, cached, ns, q, chat)
    assert cached.cache.loads == loads
    added = core.add(ns, core.new(ns, "我們下個月去京都看紅葉 🍁")).memory.id
    gone = next(h.memory.id for h in core.recall(ns, ["煤球"]) if "煤球" in h.memory.text)
    core.forget(ns, gone)
    for q in ["京都 紅葉", "煤球", "猫", "hiking", "🍁"]:
        for chat in (None, GROUP):
            _same_as_exact(core, cached, ns, q, chat)
    hits = {h.memory.id for h in cached.recall(ns, ["京都 紅葉"], params=RecallParams(exact_max=0))}
    assert added in hits and gone not in {h.memory.id for h in cached.recall(ns, ["煤球"], params=RecallParams(exact_max=0))}
    assert cached.cache.appends >= 1
    version, _ = core.store.namespace_state(ns)
    assert cached.cache.get(ns, version, VectorForm.INT8) is not None


def test_int8_from_holds_every_cached_namespace_as_int8_with_exact_results(sqlite_core):
    """``int8_from=0``: a namespace whose float32 matrix would fit is held ``INT8`` too, with the same
    recalls as exact search in every chat."""
    ns = Namespace("default", "tg:9292")
    _fill(sqlite_core, ns)
    cached = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=64)
    cached.cache = NamespaceCache(64, int8_from=0)
    for q in QUERIES:
        for chat in (None, GROUP, OTHER_GROUP):
            _same_as_exact(sqlite_core, cached, ns, q, chat)
    version, live = sqlite_core.store.namespace_state(ns)
    assert cached.cache.form(ns, live, sqlite_core.index.embedder.dim) is VectorForm.INT8
    assert cached.cache.get(ns, version, VectorForm.INT8) is not None


def test_each_int8_view_holds_its_own_namespace_rows_only(sqlite_core):
    """Two namespaces held ``INT8`` side by side: each view's ids are its own namespace's live memories, each
    float32 row is the index's vector of that memory, a write in one leaves the other's view as it was, and
    neither recall returns a memory of the other — even for the other's exact words."""
    a, b = Namespace("default", "tg:9301"), Namespace("default", "tg:9302")
    _fill(sqlite_core, a)
    with sqlite_core.batch():
        for t in ["I keep bees on the roof 🐝", "我在学日语，准备去大阪", "Her cat is called Mochi"]:
            sqlite_core.add(b, sqlite_core.new(b, t))
    cached = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=64)
    cached.cache = NamespaceCache(64, int8_from=0)
    cached.recall(a, ["猫"])
    cached.recall(b, ["bees"])
    views = {}
    for ns in (a, b):
        version, _ = sqlite_core.store.namespace_state(ns)
        view = cached.cache.get(ns, version, VectorForm.INT8)
        assert view is not None
        mine = {m.id: m for m in sqlite_core.store.search_rows(ns)[1]}
        assert set(view.ids) == set(mine)
        assert (view.floats(list(range(len(view)))) == sqlite_core.index.vectors([mine[i] for i in view.ids])).all()
        views[ns] = view
    assert views[a]._rows is not views[b]._rows
    before = views[a].floats(list(range(len(views[a])))).copy()
    sqlite_core.add(b, sqlite_core.new(b, "我养了一只猫，叫煤球"))  # a's words, in b
    assert {h.memory.namespace for h in cached.recall(b, ["猫 煤球"])} == {b}
    assert {h.memory.namespace for h in cached.recall(a, ["bees 大阪 Mochi"])} <= {a}
    assert (views[a].floats(list(range(len(views[a])))) == before).all()


def test_a_measured_namespace_moves_up_from_postings_to_vectors(sqlite_core):
    """A namespace the estimate holds without vectors, whose memories share their words and so measure well
    under it, is held ``INT8`` from its second recall on, with exact search's results; the estimate alone
    never admits it."""
    ns = Namespace("default", "tg:9393")
    _routine(sqlite_core, ns)
    live, per = _measured(sqlite_core, ns)
    dim = sqlite_core.index.embedder.dim
    assert per + dim + 8 < _FIT_BYTES_PER_MEMORY  # shared words: their codes and postings measure under the estimate
    half = live * per + _room(live) * (dim + 8) + live * dim // 2  # its codes fit, its float32 rows do not
    assert not live * (4 * dim + _FIT_BYTES_PER_MEMORY) <= half  # nor does the estimate's float32 view
    cached = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=half * 2 / 2**20)
    assert cached.cache is not None
    assert cached.cache.form(ns, live, dim) is VectorForm.NONE
    cached.recall(ns, ["猫"], params=RecallParams(exact_max=0))
    assert cached.cache.form(ns, live, dim) is VectorForm.INT8
    for q in ["猫", "my cousin likes jazz", "老王 火锅 周3", "chess"]:
        _same_as_exact(sqlite_core, cached, ns, q, None)
    version, _ = sqlite_core.store.namespace_state(ns)
    assert cached.cache.get(ns, version, VectorForm.INT8) is not None


def test_in_the_background_a_namespace_is_measured_then_held_int8_while_its_postings_serve(sqlite_core):
    """The gateway's cache (loads in the background): the first recall of a namespace beyond the estimate
    queues its measuring load and goes through the index; the next queues its int8 load and is served by the
    view without vectors meanwhile (same results as exact search); once loaded, recalls use the int8 view."""
    ns = Namespace("default", "tg:9494")
    _routine(sqlite_core, ns)
    live, per = _measured(sqlite_core, ns)
    dim = sqlite_core.index.embedder.dim
    half = live * per + _room(live) * (dim + 8) + live * dim // 2
    cached = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=half * 2 / 2**20, cache_background=True)
    cache = cached.cache
    assert cache is not None and not cache.fits(live, dim)
    params = RecallParams(exact_max=0)
    try:
        assert cached.recall(ns, ["老王 火锅"], params=params)  # through the index while the view loads
        assert cache.idle(60)
        version, _ = sqlite_core.store.namespace_state(ns)
        assert cache.get(ns, version, VectorForm.NONE) is not None
        hits = cache.hits
        _same_as_exact(sqlite_core, cached, ns, "my cousin likes jazz", None)  # the view without vectors
        assert cache.hits > hits and cache.form(ns, live, dim) is VectorForm.INT8
        assert cache.idle(60)
        assert cache.get(ns, version, VectorForm.INT8) is not None
        _same_as_exact(sqlite_core, cached, ns, "chess 周3", None)
    finally:
        cache.close()


def test_a_spill_directory_that_cannot_be_written_leaves_the_namespace_without_vectors(sqlite_core, tmp_path):
    """No spill file (its directory is a file): the int8 load falls back to a view without vectors, the cache
    holds no int8 view from then on, and recall still gives exact search's results."""
    ns = Namespace("default", "tg:9595")
    _fill(sqlite_core, ns)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("x")
    cached = MemoryCore(sqlite_core.store, sqlite_core.index, cache_mib=64, cache_spill_dir=blocked)
    cached.cache.int8_from = 0  # type: ignore[union-attr]
    _same_as_exact(sqlite_core, cached, ns, "猫", None)
    assert cached.cache.spill_failed  # type: ignore[union-attr]
    version, live = sqlite_core.store.namespace_state(ns)
    assert cached.cache.form(ns, live, sqlite_core.index.embedder.dim) is VectorForm.FLOAT32  # type: ignore[union-attr]
    for q in QUERIES[:5]:
        _same_as_exact(sqlite_core, cached, ns, q, GROUP)
