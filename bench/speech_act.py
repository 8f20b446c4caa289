"""Speech acts (``memory.speech_act.read``) on a labelled zh/en set of chat sentences.

Data: ``tests/data/speech_acts.tsv`` (fields in ``tests/data/MANIFEST.md``):
one sentence a line with its act (self, other, question, request, reaction,
correction, quote) and whether capture may write something of it (``yes`` for
a statement, a correction, a rhetorical question carrying a statement and a
statement beside a question to the companion). Written for this project with
the stage: a development set, not a held-out one.

Every sentence is read as said to the bot (``addressed=True``). Printed per
language and act: items, read right (act and whether it writes), accuracy;
then the confusion table labelled act × read act, and the sentences read
wrongly with what they were read as.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from memory.speech_act import Act, read

__all__ = ["SET", "HELDOUT", "ACTS", "Row", "load", "score", "chitchat", "run"]

SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "speech_acts.tsv"
HELDOUT = SET.with_name("speech_acts_heldout.tsv")
"""Sentences written after the stage's rules and never used to tune them."""
ACTS = tuple(a.value for a in Act if a is not Act.UNKNOWN)
"""The labelled acts, in table order."""


@dataclass(frozen=True, slots=True)
class Row:
    """One labelled sentence: ``id``, ``lang`` (zh/en), ``act`` (an ACTS value), ``writes`` and ``text``."""

    id: str
    lang: str
    act: str
    writes: bool
    text: str


def load(path: Path = SET) -> list[Row]:
    """The rows of a speech-act TSV (header ``id lang act writes text``; ``#`` lines are comments; no quoting:
    a quote mark is part of the text)."""
    with path.open(encoding="utf-8") as f:
        reader = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t",
                                quoting=csv.QUOTE_NONE)
        return [Row(r["id"], r["lang"], r["act"], r["writes"] == "yes", r["text"]) for r in reader]


def score(rows: list[Row]) -> dict:
    """``{"total": Counter[(lang, act)], "right": Counter[(lang, act)], "confusion": Counter[(act, read act)],
    "misses": [(row, Reading)]}``: a row is right when its act and whether it writes are both read right."""
    total, right, confusion, misses = Counter(), Counter(), Counter(), []
    for row in rows:
        got = read(row.text, addressed=True)
        total[(row.lang, row.act)] += 1
        confusion[(row.act, got.act.value)] += 1
        if got.act.value == row.act and got.writes == row.writes:
            right[(row.lang, row.act)] += 1
        else:
            misses.append((row, got))
    return {"total": total, "right": right, "confusion": confusion, "misses": misses}


def chitchat(rows: list[Row]) -> dict[str, tuple[int, int, int]]:
    """The chit-chat decision against the labels (chit-chat = labelled ``reaction``): ``{"is_chitchat": (true
    positives, false positives, false negatives)}`` — ``memory.speech_act.is_chitchat``, the one decision
    recall and capture read."""
    from memory.speech_act import is_chitchat

    out = {}
    for name, said in (("is_chitchat", is_chitchat),):
        tp = sum(1 for r in rows if r.act == "reaction" and said(r.text))
        fp = sum(1 for r in rows if r.act != "reaction" and said(r.text))
        fn = sum(1 for r in rows if r.act == "reaction" and not said(r.text))
        out[name] = (tp, fp, fn)
    return out


def run(path: Path = SET) -> str:
    """The tables, as text (also printed): the development set's, then the held-out set's (``HELDOUT``) with
    the chit-chat decision's precision and recall on each."""
    text = _tables(path, "a development set")
    if path == SET and HELDOUT.is_file():
        text += "\n" + _tables(HELDOUT, "held out")
    return text


def _tables(path: Path, what: str) -> str:
    rows = load(path)
    s = score(rows)
    lines = [f"speech acts: {len(rows)} labelled sentences ({path.name}, {what}), read as said to the bot",
             "lang  act         items  right  accuracy"]
    for lang in ("zh", "en", "all"):
        for act in (*ACTS, "all"):
            keys = [(lg, a) for (lg, a) in s["total"] if (lang == "all" or lg == lang) and (act == "all" or a == act)]
            n = sum(s["total"][k] for k in keys)
            if n:
                ok = sum(s["right"][k] for k in keys)
                lines.append(f"{lang:<4}  {act:<10}  {n:>5}  {ok:>5}  {ok / n:>8.3f}")
    lines.append("labelled \\ read  " + "  ".join(f"{a:>10}" for a in (*ACTS, "unknown")))
    for act in ACTS:
        lines.append(f"{act:>15}  " + "  ".join(f"{s['confusion'][(act, a)]:>10}" for a in (*ACTS, "unknown")))
    for row, got in s["misses"]:
        lines.append(f"  miss {row.id}: {row.text!r} read as {got.act.value}" + (f" (told {got.told!r})" if got.told else ""))
    for name, (tp, fp, fn) in chitchat(rows).items():
        prec = tp / (tp + fp) if tp + fp else float("nan")
        rec = tp / (tp + fn) if tp + fn else float("nan")
        lines.append(f"chit-chat ({name}): precision {prec:.3f}, recall {rec:.3f} ({tp} right, {fp} wrongly, {fn} missed)")
    text = "\n".join(lines)
    print(text, flush=True)
    return text
