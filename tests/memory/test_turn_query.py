"""The turn's query keeps the question in front (issue 25.3): the latest line is the query; earlier lines join only
when it leans on them (no content word of its own, or pointing back), as queries of their own fused at a lower
weight — never averaged into the question — in zh and en; and through the real core, a question asked right after
other lines recalls what it asks about, not what was just said."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory.recall import RecallParams, channel_hits, leans_on_context, turn_query
from memory.types import Namespace

T0 = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)


@pytest.mark.parametrize("line, leans", [
    ("我养的猫叫什么名字？", False), ("What did Caroline research?", False), ("我上个月去哪儿旅游了？", False),
    ("我们2023年5月3号聊了什么？", False), ("Where did I go hiking in May?", False), ("我週末通常做什麼運動？", False),
    ("你还记得吗？", True), ("后来呢？", True), ("它最近怎么样？", True), ("那个电影叫什么来着", True),
    ("Do you remember?", True), ("When did she go?", True), ("What was that one called?", True), ("那家店在哪？🤔", True),
])
def test_a_question_leans_on_context_only_without_a_topic_of_its_own(line, leans):
    """Content words of its own, or a pointer back with at most two: zh, en, traditional characters, emoji."""
    assert leans_on_context(line) is leans


def test_a_self_contained_question_leads_and_earlier_lines_join_at_a_quarter():
    """Earlier lines join a question that names its topic only as asides (aside_weight, then tail_decay per step);
    content-free lines never count; aside_weight 0 leaves them out."""
    q = turn_query(["我今天加班到十点", "我每天早上喝一杯绿茶", "我养的猫叫什么名字？"])
    assert q.question == "我养的猫叫什么名字？"
    assert q.context == (("我每天早上喝一杯绿茶", 0.25), ("我今天加班到十点", 0.125))
    assert turn_query(["我今天加班到十点", "我养的猫叫什么名字？"], RecallParams(aside_weight=0)).context == ()
    assert turn_query(["I love hiking", "hahaha 😂"]).question == "I love hiking"  # a laugh is no question
    assert turn_query(["？？？", "…"]).lines == []


def test_a_leaning_question_brings_earlier_lines_as_weighted_queries_of_their_own():
    """Nearest first, tail_decay per step back; tail_decay 0 leaves them out."""
    q = turn_query(["我养了一只叫煤球的黑猫", "它三岁了", "它最近怎么样？"])
    assert q.question == "它最近怎么样？"
    assert q.context == (("它三岁了", 0.5), ("我养了一只叫煤球的黑猫", 0.25))
    assert q.lines == ["它最近怎么样？", "它三岁了", "我养了一只叫煤球的黑猫"]
    assert turn_query(["我养了一只叫煤球的黑猫", "它最近怎么样？"], RecallParams(tail_decay=0)).context == ()


@pytest.fixture
def person(sqlite_core):
    ns = Namespace("default", "tg:3001")
    said = [("我养了一只叫煤球的黑猫", 0), ("我下个月要去云南旅游", 1), ("I started learning the ukulele last week", 2),
            ("我每天早上喝一杯绿茶", 3), ("My sister Anna lives in Berlin", 4), ("绿茶是我最喜欢的饮料", 9),
            ("我昨天跟同事吵了一架", 9), ("上周六我去爬了香山，累坏了", 5)]
    ids = {}
    for text, day in said:
        ids[text] = sqlite_core.add(ns, sqlite_core.new(ns, text, created_at=T0 + timedelta(days=day)),
                                    said_at=T0 + timedelta(days=day)).memory.id
    return sqlite_core, ns, ids


@pytest.mark.parametrize("before, question, wanted", [
    (["我每天早上喝一杯绿茶", "绿茶是我最喜欢的饮料"], "我下个月要去哪里？", "我下个月要去云南旅游"),
    (["我每天早上喝一杯绿茶", "绿茶是我最喜欢的饮料"], "我上周六去哪儿了？", "上周六我去爬了香山，累坏了"),
    (["My sister Anna lives in Berlin", "She loves it there"], "What instrument am I learning?",
     "I started learning the ukulele last week"),
])
def test_a_question_after_other_lines_recalls_its_own_topic_first(person, before, question, wanted):
    """The lines just said (already memories of their own) do not pull the question's recall towards them: the
    mixed query of before ranked the tea (zh) and the sister (en) first."""
    core, ns, ids = person
    hits = core.recall(ns, [*before, question], now=T0 + timedelta(days=10))
    assert hits and hits[0].memory.id == ids[wanted]  # the just-said lines may follow, as asides, never lead


def test_a_pointing_question_is_answered_from_the_line_it_points_at(person):
    """「它最近怎么样？」 after the cat line: the cat comes first through the context line's own query; its ranks say
    which list found it."""
    core, ns, ids = person
    hits = core.recall(ns, ["我养了一只叫煤球的黑猫", "它最近怎么样？"], now=T0 + timedelta(days=10))
    assert hits and hits[0].memory.id == ids["我养了一只叫煤球的黑猫"]
    assert any(name.endswith("~1") for name in hits[0].ranks)
    ranked, _ = channel_hits(core.store, core.index, ns, ["我养了一只叫煤球的黑猫", "它最近怎么样？"])
    assert ranked["bm25~1"][0][0] == ids["我养了一只叫煤球的黑猫"]  # the context line's own list
    assert ids["我养了一只叫煤球的黑猫"] not in [m for m, _ in ranked.get("bm25", [])]  # the question holds none of it


def test_keep_channel_tops_moves_a_channels_confident_hit_into_the_top_and_keeps_scores_ordered():
    """A hit of ``keep`` below ``within`` moves up behind the best already there; scores stay non-increasing."""
    from memory.recall import keep_channel_tops
    from memory.types import Hit, Memory

    ns = Namespace("default", "tg:1")
    hits = [Hit(Memory(id=f"m{i}", namespace=ns, text=f"t{i}"), score=1.0 - i / 10) for i in range(8)]
    out = keep_channel_tops(hits, ["m6", "m1"], within=5)
    assert [h.memory.id for h in out] == ["m0", "m1", "m2", "m3", "m6", "m4", "m5", "m7"]
    assert all(a.score >= b.score for a, b in zip(out, out[1:]))
    assert keep_channel_tops(hits, ["m0", "m2"], within=5) == hits  # already within: nothing moves


@pytest.mark.parametrize("question", ["我每天早上喝一杯绿茶吗", "绿茶是我最喜欢的饮料", "I started learning the ukulele"])
def test_a_confident_word_match_stays_in_the_top_five(person, question):
    """Issue 25.5: BM25's first hits for a question it matches fully are never pushed below rank 5 by the vector
    channel's other hits."""
    core, ns, _ = person
    ranked, _ = channel_hits(core.store, core.index, ns, [question])
    top = [m for m, _ in ranked["bm25"][:4]]
    hits = [h.memory.id for h in core.recall(ns, [question], now=T0 + timedelta(days=10))][:5]
    assert set(top) <= set(hits)
