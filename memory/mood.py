"""A person's emotional timeline, read from the valence and arousal every memory keeps.

Capture stores each memory's emotion (``memory.emotion.analyse``, or the model's
reading: valence in [-1, 1], arousal in [0, 1], Russell's circumplex); this module
reads a list of memories back as a timeline the person (``/memory mood``) or the
operator (the console's person page) can see. It reads only what it is given: the
caller chooses the memories — a person's live fragments, in a group only what that
group may see (``memory.explain.visible_in``: DESIGN rule 6) — so nothing here can
widen a disclosure. Pure; no IO.

- ``felt(memory)``: does the memory carry a feeling at all (a label other than
  neutral, or |valence| ≥ ``FELT_VALENCE``)? A plain fact (「我住在成都」) says
  nothing about a mood and is left out of every mean.
- ``daily(memories, first, last, tz)``: one ``DayMood`` per calendar day (zone
  ``tz``) from ``first`` to ``last``: the day's mean valence and arousal over the
  memories told that day (``created_at``) that were felt, each weighted by
  ``0.5 + arousal`` (a moment said with intensity counts up to three times one said
  calmly), None for a day with none.
- ``weekly(memories, last, weeks, tz)``: the same over ``weeks`` spans of 7 days
  ending on ``last`` (oldest first).
- ``moments(memories, since, k)``: the ``k`` memories told since ``since`` that
  moved the person most, by ``|valence| · arousal`` (an intense feeling either way;
  ties newest first); none with a weight of 0.
- ``anniversaries(memories, today, tz)``: what was told on this calendar day in an
  earlier year (「一年前的今天你跟我说过……」); 29 February is remembered on the 28th in
  a year without one.
- ``mood_word(valence)``: the plain-words band of a mean valence (``MOOD_BANDS``:
  ``very good`` ≥ 0.5, ``good`` ≥ 0.15, ``mixed`` > -0.15, ``low`` > -0.5, else
  ``very low``) — a catalogue message id (locales/), never a number shown to a person.
- ``trend(weeks)``: the last week with feelings against the mean of those before
  it: ``better`` / ``lower`` when it moved by at least ``TREND_STEP``, else
  ``steady``; None with fewer than two such weeks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo

from memory.dates import DEFAULT_TZ, zone
from memory.types import Memory

__all__ = ["Anniversary", "DayMood", "FELT_VALENCE", "MOOD_BANDS", "Moment", "TREND_STEP", "WeekMood",
           "anniversaries", "daily", "felt", "moments", "mood_word", "trend", "weekly"]

#: |valence| from which a memory counts as felt even when its label is neutral
FELT_VALENCE = 0.1
#: (lowest mean valence, message id) of each band, best first; below the last: "very low"
MOOD_BANDS = ((0.5, "very good"), (0.15, "good"), (-0.15, "mixed"), (-0.5, "low"))
#: how far the last week's mean valence must move from the weeks before it to be a trend
TREND_STEP = 0.2


@dataclass(frozen=True, slots=True)
class DayMood:
    """One calendar day: ``valence`` in [-1, 1] and ``arousal`` in [0, 1], the
    weighted means over the ``felt`` memories told that day (None when ``n`` is 0);
    ``n`` how many those were."""

    day: date
    valence: float | None
    arousal: float | None
    n: int


@dataclass(frozen=True, slots=True)
class WeekMood:
    """Seven days, ``first`` to ``last``: means as in ``DayMood`` over their felt memories."""

    first: date
    last: date
    valence: float | None
    arousal: float | None
    n: int


@dataclass(frozen=True, slots=True)
class Moment:
    """A memory that moved the person: ``weight`` = |valence| · arousal in (0, 1],
    ``day`` the calendar day it was told (the caller's zone)."""

    memory: Memory
    day: date
    weight: float


@dataclass(frozen=True, slots=True)
class Anniversary:
    """A memory told on this calendar day ``years`` years ago (≥ 1)."""

    memory: Memory
    years: int


def _tz(tz: str | tzinfo | None) -> tzinfo:
    return tz if isinstance(tz, tzinfo) else zone(tz or DEFAULT_TZ)


def _day(moment: datetime, tz: tzinfo) -> date:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(tz).date()


def felt(memory: Memory) -> bool:
    """Does ``memory`` carry a feeling (a label other than neutral, or |valence| ≥ FELT_VALENCE)?"""
    return (memory.emotion or "neutral") != "neutral" or abs(memory.valence) >= FELT_VALENCE


def _means(memories: Iterable[Memory]) -> tuple[float | None, float | None, int]:
    """Weighted mean valence and arousal of the felt ``memories`` (weight 0.5 + arousal), and their count."""
    total = v = a = 0.0
    n = 0
    for m in memories:
        if not felt(m):
            continue
        w = 0.5 + max(0.0, min(1.0, m.arousal))
        total += w
        v += w * m.valence
        a += w * m.arousal
        n += 1
    if not n:
        return None, None, 0
    return v / total, a / total, n


def _by_day(memories: Iterable[Memory], tz: tzinfo) -> dict[date, list[Memory]]:
    out: dict[date, list[Memory]] = {}
    for m in memories:
        if m.created_at is not None:
            out.setdefault(_day(m.created_at, tz), []).append(m)
    return out


def daily(memories: Iterable[Memory], first: date, last: date, tz: str | tzinfo | None = DEFAULT_TZ) -> list[DayMood]:
    """One ``DayMood`` per day from ``first`` to ``last`` (inclusive; empty when
    ``last`` is before ``first``), the days in zone ``tz`` (module docstring).
    Raises ValueError for an unknown zone name."""
    tzi = _tz(tz)
    days = _by_day(memories, tzi)
    out = []
    d = first
    while d <= last:
        v, a, n = _means(days.get(d, ()))
        out.append(DayMood(d, v, a, n))
        d += timedelta(days=1)
    return out


def weekly(memories: Iterable[Memory], last: date, weeks: int, tz: str | tzinfo | None = DEFAULT_TZ) -> list[WeekMood]:
    """``weeks`` (≥ 1) spans of seven days ending on ``last``, oldest first, each with
    the weighted means of its felt memories. Raises ValueError for ``weeks`` < 1."""
    if weeks < 1:
        raise ValueError("weeks must be at least 1")
    tzi = _tz(tz)
    days = _by_day(memories, tzi)
    out = []
    for w in range(weeks - 1, -1, -1):
        end = last - timedelta(days=7 * w)
        start = end - timedelta(days=6)
        told = [m for i in range(7) for m in days.get(start + timedelta(days=i), ())]
        v, a, n = _means(told)
        out.append(WeekMood(start, end, v, a, n))
    return out


def moments(memories: Iterable[Memory], since: datetime, k: int = 3, tz: str | tzinfo | None = DEFAULT_TZ) -> list[Moment]:
    """The ``k`` memories told at or after ``since`` (aware) with the largest
    |valence| · arousal, largest first (ties: newest first); none of weight 0."""
    tzi = _tz(tz)
    found = [Moment(m, _day(m.created_at, tzi), abs(m.valence) * m.arousal) for m in memories
             if m.created_at is not None and m.created_at >= since and abs(m.valence) * m.arousal > 0]
    found.sort(key=lambda x: (-x.weight, -x.memory.created_at.timestamp(), x.memory.id))
    return found[:max(0, k)]


def _same_day(told: date, today: date) -> bool:
    if (told.month, told.day) == (today.month, today.day):
        return True
    # 29 February, remembered on the 28th in a year without one
    leap = today.year % 4 == 0 and (today.year % 100 != 0 or today.year % 400 == 0)
    return (told.month, told.day) == (2, 29) and (today.month, today.day) == (2, 28) and not leap


def anniversaries(memories: Iterable[Memory], today: date, tz: str | tzinfo | None = DEFAULT_TZ) -> list[Anniversary]:
    """The memories told on ``today``'s calendar day in an earlier year (zone ``tz``),
    longest ago first (ties by id)."""
    tzi = _tz(tz)
    out = []
    for m in memories:
        if m.created_at is None:
            continue
        told = _day(m.created_at, tzi)
        if told.year < today.year and _same_day(told, today):
            out.append(Anniversary(m, today.year - told.year))
    out.sort(key=lambda a: (-a.years, a.memory.created_at, a.memory.id))
    return out


def mood_word(valence: float) -> str:
    """The band (``MOOD_BANDS``) of a mean valence in [-1, 1]: a catalogue message id."""
    return next((word for floor, word in MOOD_BANDS if valence >= floor), "very low")


def trend(weeks: Sequence[WeekMood]) -> str | None:
    """``better``, ``lower`` or ``steady``: the last week with felt memories against
    the mean of the earlier weeks with some (``TREND_STEP``); None with fewer than two."""
    told = [w.valence for w in weeks if w.valence is not None]
    if len(told) < 2:
        return None
    before = sum(told[:-1]) / len(told[:-1])
    step = told[-1] - before
    return "better" if step >= TREND_STEP else "lower" if step <= -TREND_STEP else "steady"
