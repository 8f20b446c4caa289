"""Capture: turn a person's own message into memories of their namespace.

The seam is ``Extractor``: ``extract(text, said_at, tz) -> list[Fact]``, never
raising on odd text. Both implementations read each sentence's speech act first
(``memory.speech_act``): only a statement about the speaker writes — a
question never (a tag question that checks a fact, a recall check), save the
statement a rhetorical question carries or that stands beside a question to
the companion; another person's opinion, a request, a reaction or a lyric
never; a self-correction (「不是上海，是南京」) revises the live memory it
corrects (``capture``: a new version, history kept). Two implementations:

- ``HeuristicExtractor`` — offline, always available: first-person, non-question
  sentences in Chinese and English, and — when the message was said to the bot
  (``addressed``: a private chat, or a group message addressing it) — statements
  without another subject ("周五生日", "Went hiking yesterday"); never questions,
  greetings or small talk. It recognises canonical slots (``profile.name``
  from "我叫阿杰"/"my name is…", ``pet.cat.name``, ``drink.favorite``,
  ``person.小美.relation``, ``like.猫``, ``home.city``, ``profile.job`` …), guesses
  a category from keywords, resolves relative dates ("明天", "下周五",
  "tomorrow") against the message time in the tenant's time zone
  (``memory.dates``) — never for routines ("每个周末", "every weekend") — and
  takes emotion from ``memory.emotion.analyse``. A slot takes only a value of
  its own shape (a name is a name: "我叫妈妈来接我" is none; a birthday a date; a
  hometown a place), read with CJK–Latin spacing folded ("猫叫 Apple123"); an
  identity slot (IDENTITY_KEYS) is not replaced by a weaker reading.
- ``LLMExtractor`` — an OpenAI-compatible model asked for JSON facts (category,
  key, importance, valence, arousal, emotion, event time; prompt in
  ``memory.model_prompts``) through an injected callable. Malformed, truncated or
  non-JSON output, Chinese text with broken escapes, a timeout or a transport
  error all fall back to the heuristic result: never an error, never a lost
  message. Emotion comes from the model's answer (no extra call); a fact it
  gives none for is analysed by the lexicon. Its facts pass the heuristic's
  filters and must be supported by the message's own words.

What is never captured as a fact about the speaker (DESIGN rule 7): the bot's
replies and injected recollections (the pipeline passes only the person's own
text, and ``<recollection>`` blocks pasted into it are dropped), lines quoted
with ``>``, speech quoted from someone else ("她说“我喜欢猫”"), the gateway's
own shapes (``[src:…]`` markers, the template's lines, prompt and persona
text: ``is_gateway_text``) and forwarded messages (the pipeline never queues
them). Text that
tries to act as instructions ("忽略之前的设定", "ignore previous instructions",
``system:``/``<|im_start|>`` role tags) is kept only as a quoted statement
(``「…」``, escaped, category ``other``, low importance) — and is escaped again
by ``memory.model_prompts.escape_block`` when it reaches a prompt.

Long messages: sentences longer than ``MAX_FACT_CHARS`` are split at clause
breaks (then hard-split), so no fact reaches the embedder over its limit
(``memory.embed.MAX_CHARS``); every part of a speaker's sentence is theirs, so
no remainder is lost. At most ``MAX_FACTS`` facts per message (``cap_facts``):
identity, relationships and dated facts first, and what is left out is logged.

``capture`` stores the facts of a new message (a fact that updates or
contradicts a live memory in other words revises it, ``memory.contradiction``;
one that disagrees with it without a clear change is kept beside it, linked as
a conflict);
``capture_edit`` applies an
edited message to the memories derived from the original (same key → new
version; changed statement → the derived memory is revised in place, keeping
its id and history; a statement the edit removed → retracted).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta, timezone
from typing import Protocol

from memory.dates import _MON, DEFAULT_TZ, When, period_label, resolve_when, zone
from memory.emotion import LABELS, analyse
from memory.model_prompts import escape_block, extraction_messages
from memory.lexicon import (  # noqa: F401 - re-exported: capture's names before the speech-act stage split
    _CATEGORY_WORDS, _INSTRUCTION_RE, _SPECIES, _ZH_RELATIONS, _NOT_A_NAME_ZH, guess_category, is_instruction_like, _SRC_MARKER_RE, _MEMORY_LINE_RE, _BLOCK_TAG_RE, _CHANGE_LINE_RE, _FORMAT_FIELD_RE, MIN_ECHO_CHARS, _template_line_res, _prompt_fragments, _gateway_fragments, _is_echo, _is_gateway_line, is_gateway_text, _own_fragments, _SPACE_RUN_RE, _CJK, _AFTER_CJK_SPACE_RE, _BEFORE_CJK_SPACE_RE, _slot_text)
from memory.speech_act import (MIN_CHARS, Act, answers, asks_the_person, clauses, is_claim,
                               is_speaker_statement, read, shape, told_beside_question, told_text)
from memory.never_store import DEFAULT_NEVER_STORE, holds_secret, without_never_store
from memory.text import normalise, split_sentences, to_simplified
from memory.types import CONTEXT_CHARS, Category, ChatRef, Namespace, Visibility, clip_line, repair_tree

__all__ = [
    "Fact",
    "Extractor",
    "HeuristicExtractor",
    "VerbatimExtractor",
    "LLMExtractor",
    "capture",
    "capture_edit",
    "facts_of",
    "edit",
    "edit_reading",
    "EditReading",
    "answered_line",
    "answer_facts",
    "told_beside_question",
    "CONTEXT_WINDOW",
    "clean_text",
    "guess_category",
    "is_instruction_like",
    "is_gateway_text",
    "without_gateway_text",
    "parse_extraction",
    "MAX_FACT_CHARS",
    "MAX_FACTS",
    "cap_facts",
]

log = logging.getLogger(__name__)

MAX_FACT_CHARS = 300
MAX_FACTS = 24
LLM_MAX_CHARS = 4000


_ROUTINE_RE = _CATEGORY_WORDS[3][1]
_IMPORTANT_RE = re.compile(r"重要|一定要记住|记住|别忘了|\bremember\b|\bimportant\b|\bdon'?t forget\b", re.I)
_BASE_IMPORTANCE = {Category.PROFILE: 0.7, Category.RELATIONSHIP: 0.65, Category.PREFERENCE: 0.55,
                    Category.EVENT: 0.55, Category.ROUTINE: 0.5, Category.MOOD: 0.3, Category.OTHER: 0.4}

# -- what is not the speaker's own statement ---------------------------------

_RECOLLECTION_BLOCK_RE = re.compile(r"<\s*recollection\s*>.*?(<\s*/\s*recollection\s*>|$)", re.I | re.S)
_QUOTE_LINE_RE = re.compile(r"^\s*[>＞].*$", re.M)
_SPEECH_QUOTE_RE = re.compile(
    r"(说|讲|问|道|写道|回复|回答|告诉我|\bsaid\b|\bsays\b|\bsay\b|\btold me\b|\basked\b|\bwrote\b|\breplied\b)"
    r"\s*[:：,，]?\s*(“[^”]*”|\"[^\"]*\"|「[^」]*」|『[^』]*』|‘[^’]*’)", re.I)


# -- slots: (pattern, category, key builder) -----------------------------------

_NAME_STOP = "了过着他她你您们的人车饭外卖是不醒"
_ZH_VALUE = r"[^\s，,。.！!？?；;、：:“”\"'（）()]{1,12}"
_ZH_PETS = "|".join(sorted((k for k in _SPECIES if not k.isascii()), key=len, reverse=True))
_EN_PETS = "|".join(k for k in _SPECIES if k.isascii())
_THINGS = {"饮料": "drink", "喝的": "drink", "食物": "food", "吃的": "food", "菜": "food", "颜色": "color",
           "电影": "movie", "歌": "song", "歌曲": "song", "歌手": "singer", "书": "book", "运动": "sport",
           "动物": "animal", "水果": "fruit", "游戏": "game", "季节": "season", "城市": "city", "明星": "star",
           "乐队": "band", "作家": "author", "演员": "actor", "drink": "drink", "food": "food", "color": "color",
           "colour": "color", "movie": "movie", "film": "movie", "song": "song", "singer": "singer", "book": "book",
           "sport": "sport", "animal": "animal", "fruit": "fruit", "game": "game", "season": "season",
           "city": "city", "band": "band", "author": "author", "actor": "actor"}
_EN_RELATIONS = ("ex-girlfriend|ex-boyfriend|girlfriend|boyfriend|wife|husband|mom|mother|dad|father|sister|"
                 "brother|best friend|friend|boss|roommate|colleague|son|daughter|partner")
_JOB_SUFFIX = (r"(?:师|员|生|家|工|手|者|士|长|警|官|主播|博主|老板|会计|护士|医生|律师|记者|司机|厨师|"
               r"模特|保安|快递|外卖小哥|程序猿)")

# -- the shape of a slot's value ------------------------------------------------
# A slot takes only a value of its own shape: "我叫妈妈来接我" (叫 = ask someone
# to) is no name, "我的猫叫了一晚上" no cat's name, "call me later" no nickname.

_PRONOUNS = set("我你您他她它咱")
# a character of a clause going on after a name: 叫妈妈来接我, 叫小明帮我拿快递
_CLAUSE_CHARS = set("来去帮给接送陪拿买做打看让到回跟起吃喝玩走过了着得地在把被和一")
_NOT_NAME_START = set("了过着得地的是不在都也就还很太快别先再")
_NOT_A_NAME_EN = frozenset((
    "a an the and or but if then so of to in on at by for with from as is am are was were be been do does did "
    "have has had me my you your he him his she her it its we us our they them this that what who when where why how "
    "not no yes back later tomorrow tonight today now soon maybe anytime anything whenever sometime sometimes please "
    "again out up down home over here there if once first asap crazy names everyone everybody anybody somebody").split())
_NAME_TAIL_RE = re.compile(r"(?:就行了?|就好了?|就可以了?|好了|就是了|吧|哦|喔|啦|呀|啊|呢|嘛|哈+|哒|~+|～+)$")


def _name_value(m: re.Match[str]) -> str:
    """The name a slot's match names, without trailing particles ("叫我小杰就行" → 小杰)."""
    groups = m.groupdict()
    value = next((groups[g] for g in ("v", "v2") if groups.get(g)), "") or ""
    prev = None
    while value and value != prev:
        prev, value = value, _NAME_TAIL_RE.sub("", value)
    return value


