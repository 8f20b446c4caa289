"""Recall's in-process namespace cache: a namespace's searchable state held in
memory, so that a recall's cost does not grow with the store (issue 14).

A ``NamespaceView`` is one namespace's live memories as a search reads them:
ids, each memory's disclosure key (the group it was learned in, for DESIGN
rule 6), its tokens (``memory.text.tokens``) as BM25 postings with document
lengths, and its embeddings as one float32 matrix ``(n, dim)``. The exact
recall path searches a view built from the rows it has just read; the cached
path searches a view kept in a ``NamespaceCache`` — the same code on the same
data, so the two give identical channels.

``NamespaceCache`` is an LRU of views bounded in bytes (``max_mib``). Each view
is stamped with the namespace's write version (``Store.namespace_state``)
read *before* its rows, and is used only while the stored version still equals
the stamp: any write in any process (add, edit, forget, move) bumps the
version in its own transaction, so the next recall anywhere reloads. A reload
reuses the old view's tokens and vectors of rows whose text and disclosure did
not change; a cold load reads the namespace's vectors from the index in one
read (``SearchIndex.namespace_vectors``) and embeds only what it lacks.

BM25: Okapi BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative IDF,
statistics (N, df, average length) over the documents disclosed in the chat
of the query — the namespace's own, never the whole store's.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from memory.errors import NamespaceError
from memory.text import tokens
from memory.types import ChatRef, Namespace, Visibility

if TYPE_CHECKING:
    from memory.index import SearchIndex
    from memory.store import MemoryText, Store

__all__ = ["NamespaceView", "NamespaceCache", "Bm25Postings"]

log = logging.getLogger(__name__)

_DOC_OVERHEAD = 160
"""Bytes counted per cached memory beyond its vector and postings (id string,
token tuple reference, disclosure key, list slots): an estimate, not a measure."""
_TERM_OVERHEAD = 240
"""Bytes counted per distinct term of a view (dict slot, key string, two small arrays' headers)."""


_VIEW_OVERHEAD = 2048
"""Bytes counted per view whatever its size, so that views of empty namespaces
(a recall of someone who has no memories yet) still count against the bound."""


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


class Bm25Postings:
    """BM25 statistics of a list of tokenised documents: postings ``{term:
    (document indices int32, term frequencies float64)}`` and document lengths.

    ``scores(terms, mask)``: Okapi BM25 of every document for weighted query
    ``terms`` — ``Σ_t w_t · idf_t · tf·(k1 + 1) / (tf + k1·(1 - b + b·|d| / avgdl))``
    with ``idf_t = ln(1 + (N - df_t + 0.5) / (df_t + 0.5))`` — where N, df and
    avgdl count only the documents of ``mask`` (all when None); a document
    outside ``mask`` or without a query term scores 0.0. Shape ``(n,)`` float64.

    ``only``: keep postings of these terms alone (a one-query search: the exact
    path builds them per recall for the query's terms; scores, ``df`` and
    ``has_any`` are then valid for those terms only)."""

    __slots__ = ("lengths", "postings", "nbytes")

    def __init__(self, docs: Sequence[Sequence[str]], only: Collection[str] | None = None) -> None:
        self.lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        idx: dict[str, list[int]] = {}
        tfs: dict[str, list[int]] = {}
        for i, d in enumerate(docs):
            tf: dict[str, int] = {}
            for t in d:
                if only is None or t in only:
                    tf[t] = tf.get(t, 0) + 1
            for t, c in tf.items():
                idx.setdefault(t, []).append(i)
                tfs.setdefault(t, []).append(c)
        self.postings = {t: (np.asarray(ix, dtype=np.int32), np.asarray(tfs[t], dtype=np.float64))
                         for t, ix in idx.items()}
        self.nbytes = self.lengths.nbytes + sum(a.nbytes + b.nbytes + _TERM_OVERHEAD for a, b in self.postings.values())

    def scores(self, terms: dict[str, float], mask: np.ndarray | None = None, *, k1: float, b: float) -> np.ndarray:
        """BM25 of every document (class docstring); ``mask`` bool ``(n,)`` or None."""
        total = len(self.lengths)
        out = np.zeros(total, dtype=np.float64)
        if mask is None:
            n, dl = total, int(self.lengths.sum())
        else:
            n, dl = int(mask.sum()), int(self.lengths[mask].sum())
        if not n or not terms:
            return out
        avgdl = dl / n or 1.0
        norm = k1 * (1.0 - b + b * self.lengths / avgdl)
        for t, w in terms.items():
            p = self.postings.get(t)
            if p is None:
                continue
            ix, tf = p
            if mask is not None:
                keep = mask[ix]
                ix, tf = ix[keep], tf[keep]
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
        return len(p[0]) if mask is None else int(mask[p[0]].sum())

    def has_any(self, words: set[str], mask: np.ndarray | None = None) -> bool:
        """True when one of ``words`` occurs in a document (of ``mask``)."""
        for t in words:
            p = self.postings.get(t)
            if p is not None and (mask is None or bool(mask[p[0]].any())):
                return True
        return False


class NamespaceView:
    """One namespace's live memories as a search reads them (module docstring).

    ``ids``: memory ids, row order; ``groups()``: each row's disclosure key ("" =
    private; worked out on the first group-chat search); ``docs``: each row's tokens; ``bm25``: their ``Bm25Postings``;
    ``matrix``: float32 ``(n, dim)`` L2-normalised embeddings, or None when the
    view was built without vectors; ``version``: the namespace's write version
    it was read at (-1: not from the cache); ``nbytes``: estimated size in bytes;
    ``terms``: build postings for these terms only (``Bm25Postings``' ``only``).
    Immutable once built; safe to share between threads."""

    __slots__ = ("ids", "texts", "_origins", "_groups", "docs", "bm25", "matrix", "version", "nbytes", "_masks",
                 "_lock")

    def __init__(self, rows: Sequence[MemoryText], matrix: np.ndarray | None, version: int = -1,
                 docs: Sequence[Sequence[str]] | None = None, terms: Collection[str] | None = None) -> None:
        self.ids = [m.id for m in rows]
        self.texts = [m.text for m in rows]
        self._origins = [(m.visibility, m.origin) for m in rows]
        self._groups: list[str] | None = None
        self.docs = list(docs) if docs is not None else [tuple(tokens(m.text)) for m in rows]
        self.bm25 = Bm25Postings(self.docs, terms)
        self.matrix = matrix
        self.version = version
        self._masks: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.nbytes = (self.bm25.nbytes + (matrix.nbytes if matrix is not None else 0)
                       + len(rows) * _DOC_OVERHEAD + sum(sys.getsizeof(t) for t in self.texts) + _VIEW_OVERHEAD)

    def __len__(self) -> int:
        return len(self.ids)

    def groups(self) -> list[str]:
        """Each row's disclosure key (``_group_key``), computed once."""
        with self._lock:
            if self._groups is None:
                self._groups = [_group_key(v, o) for v, o in self._origins]
            return self._groups

    def disclosed(self, chat: ChatRef | None) -> np.ndarray | None:
        """Bool mask ``(n,)`` of the rows disclosed in ``chat`` (DESIGN rule 6: in a
        group chat only what was learned in that group, any of its topics); None
        in a private chat or without one (every row)."""
        if chat is None or not chat.is_group:
            return None
        key = chat.group_key
        groups = self.groups()
        with self._lock:
            m = self._masks.get(key)
            if m is None:
                m = np.fromiter((g == key for g in groups), dtype=bool, count=len(groups))
                self._masks[key] = m
        return m

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
        Raises ValueError for a view built without vectors."""
        if self.matrix is None:
            raise ValueError("view built without vectors")
        return self.matrix @ q.astype(np.float32)


class NamespaceCache:
    """LRU of ``NamespaceView``s, at most ``max_mib`` MiB in all (estimated, see
    ``NamespaceView.nbytes``), keyed by namespace and checked against the
    namespace's write version on every use (module docstring). Thread-safe.

    ``hits``/``loads``/``evictions`` count uses served from memory, views
    (re)built, and views dropped to stay within the bound."""

    def __init__(self, max_mib: float) -> None:
        if max_mib <= 0:
            raise ValueError("max_mib must be > 0")
        self.max_bytes = int(max_mib * 2**20)
        self._views: OrderedDict[str, NamespaceView] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.loads = 0
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
        return live * (dim * 4 + _DOC_OVERHEAD + 400) <= self.max_bytes // 2

    def get(self, ns: Namespace, version: int) -> NamespaceView | None:
        """The view of ``ns`` when it is stamped ``version``, else None."""
        with self._lock:
            v = self._views.get(str(ns))
            if v is None or v.version != version:
                return None
            self._views.move_to_end(str(ns))
            self.hits += 1
            return v

    def _put(self, ns: Namespace, view: NamespaceView) -> None:
        with self._lock:
            old = self._views.pop(str(ns), None)
            if old is not None:
                self._bytes -= old.nbytes
            if view.nbytes > self.max_bytes:
                return
            self._views[str(ns)] = view
            self._bytes += view.nbytes
            while self._bytes > self.max_bytes and self._views:
                _, gone = self._views.popitem(last=False)
                self._bytes -= gone.nbytes
                self.evictions += 1

    def drop(self, ns: Namespace) -> None:
        """Forget the view of ``ns`` (a write in this process; others see the version)."""
        with self._lock:
            old = self._views.pop(str(ns), None)
            if old is not None:
                self._bytes -= old.nbytes

    def view(self, store: Store, index: SearchIndex, ns: Namespace, version: int) -> NamespaceView:
        """The view of ``ns`` at its current write version: from memory when the
        stamp is ``version``, else (re)loaded — the version read first, then the
        rows (``Store.search_rows``), so a view is never newer than its stamp.
        Raises StoreError, EmbedderError (a vector neither cached nor indexed
        could not be made)."""
        hit = self.get(ns, version)
        if hit is not None:
            return hit
        with self._lock:
            old = self._views.get(str(ns))
        stamp, rows = store.search_rows(ns)
        view = _load(index, ns, rows, stamp, old)
        with self._lock:
            self.loads += 1
        self._put(ns, view)
        return view


def _load(index: SearchIndex, ns: Namespace, rows: Sequence[MemoryText], version: int,
          old: NamespaceView | None) -> NamespaceView:
    """A view of ``rows``: tokens and vectors of rows unchanged since ``old`` are
    reused; a cold load reads the namespace's stored vectors in one index read."""
    dim = index.embedder.dim
    matrix = np.empty((len(rows), dim), dtype=np.float32)
    docs: list[Sequence[str] | None] = [None] * len(rows)
    missing: list[int] = []
    reuse = {i: j for j, i in enumerate(old.ids)} if old is not None and old.matrix is not None else {}
    for r, m in enumerate(rows):
        j = reuse.get(m.id)
        if j is not None and old is not None and old.texts[j] == m.text:
            matrix[r] = old.matrix[j]  # type: ignore[index]
            docs[r] = old.docs[j]
        else:
            missing.append(r)
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
    out = [d if d is not None else tuple(tokens(rows[r].text)) for r, d in enumerate(docs)]
    return NamespaceView(rows, matrix, version, out)
