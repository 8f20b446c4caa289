"""Emotion of a short chat text: valence, arousal and a coarse label.

``analyse(text) -> Emotion`` is a deterministic, lexicon-based analyser for
Chinese (simplified and the main traditional forms), English and the mix of
both that people type into IM chats, emoji and kaomoji included. It runs
on every captured message and every recall query, so it must be cheap (about
50 µs per chat sentence) and needs no model and no jieba (OpenCC's t2s table is
read once, on first use).

Output (Russell 1980, circumplex model of affect):

- ``valence`` in [-1, 1]: unpleasant ← 0 → pleasant;
- ``arousal`` in [0, 1]: calm → excited;
- ``label``: one of ``LABELS`` (``"neutral"`` when |valence| < 0.1 and no
  surprise cue was found).

How it works

1. Normalise: NFKC (full-width ``！，（＾`` become ``!,(^``), traditional
   characters mapped to simplified with OpenCC's t2s (開心 → 开心; the one
   converter of ``memory.text``), lower case, emoji variation selectors / ZWJ /
   skin tones dropped.
2. Tokenise in one left-to-right pass: at each position the longest lexicon
   entry wins (so 超市 is a shop, not the intensifier 超 + 市; 不错 is
   "good", not 不 + 错). ASCII words are read whole and only match at word
   boundaries; a sentiment word also matches the words that share its Snowball
   English (Porter2) stem and extend it, the lexicon being stemmed with the
   same stemmer (loved → love, hopefully → hopeful; help is not helpful).
3. Each sentiment word takes the modifiers found before it in its clause, up
   to three unrelated tokens away (VADER-style, Hutto & Gilbert 2014):

   - degree adverbs multiply (非常 ×1.7, 很 ×1.3, 有点 ×0.5, extremely ×1.9,
     a bit ×0.5); intensifiers after the word as well (累死了, 开心极了);
   - a plain negation flips a positive word to 0.75 of its strength in the
     other direction (不开心) and turns a negative word into a weak positive
     of 0.5 of its strength ("not bad", 不难过);
   - a negation over an intensifier is partial: "not very"/不太 + positive is
     mildly negative (-0.4×), + negative stays mildly negative (0.4×, 不太难过);
   - two negations cancel and halve the word (不是不喜欢).

   A contrast (但是, 不过, but, however) halves what comes before it and
   weights what follows by 1.5. Exclamation marks strengthen both valence
   and arousal.
4. valence = tanh(sum of word scores) — bounded, monotone, and close to the
   sum while that is small; arousal = the strongest word arousal (scaled by its
   degree adverb, lowered under negation) plus 0.1 per "!" (at most 0.3) and
   0.05 per further emotional word (at most 0.15).

Limits (known, accepted): no sarcasm, no irony, no implicit sentiment in
events ("我被裁了" has no emotion word), no domain words. A model-based
analyser can replace this behind the same signature.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache

from memory.text import stem, to_simplified

__all__ = ["Emotion", "NEUTRAL", "LABELS", "POSITIVE_LABELS", "NEGATIVE_LABELS", "analyse"]

POSITIVE_LABELS = ("joy", "love", "gratitude", "relief", "calm")
NEGATIVE_LABELS = (
    "sadness",
    "loneliness",
    "anger",
    "disgust",
    "fear",
    "anxiety",
    "fatigue",
    "embarrassment",
)
LABELS = ("neutral", "surprise", *POSITIVE_LABELS, *NEGATIVE_LABELS)


@dataclass(frozen=True, slots=True)
class Emotion:
    """Emotion of a text (Russell 1980): valence in [-1, 1], arousal in [0, 1],
    label one of ``LABELS``.

    Raises ValueError when valence or arousal is not finite or out of range.
    """

    valence: float
    arousal: float
    label: str = "neutral"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.valence) and -1.0 <= self.valence <= 1.0):
            raise ValueError(f"valence must be in [-1, 1], got {self.valence!r}")
        if not (math.isfinite(self.arousal) and 0.0 <= self.arousal <= 1.0):
            raise ValueError(f"arousal must be in [0, 1], got {self.arousal!r}")

    @property
    def intensity(self) -> float:
        """Emotional intensity |valence| in [0, 1] (what lengthens a half-life)."""
        return abs(self.valence)


NEUTRAL = Emotion(0.0, 0.0, "neutral")

SOFT_VALENCE = 0.25
"""Least |valence| (``memory.emotion.analyse``, in [-1, 1]) that reads as a feeling
for or against the topic when no polarity word says so."""

# --------------------------------------------------------------------------
# Lexicon. Sentiment entries: word -> (valence, arousal), grouped by label.
# Values are hand-set on the circumplex: the valence of the plain word, the
# arousal of its typical use. Keys are written in simplified Chinese / lower
# case and normalised like the input, so kaomoji may be typed full-width.
# --------------------------------------------------------------------------

_SENTIMENT: dict[str, dict[str, tuple[float, float]]] = {
    "joy": {
        # zh
        "开心": (0.6, 0.5), "高兴": (0.6, 0.5), "快乐": (0.7, 0.5), "幸福": (0.8, 0.4),
        "愉快": (0.6, 0.4), "喜悦": (0.7, 0.5), "欢乐": (0.7, 0.6), "欢喜": (0.6, 0.5),
        "兴奋": (0.6, 0.9), "激动": (0.4, 0.9), "满意": (0.5, 0.3), "满足": (0.5, 0.3),
        "棒": (0.6, 0.5), "厉害": (0.5, 0.5), "优秀": (0.5, 0.4), "完美": (0.8, 0.5),
        "美好": (0.6, 0.4), "美滋滋": (0.6, 0.5), "漂亮": (0.5, 0.4), "好看": (0.5, 0.4),
        "好吃": (0.5, 0.4), "好玩": (0.5, 0.5), "好听": (0.5, 0.4), "好用": (0.4, 0.3),
        "好好玩": (0.6, 0.5), "好好吃": (0.6, 0.5), "好好看": (0.6, 0.5), "好好听": (0.6, 0.5),
        "有趣": (0.5, 0.5), "有意思": (0.4, 0.4), "精彩": (0.6, 0.6), "舒服": (0.5, 0.2),
        "舒适": (0.4, 0.2), "成功": (0.6, 0.6), "搞定": (0.5, 0.5), "顺利": (0.5, 0.3),
        "赞": (0.5, 0.5), "点赞": (0.4, 0.4), "牛": (0.4, 0.5), "牛逼": (0.6, 0.7),
        "yyds": (0.6, 0.7), "绝绝子": (0.5, 0.7), "爽": (0.5, 0.6), "得意": (0.4, 0.5),
        "骄傲": (0.5, 0.5), "自豪": (0.6, 0.5), "期待": (0.5, 0.6), "哈哈": (0.5, 0.6),
        "哈哈哈": (0.6, 0.7), "呵呵": (0.1, 0.2), "嘿嘿": (0.4, 0.5), "嘻嘻": (0.4, 0.5),
        "笑死": (0.5, 0.8), "恭喜": (0.6, 0.6), "祝贺": (0.6, 0.5), "乐趣": (0.5, 0.4),
        "享受": (0.5, 0.3), "积极": (0.4, 0.4), "加油": (0.4, 0.6), "好运": (0.5, 0.4),
        "幸运": (0.6, 0.5), "太好了": (0.7, 0.6), "了不起": (0.6, 0.5), "优美": (0.5, 0.3),
        "不错": (0.5, 0.3), "挺好": (0.5, 0.3), "好": (0.4, 0.3), "美": (0.3, 0.3),
        "升职": (0.6, 0.6), "加薪": (0.6, 0.6), "录取": (0.6, 0.6), "飞起": (0.4, 0.8),
        "耶": (0.5, 0.7), "惊喜": (0.6, 0.8), "过瘾": (0.5, 0.6), "惬意": (0.5, 0.2), "欣慰": (0.5, 0.3),
        "受启发": (0.4, 0.4), "有用": (0.3, 0.3), "实用": (0.3, 0.3), "动力": (0.3, 0.5),
        # en
        "happy": (0.6, 0.5), "glad": (0.5, 0.4), "joy": (0.7, 0.5), "joyful": (0.7, 0.5),
        "excited": (0.6, 0.9), "exciting": (0.6, 0.8), "great": (0.6, 0.5), "good": (0.4, 0.3),
        "nice": (0.4, 0.3), "awesome": (0.7, 0.6), "amazing": (0.7, 0.7), "wonderful": (0.7, 0.5),
        "fantastic": (0.7, 0.6), "excellent": (0.7, 0.5), "perfect": (0.7, 0.5), "fine": (0.2, 0.2),
        "cool": (0.3, 0.4), "fun": (0.5, 0.5), "funny": (0.4, 0.5), "enjoy": (0.5, 0.4),
        "delighted": (0.7, 0.6), "thrilled": (0.7, 0.9), "yay": (0.5, 0.7), "lol": (0.3, 0.5),
        "lmao": (0.4, 0.6), "haha": (0.4, 0.5), "hehe": (0.3, 0.4), "best": (0.5, 0.4),
        "better": (0.3, 0.3), "win": (0.4, 0.6), "won": (0.4, 0.6), "congrats": (0.6, 0.6),
        "congratulations": (0.6, 0.6), "proud": (0.5, 0.5), "beautiful": (0.6, 0.4),
        "lovely": (0.6, 0.4), "brilliant": (0.6, 0.5), "inspiring": (0.5, 0.5), "fond": (0.4, 0.3),
        "uplifting": (0.5, 0.4), "blast": (0.5, 0.7), "rocks": (0.4, 0.5), "hopeful": (0.4, 0.4),
        "glorious": (0.6, 0.5), "pleased": (0.5, 0.3), "cheerful": (0.6, 0.5), "lucky": (0.5, 0.4),
        "xd": (0.4, 0.6), "woohoo": (0.6, 0.8), "hooray": (0.6, 0.8), "helpful": (0.3, 0.3),
        "happiness": (0.7, 0.4), "success": (0.5, 0.5), "successful": (0.5, 0.5),
        "pretty": (0.4, 0.3),
        # emoji / kaomoji
        "😀": (0.5, 0.5), "😃": (0.6, 0.6), "😄": (0.6, 0.6), "😁": (0.6, 0.6), "😆": (0.6, 0.7),
        "😊": (0.5, 0.4), "🙂": (0.3, 0.2), "☺": (0.5, 0.3), "😺": (0.5, 0.5), "😸": (0.5, 0.5),
        "👍": (0.4, 0.3), "👏": (0.4, 0.5), "🎉": (0.6, 0.7), "🥳": (0.7, 0.8), "😎": (0.4, 0.4),
        "😂": (0.5, 0.7), "🤣": (0.6, 0.8), "😹": (0.5, 0.7), "😋": (0.5, 0.4), "💯": (0.4, 0.5),
        ":)": (0.4, 0.3), ":-)": (0.4, 0.3), "=)": (0.4, 0.3), ":]": (0.4, 0.3), ":d": (0.6, 0.6),
        ":-d": (0.6, 0.6), ";)": (0.3, 0.4), ":p": (0.3, 0.5), "^_^": (0.5, 0.4), "^^": (0.4, 0.4),
        "^o^": (0.5, 0.5), "^▽^": (0.6, 0.5), "(^_^)": (0.5, 0.4), "(^^)": (0.4, 0.4),
        "(^o^)": (0.5, 0.5), "(^-^)": (0.5, 0.4), "(^ω^)": (0.5, 0.4), "(^▽^)": (0.6, 0.5),
        "(≧▽≦)": (0.6, 0.7), "(≧∇≦)": (0.6, 0.7), "(*^▽^*)": (0.6, 0.5), "(*^_^*)": (0.5, 0.4),
        "o(^▽^)o": (0.6, 0.6), "ヽ(✿゚▽゚)ノ": (0.6, 0.7), "(´▽`)": (0.5, 0.3), "(๑•̀ㅂ•́)و✧": (0.5, 0.7),
        "\\(^o^)/": (0.6, 0.7),
    },
    "love": {
        "爱": (0.7, 0.5), "喜欢": (0.6, 0.4), "热爱": (0.8, 0.6), "可爱": (0.6, 0.5),
        "爱情": (0.4, 0.4), "恋爱": (0.4, 0.5), "亲爱": (0.5, 0.4), "想你": (0.5, 0.5),
        "温暖": (0.6, 0.3), "甜": (0.5, 0.4), "甜蜜": (0.7, 0.5), "抱抱": (0.4, 0.4),
        "么么哒": (0.5, 0.5), "么么": (0.4, 0.4), "宠": (0.3, 0.3), "心动": (0.6, 0.7),
        "珍惜": (0.4, 0.3), "陪伴": (0.4, 0.2), "心疼": (0.2, 0.4), "疼爱": (0.5, 0.4),
        "love": (0.7, 0.5), "adore": (0.8, 0.6), "cute": (0.5, 0.5), "sweet": (0.5, 0.4),
        "lovable": (0.6, 0.4), "adorable": (0.6, 0.5), "cherish": (0.6, 0.4), "darling": (0.4, 0.4),
        "xoxo": (0.5, 0.5),
        "❤": (0.6, 0.5), "♥": (0.6, 0.5), "💕": (0.6, 0.5), "💖": (0.6, 0.5), "💗": (0.6, 0.5),
        "💓": (0.6, 0.6), "💞": (0.6, 0.5), "💘": (0.6, 0.6), "💝": (0.6, 0.5), "😍": (0.7, 0.7),
        "🥰": (0.7, 0.5), "😘": (0.6, 0.5), "😻": (0.6, 0.6), "🤗": (0.5, 0.4), "🌹": (0.3, 0.3),
        "<3": (0.5, 0.5), "(♥‿♥)": (0.6, 0.5), "(｡♥‿♥｡)": (0.6, 0.5),
    },
    "gratitude": {
        "谢谢": (0.5, 0.3), "感谢": (0.6, 0.3), "多谢": (0.5, 0.3), "感恩": (0.6, 0.3),
        "感动": (0.6, 0.5), "感激": (0.6, 0.4), "谢啦": (0.5, 0.3),
        "thanks": (0.4, 0.3), "thank": (0.4, 0.3), "thx": (0.4, 0.3), "grateful": (0.6, 0.3),
        "thankful": (0.6, 0.3), "appreciate": (0.5, 0.3), "touching": (0.5, 0.4),
        "🙏": (0.3, 0.2),
    },
    "relief": {
        "放心": (0.3, 0.2), "安心": (0.4, 0.2), "还好": (0.2, 0.2), "没事": (0.2, 0.2),
        "没关系": (0.2, 0.2), "没问题": (0.3, 0.3), "不要紧": (0.2, 0.2), "终于": (0.2, 0.4),
        "好多了": (0.5, 0.3), "解脱": (0.4, 0.3),
        "relieved": (0.4, 0.2), "relief": (0.4, 0.2), "no worries": (0.3, 0.2),
        "no problem": (0.3, 0.2), "no prob": (0.3, 0.2), "😌": (0.3, 0.2),
    },
    "calm": {
        "放松": (0.4, 0.1), "轻松": (0.4, 0.2), "平静": (0.3, 0.1), "悠闲": (0.4, 0.1),
        "舒缓": (0.3, 0.1), "宁静": (0.4, 0.1), "踏实": (0.3, 0.1),
        "calm": (0.3, 0.1), "relaxed": (0.4, 0.1), "relaxing": (0.4, 0.1), "relax": (0.3, 0.1),
        "peaceful": (0.5, 0.1), "comfortable": (0.4, 0.2), "cozy": (0.4, 0.2), "chill": (0.3, 0.2),
    },
    "surprise": {
        "惊讶": (0.0, 0.8), "吃惊": (0.0, 0.8), "震惊": (-0.1, 0.9), "没想到": (0.0, 0.6),
        "居然": (0.0, 0.5), "竟然": (0.0, 0.5), "天哪": (0.0, 0.7), "天啊": (0.0, 0.7),
        "我的天": (0.0, 0.7), "哇": (0.1, 0.7), "好奇": (0.1, 0.5),
        "surprised": (0.1, 0.8), "surprise": (0.2, 0.8), "shocked": (-0.1, 0.9), "wow": (0.2, 0.7),
        "omg": (0.0, 0.8), "oh my god": (0.0, 0.8), "whoa": (0.1, 0.7),
        "😮": (0.0, 0.7), "😲": (0.0, 0.8), "😯": (0.0, 0.6), "🤯": (-0.1, 0.9), "😳": (0.0, 0.6),
        "o_o": (0.0, 0.6), "(o_o)": (0.0, 0.6), "(°o°)": (0.0, 0.7), "(⊙_⊙)": (0.0, 0.7),
        "⊙_⊙": (0.0, 0.7),
    },
    "sadness": {
        "难过": (-0.7, 0.4), "伤心": (-0.7, 0.4), "悲伤": (-0.8, 0.4), "痛苦": (-0.8, 0.6),
        "哭": (-0.5, 0.6), "想哭": (-0.6, 0.5), "失望": (-0.6, 0.4), "沮丧": (-0.6, 0.3),
        "郁闷": (-0.5, 0.4), "抑郁": (-0.8, 0.3), "心碎": (-0.9, 0.6), "崩溃": (-0.8, 0.9),
        "绝望": (-0.9, 0.6), "emo": (-0.5, 0.4), "破防": (-0.5, 0.6), "委屈": (-0.6, 0.5),
        "遗憾": (-0.5, 0.3), "可惜": (-0.4, 0.3), "后悔": (-0.5, 0.4), "难受": (-0.6, 0.4),
        "不舒服": (-0.5, 0.3), "心累": (-0.6, 0.2), "失落": (-0.5, 0.3), "低落": (-0.5, 0.2),
        "心情差": (-0.6, 0.4), "惨": (-0.6, 0.5), "悲剧": (-0.6, 0.5), "糟糕": (-0.6, 0.5),
        "糟": (-0.5, 0.5), "差劲": (-0.6, 0.5), "烂": (-0.5, 0.5), "不幸": (-0.6, 0.4),
        "失恋": (-0.7, 0.5), "分手": (-0.6, 0.5), "去世": (-0.8, 0.5), "考砸": (-0.6, 0.5),
        "挂科": (-0.5, 0.5), "失业": (-0.6, 0.5), "呜呜": (-0.5, 0.6), "呜呜呜": (-0.6, 0.6),
        "嘤嘤": (-0.3, 0.5), "唉": (-0.3, 0.3), "哎": (-0.2, 0.3), "桑心": (-0.6, 0.4),
        "对不起": (-0.2, 0.3), "抱歉": (-0.2, 0.3), "没办法": (-0.3, 0.3), "没有办法": (-0.3, 0.3), "舍不得": (-0.3, 0.4),
        "心痛": (-0.7, 0.5), "痛": (-0.5, 0.6), "疼": (-0.5, 0.6), "生病": (-0.5, 0.3),
        "困难": (-0.3, 0.4), "挫折": (-0.5, 0.4), "不行": (-0.2, 0.3), "艰难": (-0.5, 0.4),
        "sad": (-0.6, 0.3), "unhappy": (-0.6, 0.3), "upset": (-0.6, 0.5), "depressed": (-0.8, 0.3),
        "depressing": (-0.7, 0.3), "miserable": (-0.8, 0.4), "heartbroken": (-0.9, 0.6),
        "cry": (-0.5, 0.6), "tears": (-0.4, 0.5), "hurt": (-0.5, 0.5), "pain": (-0.5, 0.5),
        "painful": (-0.6, 0.5), "disappointed": (-0.6, 0.4), "disappointing": (-0.6, 0.4),
        "regret": (-0.5, 0.4), "sorry": (-0.2, 0.3), "bad": (-0.5, 0.4), "terrible": (-0.7, 0.6),
        "awful": (-0.7, 0.6), "horrible": (-0.7, 0.6), "worst": (-0.7, 0.6), "worse": (-0.4, 0.4),
        "sucks": (-0.6, 0.6), "suck": (-0.6, 0.6), "tough": (-0.3, 0.4),
        "fail": (-0.5, 0.5), "failure": (-0.6, 0.5), "sick": (-0.4, 0.3), "broke up": (-0.6, 0.5),
        "passed away": (-0.8, 0.4), "gloomy": (-0.5, 0.2), "grief": (-0.8, 0.5),
        "sadness": (-0.6, 0.3), "heartbreaking": (-0.8, 0.6),
        "😭": (-0.7, 0.7), "😢": (-0.6, 0.5), "😞": (-0.5, 0.3), "😔": (-0.5, 0.3), "😟": (-0.4, 0.4),
        "☹": (-0.5, 0.3), "🙁": (-0.4, 0.3), "😿": (-0.6, 0.5), "💔": (-0.8, 0.6), "🥺": (-0.3, 0.4),
        "😥": (-0.4, 0.4), "😪": (-0.3, 0.2), "😓": (-0.3, 0.4),
        ":(": (-0.5, 0.3), ":-(": (-0.5, 0.3), ":'(": (-0.6, 0.5), "</3": (-0.7, 0.5),
        "(╥_╥)": (-0.7, 0.6), "╥_╥": (-0.7, 0.6), "(t_t)": (-0.6, 0.5), "t_t": (-0.6, 0.5),
        "t^t": (-0.5, 0.5), "tat": (-0.5, 0.5), "tvt": (-0.5, 0.5), "qaq": (-0.5, 0.5),
        "qwq": (-0.3, 0.4), "(;_;)": (-0.6, 0.5), ";_;": (-0.6, 0.5), "(ಥ_ಥ)": (-0.7, 0.6),
        "ಥ_ಥ": (-0.7, 0.6), "(ಥ﹏ಥ)": (-0.7, 0.6), "(´;ω;`)": (-0.6, 0.5), "orz": (-0.4, 0.3),
        "otz": (-0.4, 0.3), "(。•́︿•̀。)": (-0.5, 0.4),
    },
    "loneliness": {
        "孤独": (-0.6, 0.3), "寂寞": (-0.5, 0.3), "孤单": (-0.5, 0.3), "空虚": (-0.5, 0.2),
        "没人陪": (-0.5, 0.3), "想家": (-0.4, 0.3),
        "lonely": (-0.6, 0.3), "loneliness": (-0.6, 0.3), "alone": (-0.3, 0.2), "homesick": (-0.4, 0.3),
    },
    "anger": {
        "生气": (-0.6, 0.8), "愤怒": (-0.8, 0.9), "气死": (-0.8, 0.9), "火大": (-0.6, 0.8),
        "恼火": (-0.6, 0.8), "烦": (-0.5, 0.6), "烦躁": (-0.6, 0.7), "心烦": (-0.5, 0.6),
        "恨": (-0.8, 0.8), "无语": (-0.4, 0.4), "受不了": (-0.6, 0.7), "不爽": (-0.5, 0.6),
        "不满": (-0.5, 0.5), "不公平": (-0.5, 0.6), "不耐烦": (-0.5, 0.6), "吵架": (-0.5, 0.7),
        "被骂": (-0.5, 0.6), "气人": (-0.6, 0.8), "抓狂": (-0.7, 0.9), "看不起": (-0.5, 0.5),
        "暴躁": (-0.6, 0.8), "讨厌死": (-0.8, 0.8), "滚": (-0.6, 0.8),
        "angry": (-0.7, 0.8), "mad": (-0.6, 0.8), "furious": (-0.8, 0.9), "annoyed": (-0.5, 0.6),
        "annoying": (-0.5, 0.6), "irritated": (-0.5, 0.6), "pissed": (-0.7, 0.8), "hate": (-0.8, 0.7),
        "frustrated": (-0.6, 0.7), "frustrating": (-0.6, 0.7), "fed up": (-0.6, 0.6),
        "can't stand": (-0.6, 0.7), "cannot stand": (-0.6, 0.7), "rage": (-0.8, 0.9),
        "😡": (-0.7, 0.9), "😠": (-0.6, 0.8), "🤬": (-0.9, 0.9), "💢": (-0.6, 0.8), "👿": (-0.6, 0.8),
        "😤": (-0.5, 0.7), "🙄": (-0.3, 0.4),
        ">_<": (-0.3, 0.6), "(>_<)": (-0.3, 0.6), "-_-": (-0.3, 0.3), "=_=": (-0.3, 0.3),
        "-_-||": (-0.3, 0.3), "(╯°□°)╯": (-0.8, 0.9), "(╬ ̄皿 ̄)": (-0.8, 0.9), "( ̄へ ̄)": (-0.4, 0.5),
        "(`へ´)": (-0.5, 0.6), "(#`д´)": (-0.6, 0.8),
    },
    "disgust": {
        "讨厌": (-0.6, 0.5), "恶心": (-0.7, 0.6), "垃圾": (-0.6, 0.5), "嫌弃": (-0.5, 0.4),
        "反感": (-0.5, 0.4), "厌倦": (-0.5, 0.3), "无聊": (-0.4, 0.2), "没意思": (-0.4, 0.2),
        "没劲": (-0.4, 0.2), "没用": (-0.4, 0.3), "消极": (-0.4, 0.3), "单调": (-0.3, 0.2),
        "乏味": (-0.5, 0.2), "枯燥": (-0.4, 0.2),
        "disgusting": (-0.7, 0.6), "gross": (-0.5, 0.5), "boring": (-0.4, 0.2), "bored": (-0.4, 0.2),
        "dislike": (-0.5, 0.4), "awkward": (-0.3, 0.4), "meh": (-0.2, 0.1),
        "🤮": (-0.7, 0.6), "🤢": (-0.6, 0.5), "👎": (-0.4, 0.4), "💩": (-0.3, 0.4),
    },
    "fear": {
        "害怕": (-0.6, 0.8), "怕": (-0.5, 0.7), "恐惧": (-0.8, 0.8), "吓": (-0.5, 0.8),
        "吓死": (-0.7, 0.9), "可怕": (-0.6, 0.8), "恐怖": (-0.7, 0.8), "惊恐": (-0.7, 0.9),
        "afraid": (-0.6, 0.7), "scared": (-0.6, 0.8), "scary": (-0.6, 0.8), "terrified": (-0.8, 0.9),
        "fear": (-0.5, 0.7), "frightened": (-0.7, 0.8), "terrifying": (-0.8, 0.9),
        "😱": (-0.6, 0.9), "😨": (-0.6, 0.8),
    },
    "anxiety": {
        "担心": (-0.5, 0.6), "焦虑": (-0.7, 0.8), "紧张": (-0.4, 0.8), "不安": (-0.5, 0.6),
        "慌": (-0.5, 0.8), "慌张": (-0.5, 0.8), "压力": (-0.4, 0.6), "忐忑": (-0.4, 0.6),
        "着急": (-0.4, 0.7), "来不及": (-0.3, 0.7), "焦急": (-0.5, 0.8), "睡不着": (-0.3, 0.5),
        "失眠": (-0.4, 0.4), "应付不过来": (-0.4, 0.6), "困扰": (-0.4, 0.5), "头疼": (-0.4, 0.5), "胡思乱想": (-0.4, 0.5),
        "worried": (-0.5, 0.6), "worry": (-0.4, 0.6), "worrying": (-0.5, 0.6), "anxious": (-0.6, 0.8),
        "anxiety": (-0.6, 0.8), "nervous": (-0.4, 0.8), "stressed": (-0.5, 0.7), "stress": (-0.4, 0.6),
        "stressful": (-0.5, 0.7), "panic": (-0.7, 0.9), "overwhelmed": (-0.5, 0.7), "uneasy": (-0.4, 0.5),
        "😰": (-0.5, 0.8), "😖": (-0.5, 0.6), "😣": (-0.5, 0.6), "(;´д`)": (-0.5, 0.6),
    },
    "fatigue": {
        "累": (-0.4, 0.2), "疲惫": (-0.5, 0.2), "疲倦": (-0.5, 0.2), "困": (-0.2, 0.1),
        "心好累": (-0.6, 0.2), "加班": (-0.3, 0.3), "熬夜": (-0.2, 0.3), "乏": (-0.3, 0.1),
        "力不从心": (-0.4, 0.3), "累死": (-0.6, 0.3), "饿死": (-0.3, 0.3), "冻死": (-0.4, 0.3), "冷死": (-0.4, 0.3),
        "热死": (-0.4, 0.4), "困死": (-0.4, 0.1),
        "tired": (-0.4, 0.2), "exhausted": (-0.6, 0.2), "sleepy": (-0.2, 0.1), "drained": (-0.5, 0.2),
        "😩": (-0.5, 0.5), "😫": (-0.5, 0.5), "😴": (-0.2, 0.1), "🥱": (-0.2, 0.1),
    },
    "embarrassment": {
        "尴尬": (-0.4, 0.5), "丢人": (-0.5, 0.5), "丢脸": (-0.5, 0.5), "害羞": (-0.1, 0.5),
        "embarrassed": (-0.4, 0.5), "embarrassing": (-0.4, 0.5), "ashamed": (-0.6, 0.5),
        "😅": (-0.1, 0.4),
    },
}

# Degree adverbs (multiply the following sentiment word).
_DEGREE: dict[str, float] = {
    # weak
    "有点": 0.5, "有点儿": 0.5, "有一点": 0.5, "有一点点": 0.4, "有些": 0.5, "有一些": 0.5,
    "一点": 0.5, "一点点": 0.4, "稍微": 0.5, "稍稍": 0.5, "略": 0.5, "略微": 0.5,
    "些许": 0.5, "微微": 0.5, "还算": 0.8,
    "a bit": 0.5, "a little": 0.5, "a little bit": 0.5, "a tad": 0.5, "slightly": 0.5,
    "somewhat": 0.6, "kind of": 0.6, "kinda": 0.6, "sort of": 0.6, "sorta": 0.6, "fairly": 0.8,
    # moderate
    "比较": 1.1, "还挺": 1.2, "挺": 1.3, "蛮": 1.3, "很": 1.3, "更": 1.3, "更加": 1.3,
    "越来越": 1.3, "这么": 1.3, "那么": 1.3, "如此": 1.4, "真": 1.4, "真的": 1.4, "真是": 1.4,
    "实在": 1.4, "确实": 1.2,
    "quite": 1.2, "rather": 1.1, "really": 1.4, "truly": 1.4, "totally": 1.4, "too": 1.4,
    "very": 1.5, "so": 1.5, "such": 1.3, "more": 1.2,
    # strong
    "太": 1.7, "非常": 1.7, "特别": 1.7, "特": 1.5, "十分": 1.6, "超": 1.7, "超级": 1.8,
    "巨": 1.7, "贼": 1.6, "相当": 1.5, "格外": 1.6, "分外": 1.6, "多么": 1.5, "简直": 1.5,
    "最": 1.8, "极": 1.9, "极其": 1.9, "极度": 1.9, "无比": 1.9, "万分": 1.9, "异常": 1.7,
    "super": 1.6, "extremely": 1.9, "incredibly": 1.8, "insanely": 1.8, "absolutely": 1.6,
    "completely": 1.5, "highly": 1.5, "deeply": 1.6, "terribly": 1.6, "utterly": 1.8,
    "most": 1.6,
}

# Ambivalent words: a degree adverb when a sentiment word, negator or another
# degree adverb follows directly ("好开心", "pretty good"), otherwise the
# sentiment word of the table above ("天气很好").
_AMBIVALENT: dict[str, float] = {"好": 1.5, "pretty": 1.3}

# "OK"-words that mean "good" after a degree adverb (非常好的建议 vs 好的，我知道了).
_OK_WORDS = {"好的": "好"}

# Intensifiers after the word: 累死了, 开心极了, 高兴得不得了, "love you so much".
_POST_DEGREE: dict[str, float] = {
    "死了": 1.6, "极了": 1.7, "得要命": 1.7, "得不得了": 1.7, "不得了": 1.6, "坏了": 1.5,
    "爆了": 1.6, "炸了": 1.6, "透了": 1.6, "到爆": 1.6, "得很": 1.3,
    "so much": 1.4, "a lot": 1.3, "as hell": 1.6, "af": 1.6,
}

# Negators: factor 1.0 = plain; > 1.0 = emphatic (一点也不), scales the result.
_NEGATOR: dict[str, float] = {
    "不": 1.0, "没": 1.0, "没有": 1.0, "别": 1.0, "不是": 1.0, "并不": 1.0, "并没有": 1.0,
    "并非": 1.0, "不会": 1.0, "不要": 1.0, "不想": 1.0, "不能": 1.0, "不再": 1.0, "不够": 1.0,
    "甭": 1.0, "未曾": 1.0, "无": 1.0,
    "毫不": 1.4, "从不": 1.3, "从来不": 1.3, "从没": 1.3, "从来没有": 1.3, "绝不": 1.4,
    "一点也不": 1.4, "一点都不": 1.4, "根本不": 1.4, "完全不": 1.4, "根本没": 1.4,
    "not": 1.0, "no": 1.0, "never": 1.0, "don't": 1.0, "dont": 1.0, "doesn't": 1.0,
    "doesnt": 1.0, "didn't": 1.0, "didnt": 1.0, "isn't": 1.0, "isnt": 1.0, "wasn't": 1.0,
    "aren't": 1.0, "weren't": 1.0, "won't": 1.0, "wont": 1.0, "can't": 1.0, "cant": 1.0,
    "cannot": 1.0, "couldn't": 1.0, "wouldn't": 1.0, "shouldn't": 1.0, "haven't": 1.0,
    "hasn't": 1.0, "hadn't": 1.0, "ain't": 1.0, "nor": 1.0, "without": 1.0, "hardly": 1.0,
    "not at all": 1.4, "not even": 1.2,
}

# A negator fused with an intensifier: partial negation ("not very", 不太).
_NEG_DEGREE: dict[str, float] = {
    "不太": 1.5, "不大": 1.5, "不是很": 1.5, "不怎么": 1.5, "不那么": 1.5, "没那么": 1.5,
    "没有那么": 1.5, "不是特别": 1.5, "不是太": 1.5, "不算太": 1.5, "不算很": 1.5, "不很": 1.5,
    "不特别": 1.5, "不十分": 1.5, "并不是很": 1.5, "没有很": 1.5, "不是非常": 1.5,
    "not very": 1.5, "not so": 1.5, "not too": 1.5, "not that": 1.5, "not really": 1.5,
    "not particularly": 1.5, "not exactly": 1.5, "not quite": 1.5,
}

_CONTRAST = ("但是", "但", "可是", "不过", "然而", "but", "however", "though")

# Consumed as neutral so that a negator / degree / sentiment character inside
# them is not misread: 别人 is "others", 超市 a supermarket, 好吧 "all right".
_NEUTRAL_WORDS = (
    "别人", "别的", "别处", "区别", "分别", "差别", "级别", "类别", "性别", "识别", "个别", "别墅", "告别",
    "没什么", "没错", "没空", "淹没", "没收", "出没",
    "不仅", "不断", "不管", "不然", "不如", "不同", "不久", "不少", "不用", "不客气", "不得不",
    "差不多", "不好意思", "不一样", "不知道", "要不要", "好不好", "忍不住", "不得", "不禁", "不停",
    "不但", "不对", "不一定", "不知", "不是吗", "对不对", "是不是", "能不能", "会不会", "要不",
    "好吧", "好啊", "好呀", "好久", "好像", "好多", "好几", "好些", "只好", "好好",
    "好不容易", "你好", "您好", "大家好", "早上好", "晚上好", "下午好", "好处", "好友", "爱好",
    "最好", "最近", "最后", "最终", "最初", "最早", "太阳", "太空", "太太", "太极", "太平",
    "超市", "超过", "超越", "超出", "超人", "北极", "南极", "极端", "更新", "更换", "更改",
    "变更", "真相", "认真", "天真", "真实", "巨大", "怕是", "恐怕", "哪怕", "爱人", "牛奶", "牛肉",
    "牛仔", "蜗牛", "无论", "无法", "无关", "无数", "无限", "哭笑不得", "可以", "可能",
    "no one", "nobody", "no matter", "not only", "so so", "so-so", "so far", "so that",
    "too much", "at least", "feel like", "pretty much", "good morning", "good night",
    "good luck", "how are you",
)

# Emoji presentation selectors, zero-width joiner and skin tones dropped, curly
# apostrophes made straight (so "don’t" is a negator).
_FOLD = {0xFE0F: None, 0xFE0E: None, 0x200D: None, 0x2019: "'", 0x2018: "'"}
_FOLD.update({cp: None for cp in range(0x1F3FB, 0x1F400)})

# Token kinds.
_S, _A, _D, _PD, _N, _ND, _C, _B, _X = range(9)

_BOUNDARY = frozenset(",.;:?!。、~\n\r\t…()[]\"")
_WORD_RE = re.compile(r"[a-z0-9_]+(?:'[a-z]+)*")
_LAUGH_RE = re.compile(r"(?:ha){2,}h?|h{3,}|(?:he){2,}|lo+l|(?:xi){2,}")
_COMPARATIVE_RE = re.compile(r"i(?:er|est)$")
_MAX_GAP = 3  # unrelated tokens allowed between a modifier and its word


def _is_word_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in "_'")


def _normalise(text: str) -> str:
    """NFKC, traditional → simplified (OpenCC t2s, ``memory.text``), lower case,
    emoji modifiers dropped."""
    return to_simplified(unicodedata.normalize("NFKC", text)).lower().translate(_FOLD)


@dataclass(frozen=True, slots=True)
class _Lexicon:
    chars: dict[str, tuple]  # entries not starting with an ASCII word character
    lengths: dict[str, tuple[int, ...]]  # first character → candidate lengths, longest first
    words: dict[str, tuple]  # single ASCII words
    stems: dict[str, tuple[tuple[str, tuple], ...]]  # Snowball stem → (entry's root, entry), longest root first
    phrases: dict[str, tuple[tuple[str, tuple], ...]]  # first word → (phrase, entry), longest first


@cache
def _lexicon() -> _Lexicon:
    """Build the normalised lookup tables once, on first use."""
    entries: dict[str, tuple] = {}

    def put(key: str, entry: tuple) -> None:
        entries.setdefault(_normalise(key), entry)

    # Order matters only for duplicates: the first definition wins.
    for word, factor in _NEG_DEGREE.items():
        put(word, (_ND, factor, 0.0, ""))
    for word, factor in _NEGATOR.items():
        put(word, (_N, factor, 0.0, ""))
    for word in _CONTRAST:
        put(word, (_C, 0.0, 0.0, ""))
    for word, factor in _POST_DEGREE.items():
        put(word, (_PD, factor, 0.0, ""))
    for label, table in _SENTIMENT.items():
        for word, (valence, arousal) in table.items():
            if word in _AMBIVALENT:
                put(word, (_A, valence, arousal, label, _AMBIVALENT[word]))
            else:
                put(word, (_S, valence, arousal, label))
    for word, factor in _DEGREE.items():
        put(word, (_D, factor, 0.0, ""))
    for word in _NEUTRAL_WORDS:
        put(word, (_X, 0.0, 0.0, ""))
    for word, meaning in _OK_WORDS.items():
        sentiment = entries[_normalise(meaning)]
        put(word, (_X, 0.0, 0.0, "", sentiment[:4]))

    chars: dict[str, tuple] = {}
    lengths: dict[str, set[int]] = {}
    words: dict[str, tuple] = {}
    stems: dict[str, list[tuple[str, tuple]]] = {}
    phrases: dict[str, list[tuple[str, tuple]]] = {}
    for key, entry in entries.items():
        if _is_word_char(key[0]):
            if " " in key or "-" in key:
                phrases.setdefault(key.split(" ")[0].split("-")[0], []).append((key, entry))
            else:
                words[key] = entry
                if entry[0] in (_S, _A):
                    stems.setdefault(stem(key), []).append((key[:-1] if key[-1] in "ey" else key, entry))
        else:
            chars[key] = entry
            lengths.setdefault(key[0], set()).add(len(key))
    return _Lexicon(
        chars=chars,
        lengths={k: tuple(sorted(v, reverse=True)) for k, v in lengths.items()},
        words=words,
        stems={k: tuple(sorted(v, key=lambda r: -len(r[0]))) for k, v in stems.items()},
        phrases={k: tuple(sorted(v, key=lambda p: -len(p[0]))) for k, v in phrases.items()},
    )


_OTHER = (_X, 0.0, 0.0, "")
_BOUND = (_B, 0.0, 0.0, "")
_LAUGH = (_S, 0.4, 0.5, "joy")


def _lookup_word(lex: _Lexicon, word: str) -> tuple | None:
    """An ASCII word: the entry of the word itself, else the first sentiment
    entry that shares its Snowball stem and that the word extends, longest
    entry first (loved → love, hopefully → hopeful, thankfully → thankful).
    "Extends" (the word starts with the entry less a final e or y) keeps a
    derived entry from lending its sentiment to a neutral base word that stems
    alike: help is not helpful, touch is not touching. -ier/-iest, which
    Porter2 leaves alone, are read as -y (happier → happy)."""
    entry = lex.words.get(word)
    if entry is not None:
        return entry
    if word.endswith("n't"):
        return (_N, 1.0, 0.0, "")
    if _LAUGH_RE.fullmatch(word):
        return _LAUGH
    for root, entry in lex.stems.get(stem(word), ()):
        if word.startswith(root):
            return entry
    # Porter2 keeps comparatives and superlatives whole (happier, scariest).
    base = _COMPARATIVE_RE.sub("y", word)
    if base != word:
        for root, entry in lex.stems.get(stem(base), ()):
            if base.startswith(root):
                return entry
    return None


def _tokenise(text: str) -> tuple[list[tuple], int]:
    """Longest-match tokens of normalised ``text`` and its count of '!'."""
    lex = _lexicon()
    tokens: list[tuple] = []
    bangs = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if _is_word_char(ch) and ch != "'":
            match = _WORD_RE.match(text, i)
            if match is None:  # pragma: no cover - a word character always matches
                i += 1
                continue
            word, end = match.group(), match.end()
            hit = None
            for phrase, entry in lex.phrases.get(word, ()):
                stop = i + len(phrase)
                if text.startswith(phrase, i) and (stop >= n or not _is_word_char(text[stop])):
                    hit = (entry, stop)
                    break
            if hit is None:
                hit = (_lookup_word(lex, word) or _OTHER, end)
            tokens.append(hit[0])
            i = hit[1]
            continue
        if ch.isspace() and ch not in "\n\r\t":
            i += 1
            continue
        matched = False
        for length in lex.lengths.get(ch, ()):
            stop = i + length
            if stop > n:
                continue
            entry = lex.chars.get(text[i:stop])
            if entry is None:
                continue
            if _is_word_char(text[stop - 1]) and stop < n and _is_word_char(text[stop]):
                continue  # ":d" must not eat the start of a word
            tokens.append(entry)
            i = stop
            matched = True
            break
        if matched:
            continue
        if ch in _BOUNDARY:
            if ch == "!":
                bangs += 1
            if not tokens or tokens[-1] is not _BOUND:
                tokens.append(_BOUND)
        else:
            tokens.append(_OTHER)
        i += 1
    return tokens, bangs


_NEGATED_LABEL = {
    "joy": "sadness",
    "love": "disgust",
    "gratitude": "sadness",
    "relief": "anxiety",
    "calm": "anxiety",
}


def _resolve_ambivalent(tokens: list[tuple]) -> None:
    """好 / pretty: an intensifier before a sentiment word, negator or degree
    adverb; a sentiment word otherwise. 好的 after a degree adverb: "good"."""
    for k, tok in enumerate(tokens):
        if tok[0] == _X and len(tok) == 5:
            if k > 0 and tokens[k - 1][0] == _D:
                tokens[k] = (_S, *tok[4][1:])
            continue
        if tok[0] != _A:
            continue
        nxt = tokens[k + 1][0] if k + 1 < len(tokens) else _B
        if nxt in (_S, _A, _N, _ND, _D):
            tokens[k] = (_D, tok[4], 0.0, "")
        else:
            tokens[k] = (_S, tok[1], tok[2], tok[3])


def _score_word(tokens: list[tuple], k: int) -> tuple[float, float, str]:
    """(valence, arousal, label) of the sentiment token at ``k`` after the
    modifiers before it and the intensifier after it."""
    _, valence, arousal, label = tokens[k]
    negators: list[float] = []  # nearest first
    inner = 1.0  # degree between the nearest negator and the word
    outer = 1.0  # degree before the nearest negator
    gap = 0
    j = k - 1
    while j >= 0:
        kind, factor = tokens[j][0], tokens[j][1]
        if kind == _D:
            if negators:
                outer *= factor
            else:
                inner *= factor
        elif kind == _N:
            negators.append(factor)
        elif kind == _ND:
            if not negators:
                inner *= factor
            negators.append(1.0)
        elif kind == _X and gap < _MAX_GAP:
            gap += 1
        else:
            break
        j -= 1
    # An intensifier right after the word (one filler token allowed: 得).
    for j in range(k + 1, min(k + 3, len(tokens))):
        kind = tokens[j][0]
        if kind == _PD:
            inner *= tokens[j][1]
            break
        if kind != _X:
            break

    if not negators:
        valence *= inner
        arousal *= 1.0 + 0.5 * (inner - 1.0)
    elif len(negators) % 2 == 0:  # litotes: 不是不喜欢
        valence *= 0.5
        arousal *= 0.5
    else:
        emphatic = negators[0]
        partial = inner > 1.05
        if valence > 0:
            valence *= -0.4 if partial else -0.75
        else:
            valence *= 0.4 if partial else -0.5
        valence *= outer * emphatic
        arousal *= 0.7 if partial else 0.5
        if label == "surprise":
            label, valence = "neutral", 0.0
        elif valence < 0 and label in _NEGATED_LABEL:
            label = _NEGATED_LABEL[label]
        elif valence > 0 and label not in POSITIVE_LABELS:
            label = "calm"
    return valence, min(max(arousal, 0.0), 1.0), label


def analyse(text: str) -> Emotion:
    """Valence, arousal and label of ``text`` (zh / en / mixed, emoji and
    kaomoji included). Empty or emotion-free text gives ``NEUTRAL`` (arousal
    may be up to 0.3 from exclamation marks alone).

    Deterministic and pure; about 50 µs for a chat-length sentence, kept for
    sentences of up to ``CACHED_CHARS`` (capture reads one sentence's emotion
    for its fact, its speech act and its contradiction check).
    """
    if not text:
        return NEUTRAL
    return _analysed(text) if len(text) <= CACHED_CHARS else _analyse(text)


CACHED_CHARS = 300
"""Longest text whose ``analyse`` is kept (a fact's longest sentence, ``memory.capture.MAX_FACT_CHARS``)."""


@lru_cache(maxsize=1024)  # a line read again within its turn and capture: 30.5% hits at 1k, 30.8% at 8k
def _analysed(text: str) -> Emotion:
    return _analyse(text)


def _analyse(text: str) -> Emotion:
    tokens, bangs = _tokenise(_normalise(text))
    _resolve_ambivalent(tokens)

    last_contrast = -1
    for k, tok in enumerate(tokens):
        if tok[0] == _C:
            last_contrast = k

    total = 0.0
    peak_arousal = 0.0
    emotional_words = 0
    by_label: dict[str, float] = {}
    for k, tok in enumerate(tokens):
        if tok[0] != _S:
            continue
        valence, arousal, label = _score_word(tokens, k)
        if last_contrast >= 0:
            valence *= 0.5 if k < last_contrast else 1.5
        total += valence
        peak_arousal = max(peak_arousal, arousal)
        emotional_words += 1
        weight = abs(valence) if label != "surprise" else 0.3 * arousal + abs(valence)
        by_label[label] = by_label.get(label, 0.0) + weight

    emphasis = min(bangs, 3)
    total *= 1.0 + 0.1 * emphasis
    valence = math.tanh(total)
    arousal = peak_arousal + 0.1 * emphasis + 0.05 * min(max(emotional_words - 1, 0), 3)
    arousal = min(max(arousal, 0.0), 1.0)
    return Emotion(round(valence, 4), round(arousal, 4), _pick_label(valence, by_label))


def _pick_label(valence: float, by_label: dict[str, float]) -> str:
    if abs(valence) < 0.1:
        return "surprise" if by_label.get("surprise", 0.0) > 0.0 else "neutral"
    allowed = POSITIVE_LABELS if valence > 0 else NEGATIVE_LABELS
    best, best_weight = "", 0.0
    for label, weight in by_label.items():
        if label in allowed and weight > best_weight:
            best, best_weight = label, weight
    if best:
        return best
    if "surprise" in by_label:  # "wow": mildly valenced surprise words only
        return "surprise"
    return "joy" if valence > 0 else "sadness"
