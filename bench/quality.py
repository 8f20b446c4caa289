"""Recall quality on public data with evidence labels: BM25 only, vector only and
fused hybrid, measured in the same run over the same stores.

Suites (data in ``../shared/data``; recipes in its README):

- **LoCoMo** (``memory/locomo10.json``): every turn is one memory (text, plus
  `` <blip_caption>`` when the turn shared an image) in one namespace per
  conversation, ``Namespace("locomo", "conv:<sample_id>")``. Queries: questions of
  categories 1–4 with non-empty evidence, ``tail = [question]``. Metrics:
  recall_any@k (any gold turn in the top k) and recall_all@k (share of gold turns
  in the top k), overall and per category.
- **DuLeMon** (``zh/dulemon_samples.jsonl``): each ``user_said_persona`` fact,
  de-segmented, is a memory of that dialogue's user (one namespace per
  dialogue) and, in the harder variant, of one namespace holding every
  dialogue's facts. Queries: each ``Bot:`` line labelled with a said U-fact,
  queried with the preceding ``Usr:`` line (``tail1``) or the two lines before
  it (``tail2``). In the one-namespace variant a fact with exactly the same text
  in another dialogue also counts as a hit (the two are indistinguishable).

Ingest is batched: ``Store.add`` per row, ``SearchIndex.upsert`` per 256 rows,
the outbox rows of each batch cleared, ``SearchIndex.optimize()`` once at the end.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import DATA_DIR, percentile, table
from memory.core import MemoryCore
from memory.recall import RecallParams
from memory.types import Memory, Namespace

__all__ = [
    "Doc",
    "Query",
    "Suite",
    "SuiteResult",
    "EmbedderQuality",
    "CHANNELS",
    "load_locomo",
    "load_dulemon",
    "desegment",
    "evidence_ids",
    "ingest",
    "evaluate",
    "run",
    "embedding_cost",
]

log = logging.getLogger(__name__)

LOCOMO = DATA_DIR / "memory" / "locomo10.json"
DULEMON = DATA_DIR / "zh" / "dulemon_samples.jsonl"

CHANNELS: dict[str, tuple[str, ...]] = {"bm25": ("bm25",), "vector": ("vector",), "hybrid": ("bm25", "vector")}
"""Channel configurations compared on every query (names as printed)."""

CANDIDATES = 40
BATCH = 256

LOCOMO_REFERENCE = ("reference (measured elsewhere, plain baselines): BM25 over jieba 0.57 @10, "
                    "e5-small vectors 0.58 @10, mem0 hybrid 0.65 @10 at 289 ms p95")
DULEMON_REFERENCE = "reference (measured elsewhere): one-namespace variant, best 0.25 @5"


# -- suites -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    """One memory to store; ``key`` is its gold id (LoCoMo dia_id, DuLeMon ``d03:U2``)."""

    key: str
    text: str


@dataclass(frozen=True, slots=True)
class Query:
    """One recall query against world ``world``: the tail (oldest first), the gold
    doc keys and a group label for per-group figures (LoCoMo category)."""

    world: str
    tail: tuple[str, ...]
    gold: frozenset[str]
    group: str = ""


@dataclass(frozen=True, slots=True)
class Suite:
    """Worlds (one namespace each, ``Namespace(tenant, f"{kind}:{world}")``) and queries."""

    name: str
    tenant: str
    kind: str
    worlds: dict[str, tuple[Doc, ...]]
    queries: tuple[Query, ...]

    def namespace(self, world: str) -> Namespace:
        return Namespace(self.tenant, f"{self.kind}:{world}")

    @property
    def n_docs(self) -> int:
        return sum(len(d) for d in self.worlds.values())


_EVIDENCE_SPLIT = re.compile(r"[;\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")


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


def load_locomo(path: Path = LOCOMO, conversations: int | None = None, max_turns: int | None = None,
                speaker: bool = False) -> Suite:
    """LoCoMo as a Suite: the first ``conversations`` samples (all: None), each cut to
    its first ``max_turns`` turns in (session, turn) order. A memory's text is the
    turn's text plus `` <blip_caption>``; ``speaker`` prefixes ``"<speaker>: "``
    (questions name the person; without the prefix a turn does not). A question is kept when
    it is of category 1–4 and its evidence, after the quirk fixes, is non-empty,
    resolves to turns of the conversation and (with ``max_turns``) lies wholly in
    the kept turns; unresolvable ids are dropped."""
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    if conversations is not None:
        samples = samples[:conversations]
    worlds: dict[str, tuple[Doc, ...]] = {}
    queries: list[Query] = []
    for sample in samples:
        conv = sample["conversation"]
        sessions = sorted((int(k.split("_")[1]), v) for k, v in conv.items()
                          if re.fullmatch(r"session_\d+", k) and isinstance(v, list))
        docs: list[Doc] = []
        for _, turns in sessions:
            for turn in turns:
                text = turn["text"]
                if turn.get("blip_caption"):
                    text = f"{text} {turn['blip_caption']}"
                if speaker:
                    text = f"{turn['speaker']}: {text}"
                docs.append(Doc(turn["dia_id"], text))
        all_ids = {d.key for d in docs}
        if max_turns is not None:
            docs = docs[:max_turns]
        kept = {d.key for d in docs}
        world = sample["sample_id"]
        worlds[world] = tuple(docs)
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            gold = [e for e in evidence_ids(qa.get("evidence") or []) if e in all_ids]
            if not gold or not set(gold) <= kept:
                continue
            queries.append(Query(world, (qa["question"],), frozenset(gold), str(qa["category"])))
    return Suite("locomo", "locomo", "conv", worlds, tuple(queries))


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


def load_dulemon(path: Path = DULEMON, dialogues: int | None = None, one_namespace: bool = False,
                 tail: int = 1) -> Suite:
    """DuLeMon as a Suite. Per dialogue ``dNN`` (0-based line number): its said
    U-facts as docs ``dNN:U<n>``; one query per ``Bot:`` line labelled with a said
    U-fact, whose tail is the ``tail`` lines before it (1: the preceding ``Usr:``
    line). ``one_namespace`` puts every dialogue's facts in one world ``all``; a
    query's gold then also holds same-text facts of other dialogues."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
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
            queries.append(Query(world, q_tail, frozenset({f"{world}:{label}"})))
    if one_namespace:
        docs = tuple(d for ds in worlds.values() for d in ds)
        by_text: dict[str, set[str]] = {}
        for d in docs:
            by_text.setdefault(d.text, set()).add(d.key)
        text_of = {d.key: d.text for d in docs}
        queries = [Query("all", q.tail, frozenset(k for g in q.gold for k in by_text[text_of[g]])) for q in queries]
        worlds = {"all": docs}
        return Suite(f"dulemon-1ns-tail{tail}", "dulemon-all", "dlg", worlds, tuple(queries))
    return Suite(f"dulemon-tail{tail}", "dulemon", "dlg", worlds, tuple(queries))


