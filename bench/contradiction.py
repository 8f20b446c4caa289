"""Contradiction detection (``memory.contradiction.judge``) on labelled zh/en pairs.

Data: ``tests/data/contradiction_pairs.tsv`` (65 pairs, the set the judge was
written against) and ``tests/data/contradiction_heldout.tsv`` (20 pairs written
after it and never tuned on). Each pair is ``label, old, new`` with label
update / contradiction / restatement / unrelated. A pair is positive when the
new statement should supersede the old one (update or contradiction).

Printed per set: precision and recall of "supersedes" (positives found among
the judge's positives / among the labelled positives), accuracy of the exact
kind, and the confusion table labelled kind × judged kind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from memory.contradiction import CHANGES, judge

__all__ = ["run", "load", "score", "SETS"]

ROOT = Path(__file__).resolve().parents[1]
SETS = {"tuned": ROOT / "tests" / "data" / "contradiction_pairs.tsv",
        "held-out": ROOT / "tests" / "data" / "contradiction_heldout.tsv"}
KINDS = ("update", "contradiction", "restatement", "unrelated")


def load(path: Path) -> list[tuple[str, str, str]]:
    """(label, old, new) rows of a pairs file; ``#`` lines are comments."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        label, old, new = line.split("\t")
        rows.append((label, old, new))
    return rows


def score(rows: list[tuple[str, str, str]]) -> dict:
    """precision, recall (of superseding), accuracy (of the kind) in [0, 1], and
    the confusion Counter of (label, judged)."""
    confusion: Counter = Counter()
    tp = fp = fn = 0
    for label, old, new in rows:
        verdict = judge(old, new)
        confusion[(label, verdict.kind)] += 1
        truth, said = label in CHANGES, verdict.changes
        tp += truth and said
        fp += said and not truth
        fn += truth and not said
    n = len(rows)
    return {"n": n, "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0,
            "accuracy": sum(v for (a, b), v in confusion.items() if a == b) / n if n else 1.0, "confusion": confusion}


def run() -> str:
    """The table for every set, as text (also printed)."""
    blocks = []
    for name, path in SETS.items():
        s = score(load(path))
        lines = [f"contradiction detection, {name} set ({s['n']} zh/en pairs, {path.name})",
                 f"  supersedes: precision {s['precision']:.3f}  recall {s['recall']:.3f}   kind accuracy {s['accuracy']:.3f}",
                 "  labelled \\ judged  " + "  ".join(f"{k:>13}" for k in KINDS)]
        for label in KINDS:
            lines.append(f"  {label:>17}  " + "  ".join(f"{s['confusion'][(label, k)]:>13}" for k in KINDS))
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    print(text, flush=True)
    return text
