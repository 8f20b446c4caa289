"""Rescoring of recall hits: forgetting, rehearsal, emotion and importance.

Recall fuses BM25 and vector ranks by reciprocal rank fusion (RRF, Cormack et
al. 2009). This module turns that relevance score into the final score::

    final = rrf × [(floor + (1 − floor)·R) × w_act(B) × w_emo × w_imp] ^ s

with s = ``rescore_strength`` (0.25): the bracket is the rescoring factor F.

- R, retention in [0, 1]: a Weibull forgetting curve ``R(t) = exp(-(t/λ)^β)``
  (Ebbinghaus 1885; Weibull form after Wixted & Ebbesen 1991, who found
  power-like rather than exponential forgetting: β < 1 gives the heavy tail).
  The half-life depends on the category and is lengthened by emotional
  intensity, and arousal gives an initial boost (emotional enhancement of
  memory: McGaugh 2004; Kensinger 2009).
- B, ACT-R base-level activation ``B = ln Σ t_j^(−d)`` over the times the
  memory was encoded and recalled (Anderson & Lebiere 1998; the power law of
  practice and recency from Anderson & Schooler 1991), mapped to a bounded
  weight w_act.
- w_emo, mood congruence: a query said in a clearly positive or negative
  mood lifts memories of the same valence, up to +15 % (valence on Russell's
  1980 circumplex; mood-congruent recall, Bower 1981).
- w_imp, importance in [0, 1] mapped to a bounded weight.

Relevance stays primary. Every factor is bounded (retention floor 0.5,
activation and importance ±20 % / ±25 %, emotion at most +15 %), so F lies in
[0.30, 1.73], and the strength s = 0.25 maps that to [0.74, 1.15]: with RRF
k = 5 one rank near the top of a channel is worth 0.86–0.89, so rescoring
reorders neighbours (a rank or two) but cannot lift a weak match over a strong
one — a memory ranked first by both channels (2/6) beats one ranked first by
only one (1/6 × 1.15) whatever their factors.

All functions are pure: times come in as arguments, nothing reads a clock.
Ages are in days (retention) or seconds (activation), as named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType

from memory.types import Category, Memory, ScoreParts

__all__ = [
    "ScoringParams",
    "DEFAULT_PARAMS",
    "DEFAULT_HALF_LIVES",
    "ACTIVATION_FLOOR",
    "half_life_days",
    "retention",
    "activation",
    "activation_weight",
    "emotion_congruence",
    "importance_weight",
    "score",
    "score_seconds",
    "final",
    "final_of",
]

SECONDS_PER_DAY = 86_400.0

# Base half-lives in days, before the emotional lengthening.
DEFAULT_HALF_LIVES: Mapping[Category, float] = MappingProxyType(
    {
        # Name, hometown, job: stable for years; a year-old profile fact keeps R ≈ 0.67.
        Category.PROFILE: 730.0,
        # Who is whose partner, friend, boss: changes on a scale of months to years.
        Category.RELATIONSHIP: 180.0,
        # Tastes drift, but slowly: "likes spicy food" should survive a season.
        Category.PREFERENCE: 120.0,
        # Habits and schedules are revised every few weeks to months.
        Category.ROUTINE: 60.0,
        # A one-off happening matters for about a month of conversation.
        Category.EVENT: 30.0,
        # Unclassified statements: treated like events.
        Category.OTHER: 30.0,
        # "I'm tired today" is stale within days.
        Category.MOOD: 3.0,
    }
)

# Activation of a memory with no known access time: the B of a single access
# e^20 s (about 15 years) ago, below that of any memory the bot has stored.
ACTIVATION_FLOOR = -10.0


@dataclass(frozen=True)
class ScoringParams:
    """Tunable constants of the rescoring. Frozen; ``half_lives`` is read-only.

    - ``half_lives``: base half-life in days per Category, all > 0 (every
      Category must be present). Lengthened by ``1 + emotion_half_life_gain·|valence|``.
    - ``weibull_shape`` β in (0, ∞): 0.8 — below 1, forgetting is fast at
      first and slow later (heavy tail), the shape Wixted & Ebbesen (1991)
      found for human forgetting; at 1 it is plain exponential decay. 0.8
      keeps old memories findable (a profile fact two half-lives old keeps
      R ≈ 0.30 instead of 0.25) while still separating fresh from stale.
    - ``emotion_half_life_gain`` 0.3: |valence| = 1 lengthens a half-life by 30 %.
    - ``arousal_boost`` 0.1: initial strength ×(1 + 0.1·arousal) ("flashbulb"
      vividness that does not change the half-life).
    - ``activation_decay`` d = 0.5: the ACT-R default (Anderson & Lebiere 1998).
    - ``max_access_times`` N = 20: only the N most recent accesses count; older
      ones add almost nothing to Σ t^-d and the row stays small.
    - ``activation_center`` -6.0 / ``activation_scale`` 1.5: the logistic that
      maps B to a weight is centred on one access ~2 days ago (B = -6);
      ``activation_weight_range`` (0.8, 1.2).
    - ``congruence_max_boost`` 0.15, ``congruence_threshold`` 0.2: mood
      congruence (see ``emotion_congruence``).
    - ``retention_floor`` 0.5: the share of a score that forgetting cannot
      take away: factor = floor + (1 − floor)·R.
    - ``importance_weight_range`` (0.75, 1.25): importance 0 → 0.75, 0.5 → 1.0, 1 → 1.25.
    - ``rescore_strength`` s in [0, 1], 0.25: the factors' product F enters the
      final score as F^s, so rescoring breaks ties among relevant memories
      instead of overriding relevance. At s = 1 retention alone can halve a
      score, which as of each LoCoMo question's own time (evidence days to
      months old) pushed relevant evidence out of the top 5: any@5 0.421 at
      s = 1, 0.579 at 0.25, 0.588 at 0 (dev split, e5-small, RRF k = 5).

    Raises ValueError on a missing category or an out-of-range value.
    """

    half_lives: Mapping[Category, float] = field(default_factory=lambda: DEFAULT_HALF_LIVES, hash=False)
    weibull_shape: float = 0.8
    emotion_half_life_gain: float = 0.3
    arousal_boost: float = 0.1
    activation_decay: float = 0.5
    max_access_times: int = 20
    activation_center: float = -6.0
    activation_scale: float = 1.5
    activation_weight_range: tuple[float, float] = (0.8, 1.2)
    congruence_max_boost: float = 0.15
    congruence_threshold: float = 0.2
    retention_floor: float = 0.5
    importance_weight_range: tuple[float, float] = (0.75, 1.25)
    rescore_strength: float = 0.25

    def __post_init__(self) -> None:
        lives = {Category(k): float(v) for k, v in self.half_lives.items()}
        missing = set(Category) - set(lives)
        if missing:
            raise ValueError(f"half_lives lacks {sorted(c.value for c in missing)}")
        if any(not (math.isfinite(v) and v > 0) for v in lives.values()):
            raise ValueError("half-lives must be finite and > 0 days")
        object.__setattr__(self, "half_lives", MappingProxyType(lives))
        if not self.weibull_shape > 0:
            raise ValueError("weibull_shape must be > 0")
        if self.emotion_half_life_gain < 0 or self.arousal_boost < 0:
            raise ValueError("emotion gains must be >= 0")
        if not self.activation_decay > 0 or self.max_access_times < 1 or not self.activation_scale > 0:
            raise ValueError("activation_decay, activation_scale must be > 0, max_access_times >= 1")
        if not 0 <= self.congruence_threshold <= 1 or self.congruence_max_boost < 0:
            raise ValueError("congruence_threshold in [0, 1], congruence_max_boost >= 0")
        if not 0 <= self.retention_floor <= 1:
            raise ValueError("retention_floor must be in [0, 1]")
        if not 0 <= self.rescore_strength <= 1:
            raise ValueError("rescore_strength must be in [0, 1]")
        for name in ("activation_weight_range", "importance_weight_range"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} must satisfy 0 < low <= high")


DEFAULT_PARAMS = ScoringParams()


def _clip(x: float, low: float, high: float) -> float:
    return low if x < low else high if x > high else x


def half_life_days(category: Category, valence: float, params: ScoringParams = DEFAULT_PARAMS) -> float:
    """Half-life in days: base(category) × (1 + 0.3·|valence|), valence in [-1, 1]
    (clipped). Emotional memories are forgotten more slowly (McGaugh 2004)."""
    base = params.half_lives[Category(category)]
    return base * (1.0 + params.emotion_half_life_gain * abs(_clip(valence, -1.0, 1.0)))


def retention(
    age_days: float,
    category: Category,
    valence: float = 0.0,
    arousal: float = 0.0,
    params: ScoringParams = DEFAULT_PARAMS,
) -> float:
    """Retention in [0, 1] of a memory ``age_days`` old (Weibull forgetting curve).

    ``R(t) = min(1, (1 + 0.1·arousal) · exp(-(t/λ)^β))`` with
    ``λ = h / (ln 2)^(1/β)``, h = ``half_life_days(category, valence)``, so a
    neutral memory has R(h) = 0.5 exactly. Arousal in [0, 1] (clipped) is an
    initial boost, not a slower decay; the result is clipped at 1 so that it
    stays a probability — an aroused memory therefore stays at full strength
    for its first days, then decays like any other of its half-life.
    Negative ages (clock skew) count as 0; raises ValueError on a NaN age.
    Non-increasing in age.

    At the age of one neutral half-life, a strongly emotional memory
    (|valence| and arousal in [0.8, 1]) retains 20–25 % more than a neutral
    one of the same category (0.60–0.63 vs 0.5).
    """
    h = half_life_days(category, valence, params)
    beta = params.weibull_shape
    if age_days != age_days:
        raise ValueError("age_days is NaN")
    t = max(0.0, float(age_days))
    lam = h / math.log(2.0) ** (1.0 / beta)
    base = math.exp(-((t / lam) ** beta))
    boost = 1.0 + params.arousal_boost * _clip(arousal, 0.0, 1.0)
    return _clip(boost * base, 0.0, 1.0)


def activation(access_ages_seconds: Sequence[float], d: float = 0.5) -> float:
    """ACT-R base-level activation ``B = ln Σ_j t_j^(−d)`` (Anderson & Lebiere 1998).

    ``access_ages_seconds``: for each time the memory was encoded or recalled,
    the seconds elapsed since then. Ages below 1 s count as 1 s (no division
    by zero; an access "now" contributes 1). Returns ``ACTIVATION_FLOOR``
    (-10.0) for no accesses; otherwise B, never below that floor. B grows
    with the number of accesses and with their recency; d = 0.5 is the
    ACT-R default decay. Examples: one access 1 day ago → −5.68; one a year
    ago → −8.63; five in the last day → about −3.2.
    """
    if not d > 0:
        raise ValueError("d must be > 0")
    total = 0.0
    for age in access_ages_seconds:
        total += max(1.0, float(age)) ** (-d) if age == age else 0.0  # NaN ignored
    if total <= 0.0:
        return ACTIVATION_FLOOR
    return max(ACTIVATION_FLOOR, math.log(total))


def activation_weight(b: float, params: ScoringParams = DEFAULT_PARAMS) -> float:
    """Multiplicative weight in ``activation_weight_range`` (default [0.8, 1.2])
    for activation B: ``low + (high − low)·σ((B − center)/scale)``, σ the
    logistic, center −6 (one access ~2 days ago → 1.0), scale 1.5.

    Bounded and monotone: rehearsal (recall frequency and recency) reorders
    close calls; age alone is already priced in by retention, so the range
    is kept narrower than retention's.
    """
    low, high = params.activation_weight_range
    z = (b - params.activation_center) / params.activation_scale
    z = _clip(z, -50.0, 50.0)
    return low + (high - low) / (1.0 + math.exp(-z))


def emotion_congruence(
    query_valence: float, memory_valence: float, params: ScoringParams = DEFAULT_PARAMS
) -> float:
    """Mood-congruence factor in [1, 1 + 0.15] (Bower 1981; valence as in Russell 1980).

    1.0 when the query is near-neutral (|query_valence| < 0.2), when the
    memory is neutral, or when the signs differ: incongruent memories are not
    penalised, only congruent ones lifted. Otherwise
    ``1 + max_boost · sqrt(q · |memory_valence|)`` with
    ``q = (|query_valence| − 0.2) / 0.8``: continuous in both valences, rising
    from 1.0 at the threshold to the full +15 % when both are ±1. Valences
    are clipped to [-1, 1].
    """
    qv = _clip(query_valence, -1.0, 1.0)
    mv = _clip(memory_valence, -1.0, 1.0)
    threshold = params.congruence_threshold
    if abs(qv) < threshold or qv * mv <= 0.0:
        return 1.0
    q = (abs(qv) - threshold) / (1.0 - threshold) if threshold < 1.0 else 1.0
    return 1.0 + params.congruence_max_boost * math.sqrt(q * abs(mv))


def importance_weight(importance: float, params: ScoringParams = DEFAULT_PARAMS) -> float:
    """Linear weight for importance in [0, 1] (clipped): default 0.75 + 0.5·importance,
    so the default importance 0.5 is neutral (1.0)."""
    low, high = params.importance_weight_range
    return low + (high - low) * _clip(importance, 0.0, 1.0)


def _utc(moment: datetime) -> datetime:
    """Naive datetimes are taken as UTC (the store writes UTC)."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def score(
    rrf: float,
    memory: Memory,
    now: datetime,
    query_valence: float = 0.0,
    params: ScoringParams = DEFAULT_PARAMS,
) -> ScoreParts:
    """Score components of one recalled memory at time ``now``.

    - retention: ``retention`` at the age since the memory was last written
      (``updated_at``, else ``created_at``; a memory with neither counts as new);
    - activation: B over ``created_at``, ``updated_at`` and ``access_times``
      (the ``max_access_times`` most recent), ages in seconds before ``now``;
    - emotion: ``emotion_congruence(query_valence, memory.valence)``;
    - importance: ``importance_weight(memory.importance)``.

    The arithmetic is ``score_seconds``' (recall's lean path calls it with the
    stored values, without building the Memory), so both give the same floats.
    Raises ValueError if ``rrf`` is negative or not finite.
    """
    written = memory.updated_at or memory.created_at
    return ScoreParts(*score_seconds(
        rrf, memory.category, memory.importance, memory.valence, memory.arousal,
        _utc(written).timestamp() if written else None,
        [_utc(m).timestamp() for m in (memory.created_at, memory.updated_at, *memory.access_times) if m is not None],
        _utc(now).timestamp(), query_valence, params))


