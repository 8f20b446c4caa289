"""Recall's in-process namespace cache: a namespace's searchable state held in
memory, so that a recall's cost does not grow with the store (issue 14).

A ``NamespaceView`` is one namespace's live memories as a search reads them:
ids, each memory's disclosure key (the group it was learned in, for DESIGN
rule 6), its tokens (``memory.text.tokens``) as BM25 postings with document
lengths, and its embeddings as one float32 matrix ``(n, dim)``. The exact
recall path searches a view built from the rows it has just read; the cached
path searches a view kept in a ``NamespaceCache`` — the same code on the same
data, so the two give identical channels. A view built from a namespace's
previous one and what changed since (``NamespaceView.appended``) holds the same
live rows in another order, plus dead ones masked out of every search: BM25
statistics and per-row scores do not depend on the order, and ties are broken
by id.

A view holds its vectors in one of three forms (``VectorForm``): a float32
matrix; int8 codes with a scale and an error bound per row, the float32 rows in
an unlinked spill file, searched by scoring every row from its codes and
re-scoring from float32 the rows the bounds cannot rule out, so the channel's
ids, order and cosines are the float32 ones (``NamespaceView.nearest``); or
none (the vector channel through the index). ``NamespaceCache.form`` picks the
richest that fits: a namespace within the per-memory estimate (``fits``) in
float32; a larger one by what its own view measured, loaded once without
vectors to be measured.

``NamespaceCache`` is an LRU of views bounded in bytes (``max_mib``). Each view
is stamped with the namespace's write version (``Store.namespace_state``)
read *before* its rows, and is used only while the stored version still equals
the stamp: any write in any process (add, edit, forget, move) bumps the
version in its own transaction, so the next recall anywhere reloads. A reload
reads which memories changed since its stamp from the store's change log
(``Store.changes_since``) and only those rows; when the log cannot tell (too
many writes behind, a write that changed rows it did not name) it reads the
rows' stamps (id, row version, visibility, origin) and the texts of the new or
changed rows only. Either way it appends them to the old view and masks out
the removed rows and the old versions of changed ones, so its cost grows with
what changed (plus, without the log, one read of the stamps). When more than a quarter of the
rows would be dead or new, it reads the whole namespace instead, reusing the
old view's tokens and vectors of rows whose text did not change; a cold load reads the namespace's
vectors from the index in one read (``SearchIndex.namespace_vectors``) and
embeds only what it lacks.

BM25: Okapi BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative IDF,
statistics (N, df, average length) over the documents disclosed in the chat
of the query — the namespace's own, never the whole store's.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memory.errors import NamespaceError
from memory.text import token_tuple
from memory.types import ChatRef, Namespace, Visibility

if TYPE_CHECKING:
    from memory.index import SearchIndex
    from memory.store import MemoryText, Store

__all__ = ["NamespaceView", "NamespaceCache", "Bm25Postings", "VectorForm"]

log = logging.getLogger(__name__)

_DOC_OVERHEAD = 360
"""Bytes counted per cached memory beyond its vector, postings, text and tokens:
its id string (61), its slots in the row lists (8 each), its origin pair (64),
its stamp (80) and its entry in the id lookup (~100), as ``sys.getsizeof`` measures them."""
_TERM_SLOT = 72
"""Bytes counted per distinct term of a view beyond its postings' own objects
(``_posting_bytes``): its slot in the postings dict; the key string is counted
with the tokens (``_doc_bytes``)."""
_TOKEN_BYTES = 72
"""Bytes counted per token a view keeps (``NamespaceView.docs``): each is a string
of its own (jieba and the tokenizer make new ones), 67 B on average over 3,000
chat-mix lines (``sys.getsizeof``)."""


_FIT_BYTES_PER_MEMORY = 2400
"""What ``fits`` and ``fits_postings`` count per memory beyond its vector: the
postings, texts, tokens and overhead of a view as ``NamespaceView.nbytes`` counts them,
taken high on purpose — short chat memories with their own vocabulary came to
~2.1 KB each (17 zh/en/emoji memories, tokens counted, postings in ``_packed``'s
forms, 16 spare rows; 3.8 KB with a pair of arrays per term and 64 spare rows),
synthetic template text to 0.44–0.57 KB before the tokens were counted (``bench.synthetic``). An estimate below a view's real size made a view
that can never be kept, reloaded at every recall."""

_MIN_BYTES_PER_MEMORY = 256
"""The least a memory is expected to cost a view beyond its vector (the
synthetic template texts of ``bench.synthetic`` measured 447 B at 8k memories):
a namespace over ``fits``' estimate is loaded to be measured (``form``) only
when this much each would fit half the bound."""

_SIZES_KEPT = 4096
"""Namespaces whose measured size ``NamespaceCache`` remembers (least recent forgotten first)."""

_VIEW_OVERHEAD = 2048
"""Bytes counted per view whatever its size, so that views of empty namespaces
(a recall of someone who has no memories yet) still count against the bound."""


def _doc_bytes(doc: Sequence[str]) -> int:
    """Bytes one row's tokens hold: the tuple and ``_TOKEN_BYTES`` a token."""
    return sys.getsizeof(doc) + len(doc) * _TOKEN_BYTES


def _group_key(visibility: Visibility, origin: str) -> str:
    """The group a memory discloses in (``ChatRef.group_key`` of its origin when it
    is a group memory), "" for a private one or an origin that does not parse
    (which then shows in no group: fails closed)."""
    if visibility is not Visibility.GROUP or not origin:
        return ""
    try:
        return ChatRef.parse(origin).group_key
    except NamespaceError:
        return ""


def _packed(ix: np.ndarray, tf: np.ndarray) -> int | np.ndarray | tuple[np.ndarray, np.ndarray]:
    """One term's postings (document indices int32 ``ix``, term frequencies
    float64 ``tf``) in the smallest form ``Bm25Postings`` keeps: the index alone
    (a Python int) for one document holding it once, the index array for
    several documents holding it once each, else the pair. Over chat-mix
    memories 94% of a view's terms are held once per document and 62% by one
    document, and each numpy array costs a 112-byte header beside its data."""
    if len(ix) == 1 and tf[0] == 1.0:
        return int(ix[0])
    if (tf == 1.0).all():
        return ix
    return ix, tf


