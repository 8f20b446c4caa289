"""The contradiction bench: a labelled zh/en set of at least 60 pairs with all four kinds, scored by the real judge."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench.contradiction import KINDS, SETS, load, run, score  # noqa: E402


def test_the_labelled_set_has_sixty_pairs_of_every_kind_in_both_languages():
    """>= 60 pairs; each kind has Chinese and English pairs."""
    rows = load(SETS["tuned"])
    assert len(rows) >= 60
    for kind in KINDS:
        texts = [old + new for label, old, new in rows if label == kind]
        assert any(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts), kind
        assert any(t.isascii() for t in texts), kind


def test_the_bench_prints_precision_and_recall_for_both_sets(capsys):
    """`python -m bench contradiction` prints precision/recall per set; both sets
    find most updates and contradictions without superseding unrelated facts."""
    text = run()
    assert text.count("precision") == 2 and "held-out" in text and capsys.readouterr().out
    for path in SETS.values():
        s = score(load(path))
        assert s["precision"] >= 0.9 and s["recall"] >= 0.8
