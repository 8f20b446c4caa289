"""Fresh texts for the speed benches: a real chat mix from the public chat logs in
``shared/data`` (``bench.DATA_DIR``), instead of a few repeated sentences whose
query vectors come from a cache.

Sources, each a person's own lines (the bot's lines are left out):

- MemoryBank-CN (``zh/memorybank_cn_memory_bank.json``): a person's messages to
  an AI companion (``query``), zh — the product's own use;
- LCCC (``zh/cdialgpt_lccc_toy_valid200.json``): Weibo chit-chat, zh, with the
  spaces between CJK characters removed (shared/data/README.md);
- LoCoMo (``memory/locomo10.json``): two people's chat turns, en;
- MSC (``memory/msc_dialogue_session3_test_first60.jsonl``): chat turns, en.

``chat_mix(n)`` interleaves them round-robin (each source shuffled with a fixed
seed), drops repeats and empty lines, and returns ``n`` distinct texts, cycling
through no source twice: raises ``ValueError`` when the sources hold fewer than
``n`` distinct lines, ``FileNotFoundError`` when a source is missing.

``chat_dialogues(n)`` keeps the same sources as conversations, for a replay of
chats as the gateway sees them (the capture rate bench): each conversation one
person's lines with the other side's lines as the companion's (MemoryBank-CN's
``response``s are an AI companion's; in LCCC, LoCoMo and MSC the first speaker
is taken for the person, the second for the companion).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import bench

__all__ = ["chat_mix", "chat_dialogues", "Dialogue", "SOURCES"]

SOURCES = ("memorybank", "lccc", "locomo", "msc")

_CJK_GAP = re.compile(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])|(?<=[^\x00-\x7f]) (?=[\x00-\x7f])|(?<=[\x00-\x7f]) (?=[^\x00-\x7f])")


def _despace(text: str) -> str:
    """LCCC's character-tokenised text as written: no space beside a CJK character,
    the spaces inside Latin/digit runs kept."""
    return _CJK_GAP.sub("", text).strip()


def _memorybank(root: Path) -> list[str]:
    data = json.loads((root / "zh" / "memorybank_cn_memory_bank.json").read_text(encoding="utf-8"))
    return [turn["query"] for person in data.values() for day in person.get("history", {}).values()
            for turn in day if turn.get("query")]


def _lccc(root: Path) -> list[str]:
    data = json.loads((root / "zh" / "cdialgpt_lccc_toy_valid200.json").read_text(encoding="utf-8"))
    return [_despace(line) for dialogue in data["valid"] for line in dialogue]


def _locomo(root: Path) -> list[str]:
    data = json.loads((root / "memory" / "locomo10.json").read_text(encoding="utf-8"))
    out = []
    for sample in data:
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                out += [t["text"] for t in turns if t.get("text")]
    return out


def _msc(root: Path) -> list[str]:
    out = []
    with (root / "memory" / "msc_dialogue_session3_test_first60.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out += [t["text"] for t in json.loads(line)["dialog"] if t.get("text")]
    return out


def chat_mix(n: int, seed: int = 29, root: Path | None = None) -> list[str]:
    """``n`` distinct real chat lines, zh and en interleaved (module docstring)."""
    root = Path(root or bench.DATA_DIR)
    pools = []
    for i, read in enumerate((_memorybank, _lccc, _locomo, _msc)):
        lines = [t.strip() for t in read(root) if t and t.strip()]
        random.Random(seed + i).shuffle(lines)
        pools.append(lines)
    out: list[str] = []
    seen: set[str] = set()
    pos = [0] * len(pools)
    while len(out) < n:
        moved = False
        for i, pool in enumerate(pools):
            while pos[i] < len(pool):
                t = pool[pos[i]]
                pos[i] += 1
                if t not in seen:
                    seen.add(t)
                    out.append(t)
                    moved = True
                    break
            if len(out) == n:
                break
        if not moved:
            raise ValueError(f"the chat logs hold {len(out)} distinct lines, fewer than {n}")
    return out


@dataclass(frozen=True, slots=True)
class Dialogue:
    """One conversation of a source: ``lines`` in the order said, each ``(role,
    text)`` with role ``user`` (the person, whose lines are captured) or ``bot``
    (the other side, logged as the companion's)."""

    source: str
    lines: tuple[tuple[str, str], ...]

    @property
    def said(self) -> int:
        """The person's lines."""
        return sum(1 for role, _ in self.lines if role == "user")


def _two_sided(source: str, turns: list[tuple[str, str]]) -> Dialogue:
    """``turns`` as ``(speaker, text)``: the first speaker is the person."""
    first = turns[0][0] if turns else ""
    return Dialogue(source, tuple(("user" if who == first else "bot", text.strip()) for who, text in turns
                                  if text and text.strip()))


def _dialogues(root: Path) -> list[list[Dialogue]]:
    """Per source (SOURCES order), its conversations."""
    bank = json.loads((root / "zh" / "memorybank_cn_memory_bank.json").read_text(encoding="utf-8"))
    memorybank = [Dialogue("memorybank", tuple((role, t[key].strip()) for t in day
                                               for role, key in (("user", "query"), ("bot", "response"))
                                               if t.get(key) and t[key].strip()))
                  for person in bank.values() for day in person.get("history", {}).values()]
    lccc_data = json.loads((root / "zh" / "cdialgpt_lccc_toy_valid200.json").read_text(encoding="utf-8"))
    lccc = [_two_sided("lccc", [(str(k % 2), _despace(line)) for k, line in enumerate(d)]) for d in lccc_data["valid"]]
    locomo = []
    for sample in json.loads((root / "memory" / "locomo10.json").read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                locomo.append(_two_sided("locomo", [(t["speaker"], t.get("text") or "") for t in turns]))
    msc = []
    with (root / "memory" / "msc_dialogue_session3_test_first60.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                msc.append(_two_sided("msc", [(t["id"], t.get("text") or "") for t in json.loads(line)["dialog"]]))
    return [[d for d in ds if d.said] for ds in (memorybank, lccc, locomo, msc)]


def chat_dialogues(n: int, seed: int = 29, root: Path | None = None) -> list[Dialogue]:
    """Conversations of the public chat logs holding ``n`` of the person's lines in
    all (the last one cut short to fit), taken round-robin from the sources (each
    shuffled with a fixed seed), zh and en interleaved. Raises ``ValueError`` when
    the sources hold fewer, ``FileNotFoundError`` when a source is missing."""
    root = Path(root or bench.DATA_DIR)
    pools = _dialogues(root)
    for i, pool in enumerate(pools):
        random.Random(seed + i).shuffle(pool)
    out: list[Dialogue] = []
    left = n
    pos = [0] * len(pools)
    while left > 0:
        moved = False
        for i, pool in enumerate(pools):
            if left <= 0 or pos[i] >= len(pool):
                continue
            d = pool[pos[i]]
            pos[i] += 1
            moved = True
            if d.said > left:  # cut after the person's ``left``-th line
                seen, cut = 0, 0
                for cut, (role, _) in enumerate(d.lines, 1):
                    seen += role == "user"
                    if seen == left:
                        break
                d = Dialogue(d.source, d.lines[:cut])
            out.append(d)
            left -= d.said
        if not moved:
            raise ValueError(f"the chat logs hold {n - left} of the person's lines, fewer than {n}")
    return out
