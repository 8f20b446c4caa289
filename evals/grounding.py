"""The recollection's validator (``memory.reconstruct.validate``) over labelled
cases: grounding, fallback rate, agreement with the expected decision and the
validator's own latency (``huiyi eval grounding``).

Case format (JSON, ``tests/data/grounding_cases.json``)::

    {"cases": [{"id": "zh-grounded", "lang": "zh_CN", "names": ["阿杰", "小忆"],
                "memories": [{"id": "a1", "text": "…", "date": "2026-10-20", "emotion": "joy"}],
                "context": ["阿杰: …"], "output": "…[src:a1]。",
                "expect": "accepted" | "ungrounded" | "bad_citations" | "malformed"}]}
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

__all__ = ["CaseResult", "GroundingReport", "evaluate_grounding"]


@dataclass
class CaseResult:
    """One case: validator ``decision`` ("accepted" or a fallback reason) against ``expect``;
    grounding and confidence in [0, 1]; ``ms``: median validator time in milliseconds."""

    id: str
    lang: str
    grounding: float
    confidence: float
    decision: str
    expect: str | None
    ms: float
    statuses: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool | None:
        return None if self.expect is None else self.decision == self.expect


@dataclass
class GroundingReport:
    """Over all cases: ``grounding_mean`` in [0, 1]; ``fallback_rate``: share of
    cases not accepted; ``agreement``: share whose decision matches ``expect``;
    ``p50_ms``/``p95_ms``: validator latency over every timed run."""

    embedder: str
    cases: list[CaseResult]
    grounding_mean: float
    fallback_rate: float
    agreement: float | None
    p50_ms: float
    p95_ms: float

    def lines(self) -> list[str]:
        out = [f"{'case':<30}{'lang':<7}{'grounding':>10}{'conf':>6}  {'decision':<14}{'expected':<14}{'ms':>7}"]
        for c in self.cases:
            mark = "" if c.agrees is None else ("  ok" if c.agrees else "  MISS")
            out.append(f"{c.id:<30}{c.lang:<7}{c.grounding:>10.3f}{c.confidence:>6.2f}  {c.decision:<14}"
                       f"{c.expect or '-':<14}{c.ms:>7.2f}{mark}")
        agree = "-" if self.agreement is None else f"{self.agreement:.1%}"
        out.append(f"{len(self.cases)} cases, embedder {self.embedder}: mean grounding {self.grounding_mean:.3f}, "
                   f"fallback rate {self.fallback_rate:.1%}, agreement with expected {agree}, "
                   f"validator p50 {self.p50_ms:.2f} ms, p95 {self.p95_ms:.2f} ms")
        return out


def evaluate_grounding(cases: list[dict], *, embedder=None, repeat: int = 5) -> GroundingReport:
    """Run ``validate`` on each case ``repeat`` times (timing every run; the first
    warms jieba's caches for that text). ``embedder``: an Embedder for the
    second chance, or None for token overlap only. Raises KeyError/ValueError on
    a malformed case."""
    from memory import text
    from memory.reconstruct import validate

    text.initialise()
    results: list[CaseResult] = []
    timings: list[float] = []
    for case in cases:
        sources = {m["id"]: m["text"] for m in case["memories"]}
        dates = {m["id"]: date.fromisoformat(m["date"]) for m in case["memories"] if m.get("date")}
        runs: list[float] = []
        v = None
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            v = validate(case["output"], sources, dates=dates, names=case.get("names", ()), embedder=embedder)
            runs.append((time.perf_counter() - t0) * 1000)
        assert v is not None
        timings += runs
        results.append(CaseResult(id=case["id"], lang=case.get("lang", "?"), grounding=v.grounding,
                                  confidence=v.confidence, decision=v.reason or "accepted",
                                  expect=case.get("expect"), ms=round(_percentile(runs, 50) or 0.0, 3),
                                  statuses=[x.status for x in v.sentences]))
    n = len(results) or 1
    labelled = [r for r in results if r.expect is not None]
    return GroundingReport(
        embedder=getattr(embedder, "name", "none") if embedder is not None else "none",
        cases=results,
        grounding_mean=round(sum(r.grounding for r in results) / n, 4),
        fallback_rate=round(sum(1 for r in results if r.decision != "accepted") / n, 4),
        agreement=round(sum(1 for r in labelled if r.agrees) / len(labelled), 4) if labelled else None,
        p50_ms=round(_percentile(timings, 50) or 0.0, 3),
        p95_ms=round(_percentile(timings, 95) or 0.0, 3),
    )


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (q in [0, 100]) of ``values``, numpy's linear
    interpolation; None for no values."""
    if not values:
        return None
    import numpy as np

    return float(np.percentile(values, q))
