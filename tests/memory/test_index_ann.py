"""The ANN vector index (``memory.index``, issue 14): once built, a vector search
of one namespace returns only that namespace's rows, scored by their exact
cosine, finds a stored vector as its own top hit, keeps the group-chat
disclosure filter, and a thin namespace scattered through the table still gets
its k hits. Real LanceDB in tmp_path; a seeded embedder so that a few thousand
rows need no model."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from memory.index import SearchIndex
from memory.types import ChatKind, ChatRef, Memory, Namespace, Visibility

DIM = 32
BIG, THIN = Namespace("default", "tg:1"), Namespace("default", "tg:2")
GROUP, OTHER_GROUP = ChatRef("tg", ChatKind.GROUP, "-1001"), ChatRef("tg", ChatKind.GROUP, "-1002")
ROWS = 3_000
"""Rows of the test table: every 30th is THIN's (100 rows scattered through the table)."""


class SeededEmbedder:
    """A deterministic stand-in for a model, for tables too big to embed for real:
    each text's SHA-256 seeds a draw of one of ``TOPICS`` topic directions plus
    noise, so that the vectors cluster as a model's do (uniformly random vectors
    have no neighbourhoods for IVF partitions to find)."""

    name = "seeded-32"
    dim = DIM
    symmetric = True
    _topics = np.random.default_rng(7).standard_normal((40, DIM))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        rows = []
        for t in texts:
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big"))
            rows.append(self._topics[rng.integers(len(self._topics))] + 0.6 * rng.standard_normal(DIM))
        out = np.asarray(rows, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def _memory(i: int) -> Memory:
    """Row ``i``: THIN's every 30th (a third of them learned in GROUP, a third in
    OTHER_GROUP), else BIG's."""
    if i % 30:
        return Memory(id=f"b{i:05d}", namespace=BIG, text=f"big memory {i}")
    origin = (GROUP, OTHER_GROUP, None)[(i // 30) % 3]
    return Memory(id=f"t{i:05d}", namespace=THIN, text=f"thin memory {i}", origin=origin,
                  visibility=Visibility.GROUP if origin else Visibility.PRIVATE)


@pytest.fixture(scope="module")
def ann_index(tmp_path_factory) -> SearchIndex:
    index = SearchIndex(tmp_path_factory.mktemp("ann") / "index", SeededEmbedder(), ann_min_rows=2_000)
    memories = [_memory(i) for i in range(ROWS)]
    index.upsert(memories[:1_500])
    index.optimize()
    assert not index.has_ann()  # below ann_min_rows: flat
    index.upsert(memories[1_500:])
    index.optimize()
    assert index.has_ann()
    return index


def _queries(n: int) -> np.ndarray:
    return SeededEmbedder().embed_documents([f"query {i}" for i in range(n)])


def _stored(index: SearchIndex, ns: Namespace) -> dict[str, np.ndarray]:
    return {mid: v for (mid, _), v in index.namespace_vectors(ns).items()}


def test_ann_search_returns_only_the_namespaces_rows_with_exact_cosines(ann_index):
    """Both namespaces, 20 queries each: every hit is of the namespace searched, its
    score is the exact cosine of its stored vector, scores descend, and THIN (100
    rows, one in 30 of the table) gets all 10 hits asked for."""
    for ns in (BIG, THIN):
        vectors = _stored(ann_index, ns)
        for q in _queries(20):
            hits = ann_index.search_vector(ns, q, 10)
            assert len(hits) == 10
            assert all(h.id in vectors for h in hits)
            for h in hits:
                assert h.score == pytest.approx(float(vectors[h.id] @ q), abs=1e-5)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_ann_search_finds_a_stored_vector_as_its_own_top_hit(ann_index):
    """A query equal to a stored vector of THIN finds that memory first, cosine 1."""
    vectors = _stored(ann_index, THIN)
    for mid in sorted(vectors)[:20]:
        top = ann_index.search_vector(THIN, vectors[mid], 5)[0]
        assert (top.id, round(top.score, 4)) == (mid, 1.0)


def test_ann_search_agrees_with_exact_search(ann_index):
    """recall@10 of the ANN search against the flat one (``exact=True``) over 30
    queries in each namespace: at least 0.95 (the refine re-ranks 100 candidates)."""
    found = wanted = 0
    for ns in (BIG, THIN):
        for q in _queries(30):
            exact = {h.id for h in ann_index.search_vector(ns, q, 10, exact=True)}
            found += len(exact & {h.id for h in ann_index.search_vector(ns, q, 10)})
            wanted += len(exact)
    assert found / wanted >= 0.95


def test_ann_search_keeps_the_group_disclosure_filter(ann_index):
    """In GROUP only THIN's memories learned in GROUP come back (never OTHER_GROUP's or
    private ones), however many are asked for."""
    in_group = {f"t{i:05d}" for i in range(0, ROWS, 30) if (i // 30) % 3 == 0}
    for q in _queries(10):
        hits = ann_index.search_vector(THIN, q, 50, chat=GROUP)
        assert hits and {h.id for h in hits} <= in_group
        assert len(hits) == len(in_group)


def test_purge_rewrites_the_vector_index_without_the_forgotten_rows(tmp_path):
    """A forget's purge (``SearchIndex.purge``) leaves no file of the vector index
    that held the deleted rows: the index is rewritten over the live rows only
    and the old one's directory is removed (module docstring's promise)."""
    index = SearchIndex(tmp_path / "index", SeededEmbedder(), ann_min_rows=2_000)
    index.upsert([_memory(i) for i in range(2_100)])
    index.optimize()

    def vector_index():
        ix = next(ix for ix in index._table.list_indices() if "vector" in ix.columns)
        return ix.index_uuid, index._table.index_stats(ix.name).num_indexed_rows

    old, rows = vector_index()
    thin = sorted(index.ids(THIN))
    index.delete(THIN, thin)
    index.purge()
    new, left = vector_index()
    assert new != old and left == rows - len(thin)
    assert not (tmp_path / "index" / "memories.lance" / "_indices" / old).exists()
    assert index.search_vector(BIG, _queries(1)[0], 5)