def _name_shaped(value: str) -> bool:
    """True when ``value`` reads as a name: 1-6 CJK characters that are no pronoun,
    kinship word or clause (no verb or particle after the first character), or one
    Latin word (letters, digits, ' and -) that is no function word ("later", "back")."""
    if not value:
        return False
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9'_-]{0,39}", value):
        return value.lower() not in _NOT_A_NAME_EN
    if not re.fullmatch(r"[\u4e00-\u9fffA-Za-z0-9·•]{1,6}", value):
        return False
    if _PRONOUNS & set(value) or value[0] in _NOT_NAME_START or _NOT_A_NAME_ZH.match(value):
        return False
    return not any(ch in _CLAUSE_CHARS for ch in value[1:])


def _if_name(m: re.Match[str], key: str, strength: int = 2) -> tuple[str, int] | None:
    """``(key, strength)`` when the match's value is name-shaped, else None (the
    sentence is then read without this slot)."""
    return (key, strength) if _name_shaped(_name_value(m)) else None


# a birthday is a date: 3月14日, 三月十四, 农历八月十五, 1990-03-14, 03/14, March 14th, 14 March, the 14th
_DATE_SHAPE_RE = re.compile(
    r"\s*(?:在|是)?\s*(?:on\s+)?(?:the\s+)?(?:"
    r"(?:农历|阴历|公历|阳历)?(?:\d{2,4}\s*年\s*)?(?:\d{1,2}|[一二三四五六七八九十正腊冬]{1,2})\s*月\s*(?:\d{1,2}|[初一二三四五六七八九十廿]{1,3})"
    r"|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}(?![\d.])"
    r"|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}"
    r"|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*"
    r"|\d{1,2}(?:st|nd|rd|th)\b"
    r"|(?:这|本|下|下个|上)?(?:周|星期|礼拜)[一二三四五六日天]|明天|后天|今天|tomorrow|today"
    r"|(?:next|this|on)?\s*(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))", re.I)
_NOT_A_PLACE = re.compile(r"^(?:哪|那|这|什么|外地|外面|别处|work|school|home|the office|there|here|now on|then on|"
                          r"today|yesterday|the future|the past)\b|^(?:哪|那|这|什么)", re.I)


def _place_shaped(value: str | None) -> bool:
    """True when ``value`` (None: the pattern names no value, "我是四川人") reads
    as a place: not a question word, not "work"/"home"/"the future"."""
    if value is None:
        return True
    value = value.strip()
    return bool(value) and not _NOT_A_PLACE.match(value) and not (_PRONOUNS & set(value))


