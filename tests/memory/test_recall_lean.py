"""Recall's lean candidate read (issue 29.3): every candidate's row is read as plain
values (``Store.candidates``) and scored without building a Memory; only the hits
returned are built whole. The hits are those of scoring every candidate's whole
memory — same ids, order, scores, ranks and parts — on the exact, cached and index
paths, SQLite and PostgreSQL, Chinese and English."""

from __future__ import annotations

from datetime import timedelta

import pytest

import memory.store.memories as memories_module
from memory.cache import NamespaceCache
from memory.recall import RecallParams
from memory.scoring import DEFAULT_PARAMS, ScoringParams, final, final_of, score, score_seconds
from memory.store import Candidate, utcnow
from memory.types import Category, ChatKind, ChatRef, Namespace, ScoreParts, Visibility

GROUP = ChatRef("tg", ChatKind.GROUP, "-100777")
PRIVATE = ChatRef("tg", ChatKind.PRIVATE, "29")
# (text, category, importance, valence, arousal, days ago, said in the group)
FACTS = [
    ("我养了一只叫煤球的黑猫", Category.PROFILE, 0.9, 0.6, 0.4, 400, False),
    ("煤球上周去看了兽医，花了八百块", Category.EVENT, 0.5, -0.5, 0.7, 9, True),
    ("我的猫煤球最喜欢吃三文鱼", Category.PREFERENCE, 0.6, 0.7, 0.3, 60, False),
    ("猫砂又用完了，明天要去买", Category.ROUTINE, 0.2, -0.2, 0.1, 2, True),
    ("邻居家的猫总是来我家阳台", Category.OTHER, 0.4, 0.0, 0.0, 30, False),
    ("我小时候被猫抓过，有点怕猫", Category.EVENT, 0.7, -0.8, 0.9, 3000, False),
    ("今天心情不好，猫也不理我", Category.MOOD, 0.3, -0.9, 0.6, 1, True),
    ("I adopted a black cat called Coal last spring", Category.EVENT, 0.8, 0.8, 0.5, 300, False),
    ("My cat Coal hates the vet", Category.PREFERENCE, 0.5, -0.4, 0.5, 20, True),
    ("I buy cat food at the market on Sundays", Category.ROUTINE, 0.3, 0.1, 0.1, 14, False),
    ("My sister Lena has two cats in Berlin", Category.RELATIONSHIP, 0.6, 0.3, 0.2, 120, False),
    ("The cat knocked my coffee over this morning", Category.EVENT, 0.2, -0.3, 0.6, 0, True),
    ("I work as a nurse in Leeds", Category.PROFILE, 0.9, 0.2, 0.1, 700, False),
    ("我在上海做程序员", Category.PROFILE, 0.9, 0.1, 0.1, 500, True),
]
TAILS = [["我的猫叫什么名字？"], ["煤球喜欢吃什么"], ["猫"], ["What is my cat called?"], ["cat"],
         ["Does Coal like the vet?"], ["我上个月说过猫的什么事？"], ["What did I say about the cat last week?"],
         ["我第一次跟你聊的时候说了什么？"], ["你好呀"], ["我最近心情很差，猫也不理我"]]
_DOING = ["睡在键盘上", "追着激光笔跑", "把花盆打翻了", "半夜在走廊里跑酷", "盯着窗外的鸟", "钻进纸箱里",
          "咬坏了耳机线", "在沙发上磨爪子", "打翻了水杯", "躲在床底下", "喜欢晒太阳", "偷吃了我的鱼"]
_DOING_EN = ["slept on my keyboard", "chased the laser pointer", "knocked a plant over", "ran around at midnight",
             "stared at the birds", "hid in a cardboard box", "chewed my headphones", "scratched the sofa",
             "spilled my water", "hid under the bed", "loves the sun", "stole my fish"]
MORE = [(f"{day}号那天，煤球{doing}", f"On day {day}, Coal {doing_en}") for day, (doing, doing_en)
        in enumerate(zip(_DOING, _DOING_EN), start=1)]
"""Two dozen more memories about the cat, so that a query has many more candidates than hits."""
PATHS = {"exact": RecallParams(k=20), "index": RecallParams(k=20, exact_max=0), "cached": RecallParams(k=20)}


