"""memory.scoring: retention, activation, emotion congruence, importance, final score."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.scoring import (
    ACTIVATION_FLOOR,
    DEFAULT_HALF_LIVES,
    DEFAULT_PARAMS,
    ScoringParams,
    activation,
    activation_weight,
    emotion_congruence,
    final,
    half_life_days,
    importance_weight,
    retention,
    score,
)
from memory.types import Category, Memory, Namespace, ScoreParts

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
NS = Namespace("default", "tg:42")

categories = st.sampled_from(list(Category))
valences = st.floats(-1.0, 1.0)
arousals = st.floats(0.0, 1.0)
ages = st.floats(0.0, 1e5)


def _memory(**kw) -> Memory:
    return Memory(id="m1", namespace=NS, text="x", **kw)


# --- retention -------------------------------------------------------------


@pytest.mark.parametrize("category", list(Category))
def test_neutral_retention_is_one_half_at_the_half_life(category: Category) -> None:
    """A neutral memory keeps exactly R = 0.5 at its category's half-life and 1 at age 0."""
    h = half_life_days(category, 0.0)
    assert h == DEFAULT_HALF_LIVES[category]
    assert retention(h, category, 0.0, 0.0) == pytest.approx(0.5, abs=1e-12)
    assert retention(0.0, category) == 1.0


def test_half_life_is_lengthened_by_emotional_intensity() -> None:
    """half-life = base × (1 + 0.3·|valence|), symmetric in the sign of valence."""
    base = DEFAULT_HALF_LIVES[Category.EVENT]
    assert half_life_days(Category.EVENT, 1.0) == pytest.approx(1.3 * base)
    assert half_life_days(Category.EVENT, -0.5) == pytest.approx(1.15 * base)