_SLOTS: tuple[tuple[re.Pattern[str], Category, Callable[[re.Match[str]], str | tuple[str, int] | None]], ...] = (
    # favourites before likes: 我最喜欢的饮料是… / my favourite drink is …
    (re.compile(r"我最(?:喜欢|爱)的(?P<t>[\u4e00-\u9fff]{1,4})是(?P<v>" + _ZH_VALUE + ")"), Category.PREFERENCE,
     lambda m: f"{_THINGS.get(m['t'], m['t'])}.favorite"),
    (re.compile(r"我最爱(?P<t>喝|吃)(?P<v>" + _ZH_VALUE + ")"), Category.PREFERENCE,
     lambda m: "drink.favorite" if m["t"] == "喝" else "food.favorite"),
    (re.compile(r"\bmy fav(?:ou?rite)? (?P<t>[a-z]+) is (?P<v>[^.,!?;]{1,40})", re.I), Category.PREFERENCE,
     lambda m: f"{_THINGS.get(m['t'].lower(), m['t'].lower())}.favorite"),
    # names: "我叫X" / "my name is X" read firmer than a nickname ("叫我X就行", "call me X")
    (re.compile(r"我(?:的名字)?叫(?![" + _NAME_STOP + r"])(?P<v>" + _ZH_VALUE + ")|我的名字是(?P<v2>" + _ZH_VALUE + ")"),
     Category.PROFILE, lambda m: _if_name(m, "profile.name")),
    (re.compile(r"\bmy name is (?P<v>[A-Za-z][\w'-]*)", re.I), Category.PROFILE, lambda m: _if_name(m, "profile.name")),
    (re.compile(r"(?:^|(?<=[\s，,。！!]))(?:你)?(?:可以)?叫我(?P<v>" + _ZH_VALUE + ")"
                r"|\b(?:call me|i'?m called) (?P<v2>[A-Za-z][\w'-]*)", re.I),
     Category.PROFILE, lambda m: _if_name(m, "profile.name", strength=1)),
    # pets
    (re.compile(r"我(?:的|家的?|养的)?(?P<s>" + _ZH_PETS + r")(?:的名字)?叫(?P<v>" + _ZH_VALUE + ")"),
     Category.RELATIONSHIP, lambda m: _if_name(m, f"pet.{_SPECIES[m['s']]}.name")),
    (re.compile(r"我养了?(?:一|两|几)?[只条个]叫(?P<v>[^\s，,。的]{1,8})的(?P<s>" + _ZH_PETS + ")"),
     Category.RELATIONSHIP, lambda m: f"pet.{_SPECIES[m['s']]}.name"),
    (re.compile(r"\bmy (?P<s>" + _EN_PETS + r")(?:'s name is| is called| is named| named) (?P<v>[A-Za-z][\w'-]*)"
                r"|\bi have an? (?P<s2>" + _EN_PETS + r") (?:called|named) (?P<v2>[A-Za-z][\w'-]*)", re.I),
     Category.RELATIONSHIP, lambda m: _if_name(m, f"pet.{_SPECIES[(m['s'] or m['s2']).lower()]}.name")),
    # people
    (re.compile(r"(?:^|(?<=[\s，,。！!？?：:]))(?P<v>[\u4e00-\u9fff]{1,4}|[A-Z][a-z]+)是我(?:的)?(?P<r>" + _ZH_RELATIONS + ")"),
     Category.RELATIONSHIP, lambda m: None if m["v"].startswith(("他", "她", "你", "这", "那", "我")) else
     f"person.{m['v']}.relation"),
    (re.compile(r"我(?:的)?(?P<r>" + _ZH_RELATIONS + r")叫(?P<v>" + _ZH_VALUE + ")"),
     Category.RELATIONSHIP, lambda m: _if_name(m, f"person.{_name_value(m)}.relation")),
    (re.compile(r"\bmy (?P<r>" + _EN_RELATIONS + r")(?:'s name is| is called| is named| named) (?P<v>[A-Z][\w'-]*)"
                r"|\b(?P<v2>[A-Z][a-z]+) is my (?P<r2>" + _EN_RELATIONS + r")\b", re.I),
     Category.RELATIONSHIP, lambda m: f"person.{m['v'] or m['v2']}.relation"),
    # age, birthday, job, places
    (re.compile(r"我今年(?P<v>\d{1,3}|[一二两三四五六七八九十]{1,3})岁|\bi'?m (?P<v2>\d{1,3}) years old|"
                r"\bi am (?P<v3>\d{1,3}) years old", re.I), Category.PROFILE, lambda m: "profile.age"),
    (re.compile(r"我的?生日(?:是|在)(?P<v>.{1,16})|\bmy birthday is (?P<v2>.{1,24})", re.I), Category.PROFILE,
     lambda m: "profile.birthday" if _DATE_SHAPE_RE.match(m["v"] or m["v2"]) else None),
    # without a subject (only read so when the sentence is about the speaker): 周五生日, 生日是3月14日, birthday on Friday
    (re.compile(r"^(?:对了|话说|其实)?[，,\s]*(?:(?P<v>.{1,12}?)(?:过|是)?生日(?:哦|啦|呀|了)?[。!！~～]*$|生日(?:是|在)(?P<v2>.{1,16}))"
                r"|^(?:my\s+)?birthday(?:'s| is)?\s+(?P<v3>.{1,24})", re.I), Category.PROFILE,
     lambda m: ("profile.birthday", 1) if _DATE_SHAPE_RE.match(m["v"] or m["v2"] or m["v3"] or "") else None),
    (re.compile(r"我(?:的工作|的职业)是|我是(?:一名|一个|个)?[\u4e00-\u9fffA-Za-z]{0,8}?" + _JOB_SUFFIX +
                r"(?:[，,。!！~]|$)|\bi work as an?\b|\bmy job is\b", re.I), Category.PROFILE, lambda m: "profile.job"),
    (re.compile(r"我在(?P<v>[^\s，,。]{2,20}?)(?:工作|上班)|\bi work (?:at|for) (?P<v2>[^.,!?;]{2,40})", re.I),
     Category.PROFILE, lambda m: "work.place"),
    (re.compile(r"我(?:现在)?住在|\bi live in\b", re.I), Category.PROFILE, lambda m: "home.city"),
    (re.compile(r"我(?:的)?老家(?:是|在)(?P<v>" + _ZH_VALUE + r")|我是(?![个一好坏男女老大小普穷有这那什])(?:[\u4e00-\u9fff]{2,4})人(?:[，,。!！]|$)"
                r"|\bi(?:'?m| am) from (?P<v2>[^.,!?;]{2,40})", re.I),
     Category.PROFILE, lambda m: "profile.hometown" if _place_shaped(m["v"] or m["v2"]) else None),
    # likes and dislikes of one thing: 我(不|很|超)?喜欢X / 我讨厌X / I (don't) like X
    (re.compile(r"我(?:也|还|更|真的|其实|就)?(?:不|不太|很|超|超级|非常|特别|挺|好|更)?(?:喜欢|爱|讨厌|受不了)"
                r"(?P<v>[^\s，,。！!？?；;~～]{1,20})"), Category.PREFERENCE,
     lambda m: _like_key(m["v"])),
    (re.compile(r"\bi (?:really |also |do not |don't |kind of |kinda |absolutely )?(?:like|love|hate|dislike|enjoy|"
                r"can't stand|cannot stand) (?P<v>[^.,!?;]{1,40})", re.I), Category.PREFERENCE,
     lambda m: _like_key(m["v"])),
)


def _like_key(obj: str) -> str | None:
    obj = normalise(obj).strip(" 了啦呀啊哦呢的")
    obj = re.sub(r"^(the|a|an|to)\s+", "", obj)
    if not obj or obj in ("你", "你们", "it", "this", "that", "you"):
        return None
    return f"like.{obj[:40]}"


# -- facts and the seam ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fact:
    """One extracted statement about the speaker.

    importance, valence, arousal as in ``memory.types.Memory``; ``key`` empty →
    category + normalised text; ``source`` is the part of the message it was
    learned from ("" = the whole message; its fingerprint becomes a tombstone when
    the memory is forgotten); ``quoted`` marks instruction-like text kept only as
    a quoted statement; ``event_time`` is a timezone-aware UTC datetime (local
    midnight of the day named, or of the first day of the period named);
    ``event_end`` where that period ends (exclusive, aware UTC), None for a day.
    """

    text: str
    category: Category = Category.OTHER
    key: str = ""
    importance: float = 0.5
    valence: float = 0.0
    arousal: float = 0.0
    emotion: str = "neutral"
    event_time: datetime | None = None
    source: str = ""
    quoted: bool = False
    event_end: datetime | None = None
    extra: dict = field(default_factory=dict)


class Extractor(Protocol):
    """Turns one message into facts about its speaker. Never raises on odd text.

    ``said_at``: timezone-aware message time; ``tz``: IANA zone of the tenant in
    which relative dates are resolved; ``addressed``: the message was said to the
    bot (a private chat, or a group message addressing it), so that a statement
    without a subject ("周五生日") is about the speaker.
    """

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False) -> list[Fact]: ...


def _priority(f: Fact) -> int:
    """0 identity (profile.*), 1 relationships (people, pets), 2 dated facts, 3 other
    slots, 4 the rest: the order in which a capped message keeps its facts."""
    if f.key.startswith("profile.") or f.key in IDENTITY_KEYS:
        return 0
    if f.key.startswith(("person.", "pet.")) or f.category is Category.RELATIONSHIP:
        return 1
    if f.event_time is not None:
        return 2
    return 3 if f.key else 4


def cap_facts(facts: list[Fact], limit: int = MAX_FACTS) -> list[Fact]:
    """At most ``limit`` facts, in message order, chosen by ``_priority`` then
    importance (identity, relationships and dates first); what is left is logged
    (how many, with their categories and keys — no text). The message itself stays
    whole in the chat log."""
    if len(facts) <= limit:
        return facts
    ranked = sorted(range(len(facts)), key=lambda i: (_priority(facts[i]), -facts[i].importance, i))
    kept = sorted(ranked[:limit])
    left = [facts[i] for i in ranked[limit:]]
    log.info("capture: %d facts in one message, cap %d; left out (in the chat log only): %s", len(facts), limit,
             ", ".join(f"{f.category.value}:{f.key or '-'}" for f in left))
    return [facts[i] for i in kept]



SUPPORT_MIN = 0.5
"""Least share of a model fact's tokens (memory.text.tokens) found in the message."""