def _person(core, subject: str) -> tuple[Namespace, list[str]]:
    """FACTS and MORE in one namespace, each with its own times, emotion and importance, some
    said in GROUP; some recalled many times (up to the kept 20 access times), one
    association link, one conflict link and one dormant consolidated memory."""
    ns = Namespace("default", subject)
    now = utcnow()
    with core.batch():
        ids = [core.add(ns, core.new(ns, text, category=cat, importance=imp, valence=val, arousal=aro,
                                     created_at=now - timedelta(days=days, hours=i),
                                     origin=GROUP if group else PRIVATE,
                                     visibility=Visibility.GROUP if group else Visibility.PRIVATE)).memory.id
               for i, (text, cat, imp, val, aro, days, group) in enumerate(FACTS)]
    with core.batch():
        for i, pair in enumerate(MORE):
            for j, text in enumerate(pair):
                n = 2 * i + j
                ids.append(core.add(ns, core.new(
                    ns, text, category=list(Category)[n % len(Category)], importance=(n * 37 % 100) / 100,
                    valence=((n * 53 % 200) - 100) / 100, arousal=(n * 29 % 100) / 100,
                    created_at=now - timedelta(days=n * 11 % 400, minutes=n), origin=PRIVATE,
                    visibility=Visibility.PRIVATE)).memory.id)
    for n, mid in enumerate(ids[::2]):  # a different history of use for each
        for j in range(3 * n % 25):
            core.store.touch(ns, [mid], at=now - timedelta(hours=5 * j + n))
    core.store.strengthen_links(ns, ids[:3], reason="recalled", at=now)
    core.store.add_conflict(ns, ids[7], ids[8])
    core.store.put_consolidated(ns, ids[4], "fact", 0.1, [ids[0]], at=now - timedelta(days=90))
    core.store.sweep_dormant(ns, unused_since=now - timedelta(days=30), below=0.5)
    return ns, ids


def _whole(rrf, mem, at, valence):
    """The default rescoring through a scorer of the caller's own: recall then builds
    and scores every candidate's whole Memory (the reference)."""
    return score(rrf, mem, at, valence)


def _key(hits):
    return [(h.memory, h.score, h.ranks, h.parts, h.conflict) for h in hits]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_lean_read_gives_the_hits_of_scoring_every_whole_memory(core, path):
    """zh and en, private and group, with and without a named period: the same hits,
    order, scores, ranks, parts and conflict partners as the whole-memory scoring, and
    each hit's memory equals the stored one."""
    ns, _ = _person(core, f"tg:lean-{path}")
    if path == "cached":
        core.cache = NamespaceCache(16)
    now = utcnow()
    for tail in TAILS:
        for chat, k in ((PRIVATE, 20), (GROUP, 20), (PRIVATE, 3)):
            params = RecallParams(k=k, exact_max=PATHS[path].exact_max)
            lean = core.recall(ns, tail, chat=chat, params=params, now=now)
            whole = core.recall(ns, tail, chat=chat, params=params, now=now, scorer=_whole)
            assert _key(lean) == _key(whole), (path, tail, chat, k)
            for h in lean:
                assert h.memory == core.get(ns, h.memory.id)
    assert core.recall(ns, ["猫"], params=PATHS[path], now=now)  # the comparison was not between empty lists


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_shorter_recall_is_the_head_of_a_longer_one(core, path, monkeypatch):
    """Candidates that cannot reach the first k are not scored (k = 1 scores fewer than
    all, counted over the four questions: memory ids are random, so RRF's ties break
    differently run to run and whether one question's last candidates fall out of reach
    varies — ~1 run in 20 for "Coal" alone), and for each k the hits are the first k of a
    recall that returns them all."""
    ns, _ = _person(core, f"tg:head-{path}")
    if path == "cached":
        core.cache = NamespaceCache(16)
    now = utcnow()
    scored: list[str] = []
    times = Candidate.times

    def counting(row):
        scored.append(row.id)
        return times(row)

    monkeypatch.setattr(Candidate, "times", counting)
    at_one, candidates = {}, 0
    for tail in (["煤球"], ["煤球最近怎么样？"], ["Coal"], ["What did Coal do?"]):
        every = _key(core.recall(ns, tail, params=RecallParams(k=100, exact_max=PATHS[path].exact_max), now=now))
        assert len(every) > 12, (tail, len(every))
        candidates += len(every)
        for k in sorted({1, 2, 3, 5, 8, len(every) - 1}):  # where the pruning starts to bite, and nearly all
            scored.clear()
            params = RecallParams(k=k, exact_max=PATHS[path].exact_max)
            assert _key(core.recall(ns, tail, params=params, now=now)) == every[:k], (tail, k)
            if k == 1:
                at_one[tail[0]] = len(scored)
    assert sum(at_one.values()) < candidates, at_one  # the candidates out of reach were not scored


@pytest.mark.parametrize("path", sorted(PATHS))
def test_no_memory_is_built_for_a_candidate_that_is_not_returned(core, path, monkeypatch):
    """Many candidates, k = 2: the row builder runs for the two hits (and a conflict
    partner the recall brings along) only, once each."""
    ns, _ = _person(core, f"tg:built-{path}")
    if path == "cached":
        core.cache = NamespaceCache(16)
        core.recall(ns, ["猫"])  # loads the view
    built: list[str] = []
    real = memories_module._tuple_memory

    def counting(row, namespace):
        built.append(row[0])
        return real(row, namespace)

    monkeypatch.setattr(memories_module, "_tuple_memory", counting)
    seen: list[int] = []
    real_candidates = type(core.store).candidates

    def candidates(store, namespace, ids, *rest, **kwargs):
        seen.append(len(ids))
        return real_candidates(store, namespace, ids, *rest, **kwargs)

    monkeypatch.setattr(type(core.store), "candidates", candidates)
    for tail in (["猫"], ["cat"]):
        built.clear()
        hits = core.recall(ns, tail, params=RecallParams(k=2, exact_max=PATHS[path].exact_max))
        assert len(hits) == 2
        returned = {h.memory.id for h in hits} | {h.conflict.id for h in hits if h.conflict is not None}
        assert {h.memory.id for h in hits} <= set(built) <= returned, tail  # a conflict partner is returned too
        assert len(built) == len(set(built)), tail
    if path != "exact":  # the exact path has its rows already
        assert max(seen) > 2


