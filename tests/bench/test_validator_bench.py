"""The validator benchmark measures the issue's case: 10 memories, a ~600-char fully grounded recollection."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench.validator import measure, workload  # noqa: E402


def test_workload_is_ten_memories_and_a_grounded_600_char_recollection():
    """Both languages: 10 memories, 540–600 clean characters, every sentence kept (full validator work)."""
    for lang in ("zh", "en"):
        memories, output = workload(lang, random.Random(1))
        assert len(memories) == 10 and "[src:" in output
        r = measure(lang, iterations=3, primed=(lang == "en"))
        assert r["grounding"] == 1.0 and 540 <= r["chars"] <= 600
        assert 0 < r["p50"] <= r["p95"] <= r["max"]