def supported_by(fact_text: str, message: str) -> float:
    """Share in [0, 1] of the full-text tokens of ``fact_text`` (jieba words and
    CJK unigrams, stopwords dropped; memory.text.tokens) that occur in ``message``;
    1.0 for a text without tokens. A model fact below SUPPORT_MIN is not in the
    message (an invention) and is dropped."""
    from memory.text import tokens

    fact_tokens = set(tokens(fact_text))
    if not fact_tokens:
        return 1.0
    return len(fact_tokens & set(tokens(message))) / len(fact_tokens)




def clean_text(text: str, own_texts: Sequence[str] = ()) -> str:
    """The speaker's own words of a message: pasted ``<recollection>`` blocks,
    ``>``-quoted lines, the gateway's own shapes (``without_gateway_text``; with
    ``own_texts``, e.g. the tenant's persona prompt) and speech quoted from someone
    else (after 说/said/told me…) are removed (the quote becomes "…")."""
    text = _RECOLLECTION_BLOCK_RE.sub(" ", text or "")
    text = _QUOTE_LINE_RE.sub("", text)
    text = without_gateway_text(text, own_texts)
    return _SPEECH_QUOTE_RE.sub(lambda m: f"{m.group(1)}…", text)



def without_gateway_text(text: str, own_texts: Sequence[str] = ()) -> str:
    """``text`` without the lines and sentences ``is_gateway_text`` recognises;
    lines with none of them are kept exactly as they were."""
    if not text:
        return ""
    lines = []
    for line in text.split("\n"):
        if _is_gateway_line(line):
            continue
        sentences = split_sentences(line)
        kept = [sent for sent in sentences if not is_gateway_text(sent, own_texts)]
        lines.append(line if len(kept) == len(sentences) else " ".join(kept))
    return "\n".join(lines)


def _quoted(sentence: str) -> str:
    return "「" + escape_block(" ".join(sentence.split())).replace("「", "『").replace("」", "』") + "」"


def _importance(category: Category, valence: float, slotted: bool, sentence: str) -> float:
    value = _BASE_IMPORTANCE[category] + (0.1 if slotted else 0.0) + 0.2 * abs(valence)
    if _IMPORTANT_RE.search(sentence):
        value += 0.2
    return round(min(1.0, value), 3)


IDENTITY_KEYS = frozenset({"profile.name", "profile.birthday", "profile.hometown"})
"""Slots that say who a person is: a weaker reading never replaces a firmer one."""


def _slot(sentence: str) -> tuple[Category, str, int] | None:
    """(category, key, strength) of the first slot whose value has its shape;
    strength 2 is a plain statement ("我叫阿杰"), 1 a weaker reading ("叫我小杰就行",
    a subject-less "周五生日")."""
    for pattern, category, build in _SLOTS:
        for m in pattern.finditer(sentence):
            built = build(m)
            if not built:
                continue
            key, strength = built if isinstance(built, tuple) else (built, 2)
            return category, key[:200], strength
    return None


def reading_strength(text: str, key: str) -> int:
    """How firmly the heuristic reads ``text`` as a value of slot ``key``: 2 a plain
    statement, 1 a weaker reading, 0 none (a text another extractor keyed)."""
    slot = _slot(_slot_text(text))
    return slot[2] if slot is not None and slot[1] == key else 0




def _date_suffix(sentence: str, when: When | date) -> str:
    """``sentence`` with the day or period it names after it: 「我下个月15号考试（2027-01-15）」,
    「我下个月搬家（2027-01）」, "I'm getting married next year (2027)" (``memory.dates.period_label``)."""
    label = period_label(when) if isinstance(when, When) else when.isoformat()
    return f"{sentence}（{label}）" if any("\u4e00" <= c <= "\u9fff" for c in sentence) else f"{sentence} ({label})"


_YEARLY_RE = re.compile(r"\b(?:birthday|anniversary)(?:'s|\s+is|\s+falls)\s+(?:on\s+)?(?:the\s+)?"
                        rf"(?:{_MON}\s+\d|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON})", re.I)
"""A birthday or anniversary said to fall on a day of the calendar ("My birthday is on March
3rd", "My mom's birthday is July 4"): it comes every year, so its text gets no year (a year had
read as one occurrence, "(2027-03-03)", or a past one, "(2026-07-04)"), as 「我的生日是3月3日」 never
had one (a Chinese month and day is no relative date, ``memory.dates``).
「周五生日」, "my birthday is tomorrow" and "On March 3rd we celebrated my birthday" name one
occurrence and keep theirs."""


def _told_with_date(sent: str, plain: str, when: When) -> str:
    """``sent`` with the day ``when`` names written after it (``_date_suffix``) when that
    day is relative to the time it was said, except a yearly day (``_YEARLY_RE``); else
    ``sent`` as it is. ``plain``: the sentence simplified."""
    return _date_suffix(sent, when) if when.relative and not _YEARLY_RE.search(plain) else sent


def _when_or_none(plain: str, said_at, tz) -> When | None:
    """``memory.dates.resolve_when`` of ``plain`` (a day, or a period: ``When.end``), or None where it
    names no date it can resolve."""
    try:
        return resolve_when(plain, said_at, tz)
    except ValueError:
        return None



class HeuristicExtractor:
    """Offline extractor: first-person, non-question sentences of at least
    MIN_CHARS characters, with slots, category, importance, emotion and dates
    (see the module docstring). Deterministic and pure."""

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False) -> list[Fact]:
        facts: list[Fact] = []
        for whole in split_sentences(clean_text(text), semicolons=True):
            parts = split_sentences(whole, max_chars=MAX_FACT_CHARS) if len(whole) > MAX_FACT_CHARS else [whole]
            # the parts of a long sentence are the speaker's when the sentence is: its
            # remainder has no 我 of its own ("我第1次…，第2次…，…最后去了杭州")
            continued = len(parts) > 1 and is_speaker_statement(whole, addressed)
            if len(parts) > 1 and not continued:
                continue
            for part in parts:
                fact = self.sentence_fact(part, said_at, tz, addressed=addressed, continued=True) if continued \
                    else self.reading_fact(part, said_at, tz, addressed=addressed)
                if fact is not None:
                    facts.append(fact)
        return cap_facts(facts)

    @classmethod
    def reading_fact(cls, sent: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False) -> Fact | None:
        """The fact of one sentence as its speech act allows (``memory.speech_act``):
        a statement about the speaker → its fact; a question → only the statement
        it carries (「我对花生过敏你知道吗！！」) or that stands beside it (「我在学尤克里里，
        你会弹什么乐器吗？」), never the fact it checks; a correction → its sentence,
        with ``extra["corrects"] = (wrong, right)`` for ``capture`` to retire the
        fact it corrects; anything else → None. A sentence the stage cannot
        classify is read as before the stage (its shape logged at debug)."""
        reading = read(sent, addressed=addressed)
        if reading.act is Act.UNKNOWN:
            log.debug("capture: speech act unknown (%s); read as a statement", shape(sent))
            fact = cls.sentence_fact(sent, said_at, tz, addressed=addressed)
            told = told_beside_question(sent) if fact is None else None
            if told is None:
                return fact
            theirs = any(is_speaker_statement(c, addressed) for c in clauses(told))
            return cls.sentence_fact(told, said_at, tz, addressed=addressed, continued=theirs)
        if reading.act is Act.CORRECTION:
            if not reading.right:
                return None  # 「说错了」 alone: nothing named to keep
            fact = cls.sentence_fact(sent, said_at, tz, addressed=True, continued=True)
            if fact is None:
                return None
            # kept as said only where the reading before the stage kept it ("corrects" found nothing to revise)
            as_said = is_speaker_statement(sent, addressed)
            return replace(fact, extra={**fact.extra, "corrects": (reading.wrong, reading.right), "as_said": as_said})
        if not reading.told:
            return None
        if reading.act is Act.REACTION:  # the speaker's passing mood: a mood, never a slot or a lasting fact
            fact = cls.sentence_fact(reading.told, said_at, tz, addressed=addressed, continued=True)
            return None if fact is None else replace(fact, category=Category.MOOD, key="", event_time=None,
                                                     event_end=None, text=reading.told)
        if reading.act is Act.SELF:
            return cls.sentence_fact(reading.told, said_at, tz, addressed=addressed, continued=True)
        # the statement beside a question is the speaker's when one of its clauses is (「心情不太好，被领导骂了一顿」)
        theirs = any(is_speaker_statement(c, addressed) for c in clauses(reading.told))
        return cls.sentence_fact(reading.told, said_at, tz, addressed=addressed, continued=theirs)

    @staticmethod
    def sentence_fact(sent: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False,
                      continued: bool = False) -> Fact | None:
        """The fact of one sentence, or None when it is not a first-person statement
        (nor, when ``addressed``, a subject-less statement about the speaker).
        ``continued``: ``sent`` is a part of a longer sentence already found to be
        the speaker's statement."""
        if len(sent) < MIN_CHARS or sent.startswith("/"):
            return None
        plain = to_simplified(sent)  # the patterns are written in simplified Chinese; the memory keeps the original
        if not continued and not is_speaker_statement(sent, addressed):
            return None
        if is_instruction_like(sent):
            return Fact(text=_quoted(sent), category=Category.OTHER, importance=0.1, source=sent, quoted=True)
        emo = analyse(sent)
        slot = _slot(_slot_text(sent))
        text, event_time, event_end, extra = sent, None, None, {}
        if slot is not None:
            category, key, extra["strength"] = slot
            if key == "profile.birthday":  # "周五生日": the day it names, as for an event
                when = _when_or_none(plain, said_at, tz)
                if when is not None:
                    event_time, event_end = when.at, when.until if when.is_period else None
                    text = _told_with_date(sent, plain, when)
        else:
            key = ""
            category = guess_category(plain)
            if category is not Category.ROUTINE and not _ROUTINE_RE.search(plain):
                when = _when_or_none(plain, said_at, tz)
                if when is not None:
                    event_time, event_end = when.at, when.until if when.is_period else None
                    if category in (Category.OTHER, Category.MOOD, Category.EVENT):
                        category = Category.EVENT
                    text = _told_with_date(sent, plain, when)
            if category is Category.OTHER and emo.intensity >= 0.3:
                category = Category.MOOD
        return Fact(text=text, category=category, key=key, importance=_importance(category, emo.valence, bool(slot), sent),
                    valence=emo.valence, arousal=emo.arousal, emotion=emo.label, event_time=event_time, source=sent,
                    extra=extra, event_end=event_end)


