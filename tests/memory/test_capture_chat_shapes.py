"""Capture of chat-shaped statements (issue 25.2), offline extractor, zh and en: a statement keeps its fact when a
question to the companion follows it after 「，」/「,」; sentence-final 呢/吧/啊/嘛 in an exclamation asks nothing;
an indirect question inside a statement keeps the statement; an elliptical answer to the companion's question is
the person's fact, kept with that question — and the refusals stay (questions alone, greetings, suppositions,
lead-ins, offers, other people's facts, damaged text)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memory.capture import (
    HeuristicExtractor,
    answer_facts,
    capture,
    told_beside_question,
)
from memory.speech_act import is_question
from memory.text import normalise
from memory.types import ChatKind, ChatRef, Namespace

AT = datetime(2026, 11, 30, 4, 0, tzinfo=timezone.utc)
H = HeuristicExtractor()
DM = ChatRef("tg", ChatKind.PRIVATE, "2001")


def told(text: str) -> list[str]:
    return [f.text for f in H.extract(text, AT, "Asia/Shanghai", addressed=True)]


@pytest.mark.parametrize("text, kept, dropped", [
    ("我养的仓鼠叫花卷，特别能吃，你喜欢小动物吗？", "花卷", "小动物"),
    ("我最近在学尤克里里，你会弹什么乐器吗？", "尤克里里", "乐器"),
    ("我下周要去成都出差，有什么好吃的推荐吗？", "成都出差", "推荐"),
    ("今天好累啊，加班到十点，你呢？", "加班到十点", "你呢"),
    ("我週末去爬山了，你週末做了什麼？", "爬山", "做了"),  # traditional characters
    ("我刚养了一只柯基🐶，你见过柯基吗？", "柯基🐶", "见过"),
    ("I'm learning the ukulele, do you play anything?", "ukulele", "play anything"),
    ("Going to Chengdu next week, any food tips?", "Chengdu", "food tips"),
    ("My sister is getting married in May, what should I wear?", "married in May", "wear"),
    ("I just adopted a kitten named Miso 🐱, do you like cats?", "Miso", "like cats"),
])
def test_a_statement_keeps_its_fact_when_a_question_to_the_companion_follows(text, kept, dropped):
    """The clauses before the question are the fact; the question itself is not stored."""
    facts = told(text)
    assert len(facts) == 1, facts
    assert kept in facts[0] and dropped not in facts[0]


@pytest.mark.parametrize("text", [
    "昨天看了《海上钢琴师》，结尾太好哭了呢。", "这次考试我考得还不错吧！", "我终于把论文交上去了啊~", "我本来就不爱吃香菜嘛。",
])
def test_a_final_particle_in_an_exclamation_is_no_question(text):
    """呢/吧/啊/嘛 closing an exclamation: stored as the statement it is."""
    assert told(text) == [text] or told(text)[0].startswith(text.rstrip("。！~"))


@pytest.mark.parametrize("text, asks", [
    ("你呢？", True), ("那你呢", True), ("小美呢", True), ("我的钥匙呢", True), ("明天呢", True),
    ("好累呢", False), ("结尾太好哭了呢", False), ("你在干嘛", True), ("明天就放假了嘛", False),
])
def test_what_about_x_asks_and_a_feeling_does_not(text, asks):
    """A short X呢 asks when X is a pronoun, name, noun or time; after a feeling it exclaims."""
    assert is_question(text) is asks


@pytest.mark.parametrize("text, kept", [
    ("我老板总是临时改需求，我不知道该怎么跟他沟通。", "不知道该怎么跟他沟通"),
    ("我最近总失眠，也不清楚为什么。", "失眠"),
    ("I don't know how to tell my mom I quit my job.", "quit my job"),
])
def test_an_indirect_question_keeps_its_statement(text, kept):
    """不知道该怎么… / 不清楚为什么… / "I don't know how to …" tell how the person is: the statement stays whole."""
    facts = told(text)
    assert len(facts) == 1 and kept in facts[0]


@pytest.mark.parametrize("text", [
    "我喜欢什么运动，你知道吗？",  # the clause before the question asks itself
    "如果我明天去北京，你会想我吗？", "要是我辞职了，你会支持我吗？",  # a supposition
    "我想问一下，你觉得我该辞职吗？", "对了，你喜欢吃火锅吗？",  # a lead-in
    "If I moved to Berlin, would you visit?", "Quick question, do you know any good books?",
    "你好呀，今天过得怎么样？", "Hey, how are you?", "你呢？", "What's my cat's name?", "我生日是哪天",
])
def test_what_only_asks_or_supposes_stores_nothing(text):
    """Refusals that stay: questions alone, questions whose other clause asks too, suppositions and lead-ins."""
    assert told(text) == []


@pytest.mark.parametrize("question, answer, part", [
    ("小忆: 你们团队有多少人？", "八个人左右，都挺好相处的。", "八个人"),
    ("小忆: 你周末去哪玩了？", "去了趟西湖，人超多😂", "西湖"),
    ("小憶: 你養的是什麼貓？", "橘貓，三歲了。", "橘"),
    ("Mochi: How big is your team?", "About eight people, they're all nice.", "eight people"),
    ("Mochi: Where did you go last weekend?", "Hiking near Hangzhou, it was gorgeous!", "Hangzhou"),
])
def test_an_elliptical_answer_is_the_persons_fact_read_with_the_question(sqlite_core, question, answer, part):
    """Through ``capture`` with the companion's line as context: the answer is stored and keeps the question."""
    ns = Namespace("default", "tg:2001")
    results = capture(sqlite_core, ns, answer, chat=DM, said_at=AT, message_id="m1", context=question)
    stored = [r.memory for r in results if r.memory is not None]
    assert len(stored) == 1 and part in stored[0].text and stored[0].context == question


