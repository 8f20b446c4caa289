"""``python -m bench plans``: how many statements about the future of the labelled
plan sets (``tests/data/plans.tsv``, written with the reader, and
``plans_heldout.tsv``, written after it and never used to change it: zh and en lines, each with the local moment it
was said, the tenant's zone and the day or period it plans, ``undated`` or
``none``) are recognised with the right date, in each language — read two ways:

- ``line``: ``memory.plans.read_plan`` of the line as said;
- ``capture``: the line through the offline extractor
  (``memory.capture.HeuristicExtractor``, addressed: a private chat), then
  ``memory.plans.plan_of`` of each fact's stored text, ``created_at`` and
  ``event_time`` / ``event_end`` — what a stored memory's plan reads as.

A future line is right when the plan read has exactly the labelled first and last
day (``undated``: a plan without a date); a ``none`` line is a false plan when a plan
is read in it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "tests" / "data" / "plans.tsv"
HELDOUT = ROOT / "tests" / "data" / "plans_heldout.tsv"


@dataclass(frozen=True, slots=True)
class Line:
    """One labelled line: ``text``, ``said_at`` (aware, in ``zone``) and ``expected``:
    (first, last) days, ``"undated"`` or None (no plan)."""

    text: str
    said_at: datetime
    zone: str
    expected: tuple[date, date] | str | None

    @property
    def lang(self) -> str:
        return "zh" if any("\u4e00" <= c <= "\u9fff" for c in self.text) else "en"


def load(path: Path = SET) -> list[Line]:
    """The labelled lines of ``path`` (tab-separated ``said_at``, ``tz``, ``text``,
    ``expected`` after a header row; ``#`` starts a comment). Raises ValueError on a
    malformed row."""
    out = []
    for n, row in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not row.strip() or row.startswith(("#", "said_at\t")):
            continue
        cols = row.split("\t")
        if len(cols) != 4:
            raise ValueError(f"{path.name}:{n}: 4 tab-separated columns expected, got {len(cols)}")
        said, tz, text, label = cols
        if label == "none":
            expected: tuple[date, date] | str | None = None
        elif label == "undated":
            expected = "undated"
        else:
            a, _, b = label.partition("~")
            expected = (date.fromisoformat(a), date.fromisoformat(b or a))
        out.append(Line(text, datetime.fromisoformat(said).replace(tzinfo=ZoneInfo(tz)), tz, expected))
    return out


def _as_label(plan) -> tuple[date, date] | str | None:
    if plan is None:
        return None
    return (plan.first, plan.last) if plan.dated else "undated"


def read_line(line: Line):
    """What ``memory.plans.read_plan`` reads in the line as said."""
    from memory.plans import read_plan

    return _as_label(read_plan(line.text, line.said_at, line.zone))


def read_captured(line: Line):
    """The plan of the first fact the offline extractor stores from the line that
    holds one (else of its first fact; None without a fact)."""
    from memory.capture import HeuristicExtractor
    from memory.plans import plan_of

    facts = HeuristicExtractor().extract(line.text, line.said_at, line.zone, addressed=True)
    plans = [plan_of(f.text, line.said_at, f.event_time, f.event_end, line.zone) for f in facts]
    return _as_label(next((p for p in plans if p is not None), None))


@dataclass(frozen=True, slots=True)
class Score:
    """One language's counts: ``right`` of ``future`` statements, ``false`` plans of
    ``other`` lines."""

    lang: str
    future: int
    right: int
    other: int
    false: int


def score(lines: list[Line], read, misses: list | None = None) -> list[Score]:
    """Per language (zh, en, all) the counts of ``Score``; each wrong line appended
    to ``misses`` with what was read."""
    out = []
    for lang in ("zh", "en", "all"):
        chosen = [ln for ln in lines if lang == "all" or ln.lang == lang]
        right = false = 0
        for ln in chosen:
            got = read(ln)
            ok = got == ln.expected
            if ln.expected is None:
                false += got is not None
            else:
                right += ok
            if not ok and misses is not None and lang == "all":
                misses.append((ln, got))
        future = sum(1 for ln in chosen if ln.expected is not None)
        out.append(Score(lang, future, right, len(chosen) - future, false))
    return out


def run(verbose: bool = False) -> int:
    """Print a table per set (the labelled one, the held-out one), both readings;
    misses on stderr with ``verbose``; 0."""
    for path in (SET, HELDOUT):
        lines = load(path)
        print(f"plans on {path.relative_to(ROOT)} ({len(lines)} lines)")
        print("| reading | zh future, right date | en future, right date | all | false plans (zh / en) |")
        print("| --- | --- | --- | --- | --- |")
        for name, read in (("line", read_line), ("capture", read_captured)):
            misses: list = []
            zh, en, both = score(lines, read, misses)
            print(f"| {name} | {zh.right}/{zh.future} ({zh.right / zh.future:.3f}) | "
                  f"{en.right}/{en.future} ({en.right / en.future:.3f}) | "
                  f"{both.right}/{both.future} ({both.right / both.future:.3f}) | "
                  f"{zh.false}/{zh.other} / {en.false}/{en.other} |")
            if verbose:
                for ln, got in misses:
                    print(f"    miss [{name}] {ln.text!r} {ln.said_at:%Y-%m-%d %H:%M} {ln.zone}: expected "
                          f"{ln.expected}, read {got}", file=sys.stderr)
    return 0
