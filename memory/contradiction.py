"""Does a new statement change what a live memory says? (issue 12, item 10)

``judge(old, new)`` compares two first-person statements of one person and says
what the new one does to the old one:

- ``update``: the same fact with a new value, or a change said outright — the
  same slot family (where one lives, works, whom one dates, a favourite thing)
  with another value, or a change verb (搬到, 换了, 跳槽, 不再, 分手, moved to,
  switched, no longer, broke up) on the same topic;
- ``contradiction``: the same topic with the opposite polarity ("I love coffee"
  / "I hate coffee now", 「我喜欢猫」/「我不喜欢猫了」);
- ``conflict``: unsure — the middle band between a change and nothing: the
  same topic with a sign of disagreement that is not a clear one (a negation on
  one side only where the polarity words cannot tell the direction, "I have a
  car" / "I don't have a car"; an opposite feeling read by the emotion lexicon
  rather than by a polarity word, 「我喜欢跑步」/「跑步太累了」), or a clear
  sign on a weaker topic match (opposite polarity with an overlap between
  ``CHANGE_OVERLAP`` and ``TOPIC_OVERLAP``, a change verb with an overlap between
  ``CONFLICT_OVERLAP`` and ``CHANGE_OVERLAP``). Capture then keeps both memories
  live and links them as a conflict, which the recollection tells as a change
  (「之前说……，后来说……」);
- ``restatement``: the same topic and polarity, nothing changed;
- ``unrelated``: another topic.

Topic: the statements' content tokens (``memory.text.tokens``: jieba words and
CJK unigrams) without polarity, change, intensity and function words; two
statements share a topic when at least half of the smaller token set is in
the other (overlap coefficient, Szymkiewicz–Simpson; 0.3 when the new one
says outright that something changed). Pure and deterministic;
measured on a labelled set of zh/en pairs by ``python -m bench contradiction``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from memory.emotion import SOFT_VALENCE, analyse
from memory.text import to_simplified, tokens

__all__ = ["Verdict", "judge", "can_change", "may_conflict", "outcome", "CHANGES", "OUTCOMES", "TOPIC_OVERLAP", "CONFLICT_OVERLAP",
           "SOFT_VALENCE"]

TOPIC_OVERLAP = 0.5
"""Least overlap coefficient of two statements' topic tokens for one topic."""
CHANGE_OVERLAP = 0.3
"""The same, when the new statement says outright that something changed (换了, no longer)."""

CONFLICT_OVERLAP = 0.2
"""Least overlap for a change verb on a weak topic match to count as a conflict (below CHANGE_OVERLAP)."""

CHANGES = ("update", "contradiction")
"""Verdicts under which the new statement supersedes the old one."""
OUTCOMES = ("supersede", "conflict", "unrelated")
"""What capture does with a verdict (``outcome``): supersede the old memory, link
both as a conflict, or leave both live and unlinked."""

