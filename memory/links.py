"""Associations between the memories of one namespace (issue 17): the weight rule.

A link joins two live memories of one namespace that belong together: they were
recalled into one prompt together (``recalled``), consolidated into one cluster
(``cluster``), or name the same thing (``entity``). The store keeps one row per
pair (``memory.store.links``); this module holds the rule its weight follows.

Weight rule: a Hebbian co-use count (Hebb 1949: what fires together wires
together; the retrieval sidecar in ``../shared/background`` counts co-occurrence
edges the same way) that forgets exponentially with a half-life, the form
``memory.scoring`` uses for retention (Ebbinghaus 1885; Anderson & Schooler
1991 on the decay of need)::

    w(t)  = w(t0) · 2^(−(t − t0) / h)          decay, h = half-life in days
    w'    = min(W_MAX, w(t) + amount)           each co-use adds ``amount``

``t − t0`` is in days (negative ages count as 0: an out-of-order write never
grows a weight); ``h`` defaults to ``DEFAULT_HALF_LIFE_DAYS`` (30) and is a
setting (``RecallParams.link_half_life_days``). Weights are ≥ 0 and never above
``W_MAX`` (10): a pair recalled together daily for months saturates rather than
drowning every other link of its memories.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = ["DEFAULT_HALF_LIFE_DAYS", "W_MAX", "REASONS", "decayed", "grown"]

DEFAULT_HALF_LIFE_DAYS = 30.0
"""Days after which an unused link keeps half its weight."""
W_MAX = 10.0
"""The most a link can weigh (ten fresh co-uses)."""
REASONS = ("recalled", "cluster", "entity")
"""Why two memories are linked: recalled together, consolidated together, sharing an entity."""


def _age_days(at: datetime, since: datetime) -> float:
    return max(0.0, (at - since).total_seconds() / 86400.0)


def decayed(weight: float, since: datetime, at: datetime, half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> float:
    """``weight`` (as of ``since``) at time ``at``: ``weight · 2^(−Δ/h)``, Δ the age
    in days (≥ 0), h ``half_life_days`` (> 0; ValueError otherwise). Both times aware."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be > 0")
    return max(0.0, weight) * math.pow(2.0, -_age_days(at, since) / half_life_days)


def grown(weight: float, since: datetime, at: datetime, amount: float = 1.0,
          half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> float:
    """The weight after one more co-use at ``at``: ``min(W_MAX, decayed + amount)``.
    ``amount`` > 0 (ValueError otherwise)."""
    if amount <= 0:
        raise ValueError("amount must be > 0")
    return min(W_MAX, decayed(weight, since, at, half_life_days) + amount)
