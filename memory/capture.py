"""Capture: turn a person's own message into memories of their namespace.

The seam is ``Extractor``: ``extract(text, said_at, tz) -> list[Fact]``, never
raising on odd text. Two implementations:

- ``HeuristicExtractor`` — offline, always available: first-person, non-question
  sentences in Chinese and English. It recognises canonical slots (``profile.name``
  from "我叫阿杰"/"my name is…", ``pet.cat.name``, ``drink.favorite``,
  ``person.小美.relation``, ``like.猫``, ``home.city``, ``profile.job`` …), guesses
  a category from keywords, resolves relative dates ("明天", "下周五",
  "tomorrow") against the message time in the tenant's time zone
  (``memory.dates``), and takes emotion from ``memory.emotion.analyse``.
- ``LLMExtractor`` — an OpenAI-compatible model asked for JSON facts (category,
  key, importance, valence, arousal, emotion, event time; prompt in
  ``memory.model_prompts``) through an injected callable. Malformed, truncated or
  non-JSON output, Chinese text with broken escapes, a timeout or a transport
  error all fall back to the heuristic result: never an error, never a lost
  message. Emotion comes from the model's answer (no extra call); a fact it
  gives none for is analysed by the lexicon.

What is never captured as a fact about the speaker (DESIGN rule 7): the bot's
replies and injected recollections (the pipeline passes only the person's own
text, and ``<recollection>`` blocks pasted into it are dropped), lines quoted
with ``>``, and speech quoted from someone else ("她说“我喜欢猫”"). Text that
tries to act as instructions ("忽略之前的设定", "ignore previous instructions",
``system:``/``<|im_start|>`` role tags) is kept only as a quoted statement
(``「…」``, escaped, category ``other``, low importance) — and is escaped again
by ``memory.model_prompts.escape_block`` when it reaches a prompt.

Long messages: sentences longer than ``MAX_FACT_CHARS`` are split at clause
breaks (then hard-split), so no fact reaches the embedder over its limit
(``memory.embed.MAX_CHARS``); at most ``MAX_FACTS`` facts per message.

``capture`` stores the facts of a new message; ``capture_edit`` applies an
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from typing import Protocol

from memory.dates import DEFAULT_TZ, resolve_when, zone
from memory.emotion import LABELS, analyse
from memory.model_prompts import escape_block, extraction_messages
from memory.text import normalise, split_sentences, to_simplified
from memory.types import Category, ChatRef, Namespace, Visibility, repair_tree

__all__ = [
    "Fact",
    "Extractor",
    "HeuristicExtractor",
    "LLMExtractor",
    "capture",
    "capture_edit",
    "clean_text",
    "guess_category",
    "is_instruction_like",
    "parse_extraction",
    "MAX_FACT_CHARS",
    "MAX_FACTS",
]

log = logging.getLogger(__name__)

MIN_CHARS = 2
MAX_FACT_CHARS = 300
MAX_FACTS = 24
LLM_MAX_CHARS = 4000

_FIRST_ZH = re.compile(r"我|咱|本人")
_FIRST_EN = re.compile(r"\b(i|i'm|i've|i'd|i'll|im|my|me|mine|myself)\b", re.IGNORECASE)
_QUESTION_RE = re.compile(r"([?？]\s*$)|([吗呢么嘛]\s*[。!！~～]*\s*$)")

_CATEGORY_WORDS: tuple[tuple[Category, re.Pattern[str]], ...] = (
    (Category.PROFILE, re.compile(r"我叫|名字|我是|我今年|岁|生日|住在|老家|工作|上班|职业|学生|毕业|"
                                  r"\bmy name\b|\bi am a\b|\bi'm a\b|\bi live\b|\bi work\b|\bbirthday\b|\byears old\b", re.I)),
    (Category.PREFERENCE, re.compile(r"喜欢|爱吃|爱喝|爱看|讨厌|不喜欢|最爱|偏爱|受不了|"
                                     r"\blike\b|\blove\b|\bhate\b|\bfavou?rite\b|\bprefer\b|\benjoy\b", re.I)),
    (Category.RELATIONSHIP, re.compile(r"妈妈|爸爸|父母|老婆|老公|女朋友|男朋友|对象|孩子|儿子|女儿|哥哥|姐姐|弟弟|妹妹|朋友|同事|"
                                       r"猫|狗|宠物|\bmom\b|\bdad\b|\bwife\b|\bhusband\b|\bgirlfriend\b|\bboyfriend\b|"
                                       r"\bkids?\b|\bson\b|\bdaughter\b|\bfriend\b|\bcat\b|\bdog\b|\bpet\b", re.I)),
    (Category.ROUTINE, re.compile(r"每天|每周|每晚|每早|经常|(?<!非)常(?!识)|总是|习惯|平时|\bevery (day|week|morning|night)\b|"
                                  r"\busually\b|\balways\b|\boften\b", re.I)),
    (Category.EVENT, re.compile(r"明天|昨天|今天|上周|下周|周末|下个月|去年|刚刚|考试|面试|旅行|搬家|"
                                r"\btomorrow\b|\byesterday\b|\btoday\b|\bnext week\b|\blast week\b|\bweekend\b", re.I)),
    (Category.MOOD, re.compile(r"开心|难过|伤心|焦虑|累|烦|生气|孤独|害怕|紧张|"
                               r"\bhappy\b|\bsad\b|\banxious\b|\btired\b|\bangry\b|\blonely\b|\bscared\b|\bstressed\b", re.I)),
)
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
_INSTRUCTION_RE = re.compile(
    r"(忽略|无视|忘记|忘掉|不要理会|别管)\s*(你?之前|以上|上面|前面|所有|一切|你的)?\s*的?\s*(所有|全部)?\s*"
    r"(设定|指令|指示|提示词?|规则|要求|人设|系统|限制)"
    r"|(从现在(开始|起)|现在起)\s*你(是|就是|要|必须)|你现在是|你不再是|你来?扮演|进入开发者模式|越狱|系统提示|提示词注入"
    r"|\b(ignore|disregard|forget)\b\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|preceding|system)?\s*"
    r"(instructions?|prompts?|rules|directions|guidelines)"
    r"|\byou are now\b|\bfrom now on,? you\b|\bpretend you are\b|\bnew instructions?\b"
    r"|\bsystem prompt\b|\bjailbreak\b|\bdeveloper mode\b"
    r"|<\|?\s*(system|im_start|im_end|assistant|user|endoftext)\s*\|?>|\[/?\s*(system|inst)\s*\]|<<\s*/?sys\s*>>"
    r"|(^|\n)\s*(system|assistant|developer)\s*[:：]"
    r"|<\s*/?\s*recollection\s*>", re.I)

# -- slots: (pattern, category, key builder) -----------------------------------

_NAME_STOP = "了过着他她你您们的人车饭外卖是不醒"
_ZH_VALUE = r"[^\s，,。.！!？?；;、：:“”\"'（）()]{1,12}"
_SPECIES = {"猫": "cat", "猫咪": "cat", "小猫": "cat", "黑猫": "cat", "白猫": "cat", "橘猫": "cat", "狗": "dog",
            "狗狗": "dog", "小狗": "dog", "仓鼠": "hamster", "兔子": "rabbit", "鹦鹉": "parrot", "乌龟": "turtle",
            "金鱼": "fish", "鱼": "fish", "cat": "cat", "kitten": "cat", "dog": "dog", "puppy": "dog",
            "hamster": "hamster", "rabbit": "rabbit", "bunny": "rabbit", "parrot": "parrot", "turtle": "turtle",
            "fish": "fish"}
_ZH_PETS = "|".join(sorted((k for k in _SPECIES if not k.isascii()), key=len, reverse=True))
_EN_PETS = "|".join(k for k in _SPECIES if k.isascii())
_THINGS = {"饮料": "drink", "喝的": "drink", "食物": "food", "吃的": "food", "菜": "food", "颜色": "color",
           "电影": "movie", "歌": "song", "歌曲": "song", "歌手": "singer", "书": "book", "运动": "sport",
           "动物": "animal", "水果": "fruit", "游戏": "game", "季节": "season", "城市": "city", "明星": "star",
           "乐队": "band", "作家": "author", "演员": "actor", "drink": "drink", "food": "food", "color": "color",
           "colour": "color", "movie": "movie", "film": "movie", "song": "song", "singer": "singer", "book": "book",
           "sport": "sport", "animal": "animal", "fruit": "fruit", "game": "game", "season": "season",
           "city": "city", "band": "band", "author": "author", "actor": "actor"}
_ZH_RELATIONS = ("前女友|前男友|女朋友|男朋友|老婆|老公|妻子|丈夫|妈妈|母亲|爸爸|父亲|哥哥|姐姐|弟弟|妹妹|"
                 "好朋友|朋友|闺蜜|同事|老板|室友|同学|对象|儿子|女儿")
_EN_RELATIONS = ("ex-girlfriend|ex-boyfriend|girlfriend|boyfriend|wife|husband|mom|mother|dad|father|sister|"
                 "brother|best friend|friend|boss|roommate|colleague|son|daughter|partner")
_JOB_SUFFIX = (r"(?:师|员|生|家|工|手|者|士|长|警|官|主播|博主|老板|会计|护士|医生|律师|记者|司机|厨师|"
               r"模特|保安|快递|外卖小哥|程序猿)")

_SLOTS: tuple[tuple[re.Pattern[str], Category, Callable[[re.Match[str]], str | None]], ...] = (
    # favourites before likes: 我最喜欢的饮料是… / my favourite drink is …
    (re.compile(r"我最(?:喜欢|爱)的(?P<t>[\u4e00-\u9fff]{1,4})是(?P<v>" + _ZH_VALUE + ")"), Category.PREFERENCE,
     lambda m: f"{_THINGS.get(m['t'], m['t'])}.favorite"),
    (re.compile(r"我最爱(?P<t>喝|吃)(?P<v>" + _ZH_VALUE + ")"), Category.PREFERENCE,
     lambda m: "drink.favorite" if m["t"] == "喝" else "food.favorite"),
    (re.compile(r"\bmy fav(?:ou?rite)? (?P<t>[a-z]+) is (?P<v>[^.,!?;]{1,40})", re.I), Category.PREFERENCE,
     lambda m: f"{_THINGS.get(m['t'].lower(), m['t'].lower())}.favorite"),
    # names
    (re.compile(r"我(?:的名字)?叫(?![" + _NAME_STOP + r"])(?P<v>" + _ZH_VALUE + ")|我的名字是(?P<v2>" + _ZH_VALUE + ")"),
     Category.PROFILE, lambda m: "profile.name"),
    (re.compile(r"\bmy name is (?P<v>[A-Za-z][\w'-]*)|\b(?:call me|i'?m called) (?P<v2>[A-Za-z][\w'-]*)", re.I),
     Category.PROFILE, lambda m: "profile.name"),
    # pets
    (re.compile(r"我(?:的|家的?|养的)?(?P<s>" + _ZH_PETS + r")(?:的名字)?叫(?P<v>" + _ZH_VALUE + ")"),
     Category.RELATIONSHIP, lambda m: f"pet.{_SPECIES[m['s']]}.name"),
    (re.compile(r"我养了?(?:一|两|几)?[只条个]叫(?P<v>[^\s，,。的]{1,8})的(?P<s>" + _ZH_PETS + ")"),
     Category.RELATIONSHIP, lambda m: f"pet.{_SPECIES[m['s']]}.name"),
    (re.compile(r"\bmy (?P<s>" + _EN_PETS + r")(?:'s name is| is called| is named| named) (?P<v>[A-Za-z][\w'-]*)"
                r"|\bi have an? (?P<s2>" + _EN_PETS + r") (?:called|named) (?P<v2>[A-Za-z][\w'-]*)", re.I),
     Category.RELATIONSHIP, lambda m: f"pet.{_SPECIES[(m['s'] or m['s2']).lower()]}.name"),
    # people
    (re.compile(r"(?:^|(?<=[\s，,。！!？?：:]))(?P<v>[\u4e00-\u9fff]{1,4}|[A-Z][a-z]+)是我(?:的)?(?P<r>" + _ZH_RELATIONS + ")"),
     Category.RELATIONSHIP, lambda m: None if m["v"].startswith(("他", "她", "你", "这", "那", "我")) else
     f"person.{m['v']}.relation"),
    (re.compile(r"我(?:的)?(?P<r>" + _ZH_RELATIONS + r")叫(?P<v>" + _ZH_VALUE + ")"),
     Category.RELATIONSHIP, lambda m: f"person.{m['v']}.relation"),
    (re.compile(r"\bmy (?P<r>" + _EN_RELATIONS + r")(?:'s name is| is called| is named| named) (?P<v>[A-Z][\w'-]*)"
                r"|\b(?P<v2>[A-Z][a-z]+) is my (?P<r2>" + _EN_RELATIONS + r")\b", re.I),
     Category.RELATIONSHIP, lambda m: f"person.{m['v'] or m['v2']}.relation"),
    # age, birthday, job, places
    (re.compile(r"我今年(?P<v>\d{1,3}|[一二两三四五六七八九十]{1,3})岁|\bi'?m (?P<v2>\d{1,3}) years old|"
                r"\bi am (?P<v3>\d{1,3}) years old", re.I), Category.PROFILE, lambda m: "profile.age"),
    (re.compile(r"我的生日是|我生日是|\bmy birthday is\b", re.I), Category.PROFILE, lambda m: "profile.birthday"),
    (re.compile(r"我(?:的工作|的职业)是|我是(?:一名|一个|个)?[\u4e00-\u9fffA-Za-z]{0,8}?" + _JOB_SUFFIX +
                r"(?:[，,。!！~]|$)|\bi work as an?\b|\bmy job is\b", re.I), Category.PROFILE, lambda m: "profile.job"),
    (re.compile(r"我在(?P<v>[^\s，,。]{2,20}?)(?:工作|上班)|\bi work (?:at|for) (?P<v2>[^.,!?;]{2,40})", re.I),
     Category.PROFILE, lambda m: "work.place"),
    (re.compile(r"我(?:现在)?住在|\bi live in\b", re.I), Category.PROFILE, lambda m: "home.city"),
    (re.compile(r"我(?:的)?老家(?:是|在)|我是(?![个一好坏男女老大小普穷有这那什])(?:[\u4e00-\u9fff]{2,4})人(?:[，,。!！]|$)|\bi'?m from\b|\bi am from\b", re.I),
     Category.PROFILE, lambda m: "profile.hometown"),
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
    midnight of the day named).
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
    extra: dict = field(default_factory=dict)


class Extractor(Protocol):
    """Turns one message into facts about its speaker. Never raises on odd text.

    ``said_at``: timezone-aware message time; ``tz``: IANA zone of the tenant in
    which relative dates are resolved.
    """

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ) -> list[Fact]: ...


def _sentences(text: str) -> list[str]:
    """Candidate fact sentences: split also at semicolons, none over MAX_FACT_CHARS."""
    return split_sentences(text, semicolons=True, max_chars=MAX_FACT_CHARS)


def guess_category(sentence: str) -> Category:
    """First matching keyword group, else OTHER."""
    for cat, pat in _CATEGORY_WORDS:
        if pat.search(sentence):
            return cat
    return Category.OTHER


def is_instruction_like(text: str) -> bool:
    """True when ``text`` tries to act as instructions to the model (jailbreak
    phrases in zh/en, fake role tags, recollection tags)."""
    return bool(_INSTRUCTION_RE.search(text or ""))


def clean_text(text: str) -> str:
    """The speaker's own words of a message: pasted ``<recollection>`` blocks,
    ``>``-quoted lines and speech quoted from someone else (after 说/said/told me…)
    are removed (the quote becomes "…")."""
    text = _RECOLLECTION_BLOCK_RE.sub(" ", text or "")
    text = _QUOTE_LINE_RE.sub("", text)
    return _SPEECH_QUOTE_RE.sub(lambda m: f"{m.group(1)}…", text)


def _quoted(sentence: str) -> str:
    return "「" + escape_block(" ".join(sentence.split())).replace("「", "『").replace("」", "』") + "」"


def _importance(category: Category, valence: float, slotted: bool, sentence: str) -> float:
    value = _BASE_IMPORTANCE[category] + (0.1 if slotted else 0.0) + 0.2 * abs(valence)
    if _IMPORTANT_RE.search(sentence):
        value += 0.2
    return round(min(1.0, value), 3)


def _slot(sentence: str) -> tuple[Category, str] | None:
    for pattern, category, build in _SLOTS:
        m = pattern.search(sentence)
        if m is None:
            continue
        key = build(m)
        if key:
            return category, key[:200]
    return None


def _date_suffix(sentence: str, day: date) -> str:
    return f"{sentence}（{day.isoformat()}）" if any("\u4e00" <= c <= "\u9fff" for c in sentence) \
        else f"{sentence} ({day.isoformat()})"


class HeuristicExtractor:
    """Offline extractor: first-person, non-question sentences of at least
    MIN_CHARS characters, with slots, category, importance, emotion and dates
    (see the module docstring). Deterministic and pure."""

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ) -> list[Fact]:
        facts: list[Fact] = []
        for sent in _sentences(clean_text(text)):
            if len(facts) >= MAX_FACTS:
                log.info("capture: message has more than %d facts; the rest stays in the chat log only", MAX_FACTS)
                break
            fact = self.sentence_fact(sent, said_at, tz)
            if fact is not None:
                facts.append(fact)
        return facts

    @staticmethod
    def sentence_fact(sent: str, said_at: datetime, tz: str = DEFAULT_TZ) -> Fact | None:
        """The fact of one sentence, or None when it is not a first-person statement."""
        if len(sent) < MIN_CHARS or sent.startswith("/"):
            return None
        plain = to_simplified(sent)  # the patterns are written in simplified Chinese; the memory keeps the original
        if not (_FIRST_ZH.search(plain) or _FIRST_EN.search(plain)):
            return None
        if _QUESTION_RE.search(plain):
            return None
        if is_instruction_like(sent):
            return Fact(text=_quoted(sent), category=Category.OTHER, importance=0.1, source=sent, quoted=True)
        emo = analyse(sent)
        slot = _slot(plain)
        text, event_time = sent, None
        if slot is not None:
            category, key = slot
        else:
            key = ""
            category = guess_category(plain)
            if category is not Category.ROUTINE and not _ROUTINE_RE.search(plain):
                try:
                    when = resolve_when(plain, said_at, tz)
                except ValueError:
                    when = None
                if when is not None:
                    event_time = when.at
                    if category in (Category.OTHER, Category.MOOD, Category.EVENT):
                        category = Category.EVENT
                    if when.relative:
                        text = _date_suffix(sent, when.day)
            if category is Category.OTHER and emo.intensity >= 0.3:
                category = Category.MOOD
        return Fact(text=text, category=category, key=key, importance=_importance(category, emo.valence, bool(slot), sent),
                    valence=emo.valence, arousal=emo.arousal, emotion=emo.label, event_time=event_time, source=sent)


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


def _event_time(value: object, sentence: str, said_at: datetime, tz: str) -> datetime | None:
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:  # a local day or local time in the tenant's zone
                parsed = datetime.combine(parsed.date(), parsed.time() if len(value.strip()) > 10 else time(0),
                                          tzinfo=zone(tz))
            return parsed.astimezone(timezone.utc)
    try:
        when = resolve_when(sentence, said_at, tz)
    except ValueError:
        return None
    return when.at if when else None


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
    for item in items[:MAX_FACTS]:
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
        facts.append(Fact(text=text, category=category, key=key, importance=importance, valence=valence,
                          arousal=arousal, emotion=label, event_time=_event_time(item.get("event_time"), text, said_at, tz),
                          source=message))
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
    message longer than LLM_MAX_CHARS. Never raises.
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

    def extract(self, text: str, said_at: datetime, tz: str = DEFAULT_TZ) -> list[Fact]:
        cleaned = " ".join(clean_text(text).split())
        if not cleaned:
            return []
        if len(cleaned) > LLM_MAX_CHARS:
            log.info("capture: message of %d chars is extracted by the heuristic", len(cleaned))
            return self.fallback.extract(text, said_at, tz)
        try:
            local = said_at.astimezone(zone(tz))
            raw = self._call(extraction_messages(cleaned, local.strftime("%Y-%m-%d %H:%M %A"), str(tz)))
        except Exception as exc:  # noqa: BLE001 - any model failure falls back, the message is never lost
            log.warning("capture: model extraction failed (%s); heuristic used", type(exc).__name__)
            return self.fallback.extract(text, said_at, tz)
        try:
            facts = parse_extraction(raw, cleaned, said_at, tz)
        except Exception as exc:  # noqa: BLE001 - an answer that breaks the parser is an unusable one
            log.warning("capture: model answer could not be parsed (%s); heuristic used", type(exc).__name__)
            facts = None
        if facts is None:
            log.warning("capture: model answer unusable (%d chars); heuristic used", len(raw) if isinstance(raw, str) else 0)
            return self.fallback.extract(text, said_at, tz)
        return facts


# -- storing ---------------------------------------------------------------------------


def _memory(core, ns: Namespace, f: Fact, chat: ChatRef | None, said_at: datetime, message_id: str | None):
    visibility = Visibility.GROUP if (chat is not None and chat.is_group) else Visibility.PRIVATE
    return core.new(ns, f.text, category=f.category, key=f.key, importance=f.importance, valence=f.valence,
                    arousal=f.arousal, emotion=f.emotion, origin=chat, visibility=visibility,
                    source_message_id=message_id, created_at=said_at, event_time=f.event_time)


def capture(core, ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime,
            message_id: str | None = None, extractor: Extractor | None = None, tz: str = DEFAULT_TZ) -> list:
    """Extract facts from the speaker's own ``text`` and add them to ``ns``.

    ``said_at``: timezone-aware message time (the evidence time checked against
    tombstones); ``tz``: the tenant's IANA zone for relative dates. Visibility
    follows the chat (group → GROUP with the group as origin, else PRIVATE).
    Returns the ``AddResult`` of each fact (stored / deduped / superseded /
    conflict / rejected).
    """
    extractor = extractor or HeuristicExtractor()
    facts = extractor.extract(text, said_at, tz)
    results = [core.add(ns, _memory(core, ns, f, chat, said_at, message_id), said_at=said_at,
                        evidence=f.source or text) for f in facts]
    if results:
        log.info("capture %s: %s", ns, ",".join(r.action for r in results))
    return results


def capture_edit(core, ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime, message_id: str,
                 extractor: Extractor | None = None, tz: str = DEFAULT_TZ) -> list:
    """Apply an edited message to the memories of ``ns`` derived from it (same chat,
    same ``message_id``).

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
    remaining = core.store.find_by_source(ns, chat, message_id)
    mems = [(f, _memory(core, ns, f, chat, said_at, message_id)) for f in extractor.extract(text, said_at, tz)]
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
