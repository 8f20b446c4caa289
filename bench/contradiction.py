"""Contradiction detection (``memory.contradiction.judge``) on labelled zh/en pairs.

Data: ``tests/data/contradiction_pairs.tsv`` (75 pairs, the set the judge was
written against) and ``tests/data/contradiction_heldout.tsv`` (20 pairs written
after it and never tuned on). Each pair is ``label, old, new`` with label
update / contradiction / restatement / unrelated. A pair is positive when the
new statement should supersede the old one (update or contradiction).

Printed per set: precision and recall of "supersedes" (positives found among
the judge's positives / among the labelled positives), accuracy of the exact
kind, the confusion table labelled kind × judged kind, and the three-way
outcome capture acts on (``memory.contradiction.outcome``: supersede / conflict
— both kept live and linked, told as a change — / unrelated) per labelled kind,
with how many positives were at least surfaced (superseded or marked) and how
many negatives were marked as a conflict by mistake.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from memory.contradiction import CHANGES, OUTCOMES, judge, outcome

__all__ = ["run", "load", "score", "SETS"]

ROOT = Path(__file__).resolve().parents[1]
SETS = {"tuned": ROOT / "tests" / "data" / "contradiction_pairs.tsv",
        "held-out": ROOT / "tests" / "data" / "contradiction_heldout.tsv"}
KINDS = ("update", "contradiction", "restatement", "unrelated")
JUDGED = KINDS[:2] + ("conflict",) + KINDS[2:]


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
    """precision, recall (of superseding), accuracy (of the kind) in [0, 1], the
    confusion Counter of (label, judged kind), the outcome Counter of (label,
    outcome in OUTCOMES), ``surfaced`` (share of positives superseded or marked
    as a conflict) and ``false_marks`` (negatives marked as a conflict)."""
    confusion: Counter = Counter()
    outcomes: Counter = Counter()
    tp = fp = fn = 0
    for label, old, new in rows:
        verdict = judge(old, new)
        confusion[(label, verdict.kind)] += 1
        outcomes[(label, outcome(verdict))] += 1
        truth, said = label in CHANGES, verdict.changes
        tp += truth and said
        fp += said and not truth
        fn += truth and not said
    n = len(rows)
    positives = sum(v for (a, _), v in outcomes.items() if a in CHANGES)
    surfaced = sum(v for (a, o), v in outcomes.items() if a in CHANGES and o != "unrelated")
    return {"n": n, "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0,
            "accuracy": sum(v for (a, b), v in confusion.items() if a == b) / n if n else 1.0, "confusion": confusion,
            "outcomes": outcomes, "surfaced": surfaced / positives if positives else 1.0,
            "false_marks": sum(v for (a, o), v in outcomes.items() if a not in CHANGES and o == "conflict")}


def run() -> str:
    """The table for every set, as text (also printed)."""
    blocks = []
    for name, path in SETS.items():
        s = score(load(path))
        lines = [f"contradiction detection, {name} set ({s['n']} zh/en pairs, {path.name})",
                 f"  supersedes: precision {s['precision']:.3f}  recall {s['recall']:.3f}   kind accuracy {s['accuracy']:.3f}",
                 "  labelled \\ judged  " + "  ".join(f"{k:>13}" for k in JUDGED)]
        for label in KINDS:
            lines.append(f"  {label:>17}  " + "  ".join(f"{s['confusion'][(label, k)]:>13}" for k in JUDGED))
        lines += [f"  three-way outcome: supersede {sum(s['outcomes'][(k, 'supersede')] for k in KINDS)}  "
                  f"conflict {sum(s['outcomes'][(k, 'conflict')] for k in KINDS)}  "
                  f"unrelated {sum(s['outcomes'][(k, 'unrelated')] for k in KINDS)}   "
                  f"(changes surfaced {s['surfaced']:.3f}, negatives marked as conflict {s['false_marks']})",
                  "  labelled \\ outcome " + "  ".join(f"{k:>13}" for k in OUTCOMES)]
        for label in KINDS:
            lines.append(f"  {label:>17}  " + "  ".join(f"{s['outcomes'][(label, k)]:>13}" for k in OUTCOMES))
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    print(text, flush=True)
    return text