# -- ingest and evaluation ---------------------------------------------------


@dataclass
class Ingested:
    """Memory id → gold doc key, and how long SQL and index writes took (seconds)."""

    key_of: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    sql_s: float = 0.0
    index_s: float = 0.0


def ingest(core: MemoryCore, suites: Sequence[Suite], batch: int = BATCH) -> Ingested:
    """Store every doc of ``suites`` (``Store.add`` per row under key ``bench:<doc key>``,
    ``SearchIndex.upsert`` per ``batch`` rows, each batch's outbox rows cleared) and
    return the memory id → doc key map. Suites sharing a tenant and kind must not
    share worlds. The index is not optimized here."""
    out = Ingested()
    pending: list[tuple[Memory, str]] = []
    for suite in suites:
        for world, docs in suite.worlds.items():
            ns = suite.namespace(world)
            for d in docs:
                pending.append((core.new(ns, d.text, key=f"bench:{d.key}", source_message_id=d.key), d.key))
    for start in range(0, len(pending), batch):
        chunk = pending[start:start + batch]
        t0 = time.perf_counter()
        for mem, _ in chunk:
            core.store.add(mem.namespace, mem)
        t1 = time.perf_counter()
        core.index.upsert([m for m, _ in chunk])
        t2 = time.perf_counter()
        ids = {m.id for m, _ in chunk}
        core.store.clear_ops([op.id for op in core.store.pending_ops(len(chunk) + 1000) if op.memory_id in ids])
        out.sql_s += time.perf_counter() - t2 + (t1 - t0)
        out.index_s += t2 - t1
        for mem, key in chunk:
            out.key_of[mem.id] = key
        out.rows += len(chunk)
    return out


@dataclass
class ChannelRun:
    """Per query (suite order): retrieved doc keys, best first; per-search seconds."""

    retrieved: list[list[str]] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)


@dataclass
class SuiteResult:
    """One suite's runs per channel configuration, with metric helpers."""

    suite: Suite
    runs: dict[str, ChannelRun]

    def _pick(self, group: str | None) -> list[int]:
        return [i for i, q in enumerate(self.suite.queries) if group is None or q.group == group]

    def count(self, group: str | None = None) -> int:
        return len(self._pick(group))

    def recall_any(self, channel: str, k: int, group: str | None = None) -> float:
        """Share of queries with at least one gold doc in the top k."""
        idx = self._pick(group)
        run = self.runs[channel]
        hits = [bool(self.suite.queries[i].gold & set(run.retrieved[i][:k])) for i in idx]
        return sum(hits) / len(hits) if hits else float("nan")

    def recall_all(self, channel: str, k: int, group: str | None = None) -> float:
        """Mean over queries of |gold ∩ top k| / |gold|."""
        idx = self._pick(group)
        run = self.runs[channel]
        vals = [len(self.suite.queries[i].gold & set(run.retrieved[i][:k])) / len(self.suite.queries[i].gold)
                for i in idx]
        return sum(vals) / len(vals) if vals else float("nan")

    def latency_ms(self, channel: str, q: float) -> float:
        return percentile(self.runs[channel].latency_s, q) * 1000.0