# slot families: (name, pattern with the value in group v)
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("residence", re.compile(r"(?:住在|住|搬(?:到|去|家到|家去)了?|定居在?)(?P<v>[\u4e00-\u9fffA-Za-z]{2,10}?)(?:了|啦|$|[，,。.!！])"
                             r"|\b(?:live|living|lived) in (?P<v2>[a-z][a-z ]{1,30}?)\b(?:$|[.,!])"
                             r"|\b(?:moved|relocated|moving) to (?P<v3>[a-z][a-z ]{1,30}?)(?: last| this| next|$|[.,!])", re.I)),
    ("work", re.compile(r"在(?P<v>[\u4e00-\u9fffA-Za-z]{2,10}?)(?:上班|工作)|跳槽到(?P<v2>[\u4e00-\u9fffA-Za-z]{2,10}?)(?:了|$|[，,。])"
                        r"|\bwork (?:at|for) (?P<v3>[a-z][a-z ]{1,30}?)(?:$|[.,!])", re.I)),
    ("job", re.compile(r"我(?:现在)?(?:改行)?(?:是|当)(?:一名|一个|个)?(?P<v>[\u4e00-\u9fff]{1,6}?)(?:了|$|[，,。])"
                       r"|\b(?:i'?m|i am) an? (?P<v2>[a-z]+)\b|\bworking as an? (?P<v3>[a-z]+)", re.I)),
    ("partner", re.compile(r"(?:女朋友|男朋友|老婆|老公|对象)(?:叫|是)(?P<v>[\u4e00-\u9fffA-Za-z]{1,6})"
                           r"|(?P<v2>[\u4e00-\u9fffA-Za-z]{1,6})是我(?:的)?(?:女朋友|男朋友|老婆|老公|对象)"
                           r"|\bmy (?:girlfriend|boyfriend|wife|husband|partner) is (?P<v3>[a-z]+)"
                           r"|\b(?P<v4>[a-z]+) is my (?:girlfriend|boyfriend|wife|husband|partner)", re.I)),
    ("favourite", re.compile(r"最(?:喜欢|爱)的(?P<t>[\u4e00-\u9fff]{1,4}?)(?:现在)?是(?P<v>[\u4e00-\u9fffA-Za-z]{1,10})"
                             r"|\bfavou?rite (?P<t2>[a-z]+) is (?P<v2>[a-z ]{1,30}?)(?: now)?(?:$|[.,!])", re.I)),
)
_CHANGE_RE = re.compile(r"搬到|搬去|搬家|换了|换成|改成|改学|改行|改当|跳槽|不再|再也不|已经不|戒了|戒掉|已经戒|分手|离婚|毕业|"
                        r"卖了|走了|去世|现在不|不.了$|"
                        r"\b(?:moved|relocated|switched|changed|sold|quit|graduated|divorced)\b|\bno longer\b|\banymore\b|"
                        r"\bbroke up\b|\bnot any ?more\b|\bagain now\b|\bnew job\b", re.I)
_POSITIVE_RE = re.compile(r"喜欢|爱|迷上|热爱|\blikes?\b|\bloves?\b|\benjoys?\b|\badore\b|\bfan of\b|\binto\b", re.I)
_NEGATIVE_RE = re.compile(r"讨厌|受不了|烦死|恨|不(?:太|再|怎么)?(?:喜欢|爱|吃|喝|看|玩|听)|再也不|戒|"
                          r"\bhates?\b|\bdislikes?\b|\bcan'?t stand\b|\bcannot stand\b|\b(?:don'?t|do not|no longer|never)\b"
                          r"|\bworst\b|\banymore\b", re.I)
# a negation with no polarity word of its own ("I don't have a car", 「我不会开车」); 不 inside
# words that negate nothing (不错, 不过, 不少 …) is not one
_NEGATION_RE = re.compile(r"不(?!错|过|少|久|断|同|仅|如|管|然|得不)|没|未曾|从未|别再|"
                          r"\bnot\b|n't\b|\bnever\b|\bno\b", re.I)
