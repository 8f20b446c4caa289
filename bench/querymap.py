"""e5-small's query-to-passage map: fit it and measure why it is needed (``python -m bench querymap``).

A line captured as it was said already has a vector: the query vector its turn
made. e5 is asymmetric (``query: `` / ``passage: `` prefixes), and storing that
query vector as the memory's vector made such memories stand out for unrelated
lines (docs/recall.md, "A line stored as it was said"). This bench:

1. embeds every line of the dev sets (LoCoMo's dev conversations, MemoryBank-CN's
   dev people, DuLeMon's dev dialogues, MSC) and of the held-out ones (the other
   conversations, people and dialogues, LCCC, KdConv, the English small talk)
   as a query and as a passage;
2. fits ``A, b`` of ``unit(q + q·A + b) ≈ p`` by ridge least squares towards the
   identity on the dev lines, then spreads the estimate away from the passages'
   mean by ``s`` (least squares shrinks towards the mean, and a vector nearer
   the mean is nearer every other line); the table over ``s`` on a fifth of the
   dev lines held back from the fit says how much nearer other lines' queries a
   mapped vector lies than the passage vector, over all pairs and over the
   closest 5 % (``SPREAD``: the shipped value, between the two zeros);
3. prints, on the held-out lines, the cosine of the query vector and of the
   mapped one to the passage vector, and how much nearer other lines' queries
   each lies than the passage vector; then, per person of the precision bench's
   sets, how often an unrelated line's best memory stands out (``standout`` ≥
   3.5 above a 0.84 cosine) and a question's evidence stands out (≥ 2.5) when
   the memories are stored as passages, when half of them (drawn at random) are
   stored as their query vectors, when that half is stored mapped, and when all are query vectors;
4. times ``embed_documents`` of one line against ``document_from_query`` (thread
   CPU, alternating) and writes the fitted map as float16 to the current directory
   (``memory.embed.E5_QUERY_MAP`` is the shipped one: copy it there to ship a refit).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["texts", "fit", "spread_factor", "run"]

DIM = 384
LAMBDA = 0.1
"""Ridge weight towards the identity (dev fifth: mean self-cosine 0.9862 at 0.1, 0.9861 at 0.01, 0.9846 at 3)."""
SPREAD = 1.06
"""The shipped map's ``s``. On the dev fifth held back from the fit, the closest 5 %
of pairs lie as near other lines' queries as the passages do at s ≈ 1.035–1.045
and all pairs at ≈ 1.065–1.07 (two draws of the fifth); 1.06 lies between them,
nearer the quiet side (a mapped memory a little further from an unrelated line)."""


def texts(data_dir: Path) -> tuple[list[str], list[str]]:
    """(dev lines, held-out lines), distinct and stripped: every document and question
    line of LoCoMo (per speaker), MemoryBank-CN and DuLeMon by their splits, MSC's
    dialogue lines as dev, LCCC / KdConv / the English small talk as held out (the
    precision bench's negatives). A line in both is held out."""
    from bench.precision import en_lines, zh_lines
    from evals.recall import DULEMON_FILE, LOCOMO_FILE, load_dulemon, load_locomo, load_memorybank, split

    out: dict[str, set[str]] = {"dev": set(), "test": set()}
    for suite in (load_locomo(data_dir / LOCOMO_FILE, layout="speaker"), load_memorybank(data_dir),
                  load_dulemon(data_dir / DULEMON_FILE)):
        for which in ("dev", "test"):
            part = split(suite, which)
            out[which] |= {d.text.strip() for docs in part.worlds.values() for d in docs if d.text.strip()}
            out[which] |= {t.strip() for q in part.queries for t in q.tail if t.strip()}

    def walk(x) -> None:
        if isinstance(x, str):
            if 3 < len(x) < 400:
                out["dev"].add(x.strip())
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    msc = data_dir / "memory" / "msc_dialogue_session3_test_first60.jsonl"
    if msc.is_file():
        for line in msc.read_text(encoding="utf-8").splitlines():
            walk(json.loads(line))
    out["test"] |= {t for _, t in zh_lines(data_dir)} | {t for _, t in en_lines()}
    return sorted(out["dev"] - out["test"]), sorted(out["test"])


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def _embed(emb, lines: list[str], batch: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(query vectors, passage vectors), float64 ``(n, 384)`` each, in batches of
    similar lengths (the same vectors as one at a time, to a cosine of 1.00000)."""
    from memory.embed import _clip

    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    q = np.zeros((len(lines), DIM))
    p = np.zeros((len(lines), DIM))
    qe, pe = emb._engine(emb.query_precision), emb._engine(emb.document_precision)
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        chunk = _clip([lines[i] for i in idx])
        q[idx] = _unit(np.asarray(qe.query(chunk), dtype=np.float64))
        p[idx] = _unit(np.asarray(pe.passage(chunk), dtype=np.float64))
    return q, p


def fit(q: np.ndarray, p: np.ndarray, lam: float = LAMBDA) -> np.ndarray:
    """``W`` ``(385, 384)`` minimising ‖[q 1]·W − p‖² + lam‖W − [I; 0]‖² (the bias row
    unpenalised): ridge least squares towards the identity."""
    q1 = np.hstack([q, np.ones((len(q), 1))])
    reg = np.eye(DIM + 1)
    reg[-1, -1] = 1e-6
    prior = np.vstack([np.eye(DIM), np.zeros((1, DIM))])
    return np.linalg.solve(q1.T @ q1 + lam * reg, q1.T @ p + lam * reg @ prior)


def spread(w: np.ndarray, mean_p: np.ndarray, s: float) -> np.ndarray:
    """``w`` with its estimate moved away from ``mean_p`` by ``s``: ``s·(q·W + b) + (1 − s)·mean_p``."""
    out = w.copy()
    out[:DIM] *= s
    out[DIM] = s * w[DIM] + (1 - s) * mean_p
    return out


def _apply(w: np.ndarray, q: np.ndarray) -> np.ndarray:
    return _unit(q @ w[:DIM] + w[DIM])


def _nearer(q: np.ndarray, stored: np.ndarray, p: np.ndarray, pairs: int = 20000, seed: int = 0
            ) -> tuple[float, float, float]:
    """How much nearer other lines' queries ``stored`` lies than the passage vectors
    ``p`` of the same lines: (mean over random pairs, mean over the closest 5 %,
    standard deviation)."""
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(q), pairs), rng.integers(0, len(q), pairs)
    keep = i != j
    i, j = i[keep], j[keep]
    base = np.sum(q[i] * p[j], 1)
    diff = np.sum(q[i] * stored[j], 1) - base
    top = base > np.percentile(base, 95)
    return float(diff.mean()), float(diff[top].mean()), float(diff.std())


def spread_factor(q: np.ndarray, p: np.ndarray, grid=np.arange(1.0, 1.1001, 0.01)) -> tuple[float, list[str]]:
    """The map fitted on four fifths of the dev lines and judged on the fifth held
    back at each ``s`` of ``grid`` (module docstring, step 2): returns the ``s`` at
    which all pairs and the closest 5 % together lie as near other lines' queries
    as the passages do (the least |mean + closest|), and the lines of its table."""
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(q))
    cut = int(0.8 * len(idx))
    tr, va = idx[:cut], idx[cut:]
    w = fit(q[tr], p[tr])
    rows, best = [], (math.inf, 1.0)
    for s in grid:
        m = _apply(spread(w, p[tr].mean(0), s), q[va])
        mean, top, sd = _nearer(q[va], m, p[va])
        rows.append(f"  s {s:.2f}: nearer other lines by {mean:+.4f} (closest 5 % {top:+.4f}, sd {sd:.4f}), "
                    f"cosine to the passage {np.sum(m * p[va], 1).mean():.4f}")
        best = min(best, (abs(mean + top), round(float(s), 2)))
    return best[1], rows


def _standing_out(data_dir: Path, vec: dict[str, tuple[np.ndarray, np.ndarray]], w: np.ndarray) -> list[str]:
    """Per set and split: unrelated lines whose best memory stands out, and questions
    whose evidence does, with memories stored as passages, half as queries, half mapped,
    all as queries."""
    from bench.precision import en_lines, negatives, zh_lines
    from evals.recall import LOCOMO_FILE, load_locomo, load_memorybank

    def z(cos: np.ndarray, i: int) -> float:
        others = np.delete(cos, i)
        return (cos[i] - others.mean()) / others.std() if others.std() > 1e-9 else math.inf

    rng = np.random.default_rng(1)
    out = ["set / split: unrelated lines n, share whose best memory stands out (z >= 3.5, cosine >= 0.84) and "
           "share of those best memories that are of the half stored otherwise — passages / half queries / half "
           "mapped / all queries; questions n, share whose evidence stands out (z >= 2.5), the same four"]
    for name, suite, lines, lang in (
            ("LoCoMo", load_locomo(data_dir / LOCOMO_FILE, layout="speaker"), en_lines(), "en"),
            ("MemoryBank-CN", load_memorybank(data_dir), zh_lines(data_dir), "zh")):
        negs, _ = negatives(suite, lines, lang, 10)
        dev = set(suite.units[:suite.dev_units])
        for part in ("dev", "held-out"):
            neg = {k: [] for k in "PQMA"}
            gold = {k: [] for k in "PQMA"}
            for world, docs in suite.worlds.items():
                unit = next((u for u in suite.units if world == u or world.startswith(f"{u}.")), world)
                if (unit in dev) != (part == "dev"):
                    continue
                docs = [d for d in docs if d.text.strip() in vec]
                if len(docs) < 4:
                    continue
                p = np.array([vec[d.text.strip()][1] for d in docs])
                q = np.array([vec[d.text.strip()][0] for d in docs])
                half = rng.random(len(docs)) < 0.5
                kinds = {"P": p, "Q": np.where(half[:, None], q, p), "M": np.where(half[:, None], _apply(w, q), p),
                         "A": q}
                keys = [d.key for d in docs]
                asked = [(n.line, None) for n in negs if n.world == world] + \
                        [(x.tail[-1], x.gold) for x in suite.queries if world in x.worlds and x.gold]
                for line, want in asked:
                    if line.strip() not in vec:
                        continue
                    v = vec[line.strip()][0]
                    for k, m in kinds.items():
                        cos = m @ v
                        if want is None:
                            i = int(np.argmax(cos))
                            neg[k].append((z(cos, i) >= 3.5 and cos[i] >= 0.84, bool(half[i])))
                        elif any(key in want for key in keys):
                            i = max((i for i, key in enumerate(keys) if key in want), key=lambda i: cos[i])
                            gold[k].append(z(cos, i) >= 2.5)

            def share(xs) -> str:
                return f"{sum(xs) / len(xs):.3f}" if xs else "-"

            out.append(f"  {name} {part}: unrelated {len(neg['P'])}: stands out "
                       f"{' / '.join(share([a for a, _ in neg[k]]) for k in 'PQMA')}, best is of the half "
                       f"{' / '.join(share([b for _, b in neg[k]]) for k in 'PQM')}; questions {len(gold['P'])}: "
                       f"evidence stands out {' / '.join(share(gold[k]) for k in 'PQMA')}")
    return out


def _cpu(emb, lines: list[str]) -> str:
    """Thread CPU of ``embed_documents([line])`` against ``document_from_query`` of
    its query vector, alternating line by line."""
    doc, mapped = [], []
    for line in lines:
        v = emb.embed_query(line)
        t = time.thread_time()
        emb.embed_documents([line])
        doc.append(time.thread_time() - t)
        t = time.thread_time()
        emb.document_from_query(v)
        mapped.append(time.thread_time() - t)
    return (f"CPU per stored line ({len(lines)} lines, alternating): embed_documents p50 "
            f"{1000 * np.median(doc):.2f} ms (mean {1000 * np.mean(doc):.2f}), document_from_query p50 "
            f"{1000 * np.median(mapped):.3f} ms (mean {1000 * np.mean(mapped):.3f})")


def run(data_dir: Path, out_dir: Path, *, quick: bool = False, emit: Callable[[str], None] = print) -> int:
    """Fit, measure and write the map into ``out_dir`` (module docstring); returns 0, or 2 when data is missing."""
    from memory.embed import E5_QUERY_MAP, E5SmallEmbedder

    t0 = time.perf_counter()
    try:
        dev, held = texts(Path(data_dir))
    except Exception as exc:  # noqa: BLE001 - the loaders' errors say which file
        emit(f"querymap: {exc}")
        return 2
    if quick:
        dev, held = dev[::4], held[::4]
    emb = E5SmallEmbedder()
    emit(f"querymap: {len(dev)} dev lines, {len(held)} held-out lines; load average {_load()}")
    qd, pd = _embed(emb, dev)
    qh, ph = _embed(emb, held)
    emit(f"  embedded as query and passage in {time.perf_counter() - t0:.0f} s")
    picked, rows = spread_factor(qd, pd)
    s = SPREAD
    emit("spread factor on the dev fifth held back from the fit:\n" + "\n".join(rows) +
         f"\n  both near zero at s = {picked:.2f}; the map is written at the shipped SPREAD = {s:.2f}")
    w = spread(fit(qd, pd), pd.mean(0), s)
    for label, stored in (("query vector", qh), ("least squares (s = 1)", _apply(fit(qd, pd), qh)),
                          (f"mapped (s = {s:.2f})", _apply(w, qh))):
        mean, top, sd = _nearer(qh, stored, ph)
        cos = np.sum(stored * ph, 1)
        emit(f"held out, {label}: cosine to the passage vector mean {cos.mean():.4f}, p5 "
             f"{np.percentile(cos, 5):.4f}, min {cos.min():.4f}; nearer other lines' queries than the passage by "
             f"{mean:+.4f} (closest 5 % of pairs {top:+.4f}, sd {sd:.4f})")
    vec = {t: (a, b) for t, a, b in zip(dev, qd, pd)} | {t: (a, b) for t, a, b in zip(held, qh, ph)}
    emit("\n".join(_standing_out(Path(data_dir), vec, w)))
    stored = w.copy()
    stored[:DIM] -= np.eye(DIM)
    path = Path(out_dir) / E5_QUERY_MAP.name
    np.save(path, stored.astype(np.float16))
    shipped = np.load(E5_QUERY_MAP).astype(np.float32) if E5_QUERY_MAP.is_file() else None
    emit(f"map written to {path}" + (f"; largest difference from the shipped {E5_QUERY_MAP.name}: "
                                     f"{np.abs(shipped - stored).max():.4f}" if shipped is not None else ""))
    emit(_cpu(emb, held[::max(1, len(held) // 200)][:200]))
    emit(f"querymap finished in {time.perf_counter() - t0:.0f} s; load average {_load()}")
    return 0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
