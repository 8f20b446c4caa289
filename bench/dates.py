"""``python -m bench dates``: how many lines of the labelled date set
(``tests/data/dates_labelled.tsv``: zh and en lines, each with the moment it was
said, the tenant's zone and the day or period it names, or none) the date reader
(``memory.dates.resolve_when``) reads right, in each language — and, with
``--against REV``, the reader of git revision ``REV`` over the same set in the
same run.

A line is read right when the reader gives exactly the labelled day or period
(first and last day), or nothing for a line labelled ``-``. A period read as its
first day is wrong; the "first day" column says how many lines a reader gets
right when only the first day is asked of it (a period's first day, a day, or
nothing).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "tests" / "data" / "dates_labelled.tsv"
HELDOUT = ROOT / "tests" / "data" / "dates_heldout.tsv"


@dataclass(frozen=True, slots=True)
class Line:
    """One labelled line: ``text``, ``said_at`` (aware UTC), ``zone`` (IANA) and the
    expected ``(first, last)`` day, or None for a line that names no date."""

    text: str
    said_at: datetime
    zone: str
    expected: tuple[date, date] | None

    @property
    def lang(self) -> str:
        return "zh" if any("\u4e00" <= c <= "\u9fff" for c in self.text) else "en"


def _period(label: str) -> tuple[date, date] | None:
    """``2027-01-15``, ``2027-01``, ``2027`` or ``first~last`` as (first, last); ``-`` as None."""
    from memory.dates import _month_end

    if label == "-":
        return None
    if "~" in label:
        a, b = label.split("~")
        return date.fromisoformat(a), date.fromisoformat(b)
    parts = [int(p) for p in label.split("-")]
    if len(parts) == 3:
        return date(*parts), date(*parts)
    if len(parts) == 2:
        return date(parts[0], parts[1], 1), _month_end(parts[0], parts[1])
    return date(parts[0], 1, 1), date(parts[0], 12, 31)


def _label(period: tuple[date, date] | None) -> str:
    if period is None:
        return "-"
    return period[0].isoformat() if period[0] == period[1] else f"{period[0]}~{period[1]}"


def load(path: Path = SET) -> list[Line]:
    """The labelled lines of ``path`` (tab-separated: line, said-at ISO UTC, zone,
    expected; ``#`` starts a comment line). Raises ValueError on a malformed row."""
    out = []
    for n, row in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not row.strip() or row.startswith("#"):
            continue
        cols = row.split("\t")
        if len(cols) != 4:
            raise ValueError(f"{path.name}:{n}: 4 tab-separated columns expected, got {len(cols)}")
        text, said, zone, expected = cols
        out.append(Line(text, datetime.fromisoformat(said.replace("Z", "+00:00")), zone, _period(expected)))
    return out


Reader = Callable[[Line], tuple[date, date] | None]


def reader_of(module) -> Reader:
    """The (first, last) a ``memory.dates``-like module reads in a line; a reader
    whose ``When`` has no ``end`` reads a day."""
    def read(line: Line) -> tuple[date, date] | None:
        when = module.resolve_when(line.text, line.said_at, line.zone)
        if when is None:
            return None
        return when.day, getattr(when, "end", None) or when.day
    return read


def module_at(rev: str):
    """``memory/dates.py`` as it was at git revision ``rev``, loaded as a module of its
    own (it imports only the standard library and ``memory.text``). Raises
    subprocess.CalledProcessError for an unknown revision."""
    source = subprocess.run(["git", "show", f"{rev}:memory/dates.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"dates_at_{rev.replace('/', '_')}", f.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module


@dataclass(frozen=True, slots=True)
class Score:
    """Lines read right of ``total`` in one language: ``right`` (day or period
    exactly), ``first_day`` (the first day only)."""

    lang: str
    total: int
    right: int
    first_day: int

    @property
    def share(self) -> float:
        return self.right / self.total if self.total else 0.0


def score(lines: list[Line], read: Reader, misses: list[tuple[Line, object]] | None = None) -> list[Score]:
    """Per language (zh, en, all): how many ``lines`` ``read`` gets right; each miss
    appended to ``misses`` with what was read."""
    out = []
    for lang in ("zh", "en", "all"):
        chosen = [ln for ln in lines if lang == "all" or ln.lang == lang]
        right = first = 0
        for ln in chosen:
            got = read(ln)
            if got == ln.expected:
                right += 1
            elif misses is not None and lang == "all":
                misses.append((ln, got))
            if (got and got[0]) == (ln.expected and ln.expected[0]):
                first += 1
        out.append(Score(lang, len(chosen), right, first))
    return out


def run(against: str | None = None, verbose: bool = False) -> int:
    """Print a table per set, the labelled (dev) one and the held-out one (this
    tree's reader, and ``against``'s first when given); 0."""
    import memory.dates as now

    readers = [(against, reader_of(module_at(against)))] if against else []
    readers.append(("this tree", reader_of(now)))
    for path in (SET, HELDOUT):
        _table(path, readers, verbose)
    return 0


def _table(path: Path, readers: list[tuple[str, Reader]], verbose: bool) -> None:
    lines = load(path)
    print(f"date reader on {path.relative_to(ROOT)} ({len(lines)} lines)")
    print("| reader | zh right | en right | all right | all, first day only |")
    print("| --- | --- | --- | --- | --- |")
    for name, read in readers:
        misses: list[tuple[Line, object]] = []
        zh, en, both = score(lines, read, misses)
        print(f"| {name} | {zh.right}/{zh.total} ({zh.share:.3f}) | {en.right}/{en.total} ({en.share:.3f}) | "
              f"{both.right}/{both.total} ({both.share:.3f}) | {both.first_day}/{both.total} |")
        if verbose:
            for ln, got in misses:
                print(f"    miss [{name}] {ln.text!r} said {ln.said_at:%Y-%m-%d %H:%M}Z {ln.zone}: "
                      f"expected {_label(ln.expected)}, read {_label(got)}", file=sys.stderr)