_NOT_TOPIC = frozenset((
    "我 我们 你 他 她 它 的 了 着 过 是 在 很 超 超级 真的 真 特别 非常 挺 好 太 也 还 都 就 现在 已经 其实 一直 最近 上个月 "
    "上周 去年 一只 一个 一名 喜欢 爱 讨厌 受不了 不 不再 再也 再 戒 戒掉 戒了 换 换了 改 改成 搬 搬到 搬去 跳槽 分手 "
    "看 吃 喝 个 叫 家 上 下 月 周 年 又 啦 呀 吧 呢 哦 改学 改行 当 现 已 经 真 特 别 非 常 超 级 "
    "i i'm im me my mine am is are was be been do does did don't dont not no never now still again really actually "
    "very so a an the to of and at in for with it its this that these those anymore longer just also too lot much "
    "like likes love loves enjoy enjoys adore hate hates dislike dislikes can't cant stand cannot moved move switched "
    "sold quit graduated broke up new started started working work last month week year ago "
    "have has had got don doesn didn 没 没有 有 会 不会 不是 "
    # what a plan says of itself, not its topic: 「我下周三要去上海出差」 and 「我下个月要搬去深圳了」 shared only
    # 去 and 要, and the move revised the trip away
    "要 去 想 打算 准备 将 将要 得 能 可以 下个月 下周 明天 后天 今天 明年 周末 我下 "
    "going gonna will next plan plans planning").split())


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``new`` does to ``old``: ``kind`` in update / contradiction /
    restatement / unrelated; ``overlap`` the topic overlap coefficient in [0, 1];
    ``family`` the slot family both belong to, "" when none."""

    kind: str
    overlap: float
    family: str = ""

    @property
    def changes(self) -> bool:
        """True when the new statement supersedes the old one."""
        return self.kind in CHANGES

    @property
    def conflicts(self) -> bool:
        """True in the unsure band: keep both live, linked as a conflict."""
        return self.kind == "conflict"


def outcome(verdict: Verdict) -> str:
    """What capture does with ``verdict``: ``supersede`` (update, contradiction),
    ``conflict`` (both kept, linked) or ``unrelated`` (restatement, unrelated: both
    kept, nothing linked); one of OUTCOMES."""
    if verdict.changes:
        return "supersede"
    return "conflict" if verdict.conflicts else "unrelated"


_SLOT_KEY_RE = re.compile(r"[a-z_]+(?:\.[a-z_]+)+")


def may_conflict(old: str, new: str, verdict: Verdict, *, old_key: str = "", new_key: str = "",
                 mood: bool = False) -> bool:
    """True when ``verdict`` (``judge(old, new)``, in the conflict band) may link the
    two statements as a conflict: they sit on one topic slot — one slot family
    (``verdict.family``), one topic slot when both memories hold one (``old_key`` /
    ``new_key`` such as ``profile.job``; a text's own key ``<category>:<text>`` is
    none), else a topic overlap of at least ``TOPIC_OVERLAP`` that holds a content
    term of both (``memory.lexicon.content_terms``: not a general verb, a vague time,
    a hedge, a reaction or greeting word, a figure — "A lot's been going on in my
    life!" and "They're a huge part of my journey, … keep going" share only "go";
    「你好，今天我又来找你聊天啦。」 and 「你好，我今天感觉心情不太好。」 only 「你好」).
    Never when ``mood``: a passing mood is no side of a conflict."""
    if mood or not verdict.conflicts:
        return False
    if verdict.family:
        return True
    if _SLOT_KEY_RE.fullmatch(old_key or "") and _SLOT_KEY_RE.fullmatch(new_key or ""):
        return old_key == new_key
    return verdict.overlap >= TOPIC_OVERLAP and bool(_topic_terms(old) & _topic_terms(new))


def _topic_terms(text: str) -> frozenset[str]:
    """The content terms of ``text`` that can name a topic slot: ``memory.lexicon.content_terms`` of the text
    less its greetings and whom it addresses (``memory.speech_act.unaddressed``: 「你好，AI伴侣，…」), without
    reaction, mood and greeting words (「你好」, "love", "sure") and figures (the date a memory's text carries)."""
    from memory.lexicon import REACTION_WORDS, content_terms, reaction_stems
    from memory.speech_act import unaddressed

    return frozenset(t for t in content_terms(unaddressed(text)) if not t.isdigit() and t not in REACTION_WORDS
                     and t not in reaction_stems() and t not in _NO_SLOT_EN)


_NO_SLOT_EN = frozenset(("well", "one", "let"))
"""English words recall keeps as content terms that name no topic slot ("Well, I'm sure…" / "…not going well")."""


def _family(text: str) -> tuple[str, str] | None:
    for name, pattern in _FAMILIES:
        m = pattern.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        value = next((groups[g] for g in groups if g.startswith("v") and groups[g]), "")
        topic = next((groups[g] for g in groups if g.startswith("t") and groups[g]), "")
        if name == "favourite":
            name = f"favourite.{topic.lower()}"
        return name, value.strip().lower()
    return None


def _topic(text: str) -> set[str]:
    return {t for t in tokens(text) if t not in _NOT_TOPIC and not t.isdigit()}


def _polarity(text: str) -> int:
    """+1 positive, -1 negative, 0 neither, about the statement's object."""
    if _NEGATIVE_RE.search(text):
        return -1
    return 1 if _POSITIVE_RE.search(text) else 0


def _feeling(text: str, polarity: int) -> int:
    """+1 / -1 / 0: the polarity word's direction, else the sign of the emotion
    lexicon's valence when it reaches SOFT_VALENCE (「跑步太累了」 → -1)."""
    if polarity:
        return polarity
    valence = analyse(text).valence
    return 0 if abs(valence) < SOFT_VALENCE else (1 if valence > 0 else -1)


@dataclass(frozen=True, slots=True)
class _Reading:
    """One statement as the judge reads it (``_read``)."""

    topic: frozenset[str]
    family: tuple[str, str] | None
    polarity: int
    changed: bool
    negated: bool
    feeling: int


@lru_cache(maxsize=8192)
def _read(text: str) -> _Reading:
    """Topic tokens, family, polarity, change verb, negation and feeling of one
    statement (simplified first, curly apostrophes straightened); cached, as capture judges each new fact against
    the same live memories message after message."""
    # phone keyboards write the curly apostrophe: "don’t" must read as "don't"
    plain = to_simplified(text or "").strip().replace("\u2019", "'").replace("\uff07", "'")
    polarity = _polarity(plain)
    return _Reading(frozenset(_topic(plain)), _family(plain), polarity, bool(_CHANGE_RE.search(plain)),
                    bool(_NEGATION_RE.search(plain)), _feeling(plain, polarity))


def can_change(new: str) -> bool:
    """False when ``new`` has no slot family, polarity, change verb, negation or
    feeling: then ``judge`` can only call it a restatement or unrelated, whatever
    the old one (a plain statement after a negated one, 「我不吃香菜」 →
    「我现在吃香菜」, is missed by this shortcut: the price of not judging every
    plain fact against every live memory)."""
    r = _read(new)
    return r.family is not None or r.polarity != 0 or r.changed or r.negated or r.feeling != 0


def _unsure(a: _Reading, b: _Reading, overlap: float, changed: bool) -> bool:
    """The conflict band (module docstring): a sign of disagreement that is not clear."""
    if overlap >= TOPIC_OVERLAP:
        clear_same = a.polarity and b.polarity and a.polarity == b.polarity
        if a.negated != b.negated and not clear_same:
            return True  # the negation's direction is not known: "I have a car" / "I don't have a car"
        return bool(a.feeling and b.feeling and a.feeling != b.feeling)
    if overlap >= CHANGE_OVERLAP:
        return bool(a.polarity and b.polarity and a.polarity != b.polarity)
    return changed and overlap >= CONFLICT_OVERLAP


def judge(old: str, new: str) -> Verdict:
    """What the statement ``new`` does to the live statement ``old`` (both the
    same person's, zh/en/mixed, traditional folded to simplified). Never raises."""
    a, b = _read(old), _read(new)
    ta, tb, fa, fb, pa, pb = a.topic, b.topic, a.family, b.family, a.polarity, b.polarity
    overlap = len(ta & tb) / min(len(ta), len(tb)) if ta and tb else 0.0
    changed = b.changed and not a.changed
    if fa is not None and fb is not None and fa[0] == fb[0]:
        same_value = fa[1] == fb[1] or (fa[1] and fb[1] and (fa[1] in fb[1] or fb[1] in fa[1]))
        if not same_value or changed:
            return Verdict("update", overlap, fa[0])
        if _unsure(a, b, max(overlap, TOPIC_OVERLAP), False):  # one slot, one value: the same topic
            return Verdict("conflict", overlap, fa[0])
        return Verdict("restatement", overlap, fa[0])
    if overlap < (CHANGE_OVERLAP if changed else TOPIC_OVERLAP):
        return Verdict("conflict" if _unsure(a, b, overlap, changed) else "unrelated", overlap)
    if pa and pb and pa != pb:
        return Verdict("contradiction", overlap)
    if changed:
        return Verdict("contradiction" if pa else "update", overlap)
    return Verdict("conflict" if _unsure(a, b, overlap, False) else "restatement", overlap)
