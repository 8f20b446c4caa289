"""bench querymap's fit: ridge least squares recovers a known affine map, and the spread moves the estimate away
from the passages' mean without turning it (numpy only, no model)."""

from __future__ import annotations

import numpy as np

from bench.querymap import DIM, _apply, _nearer, fit, spread


def _unit(m):
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def test_fit_recovers_a_known_affine_map_and_spread_one_changes_nothing():
    """Passages made from queries by a known near-identity affine map: the fit maps held-back queries onto their
    passages (cosine > 0.999); s = 1 is the fit itself."""
    rng = np.random.default_rng(3)
    a = np.eye(DIM) + 0.05 * rng.standard_normal((DIM, DIM))
    b = 0.1 * rng.standard_normal(DIM)
    q = _unit(rng.standard_normal((3000, DIM)))
    p = q @ a + b
    w = fit(q[:2500], p[:2500], lam=1e-3)
    got = _apply(w, q[2500:])
    assert np.sum(got * _unit(p[2500:]), 1).min() > 0.999
    assert np.allclose(spread(w, p.mean(0), 1.0), w)


def test_a_larger_spread_moves_the_estimate_away_from_the_mean():
    """s > 1 lowers the mapped vectors' cosine to the passages' mean direction, and so how near they lie to other
    lines (the shrinkage least squares leaves, which made mapped memories everyone's nearest)."""
    rng = np.random.default_rng(4)
    centre = _unit(rng.standard_normal(DIM))
    q = _unit(centre * 3 + rng.standard_normal((2000, DIM)))
    p = _unit(centre * 3 + q + 0.5 * rng.standard_normal((2000, DIM)))
    w = fit(q, p)
    mean_dir = _unit(p.mean(0))
    near = [float((_apply(spread(w, p.mean(0), s), q) @ mean_dir).mean()) for s in (1.0, 1.1, 1.2)]
    assert near[0] > near[1] > near[2]
    closer = [_nearer(q, _apply(spread(w, p.mean(0), s), q), p)[0] for s in (1.0, 1.2)]
    assert closer[0] > closer[1]
