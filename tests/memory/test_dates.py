"""The date reader (``memory.dates.resolve_when``): the day a line names, or the
period a week, month or year named alone spans, in the tenant's zone, in Chinese
(simplified, traditional, full-width digits) and English — measured on the
labelled sets of ``tests/data`` and pinned fault by fault."""

from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from bench.dates import HELDOUT, SET, load, reader_of, score
from memory import dates
from memory.dates import period_label, resolve_when

SUNDAY = datetime(2026, 12, 6, 4, 0, tzinfo=timezone.utc)  # Sunday 12:00 in Shanghai


def _read(text: str, at: datetime = SUNDAY, tz: str = "Asia/Shanghai") -> str | None:
    when = resolve_when(text, at, tz)
    return None if when is None else period_label(when)


@pytest.mark.parametrize("path, floor", [(SET, 0.98), (HELDOUT, 0.85)])
def test_the_reader_reads_the_labelled_sets_right(path, floor):
    """Share of labelled lines read to the exact day or period, per language, holds the measured figure
    (docs/recall.md: 1.000 / 1.000 on the dev set, 0.900 / 0.889 held out; the reader before: 0.488 / 0.458)."""
    zh, en, _all = score(load(path), reader_of(dates))
    assert zh.total >= 30 and en.total >= 18
    assert zh.share >= floor and en.share >= floor, (zh, en)


def test_the_labelled_set_has_a_hundred_lines_in_both_languages():
    """The dev set holds at least 100 lines, both languages, several zones and lines that name no date."""
    lines = load(SET)
    assert len(lines) >= 100
    assert {ln.lang for ln in lines} == {"zh", "en"}
    assert len({ln.zone for ln in lines}) >= 3
    assert sum(ln.expected is None for ln in lines) >= 8


@pytest.mark.parametrize("text, expected", [
    ("下个月15号就考了", "2027-01-15"), ("下個月１５號就考了", "2027-01-15"), ("the exam is on the 15th", "2026-12-15"),
])
def test_a_day_of_next_month_is_that_day_not_the_first(text, expected):
    """「下个月15号」 said on 2026-12-06 is 2027-01-15, not 2027-01-01 (traditional and full-width too)."""
    assert _read(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("明年五一结婚", "2027-05-01"), ("明年5月1日结婚", "2027-05-01"), ("去年国庆我在西安", "2025-10-01"),
    ("We're getting married on New Year's Eve", "2026-12-31"), ("春节回老家", "2027-02-06"),
])
def test_a_holiday_of_a_named_year_is_its_day_not_new_years_day(text, expected):
    """「明年五一」 is 1 May next year, not 1 January; holidays alone are the coming one."""
    assert _read(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("这周六我们去爬山", "2026-12-12"), ("本周六加班", "2026-12-12"), ("下周三开会", "2026-12-09"),
    ("My son starts kindergarten on Monday", "2026-12-07"), ("I need to see the doctor on Wednesday", "2026-12-09"),
    ("这周六我们去爬山了", "2026-12-05"), ("周三开会了", "2026-12-02"), ("周三要开会", "2026-12-09"),
])
def test_a_weekday_in_a_future_line_said_on_sunday_is_the_coming_one(text, expected):
    """Said on a Sunday, 「这周六」, 「下周三」 and "on Monday" in a line about what is to come name the coming day
    ("need" is no past tense); a past line keeps this week's."""
    assert _read(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("我下个月搬家", "2027-01"), ("明年我想去日本", "2027"), ("下周我要考试", "2026-12-07~2026-12-13"),
    ("I'm starting a new job next month", "2027-01"), ("I'm going to Tokyo in March", "2027-03"),
    ("I went to Paris in March", "2026-03"), ("next year I'll learn to swim", "2027"),
    ("下下周出差", "2026-12-14~2026-12-20"),
])
def test_a_month_or_year_named_alone_is_that_period(text, expected):
    """A week, month or year named alone is read as that whole period (first to last day), not its first day."""
    when = resolve_when(text, SUNDAY, "Asia/Shanghai")
    assert when is not None and when.is_period and period_label(when) == expected
    assert when.until > when.at


