"""Recall quality on public data with evidence labels: the real ``MemoryCore.recall``
against LoCoMo, DuLeMon and LongMemEval, with the BM25-only and vector-only
channels of the same run, and the real turn (``Pipeline.handle``) that asks it
(``huiyi eval recall``, ``python -m bench quality``).

One loader per dataset (recipes in ``../shared/data/README.md``), each giving a
``Suite``: worlds (one namespace each) of ``Doc`` s and ``Query`` s with gold doc keys.

- **LoCoMo** (``memory/locomo10.json``): every turn is a doc (text plus
  `` <blip_caption>`` when the turn shared an image), said by its speaker at its
  session's date (plus one minute per turn). Queries: questions of categories
  1–4 with resolvable evidence, ``tail = [question]``, asked one day after the
  conversation's last session. Layouts: ``conversation`` (one namespace per
  conversation, both speakers) or ``speaker`` (one namespace per speaker, ``<conversation>.a`` /
  ``.b`` — the product's real layout; a question is routed to the speaker(s) it names, or to
  both when it names neither, and the namespaces' hits are merged by score; in turn mode
  that is one turn per namespace, merged by the scores of each turn's recall trace).
  Split: the first 4 conversations are ``dev``, the other 6 ``test``. Said before a
  question (turn mode): the namespace's speaker's (both, per conversation) last
  lines of the conversation's last session.
- **DuLeMon** (``zh/dulemon_samples.jsonl``): each ``user_said_persona`` fact,
  de-segmented, is a doc of that dialogue's user. Queries: each ``Bot:`` line
  labelled with a said U-fact, queried with the preceding ``Usr:`` line.
  Layouts: ``conversation`` (one namespace per dialogue) or ``pool`` (every
  dialogue's facts in one namespace; a same-text fact of another dialogue also
  counts). No dates in the data: every fact is said on 2026-01-01, asked a day
  later. Split: the first half of the dialogues is ``dev``. Said before (turn
  mode): the dialogue's ``Usr:`` lines before the query's.
- **LongMemEval** (``memory/longmemeval_oracle_subset68.json``): each question is
  its own world; every turn of its haystack sessions is a doc (``<role>: <text>``
  is not prefixed: the namespace is the one user), dated by its session; gold =
  the ``has_answer`` turns; abstention questions are skipped. Asked at
  ``question_date``. Split: the first half of the questions is ``dev``. Said
  before (turn mode): the user turns that end the last haystack session.

- **MemoryBank-CN** (``zh/memorybank_cn_memory_bank.json``): 15 people's chats
  with a companion over 10 days; each message of the person is a doc
  ``<date>:<exchange>`` (their own namespace: no speaker prefix), its context the
  companion's reply before it. Queries: the set's probing questions whose answer
  is in the person's own words, with evidence written by hand
  (``MEMORYBANK_LABELS``: 67 of 100), asked alone the day after the last chat.
  Split: the first 7 people are ``dev``.

Modes: ``raw`` stores each doc as one memory through ``MemoryCore.add`` (its text
``"<speaker>: <text>"`` when the dataset names a speaker, ``created_at`` = said-at,
``context`` the other side's turn it answered, as the gateway keeps the
companion's line a person's message answered: LoCoMo's other speaker,
LongMemEval's assistant turn before a user turn; DuLeMon's facts have none);
``capture`` sends each turn through the real capture path (``memory.capture.capture``,
the offline extractor), and a memory maps back to the turn it was learned from
(``source_message_id``); ``turn`` stores as ``capture`` does, then sends each
query's latest line (the question; DuLeMon's user line) as the person's private
message through the real turn (a ``gateway.pipeline.Pipeline`` the caller makes,
``MakeTurns``; no chat model) after the
person's own preceding lines (``Query.said_before``, at most ``SAID_BEFORE``, in
the chat's log a few minutes before it), in the world's own namespace (platform
``Suite.kind``, user id the world, the tenant's default ``recall_k``), and scores
the turn's ranking (its recall trace) and what it put into the prompt
(``TurnResult.recalled``): the hybrid only, with the pipeline's own recall
parameters, and nothing the turn writes reaches a later query (``evaluate_turns``). The channel rows and
``evaluate`` call ``MemoryCore.recall`` directly with the query's ``tail``.

Metrics per query over the top k (the Suite's gold keys): ``any@k`` = 1 if any
gold doc is retrieved, ``all@k`` = |gold ∩ top k| / |gold|, ``MRR`` = 1 / rank of
the first gold doc in the top ``max(ks)`` (0 when none); averaged per category
and overall; turn mode adds ``any@injected`` (1 if a gold doc is among what the
turn injected) and the memories injected per turn. Latency: milliseconds per recall at p50 / p95, the query embedded
beforehand (turn mode: the pipeline's recall stage, ``TurnResult.latency_ms``).

Embeddings of dataset texts are cached on disk (``CachedEmbedder``) so that
repeated runs only embed what changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

__all__ = [
    "Doc",
    "Query",
    "Suite",
    "EvalError",
    "CHANNELS",
    "DATASETS",
    "LAYOUTS",
    "evidence_ids",
    "desegment",
    "load_locomo",
    "load_dulemon",
    "load_longmemeval",
    "load_memorybank",
    "world_of",
    "load_suite",
    "split",
    "CachedEmbedder",
    "ingest",
    "evaluate",
    "RecallRun",
    "MODES",
    "INGEST_OF",
    "SAID_BEFORE",
    "MakeTurns",
    "Probe",
    "evaluate_turns",
    "metrics",
    "report_lines",
    "plot",
    "default_data_dir",
]

log = logging.getLogger(__name__)

CHANNELS: dict[str, tuple[str, ...]] = {"hybrid": ("bm25", "vector"), "bm25": ("bm25",), "vector": ("vector",)}
"""Channel configurations measured on every query (names as printed): the shipped
hybrid and each channel alone, in the same run over the same stores."""

DATASETS = ("locomo", "dulemon", "longmemeval", "memorybank")
LAYOUTS = ("conversation", "speaker", "pool")
LOCOMO_FILE = Path("memory") / "locomo10.json"
DULEMON_FILE = Path("zh") / "dulemon_samples.jsonl"
LONGMEMEVAL_FILE = Path("memory") / "longmemeval_oracle_subset68.json"
MEMORYBANK_FILE = Path("zh") / "memorybank_cn_memory_bank.json"
MEMORYBANK_LABELS = Path(__file__).resolve().parent / "data" / "memorybank_cn_evidence.jsonl"
"""Evidence for MemoryBank-CN's 100 probing questions, written by hand for this
project (the questions quoted from zhongwanjun/MemoryBank-SiliconFriend, MIT): the
person's lines (``<date>:<exchange>``) that hold the answer; ``answer_in``
``companion`` marks the 33 whose answer is only in the companion's reply (not
scored: capture keeps the person's words)."""
MEMORYBANK_DEV = 7
"""MemoryBank-CN people in the dev split (the first 7 of 15; the other 8 are held out)."""
COMPANION = "AI伴侣"
"""Who the MemoryBank-CN person talks to, as a memory's context names it."""
MEMORYBANK_TZ = ZoneInfo("Asia/Shanghai")
"""The zone MemoryBank-CN's days are the people's own in: its chats are dated by the day only,
said here in the evening, 20:00 of that day where the people live (China; the tenant's default
zone, ``memory.dates.DEFAULT_TZ``, so that "4月30号" names the day the chat was dated)."""
LOCOMO_DEV = 4
"""LoCoMo conversations in the development split (the rest are held out)."""
DULEMON_DAY = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
LOCOMO_CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
MODES = ("raw", "capture", "turn")
INGEST_OF = {"raw": "raw", "capture": "capture", "turn": "capture"}
"""The ingest each mode measures over: turn mode asks through the pipeline what capture stored."""
SAID_BEFORE = 3
"""How many of the person's own lines before a question turn mode logs in the chat:
the pipeline's recall reads the person's last ``RecallParams.tail`` (3) lines of the
chat's tail, the question among them, so the last two of these reach the query and
all of them the prompt (``TenantSettings.tail``, 8 lines)."""

