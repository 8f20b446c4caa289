"""Relative and absolute dates in chat text, resolved against the message time
in the tenant's time zone.

``resolve_when(text, said_at, tz)`` finds the first date expression of a
sentence and returns the calendar day it names, in the time zone ``tz``
(IANA name, default ``Asia/Shanghai``): "明天" said at 2026-11-30 23:30
Shanghai time (15:30 UTC) is 2026-12-01, not the UTC "tomorrow".

Understood (zh): 今天/今晚/今早, 明天/明早/明晚, 后天, 大后天, 昨天/昨晚, 前天,
大前天; 周X/星期X/礼拜X with 这/本/下/下下/上 (X = 一…六, 日/天); 下周/上周/
下个月/上个月/明年/去年/今年; N天后/N天前, N周后/N个星期前, N个月后/前 (digits or
一…九十九); YYYY年M月D日, M月D日/号, YYYY-MM-DD.
Understood (en): today/tonight/this morning|afternoon|evening, tomorrow,
yesterday, the day after tomorrow, the day before yesterday, (next|this|last|on)
<weekday>, next/last week|month|year, in N days|weeks, N days|weeks ago,
ISO dates.

A bare weekday ("周五", "on Friday") is the coming one, today included, unless
the sentence reads as past ("了", "过", "went", "-ed"), then the latest past one.
"下周五"/"next Friday" is the Friday of next week; "上周五"/"last Friday" of
last week. A week starts on Monday.

Limits (accepted): no times of day, no ranges, no lunar calendar, no holidays
("国庆", "Christmas"), English numbers written as words only up to ten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

__all__ = ["When", "resolve_when", "query_period", "query_period_span", "zone", "DEFAULT_TZ"]

DEFAULT_TZ = "Asia/Shanghai"

_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
               "eight": 8, "nine": 9, "ten": 10}
_ZH_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "末": 5,
               "1": 0, "2": 1, "3": 2, "4": 3, "5": 4, "6": 5, "7": 6}
_EN_WEEKDAY = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6,
               "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_ZH_DAY_WORDS = {"大后天": 3, "后天": 2, "明天": 1, "明日": 1, "明早": 1, "明晚": 1, "今天": 0, "今日": 0, "今晚": 0,
                 "今早": 0, "今夜": 0, "昨天": -1, "昨日": -1, "昨晚": -1, "昨夜": -1, "大前天": -3, "前天": -2}

_NUM = r"(\d{1,3}|[零〇一二两三四五六七八九十]{1,3})"
_ZH_PAST = re.compile(r"(?<![对好算罢])了|过|昨|刚|已经|那天")  # 对了/好了/算了 are discourse, not the past
_EN_PAST = re.compile(r"\b(was|were|went|did|had|got|saw|met|ago|\w{2,}ed)\b", re.IGNORECASE)

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)")),
    ("zh_ymd", re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})[日号]")),
    ("zh_md", re.compile(r"(?<![\d年])(\d{1,2})月(\d{1,2})[日号]")),
    ("zh_day", re.compile("|".join(sorted(_ZH_DAY_WORDS, key=len, reverse=True)))),
    ("zh_weekday", re.compile(r"(下下|下个?|上个?|这个?|本)?(?:周|星期|礼拜)([一二三四五六日天末1-7])")),
    ("zh_offset", re.compile(_NUM + r"\s*(天|日|周|个?星期|个?礼拜|个月|年)\s*(后|以后|之后|前|以前|之前)")),
    ("zh_period", re.compile(r"(下下|下个?|上个?|这个?|本)(周|星期|礼拜|月)(?![一二三四五六日天1-7末])|(明年|去年|前年|后年)")),
    ("en_day", re.compile(r"\b(the day after tomorrow|the day before yesterday|tomorrow|yesterday|today|tonight|"
                          r"this (?:morning|afternoon|evening))\b", re.IGNORECASE)),
    ("en_weekday", re.compile(r"\b(next|this|last|on|coming)?\s*(" + "|".join(sorted(_EN_WEEKDAY, key=len, reverse=True))
                              + r")\b", re.IGNORECASE)),
    ("en_offset", re.compile(r"\b(?:in\s+(\d{1,3}|" + "|".join(_EN_NUMBERS) + r")\s+(day|week|month|year)s?)\b|"
                             r"\b(\d{1,3}|" + "|".join(_EN_NUMBERS) + r")\s+(day|week|month|year)s?\s+ago\b",
                             re.IGNORECASE)),
    ("en_period", re.compile(r"\b(next|last|this)\s+(week|month|year)\b", re.IGNORECASE)),
]


@dataclass(frozen=True, slots=True)
class When:
    """A resolved date: ``day`` (calendar day in the tenant's zone), ``at`` (that
    day's local midnight as a timezone-aware UTC datetime), ``span`` (start, end)
    of the expression in the text, ``relative`` (True for "明天", False for
    "2026-12-01")."""

    day: date
    at: datetime
    span: tuple[int, int]
    relative: bool


@lru_cache(maxsize=64)
def zone(name: str | None) -> tzinfo:
    """The ``tzinfo`` of an IANA zone name (None → DEFAULT_TZ). Raises
    ValueError for an unknown name."""
    try:
        return ZoneInfo(name or DEFAULT_TZ)
    except Exception as exc:  # ZoneInfoNotFoundError, ValueError for odd keys
        raise ValueError(f"unknown time zone {name!r}") from exc


def _zh_number(token: str) -> int | None:
    if token.isdigit():
        return int(token)
    if not token:
        return None
    if "十" in token:
        tens, _, ones = token.partition("十")
        t = _ZH_DIGITS.get(tens, 1) if tens else 1
        o = _ZH_DIGITS.get(ones, 0) if ones else 0
        return t * 10 + o
    if len(token) == 1:
        return _ZH_DIGITS.get(token)
    return None


def _number(token: str) -> int | None:
    return _EN_NUMBERS.get(token.lower()) if token.isalpha() and token.isascii() else _zh_number(token)


def _add_months(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    return date(d.year + y, m + 1, 1)


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _weekday(today: date, target: int, which: str, past: bool) -> date:
    """``which``: next (next week's), last (last week's), this (this week's), "" (bare)."""
    if which == "next":
        return _monday(today) + timedelta(days=7 + target)
    if which == "nextnext":
        return _monday(today) + timedelta(days=14 + target)
    if which == "last":
        return _monday(today) - timedelta(days=7 - target)
    if which == "this":
        return _monday(today) + timedelta(days=target)
    if past:
        return today - timedelta(days=(today.weekday() - target) % 7)
    return today + timedelta(days=(target - today.weekday()) % 7)


def _which_zh(prefix: str | None) -> str:
    if not prefix:
        return ""
    if prefix.startswith("下下"):
        return "nextnext"
    return {"下": "next", "上": "last", "这": "this", "本": "this"}[prefix[0]]


def _resolve(kind: str, m: re.Match[str], today: date, text: str) -> tuple[date, bool] | None:
    g = m.groups()
    if kind == "iso" or kind == "zh_ymd":
        return date(int(g[0]), int(g[1]), int(g[2])), False
    if kind == "zh_md":
        return date(today.year, int(g[0]), int(g[1])), False
    if kind == "zh_day":
        return today + timedelta(days=_ZH_DAY_WORDS[m.group(0)]), True
    if kind == "zh_weekday":
        which = _which_zh(g[0])
        return _weekday(today, _ZH_WEEKDAY[g[1]], which, bool(_ZH_PAST.search(text))), True
    if kind == "zh_offset":
        n = _zh_number(g[0])
        if n is None:
            return None
        sign = -1 if g[2].endswith("前") else 1
        unit = g[1]
        if unit in ("天", "日"):
            return today + timedelta(days=sign * n), True
        if unit == "个月":
            return _add_months(today, sign * n).replace(day=min(today.day, 28)), True
        if unit == "年":
            return date(today.year + sign * n, 1, 1), True
        return today + timedelta(weeks=sign * n), True
    if kind == "zh_period":
        if g[2]:
            return date(today.year + {"明年": 1, "去年": -1, "前年": -2, "后年": 2}[g[2]], 1, 1), True
        which = _which_zh(g[0])
        step = {"nextnext": 2, "next": 1, "last": -1, "this": 0}[which]
        if g[1] == "月":
            return _add_months(today, step), True
        return _monday(today) + timedelta(weeks=step), True
    if kind == "en_day":
        word = m.group(1).lower()
        offset = {"the day after tomorrow": 2, "the day before yesterday": -2, "tomorrow": 1, "yesterday": -1}
        return today + timedelta(days=offset.get(word, 0)), True
    if kind == "en_weekday":
        which = (g[0] or "").lower()
        which = {"coming": "", "on": ""}.get(which, which)
        return _weekday(today, _EN_WEEKDAY[g[1].lower()], which, bool(_EN_PAST.search(text))), True
    if kind == "en_offset":
        if g[0]:
            n, unit, sign = _number(g[0]), g[1].lower(), 1
        else:
            n, unit, sign = _number(g[2]), g[3].lower(), -1
        if n is None:
            return None
        if unit == "day":
            return today + timedelta(days=sign * n), True
        if unit == "week":
            return today + timedelta(weeks=sign * n), True
        if unit == "month":
            return _add_months(today, sign * n).replace(day=min(today.day, 28)), True
        return date(today.year + sign * n, 1, 1), True
    if kind == "en_period":
        step = {"next": 1, "last": -1, "this": 0}[g[0].lower()]
        unit = g[1].lower()
        if unit == "week":
            return _monday(today) + timedelta(weeks=step), True
        if unit == "month":
            return _add_months(today, step), True
        return date(today.year + step, 1, 1), True
    return None  # pragma: no cover - every kind is handled above


def resolve_when(text: str, said_at: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> When | None:
    """The first date expression of ``text`` (earliest in the text), resolved
    against ``said_at`` (timezone-aware; naive is taken as UTC) in zone ``tz``.
    None when the text names no date, or names an impossible one (2月30日).
    Raises ValueError for an unknown zone name."""
    if not text:
        return None
    tzi = tz if isinstance(tz, tzinfo) else zone(tz)
    moment = said_at if said_at.tzinfo else said_at.replace(tzinfo=timezone.utc)
    today = moment.astimezone(tzi).date()
    found: list[tuple[int, int, str, re.Match[str]]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if kind == "en_weekday" and not m.group(1) and m.group(2).lower() in ("sun", "sat", "wed", "mon"):
                continue  # "sun", "sat" are ordinary words when not introduced
            found.append((m.start(), -(m.end() - m.start()), kind, m))
            break
    for start, _neg_len, kind, m in sorted(found, key=lambda f: (f[0], f[1])):
        try:
            resolved = _resolve(kind, m, today, text)
        except ValueError:  # 2月30日, month 13
            continue
        if resolved is None:
            continue
        day, relative = resolved
        local_midnight = datetime.combine(day, time(0), tzinfo=tzi)
        return When(day=day, at=local_midnight.astimezone(timezone.utc), span=(start, m.end()), relative=relative)
    return None


_MONTHS_EN = {"jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3, "apr": 4, "april": 4, "may": 5,
              "jun": 6, "june": 6, "jul": 7, "july": 7, "aug": 8, "august": 8, "sep": 9, "sept": 9, "september": 9,
              "oct": 10, "october": 10, "nov": 11, "november": 11, "dec": 12, "december": 12}
# Capitalised only: "may", "march", "sat" are ordinary words in lower case.
_MON = r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|" \
       r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
_PERIODS: list[tuple[str, re.Pattern[str]]] = [
    ("ymd", re.compile(r"(?<!\d)" + _YEAR + r"\s*(?:年|-|/)\s*(\d{1,2})\s*(?:月|-|/)\s*(\d{1,2})(?!\d)")),
    ("mdy", re.compile(r"\b" + _MON + r"\s+" + _ORD + r",?\s+" + _YEAR + r"\b")),
    ("dmy", re.compile(r"\b" + _ORD + r"\s+(?:of\s+)?" + _MON + r",?\s+" + _YEAR + r"\b")),
    ("ym", re.compile(r"(?<!\d)" + _YEAR + r"\s*年\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月(?!\s*\d{1,2}\s*[日号])")),
    ("my", re.compile(r"\b" + _MON + r",?\s+(?:of\s+)?" + _YEAR + r"\b")),
    ("md", re.compile(r"\b" + _MON + r"\s+" + _ORD + r"\b(?!\s*,?\s*\d)")),
    ("dm", re.compile(r"\b" + _ORD + r"\s+(?:of\s+)?" + _MON + r"\b")),
    ("zh_md", re.compile(r"(?<![\d年])(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*[日号]")),
    ("m", re.compile(r"\b(?:in|during|of|since|until|early|late|mid|mid-|last|this|around)\s+" + _MON
                     + r"\b(?!\s+\d)")),
    ("zh_m", re.compile(r"(?<![\d年])(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月份?(?![\d日号])")),
    ("y", re.compile(r"(?:\b(?:in|during|of|since)\s+" + _YEAR + r"\b|(?<!\d)" + _YEAR + r"\s*年(?!\s*\d))")),
]


def _month_end(year: int, month: int) -> date:
    return _add_months(date(year, month, 1), 1) - timedelta(days=1)


def _latest(today: date, month: int, day: int | None = None) -> date:
    """The latest ``month`` (and ``day``) not after ``today``: "in May" asked in
    March 2024 is May 2023."""
    year = today.year if (month, day or 1) <= (today.month, today.day) else today.year - 1
    return date(year, month, day or 1)


def _month_of(token: str) -> int | None:
    n = _MONTHS_EN.get(token.lower().rstrip(".")) if token[:1].isalpha() and token.isascii() else _zh_number(token)
    return n if n is not None and 1 <= n <= 12 else None


def _period_of(kind: str, g: tuple, today: date) -> tuple[date, date] | None:
    if kind == "ymd":
        d = date(int(g[0]), int(g[1]), int(g[2]))
        return d, d
    if kind in ("mdy", "dmy"):
        mon, day = (g[0], g[1]) if kind == "mdy" else (g[1], g[0])
        d = date(int(g[2]), _MONTHS_EN[mon.lower().rstrip(".")], int(day))
        return d, d
    if kind in ("ym", "my"):
        month = _month_of(g[1] if kind == "ym" else g[0])
        year = int(g[0] if kind == "ym" else g[1])
        return (date(year, month, 1), _month_end(year, month)) if month else None
    if kind in ("md", "dm", "zh_md"):
        mon, day = (g[0], g[1]) if kind in ("md", "zh_md") else (g[1], g[0])
        month, d = _month_of(mon), _zh_number(day) if kind == "zh_md" else int(day)
        if not month or not d:
            return None
        day_ = _latest(today, month, d)
        return day_, day_
    if kind in ("m", "zh_m"):
        month = _month_of(g[0])
        if not month:
            return None
        start = _latest(today, month)
        return start, _month_end(start.year, month)
    year = int(g[0] or g[1])
    return date(year, 1, 1), date(year, 12, 31)


_GRAIN_RE = (("year", re.compile(r"年|\byears?\b", re.IGNORECASE)),
             ("month", re.compile(r"月|\bmonths?\b", re.IGNORECASE)),
             ("week", re.compile(r"(?:周|星期|礼拜)(?![一二三四五六日天1-7末])|\bweeks?\b", re.IGNORECASE)))


def query_period_span(text: str, now: datetime, tz: str | tzinfo | None = DEFAULT_TZ
                      ) -> tuple[tuple[date, date], tuple[int, int]] | None:
    """``query_period`` with where the text names it: ``((first day, last day),
    (start, end))``, the span in characters of ``text``; None when it names no
    period. The period a question names, as (first day, last day) inclusive in
    zone ``tz``: "on February 7, 2022" and 「2022年2月7日」 a day; "in May",
    "May 2023", 「五月」, 「2023年5月」 a month (a month without a year is its latest
    occurrence not after ``now``); "in 2022", 「2022年」 a year; and every relative
    expression of ``resolve_when`` at its own grain: "yesterday"/「昨天」 a day,
    "last week"/「上周」 that Monday–Sunday, "last month"/「上个月」 that month,
    "last year"/「去年」 that year. English month names count only capitalised
    ("may" and "march" are ordinary words). The earliest expression in the text
    wins. Raises ValueError for an unknown zone name."""
    if not text:
        return None
    tzi = tz if isinstance(tz, tzinfo) else zone(tz)
    moment = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    today = moment.astimezone(tzi).date()
    found: list[tuple[int, tuple[date, date], int]] = []
    for kind, pattern in _PERIODS:
        for m in pattern.finditer(text):
            try:
                period = _period_of(kind, m.groups(), today)
            except (ValueError, KeyError):  # 2月30日, month 13
                period = None
            if period is not None:
                found.append((m.start(), period, m.end()))
                break
    when = resolve_when(text, moment, tzi)
    if when is not None and not any(start <= when.span[0] for start, _, _ in found):
        phrase = text[when.span[0]:when.span[1]]
        grain = next((g for g, rx in _GRAIN_RE if rx.search(phrase)), "day")
        d = when.day
        if grain == "year":
            period = (date(d.year, 1, 1), date(d.year, 12, 31))
        elif grain == "month":
            period = (d.replace(day=1), _month_end(d.year, d.month))
        elif grain == "week":
            period = (_monday(d), _monday(d) + timedelta(days=6))
        else:
            period = (d, d)
        found.append((when.span[0], period, when.span[1]))
    if not found:
        return None
    start, period, end = min(found)
    if text[end:end + 1] in ("日", "号") and end < len(text):  # 「4月30日」: the day's character belongs to the date
        end += 1
    return period, (start, end)


def query_period(text: str, now: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> tuple[date, date] | None:
    """The calendar period a question names, as (first day, last day) inclusive in
    zone ``tz``, or None (``query_period_span`` without the span; its docstring
    lists what counts). Raises ValueError for an unknown zone name."""
    found = query_period_span(text, now, tz)
    return found[0] if found else None
