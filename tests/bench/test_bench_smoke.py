"""The benchmark loaders read LoCoMo and DuLeMon as documented, and hybrid recall is no worse than its weaker channel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import DATA_DIR  # noqa: E402
from bench.quality import desegment, evaluate, evidence_ids, ingest, load_dulemon, load_locomo  # noqa: E402

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"no evaluation data at {DATA_DIR} (HUIYI_EVAL_DATA_DIR)")


def test_loaders_and_channels(sqlite_core):
    """Tiny slices load with the expected counts; hybrid recall@10 >= the worse single channel."""
    assert evidence_ids(["D8:6; D9:17", "D9:1 D4:4", "D:11:26", "D30:05", "D"]) == [
        "D8:6", "D9:17", "D9:1", "D4:4", "D11:26", "D30:5"]
    assert desegment("我 在 IT 部门 工作 ， I love NBA games") == "我在IT部门工作，I love NBA games"

    locomo = load_locomo(conversations=1, max_turns=50)
    assert list(locomo.worlds) == ["conv-26"] and locomo.n_docs == 50 and len(locomo.queries) == 19
    kept = {d.key for d in locomo.worlds["conv-26"]}
    assert all(q.gold <= kept and q.group in {"1", "2", "3", "4"} for q in locomo.queries)

    dulemon = load_dulemon(dialogues=2)
    assert dulemon.n_docs == 9 and len(dulemon.queries) == 5 and len(dulemon.worlds) == 2
    one_ns = load_dulemon(dialogues=2, one_namespace=True)
    assert list(one_ns.worlds) == ["all"] and one_ns.n_docs == 9 and len(one_ns.queries) == 5

    ing = ingest(sqlite_core, [locomo, dulemon, one_ns])
    sqlite_core.index.optimize()
    assert ing.rows == 68 and sqlite_core.index.count() == 68 and sqlite_core.store.pending_ops() == []
    for suite in (locomo, one_ns):
        res = evaluate(sqlite_core, suite, ing.key_of)
        at10 = {ch: res.recall_any(ch, 10) for ch in res.runs}
        assert at10["hybrid"] >= min(at10["bm25"], at10["vector"]), (suite.name, at10)
        assert all(len(r) == len(suite.queries) for run in res.runs.values() for r in (run.retrieved, run.latency_s))