class VerbatimExtractor:
    """A memory another system already extracted, kept as it is: one fact of the
    whole (whitespace-collapsed) text, with the offline extractor's category, slot,
    importance and emotion where it reads the text as a statement
    (``HeuristicExtractor.sentence_fact``, addressed) and its date reading for an
    event (no date suffix: the text stays as it was kept), else a plain fact of it
    (category ``guess_category``, emotion ``analyse``). Nothing for an empty text.
    Deterministic and pure."""

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False) -> list[Fact]:
        cleaned = " ".join(clean_text(text).split())
        if not cleaned:
            return []
        fact = HeuristicExtractor.sentence_fact(cleaned, said_at, tz, addressed=True, continued=True)
        if fact is not None:
            # the text as the other system kept it (no date suffix); a date only for an event
            # (「喜欢在周末去爬山」 names no weekend of its own)
            dated = fact.category is Category.EVENT or fact.key == "profile.birthday"
            fact = replace(fact, text=cleaned, event_time=fact.event_time if dated else None,
                           event_end=fact.event_end if dated else None)
        else:
            emo = analyse(cleaned)
            category = guess_category(to_simplified(cleaned))
            fact = Fact(text=cleaned, category=category, importance=_importance(category, emo.valence, False, cleaned),
                        valence=emo.valence, arousal=emo.arousal, emotion=emo.label, source=cleaned)
        return [fact]


# -- the LLM extractor ------------------------------------------------------------

