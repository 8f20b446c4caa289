"""Relative and absolute dates in chat text, resolved against the message time
in the tenant's time zone.

``resolve_when(text, said_at, tz)`` finds the first date expression of a
sentence and returns the calendar day or period it names, in the time zone
``tz`` (IANA name, default ``Asia/Shanghai``): "明天" said at 2026-11-30 23:30
Shanghai time (15:30 UTC) is 2026-12-01, not the UTC "tomorrow". A day names a
day (``When.day == When.end``); a week, a month, a year or a weekend named
alone (「下周」, 「下个月」, "next year", "in March", 「这周末」) is that period,
first to last day, not its first day.

Understood (zh): 今天/今晚/今早, 明天/明早/明晚, 后天, 大后天, 昨天/昨晚, 前天,
大前天; 周X/星期X/礼拜X with 这/本/下/下下/上 (X = 一…六, 日/天), 周末; 下周/上周/
下下周/下个月/上个月/明年/去年/今年/后年/前年, 月底/月初/年底/年初 (with 下个/明年…);
a day of a named month (「下个月15号」, 「明年3月5日」) or of this one (「15号」); N天后/N天前,
N周后/N个星期前, N个月后/前, N年后/前 (digits or 一…九十九); YYYY年M月D日, M月D日/号,
YYYY-MM-DD, M月/YYYY年M月 (a month); fixed holidays (元旦, 情人节, 五一/劳动节, 六一/儿童节,
国庆, 平安夜, 圣诞, 跨年) and the lunar ones of 2023–2030 (除夕, 春节, 端午, 七夕, 中秋), with
今年/明年/去年.
Understood (en): today/tonight/this morning|afternoon|evening, tomorrow,
yesterday, the day after tomorrow, the day before yesterday, (next|this|last|on)
<weekday>, (this|next|last) weekend, next/last/this week|month|year, in N
days|weeks|months|years, N days|weeks ago, the 15th, March 15 / 15 March (with
or without a year), in March / March 2027 (a month), the end of the month,
Christmas (Eve), New Year's Eve/Day, Valentine's Day, Halloween, ISO dates.
Traditional characters and full-width digits read as simplified and ASCII.

Which one a bare name means follows the line's tense, read in the clause that
names it: a bare weekday ("周五", "on Friday"), a day of the month ("15号",
"the 15th"), a month and day, a month or a holiday is the coming one (today
included) unless the clause reads as past ("了", "过", "went", "-ed") and not
as future ("要", "就…了", "will", "going to"), then the latest past one.
"下周五"/"next Friday" is the Friday of next week; "上周五"/"last Friday" of
last week; 「这周六」 said in a future line after this week's Saturday is the
coming one. A week starts on Monday.

Limits (accepted): no times of day, no ranges ("from May to June"), lunar
holidays outside 2023–2030 unread, English numbers written as words only up to
ten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

from memory.text import to_simplified

__all__ = ["When", "habitual", "resolve_when", "period_label", "days_label", "query_period", "query_period_span", "zone", "DEFAULT_TZ"]

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
_ZH_YEAR_WORDS = {"今年": 0, "明年": 1, "去年": -1, "后年": 2, "前年": -2}
# fixed-date holidays: (month, day)
_HOLIDAYS = {"元旦": (1, 1), "情人节": (2, 14), "妇女节": (3, 8), "劳动节": (5, 1), "五一": (5, 1), "儿童节": (6, 1),
             "六一": (6, 1), "国庆节": (10, 1), "国庆": (10, 1), "万圣节": (10, 31), "光棍节": (11, 11),
             "双十一": (11, 11), "平安夜": (12, 24), "圣诞节": (12, 25), "圣诞": (12, 25), "跨年": (12, 31),
             "christmas eve": (12, 24), "christmas": (12, 25), "xmas": (12, 25), "new year's eve": (12, 31),
             "new years eve": (12, 31), "new year's day": (1, 1), "new years day": (1, 1),
             "valentine's day": (2, 14), "valentines day": (2, 14), "valentine's": (2, 14), "halloween": (10, 31)}
# lunar holidays by Gregorian year (Hong Kong Observatory's conversion tables)
_LUNAR = {
    "春节": {2023: (1, 22), 2024: (2, 10), 2025: (1, 29), 2026: (2, 17), 2027: (2, 6), 2028: (1, 26), 2029: (2, 13),
           2030: (2, 3)},
    "端午": {2023: (6, 22), 2024: (6, 10), 2025: (5, 31), 2026: (6, 19), 2027: (6, 9), 2028: (5, 28), 2029: (6, 16),
           2030: (6, 5)},
    "七夕": {2023: (8, 22), 2024: (8, 10), 2025: (8, 29), 2026: (8, 19), 2027: (8, 8), 2028: (8, 26), 2029: (8, 16),
           2030: (8, 5)},
    "中秋": {2023: (9, 29), 2024: (9, 17), 2025: (10, 6), 2026: (9, 25), 2027: (9, 15), 2028: (10, 3), 2029: (9, 22),
           2030: (9, 12)},
}
_LUNAR["清明"] = {2023: (4, 5), 2024: (4, 4), 2025: (4, 4), 2026: (4, 5), 2027: (4, 5), 2028: (4, 4), 2029: (4, 4),
                 2030: (4, 5)}  # a solar term, not lunar, but as irregular in the Gregorian calendar
_LUNAR["清明节"] = _LUNAR["清明"]
_LUNAR["端午节"], _LUNAR["中秋节"], _LUNAR["七夕节"] = _LUNAR["端午"], _LUNAR["中秋"], _LUNAR["七夕"]
_LUNAR["过年"] = _LUNAR["春节"]
_LUNAR["除夕"] = {y: (d - timedelta(days=1)).timetuple()[1:3]
                for y, d in ((y, date(y, m, dd)) for y, (m, dd) in _LUNAR["春节"].items())}
_EN_MONTH_WORDS = {"jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3, "apr": 4, "april": 4,
                   "may": 5, "jun": 6, "june": 6, "jul": 7, "july": 7, "aug": 8, "august": 8, "sep": 9, "sept": 9,
                   "september": 9, "oct": 10, "october": 10, "nov": 11, "november": 11, "dec": 12, "december": 12}

_NUM = r"(\d{1,3}|[零〇一二两三四五六七八九十]{1,3})"
_DAYNUM = r"(\d{1,2}|[一二三四五六七八九十]{1,3})"
_ZH_REL = r"(下下个?|下个?|上个?|这个?|本)"
_ZH_PAST = re.compile(r"(?<![对好算罢约订定])了|过|昨|刚|已经|那天")  # 对了/好了/算了 are discourse, not the past;
# 约了/订了/定了 an arrangement made for a day still ahead (「周三约了朋友吃火锅」)
# 会 and 要 as words, not in 开会/聚会/会议, 重要/主要/只要
_ZH_FUTURE = re.compile(r"(?<![重主只])要|将|(?<![开聚约宴晚早舞年例])会(?![议员])|打算|准备|计划|预计|得去|想去|就.{0,4}了|"
                        r"快.{0,4}了|还没|之后|以后")
_EN_PAST = re.compile(r"\b(was|were|went|did|had|(?<!'ve )(?<!have )got|saw|met|ago|spent|came|took|made|left|bought|ate|drank|flew|"
                      r"gave|told|said|thought|felt|lost|found|won|ran|wrote|began|broke|caught|chose|drove|fell|"
                      r"forgot|heard|kept|knew|paid|sang|sat|slept|spoke|stood|swam|taught|threw|woke|wore)\b",
                      re.IGNORECASE)
# "-ed" is the past unless a present "be"/"get" makes it a state ("I'm excited", "we're getting married")
_EN_ED = re.compile(r"\b(?:(am|'m|are|'re|is|'s|be|being|get|getting|feel|feeling)\s+)?\w+[^e\W]ed\b", re.IGNORECASE)
_EN_FUTURE = re.compile(r"\b(will|won't|shall|gonna|going to|plan(?:ning)? to|about to|can't wait|"
                        r"next|upcoming|starts?|begins?)\b|'ll\b|(?:'re|'m|\bam|\bare)\s+\w+ing\b", re.IGNORECASE)
_CLAUSE = re.compile(r"[，,。.！!？?；;\n]")
# a habit: a weekday or weekend named bare in a clause that says it happens as a rule (「我周末一般都去爬山」,
# 「周六我都会去游泳」, "on Saturdays I usually sleep in") names no one day
_ZH_HABIT = re.compile(r"一般|通常|平时|平常|往往|向来|总是|总会|经常|常常|老是|习惯|每(?:个|逢)?(?:周|星期|礼拜)|"
                       r"(?:周末|周[一二三四五六日天]|星期[一二三四五六日天]|礼拜[一二三四五六日天]?)"
                       r"[我你他她]?(?:一般|通常)?都")
_EN_HABIT = re.compile(r"\b(?:usually|normally|typically|generally|often|always|tend to|every)\b",
                       re.IGNORECASE)
_NOT_A_DAY_AFTER = r"(?![线楼房门床球车位机台店馆厅院桌座元码点路栋层班站口岗游常])"
_MON = (r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
        r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?")
_HOLIDAY_RE = "|".join(sorted((re.escape(h) for h in [*_HOLIDAYS, *_LUNAR] if not h.isascii()), key=len, reverse=True))
_EN_HOLIDAY_RE = "|".join(sorted((re.escape(h).replace("'", "['’]?") for h in _HOLIDAYS if h.isascii()),
                                 key=len, reverse=True))

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)")),
    ("zh_ymd", re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})[日号]")),
    ("zh_ym", re.compile(r"(?<!\d)(\d{4})年(\d{1,2}|[一二三四五六七八九十]{1,3})月(?!\d|[一二三四五六七八九十]{1,3}[日号])(份)?")),
    ("zh_yword_md", re.compile(r"(今年|明年|去年|后年|前年)" + _DAYNUM + r"月(?:" + _DAYNUM + r"[日号])?(份)?")),
    ("zh_rel_md", re.compile(_ZH_REL + r"月(?:" + _DAYNUM + r"[日号]" + _NOT_A_DAY_AFTER + r"|(底|末|初|中旬|中))")),
    ("zh_md", re.compile(r"(?<![\d年])" + _DAYNUM + r"月" + _DAYNUM + r"[日号]")),
    ("zh_holiday", re.compile(r"(今年|明年|去年|后年|前年)?(?:的)?(" + _HOLIDAY_RE + r")")),
    ("zh_year_edge", re.compile(r"(今年|明年|去年|后年|前年)的?(年初|年底|年末|年中|初|底)")),
    ("zh_month_edge", re.compile(r"(?<![个上下这本])(月底|月末|月初|年底|年末|年初)")),
    ("zh_d", re.compile(r"(?<![\d月年第.:：])(?:(\d{1,2})[日号]|([一二三四五六七八九十]{1,3})号)" + _NOT_A_DAY_AFTER)),
    ("zh_day", re.compile("|".join(sorted(_ZH_DAY_WORDS, key=len, reverse=True)))),
    ("zh_weekend", re.compile(r"(下下个?|下个?|上个?|这个?|本)?(?:周末|礼拜天?末)")),
    ("zh_weekday", re.compile(r"(下下个?|下个?|上个?|这个?|本)?(?:周|星期|礼拜)([一二三四五六日天1-7])")),
    ("zh_offset", re.compile(_NUM + r"\s*(天|日|周|个?星期|个?礼拜|个月|年)\s*(后|以后|之后|前|以前|之前)")),
    ("zh_period", re.compile(r"(下下个?|下个?|上个?|这个?|本)(周|星期|礼拜|月)(?![一二三四五六日天1-7末])|"
                             r"(明年|去年|前年|后年|今年)")),
    ("en_day", re.compile(r"\b(the day after tomorrow|the day before yesterday|tomorrow|yesterday|today|tonight|"
                          r"this (?:morning|afternoon|evening))\b", re.IGNORECASE)),
    ("en_holiday", re.compile(r"\b(?:(this|next|last) )?(" + _EN_HOLIDAY_RE + r")(?!\w)", re.IGNORECASE)),
    ("en_mdy", re.compile(r"\b" + _MON + r"\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+((?:19|20)\d{2}))?\b(?!\s*(?:am|pm|:))")),
    ("en_dmy", re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MON + r"(?:,?\s+((?:19|20)\d{2}))?\b")),
    ("en_my", re.compile(r"\b(?:(in|during|this|next|last|early|late|mid|until|by|since)\s+)" + _MON
                         + r"(?:,?\s+((?:19|20)\d{2}))?\b(?!\s+\d)")),
    ("en_edge", re.compile(r"\b(?:the\s+)?(end|beginning|start)\s+of\s+(?:the\s+)?(this|next|last)?\s*(month|year)\b",
                           re.IGNORECASE)),
    ("en_d", re.compile(r"\bthe\s+(\d{1,2})(?:st|nd|rd|th)\b(?!\s+(?:of\s+)?(?:" + _MON + r"|century|floor|time|"
                        r"place|birthday|anniversary|grade))", re.IGNORECASE)),
    ("en_weekend", re.compile(r"\b(this|next|last|the|on the|over the)\s+weekend\b", re.IGNORECASE)),
    ("en_weekday", re.compile(r"\b(next|this|last|on|coming)?\s*(" + "|".join(sorted(_EN_WEEKDAY, key=len, reverse=True))
                              + r")\b", re.IGNORECASE)),
    ("en_offset", re.compile(r"\b(?:in\s+(\d{1,3}|" + "|".join(_EN_NUMBERS) + r")\s+(day|week|month|year)s?)\b|"
                             r"\b(\d{1,3}|" + "|".join(_EN_NUMBERS) + r")\s+(day|week|month|year)s?\s+ago\b",
                             re.IGNORECASE)),
    ("en_period", re.compile(r"\b(next|last|this)\s+(week|month|year)\b", re.IGNORECASE)),
]
_OFFSET_KINDS = frozenset({"zh_offset", "en_offset"})
# a character each match of a kind holds (one of): a text without any is not searched for it (most chat
# lines name no date, and the searches were most of a call's time); the English kinds need a Latin letter
_NEEDS = {"iso": "-", "zh_ymd": "年", "zh_ym": "年", "zh_yword_md": "年", "zh_rel_md": "月", "zh_md": "月",
          "zh_holiday": "".join({h[0] for h in [*_HOLIDAYS, *_LUNAR] if not h.isascii()}),
          "zh_year_edge": "年", "zh_month_edge": "底末初", "zh_d": "日号", "zh_day": "天日早晚夜",
          "zh_weekend": "末", "zh_weekday": "周期拜", "zh_offset": "后前", "zh_period": "周期拜月年"}
_LATIN = re.compile(r"[A-Za-z]")
# full-width digits and Latin letters as ASCII, one character for one (spans stay those of the text)
_FULL_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


@dataclass(frozen=True, slots=True)
class When:
    """A resolved date or period: ``day`` (its first calendar day in the tenant's
    zone), ``at`` (that day's local midnight as a timezone-aware UTC datetime),
    ``span`` (start, end) of the expression in the text, ``relative`` (True for
    "明天", False for "2026-12-01"), ``end`` (its last day, inclusive: ``day``
    for a day, 2027-01-31 for 「下个月」 said in December 2026) and ``until``
    (local midnight after ``end``, aware UTC: the period is ``[at, until)``)."""

    day: date
    at: datetime
    span: tuple[int, int]
    relative: bool
    end: date | None = None
    until: datetime | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.end is None:
            object.__setattr__(self, "end", self.day)
        if self.until is None:
            object.__setattr__(self, "until", self.at + timedelta(days=(self.end - self.day).days + 1))

    @property
    def is_period(self) -> bool:
        """True when it names more than one day (a week, a month, a year, a weekend)."""
        return self.end != self.day


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


def _month_end(year: int, month: int) -> date:
    return _add_months(date(year, month, 1), 1) - timedelta(days=1)


def _month(d: date) -> tuple[date, date]:
    return d.replace(day=1), _month_end(d.year, d.month)


def _year(y: int) -> tuple[date, date]:
    return date(y, 1, 1), date(y, 12, 31)


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
        this = _monday(today) + timedelta(days=target)
        # 「这周六」 said on Sunday about what is still to come: the coming Saturday
        return this + timedelta(days=7) if this < today and not past else this
    if past:
        return today - timedelta(days=(today.weekday() - target) % 7)
    return today + timedelta(days=(target - today.weekday()) % 7)


def _which_zh(prefix: str | None) -> str:
    if not prefix:
        return ""
    if prefix.startswith("下下"):
        return "nextnext"
    return {"下": "next", "上": "last", "这": "this", "本": "this"}[prefix[0]]


_STEP = {"nextnext": 2, "next": 1, "last": -1, "this": 0, "": 0}


def _nearest(today: date, month: int, day: int, past: bool, future: bool) -> date:
    """``month``/``day`` in the year the line's tense points to: the latest not after
    ``today`` in a past line, the first not before it in a future one, the nearest
    to ``today`` otherwise ("My exam is on March 15" said in December: next March)."""
    this = date(today.year, month, day)
    if past and this > today:
        return date(today.year - 1, month, day)
    if future and this < today:
        return date(today.year + 1, month, day)
    if past or future:
        return this
    near = [date(today.year + step, month, day) for step in (-1, 0, 1)
            if not (month == 2 and day == 29) or step == 0]
    return min(near, key=lambda d: (abs((d - today).days), d != this))


def _clause_of(text: str, span: tuple[int, int]) -> str:
    """The clause of ``text`` that holds ``span``: where its tense is read."""
    starts = [m.end() for m in _CLAUSE.finditer(text, 0, span[0])]
    end = _CLAUSE.search(text, span[1])
    return text[starts[-1] if starts else 0:end.start() if end else len(text)]


def habitual(text: str) -> bool:
    """Does ``text`` tell a habit — something done as a rule (「我周末一般都…」, 「每周…」,
    "I usually …", "every Sunday") rather than once? (``_ZH_HABIT``, ``_EN_HABIT``)"""
    plain = to_simplified(text)
    return bool(_ZH_HABIT.search(plain) or _EN_HABIT.search(plain))


def _habitual(kind: str, which: str | None, text: str, span: tuple[int, int]) -> bool:
    """A weekday or weekend named bare (no 这/下/上, no this/next/last) in a clause that tells a
    habit (``_ZH_HABIT``, ``_EN_HABIT``): a rule of the person's week, not a day."""
    if kind.startswith("zh_"):
        return not which and bool(_ZH_HABIT.search(_clause_of(text, span)))
    return (which or "").lower() not in ("this", "next", "last", "coming") and \
        bool(_EN_HABIT.search(_clause_of(text, span)))


def _tense(clause: str) -> tuple[bool, bool]:
    """(past, future) of a clause: a future sign outweighs a past one (「下个月15号就考了」,
    "I'm going to start on Monday, finally decided")."""
    future = bool(_ZH_FUTURE.search(clause) or _EN_FUTURE.search(clause))
    past = not future and bool(_ZH_PAST.search(clause) or _EN_PAST.search(clause)
                               or any(not m.group(1) for m in _EN_ED.finditer(clause)))
    return past, future


def _holiday(name: str, year: int) -> date | None:
    name = name.lower().replace("’", "'")
    if name in _HOLIDAYS:
        return date(year, *_HOLIDAYS[name])
    if name not in _HOLIDAYS and name.replace("'", "") in _HOLIDAYS:
        return date(year, *_HOLIDAYS[name.replace("'", "")])
    table = _LUNAR.get(name)
    return date(year, *table[year]) if table and year in table else None


def _holiday_near(name: str, today: date, past: bool) -> date | None:
    """Holiday ``name`` named with no year: this year's, the next one's when this
    year's is gone and the line is not in the past, last year's when this year's
    is still to come and the line is in the past."""
    d = _holiday(name, today.year)
    if d is not None and d < today and not past:
        return _holiday(name, today.year + 1)
    if d is not None and d > today and past:
        return _holiday(name, today.year - 1)
    return d


def _resolve(kind: str, m: re.Match[str], today: date, text: str) -> tuple[date, date, bool] | None:
    """(first day, last day, relative) of one match, or None when it names no date."""
    g = m.groups()
    past, future = _tense(_clause_of(text, m.span()))
    if kind == "iso" or kind == "zh_ymd":
        d = date(int(g[0]), int(g[1]), int(g[2]))
        return d, d, False
    if kind == "zh_ym":
        month = _zh_number(g[1])
        return (*_month(date(int(g[0]), month, 1)), False) if month else None
    if kind == "zh_yword_md":
        year, month = today.year + _ZH_YEAR_WORDS[g[0]], _zh_number(g[1])
        if not month:
            return None
        if g[2]:
            d = date(year, month, _zh_number(g[2]) or 0)
            return d, d, True
        return (*_month(date(year, month, 1)), True)
    if kind == "zh_rel_md":
        first = _add_months(today, _STEP[_which_zh(g[0])] if not g[0].startswith("下下") else 2)
        if g[1]:
            d = first.replace(day=_zh_number(g[1]) or 0)
            return d, d, True
        last = _month_end(first.year, first.month)
        edge = g[2]
        if edge in ("底", "末"):
            return last, last, True
        if edge == "初":
            return first, first.replace(day=10), True
        return first.replace(day=11), first.replace(day=20), True  # 中旬 / 中
    if kind == "zh_md":
        month, day_ = _zh_number(g[0]), _zh_number(g[1])
        if not month or not day_:
            return None
        d = _nearest(today, month, day_, past, future)
        return d, d, False
    if kind == "zh_holiday":
        if g[0]:
            d = _holiday(g[1], today.year + _ZH_YEAR_WORDS[g[0]])
        else:
            d = _holiday_near(g[1], today, past)
        return (d, d, True) if d is not None else None
    if kind == "zh_year_edge":
        year, edge = today.year + _ZH_YEAR_WORDS[g[0]], g[1][-1]
        if edge == "中":
            return date(year, 6, 1), date(year, 7, 31), True
        return _month(date(year, 1 if edge == "初" else 12, 1)) + (True,)
    if kind == "zh_month_edge":
        word = g[0]
        if word.startswith("月"):
            first, last = _month(today)
            if word == "月初":
                return first, first.replace(day=10), True
            return last, last, True
        if word == "年初":
            return _month(date(today.year, 1, 1)) + (True,)
        return _month(date(today.year, 12, 1)) + (True,)
    if kind in ("zh_d", "en_d"):
        n = _zh_number(g[0] or g[-1])
        if not n or n > 31:
            return None
        d = _day_of_month(today, n, past)
        return (d, d, True) if d is not None else None
    if kind == "zh_day":
        d = today + timedelta(days=_ZH_DAY_WORDS[m.group(0)])
        return d, d, True
    if kind in ("zh_weekend", "zh_weekday", "en_weekend", "en_weekday") and _habitual(kind, g[0], text, m.span()):
        return None
    if kind in ("zh_weekend", "en_weekend"):
        which = _which_zh(g[0]) if kind == "zh_weekend" else (g[0] or "").lower()
        which = which if which in ("next", "nextnext", "last") else ""
        if not which and past and today.weekday() < 5:
            which = "last"  # 「周末去爬山了」 said on a Wednesday: the weekend gone
        saturday = _monday(today) + timedelta(days=5 + 7 * _STEP[which])
        return saturday, saturday + timedelta(days=1), True
    if kind == "zh_weekday":
        which = _which_zh(g[0])
        d = _weekday(today, _ZH_WEEKDAY[g[1]], which, past)
        return d, d, True
    if kind == "zh_offset":
        n = _zh_number(g[0])
        if n is None:
            return None
        sign = -1 if g[2].endswith("前") else 1
        unit = g[1]
        if unit in ("天", "日"):
            d = today + timedelta(days=sign * n)
        elif unit == "个月":
            d = _add_months(today, sign * n).replace(day=min(today.day, 28))
        elif unit == "年":
            return _year(today.year + sign * n) + (True,)
        else:
            d = today + timedelta(weeks=sign * n)
        return d, d, True
    if kind == "zh_period":
        if g[2]:
            return _year(today.year + _ZH_YEAR_WORDS[g[2]]) + (True,)
        step = _STEP[_which_zh(g[0])]
        if g[1] == "月":
            return _month(_add_months(today, step)) + (True,)
        monday = _monday(today) + timedelta(weeks=step)
        return monday, monday + timedelta(days=6), True
    if kind == "en_day":
        word = m.group(1).lower()
        offset = {"the day after tomorrow": 2, "the day before yesterday": -2, "tomorrow": 1, "yesterday": -1}
        d = today + timedelta(days=offset.get(word, 0))
        return d, d, True
    if kind == "en_holiday":
        which = (g[0] or "").lower()
        if which:
            d = _holiday(g[1], today.year + {"this": 0, "next": 1, "last": -1}[which])
            if which == "this" and d is not None and d < today and not past:
                d = _holiday(g[1], today.year + 1)
        else:
            d = _holiday_near(g[1], today, past)
        return (d, d, True) if d is not None else None
    if kind in ("en_mdy", "en_dmy"):
        mon, day_ = (g[0], g[1]) if kind == "en_mdy" else (g[1], g[0])
        month = _EN_MONTH_WORDS[mon.lower().rstrip(".")]
        d = date(int(g[2]), month, int(day_)) if g[2] else _nearest(today, month, int(day_), past, future)
        return d, d, not g[2]
    if kind == "en_my":
        lead, mon, year = (g[0] or "").lower(), g[1], g[2]
        month = _EN_MONTH_WORDS[mon.lower().rstrip(".")]
        if year:
            return _month(date(int(year), month, 1)) + (False,)
        if lead == "next":
            y = today.year + (1 if month <= today.month else 0)
        elif lead == "last":
            y = today.year - (1 if month >= today.month else 0)
        elif past or lead == "since":
            y = today.year - (1 if month > today.month else 0)
        else:
            y = today.year + (1 if month < today.month else 0)
        return _month(date(y, month, 1)) + (True,)
    if kind == "en_edge":
        edge, which, unit = g[0].lower(), (g[1] or "this").lower(), g[2].lower()
        step = _STEP[which]
        if unit == "month":
            first, last = _month(_add_months(today, step))
            return (last, last, True) if edge == "end" else (first, first.replace(day=10), True)
        y = today.year + step
        return _month(date(y, 12 if edge == "end" else 1, 1)) + (True,)
    if kind == "en_weekday":
        which = (g[0] or "").lower()
        which = {"coming": "", "on": ""}.get(which, which)
        d = _weekday(today, _EN_WEEKDAY[g[1].lower()], which, past)
        return d, d, True
    if kind == "en_offset":
        if g[0]:
            n, unit, sign = _number(g[0]), g[1].lower(), 1
        else:
            n, unit, sign = _number(g[2]), g[3].lower(), -1
        if n is None:
            return None
        if unit == "day":
            d = today + timedelta(days=sign * n)
        elif unit == "week":
            d = today + timedelta(weeks=sign * n)
        elif unit == "month":
            d = _add_months(today, sign * n).replace(day=min(today.day, 28))
        else:
            return _year(today.year + sign * n) + (True,)
        return d, d, True
    if kind == "en_period":
        step = {"next": 1, "last": -1, "this": 0}[g[0].lower()]
        unit = g[1].lower()
        if unit == "week":
            monday = _monday(today) + timedelta(weeks=step)
            return monday, monday + timedelta(days=6), True
        if unit == "month":
            return _month(_add_months(today, step)) + (True,)
        return _year(today.year + step) + (True,)
    return None  # pragma: no cover - every kind is handled above


def _day_of_month(today: date, n: int, past: bool) -> date | None:
    """Day ``n`` of this month, or of the next (a past line: the previous) when this
    month's is behind (ahead of) ``today``; None when no month near has it."""
    try:
        this = today.replace(day=n)
    except ValueError:
        this = None
    if this is not None and (this >= today) != past or this == today:
        return this
    step = -1 if past else 1
    other = _add_months(today, step)
    try:
        return other.replace(day=n)
    except ValueError:
        return this


# the traditional forms (OpenCC s2t, s2tw, s2hk) of every character the patterns read, and 週/檯: a
# text without any reads as it is, with no OpenCC pass (most of a call's time otherwise)
_TRADITIONAL = re.compile("[個備兒兩剛劃動勞員國婦將對層崗廳後慶會棟樓機檯沒準牀碼禮節約經線罷聖臺萬號計訂誕議車這週遊過還門開雙預館點]")


def _reading(text: str) -> str:
    """What the patterns read: simplified characters and ASCII digits, one character for
    one (the spans found are the text's own)."""
    s = text.translate(_FULL_WIDTH)
    if not _TRADITIONAL.search(s):
        return s
    simple = to_simplified(s)
    return simple if len(simple) == len(s) else s


def resolve_when(text: str, said_at: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> When | None:
    """The first date expression of ``text`` (earliest in the text; the longest of
    those starting there), resolved against ``said_at`` (timezone-aware; naive is
    taken as UTC) in zone ``tz``: a day, or the period a week, month, year or
    weekend named alone spans (``When.end``). None when the text names no date, or
    names an impossible one (2月30日). Raises ValueError for an unknown zone name."""
    if not text:
        return None
    tzi = tz if isinstance(tz, tzinfo) else zone(tz)
    moment = said_at if said_at.tzinfo else said_at.replace(tzinfo=timezone.utc)
    today = moment.astimezone(tzi).date()
    read = _reading(text)
    latin = _LATIN.search(read) is not None
    found: list[tuple[int, int, str, re.Match[str]]] = []
    for kind, pattern in _PATTERNS:
        needs = _NEEDS.get(kind)
        if (not latin) if needs is None else not any(c in read for c in needs):
            continue
        for m in pattern.finditer(read):
            if kind == "en_weekday" and not m.group(1) and m.group(2).lower() in ("sun", "sat", "wed", "mon"):
                continue  # "sun", "sat" are ordinary words when not introduced
            found.append((m.start(), -(m.end() - m.start()), kind, m))
            break
    for start, _neg_len, kind, m in sorted(found, key=lambda f: (f[0], f[1])):
        try:
            resolved = _resolve(kind, m, today, read)
        except (ValueError, KeyError):  # 2月30日, month 13
            continue
        if resolved is None:
            continue
        first, last, relative = resolved
        at = datetime.combine(first, time(0), tzinfo=tzi).astimezone(timezone.utc)
        until = datetime.combine(last + timedelta(days=1), time(0), tzinfo=tzi).astimezone(timezone.utc)
        return When(day=first, at=at, span=(start, m.end()), relative=relative, end=last, until=until)
    return None


def period_label(when: When) -> str:
    """How a memory's text names ``when``: the ISO day (2027-01-15), a whole month
    (2027-01), a whole year (2027), else first and last day (2026-12-12~2026-12-13)."""
    return days_label(when.day, when.end or when.day)


def days_label(first: date, last: date) -> str:
    """``period_label`` of the days ``first`` to ``last`` (inclusive)."""
    if first == last:
        return first.isoformat()
    if first == date(first.year, 1, 1) and last == date(first.year, 12, 31):
        return str(first.year)
    if first.day == 1 and last == _month_end(first.year, first.month):
        return f"{first.year:04d}-{first.month:02d}"
    return f"{first.isoformat()}~{last.isoformat()}"


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
        phrase = _reading(text[when.span[0]:when.span[1]])
        offset = any(rx.fullmatch(phrase.strip()) for kind, rx in _PATTERNS if kind in _OFFSET_KINDS)
        # "3个月前"/"two weeks ago" asked about: the month or week it falls in; a named period is its own
        grain = next((g for g, rx in _GRAIN_RE if rx.search(phrase)), "day") if offset else "day"
        d = when.day
        if when.is_period:
            period = (when.day, when.end)
        elif grain == "year":
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