def test_a_line_said_late_in_utc_is_the_next_day_in_the_tenants_zone():
    """23:30 UTC on Sunday is Monday in Shanghai: 「今天」 is Monday there, Sunday in New York."""
    late = datetime(2026, 12, 6, 23, 30, tzinfo=timezone.utc)
    assert _read("今天要开组会", late) == "2026-12-07"
    assert _read("I have a dentist appointment tomorrow", late, "America/New_York") == "2026-12-07"
    when = resolve_when("下个月", late, "Asia/Shanghai")
    assert when.at == datetime(2026, 12, 31, 16, tzinfo=timezone.utc)  # 2027-01-01 00:00 Shanghai
    assert when.until == datetime(2027, 1, 31, 16, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["坐3号线去上班", "我们来个三日游吧", "我住在5号楼", "May I ask you something?",
                                  "I march every morning", "我一日三餐都很规律"])
def test_numbers_that_are_no_date_read_as_none(text):
    """A metro line, a building, 「三日游」 and lower-case month words name no date."""
    assert resolve_when(text, SUNDAY, "Asia/Shanghai") is None


def test_period_label_names_a_day_month_year_or_range():
    """``period_label``: ISO day, YYYY-MM, YYYY, else first~last."""
    from memory.dates import When

    at = datetime(2027, 1, 1, tzinfo=timezone.utc)
    assert period_label(When(date(2027, 1, 15), at, (0, 1), True)) == "2027-01-15"
    assert period_label(When(date(2027, 1, 1), at, (0, 1), True, end=date(2027, 1, 31))) == "2027-01"
    assert period_label(When(date(2027, 1, 1), at, (0, 1), True, end=date(2027, 12, 31))) == "2027"
    assert period_label(When(date(2027, 1, 11), at, (0, 1), True, end=date(2027, 1, 20))) == "2027-01-11~2027-01-20"


# -- a period kept with the memory, and read by recall and the recollection -------------------------------

from memory.capture import capture, parse_extraction  # noqa: E402
from memory.types import ChatKind, ChatRef, Memory, Namespace  # noqa: E402

DM = ChatRef("tg", ChatKind.PRIVATE, "77")


@pytest.mark.parametrize("text, label, until", [
    ("我下个月搬家", "（2027-01）", datetime(2027, 1, 31, 16, tzinfo=timezone.utc)),
    ("I'm moving to Berlin next month", " (2027-01)", datetime(2027, 1, 31, 16, tzinfo=timezone.utc)),
    ("下个月15号就考了，我好紧张", "（2027-01-15）", None),
])
def test_a_month_named_alone_is_stored_as_that_month_not_its_first_day(core, text, label, until):
    """「我下个月搬家」 said on 2026-12-06 is stored with January 2027 (event_time its first local midnight,
    event_end the first of February), shown as 「（2027-01）」, not 2027-01-01 (SQLite and PostgreSQL);
    「下个月15号」 is the 15th, a day."""
    ns = Namespace("default", "tg:5101")
    (result,) = capture(core, ns, text, chat=DM, said_at=SUNDAY, message_id="1")
    stored = core.get(ns, result.memory.id)
    assert label in stored.text
    assert stored.event_end == until
    assert stored.event_time == (datetime(2026, 12, 31, 16, tzinfo=timezone.utc) if until
                                 else datetime(2027, 1, 14, 16, tzinfo=timezone.utc))


@pytest.mark.parametrize("text, label", [
    ("我明年五一结婚", "（2027-05-01）"), ("这周六我们去爬山", "（2026-12-12）"), ("下周三我要面试", "（2026-12-09）"),
    ("My son starts kindergarten on Monday", " (2026-12-07)"), ("I'm flying to Tokyo next Wednesday", " (2026-12-09)"),
])
def test_capture_stores_the_day_a_line_names(core, text, label):
    """Through capture, said on a Sunday: 「明年五一」 is 1 May next year, 「这周六」 and 「下周三」 the coming days,
    "on Monday" in a future line the next day — the memory's text carries that day, and its event_time is its
    local midnight."""
    ns = Namespace("default", "tg:5102")
    (result,) = capture(core, ns, text, chat=DM, said_at=SUNDAY, message_id="1")
    stored = core.get(ns, result.memory.id)
    assert stored.text.endswith(label)
    day = date.fromisoformat(label.strip(" （()）"))
    assert stored.event_time == datetime(day.year, day.month, day.day, tzinfo=ZoneInfo("Asia/Shanghai"))