_FENCE_RE = re.compile(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$")
_LITERAL_ESCAPE_RE = re.compile(r"\\u[0-9a-fA-F]{2,4}|\\x[0-9a-fA-F]{2}|\\[nrt\"\\]")
_KEY_RE = re.compile(r"[\w.:-]{1,200}")


def _clip(value: object, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    if v != v:  # NaN
        return None
    return min(max(v, low), high)


def _event_time(value: object, sentence: str, said_at: datetime, tz: str) -> tuple[datetime | None, datetime | None]:
    """``(event_time, event_end)`` of a model's fact (``Fact``): the day or period
    ``memory.dates.resolve_when`` reads in ``sentence`` first — calendar arithmetic
    the model gets wrong (「下个月15号」 as 2027-01-01) —, else the model's ``value``
    (ISO day or time, local to ``tz`` when naive) as a day; (None, None) for a routine
    or no date."""
    if _ROUTINE_RE.search(to_simplified(sentence)):
        return None, None  # a routine has no event date, whatever the model says
    when = _when_or_none(sentence, said_at, tz)
    if when is not None:
        return when.at, when.until if when.is_period else None
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:  # a local day or local time in the tenant's zone
                parsed = datetime.combine(parsed.date(), parsed.time() if len(value.strip()) > 10 else time(0),
                                          tzinfo=zone(tz))
            return parsed.astimezone(timezone.utc), None
    return None, None


def parse_extraction(raw: str, message: str, said_at: datetime, tz: str = DEFAULT_TZ) -> list[Fact] | None:
    """Facts from a model's answer, or None when the answer is unusable (not JSON,
    truncated, not the expected shape, every fact invalid, broken escapes left in
    the text). Items with a missing text or an unknown shape are dropped; a
    missing emotion is analysed by the lexicon; instruction-like fact texts are
    kept only quoted. ``message`` is the cleaned message (the facts' source)."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    body = _FENCE_RE.sub("", raw.strip())
    start = min([i for i in (body.find("{"), body.find("[")) if i >= 0], default=-1)
    if start < 0:
        return None
    try:
        data, _end = json.JSONDecoder(strict=False).raw_decode(body[start:])
    except (ValueError, RecursionError):
        return None
    data = repair_tree(data)  # a "\ud83c" escape decodes to a lone surrogate: U+FFFD, which drops the fact
    items = data.get("facts") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    facts: list[Fact] = []
    for item in items[:4 * MAX_FACTS]:
        if not isinstance(item, dict):
            continue
        text = item.get("text")
        if not isinstance(text, str) or not text.strip() or _LITERAL_ESCAPE_RE.search(text) or "\ufffd" in text:
            continue
        text = " ".join(text.split())[:MAX_FACT_CHARS]
        if is_instruction_like(text):
            facts.append(Fact(text=_quoted(text), category=Category.OTHER, importance=0.1, source=message, quoted=True))
            continue
        try:
            category = Category(str(item.get("category", "other")).strip().lower())
        except ValueError:
            category = Category.OTHER
        key = item.get("key") if isinstance(item.get("key"), str) else ""
        key = key.strip().lower()
        key = key if _KEY_RE.fullmatch(key) else ""
        valence = _clip(item.get("valence"), -1.0, 1.0)
        arousal = _clip(item.get("arousal"), 0.0, 1.0)
        label = item.get("emotion") if item.get("emotion") in LABELS else None
        if valence is None or arousal is None or label is None:
            emo = analyse(text)
            valence = emo.valence if valence is None else valence
            arousal = emo.arousal if arousal is None else arousal
            label = label or emo.label
        importance = _clip(item.get("importance"), 0.0, 1.0)
        if importance is None:
            importance = _importance(category, valence, bool(key), text)
        event_time, event_end = _event_time(item.get("event_time"), text, said_at, tz)
        facts.append(Fact(text=text, category=category, key=key, importance=importance, valence=valence,
                          arousal=arousal, emotion=label, event_time=event_time, source=message, event_end=event_end))
    if items and not facts:
        return None
    return facts


async def _awaited(awaitable: Awaitable[str]) -> str:
    return await awaitable


class LLMExtractor:
    """Facts from an OpenAI-compatible model through ``complete``.

    ``complete(messages) -> str`` (or an awaitable of str): the injected model
    call, e.g. ``ChatModel.complete`` with temperature 0. An awaitable is run on
    ``loop`` when given (the gateway's event loop, from the worker thread that
    runs capture), else in a fresh loop (``asyncio.run``). ``timeout`` seconds
    bound an awaitable call. ``fallback`` (default HeuristicExtractor) answers
    whenever the model cannot: any exception, a timeout, unusable output, or a
    message longer than LLM_MAX_CHARS. The model's facts pass the heuristic's
    filters (first person or, ``addressed``, no other subject; no question,
    greeting, small talk or gateway text) and must be supported by the message
    (``supported_by`` >= SUPPORT_MIN). Never raises.
    """

    def __init__(self, complete: Callable[[list[dict[str, str]]], str | Awaitable[str]], *,
                 fallback: Extractor | None = None, loop: asyncio.AbstractEventLoop | None = None,
                 timeout: float = 30.0) -> None:
        self.complete = complete
        self.fallback = fallback or HeuristicExtractor()
        self.loop = loop
        self.timeout = timeout

    def _call(self, messages: list[dict[str, str]]) -> str:
        result = self.complete(messages)
        if not inspect.isawaitable(result):
            return result
        if self.loop is not None and self.loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not self.loop:
                future = asyncio.run_coroutine_threadsafe(_awaited(result), self.loop)
                try:
                    return future.result(self.timeout)
                except TimeoutError:
                    future.cancel()
                    raise
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(asyncio.wait_for(_awaited(result), self.timeout))
        if inspect.iscoroutine(result):
            result.close()
        raise RuntimeError("LLMExtractor.extract was called on an event-loop thread; run capture in a worker thread")

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ, *, addressed: bool = False) -> list[Fact]:
        cleaned = " ".join(clean_text(text).split())
        if not cleaned:
            return []
        if len(cleaned) > LLM_MAX_CHARS:
            log.info("capture: message of %d chars is extracted by the heuristic", len(cleaned))
            return self.fallback.extract(text, said_at, tz, addressed=addressed)
        try:
            local = said_at.astimezone(zone(tz))
            raw = self._call(extraction_messages(cleaned, local.strftime("%Y-%m-%d %H:%M %A"), str(tz)))
        except Exception as exc:  # noqa: BLE001 - any model failure falls back, the message is never lost
            log.warning("capture: model extraction failed (%s); heuristic used", type(exc).__name__)
            return self.fallback.extract(text, said_at, tz, addressed=addressed)
        try:
            facts = parse_extraction(raw, cleaned, said_at, tz)
        except Exception as exc:  # noqa: BLE001 - an answer that breaks the parser is an unusable one
            log.warning("capture: model answer could not be parsed (%s); heuristic used", type(exc).__name__)
            facts = None
        if facts is None:
            log.warning("capture: model answer unusable (%d chars); heuristic used", len(raw) if isinstance(raw, str) else 0)
            return self.fallback.extract(text, said_at, tz, addressed=addressed)
        # the offline extractor's filters, and the model's words must be those of the message's statements
        # (a question's clause never reaches a write, whatever the model returns)
        told = told_text(cleaned, addressed=addressed)
        kept = [f for f in facts if f.quoted or (is_speaker_statement(f.text, addressed)
                                                  and supported_by(f.text, told) >= SUPPORT_MIN)]
        if len(kept) < len(facts):
            log.info("capture: %d of %d model facts failed the filters (question, greeting, small talk, "
                     "not the speaker, gateway text, not in the message)", len(facts) - len(kept), len(facts))
        return cap_facts(kept)


# -- storing ---------------------------------------------------------------------------


def _memory(core, ns: Namespace, f: Fact, chat: ChatRef | None, said_at: datetime, message_id: str | None,
            context: str = "", metadata: dict | None = None):
    visibility = Visibility.GROUP if (chat is not None and chat.is_group) else Visibility.PRIVATE
    return core.new(ns, f.text, category=f.category, key=f.key, importance=f.importance, valence=f.valence,
                    arousal=f.arousal, emotion=f.emotion, origin=chat, visibility=visibility,
                    source_message_id=message_id, created_at=said_at, event_time=f.event_time,
                    event_end=f.event_end, context=context, **({"metadata": metadata} if metadata else {}))


CONTEXT_WINDOW = timedelta(minutes=30)
"""How long after the companion's line a person's message still counts as its answer."""


def answered_line(line, said_at: datetime, chat: ChatRef | None, *, persona: str = "",
                  window: timedelta = CONTEXT_WINDOW) -> str:
    """The context of a person's message (``Memory.context``) said at ``said_at`` in
    ``chat``: ``line`` — the chat line logged just before it (a
    ``memory.store.ChatLine`` or anything with its ``role``, ``text``, ``at`` and
    ``sender_name``; None when there is none) — as ``"<name>: <text>"`` (the line's
    sender name, else ``persona``, else ``bot``; the text cut to its last
    characters so that the whole is at most ``CONTEXT_CHARS``) when the companion
    said it (role ``bot``) at most ``window`` before, in a private chat (``chat``
    None counts as private); else "". So "Yes, I went with my sister!" after
    "Mochi: Did you go to the pride parade?" is searched with the parade.

    Never another person's line (their words would be kept in somebody else's
    memory), nor the person's own (a memory of its own, which a forget must
    remove whole), nor any line of a group: there the companion's line may
    answer someone else and carry what they said."""
    if chat is not None and chat.is_group:
        return ""
    if line is None or line.role != "bot" or not (line.text or "").strip():
        return ""
    gap = said_at - line.at
    if gap > window or gap < -timedelta(minutes=1):  # a minute of slack: platform and gateway clocks differ
        return ""
    name = line.sender_name or persona or "bot"
    return clip_line(f"{name}: {line.text.strip()}", CONTEXT_CHARS, name)


CONTRADICTION_WINDOW = 100
"""Newest live memories of the namespace a new fact is checked against (memory.contradiction)."""


def _contradicted(core, ns: Namespace, f: Fact, said_at: datetime):
    """``(changed, unsure)``: the live memory of ``ns`` that ``f`` updates or
    contradicts in other words ("I love coffee." → "I hate coffee now.", 我住在上海
    → 我上个月搬到杭州了), and, when there is none, the live memory ``f`` disagrees
    with without a clear change ("I have a car" → "I don't have a car"), each
    judged by ``memory.contradiction.judge`` (the closest topic wins); None for
    either when there is none, and both None when a memory already holds ``f``'s
    key (the slot supersedes it by itself) or ``f`` is a quoted statement. Only
    statements take part: a live memory whose text reads as a question, reaction,
    request or quote (``memory.speech_act.is_claim``; stored before that stage) is
    skipped, and a conflict needs one topic slot and no passing mood on either side
    (``memory.contradiction.may_conflict``). The
    caller revises the first in place (history keeps the old text), or keeps the
    second live and links the new memory to it as a conflict."""
    from memory.contradiction import can_change, judge, may_conflict

    if f.quoted or not can_change(f.text):
        return None, None  # no slot family, polarity, negation, feeling or change verb: nothing to judge
    mood = f.category is Category.MOOD
    best = unsure = None
    for live_id, key, created_at, text in core.store.recent_claims(ns, CONTRADICTION_WINDOW):
        if f.key and key == f.key:
            return None, None
        if created_at is not None and created_at > said_at:
            continue  # a newer statement is not replaced by an older one
        if not is_claim(text):
            continue  # a remark or a question stored before the speech-act stage: no side of a change
        verdict = judge(text, f.text)
        if verdict.changes and (best is None or verdict.overlap > best[0]):
            best = (verdict.overlap, live_id, verdict)
        elif may_conflict(text, f.text, verdict, old_key=key or "", new_key=f.key,
                          mood=mood or (key or "").startswith(f"{Category.MOOD.value}:")) \
                and (unsure is None or verdict.overlap > unsure[0]):
            unsure = (verdict.overlap, live_id, verdict)
    if best is None and unsure is None:
        return None, None
    overlap, live_id, verdict = best or unsure  # type: ignore[misc]
    live = core.get(ns, live_id)
    log.info("capture %s: new fact %s memory %s (%s, topic overlap %.2f)", ns, verdict.kind, live.id,
             verdict.family or "-", overlap)
    return (live, None) if best is not None else (None, live)


def _corrected(core, ns: Namespace, f: Fact, said_at: datetime, tz: str):
    """``(live, fact)`` for a correction ``f`` (``f.extra["corrects"] = (wrong,
    right)``, ``HeuristicExtractor.reading_fact``): the newest live memory of
    ``ns`` said before ``said_at`` whose text names ``wrong`` (compared
    normalised: case, width, traditional folded), and the fact of that memory's
    text with ``wrong`` replaced by ``right`` (「我在上海读研」 → 「我在南京读研」),
    which capture stores as the memory's new version (its history keeps the old).
    None when ``f`` is no correction, names no ``wrong``, or no memory holds it:
    the correction is then stored as it was said."""
    wrong, right = f.extra.get("corrects", ("", ""))
    if not wrong or not right:
        return None
    for live_id, _key, created_at, text in core.store.recent_claims(ns, CONTRADICTION_WINDOW):
        if created_at is not None and created_at > said_at:
            continue
        for form in (text, to_simplified(text)):
            new, n = re.subn(re.escape(wrong), lambda _m: right, form, count=1, flags=re.I)
            if n:
                fact = HeuristicExtractor.sentence_fact(new, said_at, tz, addressed=True, continued=True)
                if fact is None:
                    return None
                log.info("capture %s: a correction revises memory %s", ns, live_id)
                return core.get(ns, live_id), replace(fact, source=f.source)
    return None


def _addressed(chat: ChatRef | None, addressed: bool | None) -> bool:
    return (chat is None or not chat.is_group) if addressed is None else addressed


def _weaker_than_live(core, ns: Namespace, f: Fact):
    """An ``AddResult("rejected", None, "weaker")`` when ``f`` is an identity slot
    (IDENTITY_KEYS) read less firmly than the live memory holding that slot ("叫我
    小杰就行" after "我叫阿杰"); None when ``f`` may be added."""
    if f.key not in IDENTITY_KEYS:
        return None
    live = core.store.find_by_key(ns, f.key)
    if live is None:
        return None
    new = f.extra.get("strength", 2)
    if reading_strength(live.text, f.key) <= new:
        return None
    from memory.core import AddResult

    log.info("capture %s: %s kept; a weaker reading (%d) does not replace memory %s", ns, f.key, new, live.id)
    return AddResult("rejected", None, "weaker")


# -- an elliptical answer to the companion's question -----------------------------
# companion 「你们团队有多少人？」 → person 「八个人左右，都挺好相处的。」: no subject, no 我, yet the
# person's fact, read with the question it answers (kept as the memory's context).


def answer_facts(text: str, context: str, said_at: datetime, tz: str = DEFAULT_TZ,
                 skip: Sequence[str] = ()) -> list[Fact]:
    """The facts of ``text`` read as an elliptical answer to the companion's question
    in ``context`` (``answered_line``'s ``"<name>: <line>"``): when the line ends
    by asking the person about themselves (a question with 你/您/you, not an offer
    such as 「要不要我给你讲个笑话？」) and ``text`` answers with content of its own
    (not a question, greeting, acknowledgement or small talk, not about the
    companion, two CJK characters or two words once a leading 对/嗯/yes is
    dropped; one word is enough after a question asking for a thing: "Waffles!"
    after "What's your dog's name?"), each of its sentences is a fact (slots,
    category, dates and emotion as for any sentence): 「八个人左右，都挺好相处的。」
    after 「你们团队有多少人？」. ``skip``: sentences already read as facts. ``[]``
    otherwise."""
    least = asks_the_person(context.split(": ", 1)[1] if ": " in context else context)
    if least is None:
        return []
    facts = []
    for sent in split_sentences(clean_text(text), semicolons=True):
        if sent in skip or not answers(sent, least):
            continue
        fact = HeuristicExtractor.sentence_fact(sent[:MAX_FACT_CHARS], said_at, tz, continued=True)
        if fact is not None:
            facts.append(fact)
    return cap_facts(facts)


def capture(core, ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime,
            message_id: str | None = None, extractor: Extractor | None = None, tz: str = DEFAULT_TZ,
            addressed: bool | None = None, own_texts: Sequence[str] = (), context: str = "",
            never_store: Sequence[str] = DEFAULT_NEVER_STORE, evidence_at: datetime | None = None,
            metadata: dict | None = None, facts: list[Fact] | None = None) -> list:
    """Extract facts from the speaker's own ``text`` and add them to ``ns``.

    ``facts``: what ``facts_of`` read from this very call's arguments before (a
    batch reads its messages' facts first to embed them all in one model call),
    used instead of extracting again.

    ``never_store``: the tenant's never-store categories (``memory.never_store``;
    ``ids`` always): each clause in one is dropped before any extractor reads the
    text, and only the counts per category are logged.

    ``said_at``: timezone-aware message time (the evidence time checked against
    tombstones); ``tz``: the tenant's IANA zone for relative dates; ``addressed``:
    said to the bot, so that subject-less statements are the speaker's (None: true
    in a private chat, false in a group); ``own_texts``: the tenant's own prompt
    texts (persona), never captured when echoed (``is_gateway_text``); ``context``:
    the line ``text`` answered (``answered_line``), kept with each fact
    (``Memory.context``) and searched with it; ``evidence_at``: when the evidence
    was said, compared with tombstones and live versions (default ``said_at``: an
    import whose source kept no time passes the epoch, so nothing forgotten comes
    back); ``metadata``: tags kept with each memory (``memory.metadata``: an
    import's provenance). Visibility
    follows the chat (group → GROUP with the group as origin, else PRIVATE).
    Returns the ``AddResult`` of each fact (stored / deduped / superseded /
    conflict / rejected; reason ``weaker`` when an identity slot would be
    replaced by a weaker reading, see IDENTITY_KEYS; ``revised`` when the fact
    updates or contradicts a live memory in other words, ``memory.contradiction``:
    that memory takes the new text, its history keeps the old one). A fact that
    disagrees with a live memory without a clear change (the judge's unsure
    band) is stored beside it and linked to it as a conflict
    (``MemoryCore.add(conflicts_with=…)``), which the recollection tells as a change.
    """
    if own_texts:
        text = without_gateway_text(text, own_texts)
    text = _kept(ns, text, never_store, quiet=facts is not None)
    if not text:
        return []
    if facts is None:
        facts = _extracted(text, chat=chat, said_at=said_at, extractor=extractor, tz=tz, addressed=addressed,
                           context=context)
        # the facts' vectors in one model call before their SQL writes (MemoryCore.embed_first; a credential never)
        core.embed_first([f.text for f in facts if not holds_secret(f.text)])
    results = []
    for f in facts:
        if holds_secret(f.text):
            from memory.core import AddResult

            log.info("capture %s: a fact holding a credential was left out", ns)
            results.append(AddResult("rejected", None, "secret"))
            continue
        weaker = _weaker_than_live(core, ns, f)
        if weaker is not None:
            results.append(weaker)
            continue
        old, unsure = _contradicted(core, ns, f, said_at)
        corrected = _corrected(core, ns, f, said_at, tz)
        if corrected is not None:  # 「说错了，不是上海，是南京」: the fact it corrects, in its new version
            old, unsure, f = corrected[0], None, corrected[1]
        elif not f.extra.get("as_said", True):
            continue  # a correction of nothing held, which the reading before the stage did not keep either
        results.append(core.add(ns, _memory(core, ns, f, chat, said_at, message_id, context, metadata),
                                said_at=evidence_at or said_at,
                                evidence=f.source or text, replaces=old.id if old is not None else None,
                                conflicts_with=unsure.id if unsure is not None else None))
    if results:
        log.info("capture %s: %s", ns, ",".join(r.action for r in results))
    return results


def facts_of(ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime,
             extractor: Extractor | None = None, tz: str = DEFAULT_TZ, addressed: bool | None = None,
             own_texts: Sequence[str] = (), context: str = "",
             never_store: Sequence[str] = DEFAULT_NEVER_STORE) -> list[Fact]:
    """The facts ``capture`` with the same arguments would add, read without
    writing anything (a batch's messages first, to embed all their facts in one
    model call: ``MemoryCore.embed_first``; then ``capture(facts=…)``)."""
    if own_texts:
        text = without_gateway_text(text, own_texts)
    text = _kept(ns, text, never_store)
    if not text:
        return []
    return _extracted(text, chat=chat, said_at=said_at, extractor=extractor, tz=tz, addressed=addressed,
                      context=context)


def _extracted(text: str, *, chat: ChatRef | None, said_at: datetime, extractor: Extractor | None, tz: str,
               addressed: bool | None, context: str) -> list[Fact]:
    extractor = extractor or HeuristicExtractor()
    facts = extractor.extract(text, said_at, tz, addressed=_addressed(chat, addressed))
    if context:  # "八个人左右" after "你们团队有多少人？": an answer, read with its question
        facts = cap_facts(facts + answer_facts(text, context, said_at, tz, skip=[f.source for f in facts]))
    return facts


def _kept(ns: Namespace, text: str, never_store: Sequence[str], *, quiet: bool = False) -> str:
    """``text`` less its never-store clauses (``memory.never_store``), the drop logged as counts only
    (``quiet``: not again, ``facts_of`` did)."""
    kept, dropped = without_never_store(text, never_store)
    if dropped and not quiet:
        log.info("capture %s: %d clause(s) left out before extraction (never-store %s)", ns, sum(dropped.values()),
                 ",".join(sorted(dropped)))
    return kept


def capture_edit(core, ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime, message_id: str,
                 extractor: Extractor | None = None, tz: str = DEFAULT_TZ, addressed: bool | None = None,
                 context: str = "", never_store: Sequence[str] = DEFAULT_NEVER_STORE) -> list:
    """Apply an edited message to the memories of ``ns`` derived from it (same chat,
    same ``message_id``; ``context``: the line the message answered, as in ``capture``).

    Each new fact whose key a derived memory holds updates that memory (a new
    version, or nothing when unchanged); another new fact revises a remaining
    derived memory of its category in place (same id, version + 1, new key), or
    is stored as new; derived memories the edit no longer supports are
    retracted. ``said_at`` is the original message time (edits do not make old
    evidence new: tombstones still refuse it). Returns the AddResults of the new
    facts.
    """
    from memory.core import default_key

    extractor = extractor or HeuristicExtractor()
    text = _kept(ns, text, never_store)  # a never-store clause edited in teaches nothing either
    remaining = core.store.find_by_source(ns, chat, message_id)
    mems = [(f, _memory(core, ns, f, chat, said_at, message_id, context))
            for f in extractor.extract(text, said_at, tz, addressed=_addressed(chat, addressed))]
    pairs: list[tuple[str, str | None]] = [("new", None)] * len(mems)
    for i, (_f, mem) in enumerate(mems):  # first: the same key
        key = mem.key or default_key(mem)
        same = next((d for d in remaining if d.key == key), None)
        if same is not None:
            remaining.remove(same)
            pairs[i] = ("same", same.id)
    for i, (_f, mem) in enumerate(mems):  # then: a changed statement of the same category
        if pairs[i][0] == "new":
            other = next((d for d in remaining if d.category is mem.category), None)
            if other is not None:
                remaining.remove(other)
                pairs[i] = ("revise", other.id)
    results = [core.add(ns, mem, said_at=said_at, evidence=f.source or text, actor="edit",
                        replaces=target if how == "revise" else None)
               for (f, mem), (how, target) in zip(mems, pairs)]
    derived = remaining
    kept = {r.memory.id for r in results if r.memory is not None}
    for old in derived:
        if old.id not in kept:
            core.retract(ns, old.id, actor="edit")
    log.info("capture edit %s message %s: %s; %d retracted", ns, message_id,
             ",".join(r.action for r in results) or "-", len([o for o in derived if o.id not in kept]))
    return results


# -- adminchat (issue 26 item 18): a memory edited by hand is read again ------------------


@dataclass(frozen=True, slots=True)
class EditReading:
    """What a hand-edited memory text is about (``edit_reading``): ``category``
    (None: keep the memory's), ``key`` ("" → the core's ``default_key`` of the new
    text), ``importance`` in [0, 1] and the emotion — ``valence`` in [-1, 1],
    ``arousal`` in [0, 1], ``emotion`` a ``memory.emotion.LABELS`` label — each
    None to keep the memory's."""

    category: Category | None
    key: str
    importance: float | None = None
    valence: float | None = None
    arousal: float | None = None
    emotion: str | None = None


def edit_reading(text: str, current_key: str, tz: str = DEFAULT_TZ) -> EditReading:
    """What a hand-edited memory ``text`` is about, read as capture reads a
    sentence (``HeuristicExtractor.sentence_fact``, as if addressed to the bot, so
    a subject-less "住在杭州" counts): a slot it fills → that slot's category and
    key ("我住在上海" → profile, ``home.city``); else its keyword category
    (``guess_category``; mood when emotional, event when it names a day) and key
    "" (the default key of the new text); importance and emotion as capture gives
    them. A consolidated memory (key ``consolidated:<type>:…``) keeps its
    category, type, importance and emotion; its key is made from the new text.
    ``current_key``: the memory's key now."""
    from memory.consolidate import KEY_PREFIX
    from memory.core import KEY_CHARS
    from memory.store import utcnow

    if current_key.startswith(KEY_PREFIX):
        ctype = current_key[len(KEY_PREFIX):].split(":", 1)[0]
        return EditReading(None, f"{KEY_PREFIX}{ctype}:{normalise(text)}"[:KEY_CHARS])
    fact = HeuristicExtractor.sentence_fact(text, utcnow(), tz, addressed=True, continued=True)
    if fact is None or fact.quoted:  # too short to be a statement, or kept only as a quote
        emo = analyse(text)
        category = guess_category(to_simplified(text))
        return EditReading(category, "", _importance(category, emo.valence, False, text), emo.valence, emo.arousal,
                           emo.label)
    return EditReading(fact.category, fact.key, fact.importance, fact.valence, fact.arousal, fact.emotion)


def edit(core, ns: Namespace, memory_id: str, text: str, *, actor: str, tz: str = DEFAULT_TZ):
    """Edit memory ``memory_id`` of ``ns`` by hand (``/memory edit``, ``PATCH
    /v1/…/memories/{id}``): a new version with ``text`` whose category, canonical
    key, importance and emotion are read from that text (``edit_reading``), so
    that a later capture of the old text is not taken for this memory, nor the
    new text for another one. Returns the live Memory. Raises what
    ``MemoryCore.update`` raises: NotFoundError, KeyTakenError (another memory
    already holds what the text says; nothing written)."""
    r = edit_reading(text, core.get(ns, memory_id).key, tz)
    emotion = None if r.emotion is None else (r.valence, r.arousal, r.emotion)
    return core.update(ns, memory_id, text, actor=actor, category=r.category, key=r.key, importance=r.importance,
                       emotion=emotion)
# -- end adminchat --
