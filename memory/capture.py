"""Capture: turn a person's own message into memories of their namespace.

The seam is ``Extractor``: ``extract(text, said_at) -> list[Fact]``. The
heuristic extractor here keeps first-person statements (zh + en) and guesses a
category from keywords; the lifecycle work adds slots, emotion and an LLM
extractor behind the same seam.

Only the speaker's own text reaches capture: the bot's replies, injected
recollections and quoted messages of other people are never passed here
(DESIGN rule 7), and the pipeline does not capture commands.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from memory.types import Category, ChatRef, Namespace, Visibility

__all__ = ["Fact", "Extractor", "HeuristicExtractor", "capture", "split_sentences"]

log = logging.getLogger(__name__)

_SENT_RE = re.compile(r"(?<=[。！？!?；;\n])|(?<=\.)\s+")
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
    (Category.ROUTINE, re.compile(r"每天|每周|每晚|每早|经常|总是|习惯|\bevery (day|week|morning|night)\b|\busually\b|\balways\b", re.I)),
    (Category.EVENT, re.compile(r"明天|昨天|今天|上周|下周|周末|下个月|去年|刚刚|考试|面试|旅行|搬家|"
                                r"\btomorrow\b|\byesterday\b|\btoday\b|\bnext week\b|\blast week\b|\bweekend\b", re.I)),
    (Category.MOOD, re.compile(r"开心|难过|伤心|焦虑|累|烦|生气|孤独|害怕|紧张|"
                               r"\bhappy\b|\bsad\b|\banxious\b|\btired\b|\bangry\b|\blonely\b|\bscared\b|\bstressed\b", re.I)),
)

MIN_CHARS = 2
MAX_FACT_CHARS = 500


@dataclass(frozen=True, slots=True)
class Fact:
    """One extracted statement about the speaker. importance, valence, arousal as
    in ``memory.types.Memory``; ``key`` empty → category + normalised text."""

    text: str
    category: Category = Category.OTHER
    key: str = ""
    importance: float = 0.5
    valence: float = 0.0
    arousal: float = 0.0
    emotion: str = "neutral"
    event_time: datetime | None = None
    extra: dict = field(default_factory=dict)


class Extractor(Protocol):
    """Turns one message into facts about its speaker. Never raises on odd text."""

    def extract(self, text: str, said_at: datetime) -> list[Fact]: ...


def split_sentences(text: str) -> list[str]:
    """Split on sentence-final punctuation (zh and en) and newlines; empty parts dropped."""
    return [s.strip() for s in _SENT_RE.split(text) if s and s.strip()]


def guess_category(sentence: str) -> Category:
    """First matching keyword group, else OTHER."""
    for cat, pat in _CATEGORY_WORDS:
        if pat.search(sentence):
            return cat
    return Category.OTHER


class HeuristicExtractor:
    """Offline extractor: first-person, non-question sentences of at least
    MIN_CHARS characters; long sentences are cut at MAX_FACT_CHARS."""

    def extract(self, text: str, said_at: datetime) -> list[Fact]:
        facts: list[Fact] = []
        for sent in split_sentences(text or ""):
            if len(sent) < MIN_CHARS or sent.startswith("/"):
                continue
            if not (_FIRST_ZH.search(sent) or _FIRST_EN.search(sent)):
                continue
            if _QUESTION_RE.search(sent):
                continue
            facts.append(Fact(text=sent[:MAX_FACT_CHARS], category=guess_category(sent)))
        return facts


def capture(core, ns: Namespace, text: str, *, chat: ChatRef | None, said_at: datetime,
            message_id: str | None = None, extractor: Extractor | None = None) -> list:
    """Extract facts from the speaker's own ``text`` and add them to ``ns``.

    Visibility follows the chat (group → GROUP with the group as origin, else
    PRIVATE). Returns the ``AddResult`` of each fact (stored / deduped /
    superseded / rejected).
    """
    extractor = extractor or HeuristicExtractor()
    facts = extractor.extract(text, said_at)
    results = []
    visibility = Visibility.GROUP if (chat is not None and chat.is_group) else Visibility.PRIVATE
    for f in facts:
        mem = core.new(ns, f.text, category=f.category, key=f.key, importance=f.importance, valence=f.valence,
                       arousal=f.arousal, emotion=f.emotion, origin=chat, visibility=visibility,
                       source_message_id=message_id, created_at=said_at, event_time=f.event_time)
        results.append(core.add(ns, mem, said_at=said_at))
    if results:
        log.info("capture %s: %s", ns, ",".join(r.action for r in results))
    return results
