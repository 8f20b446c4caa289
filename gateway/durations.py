"""Durations a person types after a command: ``/memory pause 2h``,
``/记忆 暂停 30分钟``, ``/memory forget last 10m``.

English (and unit-letter) forms are read by ``pytimeparse`` ("2h", "90 minutes",
"1h30m", "1.5 hours"); Chinese ones here: a number in digits or Chinese
numerals up to 99 (「十五」「两」「半」), optionally 个, then a unit — 分钟/分,
小时/钟头/个钟, 天/日, 周/星期 — and several such pairs in a row
(「1小时30分钟」); 「半小时」 is 30 minutes. Full-width digits are read as
digits. Anything else is no duration (None), never a guess.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import timedelta

from pytimeparse import parse as _parse_en

__all__ = ["parse_duration", "MAX_DURATION"]

MAX_DURATION = timedelta(days=30)
"""Longest duration accepted (a pause or a window to forget); longer is refused, not shortened."""

_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"分钟": 60, "分鐘": 60, "分": 60, "小时": 3600, "小時": 3600, "钟头": 3600, "鐘頭": 3600,
             "个钟": 3600, "個鐘": 3600, "天": 86400, "日": 86400, "周": 604800, "週": 604800, "星期": 604800}
_ZH_PAIR = re.compile(r"(\d+(?:\.\d+)?|[零一二两三四五六七八九十]+|半)\s*[个個]?\s*(半)?\s*("
                      + "|".join(sorted(_ZH_UNITS, key=len, reverse=True)) + r")(半)?")


def _zh_number(word: str) -> float | None:
    """「十五」 → 15, 「两」 → 2, 「三十」 → 30, 「半」 → 0.5, digits as they are; None past 99."""
    if word == "半":
        return 0.5
    if word[0].isdigit():
        return float(word)
    if "十" in word:
        tens, _, ones = word.partition("十")
        if len(tens) > 1 or len(ones) > 1:
            return None
        return (_ZH_DIGITS.get(tens, 0) if tens else 1) * 10 + (_ZH_DIGITS.get(ones, 0) if ones else 0)
    return float(_ZH_DIGITS[word]) if len(word) == 1 else None


def _parse_zh(text: str) -> float | None:
    pos, total = 0, 0.0
    for m in _ZH_PAIR.finditer(text):
        if m.start() != pos:
            return None
        n = _zh_number(m.group(1))
        if n is None:
            return None
        half = 0.5 if (m.group(2) or m.group(4)) else 0.0
        total += (n + half) * _ZH_UNITS[m.group(3)]
        pos = m.end()
    return total if pos == len(text) and pos else None


def parse_duration(text: str) -> timedelta | None:
    """The duration ``text`` names (zh or en), or None when it names none, is
    zero or negative, or exceeds MAX_DURATION. ``"2h"`` → 2 hours,
    ``"30分钟"`` → 30 minutes, ``"一个半小时"`` → 90 minutes."""
    plain = unicodedata.normalize("NFKC", text).strip().casefold()
    if not plain:
        return None
    compact = re.sub(r"\s+", "", plain)
    seconds = _parse_zh(compact) if re.search(r"[\u4e00-\u9fff]", compact) else _parse_en(plain)
    if seconds is None or seconds <= 0 or seconds > MAX_DURATION.total_seconds():
        return None  # checked before timedelta(): 10**20 hours overflows it
    return timedelta(seconds=seconds)