def test_candidates_read_what_the_whole_memory_holds(core):
    """``Store.candidates`` against ``Store.get_many``: the same texts, times, emotion,
    disclosure, scoring seconds and whole memory; ids of another namespace are absent."""
    ns, ids = _person(core, "tg:cand")
    other, other_ids = _person(core, "tg:cand-other")
    rows = core.store.candidates(ns, [*ids, *other_ids])
    whole = core.store.get_many(ns, ids)
    assert set(rows) == set(ids) == set(whole)
    now = utcnow()
    for mid, c in rows.items():
        m = whole[mid]
        assert (c.id, c.text, c.context, c.searched, c.visibility, c.created_at, c.event_time) == \
            (m.id, m.text, m.context, m.searched, m.visibility, m.created_at, m.event_time)
        assert c.origin == (m.origin.key if m.origin else "")
        assert c.memory(ns) == m
        assert (Category(c.category), c.importance, c.valence, c.arousal) == \
            (m.category, m.importance, m.valence, m.arousal)
        written, times = c.times()
        parts = score_seconds(0.2, c.category, c.importance, c.valence, c.arousal, written, times,
                              now.timestamp(), -0.6)
        assert ScoreParts(*parts) == score(0.2, m, now, -0.6)
        assert final_of(parts) == final(score(0.2, m, now, -0.6))
    assert core.store.candidates(other, ids) == {}


def test_a_failed_hot_read_is_a_store_error_and_a_failed_conflict_read_keeps_the_hits(core):
    """The reads through the DBAPI cursor map the driver's errors to StoreError: the
    conflict marks are then skipped (the hits stay), and a failed candidate read or
    exact-path read raises StoreError (the pipeline answers without a recollection)."""
    from sqlalchemy import text

    from memory.errors import StoreError

    ns, ids = _person(core, "tg:broken")
    now = utcnow()
    before = core.recall(ns, ["What is my cat called?"], now=now)
    assert any(h.conflict is not None for h in before)
    with core.store.engine.begin() as conn:
        conn.execute(text("DROP TABLE memory_conflicts"))
    with pytest.raises(StoreError):
        core.store.conflicts(ns, ids)
    after = core.recall(ns, ["What is my cat called?"], now=now)
    assert [(h.memory, h.score) for h in after] == [(h.memory, h.score) for h in before]
    assert all(h.conflict is None for h in after)
    with core.store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE memories RENAME TO memories_gone"))
    with pytest.raises(StoreError):
        core.store.candidates(ns, ids)
    with pytest.raises(StoreError):
        core.recall(ns, ["What is my cat called?"], now=now)


@pytest.mark.parametrize("sp, dormant", [(DEFAULT_PARAMS, 0.5), (ScoringParams(rescore_strength=1.0), 1.0),
                                         (ScoringParams(activation_weight_range=(0.5, 2.0), congruence_max_boost=0.4,
                                                        importance_weight_range=(0.9, 1.6), rescore_strength=0.6),
                                          1.5)])
def test_the_pruning_bound_holds_and_is_reached(sp, dormant):
    """``final ≤ rrf × _score_bound`` for memories of every category, emotion,
    importance, age and use (random and extreme), and a memory at the top of every
    range comes within 0.2 % of it: the bound prunes nothing a hit could need, and
    not much less than it could."""
    import random

    from memory.recall import _score_bound

    bound = _score_bound(sp, dormant)
    rnd = random.Random(29)
    now = 2_000_000_000.0
    for _ in range(3000):
        rrf = rnd.choice([0.0, 1e-6, rnd.random(), 2 / 6, 3.5])
        times = [now - rnd.choice([0.0, 1.0, rnd.uniform(0, 1e8)]) for _ in range(rnd.randint(0, 22))]
        parts = score_seconds(rrf, rnd.choice(list(Category)), rnd.choice([0.0, 1.0, rnd.random()]),
                              rnd.uniform(-1, 1), rnd.random(), rnd.choice([None, now, now - 1e7]), times, now,
                              rnd.uniform(-1, 1), sp)
        assert final_of(parts, sp) * max(1.0, dormant) <= rrf * bound
    # retention 1 (written now), 20 accesses within the last second, both moods at +1, importance 1
    best = score_seconds(1.0, Category.PROFILE, 1.0, 1.0, 1.0, now, [now - i / 100 for i in range(22)], now, 1.0, sp)
    assert final_of(best, sp) * max(1.0, dormant) >= bound * 0.998
