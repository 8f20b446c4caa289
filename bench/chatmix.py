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
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import bench

__all__ = ["chat_mix", "SOURCES"]

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
