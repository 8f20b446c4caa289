"""``huiyi stats`` over the per-turn audit files and ``huiyi eval grounding`` over the
fixture of zh/en grounding cases."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.config import load_settings
from gateway.observability import audit_file, read_turns, summarise, write_turn

runner = CliRunner()
DAY = date(2026, 11, 1)
FIXTURE = Path(__file__).resolve().parents[2] / "data" / "grounding_cases.json"


def record(i: int, *, attempted: bool, reason: str | None, grounding: float | None, total: float) -> dict:
    at = datetime(2026, 11, 1, 8, i, tzinfo=timezone.utc)
    return {"at": at.isoformat(), "tenant": "default", "namespace": "default/tg:1", "chat": "tg:private:1",
            "message_id": str(i), "recalled": [{"id": "a1", "score": 0.5}], "mode": "template",
            "attempted": attempted, "sources": ["a1"], "grounding": grounding, "confidence": 1.0 if attempted else None,
            "fallback_reason": reason, "sentences": [], "recollection_chars": 10, "replied": True,
            "latency_ms": {"recall": 10.0 + i, "total": total}}


def write_day() -> Path:
    data_dir = load_settings().data_dir
    rows = [record(0, attempted=True, reason=None, grounding=1.0, total=100.0),
            record(1, attempted=True, reason=None, grounding=0.75, total=200.0),
            record(2, attempted=True, reason="ungrounded", grounding=0.5, total=300.0),
            record(3, attempted=True, reason="timeout", grounding=None, total=3100.0),
            record(4, attempted=False, reason="few_hits", grounding=None, total=50.0)]
    for r in rows:
        write_turn(data_dir, r)
    path = audit_file(data_dir, DAY)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("not json\n")
    return data_dir


def test_summary_counts_success_rate_reasons_and_percentiles():
    """Five turns, four attempts, two accepted: 50 %, reasons counted, p50/p95 interpolated, junk lines skipped."""
    s = summarise(read_turns(write_day(), DAY), DAY)
    assert (s.turns, s.attempted, s.accepted, s.success_rate) == (5, 4, 2, 0.5)
    assert s.fallback_reasons == {"ungrounded": 1, "timeout": 1, "few_hits": 1}
    assert s.grounding_mean == 0.75
    assert s.latency_ms["total"] == {"n": 5, "p50": 200.0, "p95": 2540.0}
    assert list(s.latency_ms) == ["recall", "total"]


def test_stats_command_prints_the_day():
    """huiyi stats --day prints the summary; --json gives the same numbers; a bad day exits 2; a day without
    turns says where the gateway writes them."""
    write_day()
    out = runner.invoke(app, ["stats", "--day", "2026-11-01"])
    assert out.exit_code == 0, out.output
    assert "5 turns, 4 reconstructions attempted, 2 accepted (success rate 50.0%)" in out.stdout
    assert "ungrounded 1" in out.stdout and "total" in out.stdout
    js = runner.invoke(app, ["stats", "--day", "2026-11-01", "--json"])
    assert json.loads(js.stdout)["latency_ms"]["total"]["p95"] == 2540.0
    assert runner.invoke(app, ["stats", "--day", "yesterday"]).exit_code == 2
    assert "no turn recorded" not in out.stdout
    # an empty day says why and where the audit is; operator tables stay English in a Chinese shell
    empty = runner.invoke(app, ["stats", "--day", "2020-01-01"], env={"LANG": "zh_CN.UTF-8"})
    assert empty.exit_code == 0 and "0 turns" in empty.stdout
    assert "no turn recorded that day" in empty.stdout and "turns-2020-01-01.jsonl" in empty.stdout


def test_eval_grounding_over_the_fixture():
    """huiyi eval grounding prints per-case decisions and totals; zh and en cases decide as labelled
    except the documented limits."""
    out = runner.invoke(app, ["eval", "grounding", str(FIXTURE), "--repeat", "2"])
    assert out.exit_code == 0, out.output
    assert "18 cases, embedder none: mean grounding" in out.stdout and "validator p50" in out.stdout
    js = runner.invoke(app, ["eval", "grounding", str(FIXTURE), "--repeat", "1", "--json"])
    report = json.loads(js.stdout)
    by_id = {c["id"]: c for c in report["cases"]}
    assert {c["lang"] for c in report["cases"]} == {"zh_CN", "en"}
    assert by_id["zh-phantom-id"]["decision"] == "accepted" and by_id["zh-phantom-id"]["confidence"] == 0.8
    assert by_id["zh-uncited-invention"]["decision"] == "ungrounded"
    assert by_id["en-swapped-date"]["decision"] == "ungrounded"
    misses = {c["id"] for c in report["cases"] if c["agrees"] is False}
    notes = {c["id"] for c in json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"] if "known limit" in c.get("note", "")}
    assert misses <= notes, misses - notes
    assert 0 < report["fallback_rate"] < 1 and report["p95_ms"] > 0
    assert runner.invoke(app, ["eval", "grounding", "/nonexistent.json"]).exit_code == 2


def test_recall_params_override_the_association_channel():
    """--param sets the association channel's weight, seeds, link floor and half-life (and BM25's k1 and b)
    like any recall default;
    an unknown name, a non-number, a non-finite number or a negative weight is refused."""
    from gateway.cli.evaluate import recall_params

    p = recall_params(["assoc_weight=0.25", "assoc_seeds=5", "assoc_min_weight=0.2", "link_half_life_days=7"])
    assert (p.assoc_weight, p.assoc_seeds, p.assoc_min_weight, p.link_half_life_days) == (0.25, 5, 0.2, 7.0)
    assert recall_params(["assoc_weight=0"]).assoc_weight == 0.0
    assert (recall_params(["bm25_k1=0.9", "bm25_b=0.3"]).bm25_k1, recall_params(["bm25_b=0"]).bm25_b) == (0.9, 0.0)
    assert recall_params(["vector_weight=0.25"]).vector_weight == 0.25 and recall_params([]).vector_weight is None
    for bad in (["assoc=1"], ["assoc_weight=很多"], ["assoc_seeds"], ["vector_weight=-1"], ["bm25_weight=inf"],
                ["vector_floor=nan"], ["rrf_k=-5"], ["link_half_life_days=0"], ["tail=-1"], ["bm25_k1=-1"],
                ["bm25_b=5"], ["exact_max=-1"], ["assoc_seeds=-1"], ["candidates=0"], ["rrf_k=2.5"]):
        with pytest.raises(ValueError, match=bad[0].split("=")[0]):
            recall_params(bad)
    assert recall_params(["rrf_k=0", "vector_floor=-1", "bm25_b=1", "rescore_strength=1"]).rrf_k == 0
