"""The time channel: a question that names a period ("in May", 「上个月」, "on
February 7, 2022") puts the relevant memories said in that period first, in
Chinese and English, and never recalls a memory only because of its date."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from memory.dates import query_period
from memory.recall import RecallParams
from memory.types import Namespace

NOW = datetime(2024, 3, 10, 4, 0, tzinfo=timezone.utc)  # 12:00 in Shanghai


@pytest.mark.parametrize("text, period", [
    ("What did Joanna recommend to Nate on February 7, 2022?", (date(2022, 2, 7), date(2022, 2, 7))),
    ("What happened on 7th of May, 2023?", (date(2023, 5, 7), date(2023, 5, 7))),
    ("Which spot did Joanna visit in May?", (date(2023, 5, 1), date(2023, 5, 31))),
    ("The concert on May 20th", (date(2023, 5, 20), date(2023, 5, 20))),
    ("What did she do in June 2023?", (date(2023, 6, 1), date(2023, 6, 30))),
    ("What did she do in 2022?", (date(2022, 1, 1), date(2022, 12, 31))),
    ("What did I tell you yesterday?", (date(2024, 3, 9), date(2024, 3, 9))),
    ("What did I do last week?", (date(2024, 2, 26), date(2024, 3, 3))),
    ("我上个月说的那家餐厅叫什么？", (date(2024, 2, 1), date(2024, 2, 29))),
    ("我昨天跟你說了什麼", (date(2024, 3, 9), date(2024, 3, 9))),
    ("去年我去哪儿旅游了", (date(2023, 1, 1), date(2023, 12, 31))),
    ("2023年5月我在干嘛", (date(2023, 5, 1), date(2023, 5, 31))),
    ("五月份我去了哪？🤔", (date(2023, 5, 1), date(2023, 5, 31))),
    ("我３月５号说过什么", (date(2024, 3, 5), date(2024, 3, 5))),
    ("上周我们聊了什么", (date(2024, 2, 26), date(2024, 3, 3))),
])
def test_query_period_names_the_day_month_or_year(text, period):
    """Explicit dates, month names (latest occurrence not after now), years and
    relative expressions each give the period at their own grain."""
    import unicodedata

    assert query_period(unicodedata.normalize("NFKC", text), NOW) == period


@pytest.mark.parametrize("text", ["What may I do?", "Caroline went to March for Our Lives", "我喜欢猫", "",
                                  "How are you? 😂", "I march every morning"])
def test_query_period_is_none_without_a_date(text):
    """Lower-case 'may'/'march', a capitalised name without a date word, and text
    without a date name no period."""
    assert query_period(text, NOW) is None


NS = Namespace("t1", "tg:77")
SAID = [  # (text, said at)
    ("I went hiking with my sister in the Alps.", datetime(2023, 5, 14, 9, tzinfo=timezone.utc)),
    ("I went hiking with my brother in Wales.", datetime(2023, 8, 2, 9, tzinfo=timezone.utc)),
    ("我和朋友去杭州西湖玩了一天。", datetime(2024, 2, 17, 9, tzinfo=timezone.utc)),
    ("我和朋友去苏州园林玩了一天。", datetime(2024, 1, 6, 9, tzinfo=timezone.utc)),
    ("My cat Mochi had a vet visit.", datetime(2023, 5, 20, 9, tzinfo=timezone.utc)),
]


@pytest.fixture
def person(sqlite_core):
    for text, at in SAID:
        sqlite_core.add(NS, sqlite_core.new(NS, text, created_at=at), said_at=at)
    return sqlite_core


@pytest.mark.parametrize("query, first", [
    ("Where did I go hiking in May?", "I went hiking with my sister in the Alps."),
    ("Where did I go hiking in August?", "I went hiking with my brother in Wales."),
    ("我上个月和朋友去哪儿玩了？", "我和朋友去杭州西湖玩了一天。"),
    ("我1月和朋友去哪兒玩了？", "我和朋友去苏州园林玩了一天。"),
])
def test_the_memory_of_the_named_period_comes_first(person, query, first):
    """Of two equally relevant memories the one said in the named period ranks
    first, and the time channel shows in its ranks; without the channel the
    other one may lead."""
    hits = person.recall(NS, [query], now=NOW)
    assert hits[0].memory.text == first
    assert "time" in hits[0].ranks
    off = person.recall(NS, [query], now=NOW, params=RecallParams(time_weight=0))
    assert {h.memory.text for h in off[:2]} == {h.memory.text for h in hits[:2]}
    assert all("time" not in h.ranks for h in off)


def test_the_period_adds_no_candidate(person):
    """A memory said in the named period but unrelated to the question is not
    recalled for it: the time channel reorders candidates, it does not add any."""
    on = person.recall(NS, ["Where did I go hiking in May?"], now=NOW, params=RecallParams(k=8))
    off = person.recall(NS, ["Where did I go hiking in May?"], now=NOW, params=RecallParams(k=8, time_weight=0))
    assert {h.memory.id for h in on} == {h.memory.id for h in off}
    assert "My cat Mochi had a vet visit." not in [h.memory.text for h in on]
