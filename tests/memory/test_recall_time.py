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


@pytest.mark.parametrize("text, thin", [
    ("你好，我今天心情不太好。（2023-04-30）", True), ("早上好呀", True), ("Caroline: Hey Mel! Good to see you!", True),
    ("Good morning! Feeling great today", True), ("我今天去公司面试了（2023-04-30）", False),
    ("我今天心情不错，因为升职了", False), ("Melanie: I painted a lake sunrise last year", False),
])
def test_a_greeting_date_or_mood_alone_is_thin(text, thin):
    """What carries only a greeting, a date or a mood (zh, en, with a speaker prefix) is thin; content is not."""
    from memory.recall import is_thin

    assert is_thin(text) is thin


def _day(core, ns, texts):
    ids = {}
    for text, at in texts:
        ids[text] = core.add(ns, core.new(ns, text, created_at=at), said_at=at).memory.id
    return ids


@pytest.mark.parametrize("question", ["我们2023年4月30日聊了什么？", "What did we talk about on April 30, 2023?"])
def test_a_days_content_comes_before_its_greeting_and_mood_opener(core, question):
    """Issue 25.4: the day's opener (date stamp + 今天/心情) no longer wins rank 1 for a day-level question; the
    day's content memories come first (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:4001")
    day = datetime(2023, 4, 30, 2, 0, tzinfo=timezone.utc)
    ids = _day(core, ns, [("你好，我今天心情不太好。（2023-04-30）", day),
                          ("跟老板聊了升职的事，他说要再等等", day.replace(hour=3)),
                          ("I talked to my boss about the promotion, he said wait", day.replace(hour=4)),
                          ("我养了一只叫煤球的黑猫", datetime(2023, 3, 1, tzinfo=timezone.utc))])
    hits = core.recall(ns, [question], now=NOW)
    ranked = [h.memory.id for h in hits]
    opener = ids["你好，我今天心情不太好。（2023-04-30）"]
    content = {ids["跟老板聊了升职的事，他说要再等等"], ids["I talked to my boss about the promotion, he said wait"]}
    assert ranked and ranked[0] in content
    assert opener not in ranked or ranked.index(opener) > min(ranked.index(i) for i in content if i in ranked)


@pytest.mark.parametrize("question", ["我们第一次聊天的时候我说了什么？", "What did I say about my work the first time we talked?"])
def test_the_first_time_reads_as_the_earliest_period(core, question):
    """「第一次聊天」 / "the first time": the memories of the person's earliest day come first."""
    ns = Namespace("default", "tg:4002")
    first = datetime(2023, 1, 5, 2, 0, tzinfo=timezone.utc)
    ids = _day(core, ns, [("我说我是个程序员，住在杭州", first), ("I told you I work as a programmer in Hangzhou", first),
                          ("我说我下个月要换工作", datetime(2023, 6, 1, tzinfo=timezone.utc)),
                          ("I told you I was changing jobs next month", datetime(2023, 6, 2, tzinfo=timezone.utc))])
    hits = core.recall(ns, [question], now=NOW)
    assert hits and hits[0].memory.id in {ids["我说我是个程序员，住在杭州"], ids["I told you I work as a programmer in Hangzhou"]}
    assert hits[0].ranks.get("time") == 1


@pytest.mark.parametrize("question", ["我们2023年4月30日聊了什么？", "What did we talk about on April 30, 2023?"])
def test_a_question_asked_by_its_date_alone_recalls_that_days_content_and_no_other_day(core, question):
    """Asked by the date alone, the day's memories are the candidates (content before the opener); a day with no
    memory recalls nothing (rule 4); in a group only what was learned there that day."""
    from memory.types import ChatKind, ChatRef, Visibility

    ns = Namespace("default", "tg:4003")
    day = datetime(2023, 4, 30, 2, 0, tzinfo=timezone.utc)
    group = ChatRef("tg", ChatKind.GROUP, "-100")
    ids = _day(core, ns, [("你好，我今天心情不太好。（2023-04-30）", day), ("跟老板聊了升职的事，他说要再等等", day.replace(hour=3)),
                          ("我养了一只叫煤球的黑猫", datetime(2023, 3, 1, tzinfo=timezone.utc))])
    shared = core.add(ns, core.new(ns, "在群里说了周末去爬山", origin=group, visibility=Visibility.GROUP,
                                   created_at=day.replace(hour=5)), said_at=day.replace(hour=5)).memory.id
    ranked = [h.memory.id for h in core.recall(ns, [question], now=NOW)]
    assert ranked[0] in {ids["跟老板聊了升职的事，他说要再等等"], shared}
    assert ids["我养了一只叫煤球的黑猫"] not in ranked
    assert ranked.index(ids["你好，我今天心情不太好。（2023-04-30）"]) > ranked.index(ids["跟老板聊了升职的事，他说要再等等"])
    assert [h.memory.id for h in core.recall(ns, [question], chat=group, now=NOW)] == [shared]
    assert core.recall(ns, [question.replace("30", "20")], now=NOW) == []


@pytest.mark.parametrize("text, opener", [
    ("你好，朋友。今天我想和你聊聊我的旅行计划。", True), ("你好，AI伴侣。今天我遇到了一个麻烦，不知道该怎么解决。", True),
    ("好久没来跟你聊天了，朋友。最近发生了一些开心的事，我来和你分享一下。", True),
    ("你好，AI伴侣，我今天有点烦恼，有些难过。", True), ("I want to tell you about my trip today", True),
    ("我下个月想去西班牙旅行，想去马德里和巴塞罗那。", False), ("我想和你聊聊我的工作，我被裁员了", False),
    ("你好，今天下着雨，我有些郁闷。", False), ("I went to Paris today", False),
    ("你好，我叫刘琳，很高兴认识你。", False),
])
def test_an_opener_that_only_announces_its_topic_is_told_apart_from_content(text, opener):
    """「今天我想和你聊聊我的旅行计划」, 「今天我遇到了一个麻烦」, "I want to tell you about my trip" only open the
    day (zh, en); a line that tells something — the trip, the weather, a name — does not."""
    from memory.recall import announces_topic

    assert announces_topic(text) is opener


