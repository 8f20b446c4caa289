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
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
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
    return _module_from_git(rev, "memory/dates.py", "dates")


def _module_from_git(rev: str, path: str, name: str):
    """The module at ``path`` as it was at git revision ``rev``, loaded under a name of its
    own (its imports are this tree's modules)."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"{name}_at_{re.sub(r'[^0-9A-Za-z_]', '_', rev)}", f.name)
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


# -- day-level questions on MemoryBank-CN: the day's content before its opener ---------------------------

OPENERS = ROOT / "tests" / "data" / "memorybank_cn_day_openers.tsv"
_DAY_Q = re.compile(r"(\d{1,2})月(\d{1,2})[日号]")


def _recall_at(rev: str):
    """``memory/recall.py`` as it was at git revision ``rev``, loaded beside today's
    (the rest of ``memory`` is this tree's)."""
    return _module_from_git(rev, "memory/recall.py", "recall")


def daylevel(against: str | None = None, data_dir: Path | None = None, verbose: bool = False) -> int:
    """MemoryBank-CN's day-level probing questions (those naming a day:
    「我曾经在5月4日这天分享了一些我遇到的麻烦，是关于什么的？」), asked alone as of
    2023-05-07 over each person's history replayed through the real capture
    (``memory.capture.capture``, the offline extractor, the gateway's embedder, each
    day's lines from 12:00 Shanghai a minute apart). Per recall module (this tree's,
    and ``against``'s first when given, over the same stores): the share whose first
    hit — and any of whose first 5 — is a memory of that day's lines other than its
    opener (``memorybank_cn_day_openers.tsv``, labelled by hand), and of the
    questions whose day has a labelled opener, how many recall it above everything
    else that day said (``verbose``: each question whose first hit is not the day's
    content, on stderr). Returns 2 without the data."""
    import json
    import shutil

    from gateway.config import load_settings
    from gateway.service import build_pipeline
    from memory import recall as today
    from memory.capture import capture
    from memory.types import ChatKind, ChatRef, Namespace

    root = data_dir or Path(os.environ.get("HUIYI_EVAL_DATA_DIR", ROOT.parent / "shared" / "data"))
    bank_path, q_path = root / "zh" / "memorybank_cn_memory_bank.json", root / "zh" / "memorybank_cn_probing_questions.jsonl"
    if not bank_path.is_file() or not q_path.is_file():
        print(f"no MemoryBank-CN under {root}/zh", file=sys.stderr)
        return 2
    bank = json.loads(bank_path.read_text(encoding="utf-8"))
    questions = []
    for row in q_path.read_text(encoding="utf-8").splitlines():
        for person, qs in json.loads(row).items():
            for q in qs:
                m = _DAY_Q.search(q)
                if m:
                    questions.append((person, f"2023-{int(m.group(1)):02d}-{int(m.group(2)):02d}", q))
    openers = set()
    for row in OPENERS.read_text(encoding="utf-8").splitlines():
        if row.strip() and not row.startswith("#"):
            person, day, index, _text = row.split("\t")
            openers.add((person, day, int(index)))
    modules = ([(against, _recall_at(against))] if against else []) + [("this tree", today)]
    work = Path(tempfile.mkdtemp(prefix="huiyi-daylevel-"))
    try:
        pipeline = build_pipeline(load_settings(data_dir=work))
        pipeline.core.wait_index(120)
        core = pipeline.core
        source: dict[tuple[str, str], tuple[str, int]] = {}  # (person, memory id) → (day, line)
        people = sorted({p for p, _, _ in questions})
        for n, person in enumerate(people):
            ns = Namespace("default", f"person:mbcn{n}")
            chat = ChatRef("tg", ChatKind.PRIVATE, f"mbcn{n}")
            for day, turns in sorted(bank[person]["history"].items()):
                noon = datetime.fromisoformat(f"{day}T04:00:00+00:00")
                for i, turn in enumerate(turns):
                    said = noon + timedelta(minutes=i)
                    for r in capture(core, ns, turn["query"].strip(), chat=chat, said_at=said, message_id=f"{day}-{i}"):
                        if r.memory is not None:
                            source[(person, r.memory.id)] = (day, i)
        now = datetime(2023, 5, 7, 4, tzinfo=timezone.utc)
        print(f"MemoryBank-CN day-level questions: {len(questions)} over {len(people)} people "
              f"({sum(1 for p, _ in source)} memories through capture), asked alone as of {now:%Y-%m-%d}")
        print("| recall | day's content first | day's content in first 5 | opener above the day's content |")
        print("| --- | --- | --- | --- |")
        for name, module in modules:
            first = five = opener_first = with_opener = 0
            for person, day, q in questions:
                ns = Namespace("default", f"person:mbcn{people.index(person)}")
                hits = module.recall(core.store, core.index, ns, [q], now=now, params=module.RecallParams(k=10))
                said = [source.get((person, h.memory.id)) for h in hits]
                content = [s is not None and s[0] == day and (person, day, s[1]) not in openers for s in said]
                first += bool(content[:1] and content[0])
                five += any(content[:5])
                opened = [k for k, s in enumerate(said) if s is not None and s[0] == day and (person, day, s[1]) in openers]
                if any((person, day, i) in openers for i in range(len(bank[person]["history"].get(day, [])))):
                    with_opener += 1
                    later = [k for k, c in enumerate(content) if c]
                    opener_first += bool(opened) and (not later or min(opened) < min(later))
                if verbose and not (content[:1] and content[0]):
                    print(f"    first hit not the day's content [{name}] {q}: "
                          f"{hits[0].memory.text[:40] if hits else '-'} ({said[0] if said else '-'})", file=sys.stderr)
            total = len(questions)
            print(f"| {name} | {first}/{total} ({first / total:.3f}) | {five}/{total} ({five / total:.3f}) | "
                  f"{opener_first} of {with_opener} |")
        core.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