@pytest.mark.parametrize("question, answer", [
    ("小忆: 你们团队有多少人？", "嗯"), ("小忆: 你们团队有多少人？", "哈哈哈"), ("小忆: 你们团队有多少人？", "你猜？"),
    ("小忆: 要不要我给你讲个笑话？", "好啊，讲一个"), ("小忆: 今天天气真好。", "是啊，挺好的"),
    ("小忆: 今天天气真好。", "去了趟西湖"),  # the companion asked nothing
    ("Mochi: Shall I tell you a story?", "Sure, go ahead"), ("Mochi: How big is your team?", "Yes!"),
    ("Mochi: How big is your team?", "Why do you ask?"),
])
def test_no_answer_fact_without_a_question_about_the_person_or_content_of_its_own(question, answer):
    """An acknowledgement, a question back, an answer to an offer or to no question: nothing."""
    assert answer_facts(answer, question, AT) == []


def test_the_statement_beside_a_question_is_the_facts_source_and_normalises():
    """The question clauses are cut at 「，」 outside brackets: a title holding a comma stays whole."""
    assert told_beside_question("我在看《你好，李焕英》，你看过吗？") == "我在看《你好，李焕英》"
    assert told_beside_question("我在看书") is None
    assert normalise(told_beside_question("我週末去爬山了，你呢？") or "") == normalise("我週末去爬山了")


def test_other_peoples_facts_and_damaged_text_stay_out(sqlite_core):
    """A remark about someone else before a question is not this person's (no 我, another subject); a damaged
    clause before a question is refused as damaged."""
    ns = Namespace("default", "tg:2002")
    assert told("小美下周要去成都，你去过吗？") == []
    assert told("他们说明天要下雨，你那边呢？") == []
    results = capture(sqlite_core, ns, "我喜欢\ufffd，你呢？", chat=DM, said_at=AT)
    assert [r.reason for r in results] == ["damaged"] and sqlite_core.list(ns) == []


@pytest.mark.parametrize("text, kept", [
    ("听说我们部门年底要裁员，心里有点慌", "裁员"),  # hearsay about their own is theirs (DESIGN rule 5)
    ("Heard my company's getting bought by Oracle, not sure what that means for my team", "Oracle"),
    ("俺家在东北，冬天零下三十度是常事", "东北"),
    ("we're expecting twins in december!", "twins"),
    ("Going to Seoul for a week in May, anything I shouldn't miss?", "Seoul"),  # "May" is no modal verb
    ("I'm doing a 30-day no-sugar challenge - day 4 - is fruit cheating?", "no-sugar"),
])
def test_held_out_shapes_keep_their_fact(text, kept):
    """Shapes the held-out capture set found: own hearsay, 俺, "we", a month named May, clauses cut by dashes."""
    facts = told(text)
    assert len(facts) == 1 and kept in facts[0], facts


@pytest.mark.parametrize("text", ["听说周杰伦又要开演唱会了。", "Saw on Twitter that the new Zelda game is delayed again",
                                  "睡啦，晚安🌙", "外面下好大的雨"])
def test_hearsay_sign_offs_and_weather_stay_out(text):
    """Other people's news, a goodnight with an emoji, rain however it is said: nothing."""
    assert told(text) == []


def test_a_one_word_answer_to_a_question_asking_for_a_thing(sqlite_core):
    """"Waffles!" after "What's your dog's name?" is kept beside the sentence extraction already kept."""
    ns = Namespace("default", "tg:2003")
    results = capture(sqlite_core, ns, "Waffles! He's a beagle 🐶", chat=DM, said_at=AT,
                      context="Mochi: What's your dog's name?")
    texts = sorted(r.memory.text for r in results if r.memory is not None)
    assert texts == ["He's a beagle 🐶", "Waffles!"]
    assert answer_facts("Yes!", "Mochi: Did you go to the parade?", AT) == []  # a yes/no question needs more