def _arrays(p: int | np.ndarray | tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(ix int32, tf float64)`` of a term's postings in any of ``_packed``'s forms."""
    if type(p) is int:
        return np.array([p], dtype=np.int32), np.ones(1, dtype=np.float64)
    if type(p) is tuple:
        return p  # type: ignore[return-value]
    return p, np.ones(len(p), dtype=np.float64)  # type: ignore[arg-type]


def _posting_bytes(p: int | np.ndarray | tuple[np.ndarray, np.ndarray]) -> int:
    """Bytes one term's postings hold, its dict slot included (``_TERM_SLOT``)."""
    if type(p) is int:
        return _TERM_SLOT + 32  # an int object (28) rounded to the allocator's 16
    if type(p) is tuple:
        return _TERM_SLOT + 56 + 224 + p[0].nbytes + p[1].nbytes  # the pair and two array headers
    return _TERM_SLOT + 112 + p.nbytes  # type: ignore[union-attr]


def _postings_of(docs: Sequence[Sequence[str]], start: int, only: Collection[str] | None = None,
                 ) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """``({term: document indices}, {term: frequencies})`` of ``docs`` numbered from ``start``."""
    idx: dict[str, list[int]] = {}
    tfs: dict[str, list[int]] = {}
    for i, d in enumerate(docs, start):
        tf: dict[str, int] = {}
        for t in d:
            if only is None or t in only:
                tf[t] = tf.get(t, 0) + 1
        for t, c in tf.items():
            idx.setdefault(t, []).append(i)
            tfs.setdefault(t, []).append(c)
    return idx, tfs


class Bm25Postings:
    """BM25 statistics of a list of tokenised documents: postings ``{term:
    postings}`` and document lengths, each term's postings its document indices
    (int32) and term frequencies (float64) in the smallest of three forms
    (``_packed``: an int, an index array when every frequency is 1, else the
    pair; ``arrays(term)`` gives the pair whatever the form).

    ``scores(terms, mask)``: Okapi BM25 of every document for weighted query
    ``terms`` — ``Σ_t w_t · idf_t · tf·(k1 + 1) / (tf + k1·(1 - b + b·|d| / avgdl))``
    with ``idf_t = ln(1 + (N - df_t + 0.5) / (df_t + 0.5))`` — where N, df and
    avgdl count only the documents of ``mask`` (all when None) and ``|d|`` is at
    least ``min_length`` (``memory.recall.BM25_MIN_LENGTH``); a document
    outside ``mask`` or without a query term scores 0.0. Shape ``(n,)`` float64.
    The same IEEE double operations in the same order whatever a term's form
    (a frequency of 1 as the scalar 1.0), so the scores are bit-equal to the
    pair form's.

    ``only``: keep postings of these terms alone (a one-query search: the exact
    path builds them per recall for the query's terms; scores, ``df`` and
    ``has_any`` are then valid for those terms only)."""

    __slots__ = ("lengths", "postings", "nbytes")

    def __init__(self, docs: Sequence[Sequence[str]], only: Collection[str] | None = None) -> None:
        self.lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        idx, tfs = _postings_of(docs, 0, only)
        self.postings = {t: _packed(np.asarray(ix, dtype=np.int32), np.asarray(tfs[t], dtype=np.float64))
                         for t, ix in idx.items()}
        self.nbytes = self.lengths.nbytes + sum(_posting_bytes(p) for p in self.postings.values())

    def arrays(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(document indices int32, term frequencies float64)`` of ``term``, or None."""
        p = self.postings.get(term)
        return None if p is None else _arrays(p)

    def appended(self, docs: Sequence[Sequence[str]]) -> Bm25Postings:
        """New postings: these plus ``docs`` as documents ``len(self.lengths)…``
        (for postings built without ``only``). Copy on write: the terms of
        ``docs`` get new postings, every other term shares this one's, and this one
        is left as it was (a view being searched keeps its postings)."""
        out = Bm25Postings.__new__(Bm25Postings)
        added = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        out.lengths = np.concatenate([self.lengths, added])
        idx, tfs = _postings_of(docs, len(self.lengths))
        postings = dict(self.postings)
        grown = added.nbytes
        for t, ix in idx.items():
            new_ix, new_tf = np.asarray(ix, dtype=np.int32), np.asarray(tfs[t], dtype=np.float64)
            old = postings.get(t)
            if old is not None:
                old_ix, old_tf = _arrays(old)
                new_ix, new_tf = np.concatenate([old_ix, new_ix]), np.concatenate([old_tf, new_tf])
                grown -= _posting_bytes(old)
            postings[t] = p = _packed(new_ix, new_tf)
            grown += _posting_bytes(p)
        out.postings = postings
        out.nbytes = self.nbytes + grown
        return out

    def scores(self, terms: dict[str, float], mask: np.ndarray | None = None, *, k1: float, b: float,
               min_length: float = 0.0) -> np.ndarray:
        """BM25 of every document (class docstring); ``mask`` bool ``(n,)`` or None.
        ``min_length``: a document shorter than this many tokens counts as this
        long in ``|d|`` and ``avgdl`` (0: its own length)."""
        total = len(self.lengths)
        out = np.zeros(total, dtype=np.float64)
        lengths = self.lengths if min_length <= 0 else np.maximum(self.lengths, min_length)
        if mask is None:
            n, dl = total, float(lengths.sum())
        else:
            n, dl = int(mask.sum()), float(lengths[mask].sum())
        if not n or not terms:
            return out
        avgdl = dl / n or 1.0
        norm = k1 * (1.0 - b + b * lengths / avgdl)
        for t, w in terms.items():
            p = self.postings.get(t)
            if p is None:
                continue
            if type(p) is int:  # one document, once: the array arithmetic below on one element
                if mask is not None and not mask[p]:
                    continue
                idf = math.log(1.0 + (n - 1 + 0.5) / (1 + 0.5))
                out[p] += w * idf * 1.0 * (k1 + 1.0) / (1.0 + norm[p])
                continue
            ix, tf = p if type(p) is tuple else (p, 1.0)
            if mask is not None:
                keep = mask[ix]
                ix = ix[keep]
                if type(tf) is not float:
                    tf = tf[keep]
            df = len(ix)
            if not df:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            out[ix] += w * idf * tf * (k1 + 1.0) / (tf + norm[ix])
        return out

    def df(self, term: str, mask: np.ndarray | None = None) -> int:
        """How many documents (of ``mask``) hold ``term``."""
        p = self.postings.get(term)
        if p is None:
            return 0
        if type(p) is int:
            return 1 if mask is None else int(bool(mask[p]))
        ix = p[0] if type(p) is tuple else p
        return len(ix) if mask is None else int(mask[ix].sum())

    def holding(self, terms: Collection[str]) -> np.ndarray:
        """Bool ``(n,)``: which documents hold at least one of ``terms``."""
        out = np.zeros(len(self.lengths), dtype=bool)
        for t in terms:
            p = self.postings.get(t)
            if p is not None:
                out[p[0] if type(p) is tuple else p] = True
        return out

    def has_any(self, words: set[str], mask: np.ndarray | None = None) -> bool:
        """True when one of ``words`` occurs in a document (of ``mask``)."""
        for t in words:
            p = self.postings.get(t)
            if p is not None and (mask is None or bool(mask[p[0] if type(p) is tuple else p].any())):
                return True
        return False


def _spread(scores: np.ndarray, mask: np.ndarray | None) -> tuple[float, float, int] | None:
    """``(mean, population standard deviation, count)`` of ``scores`` (of
    ``mask``), in float64; None for no row."""
    picked = scores if mask is None else scores[mask]
    if not len(picked):
        return None
    values = picked.astype(np.float64)
    return float(values.mean()), float(values.std()), int(len(values))


class VectorForm(enum.Enum):
    """How a view holds its namespace's vectors (``NamespaceCache.form``).

    ``FLOAT32``: one float32 matrix, cosines by one product over it (the exact
    path's own arithmetic). ``INT8``: per row int8 codes with a scale and a bound
    on the error they leave, in memory, and the float32 rows in a spill file
    (memory-mapped, unlinked): every row is scored from its codes, then the
    candidates the bounds cannot rule out are re-scored from their float32
    rows, so the channel's ranking and cosines are the exact ones
    (``NamespaceView.nearest``) at a quarter of the vectors' memory. ``NONE``:
    no vectors; the vector channel goes through the index."""

    FLOAT32 = "float32"
    INT8 = "int8"
    NONE = "none"


class _Rows:
    """The float32 rows behind the matrices of successive views of one namespace,
    with room to grow: a view reads its own first ``n`` rows; rows past ``used``
    (the longest view's) are written once, by the first view that claims them
    (``NamespaceView.appended``), so an older view being searched never sees a
    row change."""

    __slots__ = ("array", "used")

    def __init__(self, array: np.ndarray, used: int) -> None:
        self.array = array
        self.used = used

    @classmethod
    def allocate(cls, capacity: int, dim: int, spill_dir: Path | None = None) -> _Rows:  # noqa: ARG003
        return cls(np.empty((capacity, dim), dtype=np.float32), 0)

    @property
    def capacity(self) -> int:
        return len(self.array)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return self.array.nbytes

    spilled = 0
    """Bytes held in a spill file (none)."""

    def staging(self, n: int) -> np.ndarray:
        """The float32 rows ``0…n`` to fill in place, then ``seal(n)``."""
        return self.array[:n]

    def seal(self, n: int) -> None:
        """Rows ``0…n`` of ``staging`` are written: claim them."""
        self.used = n

    def write(self, at: int, vectors: np.ndarray) -> None:
        """Rows ``at…`` := ``vectors`` (float32 ``(k, dim)``), claimed."""
        self.array[at:at + len(vectors)] = vectors
        self.used = at + len(vectors)

    def floats(self, rows: np.ndarray | slice) -> np.ndarray:
        """The float32 vectors of ``rows`` (indices or a slice)."""
        return self.array[rows]

    def grown(self, n: int, capacity: int) -> _Rows:
        """New rows with room for ``capacity``, holding this one's first ``n``."""
        out = type(self).allocate(capacity, self.array.shape[1])
        out.array[:n] = self.array[:n]
        out.used = n
        return out


_QUANT_CHUNK = 4096
"""Rows quantised per step (``_Int8Rows.write``), which bounds the float32 temporaries."""

_SCORE_CHUNK = 256
"""Rows of int8 codes widened to float32 per product (``_Int8Rows.approx``): 256 × 384
floats stay in the core's cache; 4,096 and more cost twice the CPU (50k × 384, one core)."""


class _Int8Rows:
    """``_Rows`` for ``VectorForm.INT8``: per row, int8 ``codes`` and a ``scale``
    (``x ≈ scale · codes``, the largest component mapped to ±127) and ``slack``,
    the L2 norm of the error ``x - scale · codes`` rounded up, in memory; and the
    float32 rows ``exact`` in an unlinked temporary file under ``spill_dir``
    (the system's temp dir when None), memory-mapped: the operating system keeps
    in its page cache the rows that searches re-score, and drops the file when
    the last view holding it is gone (or the process ends). For a unit query q,
    ``|x·q - scale·(codes·q)| <= slack`` (Cauchy–Schwarz), the bound
    ``NamespaceView.nearest`` prunes with."""

    __slots__ = ("codes", "scale", "slack", "exact", "used", "_spill_dir")

    def __init__(self, codes: np.ndarray, scale: np.ndarray, slack: np.ndarray, exact: np.ndarray, used: int,
                 spill_dir: Path | None) -> None:
        self.codes, self.scale, self.slack, self.exact, self.used = codes, scale, slack, exact, used
        self._spill_dir = spill_dir

    @classmethod
    def allocate(cls, capacity: int, dim: int, spill_dir: Path | None = None) -> _Int8Rows:
        """Room for ``capacity`` rows; raises OSError when the spill file cannot be made."""
        if spill_dir is not None:
            spill_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=spill_dir, prefix="huiyi-vectors-") as f:  # unlinked at once
            # blocks reserved now: a full disk is an OSError here, not a SIGBUS at a later write through the map
            os.posix_fallocate(f.fileno(), 0, capacity * dim * 4)
            exact = np.memmap(f, dtype=np.float32, mode="r+", shape=(capacity, dim))  # the map outlives the file object
        return cls(np.zeros((capacity, dim), dtype=np.int8), np.zeros(capacity, dtype=np.float32),
                   np.zeros(capacity, dtype=np.float32), exact, 0, spill_dir)

    @property
    def capacity(self) -> int:
        return len(self.codes)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (codes, scales, bounds); the float32 rows are ``spilled``."""
        return self.codes.nbytes + self.scale.nbytes + self.slack.nbytes

    @property
    def spilled(self) -> int:
        """Bytes of the spill file."""
        return self.exact.nbytes

    def staging(self, n: int) -> np.ndarray:
        return self.exact[:n]

    def seal(self, n: int) -> None:
        self._quantise(0, n)
        self.used = n

    def write(self, at: int, vectors: np.ndarray) -> None:
        self.exact[at:at + len(vectors)] = vectors
        self._quantise(at, at + len(vectors))
        self.used = at + len(vectors)

    def floats(self, rows: np.ndarray | slice) -> np.ndarray:
        return np.asarray(self.exact[rows])

    def grown(self, n: int, capacity: int) -> _Int8Rows:
        out = _Int8Rows.allocate(capacity, self.codes.shape[1], self._spill_dir)
        out.codes[:n], out.scale[:n], out.slack[:n] = self.codes[:n], self.scale[:n], self.slack[:n]
        out.exact[:n] = self.exact[:n]
        out.used = n
        return out

    def _quantise(self, start: int, stop: int) -> None:
        """Codes, scales and bounds of rows ``start…stop`` from their float32 rows."""
        for a in range(start, stop, _QUANT_CHUNK):
            b = min(stop, a + _QUANT_CHUNK)
            x = np.asarray(self.exact[a:b])
            peak = np.abs(x).max(axis=1)
            scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
            codes = np.clip(np.rint(x / scale[:, None]), -127, 127).astype(np.int8)
            error = np.linalg.norm(x - codes.astype(np.float32) * scale[:, None], axis=1)
            self.codes[a:b], self.scale[a:b] = codes, scale
            self.slack[a:b] = np.nextafter(error.astype(np.float32), np.float32(np.inf))

    def approx(self, q: np.ndarray, n: int) -> np.ndarray:
        """``scale · (codes · q)`` of rows ``0…n``: float32 ``(n,)``, each within
        ``slack`` (times ``|q|``) of the row's exact cosine, plus rounding."""
        out = np.empty(n, dtype=np.float32)
        buf = np.empty((min(n, _SCORE_CHUNK), self.codes.shape[1]), dtype=np.float32)
        for a in range(0, n, _SCORE_CHUNK):
            b = min(n, a + _SCORE_CHUNK)
            np.copyto(buf[:b - a], self.codes[a:b], casting="unsafe")
            np.matmul(buf[:b - a], q, out=out[a:b])
        out *= self.scale[:n]
        return out


RESCORE = 4
"""``NamespaceView.nearest`` of an ``INT8`` view re-scores at least this many
candidates per hit asked from their float32 rows before it applies the bounds."""


def _rounding(dim: int) -> float:
    """A bound on the float32 rounding error of a ``dim``-term product of unit
    vectors (d·2⁻²⁴ each way, Higham's γ_d), doubled for the two products
    ``NamespaceView.nearest`` compares, and doubled again for the scale."""
    return dim * 2.0**-22


_GROW = threading.Lock()


def _held(room: _Rows | _Int8Rows | None, matrix: np.ndarray | None) -> int:
    """Bytes of a view's vectors in memory: its rows with room, else its matrix, else 0."""
    return room.nbytes if room is not None else (matrix.nbytes if matrix is not None else 0)


def _room(n: int) -> int:
    """Rows to allocate for a matrix of ``n``: a tenth more (at least 16), for the
    appends of the captures that follow. Growing copies the rows once per that
    many appends (a namespace of 200 memories: 300 KiB every 16 captures); 64
    spare rows were a third of a 200-memory view's vectors, ~0.5 KiB a memory."""
    return n + max(16, n // 10)


class NamespaceView:
    """One namespace's live memories as a search reads them (module docstring).

    ``ids``: memory ids, row order; ``groups()``: each row's disclosure key ("" =
    private; worked out on the first group-chat search); ``docs``: each row's tokens; ``bm25``: their ``Bm25Postings``;
    ``form``: how it holds its embeddings (``VectorForm``); ``matrix``: the
    float32 ``(n, dim)`` L2-normalised embeddings of a ``FLOAT32`` view, else
    None (an ``INT8`` view's are in its rows: ``floats``, ``nearest``); ``version``: the namespace's write version
    it was read at (-1: not from the cache); ``nbytes``: estimated size in bytes;
    ``terms``: build postings for these terms only (``Bm25Postings``' ``only``);
    ``sig``: each row's ``(id, row version, visibility, origin)`` as
    ``Store.search_stamps`` reads them (None: not from the cache), which tells a
    reload what it can keep (``appended``); ``dead``: rows a later write removed
    or replaced (an appended view keeps them, masked out of every search:
    ``disclosed``); ``own``: how many characters of each row's ``texts`` are the
    memory's own text (the rest is the line it answered: ``search_text``).
    Immutable once built; safe to share between threads."""

    __slots__ = ("ids", "texts", "own", "_origins", "_groups", "docs", "bm25", "matrix", "version", "nbytes", "_masks",
                 "_lock", "sig", "_rows", "_alive", "_where", "form")

    def __init__(self, rows: Sequence[MemoryText], matrix: np.ndarray | None, version: int = -1,
                 docs: Sequence[Sequence[str]] | None = None, terms: Collection[str] | None = None,
                 sig: list[tuple[str, int, str, str]] | None = None, room: _Rows | _Int8Rows | None = None) -> None:
        """``matrix``: the float32 embeddings (``FLOAT32``), or None with ``room``
        an ``_Int8Rows`` holding them (``INT8``), or None alone (``NONE``)."""
        self.ids = [m.id for m in rows]
        self.texts = [m.searched for m in rows]
        self.own = [len(m.text) for m in rows]
        self._origins = [(m.visibility, m.origin) for m in rows]
        self._groups: list[str] | None = None
        self.docs = list(docs) if docs is not None else [token_tuple(m.searched) for m in rows]
        self.bm25 = Bm25Postings(self.docs, terms)
        self.matrix = matrix
        self.form = VectorForm.FLOAT32 if matrix is not None else \
            VectorForm.INT8 if isinstance(room, _Int8Rows) else VectorForm.NONE
        self.version = version
        self._masks: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.sig = sig
        self._rows = room
        self._alive: np.ndarray | None = None
        self._where: dict[str, int] | None = None
        held = _held(room, matrix)
        self.nbytes = (self.bm25.nbytes + held + len(rows) * _DOC_OVERHEAD
                       + sum(sys.getsizeof(t) for t in self.texts) + sum(_doc_bytes(d) for d in self.docs)
                       + _VIEW_OVERHEAD)

    def _successor(self, version: int) -> NamespaceView:
        """A shallow copy stamped ``version`` (own lock and mask memo)."""
        new = NamespaceView.__new__(NamespaceView)
        for name in NamespaceView.__slots__:
            setattr(new, name, getattr(self, name))
        new.version = version
        new._lock = threading.Lock()
        new._masks = {}
        return new

    def restamped(self, version: int) -> NamespaceView:
        """This view stamped ``version``: for a write that changed nothing a search
        reads (the rows' ``sig`` are the same)."""
        return self._successor(version)

    def appended(self, rows: Sequence[MemoryText], vectors: np.ndarray, docs: Sequence[Sequence[str]],
                 version: int, gone: Collection[int] = ()) -> NamespaceView:
        """A new view: this one's rows and then ``rows`` (their ``vectors``, float32
        ``(len(rows), dim)``, and tokens ``docs``), stamped ``version``, with the
        rows ``gone`` (indices of this view: memories removed, or replaced by a
        new version among ``rows``) masked out as ``dead``; this one is left as it
        was. The postings are extended copy-on-write
        (``Bm25Postings.appended``) and the vectors in place when its rows
        (``_Rows``, ``_Int8Rows``) have room past this view's and no other view
        claimed them (else copied into new rows with room), so the cost grows
        with ``rows``, not with the namespace. For a cached view (``sig``);
        ValueError otherwise."""
        if self.sig is None:
            raise ValueError("appended needs a cached view")
        n, k = len(self), len(rows)
        new = self._successor(version)
        new.ids = self.ids + [m.id for m in rows]
        new.texts = self.texts + [m.searched for m in rows]
        new.own = self.own + [len(m.text) for m in rows]
        new._origins = self._origins + [(m.visibility, m.origin) for m in rows]
        new._groups = None
        new.docs = self.docs + [tuple(d) for d in docs]
        new.bm25 = self.bm25.appended(new.docs[n:])
        new.sig = self.sig + [(m.id, m.version, m.visibility.value, m.origin) for m in rows]
        room = self._rows
        if self.form is VectorForm.FLOAT32 and room is None:  # a matrix of its own: rows with room from here on
            room = _Rows(self.matrix, n)  # type: ignore[arg-type]
        if room is not None:
            with _GROW:
                shared = room.used == n and room.capacity >= n + k
                if shared:
                    room.write(n, vectors)
            if not shared:
                room = room.grown(n, _room(n + k))
                room.write(n, vectors)
            new._rows = room
            if self.form is VectorForm.FLOAT32:
                new.matrix = room.array[:n + k]  # type: ignore[union-attr]
        if self._alive is not None or gone:
            alive = np.ones(n + k, dtype=bool)
            if self._alive is not None:
                alive[:n] = self._alive
            alive[list(gone)] = False
            new._alive = alive
        if self._where is not None:  # carried along: a dict copy instead of a walk over every row
            where = dict(self._where)
            for j in gone:
                if where.get(self.ids[j]) == j:
                    del where[self.ids[j]]
            where.update((m.id, n + i) for i, m in enumerate(rows))
            new._where = where
        held = _held(self._rows, self.matrix)
        new.nbytes = (self.nbytes - self.bm25.nbytes - held + new.bm25.nbytes + _held(new._rows, new.matrix)
                      + k * _DOC_OVERHEAD + sum(sys.getsizeof(t) for t in new.texts[n:])
                      + sum(_doc_bytes(d) for d in new.docs[n:]))
        return new

    def __len__(self) -> int:
        return len(self.ids)

    def groups(self) -> list[str]:
        """Each row's disclosure key (``_group_key``), computed once."""
        with self._lock:
            if self._groups is None:
                self._groups = [_group_key(v, o) for v, o in self._origins]
            return self._groups

    def disclosed(self, chat: ChatRef | None) -> np.ndarray | None:
        """Bool mask ``(n,)`` of the live rows disclosed in ``chat`` (DESIGN rule 6:
        in a group chat only what was learned in that group, any of its topics);
        in a private chat or without one every live row: None when no row is dead
        (``dead``). Every search of the view goes through this mask, so a dead row
        is never a hit nor counted in a statistic."""
        if chat is None or not chat.is_group:
            return self._alive
        key = chat.group_key
        groups = self.groups()
        with self._lock:
            m = self._masks.get(key)
            if m is None:
                m = np.fromiter((g == key for g in groups), dtype=bool, count=len(groups))
                if self._alive is not None:
                    m &= self._alive
                self._masks[key] = m
        return m

    @property
    def dead(self) -> int:
        """Rows masked out (removed or replaced since the view was loaded)."""
        return 0 if self._alive is None else int(len(self._alive) - self._alive.sum())

    def where(self) -> dict[str, int]:
        """``{memory id: row}`` of the live rows, computed once per view (an
        appended view derives it from its parent's)."""
        with self._lock:
            if self._where is None:
                alive = self._alive
                self._where = {i: j for j, i in enumerate(self.ids) if alive is None or alive[j]}
            return self._where

    def alive_sig(self) -> dict[tuple[str, int, str, str], int]:
        """``{sig: row}`` of the live rows."""
        assert self.sig is not None
        if self._alive is None:
            return {s: j for j, s in enumerate(self.sig)}
        return {s: j for j, s in enumerate(self.sig) if self._alive[j]}

    def top(self, scores: np.ndarray, mask: np.ndarray | None, n: int, *, positive: bool) -> list[tuple[str, float]]:
        """The ``n`` best rows of ``scores`` among ``mask`` (and > 0 with
        ``positive``) as ``[(id, score)]``, best first, ties broken by id."""
        ok = scores > 0 if positive else np.ones(len(scores), dtype=bool)
        if mask is not None:
            ok &= mask
        cand = np.flatnonzero(ok)
        if len(cand) > n > 0:
            s = scores[cand]
            kth = np.partition(s, len(s) - n)[len(s) - n]
            cand = cand[s >= kth]  # every row tied with the n-th stays in for the id tie-break
        order = sorted(cand.tolist(), key=lambda i: (-float(scores[i]), self.ids[i]))
        return [(self.ids[i], float(scores[i])) for i in order[:n]]

    def cosine(self, q: np.ndarray) -> np.ndarray:
        """Cosine similarity of every row with the unit vector ``q``: float32 ``(n,)``.
        Raises ValueError for a view without a float32 matrix (``form`` not ``FLOAT32``)."""
        if self.matrix is None:
            raise ValueError("view built without a float32 matrix")
        return self.matrix @ q.astype(np.float32)

    def nearest(self, q: np.ndarray, mask: np.ndarray | None, n: int) -> list[tuple[str, float]]:
        """The ``n`` rows (of ``mask``) nearest the unit vector ``q`` as ``[(id,
        cosine)]``, best first, ties broken by id: ``top`` of ``cosine`` for a
        ``FLOAT32`` view. An ``INT8`` view gives the same rows, order and
        cosines: every row is scored from its codes (``_Int8Rows.approx``); the
        ``RESCORE × n`` best are re-scored from their float32 rows, the ``n``-th
        best of those exact cosines is a floor that the true ``n``-th reaches,
        and every other row whose approximate cosine plus its error bound
        (``slack`` · |q| plus float32 rounding, ``_rounding``) reaches that floor
        is re-scored too; a row left out is below ``n`` re-scored rows for certain.
        Raises ValueError for a view without vectors."""
        return self.nearest_spread(q, mask, n)[0]

    def nearest_spread(self, q: np.ndarray, mask: np.ndarray | None, n: int
                       ) -> tuple[list[tuple[str, float]], tuple[float, float, int] | None]:
        """``nearest`` and the spread of the cosines it scored: ``(hits, (mean,
        standard deviation, rows))`` over every row of ``mask`` (None when there is
        none) — how similar the unit vector ``q`` is to this namespace's memories in
        general, against which recall asks a hit to stand out
        (``memory.recall.RecallParams.standout``). A ``FLOAT32`` view's are of the
        exact cosines; an ``INT8`` view's of the cosines from its codes (each
        within its row's error bound of the exact one: the product the search
        already made, not a second pass over the float32 rows).
        Raises ValueError for a view without vectors."""
        if self.form is VectorForm.FLOAT32:
            scores = self.cosine(q)
            return self.top(scores, mask, n, positive=False), _spread(scores, mask)
        rows = self._rows
        if not isinstance(rows, _Int8Rows):
            raise ValueError("view built without vectors")
        q = np.ascontiguousarray(q, dtype=np.float32)
        size = len(self)
        pool = np.flatnonzero(mask) if mask is not None else np.arange(size)
        if n <= 0 or not len(pool):
            return [], None
        approx = rows.approx(q, size)
        spread = _spread(approx[:size], mask)
        if len(pool) <= RESCORE * n:
            picked = pool
        else:
            first = pool[np.argpartition(-approx[pool], RESCORE * n)[:RESCORE * n]]
            floor = np.partition(self._exact(rows, first, q), len(first) - n)[len(first) - n]
            reach = approx[pool] + rows.slack[pool] * np.float32(np.linalg.norm(q)) + _rounding(len(q))
            picked = np.union1d(first, pool[reach >= floor])
        scores = np.full(size, -np.inf, dtype=np.float32)
        scores[picked] = self._exact(rows, picked, q)
        keep = np.zeros(size, dtype=bool)
        keep[picked] = True
        return self.top(scores, keep, n, positive=False), spread

    @staticmethod
    def _exact(rows: _Int8Rows, which: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosines of rows ``which`` (unique) from their float32 rows, in ascending
        row order. OpenBLAS's sgemv computes a trailing block of fewer than four
        rows with a kernel that rounds differently, so the gather is padded to a
        multiple of 8 rows: each cosine is then bit-equal to a row of the full
        float32 product (unless that row was in the full product's own tail)."""
        which = np.sort(which)
        pad = -len(which) % 8
        at = np.concatenate([which, np.repeat(which[-1:], pad)]) if pad else which
        return (rows.floats(at) @ q)[:len(which)]

    def floats(self, rows: np.ndarray | list[int]) -> np.ndarray:
        """The float32 embeddings of ``rows`` (indices): float32 ``(len(rows), dim)``.
        Raises ValueError for a view without vectors."""
        if self.matrix is not None:
            return self.matrix[rows]
        if self._rows is None:
            raise ValueError("view built without vectors")
        return self._rows.floats(np.asarray(rows, dtype=np.int64))

    @property
    def vector_nbytes(self) -> int:
        """Bytes of its vectors held in memory (with room to grow; an ``INT8``
        view's codes, scales and bounds)."""
        return _held(self._rows, self.matrix)

    @property
    def spilled(self) -> int:
        """Bytes of its float32 rows in a spill file (``INT8``; else 0)."""
        return self._rows.spilled if self._rows is not None else 0


class NamespaceCache:
    """LRU of ``NamespaceView``s, at most ``max_mib`` MiB in all (estimated, see
    ``NamespaceView.nbytes``), keyed by namespace and checked against the
    namespace's write version on every use (module docstring). Thread-safe.

    ``hits``/``loads``/``evictions`` count uses served from memory, views
    (re)built, and views dropped to stay within the bound; ``appends`` the
    reloads that extended the old view (``_refresh``) instead of reading the
    whole namespace (part of ``loads``)."""

    def __init__(self, max_mib: float, *, background: bool = False, spill_dir: Path | None = None,
                 int8_from: int | None = None) -> None:
        """``background``: ``ready_view`` loads a namespace not held yet in a
        background thread instead of in the recall that asked (the gateway).
        ``spill_dir``: where ``INT8`` views keep their float32 rows (unlinked
        files; None: the system's temp dir). ``int8_from``: namespaces of at
        least this many live memories are held ``INT8`` even where a float32
        matrix would fit (None: only where it would not; tests and benchmarks
        set it). Raises ValueError for ``max_mib`` <= 0."""
        if max_mib <= 0:
            raise ValueError("max_mib must be > 0")
        self.max_bytes = int(max_mib * 2**20)
        self.background = background
        self.spill_dir = spill_dir
        self.int8_from = int8_from
        self.spill_failed = False
        self._views: OrderedDict[str, NamespaceView] = OrderedDict()
        self._sizes: OrderedDict[str, float] = OrderedDict()  # bytes per memory beyond its vectors, as last measured
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: set[str] = set()
        self._loader = None  # a one-thread executor, made on the first background load
        self.hits = 0
        self.loads = 0
        self.appends = 0
        self.evictions = 0

    @property
    def nbytes(self) -> int:
        """Estimated bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._views)

    def fits(self, live: int, dim: int) -> bool:
        """Whether a namespace of ``live`` memories with ``dim``-d vectors can be held
        (its estimate at most half the bound, so one namespace never flushes the rest)."""
        return live * (dim * 4 + _FIT_BYTES_PER_MEMORY) <= self.max_bytes // 2

    def fits_postings(self, live: int) -> bool:
        """Whether a namespace of ``live`` memories can be held without its vectors
        (``view(..., vectors=False)``: BM25 in process with the namespace's own
        statistics, the vector channel through the index), on ``fits``' rule."""
        return live * _FIT_BYTES_PER_MEMORY <= self.max_bytes // 2

    def form(self, ns: Namespace, live: int, dim: int) -> VectorForm | None:
        """How a view of ``ns`` (``live`` memories, ``dim``-d vectors) is held, or
        None when it is not (the exact or the index path).

        Within ``fits``' estimate: ``FLOAT32`` (``INT8`` from ``int8_from``
        memories). Beyond it, by what the last view of ``ns`` measured per memory
        beyond its vectors (``_put`` remembers it, kept or not): the richest of
        ``FLOAT32``, ``INT8`` and ``NONE`` whose view — those bytes for each
        memory, and for each row of its room (``_room``) a float32 row, or its
        int8 codes and two floats, or nothing — is at most half the bound (and
        only such a view is kept). The estimate is taken high for a namespace of
        a few memories with their own words, where a large one shares its
        vocabulary (a real chat mix measured 3.3 KB a memory at 100 memories,
        0.76 KB at 8k; the synthetic 50k namespace of ``bench speed`` 0.48 KB),
        so a large namespace is measured: one not measured yet is loaded
        ``NONE`` first, when even ``_MIN_BYTES_PER_MEMORY`` each could fit."""
        half = self.max_bytes // 2
        int8 = self.int8_from is not None and live >= self.int8_from
        if self.fits(live, dim):
            return VectorForm.INT8 if int8 and not self.spill_failed else VectorForm.FLOAT32
        with self._lock:
            per = self._sizes.get(str(ns))
        if per is None:
            return VectorForm.NONE if live * _MIN_BYTES_PER_MEMORY <= half else None
        rows, rest = _room(live), live * per
        if not int8 and rest + rows * dim * 4 <= half:
            return VectorForm.FLOAT32
        if not self.spill_failed and rest + rows * (dim + 8) <= half:
            return VectorForm.INT8
        return VectorForm.NONE if rest <= half else None

    def room_for(self, live: int, dim: int) -> bool:
        """Whether a namespace of ``live`` memories (``fits``' estimate) can be
        loaded without evicting a view: for warming, which never pushes out what
        the turns use."""
        return self._bytes + live * (dim * 4 + _FIT_BYTES_PER_MEMORY) + _VIEW_OVERHEAD <= self.max_bytes

    def held(self, ns: Namespace) -> bool:
        """Whether a view of ``ns`` is held (at whatever version)."""
        with self._lock:
            return str(ns) in self._views

    def ready_view(self, store: Store, index: SearchIndex, ns: Namespace, version: int,
                   form: VectorForm = VectorForm.FLOAT32) -> NamespaceView | None:
        """``view`` for a recall that must not wait on a cold load: with
        ``background`` and no view of ``ns`` held in ``form`` (a namespace not
        cached yet, or changing form), its load is started in the cache's loader
        thread (once per namespace) and None returned — the caller searches
        another way meanwhile (``memory.recall``: the exact or the index path);
        a held view is returned, brought up to date when an append of what
        changed does it (``_refresh``); one so far behind that it needs a whole
        load (more than a quarter of its rows new or dead) is reloaded in the
        loader thread too, and None returned meanwhile. Without ``background``,
        ``view``. Raises as ``view``."""
        if not self.background:
            return self.view(store, index, ns, version, form)
        with self._lock:
            old = self._views.get(str(ns))
        if old is not None and old.form is form:
            view = self.view(store, index, ns, version, form, whole=False)
            if view is not None:
                return view
        self.load_later(store, index, ns, form)
        return None

    def load_later(self, store: Store, index: SearchIndex, ns: Namespace,
                   form: VectorForm = VectorForm.FLOAT32) -> bool:
        """Load the view of ``ns`` in the loader thread (one at a time, in order)
        unless its load is queued already; True when queued. The load reads the
        namespace's version when it runs; a failure is logged, not raised (the
        next recall of ``ns`` queues it again)."""
        key = str(ns)
        with self._lock:
            if key in self._loading:
                return False
            self._loading.add(key)
            if self._loader is None:
                from concurrent.futures import ThreadPoolExecutor

                self._loader = ThreadPoolExecutor(1, thread_name_prefix="huiyi-cache-load")
            loader = self._loader

        def load() -> None:
            try:
                version, _ = store.namespace_state(ns)
                self.view(store, index, ns, version, form)
            except Exception as exc:  # noqa: BLE001 - the recall path still answers without the view
                log.warning("cache: loading %s failed (%s: %s)", ns, type(exc).__name__, exc)
            finally:
                with self._lock:
                    self._loading.discard(key)

        try:
            loader.submit(load)
        except RuntimeError:  # shut down (the core closed): nothing to warm any more
            with self._lock:
                self._loading.discard(key)
            return False
        return True

    def idle(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until no background load is queued
        or running; True when none is."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._loading:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def close(self) -> None:
        """Stop the loader thread after the load it is running; queued loads are dropped."""
        with self._lock:
            loader, self._loader = self._loader, None
        if loader is not None:
            loader.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._loading.clear()

    def get(self, ns: Namespace, version: int, form: VectorForm = VectorForm.FLOAT32) -> NamespaceView | None:
        """The view of ``ns`` when it is stamped ``version`` and held in ``form``, else None."""
        with self._lock:
            v = self._views.get(str(ns))
            if v is None or v.version != version or v.form is not form:
                return None
            self._views.move_to_end(str(ns))
            self.hits += 1
            return v

    def _put(self, ns: Namespace, view: NamespaceView, bound: int) -> None:
        """Keep ``view`` of ``ns`` unless it is over ``bound`` bytes (the old view of
        ``ns`` goes either way), evicting the least recent views past the bound,
        and remember what it measured per memory beyond its vectors (``form``)."""
        with self._lock:
            if len(view):
                self._sizes[str(ns)] = (view.nbytes - view.vector_nbytes) / len(view)
                self._sizes.move_to_end(str(ns))
                while len(self._sizes) > _SIZES_KEPT:
                    self._sizes.popitem(last=False)
            old = self._views.pop(str(ns), None)
            if old is not None:
                self._bytes -= old.nbytes
            if view.nbytes > bound:
                return
            self._views[str(ns)] = view
            self._bytes += view.nbytes
            while self._bytes > self.max_bytes and self._views:
                _, gone = self._views.popitem(last=False)
                self._bytes -= gone.nbytes
                self.evictions += 1

    def _read(self, store: Store, index: SearchIndex, ns: Namespace, old: NamespaceView | None,
              form: VectorForm, whole: bool = True) -> tuple[NamespaceView | None, bool]:
        """A view of ``ns`` in ``form`` (``view``): ``old`` extended when it has
        that form and little changed, else a whole load (None instead without
        ``whole``); and whether it was extended."""
        same = old is not None and old.form is form  # else a whole load in the new form, reusing what it can
        view = _refresh(store, index, ns, old) if same and old.sig is not None else None  # type: ignore[union-attr]
        if view is not None:
            return view, True
        if not whole:
            return None, False
        stamp, rows = store.search_rows(ns)
        return _load(index, ns, rows, stamp, old, form, self.spill_dir), False

    def drop(self, ns: Namespace, ids: Collection[str] = ()) -> tuple[int, int]:
        """Forget the view of ``ns`` (a write in this process; others see the version).
        Returns ``(rows, postings)``: how many live rows of ``ids`` the dropped
        view held and how many BM25 postings (one per distinct term of each such
        row) went with them; (0, 0) when no view was held."""
        with self._lock:
            old = self._views.pop(str(ns), None)
            if old is not None:
                self._bytes -= old.nbytes
        if old is None or not ids:
            return 0, 0
        where = old.where()
        rows = [where[i] for i in dict.fromkeys(ids) if i in where]
        return len(rows), sum(len(set(old.docs[j])) for j in rows)

    def view(self, store: Store, index: SearchIndex, ns: Namespace, version: int,
             form: VectorForm = VectorForm.FLOAT32, *, whole: bool = True) -> NamespaceView | None:
        """The view of ``ns`` at its current write version, its vectors held in
        ``form`` (``form``: the one this cache allows): from
        memory when the stamp is ``version``, else (re)loaded — the version read first, then the
        rows (``Store.search_rows``), so a view is never older than its stamp.
        A reload of a cached namespace extends its old view with what changed
        (``_refresh``) unless much changed; then, and for a cold namespace, it
        reads the whole namespace, reusing the tokens and vectors of unchanged rows. Raises StoreError, EmbedderError (a vector
        neither cached nor indexed could not be made). An ``INT8`` view whose
        spill file cannot be written (OSError: no space, no directory) is
        loaded ``NONE`` instead, and this cache holds no ``INT8`` view again
        (``form``), with a warning. ``whole`` False: None instead of a whole
        load (only a held view brought up to date by an append is returned)."""
        hit = self.get(ns, version, form)
        if hit is not None:
            return hit
        with self._lock:
            old = self._views.get(str(ns))
        try:
            view, appended = self._read(store, index, ns, old, form, whole)
            if view is None:
                return None
        except OSError as exc:
            if form is not VectorForm.INT8:
                raise
            log.warning("cache: cannot write the float32 rows of %s under %s (%s); namespaces beyond the float32 "
                        "budget are held without vectors from now on", ns, self.spill_dir or "the temp dir", exc)
            self.spill_failed = True
            view, appended = self._read(store, index, ns, old, VectorForm.NONE)
        assert view is not None  # a whole load was allowed
        with self._lock:
            self.loads += 1
            self.appends += appended
        # beyond the estimate, a view is kept only within the half of the bound that ``form`` measured it against
        live = len(view) - view.dead
        self._put(ns, view, self.max_bytes if self.fits(live, index.embedder.dim) else self.max_bytes // 2)
        return view


def _refresh(store: Store, index: SearchIndex, ns: Namespace, old: NamespaceView) -> NamespaceView | None:
    """``old`` brought up to the namespace's current state by reading the rows
    the change log names since its stamp (``Store.changes_since``), or, when the
    log cannot tell, the stamps of every row (``Store.search_stamps``), and the
    texts of new or changed rows only: new rows appended, removed ones and the old versions of changed ones
    masked out (``NamespaceView.appended``). None when that would leave more than
    a quarter of the rows dead or append more than a quarter (the caller reloads
    the whole namespace, which compacts). The rows read after the stamp may be
    newer than it (each is kept as read), never older."""
    n = len(old)
    assert old.sig is not None

    def much(gone: int, new: int) -> bool:  # a whole load costs about the same and compacts
        return old.dead + gone > n // 4 or new > max(64, n // 4)

    changes = store.changes_since(ns, old.version)
    if changes is not None:  # the change log names what changed: read those rows only
        stamp, ids = changes
        _, rows = store.search_rows(ns, sorted(ids)) if ids else (stamp, [])
        where = old.where()
        now = {(m.id, m.version, m.visibility.value, m.origin) for m in rows}
        gone = [where[i] for i in ids if i in where and old.sig[where[i]] not in now]
        held = {old.sig[where[i]] for i in ids if i in where}
        rows = [m for m in rows if (m.id, m.version, m.visibility.value, m.origin) not in held]
    else:
        stamp, sig = store.search_stamps(ns)
        gone = []
        if not old.dead and sig[:n] == old.sig:  # the usual case: only adds since, old rows first in read order
            fresh = sig[n:]
        else:
            live = old.alive_sig()
            now = set(sig)
            gone = [j for s, j in live.items() if s not in now]
            fresh = [s for s in sig if s not in live]
        if (fresh or gone) and much(len(gone), len(fresh)):
            return None  # known before reading the rows
        _, rows = store.search_rows(ns, [s[0] for s in fresh]) if fresh else (stamp, [])
    if not rows and not gone:
        return old.restamped(stamp)
    if much(len(gone), len(rows)):
        return None
    return old.appended(rows, _vectors(index, old, rows), [token_tuple(m.searched) for m in rows], stamp, gone)


def _vectors(index: SearchIndex, old: NamespaceView, rows: Sequence[MemoryText]) -> np.ndarray:
    """The vectors of ``rows`` appended to ``old``: none for a view without vectors."""
    if rows and old.form is not VectorForm.NONE:
        return index.vectors(rows)
    return np.empty((0, index.embedder.dim), dtype=np.float32)


def _load(index: SearchIndex, ns: Namespace, rows: Sequence[MemoryText], version: int,
          old: NamespaceView | None, form: VectorForm = VectorForm.FLOAT32,
          spill_dir: Path | None = None) -> NamespaceView:
    """A view of ``rows`` holding its vectors in ``form``: tokens and vectors of
    rows unchanged since ``old`` (of any form) are reused; a cold load reads the
    namespace's stored vectors in one index read. ``spill_dir``: ``_Int8Rows``'."""
    # each row's row in ``old`` when its text is unchanged there: its tokens (and vector) are reused
    at = {i: j for j, i in enumerate(old.ids)} if old is not None else {}
    same = [j if j is not None and old.texts[j] == m.searched else None  # type: ignore[union-attr]
            for m, j in ((m, at.get(m.id)) for m in rows)]
    docs = [old.docs[j] if j is not None else token_tuple(m.searched) for m, j in zip(rows, same)]  # type: ignore[union-attr]
    sig = [(m.id, m.version, m.visibility.value, m.origin) for m in rows]
    if form is VectorForm.NONE:
        return NamespaceView(rows, None, version, docs, sig=sig)
    dim = index.embedder.dim
    room = (_Int8Rows if form is VectorForm.INT8 else _Rows).allocate(_room(len(rows)), dim, spill_dir)
    matrix = room.staging(len(rows))
    kept = old is not None and old.form is not VectorForm.NONE
    reuse = [(r, j) for r, j in enumerate(same) if j is not None] if kept else []
    for c in range(0, len(reuse), _QUANT_CHUNK):
        part = np.asarray(reuse[c:c + _QUANT_CHUNK], dtype=np.int64)
        matrix[part[:, 0]] = old.floats(part[:, 1])  # type: ignore[union-attr]
    missing = [r for r, j in enumerate(same) if j is None or not kept]
    if missing and len(missing) > 64:  # a cold (or much changed) namespace: its stored vectors in one read
        from memory.index import text_hash

        stored = index.namespace_vectors(ns)
        still = []
        for r in missing:
            v = stored.get((rows[r].id, text_hash(rows[r].text)))
            if v is None:
                still.append(r)
            else:
                matrix[r] = v
        missing = still
    if missing:
        matrix[missing] = index.vectors([rows[r] for r in missing])
    room.seal(len(rows))
    return NamespaceView(rows, matrix if form is VectorForm.FLOAT32 else None, version, docs, sig=sig, room=room)
