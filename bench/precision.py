"""Both sides of recall and capture through the real turn (``python -m bench precision``).

Recall when the answer exists is half of what a person meets; the other half is a
memory that stays quiet when nothing is relevant and writes only what the person
told it. Every figure here comes from the real turn (``gateway.pipeline.Pipeline``
over ``memory.core.MemoryCore``, no chat model), as ``huiyi eval recall --mode
turn`` asks (``evals.recall.evaluate_turns``): the people's histories are stored
through the real capture (``evals.recall.ingest(..., "capture")``), then each line
is a private message of that person.

(a) **Finding**: questions about what the person said — LoCoMo per speaker
    (``evals.recall.load_locomo``, layout ``speaker``) and MemoryBank-CN's probing
    questions with hand-written evidence (``evals.recall.load_memorybank``, the
    questions whose answer is in the person's own words) — scored on the turn's ranking (any@5,
    any@10 of its recall trace) and on what it put into the prompt: ``any@injected``
    and the mean number injected.
(b) **Staying quiet**: off-topic and chit-chat lines sent by those people — LCCC and
    KdConv lines (Chinese) to MemoryBank-CN people, English small talk
    (``SMALLTALK_EN``) to LoCoMo people. A line enters the negatives set only when it
    is unrelated to everything the person said (``related``: no content word in
    common with any of the person's lines); the lines that do relate are counted and
    left out. Score: the share of turns that inject a memory unrelated to the line
    (no content word in common with it), and the share that inject anything.
(c) **Writing only what was told** (``capture_side``): memories written per
    chit-chat message; questions over a fact said just before (``QUESTIONS``: tag
    questions, "did I tell you") that rewrite it or store their premise; the
    MemoryBank-CN probing questions that store something; conflicts recorded while
    the histories were captured whose two sides are not on one topic (``spurious``).

The relevance decision is measured as a curve over a knob (``--knob NAME=V1,V2``:
a ``RecallParams`` field the turn's recall gets through ``evals.recall.Probe``, or
``recall_k``, the tenant's setting), each point on the dev people and the held-out
ones (LoCoMo's first 4 conversations and MemoryBank-CN's first 7 people are dev);
the operating point is picked on dev (``pick``) and read on held-out.

Data: ``HUIYI_EVAL_DATA_DIR`` (default ``../shared/data``): LoCoMo, MemoryBank-CN,
LCCC, KdConv; ``run`` returns None and says what is missing when a set is absent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench import table
from evals.recall import MEMORYBANK_FILE, MEMORYBANK_LABELS, load_memorybank, world_of

__all__ = ["SMALLTALK_EN", "QUESTIONS", "content_words", "related", "negatives", "thin", "Negative", "Point", "score_negatives", "pick", "parse_knob", "pr_curve", "capture_side",
           "CaptureSide", "spurious", "run"]

log = logging.getLogger("bench.precision")

_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "precision"
SMALLTALK_EN = _DATA / "smalltalk_en.txt"
"""English small talk and off-topic lines written for this bench (one a line)."""
QUESTIONS = _DATA / "questions_over_facts.jsonl"
"""A fact said, then a question over it (tag questions that contradict it; "did I
tell you …"), zh and en: a question must neither rewrite the fact nor store its premise."""

PROBING_FILE = Path("zh") / "memorybank_cn_probing_questions.jsonl"
LCCC_FILE = Path("zh") / "cdialgpt_lccc_toy_valid200.json"
KDCONV_FILE = Path("zh") / "kdconv_travel_test_first40.json"

# Words too general to make a line about something the person said: chat verbs,
# times, degree words. The rest of the stop list is memory.text's (function words).
_EXTRA_STOP_ZH = frozenset(
    "今天 明天 昨天 现在 最近 时候 一下 一点 有点 觉得 感觉 知道 喜欢 真的 就是 不是 还是 已经 一样 这么 那么 "
    "怎么样 可以 没有 不会 不要 可能 应该 需要 一起 一直 还有 大家 东西 事情 朋友 好像 其实 非常 特别 比较 "
    "什么样 这样 那样 为啥 干嘛 哈哈 哈哈哈 嘿嘿 呵呵 谢谢 你好 您好 AI 伴侣 起来 出来 回来 下来 过来 一天 "
    "时间 每天 一次 这次 那次 有没有 是不是 会不会 要不要 能不能 不能 不了 没事 真是 太 好 想 说 看 去 来".split())
_EXTRA_STOP_EN = frozenset(
    "like get got go going went gonna wanna really think know just day today time good great yeah ok okay "
    "lol haha thing things way much many something anything make made let still even well want see look say "
    "said tell told feel thank thanks yes oh hey hi hello right sure maybe one two lot kind sort".split())
_WORD = re.compile(r"[a-z][a-z']+")


def content_words(text: str) -> frozenset[str]:
    """The content words of ``text``: jieba's search segmentation of the normalised
    text (``memory.text.normalise``: simplified, case-folded) without
    ``memory.text.STOPWORDS``, fillers (``memory.text.is_filler``), this module's
    list of general chat words, single CJK characters and digits; English words
    stemmed (``memory.text.stem``), at least 3 letters. The labelling rule of
    ``related``."""
    import jieba

    from memory.text import STOPWORDS, is_filler, normalise, stem

    out: set[str] = set()
    for tok in jieba.lcut_for_search(normalise(text)):
        tok = tok.strip().lower()
        if not tok or tok in STOPWORDS or is_filler(tok):
            continue
        if tok.isascii():
            for w in _WORD.findall(tok):
                w = w.strip("'")
                if len(w) >= 3 and w not in STOPWORDS and w not in _EXTRA_STOP_EN:
                    s = stem(w)
                    if s not in _EXTRA_STOP_EN:
                        out.add(s)
        elif len(tok) >= 2 and tok not in _EXTRA_STOP_ZH and not tok.isdigit() \
                and any("\u4e00" <= c <= "\u9fff" for c in tok):
            out.add(tok)
    return frozenset(out)


def related(line: str, text: str) -> bool:
    """The labelling rule: ``line`` relates to ``text`` when they share a content word
    (``content_words``)."""
    return bool(content_words(line) & content_words(text))


# -- data ---------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines()
            if x.strip() and not x.lstrip().startswith("#")]


