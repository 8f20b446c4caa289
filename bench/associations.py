"""The association channel on LoCoMo (issue 17): recall_any@k by question category
with the channel on and off, in the same run over the same stores, on the
held-out conversations, its weight fitted on the development ones.

What builds the links, all offline and from the conversations alone (never from
the questions that are reported, nor their evidence labels):

- **entity links at ingest**: every turn is stored through ``MemoryCore.add``,
  which links it to the older turns that name one of its entities
  (``memory.links.link_entities``), as of the turn's date;
- **co-recall links by replaying the conversation**: each turn, in order, is a
  query as the pipeline makes one for every message; the first
  ``REPLAY_MARKED`` hits said before that turn are marked recalled together
  through the turn's own path (``MemoryCore.note_recalled``, as of the turn's
  date), as if they had gone into the prompt, flushed every ``REPLAY_WINDOW``
  turns of a conversation (a person's marks window) into the namespace's
  pending row, which folds as the product's does, and folded at the end.
  Replays recall with the association channel off, so the links say what
  words and meaning brought together. The stores are copied after ingest; the
  replay marks one copy with the rule that links a pair only from its second
  co-use (``memory.store.pending.NEW_LINK_USES`` = ``RULE_USES``), and the same marks
  are then written into the other, "as before", with every co-used pair
  linked (``NEW_LINK_USES`` = 1).

LoCoMo's development split is its first 4 conversations and the held-out split
the other 6 (``evals.recall``), each conversation its own namespace:
links made by replaying the development questions could only ever join
memories of the development conversations, so they cannot reach a held-out
namespace and would leak the fitted questions' own answers into the fit.
The turn replay stands in for them in both splits.

The channel weight is fitted on the development split (``GRID``, best any@10,
ties to the smaller weight) and the held-out split is reported with the fitted
weight, the shipped default (``memory.recall.ASSOC_WEIGHT``) and the channel
off, and (``entities``) at the shipped default with the entity links alone,
measured before the replay adds the co-recall links; the fit is on the
shipped rule's links, and each held-out weight is reported with both replays. Reads LoCoMo from ``bench.DATA_DIR``; says so and skips when it is absent.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from bench import DATA_DIR

__all__ = ["run", "GRID", "REPLAY_MARKED", "REPLAY_WINDOW", "RULE_USES"]

log = logging.getLogger(__name__)

KS = (1, 3, 5, 10)
GRID = (0.25, 0.5, 1.0, 2.0)
"""Association channel weights tried on the development split."""
REPLAY_MARKED = 5
"""Hits of a replayed turn marked as recalled together (a prompt's worth)."""
RULE_USES = 2
"""Co-uses a pair needs before it is linked, in the replay with the rule."""
REPLAY_WINDOW = 6
"""Replayed turns of a conversation per flush of the marks: a person's 60 s
window at one line every 10 s (``memory.marks.FLUSH_EVERY_S``, ``bench.scaling``)."""


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _replay(core, suite, params, uses: int) -> list[tuple | None]:
    """Replay every conversation turn of ``suite`` as a query (module docstring),
    marking through the turn's path as it goes (``_mark``: later turns' recalls
    see the flushed access times, as a person's do); returns the marks made, in
    order: ``(namespace, ids, said at)`` for a turn that marked two or more
    memories recalled together, ``None`` for a flush (every ``REPLAY_WINDOW``
    turns of a conversation). The replay recalls with the channel off, so what
    it marks does not depend on the links: ``_mark`` writes the same marks into
    a copy of the stores with another rule."""
    out: list[tuple | None] = []

    def turns():
        for world, docs in suite.worlds.items():
            ns = suite.namespace(world)
            for n, d in enumerate(docs, 1):
                hits = core.recall(ns, [d.text], params=params, now=d.said_at)
                ids = [h.memory.id for h in hits if h.memory.created_at is not None
                       and h.memory.created_at < d.said_at][:REPLAY_MARKED]
                if len(ids) > 1:
                    out.append((ns, ids, d.said_at))
                    yield out[-1]
                if n % REPLAY_WINDOW == 0:
                    out.append(None)
                    yield None

    _mark(core, turns(), uses)
    return out


def _mark(core, marks, uses: int) -> int:
    """Write ``marks`` (``_replay``'s) through the turn's path — ``note_recalled``,
    ``flush_marks``, a ``fold_marks`` at the end — with
    ``memory.store.pending.NEW_LINK_USES`` set to ``uses`` meanwhile (the folds
    read it); returns the turns marked."""
    from memory.store import pending

    kept, pending.NEW_LINK_USES = pending.NEW_LINK_USES, uses
    marked = 0
    try:
        for m in marks:
            if m is None:
                core.flush_marks()
            else:
                core.note_recalled(*m)
                marked += 1
        core.fold_marks()
    finally:
        pending.NEW_LINK_USES = kept
    return marked


def _evaluate(core, suite, key_of, variants: dict, cores: dict | None = None):
    """Every query of ``suite`` once per variant (name → RecallParams), alternating per
    query; ``cores``: the core of a variant (name → MemoryCore), ``core`` for the others."""
    from evals.recall import RecallRun

    runs = {name: RecallRun() for name in variants}
    cores = cores or {}
    for q in suite.queries:
        for name, p in variants.items():
            core_ = cores.get(name, core)
            t0 = time.perf_counter()
            hits = []
            for w in q.worlds:
                hits += core_.recall(suite.namespace(w), list(q.tail), params=p, now=q.asked_at)
            dt = time.perf_counter() - t0
            keys: list[str] = []
            for h in sorted(hits, key=lambda h: -h.score):
                key = key_of.get(h.memory.id, h.memory.source_message_id or "?")
                if key not in keys:
                    keys.append(key)
            runs[name].retrieved.append(keys[:max(KS)])
            runs[name].latency_s.append(dt / max(1, len(q.worlds)))
    return runs


def run(embedder_name: str, workdir: Path, quick: bool = False, cache: Path | None = None) -> list[str]:
    """The on/off figures (module docstring) with ``embedder_name``, stores under
    ``workdir``; returns the printed blocks (one line saying why when LoCoMo is
    absent). ``quick``: the first 5 conversations (4 development, 1 held out)."""
    from evals.recall import CachedEmbedder, ingest, load_locomo, metrics, report_lines, split
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.recall import ASSOC_WEIGHT, RecallParams
    from memory.store import Store
    from memory.text import initialise

    path = DATA_DIR / "memory" / "locomo10.json"
    if not path.is_file():
        return [f"associations: skipped, no LoCoMo at {path} (set HUIYI_EVAL_DATA_DIR or --data-dir)"]
    initialise()
    inner = make_embedder(embedder_name)
    embedder = CachedEmbedder(inner, cache) if cache is not None else inner
    suite = load_locomo(path, conversations=5 if quick else None, layout="conversation")
    workdir.mkdir(parents=True, exist_ok=True)
    before = workdir / "as-before"
    if before.exists():
        shutil.rmtree(before)
    core = MemoryCore(Store(f"sqlite:///{workdir / 'huiyi.db'}"), SearchIndex(workdir / "index", embedder),
                      marks_every_s=1e9)
    old = None
    blocks = [f"associations: LoCoMo from {path} [{embedder_name}, raw, one namespace per conversation]"]
    try:
        t0 = time.perf_counter()
        log.info("associations: ingest %d turns of %d conversations", suite.n_docs, len(suite.worlds))
        key_of = ingest(core, suite, "raw")
        ingest_s = time.perf_counter() - t0
        log.info("associations: ingest %.1f s; held-out questions with the entity links alone", ingest_s)
        entity_links = sum(core.store.count_links(suite.namespace(w)) for w in suite.worlds)
        dev, test = split(suite, "dev"), split(suite, "test")
        off = RecallParams(k=max(KS), assoc_weight=0.0)
        if isinstance(embedder, CachedEmbedder):  # one batch instead of a query embedding per turn and question
            embedder.prime_queries([d.text for docs in suite.worlds.values() for d in docs]
                                   + [q.tail[-1] for q in suite.queries])
        entity_only = _evaluate(core, test, key_of, {"entities": replace(off, assoc_weight=ASSOC_WEIGHT)})
        log.info("associations: copying the stores for the replay as before")
        core.close()
        before.mkdir()
        shutil.copy2(workdir / "huiyi.db", before / "huiyi.db")
        shutil.copytree(workdir / "index", before / "index")
        core = MemoryCore(Store(f"sqlite:///{workdir / 'huiyi.db'}"), SearchIndex(workdir / "index", embedder),
                          marks_every_s=1e9)
        old = MemoryCore(Store(f"sqlite:///{before / 'huiyi.db'}"), SearchIndex(before / "index", embedder),
                         marks_every_s=1e9)
        log.info("associations: replaying the turns (rule, then as before)")
        t0 = time.perf_counter()
        replayed = _replay(core, suite, replace(off, k=20), RULE_USES)
        marked = sum(1 for m in replayed if m is not None)
        replay_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        marked_old = _mark(old, replayed, 1)
        replay_old_s = time.perf_counter() - t0
        links = sum(core.store.count_links(suite.namespace(w)) for w in suite.worlds)
        links_old = sum(old.store.count_links(suite.namespace(w)) for w in suite.worlds)
        blocks.append(f"links: {entity_links} entity links at ingest ({suite.n_docs} turns, {ingest_s:.1f} s); "
                      f"after replaying every turn ({marked} turns marked {REPLAY_MARKED} hits recalled together, "
                      f"{replay_s:.1f} s) {links} with a pair linked from its {RULE_USES}nd co-use, {links_old} "
                      f"with every co-used pair linked ({marked_old} turns, {replay_old_s:.1f} s); "
                      f"load average {_load()}")
        log.info("associations: replay %.1f s; fitting on %d dev questions", replay_s, len(dev.queries))
        t0 = time.perf_counter()
        fit = _evaluate(core, dev, key_of, {"off": off, **{f"w={w:g}": replace(off, assoc_weight=w) for w in GRID}})
        fit_s = time.perf_counter() - t0
        at10 = {name: metrics(dev, r, KS)["any@10"] for name, r in fit.items()}
        best_w = min(GRID, key=lambda w: (-at10[f"w={w:g}"], w))
        helps = at10[f"w={best_w:g}"] > at10["off"]
        rows = "  ".join(f"{name} {v:.3f}" for name, v in at10.items())
        blocks.append(f"fit on dev ({len(dev.queries)} questions, {fit_s:.1f} s): any@10 {rows}; best weight "
                      f"{best_w:g}{'' if helps else ' (no better than off)'}; shipped default {ASSOC_WEIGHT:g}")
        variants = {"off": off, f"on {best_w:g}": replace(off, assoc_weight=best_w),
                    f"on {best_w:g} as before": replace(off, assoc_weight=best_w)}
        if best_w != ASSOC_WEIGHT:
            variants[f"on {ASSOC_WEIGHT:g}"] = replace(off, assoc_weight=ASSOC_WEIGHT)
            variants[f"on {ASSOC_WEIGHT:g} as before"] = replace(off, assoc_weight=ASSOC_WEIGHT)
        t0 = time.perf_counter()
        runs = {**_evaluate(core, test, key_of, variants,
                            {name: old for name in variants if name.endswith("as before")}), **entity_only}
        test_s = time.perf_counter() - t0
        title = (f"association channel on/off, held-out LoCoMo ({len(test.queries)} questions, "
                 f"{len(test.worlds)} conversations, {test_s:.1f} s; load average {_load()}); 'entities': "
                 f"weight {ASSOC_WEIGHT:g} with the entity links alone, before the replay; 'as before': "
                 f"every co-used pair linked, else from its {RULE_USES}nd co-use")
        blocks.append("\n".join(report_lines(test, runs, KS, title)))
    finally:
        core.close()
        if old is not None:
            old.close()
    return blocks
