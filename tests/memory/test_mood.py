"""memory.mood: days and weeks of a person's mood from the valence and arousal their
memories keep — plain facts left out, intense moments weighted up, the days in the
tenant's zone, the moments by |valence|·arousal, anniversaries (29 February too)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from memory.mood import anniversaries, daily, felt, moments, mood_word, trend, weekly
from memory.types import Memory, Namespace

NS = Namespace("t1", "tg:1")


def _m(i: int, at: datetime, valence: float, arousal: float, emotion: str = "joy", text: str = "x") -> Memory:
    return Memory(id=f"{i:012x}", namespace=NS, text=text, valence=valence, arousal=arousal, emotion=emotion,
                  created_at=at)


def test_a_day_is_the_weighted_mean_of_its_felt_memories_in_the_tenants_zone():
    """23:30 UTC is the next day in Shanghai; a neutral fact is left out; a calm line weighs 0.5, an intense one 1.5."""
    late = datetime(2026, 12, 1, 23, 30, tzinfo=timezone.utc)  # 07:30 on 12-02 in Shanghai
    ms = [_m(1, late, 0.9, 1.0), _m(2, late, -0.3, 0.0, "sadness"), _m(3, late, 0.0, 0.0, "neutral")]
    assert not felt(ms[2]) and felt(ms[1])
    days = daily(ms, date(2026, 12, 1), date(2026, 12, 2), "Asia/Shanghai")
    assert days[0].n == 0 and days[0].valence is None
    assert days[1].n == 2 and days[1].valence == pytest.approx((1.5 * 0.9 + 0.5 * -0.3) / 2.0)
    assert days[1].arousal == pytest.approx(1.5 / 2.0)
    assert [d.n for d in daily(ms, date(2026, 12, 1), date(2026, 12, 2), "UTC")] == [2, 0]


def test_weeks_words_and_trend():
    """Four weeks ending today, oldest first; a low week then a good one reads as better."""
    at = lambda d: datetime(2026, 12, d, 12, tzinfo=timezone.utc)  # noqa: E731
    ms = [_m(1, at(1), -0.7, 0.5, "sadness"), _m(2, at(6), 0.6, 0.6)]
    weeks = weekly(ms, date(2026, 12, 6), 2, "UTC")
    assert [(w.first, w.last) for w in weeks] == [(date(2026, 11, 23), date(2026, 11, 29)),
                                                   (date(2026, 11, 30), date(2026, 12, 6))]
    weeks = weekly(ms, date(2026, 12, 6), 1, "UTC")
    assert weeks[0].n == 2
    split = weekly(ms, date(2026, 12, 3), 2, "UTC") + weekly(ms, date(2026, 12, 10), 1, "UTC")
    assert trend(split[1:]) == "better" and trend(split[:1]) is None
    assert [mood_word(v) for v in (0.8, 0.2, 0.0, -0.3, -0.9)] == ["very good", "good", "mixed", "low", "very low"]
    with pytest.raises(ValueError):
        weekly(ms, date(2026, 12, 6), 0)


def test_moments_are_the_most_intense_since_a_time_and_anniversaries_a_year_on():
    """|valence|·arousal orders the moments (a fact of weight 0 never is one); a memory of 2024-02-29 is an
    anniversary on 2025-02-28, one of 2024-12-06 on 2026-12-06 (two years)."""
    at = lambda y, mo, d: datetime(y, mo, d, 12, tzinfo=timezone.utc)  # noqa: E731
    ms = [_m(1, at(2026, 12, 1), -0.8, 0.9, "sadness"), _m(2, at(2026, 12, 2), 0.5, 0.5),
          _m(3, at(2026, 12, 3), 0.0, 0.0, "neutral"), _m(4, at(2024, 12, 6), 0.4, 0.4),
          _m(5, at(2024, 2, 29), 0.3, 0.3)]
    top = moments(ms, at(2026, 11, 1), k=5, tz="UTC")
    assert [m.memory.id for m in top] == [ms[0].id, ms[1].id]
    assert [(a.memory.id, a.years) for a in anniversaries(ms, date(2026, 12, 6), "UTC")] == [(ms[3].id, 2)]
    assert [a.memory.id for a in anniversaries(ms, date(2025, 2, 28), "UTC")] == [ms[4].id]
    assert anniversaries(ms, date(2028, 2, 28), "UTC") == []  # 2028 has its own 29 February