MakeTurns = Callable[[Any, str, "int | None"], Any]
"""How turn mode gets its pipeline: ``make(core, tenant, recall_k)`` returns one
over ``core`` whose ``tenant`` has the default settings but ``recall_k`` (None:
the default), no chat model, with ``handle(tenant, InboundMessage, background_capture=True)`` and
``drain()`` (``gateway.cli.evaluate.turn_pipeline``: the gateway's real
``Pipeline``; the harness does not import the gateway, which imports it)."""


class EvalError(Exception):
    """A dataset is missing or malformed (the CLI prints it and exits 2)."""


def default_data_dir() -> Path:
    """``../shared/data`` beside the repository root."""
    return Path(__file__).resolve().parents[2] / "shared" / "data"


# -- suites -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    """One stored item: ``key`` is its gold id (LoCoMo dia_id, DuLeMon ``d03:U2``,
    LongMemEval ``<session id>:<turn>``); ``speaker`` the person who said it ("" when
    the namespace is that one person); ``said_at`` when (UTC); ``context`` the line
    it answered as the product keeps it (``Memory.context``: the other side's turn
    just before it in its session, ``"<name>: <text>"``; "" when none)."""

    key: str
    text: str
    speaker: str = ""
    said_at: datetime = DULEMON_DAY
    context: str = ""

    @property
    def memory_text(self) -> str:
        """The text a raw-mode memory holds: ``"<speaker>: <text>"`` or the text."""
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


@dataclass(frozen=True, slots=True)
class Query:
    """One recall query: the worlds it searches (one, or several merged by score),
    the tail (oldest first), gold doc keys, a group label (LoCoMo category,
    LongMemEval question type), the split unit it belongs to and when it is asked.
    ``said_before``: for each of ``worlds``, the person's own lines just before the
    question as the data has them (oldest first, at most ``SAID_BEFORE``; turn mode
    logs them in the person's chat before it sends ``tail[-1]``), () when none."""

    worlds: tuple[str, ...]
    tail: tuple[str, ...]
    gold: frozenset[str]
    group: str = ""
    unit: str = ""
    asked_at: datetime = DULEMON_DAY + timedelta(days=1)
    said_before: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Suite:
    """Worlds (one namespace each, ``Namespace(tenant, f"{kind}:{world}")``), queries,
    and the split units in order with how many of them form the dev split."""

    name: str
    tenant: str
    kind: str
    worlds: dict[str, tuple[Doc, ...]]
    queries: tuple[Query, ...]
    units: tuple[str, ...] = ()
    dev_units: int = 0

    def namespace(self, world: str):
        from memory.types import Namespace

        return Namespace(self.tenant, f"{self.kind}:{world}")

    @property
    def n_docs(self) -> int:
        return sum(len(d) for d in self.worlds.values())


_EVIDENCE_SPLIT = re.compile(r"[;\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]")


def evidence_ids(raw: Sequence[str]) -> list[str]:
    """LoCoMo evidence strings → ``D<session>:<turn>`` ids: several ids in one string
    are split, ``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``; garbage is dropped."""
    out: list[str] = []
    for item in raw:
        for part in _EVIDENCE_SPLIT.split(str(item).strip()):
            m = _EVIDENCE_ID.fullmatch(part)
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror or exc}") from None


def _read_json(path: Path):
    """The JSON document at ``path``; EvalError when it cannot be read or is not JSON."""
    try:
        return json.loads(_read(path))
    except ValueError as exc:
        raise EvalError(f"{path} is not JSON: {exc}") from None