def evaluate(core: MemoryCore, suite: Suite, key_of: dict[str, str], k: int = 10,
             channels: dict[str, tuple[str, ...]] = CHANNELS) -> SuiteResult:
    """Run every query of ``suite`` through ``core.recall`` once per channel
    configuration (the configurations alternate per query, so they see the same
    cache state); returns the retrieved gold keys and per-search latencies."""
    runs = {name: ChannelRun() for name in channels}
    for q in suite.queries:
        ns = suite.namespace(q.world)
        for name, chans in channels.items():
            params = RecallParams(k=k, candidates=max(CANDIDATES, k), channels=chans, tail=max(3, len(q.tail)))
            t0 = time.perf_counter()
            hits = core.recall(ns, list(q.tail), params=params)
            runs[name].latency_s.append(time.perf_counter() - t0)
            runs[name].retrieved.append([key_of.get(h.memory.id, "?") for h in hits])
    return SuiteResult(suite, runs)


def embedding_cost(embedder, docs: Sequence[str], queries: Sequence[str]) -> tuple[float, float]:
    """(ms per stored sentence embedded in batches of 256, ms per single query)."""
    docs = list(docs)
    t0 = time.perf_counter()
    for start in range(0, len(docs), BATCH):
        embedder.embed_documents(docs[start:start + BATCH])
    doc_ms = (time.perf_counter() - t0) * 1000.0 / max(1, len(docs))
    t0 = time.perf_counter()
    for q in queries:
        embedder.embed_query(q)
    query_ms = (time.perf_counter() - t0) * 1000.0 / max(1, len(queries))
    return doc_ms, query_ms


# -- the run ------------------------------------------------------------------


@dataclass
class EmbedderQuality:
    """What the default-embedder decision needs from one embedder's quality run."""

    embedder: str
    locomo_hybrid_at10: float
    dulemon_hybrid_at3: float
    dulemon_1ns_hybrid_at5: float
    locomo_hybrid_p95_ms: float
    doc_ms: float
    query_ms: float
    load_s: float


def _locomo_tables(res: SuiteResult, embedder: str, n_ns: int, speaker: bool) -> list[str]:
    s = res.suite
    rows = [[ch, res.recall_any(ch, 5), res.recall_any(ch, 10), res.recall_all(ch, 10),
             res.latency_ms(ch, 50), res.latency_ms(ch, 95)] for ch in res.runs]
    text = '"<speaker>: <text> <caption>"' if speaker else '"<text> <caption>"'
    out = [table(f"LoCoMo recall [{embedder}]: {res.count()} questions (cat 1-4), {s.n_docs} memories "
                 f"in {n_ns} namespaces, memory text {text}",
                 ["channel", "any@5", "any@10", "all@10", "p50 ms", "p95 ms"], rows)]
    out.append(LOCOMO_REFERENCE)
    names = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
    crow = []
    for g in sorted({q.group for q in s.queries}):
        row: list[object] = [f"{g} {names.get(g, '')}", res.count(g)]
        for ch in res.runs:
            row += [res.recall_any(ch, 5, g), res.recall_any(ch, 10, g), res.recall_all(ch, 10, g)]
        crow.append(row)
    heads = ["category", "n"] + [f"{ch[:3]} {m}" for ch in res.runs for m in ("any@5", "any@10", "all@10")]
    out.append(table(f"LoCoMo per category [{embedder}] (bm2 = bm25, vec = vector, hyb = hybrid)", heads, crow))
    return out


def _dulemon_table(results: Sequence[SuiteResult], embedder: str) -> str:
    rows = []
    for res in results:
        one_ns = res.suite.name.startswith("dulemon-1ns")
        variant = ("one namespace" if one_ns else "per dialogue") + (", tail2" if res.suite.name.endswith("tail2")
                                                                     else ", tail1")
        for ch in res.runs:
            rows.append([variant, ch, res.count(), res.recall_any(ch, 1), res.recall_any(ch, 3),
                         res.recall_any(ch, 5), res.latency_ms(ch, 50), res.latency_ms(ch, 95)])
    n_docs = results[0].suite.n_docs if results else 0
    return table(f"DuLeMon recall [{embedder}]: {n_docs} said U-facts, "
                 f"{len(results[0].suite.worlds) if results else 0} dialogues",
                 ["variant", "channel", "n", "@1", "@3", "@5", "p50 ms", "p95 ms"], rows)


