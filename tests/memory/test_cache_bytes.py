"""Recall's cache bounds what it holds: a view's ``nbytes`` (what ``NamespaceCache``
counts against ``HUIYI_RECALL_CACHE_MIB``) is at least the memory its objects take,
as ``tracemalloc`` traces it (numpy's buffers included), for chat-like zh/en rows."""

from __future__ import annotations

import gc
import random
import tracemalloc

import numpy as np

from memory.cache import Bm25Postings, NamespaceView
from memory.store import MemoryText
from memory.text import tokens
from memory.types import Namespace, Visibility

NS = Namespace("default", "tg:42")
WORDS = ("hiking weekend sister Berlin nurse cello orchestra marathon October coffee tea band presentation "
         "dog rescue Biscuit reading problem winter ice sculptures board games meetup project").split()
HANZI = "猫煤球西湖跑步花生过敏川菜麻婆豆腐杭州游戏公司台北外婆生日围巾篮球哈尔滨冰雕爬山项目上线周末朋友工作学校医院"


def _texts(n: int) -> list[str]:
    """``n`` chat-like lines, each with words of its own (a person's vocabulary keeps growing)."""
    rng = random.Random(5)
    out = []
    for i in range(n):
        zh = "".join(rng.choice(HANZI) for _ in range(rng.randint(4, 14)))
        en = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
        out.append(f"{zh}，{en} w{i}x{rng.randint(0, 10**6)} 🐶" if i % 2 else f"{en} {zh}{i}")
    return out


def _traced(build) -> tuple[object, int]:
    """What ``build()`` returns and the bytes traced for it while it is alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = build()
        gc.collect()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _rows(texts: list[str]) -> list[MemoryText]:
    return [MemoryText(f"{i:012x}", NS, t, Visibility.PRIVATE, "", version=1) for i, t in enumerate(texts)]


def test_view_nbytes_bounds_what_a_cold_load_holds():
    texts = _texts(300)
    rows = _rows(texts)
    for t in texts:  # the tokenizer's own caches warm before the trace: they are not the view's
        tokens(t)
    matrix = np.random.default_rng(1).standard_normal((len(rows), 384)).astype(np.float32)

    def build() -> NamespaceView:
        v = NamespaceView(rows, matrix.copy(), 1, sig=[(m.id, 1, "private", "") for m in rows])
        v.disclosed(None), v.where  # the lookups a search fills in
        return v

    view, real = _traced(build)
    assert real <= view.nbytes, (real, view.nbytes)


def _grown(n: int):
    """A view of ``n`` chat-like rows appended one capture at a time (as the gateway's
    grows), its lookups filled in: ``(view, bytes tracemalloc saw it hold)``."""
    texts = _texts(n)
    rows = _rows(texts)
    for t in texts:
        tokens(t)
    rng = np.random.default_rng(2)

    def build() -> NamespaceView:
        v = NamespaceView(rows[:1], rng.standard_normal((1, 384)).astype(np.float32), 1,
                          sig=[(rows[0].id, 1, "private", "")])
        for m in rows[1:]:
            v = v.appended([m], rng.standard_normal((1, 384)).astype(np.float32), [tuple(tokens(m.searched))],
                           v.version + 1)
            v.disclosed(None), v.where
        return v

    return _traced(build)


def test_view_nbytes_bounds_what_appends_hold():
    """A view grown one capture at a time (as the gateway's is) holds no more than it counts."""
    view, real = _grown(300)
    assert real <= view.nbytes, (real, view.nbytes)


def test_a_view_grown_by_captures_holds_under_1_kb_a_memory_beside_its_vectors():
    """The postings of a term held once by one document are an int, by several once each one index array (no
    frequency array, no pair): 300 chat-like rows appended one at a time hold ~0.65 KB a memory beside their
    vectors (1.87 KB with two arrays and a pair per term)."""
    view, real = _grown(300)
    assert (real - view.vector_nbytes) / len(view) < 1000, (real - view.vector_nbytes) / len(view)


def test_bm25_scores_are_the_same_bits_whatever_form_a_terms_postings_take():
    """Every term's postings as the pair of arrays (the form before the compact ones) give bit-equal
    BM25 scores, df, holding and has_any, with and without a mask and a minimum length."""
    texts = _texts(200)
    docs = [tuple(tokens(t)) for t in texts]
    compact = Bm25Postings(docs[:120]).appended(docs[120:])
    pairs = Bm25Postings.__new__(Bm25Postings)
    pairs.lengths, pairs.nbytes = compact.lengths, compact.nbytes
    pairs.postings = {t: compact.arrays(t) for t in compact.postings}
    assert {type(p) for p in compact.postings.values()} == {int, np.ndarray, tuple}
    rng = random.Random(3)
    terms = sorted(compact.postings)
    mask = np.random.default_rng(4).random(len(docs)) < 0.6
    for _ in range(50):
        query = {t: rng.choice((1.0, 0.5, 0.25)) for t in rng.sample(terms, 6)}
        for m in (None, mask):
            for min_length in (0.0, 20.0):
                a = compact.scores(query, m, k1=1.2, b=0.75, min_length=min_length)
                b = pairs.scores(query, m, k1=1.2, b=0.75, min_length=min_length)
                assert a.tobytes() == b.tobytes()
            assert [compact.df(t, m) for t in query] == [pairs.df(t, m) for t in query]
            assert compact.has_any(set(query), m) == pairs.has_any(set(query), m)
        assert (compact.holding(query) == pairs.holding(query)).all()