def _names(person: str, question: str) -> bool:
    """Whether ``question`` names ``person`` (a whole word in Latin script, a substring in CJK)."""
    if any("\u4e00" <= c <= "\u9fff" for c in person):
        return person in question
    return re.search(rf"\b{re.escape(person)}\b", question) is not None


def _locomo_date(value: str) -> datetime:
    return datetime.strptime(value, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def load_locomo(path: Path, conversations: int | None = None, max_turns: int | None = None,
                layout: str = "conversation") -> Suite:
    """LoCoMo as a Suite (see the module docstring): the first ``conversations``
    samples (None: all), each cut to its first ``max_turns`` turns in (session,
    turn) order. A question is kept when it is of category 1–4 and its evidence,
    after the quirk fixes, is non-empty and lies wholly in the kept turns.
    ``layout``: ``conversation`` or ``speaker``. Raises EvalError."""
    if layout not in ("conversation", "speaker"):
        raise EvalError(f"LoCoMo has no layout {layout!r} (conversation or speaker)")
    samples = _read_json(path)
    if conversations is not None:
        samples = samples[:conversations]
    worlds: dict[str, tuple[Doc, ...]] = {}
    queries: list[Query] = []
    units: list[str] = []
    for sample in samples:
        conv = sample["conversation"]
        sessions = sorted((int(k.split("_")[1]), v) for k, v in conv.items()
                          if re.fullmatch(r"session_\d+", k) and isinstance(v, list))
        docs: list[Doc] = []
        last = DULEMON_DAY
        for n, turns in sessions:
            start = _locomo_date(conv[f"session_{n}_date_time"])
            said = ""
            for i, turn in enumerate(turns):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text = f"{text} {turn['blip_caption']}"
                last = start + timedelta(minutes=i)
                # the other speaker's turn before it is what it answered: to this speaker's
                # namespace the other one is who a companion is to a person
                context = said if i and turns[i - 1]["speaker"] != turn["speaker"] else ""
                docs.append(Doc(turn["dia_id"], text, turn["speaker"], last, context))
                said = f"{turn['speaker']}: {text}"
        all_ids = {d.key for d in docs}
        if max_turns is not None:
            docs = docs[:max_turns]
        kept = {d.key for d in docs}
        conv_id = sample["sample_id"]
        units.append(conv_id)
        speakers = [conv["speaker_a"], conv["speaker_b"]]
        person = {conv["speaker_a"]: f"{conv_id}.a", conv["speaker_b"]: f"{conv_id}.b"}
        if layout == "conversation":
            worlds[conv_id] = tuple(docs)
        else:
            for spk in speakers:
                worlds[person[spk]] = tuple(d for d in docs if d.speaker == spk)
        asked = last + timedelta(days=1)
        # what a person said last before asking: the end of the conversation's last session
        final = [d for d in docs if d.key.split(":")[0] == docs[-1].key.split(":")[0]] if docs else []
        said_last = {conv_id: tuple(d.text for d in final)[-SAID_BEFORE:]} if layout == "conversation" else \
            {person[s]: tuple(d.text for d in final if d.speaker == s)[-SAID_BEFORE:] for s in speakers}
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            gold = [e for e in evidence_ids(qa.get("evidence") or []) if e in all_ids]
            if not gold or not set(gold) <= kept:
                continue
            if layout == "conversation":
                qworlds: tuple[str, ...] = (conv_id,)
            else:
                named = [s for s in speakers if _names(s, qa["question"])]
                qworlds = tuple(person[s] for s in (named or speakers))
            queries.append(Query(qworlds, (qa["question"],), frozenset(gold), str(qa["category"]), conv_id, asked,
                                 tuple(said_last[w] for w in qworlds)))
    return Suite(f"locomo-{layout}", "locomo", "conv", worlds, tuple(queries), tuple(units), LOCOMO_DEV)


def load_memorybank(root: Path, labels: Path = MEMORYBANK_LABELS, people: int | None = None):
    """MemoryBank-CN (``zh/memorybank_cn_memory_bank.json``) as a Suite (tenant
    ``memorybank``, kind ``mb``): one world per person (``world_of``: ``p00``… in the
    file's order), each of their messages a doc keyed ``<date>:<exchange>``, said
    that day from 20:00 in Asia/Shanghai (``MEMORYBANK_TZ``) two minutes apart, answering the companion's reply
    before it that day (``context``, ``"AI伴侣: …"``); one query per probing question
    whose answer is in the person's own words (``labels``, JSON lines, ``#``
    comments), asked alone on 2023-05-07 20:00 Shanghai. Units are the people, the first
    ``MEMORYBANK_DEV`` dev. ``people``: only the first that many. Raises EvalError
    when a file cannot be read."""
    path = Path(root) / MEMORYBANK_FILE
    try:
        bank = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalError(f"cannot read MemoryBank-CN at {path}: {exc}") from None
    worlds: dict = {}
    ids = world_of(bank)
    for name, person in bank.items():
        docs = []
        for date_s, pairs in sorted(person["history"].items()):
            day = datetime.fromisoformat(date_s).replace(hour=20, tzinfo=MEMORYBANK_TZ).astimezone(timezone.utc)
            for i, pair in enumerate(pairs):
                context = f"{COMPANION}: {pairs[i - 1]['response']}" if i else ""
                docs.append(Doc(f"{date_s}:{i}", pair["query"].strip(), "", day + timedelta(minutes=2 * i), context))
        worlds[ids[name]] = tuple(docs)
    names = list(worlds)[:people] if people else list(worlds)
    asked = datetime(2023, 5, 7, 20, tzinfo=MEMORYBANK_TZ).astimezone(timezone.utc)
    try:
        rows = [json.loads(x) for x in _read(labels).splitlines() if x.strip() and not x.lstrip().startswith("#")]
    except ValueError as exc:
        raise EvalError(f"{labels} is not JSON lines: {exc}") from None
    queries = tuple(Query((ids[row["user"]],), (row["question"],), frozenset(row["gold"]), "probing",
                          ids[row["user"]], asked)
                    for row in rows if row["gold"] and ids.get(row["user"]) in names)
    return Suite("memorybank-cn", "memorybank", "mb", {n: worlds[n] for n in names}, queries, tuple(names),
                 min(MEMORYBANK_DEV, len(names)))


def world_of(bank: dict) -> dict[str, str]:
    """MemoryBank-CN person name → world id (``p00``, ``p01``… in the file's order): a
    namespace's subject is ASCII."""
    return {name: f"p{i:02d}" for i, name in enumerate(bank)}


def desegment(text: str) -> str:
    """Undo DuLeMon's word segmentation: drop the spaces between words, except
    between two Latin/digit runs (``我 在 IT 部门`` → ``我在IT部门``,
    ``I love NBA`` stays)."""
    parts = text.split()
    if not parts:
        return ""
    out = parts[0]
    for p in parts[1:]:
        if out[-1].isascii() and out[-1] not in " " and p[0].isascii() and p[0].isalnum():
            out += " " + p
        else:
            out += p
    return out


def _utterance(line: str) -> tuple[str, str, str]:
    """``"Usr: 我 喜欢 …\\tU3"`` → (speaker, de-segmented text, label or "")."""
    label = ""
    if "\t" in line:
        line, label = line.rsplit("\t", 1)
        label = label.strip()
    speaker, _, text = line.partition(":")
    return speaker.strip(), desegment(text.strip()), label


def load_dulemon(path: Path, dialogues: int | None = None, layout: str = "conversation", tail: int = 1) -> Suite:
    """DuLeMon as a Suite (see the module docstring). Per dialogue ``dNN`` (0-based
    line number): its said U-facts as docs ``dNN:U<n>``; one query per ``Bot:``
    line labelled with a said U-fact, whose tail is the ``tail`` lines before it.
    ``layout``: ``conversation`` (per dialogue) or ``pool`` (one namespace ``all``).
    Raises EvalError."""
    if layout not in ("conversation", "pool"):
        raise EvalError(f"DuLeMon has no layout {layout!r} (conversation or pool)")
    try:
        rows = [json.loads(line) for line in _read(path).splitlines() if line.strip()]
    except ValueError as exc:
        raise EvalError(f"{path} is not JSON lines: {exc}") from None
    if dialogues is not None:
        rows = rows[:dialogues]
    worlds: dict[str, tuple[Doc, ...]] = {}
    queries: list[Query] = []
    for i, row in enumerate(rows):
        world = f"d{i:02d}"
        facts: dict[str, str] = {}
        for p in row["user_said_persona"]:
            label, _, text = p.partition(":")
            facts[label.strip()] = desegment(text.strip())
        worlds[world] = tuple(Doc(f"{world}:{label}", text) for label, text in facts.items())
        lines = [_utterance(c) for c in row["conversation"]]
        for j, (speaker, _, label) in enumerate(lines):
            if speaker != "Bot" or label not in facts or j == 0 or lines[j - 1][0] != "Usr":
                continue
            q_tail = tuple(text for _, text, _ in lines[max(0, j - tail):j])
            before = tuple(text for who, text, _ in lines[:j - 1] if who == "Usr")[-SAID_BEFORE:]
            queries.append(Query((world,), q_tail, frozenset({f"{world}:{label}"}), "dulemon", world,
                                 said_before=(before,)))
    units = tuple(worlds)
    if layout == "pool":
        docs = tuple(d for ds in worlds.values() for d in ds)
        by_text: dict[str, set[str]] = {}
        for d in docs:
            by_text.setdefault(d.text, set()).add(d.key)
        text_of = {d.key: d.text for d in docs}
        queries = [replace(q, worlds=("all",), gold=frozenset(k for g in q.gold for k in by_text[text_of[g]]))
                   for q in queries]
        worlds = {"all": docs}
    return Suite(f"dulemon-{layout}", "dulemon", "dlg", worlds, tuple(queries), units, len(units) // 2)


def _lme_date(value: str) -> datetime:
    return datetime.strptime(value.split(" (")[0] + " " + value.rsplit(" ", 1)[1], "%Y/%m/%d %H:%M").replace(
        tzinfo=timezone.utc)


def load_longmemeval(path: Path, questions: int | None = None) -> Suite:
    """LongMemEval (oracle subset) as a Suite (see the module docstring): one world per
    question; docs ``<session id>:<turn>``; gold the ``has_answer`` turns. Raises EvalError."""
    items = _read_json(path)
    if questions is not None:
        items = items[:questions]
    worlds: dict[str, tuple[Doc, ...]] = {}
    queries: list[Query] = []
    for item in items:
        qid = _UNSAFE.sub("_", str(item["question_id"]))
        docs: list[Doc] = []
        gold: set[str] = set()
        sessions = sorted(zip(item["haystack_dates"], item["haystack_session_ids"], item["haystack_sessions"]),
                          key=lambda s: _lme_date(s[0]))
        for date_s, sid, turns in sessions:
            start = _lme_date(date_s)
            for j, turn in enumerate(turns):
                key = f"{sid}:{j}"
                # a user turn answers the assistant's turn before it (the product's
                # Memory.context: only the companion's line is kept as context)
                before = turns[j - 1] if j else None
                context = (f"assistant: {before['content']}" if turn.get("role") == "user" and before is not None
                           and before.get("role") == "assistant" else "")
                docs.append(Doc(key, str(turn["content"]), "", start + timedelta(minutes=j), context))
                if turn.get("has_answer"):
                    gold.add(key)
        worlds[qid] = tuple(docs)
        last = sessions[-1][2] if sessions else []
        before = tuple(str(t["content"]) for t in last if t.get("role") == "user")[-SAID_BEFORE:]
        if gold and not str(item["question_id"]).endswith("_abs"):
            queries.append(Query((qid,), (item["question"],), frozenset(gold), item["question_type"], qid,
                                 _lme_date(item["question_date"]), (before,)))
    units = tuple(worlds)
    return Suite("longmemeval", "lme", "q", worlds, tuple(queries), units, len(units) // 2)


def load_suite(dataset: str, data_dir: Path, layout: str = "conversation", context: int = 1) -> Suite:
    """The Suite of ``dataset`` (one of DATASETS) under ``data_dir``. ``context``: how
    many dialogue lines before a DuLeMon query form its tail (1: the user's line
    alone; LoCoMo and LongMemEval questions stand alone). Raises EvalError when the
    data is absent or the layout does not apply."""
    data_dir = Path(data_dir)
    if dataset == "locomo":
        return load_locomo(data_dir / LOCOMO_FILE, layout=layout)
    if dataset == "dulemon":
        return load_dulemon(data_dir / DULEMON_FILE, layout=layout, tail=context)
    if dataset == "longmemeval":
        if layout != "conversation":
            raise EvalError("LongMemEval has one layout: conversation (one namespace per question)")
        return load_longmemeval(data_dir / LONGMEMEVAL_FILE)
    if dataset == "memorybank":
        if layout != "conversation":
            raise EvalError("MemoryBank-CN has one layout: conversation (one namespace per person)")
        return load_memorybank(data_dir)
    raise EvalError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")


def split(suite: Suite, which: str) -> Suite:
    """The ``dev`` (first ``dev_units`` units), ``test`` (the rest) or ``all`` part of
    ``suite``: its queries of those units and only the worlds they search."""
    if which == "all":
        return suite
    if which not in ("dev", "test"):
        raise EvalError(f"unknown split {which!r} (dev, test or all)")
    dev = set(suite.units[: suite.dev_units])
    keep = [q for q in suite.queries if (q.unit in dev) == (which == "dev")]
    worlds = {w for q in keep for w in q.worlds}
    return replace(suite, name=f"{suite.name}-{which}", queries=tuple(keep),
                   worlds={w: d for w, d in suite.worlds.items() if w in worlds})


# -- embeddings cache ------------------------------------------------------------


class CachedEmbedder:
    """An Embedder that keeps every vector it made in a SQLite file keyed by (model,
    query/document, SHA-256 of the text): repeated evaluation runs embed only new
    texts. Same ``name``, ``dim``, ``symmetric``, (matched) ``min_similarity``,
    ``fusion_weight`` and ``document_from_query`` as the wrapped embedder."""

    def __init__(self, inner, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        if getattr(inner, "symmetric", False):
            self.symmetric = True
        self.min_similarity = float(getattr(inner, "min_similarity", 0.0))
        if getattr(inner, "matched_min_similarity", None) is not None:
            self.matched_min_similarity = float(inner.matched_min_similarity)
        if getattr(inner, "fusion_weight", None) is not None:
            self.fusion_weight = float(inner.fusion_weight)
        if getattr(inner, "document_from_query", None) is not None:  # a line stored as said (SearchIndex)
            self.document_from_query = inner.document_from_query
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (k TEXT PRIMARY KEY, v BLOB)")
        self._lock = threading.Lock()

    def _key(self, kind: str, text: str) -> str:
        # a side computed at another precision than the reference is another vector
        # (e5-small's query_precision / document_precision, memory.embed.E5_PRECISIONS)
        prec = getattr(self.inner, "query_precision" if kind == "q" else "document_precision", "reference")
        tag = "" if prec == "reference" else f"@{prec}"
        return f"{self.name}{tag}|{kind}|" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _get(self, keys: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                q = f"SELECT k, v FROM vec WHERE k IN ({','.join('?' * len(chunk))})"
                for k, v in self._db.execute(q, chunk):
                    out[k] = np.frombuffer(v, dtype=np.float32)
        return out

    def _put(self, pairs: list[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?)",
                                 [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in pairs])
            self._db.commit()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        keys = [self._key("d", t) for t in texts]
        have = self._get(keys)
        missing = [i for i, k in enumerate(keys) if k not in have]
        if missing:
            fresh = self.inner.embed_documents([texts[i] for i in missing])
            self._put([(keys[i], fresh[row]) for row, i in enumerate(missing)])
            for row, i in enumerate(missing):
                have[keys[i]] = np.asarray(fresh[row], dtype=np.float32)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = have[k]
        return out

    def prime_queries(self, texts: Sequence[str], batch: int = 256) -> int:
        """Embed the query ``texts`` not yet cached in batches of ``batch`` and cache
        them, so that one-at-a-time ``embed_query`` calls (a replay of a whole
        conversation) hit the cache. Only for a symmetric embedder (a query is
        embedded as a document); returns how many were embedded (0 otherwise)."""
        if not getattr(self, "symmetric", False):
            return 0
        texts = list(dict.fromkeys(texts))
        keys = [self._key("q", t) for t in texts]
        have = self._get(keys)
        missing = [(k, t) for k, t in zip(keys, texts) if k not in have]
        for start in range(0, len(missing), batch):
            chunk = missing[start:start + batch]
            vecs = self.inner.embed_documents([t for _, t in chunk])
            self._put([(k, vecs[row]) for row, (k, _) in enumerate(chunk)])
        return len(missing)

    def embed_query(self, text: str) -> np.ndarray:
        key = self._key("q", text)
        have = self._get([key])
        if key in have:
            return have[key]
        v = np.asarray(self.inner.embed_query(text), dtype=np.float32)
        self._put([(key, v)])
        return v


# -- ingest and evaluation ----------------------------------------------------------


def ingest(core, suite: Suite, mode: str = "raw") -> dict[str, str]:
    """Store ``suite``'s docs in ``core`` and return memory id → doc key.

    ``raw``: one ``MemoryCore.add`` per doc (text ``Doc.memory_text``, key
    ``eval:<doc key>``, ``created_at`` and ``said_at`` the doc's date);
    ``capture``: ``memory.capture.capture`` of each doc's text (the speaker says
    it, offline extractor), memories mapped back by ``source_message_id``; each
    text is first embedded as the turn's query, as ``Pipeline.handle`` does before
    its capture, so a line stored as it was said takes that vector as the turn's
    capture does (``SearchIndex.reuse_query_vectors``). Index
    writes are batched (``MemoryCore.batch``) and the index optimised at the end.
    Raises EvalError for an unknown mode.
    """
    from memory.capture import capture

    if mode not in ("raw", "capture"):
        raise EvalError(f"unknown ingest mode {mode!r} (raw or capture; turn mode asks over capture's)")
    key_of: dict[str, str] = {}
    with core.batch():
        for world, docs in suite.worlds.items():
            ns = suite.namespace(world)
            for d in docs:
                if mode == "raw":
                    # an id derived from the doc, not a random one: BM25 and cosine ties
                    # break by id, and random ids made two runs of one setting differ
                    mem = replace(core.new(ns, d.memory_text, key=f"eval:{d.key}", source_message_id=d.key,
                                           created_at=d.said_at, context=d.context),
                                  id=hashlib.sha256(f"{world}|{d.key}".encode()).hexdigest()[:12])
                    res = core.add(ns, mem, said_at=d.said_at)
                    results = [res]
                else:
                    if d.text.strip():
                        core.index.embed_tail([d.text])
                    results = capture(core, ns, d.text, chat=None, said_at=d.said_at, message_id=d.key,
                                      context=d.context)
                for r in results:
                    if r.memory is not None and r.memory.id not in key_of:
                        key_of[r.memory.id] = r.memory.source_message_id or d.key
    core.maintain(limit=1_000_000)
    core.index.optimize()
    return key_of


@dataclass
class RecallRun:
    """One configuration's results, per query in suite order: retrieved doc keys
    (best first, distinct) and seconds per recall; in turn mode also each query's
    ``TurnResult`` s (one per world it was asked in) and ``injected``: the doc keys
    of the memories its turns put into the prompt (``TurnResult.recalled``, distinct,
    in no particular order; empty lists when the mode has no turn)."""

    retrieved: list[list[str]] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    turns: list[tuple] = field(default_factory=list)
    injected: list[list[str]] = field(default_factory=list)

    @property
    def has_turns(self) -> bool:
        """Whether the run went through the real turn (so ``injected`` means something)."""
        return bool(self.turns)

    def injected_per_turn(self, idx: Sequence[int] | None = None) -> float:
        """Mean number of memories a turn put into the prompt over the queries ``idx``
        (None: all); a query asked in several worlds counts each world's turn. nan
        without turns."""
        wanted = None if idx is None else set(idx)
        turns = [t for i, ts in enumerate(self.turns) if wanted is None or i in wanted for t in ts]
        return sum(len(t.recalled) for t in turns) / len(turns) if turns else float("nan")


def evaluate(core, suite: Suite, key_of: dict[str, str], *, k: int = 20, as_of: str = "end",
             channels: dict[str, tuple[str, ...]] = CHANNELS, params=None) -> dict[str, RecallRun]:
    """Run every query of ``suite`` through ``core.recall`` once per channel
    configuration (alternating per query, so they see the same cache state).
    ``as_of``: ``end`` recalls at the query's ``asked_at``, ``now`` at the wall
    clock. ``params``: the base RecallParams (default: the shipped ones) whose
    ``k`` and ``channels`` are replaced; a single-channel configuration also runs
    at channel weight 1 (the weights only matter against the rescoring there, and
    a row of "the vector channel alone" must not change with a ``vector_weight``
    sweep). A query over several worlds merges their
    hits by score."""
    from memory.recall import RecallParams

    base = params or RecallParams()
    runs = {name: RecallRun() for name in channels}
    for q in suite.queries:
        now = q.asked_at if as_of == "end" else None
        # the query's embedding is made once, untimed: every configuration then pays
        # the same (cached) price and the latencies compare search, not who went first
        core.index.embed_tail([line for line in q.tail if line.strip()][-base.tail:])
        for name, chans in channels.items():
            p = replace(base, k=k, candidates=max(base.candidates, k), channels=chans)
            if len(chans) == 1:  # a channel alone at its nominal weight: its row must not move with a weight sweep
                p = replace(p, bm25_weight=1.0, vector_weight=1.0)
            t0 = time.perf_counter()
            hits = []
            for w in q.worlds:
                hits += core.recall(suite.namespace(w), list(q.tail), params=p, now=now)
            dt = time.perf_counter() - t0
            if len(q.worlds) > 1:
                hits.sort(key=lambda h: -h.score)
            keys: list[str] = []
            for h in hits:
                key = key_of.get(h.memory.id, h.memory.source_message_id or "?")
                if key not in keys:
                    keys.append(key)
            runs[name].retrieved.append(keys[:k])
            runs[name].latency_s.append(dt / max(1, len(q.worlds)))
    return runs


class Probe:
    """The core as an evaluated question's turn reaches it: the real one in every
    verb but ``mark_recalled`` and ``note_recalled`` (the turn's held marks), which
    record nothing, and ``recall``, whose
    ``RecallParams`` get ``override`` (field name → value, e.g. ``{"vector_floor":
    0.86}``: how a bench varies a knob of the turn's recall decision; empty: the
    pipeline's own). A turn's bookkeeping gives the memories it recalled an ACT-R
    access (at the wall clock) and a co-recall link; a question of the eval is a
    probe, and those writes would move the scores of the questions after it.
    Raises TypeError at the first recall when ``override`` names no field."""

    def __init__(self, core, override: dict[str, Any] | None = None) -> None:
        self._core = core
        self._override = dict(override or {})

    def __getattr__(self, name: str):
        return getattr(self._core, name)

    def mark_recalled(self, ns, ids, at=None) -> None:
        return None

    def note_recalled(self, ns, ids, at=None) -> None:
        return None

    def recall(self, ns, tail, *args, params=None, **kwargs):
        if self._override:
            from memory.recall import RecallParams

            params = replace(params or RecallParams(), **self._override)
        return self._core.recall(ns, tail, *args, params=params, **kwargs)



def evaluate_turns(core, suite: Suite, key_of: dict[str, str], *, turns: MakeTurns, k: int = 20,
                   as_of: str = "end", recall_k: int | None = None,
                   override: dict[str, Any] | None = None) -> dict[str, RecallRun]:
    """Ask every query of ``suite`` as a person's private message through the real
    turn (the pipeline ``turns`` makes, no chat model: ``reply`` is None)
    over the memories in ``core`` (those of ``ingest(core, suite, "capture")``);
    returns ``{"hybrid": RecallRun}`` — the pipeline cannot be told a channel, so
    the shipped hybrid is the only configuration. Two things are scored per query:
    the turn's ranking, ``retrieved`` (its recall trace, ``Store.last_recall``, what
    ``/memory why`` reads: the first ``k`` of up to ``memory.explain.TRACE_DEPTH``
    (40) ranked memories, the pipeline recalling that deep whatever ``recall_k``),
    and what it put into the prompt, ``injected`` (``TurnResult.recalled``); memory
    ids → doc keys through ``key_of``; with the pipeline's own recall stage time
    (``latency_ms["recall"]``, its query embedded beforehand, untimed, as in
    ``evaluate``). ``recall_k``: the tenant's ``recall_k`` (None: the shipped
    default); ``override``: RecallParams fields the turn's recall gets (``Probe``),
    None for the pipeline's own.

    The sender is the world: platform ``suite.kind``, user id the world, so the
    pipeline's identity resolution (``memory.identity.resolve``) lands in
    ``suite.namespace(world)``, and the chat is the person's private chat. Before
    each message the query's ``said_before`` lines are appended to that chat's log
    as the person's (``Store.append_chat`` with no capture: they were captured at
    ingest), one minute apart, the last a minute before the message. The message
    is ``tail[-1]`` (the question; DuLeMon's user line), sent at ``asked_at``
    (``as_of`` ``end``; the wall clock for ``now``) plus the query's index in
    microseconds — one sender's same text at the same platform time is a re-push
    to the pipeline, and LoCoMo repeats some questions — with message ids and a
    bot id of this call's own, so that a second call over the same store is no
    re-delivery of the first. The tenant (``suite.tenant``, defaults but
    ``recall_k = k``) is the one ``turns`` configures.

    Nothing a question's turn writes reaches a later query: it runs with
    ``background_capture``, and before the loop runs anything else the person's
    chat lines are redacted with the capture still due on the message
    (``Store.redact_speaker``: the question is never captured, and the next query
    starts from an empty chat); its recall bookkeeping records no access or link
    (``Probe``); EvalError if it captured anything all the same, or landed
    elsewhere. A query routed to several worlds (LoCoMo's speaker layout, a
    question naming neither or both) is one turn per world, and their recalled
    memories are merged by the score each turn's recall trace gives them
    (``Store.last_recall``, what ``/memory why`` reads), as ``evaluate`` merges hits
    by score."""
    import asyncio

    return asyncio.run(_ask_turns(core, suite, key_of, turns, k, as_of, recall_k, override))


async def _ask_turns(core, suite: Suite, key_of: dict[str, str], turns: MakeTurns, k: int, as_of: str,
                     recall_k: int | None, override: dict[str, Any] | None) -> dict[str, RecallRun]:
    """``evaluate_turns`` on the running loop."""
    from bridges.contract import InboundMessage
    from memory.recall import RecallParams
    from memory.store import ChatLine, utcnow
    from memory.types import ChatKind, ChatRef

    pipeline = turns(Probe(core, override), suite.tenant, recall_k)
    query_lines = RecallParams().tail
    call = uuid.uuid4().hex[:8]
    run = RecallRun()
    for i, q in enumerate(suite.queries):
        at = (q.asked_at if as_of == "end" else utcnow()) + timedelta(microseconds=i)
        scored: list[tuple[float, str]] = []
        put: list[str] = []
        results, latency = [], 0.0
        for w, world in enumerate(q.worlds):
            ns, chat = suite.namespace(world), ChatRef(suite.kind, ChatKind.PRIVATE, world)
            before = q.said_before[w] if w < len(q.said_before) else ()
            for j, line in enumerate(before):
                core.store.append_chat(suite.tenant, chat, ChatLine("user", world, line,
                                                                    at - timedelta(minutes=len(before) - j),
                                                                    f"{call}.q{i}.{j}"))
            core.index.embed_tail([x for x in (*before, q.tail[-1]) if x.strip()][-query_lines:])
            res = await pipeline.handle(suite.tenant, InboundMessage(
                platform=suite.kind, message_id=f"{call}.q{i}", sender_id=world, chat_kind=ChatKind.PRIVATE,
                chat_id=world, text=q.tail[-1], timestamp=at, bot_id=f"eval-{call}"), background_capture=True)
            # nothing has run on the loop since the turn queued its after-work: the capture is still due
            core.store.redact_speaker(ns)
            await pipeline.drain()
            if res.namespace != str(ns) or res.duplicate or res.captured:
                raise EvalError(f"query {i} in {ns}: the turn landed in {res.namespace}, "
                                f"duplicate={res.duplicate}, captured {res.captured}")
            results.append(res)
            latency += res.latency_ms.get("recall", float("nan")) / 1000
            trace = core.store.last_recall(ns)
            scored += [(e.score, e.memory_id) for e in trace.entries] if trace is not None else []
            put += res.recalled
        if len(q.worlds) > 1:
            scored.sort(key=lambda h: -h[0])
        keys: list[str] = []
        for _, mid in scored:
            key = key_of.get(mid, "?")
            if key not in keys:
                keys.append(key)
        run.retrieved.append(keys[:k])
        run.injected.append(list(dict.fromkeys(key_of.get(mid, "?") for mid in put)))
        run.latency_s.append(latency / max(1, len(q.worlds)))
        run.turns.append(tuple(results))
    await pipeline.drain()
    return {"hybrid": run}


def metrics(suite: Suite, run: RecallRun, ks: Sequence[int], group: str | None = None) -> dict[str, float]:
    """``{"n", "any@k", "all@k" for each k, "mrr"}`` over the queries of ``group``
    (None: all). MRR over the whole retrieved list (at most max(ks) long). A run
    through the real turn adds ``any@injected`` (1 when a gold doc is among what the
    query's turns put into the prompt) and ``injected`` (memories per turn)."""
    idx = [i for i, q in enumerate(suite.queries) if group is None or q.group == group]
    out: dict[str, float] = {"n": float(len(idx))}
    if not idx:
        return out
    for k in ks:
        out[f"any@{k}"] = sum(bool(suite.queries[i].gold & set(run.retrieved[i][:k])) for i in idx) / len(idx)
        out[f"all@{k}"] = sum(len(suite.queries[i].gold & set(run.retrieved[i][:k])) / len(suite.queries[i].gold)
                              for i in idx) / len(idx)
    rr = []
    for i in idx:
        ranks = [r for r, key in enumerate(run.retrieved[i], start=1) if key in suite.queries[i].gold]
        rr.append(1.0 / ranks[0] if ranks else 0.0)
    out["mrr"] = sum(rr) / len(idx)
    if run.has_turns:
        out["any@injected"] = sum(bool(suite.queries[i].gold & set(run.injected[i])) for i in idx) / len(idx)
        out["injected"] = run.injected_per_turn(idx)
    return out


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


def report_lines(suite: Suite, runs: dict[str, RecallRun], ks: Sequence[int], title: str) -> list[str]:
    """Plain-text tables: overall any@k/all@k/MRR and recall latency per
    configuration, then the same per category (group). When a run went through
    the real turn, two more columns: ``any@inj`` (the evidence among what the turn
    put into the prompt) and ``inj`` (memories per turn); "-" on the other rows."""
    any_h = [f"any@{k}" for k in ks]
    all_h = [f"all@{k}" for k in ks]
    turned = any(r.has_turns for r in runs.values())
    inj_h = ["any@injected", "injected"] if turned else []
    width = max([8, *(len(name) + 1 for name in runs)])  # "capture/vector" when modes share a table
    head = f"{'system':<{width}}{'n':>6}" + "".join(f"{h:>9}" for h in any_h + all_h) + \
        f"{'MRR':>8}{'p50ms':>8}{'p95ms':>8}" + (f"{'any@inj':>9}{'inj':>6}" if turned else "")
    out = [title, head]
    for name, run in runs.items():
        m = metrics(suite, run, ks)
        vals = "".join(f"{m.get(h, float('nan')):>9.3f}" for h in any_h + all_h)
        inj = "".join(f"{m[h]:>{w}.{d}f}" if h in m else f"{'-':>{w}}" for h, w, d in zip(inj_h, (9, 6), (3, 2)))
        out.append(f"{name:<{width}}{int(m['n']):>6}{vals}{m.get('mrr', float('nan')):>8.3f}"
                   f"{_percentile(run.latency_s, 50) * 1000:>8.1f}{_percentile(run.latency_s, 95) * 1000:>8.1f}{inj}")
    groups = sorted({q.group for q in suite.queries})
    if len(groups) > 1:
        out.append("")
        out.append(f"{'category':<28}{'system':<{width}}{'n':>6}" + "".join(f"{h:>9}" for h in any_h + all_h)
                   + f"{'MRR':>8}" + (f"{'any@inj':>9}{'inj':>6}" if turned else ""))
        for g in groups:
            label = f"{g} {LOCOMO_CATEGORIES.get(g, '')}".strip() if suite.tenant == "locomo" else g
            for name, run in runs.items():
                m = metrics(suite, run, ks, g)
                vals = "".join(f"{m.get(h, float('nan')):>9.3f}" for h in any_h + all_h)
                inj = "".join(f"{m[h]:>{w}.{d}f}" if h in m else f"{'-':>{w}}"
                              for h, w, d in zip(inj_h, (9, 6), (3, 2)))
                out.append(f"{label[:27]:<28}{name:<{width}}{int(m['n']):>6}{vals}"
                           f"{m.get('mrr', float('nan')):>8.3f}{inj}")
    return out


def plot(suite: Suite, runs: dict[str, RecallRun], ks: Sequence[int], path: Path, title: str) -> Path:
    """A PNG of any@k (solid) and all@k (dashed) against k, one colour per system
    (matplotlib, Agg backend). Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for name, run in runs.items():
        m = metrics(suite, run, ks)
        line, = ax.plot(list(ks), [m[f"any@{k}"] for k in ks], marker="o", label=f"{name} any@k")
        ax.plot(list(ks), [m[f"all@{k}"] for k in ks], linestyle="--", color=line.get_color(),
                label=f"{name} all@k")
    ax.set_xlabel("k (memories recalled)")
    ax.set_ylabel("recall")
    ax.set_ylim(0, 1)
    ax.set_xticks(list(ks))
    ax.grid(alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