@pytest.mark.parametrize("question", ["我1月15号那天要干嘛？", "What am I doing on January 15?"])
def test_a_day_inside_a_remembered_month_recalls_that_month(core, question):
    """Asked by a day inside the month a memory names (「下个月搬家」 → January), the time channel finds it; a
    memory stored as 1 January alone (how a month was kept before) is not that day's (SQLite and PostgreSQL)."""
    ns = Namespace("default", "tg:5102")
    month = capture(core, ns, "我下个月搬家", chat=DM, said_at=SUNDAY, message_id="1")[0].memory.id
    first = core.add(ns, core.new(ns, "元旦我和朋友去滑雪", created_at=SUNDAY,
                                  event_time=datetime(2026, 12, 31, 16, tzinfo=timezone.utc)),
                     said_at=SUNDAY).memory.id
    now = datetime(2027, 1, 20, 4, tzinfo=timezone.utc)
    ranked = [h.memory.id for h in core.recall(ns, [question], now=now)]
    assert month in ranked
    assert first not in ranked


def test_the_recollection_dates_a_period_as_that_period():
    """The prompt's date of a memory whose event is January 2027 reads 2027-01, a day's its ISO day."""
    from memory.reconstruct import _date

    ns = Namespace("default", "tg:5103")
    start, end = datetime(2026, 12, 31, 16, tzinfo=timezone.utc), datetime(2027, 1, 31, 16, tzinfo=timezone.utc)
    assert _date(Memory(id="a" * 12, namespace=ns, text="我下个月搬家（2027-01）", event_time=start, event_end=end)) \
        == "2027-01"
    assert _date(Memory(id="b" * 12, namespace=ns, text="我明天面试", event_time=start)) == "2027-01-01"


def test_the_readers_day_wins_over_a_models_first_of_the_month():
    """A model that answers 2027-01-01 for 「下个月15号」 is overruled by the reader's 2027-01-15; a model's day
    stands where the text names none; a month named alone keeps its period."""
    raw = ('{"facts": [{"text": "我下个月15号考试", "category": "event", "event_time": "2027-01-01"},'
           ' {"text": "我那天要考试", "category": "event", "event_time": "2027-01-15"},'
           ' {"text": "我下个月搬家", "category": "event", "event_time": "2027-01-01"}]}')
    exam, that_day, move = parse_extraction(raw, "msg", SUNDAY, "Asia/Shanghai")
    assert exam.event_time == that_day.event_time == datetime(2027, 1, 14, 16, tzinfo=timezone.utc)
    assert exam.event_end is None and that_day.event_end is None
    assert move.event_end == datetime(2027, 1, 31, 16, tzinfo=timezone.utc)


def test_every_traditional_form_of_a_character_the_reader_reads_sends_the_text_through_opencc():
    """The reader skips OpenCC for a text without traditional characters; every character its patterns read has
    its traditional forms (OpenCC s2t, s2tw, s2hk) in ``_TRADITIONAL``, so 「下個月15號」 and 「下週三」 still read."""
    import opencc

    src = "".join(p.pattern for _, p in dates._PATTERNS) + dates._ZH_PAST.pattern + dates._ZH_FUTURE.pattern + \
        "".join(dates._HOLIDAYS) + "".join(dates._LUNAR) + "".join(dates._ZH_DAY_WORDS) + "".join(dates._ZH_YEAR_WORDS)
    chars = {c for c in src if "\u4e00" <= c <= "\u9fff"}
    for config in ("s2t", "s2tw", "s2hk"):
        convert = opencc.OpenCC(config).convert
        for c in chars:
            t = convert(c)
            assert t == c or len(t) != 1 or dates._TRADITIONAL.match(t), (config, c, t)
    assert _read("下週三開會") == "2026-12-09" and _read("下個月15號考試") == "2027-01-15"