def thin(suite, cap: int | None):
    """``suite`` with at most ``cap`` questions, evenly spaced over its order (so every
    person keeps some); unchanged when ``cap`` is None or not below its count."""
    n = len(suite.queries)
    if cap is None or cap >= n:
        return suite
    return replace(suite, queries=tuple(suite.queries[i * n // cap] for i in range(cap)))


def _despace(text: str) -> str:
    from bench.chatmix import _despace as despace

    return despace(text)


def zh_lines(root: Path) -> list[tuple[str, str]]:
    """Chinese chit-chat and off-topic lines, (source, text): every LCCC line (despaced)
    and the first message of each KdConv dialogue (a question about a sight), 2–40
    characters, distinct, in file order."""
    root = Path(root)
    lccc = json.loads((root / LCCC_FILE).read_text(encoding="utf-8"))["valid"]
    kd = json.loads((root / KDCONV_FILE).read_text(encoding="utf-8"))
    out = [("lccc", _despace(x)) for d in lccc for x in d]
    out += [("kdconv", d["messages"][0]["message"].strip()) for d in kd if d.get("messages")]
    seen: set[str] = set()
    keep = []
    for src, text in out:
        if 2 <= len(text) <= 40 and text not in seen:
            seen.add(text)
            keep.append((src, text))
    return keep


def en_lines(path: Path = SMALLTALK_EN) -> list[tuple[str, str]]:
    """English small talk, (``"smalltalk"``, text), from ``path`` (``#`` lines are comments)."""
    return [("smalltalk", x.strip()) for x in Path(path).read_text(encoding="utf-8").splitlines()
            if x.strip() and not x.startswith("#")]


@dataclass(frozen=True, slots=True)
class Negative:
    """A line a person sends that is about nothing they said: ``world`` in ``suite``
    (the Suite's name), the line, its language and source."""

    suite: str
    world: str
    line: str
    lang: str
    source: str


def negatives(suite, lines: Sequence[tuple[str, str]], lang: str, per_person: int, seed: int = 37
              ) -> tuple[list[Negative], int]:
    """Up to ``per_person`` lines for every world of ``suite``, drawn in a seeded order
    of ``lines`` (each person their own), keeping only those ``related`` to none of
    the person's own lines (the labelling rule). Returns (negatives, how many drawn
    lines were left out because they relate)."""
    out: list[Negative] = []
    dropped = 0
    for w, (world, docs) in enumerate(suite.worlds.items()):
        said = frozenset().union(*(content_words(d.text) for d in docs)) if docs else frozenset()
        order = list(lines)
        random.Random(seed * 1000 + w).shuffle(order)
        taken = 0
        for src, text in order:
            if taken >= per_person:
                break
            if content_words(text) & said:
                dropped += 1
                continue
            out.append(Negative(suite.name, world, text, lang, src))
            taken += 1
    return out, dropped


def as_suite(suite, negs: Sequence[Negative]):
    """The negatives of ``suite`` as queries of that Suite (no gold, group = the line's
    source, unit = the person's), asked when the person's questions are (else at
    the Suite's last question, or 2026-01-02)."""
    from evals.recall import Query

    last = max((q.asked_at for q in suite.queries), default=datetime(2026, 1, 2, tzinfo=timezone.utc))
    asked = {w: q.asked_at for q in suite.queries for w in q.worlds}

    def unit(world: str) -> str:  # LoCoMo's person "conv-26.a" is of conversation "conv-26"
        return next((u for u in suite.units if world == u or world.startswith(f"{u}.")), world)

    queries = tuple(Query((n.world,), (n.line,), frozenset(), n.source, unit(n.world), asked.get(n.world, last))
                    for n in negs if n.suite == suite.name)
    return replace(suite, name=f"{suite.name}-negatives", queries=queries)


# -- scoring ------------------------------------------------------------------


@dataclass
class Point:
    """One setting of the knob on one split: the positives' figures per set
    (``{set: {"n", "any@5", "any@10", "any@injected", "injected"}}``) and the
    negatives' (``{lang: {"n", "unrelated", "any", "injected"}}``: the share of turns
    injecting a memory unrelated to the line, the share injecting anything, the mean
    injected)."""

    value: Any
    split: str
    positives: dict[str, dict[str, float]] = field(default_factory=dict)
    negatives: dict[str, dict[str, float]] = field(default_factory=dict)

    def finding(self) -> float:
        """Mean any@injected over the positive sets (nan when none)."""
        vals = [m["any@injected"] for m in self.positives.values() if m.get("n")]
        return sum(vals) / len(vals) if vals else float("nan")

    def quiet(self) -> float:
        """Share of negative turns, all languages, that injected an unrelated memory (nan when none)."""
        n = sum(m["n"] for m in self.negatives.values())
        return sum(m["unrelated"] * m["n"] for m in self.negatives.values()) / n if n else float("nan")


def score_negatives(lines: Sequence[str], injected_texts: Sequence[Sequence[str]]) -> dict[str, float]:
    """``{"n", "unrelated", "any", "injected"}`` over negative turns: ``lines[i]`` sent,
    ``injected_texts[i]`` the texts of the memories its turn put into the prompt.
    A memory is unrelated to its line when ``related`` says so."""
    n = len(lines)
    if not n:
        return {"n": 0, "unrelated": float("nan"), "any": float("nan"), "injected": float("nan")}
    bad = sum(any(not related(line, t) for t in texts) for line, texts in zip(lines, injected_texts))
    return {"n": n, "unrelated": bad / n, "any": sum(bool(t) for t in injected_texts) / n,
            "injected": sum(len(t) for t in injected_texts) / n}


def pick(points: Sequence[Point], slack: float = 0.02) -> Point | None:
    """The operating point on dev: among the dev points whose finding (mean
    any@injected) is within ``slack`` of the best dev finding, the one that injects
    unrelated memories least often (ties: the higher finding, then the first).
    None without dev points."""
    dev = [p for p in points if p.split == "dev" and not math.isnan(p.finding())]
    if not dev:
        return None
    best = max(p.finding() for p in dev)
    ok = [p for p in dev if p.finding() >= best - slack]
    return min(ok, key=lambda p: (p.quiet() if not math.isnan(p.quiet()) else 1.0, -p.finding()))


def parse_knob(spec: str | None) -> tuple[str, list[Any]]:
    """``NAME=V1,V2,…`` → (name, values); ``NAME`` is ``recall_k`` or a
    ``memory.recall.RecallParams`` field, or several joined by ``+`` that take each
    value together (``vector_floor+matched_vector_floor=0.84,0.9``: gates that only
    silence a line together), each value parsed as the fields' type (int, float or
    bool: true/false; the joined fields must share it). None or "" → ("", [None]):
    the shipped settings alone. Raises ValueError naming what is wrong."""
    if not spec:
        return "", [None]
    from dataclasses import fields

    from memory.recall import RecallParams

    name, _, raw = spec.partition("=")
    name = name.strip()

    def kind_of(annotation: object) -> type | None:  # "float | None" (postponed annotations) → float
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        parts = {x.strip() for x in str(text).split("|")} - {"None"}
        return {"int": int, "float": float, "bool": bool}.get(parts.pop()) if len(parts) == 1 else None

    kinds = {f.name: kind_of(f.type) for f in fields(RecallParams)}
    kinds["recall_k"] = int
    names = [x.strip() for x in name.split("+")]
    for n in names:
        if n not in kinds:
            raise ValueError(f"--knob {n!r} is neither recall_k nor a RecallParams field ({', '.join(sorted(kinds))})")
        if kinds[n] is None:
            raise ValueError(f"--knob {n} is not a number or a boolean: only those vary")
    if len({kinds[n] for n in names}) > 1:
        raise ValueError(f"--knob {name}: the joined fields differ in type")
    kind = kinds[names[0]]
    values: list[Any] = []
    for v in (x.strip() for x in raw.split(",") if x.strip()):
        if kind is bool:
            if v.lower() not in ("true", "false"):
                raise ValueError(f"--knob {name}: {v!r} is not true/false")
            values.append(v.lower() == "true")
        else:
            try:
                values.append(kind(v))
            except ValueError:
                raise ValueError(f"--knob {name}: {v!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not values:
        raise ValueError(f"--knob {name}= names no value")
    return name, values


# -- capture side ----------------------------------------------------------------


_ACK = re.compile(r"^(?:[嗯哦噢喔恩好对是行]+[的啊呀吧了]*|好的|知道了|明白了|收到|谢谢你?(?:的建议)?|ok(?:ay)?|"
                  r"thanks?(?: you)?|got it|i see|sure)[\s，,。.!！~～]*$", re.I)


def spurious(older: str, newer: str, older_key: str = "", newer_key: str = "") -> str:
    """Why a recorded conflict between memories ``older`` and ``newer`` is spurious,
    or "" when it may be real: ``"acknowledgement"`` when a side has no content word
    (「嗯，我知道了。」, "ok thanks"); ``"slot"`` when both sides have a topic slot
    (``Memory.key`` of the form ``profile.job``, not a text's own key) and they
    differ; ``"topic"`` when the sides share no content word
    and no slot."""
    a, b = content_words(older), content_words(newer)
    if not a or not b or _ACK.match(older.strip()) or _ACK.match(newer.strip()):
        return "acknowledgement"
    older_key, newer_key = _slot(older_key), _slot(newer_key)
    if older_key and newer_key:
        return "" if older_key == newer_key else "slot"
    return "" if a & b else "topic"


_SLOT = re.compile(r"[a-z_]+(?:\.[a-z_]+)+")


def _slot(key: str) -> str:
    """``key`` when it names a topic slot (``profile.job``), "" for a text's own key
    (``memory.core.default_key``: ``<category>:<text>``)."""
    return key if _SLOT.fullmatch(key or "") else ""


@dataclass
class CaptureSide:
    """What the real turn wrote. Per group of lines (``"chit-chat zh"``, ``"tag
    questions en"``, ``"probing questions zh"`` …): ``{"n": lines, "stored": lines that
    stored a new lasting memory, "memories": new lasting memories, "passing": new passing moods
    (``passing``), "rewritten": lines after which a
    memory the person had has another text or is no longer live}``;
    ``conflicts``: per set, (conflicts recorded by the history's capture, spurious
    ones, examples)."""

    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    conflicts: dict[str, tuple[int, int, list[str]]] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)


def _snapshot(core, ns) -> dict[str, tuple[str, str]]:
    """Live memory id → (text, category value) (a version that only joins a context keeps its text)."""
    return {m.id: (m.text, m.category.value) for m in core.store.list(ns, limit=1_000_000)}


def passing(text: str, category: str) -> bool:
    """A passing mood as capture keeps one: category mood, naming nothing beyond moods and reactions
    (``memory.lexicon.names_nothing``); recall lets it lapse (``memory.recall.MOOD_TTL_DAYS``)."""
    from memory.lexicon import names_nothing

    return category == "mood" and names_nothing(text)


async def _say(pipeline, core, tenant: str, kind: str, world: str, text: str, at: datetime, mid: str):
    """Send ``text`` as ``world``'s private message and let its capture run; returns
    (new memories as (text, category value), rewritten memory ids)."""
    from bridges.contract import InboundMessage
    from memory.types import ChatKind, Namespace

    ns = Namespace(tenant, f"{kind}:{world}")
    before = _snapshot(core, ns)
    await pipeline.handle(tenant, InboundMessage(platform=kind, message_id=mid, sender_id=world,
                                                 chat_kind=ChatKind.PRIVATE, chat_id=world, text=text, timestamp=at,
                                                 bot_id="precision"), background_capture=True)
    await pipeline.drain()
    after = _snapshot(core, ns)
    new = [after[i] for i in after if i not in before]
    changed = [i for i, t in before.items() if after.get(i, (None,))[0] != t[0]]
    return new, changed


def _count(groups: dict, examples: dict, name: str, line: str, new: list[tuple[str, str]], changed: list[str]) -> None:
    g = groups.setdefault(name, {"n": 0, "stored": 0, "memories": 0, "passing": 0, "rewritten": 0})
    lasting = [t for t, c in new if not passing(t, c)]
    g["n"] += 1
    g["stored"] += bool(lasting)
    g["memories"] += len(lasting)
    g["passing"] += len(new) - len(lasting)
    g["rewritten"] += bool(changed)
    if (lasting or changed) and len(examples.setdefault(name, [])) < 3:
        examples[name].append(f"{line!r} -> stored {lasting[:2]!r}" + (f", rewrote {len(changed)}" if changed else ""))


def capture_side(core, turns, suites: dict, negs: Sequence[Negative], probing: dict[str, Sequence[str]],
                 questions: Sequence[dict], chitchat_per_person: int) -> CaptureSide:
    """The capture side through the real turn (``turns``: an ``evals.recall.MakeTurns``,
    default tenant), after the recall measurements (it writes): the conflicts the
    histories' capture recorded (``spurious``); each ``QUESTIONS`` pair in a fresh
    person of its own (the fact said, then the question a minute later); the
    MemoryBank-CN probing questions (``probing``: world id → questions, all 100, asked
    in their people's namespaces); then ``chitchat_per_person`` negative lines of
    each person. ``suites``: Suite name → Suite."""
    out = CaptureSide()
    for name, suite in suites.items():
        total, bad, ex = 0, 0, []
        for world in suite.worlds:
            ns = suite.namespace(world)
            for c in core.store.conflicts(ns):
                mems = core.store.get_many(ns, [c.older_id, c.newer_id])
                if len(mems) < 2:
                    continue
                o, n = mems[c.older_id], mems[c.newer_id]
                total += 1
                why = spurious(o.text, n.text, o.key, n.key)
                if why:
                    bad += 1
                    if len(ex) < 4:
                        ex.append(f"{why}: {o.text[:40]!r} / {n.text[:40]!r}")
        out.conflicts[name] = (total, bad, ex)

    async def go() -> None:
        call = uuid.uuid4().hex[:6]
        by_tenant: dict[str, Any] = {}

        def pipe(tenant: str):
            if tenant not in by_tenant:
                by_tenant[tenant] = turns(core, tenant, None)
            return by_tenant[tenant]

        t0 = datetime(2026, 12, 6, 9, tzinfo=timezone.utc)
        for i, q in enumerate(questions):
            world = f"q{call}{i}"
            p = pipe("precision")
            await _say(p, core, "precision", "pq", world, q["said"], t0, f"{call}.s{i}")
            new, changed = await _say(p, core, "precision", "pq", world, q["asked"], t0 + timedelta(minutes=1),
                                      f"{call}.a{i}")
            _count(out.groups, out.examples, f"{q['kind']} questions {q['lang']}", q["asked"], new, changed)
        mb = suites.get("memorybank-cn")
        if mb is not None:
            at = datetime(2023, 5, 7, 20, tzinfo=timezone.utc)
            for person, qs in probing.items():
                if person not in mb.worlds:
                    continue
                for j, q in enumerate(qs):
                    new, changed = await _say(pipe(mb.tenant), core, mb.tenant, mb.kind, person, q,
                                              at + timedelta(minutes=j), f"{call}.p{person}{j}")
                    _count(out.groups, out.examples, "probing questions zh", q, new, changed)
        per: dict[tuple[str, str], int] = {}
        for j, n in enumerate(negs):
            if per.get((n.suite, n.world), 0) >= chitchat_per_person:
                continue
            per[(n.suite, n.world)] = per.get((n.suite, n.world), 0) + 1
            suite = suites[n.suite]
            at = (max(q.asked_at for q in suite.queries) if suite.queries else t0) + timedelta(days=2, minutes=j)
            new, changed = await _say(pipe(suite.tenant), core, suite.tenant, suite.kind, n.world, n.line, at,
                                      f"{call}.c{j}")
            _count(out.groups, out.examples, f"chit-chat {n.lang}", n.line, new, changed)
        for p in by_tenant.values():
            await p.drain()

    asyncio.run(go())
    return out


# -- the bench -------------------------------------------------------------------


def _probing(root: Path) -> dict[str, list[str]]:
    """MemoryBank-CN's probing questions by world id (``world_of``)."""
    ids = world_of(json.loads((Path(root) / MEMORYBANK_FILE).read_text(encoding="utf-8")))
    out: dict[str, list[str]] = {}
    for row in _read_jsonl(Path(root) / PROBING_FILE):
        out.update({ids[name]: qs for name, qs in row.items() if name in ids})
    return out


def _turn_maker(data_dir: Path, tenant_override: dict[str, Any]) -> Callable:
    from gateway.cli.evaluate import turn_pipeline

    make = turn_pipeline(data_dir)

    def maker(core, tenant: str, recall_k: int | None):
        return make(core, tenant, tenant_override.get("recall_k", recall_k))

    return maker


def _measure(core, suites, negsuites, key_of, turns_dir: Path, knob: str, value) -> dict[str, tuple]:
    """Every positive and negative suite through the real turn at one knob value;
    returns {suite name: (suite, RecallRun)}."""
    from evals.recall import evaluate_turns

    names = knob.split("+") if knob and value is not None else []
    override = {n: value for n in names if n != "recall_k"}
    tenant = {"recall_k": value} if "recall_k" in names else {}
    out = {}
    for s in [*suites, *negsuites]:
        if not s.queries:
            continue
        out[s.name] = (s, evaluate_turns(core, s, key_of, turns=_turn_maker(turns_dir, tenant), k=10,
                                         override=override)["hybrid"])
    return out


def _points(runs: dict[str, tuple], value, texts_of: Callable, dev_units: dict[str, set[str]]) -> list[Point]:
    from evals.recall import metrics

    points = []
    for split in ("dev", "held-out", "all"):
        pt = Point(value, split)
        neg_lines: dict[str, list[str]] = {}
        neg_texts: dict[str, list[list[str]]] = {}
        for name, (suite, run) in runs.items():
            base = name.removesuffix("-negatives")
            dev = dev_units.get(base, set())
            idx = [i for i, q in enumerate(suite.queries)
                   if split == "all" or (q.unit in dev) == (split == "dev")]
            if name.endswith("-negatives"):
                lang = "zh" if base.startswith("memorybank") else "en"
                for i in idx:
                    neg_lines.setdefault(lang, []).append(suite.queries[i].tail[-1])
                    neg_texts.setdefault(lang, []).append(texts_of(suite, suite.queries[i], run.turns[i]))
            else:
                sub = replace(suite, queries=tuple(suite.queries[i] for i in idx))
                from evals.recall import RecallRun

                r = RecallRun([run.retrieved[i] for i in idx], [run.latency_s[i] for i in idx],
                              [run.turns[i] for i in idx], [run.injected[i] for i in idx])
                m = metrics(sub, r, (5, 10)) if idx else {"n": 0.0}
                pt.positives[base] = m
        for lang in neg_lines:
            pt.negatives[lang] = score_negatives(neg_lines[lang], neg_texts[lang])
        points.append(pt)
    return points


def run(data_dir: Path, workdir: Path, *, quick: bool = False, conversations: int | None = None,
        people: int | None = None, per_person: int | None = None, questions_per_set: int | None = None,
        knob: str | None = None, cache: Path | None = None, capture: bool = True, emit: Callable[[str], None] = print,
        embedder=None, labels: Path = MEMORYBANK_LABELS, smalltalk: Path = SMALLTALK_EN,
        questions: Path = QUESTIONS) -> list[Point] | None:
    """Run the bench and ``emit`` its tables; returns the points measured (None when
    data is missing: it says which). ``quick``: 2 LoCoMo conversations, 4
    MemoryBank-CN people, 10 negatives a person, at most 100 questions a set;
    ``conversations`` / ``people`` / ``per_person`` / ``questions_per_set`` override
    those (defaults: all 10 conversations, all 15 people, 12 zh / 8 en lines a
    person, every question; a cap keeps evenly spaced questions, ``thin``). ``knob``: ``NAME=V1,V2`` (``parse_knob``; None: the
    shipped settings alone). ``capture``: also the capture side. ``cache``: the
    dataset embedding cache (``evals.recall.CachedEmbedder``). ``embedder``: the
    embedder (default: the gateway's offline default, e5-small); ``labels``,
    ``smalltalk``, ``questions``: the hand-written sets (defaults: this module's)."""
    from evals.recall import CachedEmbedder, EvalError, LOCOMO_FILE, ingest, load_locomo
    from memory.core import MemoryCore
    from memory.embed import DEFAULT_OFFLINE_MODEL, make_embedder
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import initialise

    name, values = parse_knob(knob)
    data_dir = Path(data_dir)
    missing = [str(p) for p in (LOCOMO_FILE, MEMORYBANK_FILE, PROBING_FILE, LCCC_FILE, KDCONV_FILE)
               if not (data_dir / p).is_file()]
    if missing:
        emit(f"precision: evaluation data missing under {data_dir} (set HUIYI_EVAL_DATA_DIR or --data-dir): "
             f"{', '.join(missing)}")
        return None
    conversations = conversations or (2 if quick else None)
    people = people or (4 if quick else None)
    zh_per, en_per = (per_person, per_person) if per_person else ((10, 10) if quick else (12, 8))
    initialise()
    t_start = time.perf_counter()
    try:
        locomo = load_locomo(data_dir / LOCOMO_FILE, conversations=conversations, layout="speaker")
        bank = load_memorybank(data_dir, labels, people=people)
    except EvalError as exc:
        emit(f"precision: {exc}")
        return None
    if conversations is not None:
        locomo = replace(locomo, dev_units=min(locomo.dev_units, max(1, len(locomo.units) // 2)))
    if people is not None:
        bank = replace(bank, dev_units=max(1, len(bank.units) // 2))
    cap = questions_per_set or (100 if quick else None)
    locomo, bank = thin(locomo, cap), thin(bank, cap)
    neg_zh, drop_zh = negatives(bank, zh_lines(data_dir), "zh", zh_per)
    neg_en, drop_en = negatives(locomo, en_lines(smalltalk), "en", en_per)
    negs = [*neg_zh, *neg_en]
    negsuites = [as_suite(bank, neg_zh), as_suite(locomo, neg_en)]
    dev_units = {s.name: set(s.units[:s.dev_units]) for s in (locomo, bank)}
    emb = embedder if embedder is not None else make_embedder(DEFAULT_OFFLINE_MODEL)
    emit(f"precision [{emb.name}]: LoCoMo per speaker {len(locomo.worlds)} people, "
         f"{len(locomo.queries)} questions; MemoryBank-CN {len(bank.worlds)} people, {len(bank.queries)} questions; "
         f"negatives zh {len(neg_zh)} (LCCC/KdConv; {drop_zh} drawn lines related to the person left out), "
         f"en {len(neg_en)} (small talk; {drop_en} left out); knob {name or '(shipped settings)'}"
         f" {values if name else ''}; dev = LoCoMo {sorted(dev_units[locomo.name])}, MemoryBank-CN "
         f"{len(dev_units[bank.name])} people; load average {_load()}")
    if cache is not None:
        emb = CachedEmbedder(emb, cache)
    core = MemoryCore(Store(f"sqlite:///{workdir / 'huiyi.db'}"), SearchIndex(workdir / "index", emb))
    points: list[Point] = []
    try:
        t0 = time.perf_counter()
        key_of = {**ingest(core, locomo, "capture"), **ingest(core, bank, "capture")}
        emit(f"ingest through capture: {len(key_of)} memories in {time.perf_counter() - t0:.0f} s")

        def texts_of(suite, q, turns) -> list[str]:
            ids = [mid for t in turns for mid in t.recalled]
            got = core.store.get_many(suite.namespace(q.worlds[0]), ids) if ids else {}
            return [got[i].text for i in ids if i in got]

        for value in values:
            t0 = time.perf_counter()
            runs = _measure(core, [locomo, bank], negsuites, key_of, workdir / "turns", name, value)
            points += _points(runs, value, texts_of, dev_units)
            emit(f"  {name or 'shipped'}={value}: {sum(len(s.queries) for s, _ in runs.values())} turns in "
                 f"{time.perf_counter() - t0:.0f} s")
        emit(curve(points, name))
        if name:
            emit(pr_curve(points, name))
            best = pick(points)
            if best is not None:
                held = next(p for p in points if p.split == "held-out" and p.value == best.value)
                emit(f"operating point picked on dev: {name}={best.value} (dev finding {best.finding():.3f}, "
                     f"unrelated {best.quiet():.3f}); held out: finding {held.finding():.3f}, "
                     f"unrelated {held.quiet():.3f}")
        if capture:
            t0 = time.perf_counter()
            side = capture_side(core, _turn_maker(workdir / "turns", {}), {locomo.name: locomo, bank.name: bank},
                                negs, _probing(data_dir), _read_jsonl(questions), 5 if quick else 10)
            emit(capture_table(side))
            emit(f"capture side in {time.perf_counter() - t0:.0f} s")
    finally:
        core.close()
    emit(f"precision finished in {time.perf_counter() - t_start:.0f} s; load average {_load()}")
    return points


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def curve(points: Sequence[Point], knob: str) -> str:
    """The precision/recall table: per knob value and split, each positive set's
    n / any@5 / any@10 / any@injected / injected, each language's negatives n /
    unrelated / any / injected."""
    sets = sorted({s for p in points for s in p.positives})
    langs = sorted({l for p in points for l in p.negatives})
    headers = [knob or "setting", "split"]
    for s in sets:
        headers += [f"{s} n", "@5", "@10", "@inj", "inj"]
    for l in langs:
        headers += [f"neg {l} n", "unrel", "any", "inj"]
    rows = []
    for p in points:
        row: list[object] = ["shipped" if p.value is None else str(p.value), p.split]
        for s in sets:
            m = p.positives.get(s, {})
            row += [int(m.get("n", 0)), m.get("any@5", float("nan")), m.get("any@10", float("nan")),
                    m.get("any@injected", float("nan")), m.get("injected", float("nan"))]
        for l in langs:
            m = p.negatives.get(l, {})
            row += [int(m.get("n", 0)), m.get("unrelated", float("nan")), m.get("any", float("nan")),
                    m.get("injected", float("nan"))]
        rows.append(row)
    return table("finding (questions about what the person said: any@k of the turn's ranking, @inj = the evidence "
                 "among what it put into the prompt, inj = memories a turn) and staying quiet (negatives: unrel = "
                 "share of turns injecting a memory unrelated to the line, any = injecting anything)", headers, rows)


def pr_curve(points: Sequence[Point], knob: str) -> str:
    """The relevance decision's precision/recall curve over ``knob``: per split, one
    row per value, ordered from the strictest setting (least injected) to the
    loosest — recall = the finding (``Point.finding``: mean any@injected over the
    question sets), precision = the share of negative turns that inject no unrelated
    memory (1 − ``Point.quiet``), and the memories a negative turn injects (mean
    over languages, weighted by turns). A setting is better than another when it is
    at least as high on both."""
    rows = []
    for split in dict.fromkeys(p.split for p in points):
        mine = [p for p in points if p.split == split]

        def injected(p: Point) -> float:
            n = sum(m["n"] for m in p.negatives.values())
            return sum(m["injected"] * m["n"] for m in p.negatives.values()) / n if n else float("nan")

        for p in sorted(mine, key=lambda p: (injected(p), p.finding())):
            rows.append([split, "shipped" if p.value is None else str(p.value), p.finding(), 1.0 - p.quiet(),
                         injected(p)])
    return table(f"precision/recall of the relevance decision over {knob} (recall = evidence among what the turn "
                 "injects, mean over the question sets; precision = negative turns injecting no unrelated memory; "
                 "inj = memories a negative turn injects)", ["split", knob, "recall", "precision", "inj"], rows)


def capture_table(side: CaptureSide) -> str:
    """The capture side as text: per group of lines, then the conflicts."""
    rows = [[name, g["n"], g["stored"], g["memories"], g["memories"] / g["n"] if g["n"] else float("nan"),
             g["passing"], g["rewritten"]] for name, g in sorted(side.groups.items())]
    out = [table("capture side through the real turn (stored = lines that stored a new lasting memory; passing = "
                 "passing moods kept, which lapse in recall after memory.recall.MOOD_TTL_DAYS; rewritten = lines "
                 "after which one of the person's memories changed or went)",
                 ["lines", "n", "stored", "memories", "per line", "passing", "rewritten"], rows)]
    for name, ex in sorted(side.examples.items()):
        out += [f"  {name}: {e}" for e in ex]
    crow = [[name, total, bad] for name, (total, bad, _) in sorted(side.conflicts.items())]
    out.append(table("conflicts recorded by the histories' capture (spurious: a side an acknowledgement, or the "
                     "sides on different topics)", ["set", "conflicts", "spurious"], crow))
    for name, (_, _, ex) in sorted(side.conflicts.items()):
        out += [f"  {name}: {e}" for e in ex]
    return "\n".join(out)