def run(embedder_name: str, workdir: Path, quick: bool = False,
        locomo_speaker: bool = False) -> tuple[list[str], EmbedderQuality]:
    """Build stores under ``workdir`` with ``embedder_name``, ingest LoCoMo and both
    DuLeMon variants, evaluate every channel configuration; returns the printed
    blocks and the figures for the embedder decision. ``quick``: 2 LoCoMo
    conversations instead of 10; ``locomo_speaker``: see ``load_locomo``."""
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import initialise

    initialise()
    embedder = make_embedder(embedder_name)
    t0 = time.perf_counter()
    embedder.embed_documents(["warm-up"])
    load_s = time.perf_counter() - t0

    locomo = load_locomo(conversations=2 if quick else None, speaker=locomo_speaker)
    dl1 = load_dulemon(tail=1)
    dl2 = load_dulemon(tail=2)
    dl1n = load_dulemon(tail=1, one_namespace=True)
    dl2n = load_dulemon(tail=2, one_namespace=True)

    workdir.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{workdir / 'huiyi.db'}")
    index = SearchIndex(workdir / "index", embedder)
    core = MemoryCore(store, index)
    try:
        log.info("quality[%s]: ingesting %d LoCoMo turns, %d + %d DuLeMon facts", embedder_name,
                 locomo.n_docs, dl1.n_docs, dl1n.n_docs)
        ing = ingest(core, [locomo, dl1, dl1n])  # the tail2 suites share the tail1 stores
        t0 = time.perf_counter()
        index.optimize()
        opt_s = time.perf_counter() - t0
        blocks = [f"== quality [{embedder_name}] ingest: {ing.rows} memories, SQL {ing.sql_s:.1f} s "
                  f"({ing.rows / max(ing.sql_s, 1e-9):.0f} rows/s, Store.add per row), index "
                  f"{ing.index_s:.1f} s ({ing.rows / max(ing.index_s, 1e-9):.0f} rows/s, upsert per {BATCH}, "
                  f"embedding included), optimize {opt_s:.1f} s; model load {load_s:.1f} s"]

        log.info("quality[%s]: %d LoCoMo questions x %d channel configs", embedder_name, len(locomo.queries),
                 len(CHANNELS))
        loc = evaluate(core, locomo, ing.key_of)
        blocks += _locomo_tables(loc, embedder_name, len(locomo.worlds), locomo_speaker)
        log.info("quality[%s]: DuLeMon", embedder_name)
        dres = [evaluate(core, s, ing.key_of) for s in (dl1, dl2, dl1n, dl2n)]
        blocks.append(_dulemon_table(dres, embedder_name))
        blocks.append(DULEMON_REFERENCE)

        sample_docs = [d.text for docs in locomo.worlds.values() for d in docs][:256]
        sample_q = [q.tail[-1] for q in locomo.queries[:30]] + [q.tail[-1] for q in dl1.queries[:30]]
        doc_ms, query_ms = embedding_cost(embedder, sample_docs, sample_q)
        blocks.append(f"embedding cost [{embedder_name}]: {doc_ms:.2f} ms per stored sentence "
                      f"(LoCoMo turns, batches of {BATCH}), {query_ms:.2f} ms per query "
                      f"(LoCoMo + DuLeMon, one at a time), first load {load_s:.1f} s")
        figures = EmbedderQuality(
            embedder=embedder_name,
            locomo_hybrid_at10=loc.recall_any("hybrid", 10),
            dulemon_hybrid_at3=dres[0].recall_any("hybrid", 3),
            dulemon_1ns_hybrid_at5=dres[2].recall_any("hybrid", 5),
            locomo_hybrid_p95_ms=loc.latency_ms("hybrid", 95),
            doc_ms=doc_ms,
            query_ms=query_ms,
            load_s=load_s,
        )
        return blocks, figures
    finally:
        store.close()


def decision_table(figures: Sequence[EmbedderQuality], quick: bool = False) -> str:
    """The default-embedder comparison: hybrid recall and embedding cost side by side."""
    rows = [[f.embedder, f.locomo_hybrid_at10, f.dulemon_hybrid_at3, f.dulemon_1ns_hybrid_at5,
             f.locomo_hybrid_p95_ms, f.doc_ms, f.query_ms, f.load_s] for f in figures]
    note = " (quick: 2 LoCoMo conversations)" if quick else ""
    return table(f"default embedder: hybrid recall and embedding cost{note}",
                 ["embedder", "LoCoMo any@10", "DuLeMon @3", "DuLeMon 1ns @5", "LoCoMo p95 ms",
                  "ms/sentence", "ms/query", "load s"], rows)