def test_retention_decays_monotonically() -> None:
    """Retention strictly decreases over a sequence of growing ages."""
    values = [retention(t, Category.EVENT) for t in (0.5, 1, 3, 7, 30, 90, 365, 3650)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert values[-1] > 0.0


@pytest.mark.parametrize("category", list(Category))
@pytest.mark.parametrize(("valence", "arousal"), [(0.8, 0.8), (-0.8, 0.8), (0.9, 0.9), (-1.0, 1.0), (1.0, 1.0)])
def test_strongly_emotional_memory_retains_20_to_30_percent_more(
    category: Category, valence: float, arousal: float
) -> None:
    """At one neutral half-life, |valence|, arousal >= 0.8 retains 20–30 % more than neutral."""
    age = half_life_days(category, 0.0)
    ratio = retention(age, category, valence, arousal) / retention(age, category, 0.0, 0.0)
    assert 1.20 <= ratio <= 1.30


def test_mildly_emotional_memory_gains_less() -> None:
    """A mildly emotional memory gains less than a strongly emotional one."""
    age = half_life_days(Category.EVENT, 0.0)
    neutral = retention(age, Category.EVENT)
    mild = retention(age, Category.EVENT, 0.2, 0.2)
    strong = retention(age, Category.EVENT, 0.9, 0.9)
    assert neutral < mild < strong


def test_mood_decays_faster_than_profile() -> None:
    """A week-old mood is mostly forgotten while a week-old profile fact is not."""
    assert half_life_days(Category.MOOD, 0.0) < half_life_days(Category.EVENT, 0.0) < half_life_days(
        Category.PROFILE, 0.0
    )
    assert retention(7, Category.MOOD) < 0.3 < 0.95 < retention(7, Category.PROFILE)


def test_arousal_boost_is_clipped_at_one() -> None:
    """The arousal boost never lifts retention above 1 (fresh aroused memory = 1.0)."""
    assert retention(0.0, Category.EVENT, 0.0, 1.0) == 1.0
    assert retention(0.5, Category.EVENT, 0.0, 1.0) == 1.0


def test_negative_age_counts_as_new_and_nan_is_refused() -> None:
    """Clock skew (negative age) gives R = 1; a NaN age raises ValueError."""
    assert retention(-3.0, Category.EVENT) == 1.0
    with pytest.raises(ValueError):
        retention(math.nan, Category.EVENT)


@settings(max_examples=150, deadline=None)
@given(ages, categories, valences, arousals)
def test_retention_is_a_probability(age: float, category: Category, valence: float, arousal: float) -> None:
    """Retention is in [0, 1] for any age, category, valence and arousal."""
    assert 0.0 <= retention(age, category, valence, arousal) <= 1.0


@settings(max_examples=150, deadline=None)
@given(ages, ages, categories, valences, arousals)
def test_retention_is_non_increasing_in_age(
    a: float, b: float, category: Category, valence: float, arousal: float
) -> None:
    """An older memory never retains more than a younger one of the same kind."""
    young, old = sorted((a, b))
    assert retention(old, category, valence, arousal) <= retention(young, category, valence, arousal)


# --- activation --------------------------------------------------------------


def test_activation_matches_hand_computed_example() -> None:
    """B = ln(10^-0.5 + 100^-0.5 + 1000^-0.5) = ln(0.447851) = -0.803296."""
    expected = math.log(10**-0.5 + 100**-0.5 + 1000**-0.5)
    assert expected == pytest.approx(-0.803296, abs=1e-6)
    assert activation([10, 100, 1000]) == pytest.approx(expected, rel=1e-12)
    assert activation([86_400]) == pytest.approx(-0.5 * math.log(86_400))


def test_activation_grows_with_more_and_more_recent_accesses() -> None:
    """More accesses and more recent accesses both raise B."""
    day = 86_400.0
    assert activation([7 * day]) < activation([7 * day, 3 * day]) < activation([7 * day, 3 * day, day])
    assert activation([30 * day]) < activation([day]) < activation([60.0])


def test_activation_floors() -> None:
    """No accesses → ACTIVATION_FLOOR; ages under 1 s count as 1 s (B = 0 for one access now)."""
    assert activation([]) == ACTIVATION_FLOOR
    assert activation([0.0]) == 0.0
    assert activation([-5.0]) == 0.0
    assert activation([1e30]) == ACTIVATION_FLOOR


def test_activation_weight_is_bounded_and_monotone() -> None:
    """The activation weight rises with B inside [0.8, 1.2] and is 1.0 at B = -6."""
    bs = [-50.0, ACTIVATION_FLOOR, -8.0, -6.0, -4.0, -2.0, 0.0, 50.0]
    ws = [activation_weight(b) for b in bs]
    assert all(x <= y for x, y in zip(ws, ws[1:]))
    assert all(0.8 <= w <= 1.2 for w in ws)
    assert activation_weight(-6.0) == pytest.approx(1.0)


# --- emotion congruence, importance --------------------------------------------


def test_congruence_gives_at_most_15_percent() -> None:
    """Fully congruent valences (both +1 or both -1) give exactly +15 %."""
    assert emotion_congruence(1.0, 1.0) == pytest.approx(1.15)
    assert emotion_congruence(-1.0, -1.0) == pytest.approx(1.15)
    assert 1.0 < emotion_congruence(0.6, 0.6) < 1.15


def test_neutral_query_changes_nothing() -> None:
    """A neutral query leaves every memory at factor 1.0."""
    for mv in (-1.0, -0.3, 0.0, 0.5, 1.0):
        assert emotion_congruence(0.0, mv) == 1.0


def test_congruence_threshold_is_respected() -> None:
    """|query valence| < 0.2 → 1.0; just above 0.2 a congruent memory gains a little."""
    assert emotion_congruence(0.19, 1.0) == 1.0
    assert emotion_congruence(-0.19, -1.0) == 1.0
    assert 1.0 < emotion_congruence(0.21, 1.0) < 1.03
    assert 1.0 < emotion_congruence(-0.25, -0.8) < 1.05


def test_incongruent_or_neutral_memory_is_not_penalised() -> None:
    """Opposite signs or a neutral memory give exactly 1.0, never less."""
    assert emotion_congruence(0.9, -0.9) == 1.0
    assert emotion_congruence(-0.9, 0.7) == 1.0
    assert emotion_congruence(0.9, 0.0) == 1.0


@settings(max_examples=150, deadline=None)
@given(valences, valences)
def test_congruence_stays_in_its_band(qv: float, mv: float) -> None:
    """The congruence factor is always in [1, 1.15]."""
    assert 1.0 <= emotion_congruence(qv, mv) <= 1.15 + 1e-12


def test_importance_weight_is_linear_and_neutral_at_default() -> None:
    """importance 0 → 0.75, 0.5 (the default) → 1.0, 1 → 1.25; out-of-range values are clipped."""
    assert importance_weight(0.0) == 0.75
    assert importance_weight(0.5) == 1.0
    assert importance_weight(1.0) == 1.25
    assert importance_weight(7.0) == 1.25


# --- score / final ------------------------------------------------------------


def test_score_collects_the_parts() -> None:
    """score() fills retention from the last write, activation from all accesses, emotion and importance."""
    created = NOW - timedelta(days=30)
    memory = _memory(
        category=Category.EVENT,
        valence=-0.8,
        arousal=0.8,
        importance=1.0,
        created_at=created,
        access_times=(NOW - timedelta(days=2), NOW - timedelta(hours=1)),
    )
    parts = score(1 / 61, memory, NOW, query_valence=-0.9)
    assert parts.rrf == 1 / 61
    assert parts.retention == pytest.approx(retention(30, Category.EVENT, -0.8, 0.8))
    assert parts.activation == pytest.approx(activation([30 * 86_400, 2 * 86_400, 3_600]))
    assert parts.emotion == pytest.approx(emotion_congruence(-0.9, -0.8))
    assert parts.importance == 1.25


def test_score_uses_updated_at_and_tolerates_missing_or_naive_times() -> None:
    """Retention counts from updated_at; no timestamps → new; naive datetimes are UTC."""
    memory = _memory(created_at=NOW - timedelta(days=300), updated_at=NOW - timedelta(days=1))
    assert score(0.01, memory, NOW).retention == pytest.approx(retention(1, Category.OTHER))
    bare = score(0.01, _memory(), NOW)
    assert bare.retention == 1.0 and bare.activation == ACTIVATION_FLOOR
    naive = _memory(created_at=(NOW - timedelta(days=10)).replace(tzinfo=None))
    assert score(0.01, naive, NOW).retention == pytest.approx(retention(10, Category.OTHER))


def test_only_the_most_recent_access_times_count() -> None:
    """Activation uses at most max_access_times (20) most recent accesses."""
    times = tuple(NOW - timedelta(days=d) for d in range(1, 41))
    parts = score(0.01, _memory(access_times=times), NOW)
    assert parts.activation == pytest.approx(activation([d * 86_400 for d in range(1, 21)]))


def test_score_refuses_a_negative_rrf() -> None:
    """A negative or NaN rrf raises ValueError."""
    with pytest.raises(ValueError):
        score(-0.1, _memory(), NOW)
    with pytest.raises(ValueError):
        score(math.nan, _memory(), NOW)


def test_final_multiplies_the_blended_factors() -> None:
    """final = rrf × F^0.25 with F = (0.5 + 0.5·R) × w_act(B) × emotion × importance;
    at strength 1 it is the plain product."""
    parts = ScoreParts(rrf=0.03, retention=0.4, activation=-6.0, emotion=1.1, importance=1.25)
    factor = 0.7 * 1.0 * 1.1 * 1.25
    assert final(parts) == pytest.approx(0.03 * factor ** 0.25)
    assert final(parts, ScoringParams(rescore_strength=1.0)) == pytest.approx(0.03 * factor)
    assert final(parts, ScoringParams(rescore_strength=0.0)) == pytest.approx(0.03)


def test_relevance_stays_primary() -> None:
    """F stays in [0.3, 1.73], so rrf × F^0.25 in [0.74, 1.15] × rrf: with RRF k = 5, first in both
    channels beats best-case first in one whatever its own factors."""
    worst = ScoreParts(rrf=1.0, retention=0.0, activation=-1e9, emotion=1.0, importance=importance_weight(0.0))
    best = ScoreParts(rrf=1.0, retention=1.0, activation=1e9, emotion=1.15, importance=importance_weight(1.0))
    assert final(worst) == pytest.approx((0.5 * 0.8 * 0.75) ** 0.25)
    assert final(best) == pytest.approx((1.2 * 1.15 * 1.25) ** 0.25)
    both_channels_first = 2 / 6
    one_channel_first = 1 / 6
    assert final(replace(worst, rrf=both_channels_first)) > final(replace(best, rrf=one_channel_first))


def test_old_relevant_evidence_is_not_pushed_out_by_fresh_weaker_matches() -> None:
    """Regression (issue 11): recalled as of a question's own time, a year-old memory ranked
    first by both channels stays above a fresh one ranked third by both (at strength 1 it
    fell below one ranked fifth)."""
    old = _memory(category=Category.EVENT, created_at=NOW - timedelta(days=365))
    fresh = _memory(category=Category.EVENT, created_at=NOW - timedelta(days=1))
    assert final(score(2 / 6, old, NOW)) > final(score(2 / 8, fresh, NOW))
    full = ScoringParams(rescore_strength=1.0)
    assert final(score(2 / 6, old, NOW, params=full), full) < final(score(2 / 10, fresh, NOW, params=full), full)


def test_forgetting_and_emotion_reorder_close_calls() -> None:
    """Of two adjacent RRF ranks (k = 60, one channel), a fresh congruent memory overtakes a stale neutral one."""
    stale = _memory(category=Category.EVENT, created_at=NOW - timedelta(days=200))
    fresh = _memory(category=Category.EVENT, valence=-0.7, created_at=NOW - timedelta(days=2))
    stale_score = final(score(1 / 61, stale, NOW, query_valence=-0.6))
    fresh_score = final(score(1 / 62, fresh, NOW, query_valence=-0.6))
    assert fresh_score > stale_score


@settings(max_examples=150, deadline=None)
@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(-20.0, 5.0),
    st.floats(1.0, 1.15),
    st.floats(0.75, 1.25),
)
def test_final_is_monotone_in_rrf(r1: float, r2: float, ret: float, b: float, emo: float, imp: float) -> None:
    """With the other parts fixed, a higher rrf never gives a lower final score."""
    low, high = sorted((r1, r2))
    parts = ScoreParts(rrf=low, retention=ret, activation=b, emotion=emo, importance=imp)
    assert final(parts) <= final(replace(parts, rrf=high))
    assert final(parts) >= 0.0


# --- params -----------------------------------------------------------------------


def test_params_validate_and_freeze_half_lives() -> None:
    """ScoringParams needs every category, positive half-lives, and keeps them read-only."""
    with pytest.raises(ValueError):
        ScoringParams(half_lives={Category.EVENT: 30.0})
    with pytest.raises(ValueError):
        ScoringParams(half_lives={**DEFAULT_HALF_LIVES, Category.MOOD: 0.0})
    with pytest.raises(ValueError):
        ScoringParams(weibull_shape=0.0)
    custom = ScoringParams(half_lives={c.value: 10.0 for c in Category})
    assert half_life_days(Category.PROFILE, 0.0, custom) == 10.0
    with pytest.raises(TypeError):
        custom.half_lives[Category.MOOD] = 1.0  # type: ignore[index]
    assert hash(DEFAULT_PARAMS) == hash(ScoringParams())
