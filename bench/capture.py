"""Capture on chat-shaped messages: what the turn path learns from a labelled zh/en set.

Data: ``tests/data/capture_set.jsonl`` (the dev set, ``--set dev``, the
default) or ``tests/data/capture_heldout.jsonl`` (``--set heldout``: written
independently, by another author, for measuring and never tuning), or any file
of the same format (``--set PATH``); both written for this project, fields in
``tests/data/MANIFEST.md``: messages a person would send a companion bot, each
labelled with its kind and the facts it must yield — or none, for the
negatives (greetings, questions, gossip, weather, the bot's own lines,
forwards, acknowledgements, commands, requests). The set is named in the
report's header.

Every item is a private turn of a person of its own (``tg:<n>``, so items
cannot interfere) through the real ``gateway.pipeline.Pipeline`` over SQLite +
LanceDB in a temporary data root, without a chat model (capture uses the
offline extractor), captured after the answer as the bridges run it
(``background_capture``, drained before the next item). An item's ``context``
(the companion's question an elliptical answer replies to) is logged just
before it as the bot's line, as the pipeline logs its replies, so that capture
reads it as the memory's context (``CaptureQueue.context_of``); a forward is an
``InboundMessage(forwarded=True)``; a bot line is only logged as the bot's.

Matching: a fact is a rule ``{"all": [...], "any": [...]}`` over the stored
memory's text and context, both through ``memory.text.normalise`` (NFKC —
full-width letters, digits and punctuation as ASCII —, traditional →
simplified, case folded): every ``all`` string is a substring, and at least
one ``any`` string when there are any. A fact is found when a memory stored
for its item matches it; a memory is right when it matches a fact of its item
(a memory of a negative never is).

Printed per language and kind: items, facts, facts found (recall), memories
stored, memories matching a fact (precision) and items that stored anything;
then per language the positives, the negatives and all items (precision over
every memory stored, those of negatives counting as wrong); per surface tag
(mixed, emoji, fullwidth, traditional); with ``verbose`` the misses: each item
with a fact not found or a memory that matches none, with what was stored.
``run`` returns 0 — it is a measurement — unless ``min_precision`` /
``min_recall`` are given and a language's precision (all items) or recall
falls below them: then 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import pass_miss, table

__all__ = ["SET", "HELDOUT", "SETS", "set_path", "set_label", "POSITIVE_KINDS", "NEGATIVE_KINDS", "SENT_AS", "Rule", "Item", "Stored", "Outcome", "Tally",
           "Report", "load", "feed", "score", "render", "run"]

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "tests" / "data" / "capture_set.jsonl"
"""The dev set: the one capture was tuned on."""
HELDOUT = ROOT / "tests" / "data" / "capture_heldout.jsonl"
"""The held-out set: written independently of the dev set and of the extractor, for measuring only."""
SETS = {"dev": SET, "heldout": HELDOUT}
"""The sets ``--set`` knows by name."""
LANGS = ("zh", "en")
POSITIVE_KINDS = ("statement", "statement_question", "exclamation", "indirect_question", "elliptical",
                  "mood_question")
"""Kinds of items that must yield facts (see tests/data/MANIFEST.md)."""
NEGATIVE_KINDS = ("greeting", "question", "world_question", "gossip", "weather", "bot_line", "forward",
                  "acknowledgement", "command", "request")
"""Kinds of items that must yield nothing."""
SENT_AS = ("person", "forward", "bot")
"""How an item enters the chat: the person's own message, a message they forwarded, the companion's line."""
TAGS = ("mixed", "emoji", "fullwidth", "traditional")
TENANT = "default"
FIRST_SENDER = 700_000
BASE = datetime(2026, 11, 4, 2, 0, tzinfo=timezone.utc)
"""When the first item is said (a Wednesday, 10:00 in the default tenant's Asia/Shanghai); each next one a minute later."""
CONTEXT_BEFORE = timedelta(minutes=1)
"""How long before its item the companion's line is logged (within memory.capture.CONTEXT_WINDOW)."""


def set_path(name: str | Path) -> Path:
    """The file of a capture set: ``dev`` or ``heldout`` (SETS), else a path.
    Raises FileNotFoundError when the file is not there."""
    path = SETS.get(str(name), Path(name))
    if not Path(path).is_file():
        raise FileNotFoundError(f"no capture set at {path} (name one of {', '.join(SETS)} or give a path)")
    return Path(path)


def set_label(path: Path) -> str:
    """How the report's header names the set: ``dev`` / ``heldout`` with the file name, else the path."""
    for name, known in SETS.items():
        if Path(path).resolve() == known.resolve():
            return f"{name} set {known.name}"
    return f"set {path}"


@dataclass(frozen=True, slots=True)
class Rule:
    """A fact an item must yield, as a rule a stored memory satisfies: every
    string of ``all`` and, when ``any`` is not empty, one of ``any`` occur in
    the memory's text or context, compared after ``memory.text.normalise``."""

    all: tuple[str, ...] = ()
    any: tuple[str, ...] = ()

    def matches(self, text: str, context: str = "") -> bool:
        """True when ``text`` (a memory's text) with ``context`` (its context, ""
        for none) satisfies the rule."""
        from memory.text import normalise

        hay = normalise(text) + "\n" + normalise(context)
        return all(normalise(s) in hay for s in self.all) and \
            (not self.any or any(normalise(s) in hay for s in self.any))

    def __str__(self) -> str:
        parts = [f"all {list(self.all)}"] if self.all else []
        return " ".join(parts + ([f"any {list(self.any)}"] if self.any else []))


@dataclass(frozen=True, slots=True)
class Item:
    """One labelled message of the set (fields as in tests/data/MANIFEST.md)."""

    id: str
    lang: str
    kind: str
    text: str
    facts: tuple[Rule, ...] = ()
    context: str = ""
    sent_as: str = "person"
    tags: tuple[str, ...] = ()
    note: str = ""

    @property
    def positive(self) -> bool:
        return bool(self.facts)


def _rule(raw: object, where: str) -> Rule:
    if not isinstance(raw, dict) or set(raw) - {"all", "any"}:
        raise ValueError(f"{where}: a fact is an object with 'all' and/or 'any'")
    rule = Rule(tuple(raw.get("all", ())), tuple(raw.get("any", ())))
    strings = rule.all + rule.any
    if not strings or not all(isinstance(s, str) and s.strip() for s in strings):
        raise ValueError(f"{where}: a fact needs at least one non-empty string")
    return rule


def load(path: Path = SET) -> list[Item]:
    """The items of a capture set (one JSON object a line; blank lines and lines
    starting with ``#`` skipped). Raises ValueError, naming the line, for an
    unknown field, language, kind, ``sent_as`` or tag, a duplicate id, a
    positive kind without facts or a negative one with facts."""
    items: list[Item] = []
    seen: set[str] = set()
    for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{Path(path).name}:{no}"
        raw = json.loads(line)
        unknown = set(raw) - {"id", "lang", "kind", "text", "facts", "context", "sent_as", "tags", "note"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        item = Item(id=raw["id"], lang=raw["lang"], kind=raw["kind"], text=raw["text"],
                    facts=tuple(_rule(f, where) for f in raw.get("facts", ())), context=raw.get("context", ""),
                    sent_as=raw.get("sent_as", "person"), tags=tuple(raw.get("tags", ())), note=raw.get("note", ""))
        if item.id in seen:
            raise ValueError(f"{where}: duplicate id {item.id}")
        if item.lang not in LANGS or item.sent_as not in SENT_AS or set(item.tags) - set(TAGS):
            raise ValueError(f"{where}: lang, sent_as or tags out of {LANGS}, {SENT_AS}, {TAGS}")
        if item.kind not in POSITIVE_KINDS + NEGATIVE_KINDS:
            raise ValueError(f"{where}: unknown kind {item.kind!r}")
        if item.positive != (item.kind in POSITIVE_KINDS):
            raise ValueError(f"{where}: a {item.kind} item {'needs' if item.kind in POSITIVE_KINDS else 'has no'} facts")
        seen.add(item.id)
        items.append(item)
    return items


@dataclass(frozen=True, slots=True)
class Stored:
    """A live memory stored for an item's person: its text and context."""

    text: str
    context: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """An item and what its person's namespace held after the turn."""

    item: Item
    stored: tuple[Stored, ...]

    @property
    def found(self) -> tuple[bool, ...]:
        """Per fact of the item: a stored memory matches it."""
        return tuple(any(rule.matches(m.text, m.context) for m in self.stored) for rule in self.item.facts)

    @property
    def right(self) -> tuple[bool, ...]:
        """Per stored memory: it matches a fact of the item."""
        return tuple(any(rule.matches(m.text, m.context) for rule in self.item.facts) for m in self.stored)

    @property
    def missed(self) -> bool:
        """A fact not found, or a memory that matches none."""
        return not (all(self.found) and all(self.right))


async def feed(pipeline, items: list[Item], *, tenant: str = TENANT, first_sender: int = FIRST_SENDER,
               at: datetime = BASE) -> list[Outcome]:
    """Run every item through ``pipeline`` as a private turn of a person of its
    own (sender ``first_sender + i``, said at ``at + i`` minutes; its
    ``context`` logged a minute before as the bot's line; a forward as a
    forwarded message; a bot line only logged as the bot's), capture drained
    after each; returns what each person's namespace holds."""
    from bridges.contract import InboundMessage
    from memory.identity import resolve
    from memory.store import ChatLine
    from memory.types import ChatKind, ChatRef

    store = pipeline.core.store
    persona = pipeline.tenant(tenant).persona_name
    outcomes = []
    for i, item in enumerate(items):
        sender, said = str(first_sender + i), at + timedelta(minutes=i)
        chat = ChatRef("tg", ChatKind.PRIVATE, sender)
        if item.context:
            await asyncio.to_thread(store.append_chat, tenant, chat,
                                    ChatLine("bot", "bot", item.context, said - CONTEXT_BEFORE, "", persona))
        if item.sent_as == "bot":
            await asyncio.to_thread(store.append_chat, tenant, chat, ChatLine("bot", "bot", item.text, said, "", persona))
        else:
            msg = InboundMessage(platform="tg", message_id=f"m{i}", sender_id=sender, sender_name="bench",
                                 chat_kind=ChatKind.PRIVATE, chat_id=sender, text=item.text, timestamp=said,
                                 forwarded=item.sent_as == "forward", is_command=item.text.startswith("/"))
            await pipeline.handle(tenant, msg, background_capture=True)
            await pipeline.drain()
        ns = await asyncio.to_thread(resolve, store, tenant, "tg", sender)
        memories = await asyncio.to_thread(pipeline.core.list, ns, 200)
        outcomes.append(Outcome(item, tuple(Stored(m.text, m.context) for m in reversed(memories))))
    return outcomes


@dataclass(frozen=True, slots=True)
class Tally:
    """Counts over a group of outcomes: ``items``, ``facts``, ``found`` (facts a
    memory matches), ``stored`` (memories), ``right`` (memories matching a fact
    of their item), ``storing`` (items that stored anything)."""

    label: str
    items: int = 0
    facts: int = 0
    found: int = 0
    stored: int = 0
    right: int = 0
    storing: int = 0

    @property
    def recall(self) -> float:
        """found / facts in [0, 1]; nan without facts."""
        return self.found / self.facts if self.facts else float("nan")

    @property
    def precision(self) -> float:
        """right / stored in [0, 1]; nan when nothing was stored."""
        return self.right / self.stored if self.stored else float("nan")

    @classmethod
    def of(cls, label: str, outcomes: list[Outcome]) -> Tally:
        return cls(label, len(outcomes), sum(len(o.item.facts) for o in outcomes), sum(sum(o.found) for o in outcomes),
                   sum(len(o.stored) for o in outcomes), sum(sum(o.right) for o in outcomes),
                   sum(1 for o in outcomes if o.stored))


@dataclass(frozen=True)
class Report:
    """``kinds``: a Tally per (lang, kind) present; ``totals``: per (lang, part)
    with part ``positives`` / ``negatives`` / ``all`` and lang ``all`` for both
    languages; ``tags``: per surface tag present; ``misses``: outcomes with a
    fact not found or a memory matching none, in set order."""

    kinds: dict[tuple[str, str], Tally]
    totals: dict[tuple[str, str], Tally]
    tags: dict[str, Tally]
    misses: tuple[Outcome, ...]
    outcomes: tuple[Outcome, ...] = field(repr=False, default=())


def score(outcomes: list[Outcome]) -> Report:
    """The report of ``outcomes`` (see Report)."""
    kinds = {}
    for lang in LANGS:
        for kind in POSITIVE_KINDS + NEGATIVE_KINDS:
            group = [o for o in outcomes if o.item.lang == lang and o.item.kind == kind]
            if group:
                kinds[(lang, kind)] = Tally.of(kind, group)
    totals = {}
    for lang in (*LANGS, "all"):
        mine = [o for o in outcomes if lang in ("all", o.item.lang)]
        for part, group in (("positives", [o for o in mine if o.item.positive]),
                            ("negatives", [o for o in mine if not o.item.positive]), ("all", mine)):
            totals[(lang, part)] = Tally.of(part, group)
    tags = {tag: Tally.of(tag, [o for o in outcomes if tag in o.item.tags]) for tag in TAGS
            if any(tag in o.item.tags for o in outcomes)}
    return Report(kinds, totals, tags, tuple(o for o in outcomes if o.missed), tuple(outcomes))


_HEADERS = ["lang", "kind", "items", "facts", "found", "recall", "stored", "right", "precision", "storing"]


def _row(lang: str, t: Tally) -> list:
    return [lang, t.label, t.items, t.facts, t.found, t.recall, t.stored, t.right, t.precision, t.storing]


def render(report: Report, *, verbose: bool = False, title: str = "capture") -> str:
    """The report as plain text tables (bench.table); with ``verbose`` the
    misses after them, one block per item."""
    blocks = [table(title, _HEADERS, [_row(lang, t) for (lang, _kind), t in report.kinds.items()]),
              table("totals (precision of 'all': every memory stored, those of negatives counting as wrong)", _HEADERS,
                    [_row(lang, t) for (lang, _part), t in report.totals.items()])]
    if report.tags:
        blocks.append(table("by surface tag", _HEADERS[1:], [_row("", t)[1:] for t in report.tags.values()]))
    if verbose:
        lines = [f"misses ({len(report.misses)} items)"]
        for o in report.misses:
            lines.append(f"  {o.item.id}  {o.item.text!r}" + (f"  (after {o.item.context!r})" if o.item.context else "")
                         + (f"  [{o.item.sent_as}]" if o.item.sent_as != "person" else ""))
            for rule, ok in zip(o.item.facts, o.found):
                if not ok:
                    lines.append(f"      not found: {rule}")
            for m, ok in zip(o.stored, o.right):
                lines.append(f"      stored{'' if ok else ' (no fact)'}: {m.text!r}"
                             + (f"  context {m.context!r}" if m.context else ""))
            if not o.stored:
                lines.append("      stored: nothing")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def below(report: Report, min_precision: float | None, min_recall: float | None) -> list[str]:
    """What falls below the thresholds, per language: precision over all items
    (nothing stored counts as no wrong memory) and recall over the positives."""
    out = []
    for lang in LANGS:
        if (lang, "all") not in report.totals or not report.totals[(lang, "all")].items:
            continue
        p, r = report.totals[(lang, "all")].precision, report.totals[(lang, "positives")].recall
        if min_precision is not None and p == p and p < min_precision:
            out.append(f"{lang} precision {p:.3f} < {min_precision:.3f}")
        if min_recall is not None and r == r and r < min_recall:
            out.append(f"{lang} recall {r:.3f} < {min_recall:.3f}")
    return out


def run(embedder: str | None = None, *, verbose: bool = False, min_precision: float | None = None,
        min_recall: float | None = None, path: Path | str = SET) -> int:
    """Build a pipeline in a temporary data root (``embedder``: the offline model,
    None: the gateway's default), feed the set (``path``: a file, or ``dev`` /
    ``heldout``, see set_path), print the report, the set named in its header;
    0, or 1 when a threshold is given and missed (``below``)."""
    from gateway.config import load_settings
    from gateway.service import build_pipeline

    started = time.perf_counter()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    path = set_path(path)
    items = load(path)
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-capture-"))
    try:
        settings = load_settings(data_dir=root, **({"embed_model": embedder} if embedder else {}))
        pipeline = build_pipeline(settings)
        try:
            name = pipeline.core.index.embedder.name
            outcomes = asyncio.run(feed(pipeline, items))
        finally:
            pipeline.core.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = score(outcomes)
    positives = sum(1 for i in items if i.positive)
    title = (f"capture [{name}]: {len(items)} chat-shaped messages ({positives} with facts, {len(items) - positives} "
             f"without; {set_label(path)}), each a private turn of its own person through Pipeline.handle, no chat model "
             f"(offline extractor), SQLite + LanceDB")
    print(render(report, verbose=verbose, title=title), flush=True)
    print(f"capture bench: {time.perf_counter() - started:.1f} s wall; load average {load_start} at start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end", flush=True)
    failed = below(report, min_precision, min_recall)
    for line in failed:
        print(f"threshold missed: {line}", flush=True)
    return 1 if failed else 0



# -- capture rate: the worker on replayed public chat logs (issue 29 item 5) ----------------------

RATE_LINES = 2_000
"""The person's lines the rate bench replays (``--quick``: ``RATE_QUICK_LINES``)."""
RATE_QUICK_LINES = 400
RATE_RATIO_GOAL = 0.8
"""Issue 29: capture at no less than this share of the embedder's own batch throughput."""
RATE_BLOCK = 32
"""Texts per ``embed_documents`` call of the embedder's reference batch rate: the run's
texts again in blocks of this many, whatever batches capture itself made (a capture
that embeds each message's facts apart is not measured against its own small calls)."""
RATE_MIX_GOAL = 300
"""Issue 29: messages/s of a real chat mix where most messages store nothing."""


@dataclass
class Replayed:
    """The chat log of a replay: the capture ``jobs`` due, in the order said, and
    how many conversations (``people``) and companion lines (``bot_lines``) it holds."""

    jobs: list = field(default_factory=list)
    people: int = 0
    bot_lines: int = 0


def replay_log(pipeline, dialogues, *, tenant: str = TENANT, first_sender: int = FIRST_SENDER,
               at: datetime = BASE, step: timedelta = timedelta(seconds=1)) -> Replayed:
    """Write ``dialogues`` (``bench.chatmix.Dialogue``) into the chat log as the
    pipeline writes a turn's lines: each conversation a private chat of a person
    of its own (sender ``first_sender + k``), its lines interleaved with the other
    conversations' one at a time (``step`` apart, from ``at``), the person's lines
    with their capture due (``Store.append_chat(capture=…)``), the companion's
    as the bot's. Returns the capture jobs, queued as a background turn queues
    them (``PendingCapture(queued=…)``). Blocking (SQL)."""
    from memory.identity import resolve
    from memory.store import ChatLine, PendingCapture, utcnow
    from memory.types import ChatKind, ChatRef

    store = pipeline.core.store
    persona = pipeline.tenant(tenant).persona_name
    out = Replayed(people=len(dialogues))
    chats = []
    for k in range(len(dialogues)):
        sender = str(first_sender + k)
        chats.append((sender, ChatRef("tg", ChatKind.PRIVATE, sender), resolve(store, tenant, "tg", sender)))
    pos = [0] * len(dialogues)
    said = at
    while any(p < len(d.lines) for p, d in zip(pos, dialogues)):
        for k, d in enumerate(dialogues):
            if pos[k] >= len(d.lines):
                continue
            role, text = d.lines[pos[k]]
            pos[k] += 1
            sender, chat, ns = chats[k]
            said += step
            if role == "bot":
                store.append_chat(tenant, chat, ChatLine("bot", "bot", text, said, "", persona))
                out.bot_lines += 1
                continue
            mid = f"r{k}-{pos[k]}"
            line_id = store.append_chat(tenant, chat, ChatLine("user", sender, text, said, mid, "bench"), capture=ns)
            out.jobs.append(PendingCapture(line_id or 0, tenant, ns, chat, mid, text, said, addressed=True,
                                           queued=utcnow()))
    return out


@dataclass(frozen=True)
class Rate:
    """One timed run of the capture worker: ``messages`` captured in ``wall`` and
    ``cpu`` seconds (the process's CPU time, every thread), ``storing`` of them
    storing something, ``memories`` stored or revised, ``embedded`` texts the
    embedder was given in ``batches`` (each one ``embed_documents`` call);
    ``stored``: the message ids that stored something; ``statements`` and
    ``commits``: the SQL statements (BEGIN and COMMIT included) and the
    commits the run sent to SQLite."""

    label: str
    messages: int
    wall: float
    cpu: float
    storing: int
    memories: int
    embedded: int
    statements: int = 0
    commits: int = 0
    batches: tuple[tuple[str, ...], ...] = field(default=(), repr=False)
    stored: frozenset[str] = field(default=frozenset(), repr=False)

    @property
    def per_s(self) -> float:
        """Messages per second (wall)."""
        return self.messages / self.wall if self.wall else float("nan")

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds per message."""
        return 1000 * self.cpu / self.messages if self.messages else float("nan")


class _SqlCount:
    """Counts the statements SQLite runs on the store's connections (its trace
    callback, so the DBAPI-level reads that bypass SQLAlchemy count too)."""

    def __init__(self, store) -> None:
        from sqlalchemy import event

        self.statements = self.commits = 0
        self.on = False
        self._engine = store.engine
        self._hook = self._checkout
        event.listen(self._engine, "checkout", self._hook)

    def _trace(self, sql: str) -> None:
        if self.on:
            self.statements += 1
            self.commits += sql.lstrip()[:6].upper() == "COMMIT"

    def _checkout(self, dbapi_conn, _record, _proxy) -> None:
        if hasattr(dbapi_conn, "set_trace_callback"):
            dbapi_conn.set_trace_callback(self._trace)

    def close(self) -> None:
        from sqlalchemy import event

        event.remove(self._engine, "checkout", self._hook)


class _Recording:
    """The embedder, keeping the document batches it is given."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.batches: list[tuple[str, ...]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_documents(self, texts):
        self.batches.append(tuple(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def timed_worker(pipeline, replayed: Replayed, label: str) -> Rate:
    """Hand every job of ``replayed`` to the pipeline's capture queue as the turns
    would (``CaptureQueue.put`` after each answer, no chat model: the batch
    worker), wait for it to drain; the time and CPU of that, and what it stored."""
    from bridges.contract import TurnResult

    index = pipeline.core.index
    recording = _Recording(index.embedder)
    index.embedder = recording
    results = [TurnResult(tenant=j.tenant, namespace=str(j.namespace), chat=j.chat.key, message_id=j.message_id)
               for j in replayed.jobs]

    async def go() -> None:
        for job, res in zip(replayed.jobs, results):
            pipeline.captures.hold(job.line_id)
            pipeline.captures.put([], job, res, None)
        await pipeline.captures.drain()
        # a lingering index write is the run's too (a revision before MemoryCore.flush_index has none)
        await asyncio.to_thread(getattr(pipeline.core, "flush_index", lambda: None))

    sql = _SqlCount(pipeline.core.store)
    try:
        sql.on = True
        w0, c0 = time.perf_counter(), time.process_time()
        asyncio.run(go())
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        sql.on = False
    finally:
        index.embedder = recording.inner
        sql.close()
    return Rate(label, len(results), wall, cpu, sum(1 for r in results if r.captured),
                sum(len(r.captured) for r in results), sum(len(b) for b in recording.batches), sql.statements,
                sql.commits, tuple(recording.batches), frozenset(r.message_id for r in results if r.captured))


def embedder_alone(embedder, batches: list[list[str]]) -> tuple[float, float]:
    """``(wall, cpu)`` seconds the embedder takes for ``batches`` by itself, one
    ``embed_documents`` call each: the throughput capture is measured against."""
    w0, c0 = time.perf_counter(), time.process_time()
    for texts in batches:
        embedder.embed_documents(texts)
    return time.perf_counter() - w0, time.process_time() - c0


def _fresh_pipeline(root: Path, embedder: str | None):
    from gateway.config import load_settings
    from gateway.service import build_pipeline

    settings = load_settings(data_dir=root, **({"embed_model": embedder} if embedder else {}))
    pipeline = build_pipeline(settings)
    pipeline.core.wait_index(120)
    return pipeline


def rate(embedder: str | None = None, *, lines: int = RATE_LINES, warm_people: int = 16,
         emit=print) -> dict[str, Rate]:
    """The capture rate bench: ``lines`` of the person's lines of the public chat
    logs (``bench.chatmix.chat_dialogues``: MemoryBank-CN, LCCC, LoCoMo, MSC; each
    conversation a person of its own in a private chat, the other side's lines
    logged as the companion's) replayed into the chat log as the pipeline writes
    them, then captured by the gateway's batch worker (``CaptureQueue``) over
    SQLite + LanceDB in a temporary data root (``embedder``: the offline model,
    None: the gateway's default). Three timed runs, each on a fresh store: the
    whole mix, then its messages that stored something, then those that stored
    nothing (each of them still in its conversation, the other lines logged but
    not captured). Each run is preceded by a warm-up (``warm_people``
    conversations of the logs not in the mix). Prints messages/s and CPU ms per message, what was
    stored and embedded, and the embedder's own throughput on the texts the run
    embedded (the same ``embed_documents`` batches, timed right after it) with
    the ratio of the two; returns the runs by label."""
    from bench.chatmix import chat_dialogues
    from gateway.capture_queue import AFTER_BATCH

    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    mix = chat_dialogues(lines)
    # the warm-up (jieba, the models, SQLite's caches): conversations of the logs not in the mix
    taken = {(d.source, d.lines[:3]) for d in mix}
    warm = [d for d in chat_dialogues(lines + 200) if (d.source, d.lines[:3]) not in taken][:warm_people]
    runs: dict[str, Rate] = {}
    alone: dict[str, tuple[float, float, int]] = {}
    name = ""
    storing_ids: set[str] = set()

    def one(label: str, dialogues, keep=None) -> None:
        nonlocal name
        root = Path(tempfile.mkdtemp(prefix="huiyi-bench-capture-rate-"))
        try:
            pipeline = _fresh_pipeline(root, embedder)
            try:
                name = pipeline.core.index.embedder.name
                if warm:
                    timed_worker(pipeline, replay_log(pipeline, warm, first_sender=FIRST_SENDER + 50_000), "warm")
                replayed = replay_log(pipeline, dialogues)
                if keep is not None:
                    replayed.jobs = [j for j in replayed.jobs if keep(j)]
                r = timed_worker(pipeline, replayed, label)
                if label == "mix":
                    storing_ids.update(r.stored)
                runs[label] = r
                wall, cpu = embedder_alone(pipeline.core.index.embedder, [list(b) for b in r.batches])
                texts = [t for b in r.batches for t in b]
                _, cpu_blocks = embedder_alone(pipeline.core.index.embedder,
                                               [texts[i:i + RATE_BLOCK] for i in range(0, len(texts), RATE_BLOCK)])
                alone[label] = (wall, cpu, r.embedded, cpu_blocks)
            finally:
                pipeline.core.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)

    one("mix", mix)
    one("storing", mix, keep=lambda j: j.message_id in storing_ids)
    one("nothing", mix, keep=lambda j: j.message_id not in storing_ids)
    rows = []
    for label, r in runs.items():
        wall, cpu, texts, cpu_blocks = alone[label]
        embedded = bool(texts)
        rows.append([label, r.messages, r.storing, r.memories, f"{r.embedded} in {len(r.batches)}",
                     r.statements / r.messages, r.commits / r.messages, r.per_s, r.cpu_ms,
                     texts / wall if embedded else "-", wall / r.wall if embedded else "-",
                     cpu / r.cpu if embedded else "-", cpu_blocks / r.cpu if embedded else "-",
                     1000 * (r.cpu - cpu) / r.messages])
    title = (f"capture rate [{name}]: {lines} lines of {len(mix)} people from the public chat logs (zh + en), each "
             f"a private chat, captured by the gateway's batch worker (CaptureQueue, {AFTER_BATCH} a batch) over "
             f"SQLite + LanceDB; 'embedder alone': the run's own embed_documents batches again, timed after it; "
             f"goal: capture >= {RATE_RATIO_GOAL}x the embedder")
    emit(table(title, ["run", "messages", "storing", "memories", "texts embedded in calls", "SQL/msg", "commits/msg",
                       "msg/s", "CPU ms/msg", "embedder alone texts/s", "capture/embedder (wall)",
                       "capture/embedder (CPU)", f"capture/embedder in blocks of {RATE_BLOCK} (CPU)",
                       "CPU ms/msg beside the embedding"], rows))
    stored, nothing = runs["storing"], runs["nothing"]
    if stored.messages and nothing.messages:
        share = stored.messages / (stored.messages + nothing.messages)
        proj = []
        for p in sorted({0.1, 0.25, 0.5, round(share, 3)}):
            wall_s = p * stored.wall / stored.messages + (1 - p) * nothing.wall / nothing.messages
            cpu_s = p * stored.cpu / stored.messages + (1 - p) * nothing.cpu / nothing.messages
            proj.append([f"{p:.0%}" + (" (these logs)" if p == round(share, 3) else ""), 1 / wall_s, 1000 * cpu_s,
                         pass_miss(1 / wall_s >= RATE_MIX_GOAL)])
        emit(table(f"capture rate of a mix by the share of messages that store something (from the 'storing' and "
                   f"'nothing' runs; goal >= {RATE_MIX_GOAL} msg/s where most store nothing)",
                   ["storing share", "msg/s", "CPU ms/msg", "goal"], proj))
    emit(f"load average {load_start} at start, {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return runs

if __name__ == "__main__":  # pragma: no cover
    import sys

    args = [a for a in sys.argv[1:] if a != "-v"]
    sys.exit(run(verbose="-v" in sys.argv, path=args[0] if args else SET))
