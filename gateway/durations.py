"""Durations a person types after a command: ``/memory pause 2h``,
``/记忆 暂停 30分钟``, ``/memory forget last 10m``.

English (and unit-letter) forms are read by ``pytimeparse`` ("2h", "90 minutes",
"1h30m", "1.5 hours"); Chinese ones here: a number in digits or Chinese
numerals (「十五」「两」「三百」「半」), optionally 个, then a unit — 分钟/分,
小时/钟头/个钟, 天/日, 周/星期 — and several such pairs in a row
(「1小时30分钟」); 「半小时」 is 30 minutes. Full-width digits are read as
digits. Anything else is no duration (None), never a guess; a length past
``MAX_DURATION`` raises ``DurationTooLong`` (it is read, and refused), so a
reply can say "too long, at most 30 days" rather than "unreadable".
"""

from __future__ import annotations

import re
import unicodedata
from datetime import timedelta

from pytimeparse import parse as _parse_en

__all__ = ["parse_duration", "read_count", "MAX_DURATION", "DurationTooLong"]

MAX_DURATION = timedelta(days=30)
"""Longest duration accepted (a pause or a window to forget); longer is refused, not shortened."""



class DurationTooLong(ValueError):
    """A duration was read but is longer than ``MAX_DURATION``: ``seconds`` (a
    float, possibly huge: ``10**20`` hours is read, never made a timedelta)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:g} s is longer than {MAX_DURATION}")
        self.seconds = seconds


_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"分钟": 60, "分鐘": 60, "分": 60, "小时": 3600, "小時": 3600, "钟头": 3600, "鐘頭": 3600,
             "个钟": 3600, "個鐘": 3600, "天": 86400, "日": 86400, "周": 604800, "週": 604800, "星期": 604800}
_ZH_PAIR = re.compile(r"(\d+(?:\.\d+)?|[零一二两三四五六七八九十百千万]+|半)\s*[个個]?\s*(半)?\s*("
                      + "|".join(sorted(_ZH_UNITS, key=len, reverse=True)) + r")(半)?")


_ZH_SCALES = {"十": 10, "百": 100, "千": 1000}


def _zh_number(word: str) -> float | None:
    """「十五」 → 15, 「两」 → 2, 「三十」 → 30, 「三百」 → 300, 「一万」 → 10000, 「半」 → 0.5,
    digits as they are; None for a run that is no number (「三三」, 「十十」)."""
    if word == "半":
        return 0.5
    if word[0].isdigit():
        return float(word)
    total = section = 0
    digit: int | None = None
    for ch in word:
        if ch in _ZH_DIGITS:
            if digit:  # 「三三」: two digits in a row name no number
                return None
            digit = _ZH_DIGITS[ch]
        elif ch in _ZH_SCALES:
            section += (1 if digit is None else digit) * _ZH_SCALES[ch]
            digit = None
        else:  # 万
            total += (section + (digit or 0)) * 10000
            section, digit = 0, None
    return float(total + section + (digit or 0))


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


_COUNT = re.compile(r"([+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?|[零一二两三四五六七八九十百千万]+)")


def read_count(text: str) -> float | None:
    """The number ``text`` is, read as the durations are: ASCII or full-width
    digits (NFKC), a sign, a decimal or exponent (``"1e9"`` → 1e9, so that a
    caller can refuse it as out of range rather than unreadable), or Chinese
    numerals (「三」 → 3, 「十二」 → 12, 「两」 → 2). None when it is no number
    (「三三」, ``"abc"``, ``""``)."""
    plain = re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).casefold()
    if not _COUNT.fullmatch(plain):
        return None
    if plain[0] in "+-" or plain[0].isdigit():
        return float(plain)
    return _zh_number(plain)


def parse_duration(text: str) -> timedelta | None:
    """The duration ``text`` names (zh or en), or None when it names none or is
    zero or negative. ``"2h"`` → 2 hours, ``"30分钟"`` → 30 minutes,
    ``"一个半小时"`` → 90 minutes. Raises DurationTooLong when it names more than
    MAX_DURATION (``"45d"``, ``"99999h"``)."""
    plain = unicodedata.normalize("NFKC", text).strip().casefold()
    if not plain:
        return None
    compact = re.sub(r"\s+", "", plain)
    seconds = _parse_zh(compact) if re.search(r"[\u4e00-\u9fff]", compact) else _parse_en(plain)
    if seconds is None or seconds <= 0:
        return None
    if seconds > MAX_DURATION.total_seconds():  # checked before timedelta(): 10**20 hours overflows it
        raise DurationTooLong(float(seconds))
    return timedelta(seconds=seconds)