@pytest.mark.parametrize("question", ["在5月4号我曾告诉过你我的旅行计划，我计划去哪个地方？", "我5月4号跟你说了什么？",
                                      "What did I tell you about my trip on May 4, 2023?"])
def test_a_days_topic_opener_ranks_below_what_was_said_that_day(core, question):
    """Asked about a day, its content comes before the opener that only announced the topic
    (「今天我想和你聊聊我的旅行计划」 names the trip, the next lines say where), in zh and en (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:4004")
    day = datetime(2023, 5, 4, 4, 0, tzinfo=timezone.utc)
    ids = _day(core, ns, [("你好，朋友。今天我想和你聊聊我的旅行计划。", day),
                          ("我下个月想去西班牙旅行，想去马德里和巴塞罗那。", day.replace(minute=1)),
                          ("I want to tell you about my trip plans today", day.replace(minute=2)),
                          ("I'm planning to fly to Lisbon and Porto in June", day.replace(minute=3)),
                          ("我养了一只叫煤球的黑猫", datetime(2023, 3, 1, tzinfo=timezone.utc))])
    ranked = [h.memory.id for h in core.recall(ns, [question], now=NOW)]
    openers = {ids["你好，朋友。今天我想和你聊聊我的旅行计划。"], ids["I want to tell you about my trip plans today"]}
    content = {ids["我下个月想去西班牙旅行，想去马德里和巴塞罗那。"], ids["I'm planning to fly to Lisbon and Porto in June"]}
    assert ranked and ranked[0] in content
    first_content = min(ranked.index(i) for i in content if i in ranked)
    assert all(ranked.index(o) > first_content for o in openers if o in ranked)


@pytest.mark.parametrize("question", ["你还记得我们第一次对话的时候，聊了什么话题吗？", "What did we talk about the first time?"])
def test_the_first_time_named_alone_recalls_the_earliest_days_memories(core, question):
    """「第一次对话」 / "the first time" with no topic of its own (「聊」「话题」 are how a question asks, not what about)
    asks by that period alone: the earliest day's memories are the candidates and no other day's (zh, en; SQLite
    and PostgreSQL) — before, such a question found nothing, or the companion's line a later memory answered."""
    ns = Namespace("default", "tg:4005")
    first = datetime(2023, 1, 5, 12, 0, tzinfo=timezone.utc)
    ids = _day(core, ns, [("你好，我的名字是王峰，很高兴认识你", first),
                          ("我最近在学习新的羽毛球技术", first.replace(minute=2)),
                          ("I just joined a badminton club with my coworkers", first.replace(minute=4)),
                          ("我养了一只叫煤球的黑猫", datetime(2023, 3, 1, tzinfo=timezone.utc))])
    ranked = [h.memory.id for h in core.recall(ns, [question], now=NOW)]
    assert set(ranked) == {ids["你好，我的名字是王峰，很高兴认识你"], ids["我最近在学习新的羽毛球技术"],
                           ids["I just joined a badminton club with my coworkers"]}


@pytest.mark.parametrize("question", ["在2023年4月30号我们聊了很多，我们聊了哪些话题？",
                                      "We talked a lot on April 30, 2023, what did we talk about?"])
def test_a_date_question_whose_other_words_are_everyday_chat_asks_by_the_date_alone(core, question):
    """「我们聊了很多」, "a lot": words that name no topic leave the date as all the question asks by, so that
    day's memories are recalled (content first) and no other day's — before, such a question found nothing,
    no BM25 hit holding a content word of it and no vector hit for a line that names nothing."""
    ns = Namespace("default", "tg:4006")
    day = datetime(2023, 4, 30, 12, 0, tzinfo=timezone.utc)
    ids = _day(core, ns, [("你好，我今天心情不太好。", day), ("最近有什么好玩的游戏吗？我想找个新游戏玩", day.replace(minute=2)),
                          ("I'm looking for a new video game to play", day.replace(minute=4)),
                          ("我养了一只叫煤球的黑猫", datetime(2023, 3, 1, tzinfo=timezone.utc))])
    ranked = [h.memory.id for h in core.recall(ns, [question], now=NOW)]
    assert ranked and ranked[0] in {ids["最近有什么好玩的游戏吗？我想找个新游戏玩"], ids["I'm looking for a new video game to play"]}
    assert ids["我养了一只叫煤球的黑猫"] not in ranked


@pytest.mark.parametrize("remark", ["我们今天聊了很多", "这是我第一次来", "We talked a lot today"])
def test_a_remark_naming_a_day_or_the_first_time_does_not_ask_for_that_period(core, remark):
    """A remark asks for nothing: 「我们今天聊了很多」 or 「这是我第一次来」 in a chat turn does not become a question
    asked by its period, so it brings none of that day's memories (zh, en)."""
    ns = Namespace("default", "tg:4007")
    day = datetime(2024, 3, 10, 1, 0, tzinfo=timezone.utc)
    _day(core, ns, [("我养了一只叫煤球的黑猫", day), ("I adopted a puppy named Biscuit", day.replace(minute=2)),
                    ("我在杭州的一家银行上班", day.replace(minute=4)), ("I work at a bank in Hangzhou", day.replace(minute=6))])
    assert core.recall(ns, [remark], now=NOW, params=RecallParams(chat_turn=True)) == []