def score_seconds(
    rrf: float,
    category: Category | str,
    importance: float,
    valence: float,
    arousal: float,
    written: float | None,
    times: Sequence[float],
    now: float,
    query_valence: float = 0.0,
    params: ScoringParams = DEFAULT_PARAMS,
) -> tuple[float, float, float, float, float]:
    """``score`` from plain values: ``(rrf, retention, activation, emotion,
    importance)``, the fields of ``ScoreParts`` in order. ``category``: a
    Category or its value; ``written``: POSIX seconds of the last write
    (``updated_at``, else ``created_at``; None: counts as new); ``times``: POSIX
    seconds of ``created_at``, ``updated_at`` and each access time, in that
    order (a duplicate counts once); ``now``: POSIX seconds. Raises ValueError
    if ``rrf`` is negative or not finite, or ``category`` is not a Category."""
    if not (math.isfinite(rrf) and rrf >= 0.0):
        raise ValueError(f"rrf must be finite and >= 0, got {rrf!r}")
    age_days = (now - written) / SECONDS_PER_DAY if written is not None else 0.0
    r = retention(age_days, category, valence, arousal, params)
    stamps = set(times)
    recent = sorted(stamps, reverse=True)[: params.max_access_times] if len(stamps) > params.max_access_times \
        else stamps
    b = activation([now - m for m in recent], params.activation_decay)
    return rrf, r, b, emotion_congruence(query_valence, valence, params), importance_weight(importance, params)


def final(parts: ScoreParts, params: ScoringParams = DEFAULT_PARAMS) -> float:
    """Final score: ``rrf × F^s`` with ``F = (floor + (1 − floor)·retention) ×
    activation_weight(B) × emotion × importance`` (floor = ``retention_floor``,
    0.5; s = ``rescore_strength``, 0.25). Non-negative for non-negative parts
    and non-decreasing in each of rrf, retention, activation, emotion and
    importance."""
    return final_of((parts.rrf, parts.retention, parts.activation, parts.emotion, parts.importance), params)


def final_of(parts: tuple[float, float, float, float, float], params: ScoringParams = DEFAULT_PARAMS) -> float:
    """``final`` of ``score_seconds``' tuple ``(rrf, retention, activation,
    emotion, importance)``: the same arithmetic, without a ScoreParts."""
    rrf, ret, act, emo, imp = parts
    floor = params.retention_floor
    kept = floor + (1.0 - floor) * _clip(ret, 0.0, 1.0)
    factor = kept * activation_weight(act, params) * emo * imp
    s = params.rescore_strength
    return rrf * (factor if s == 1.0 else factor ** s)
