"""The speed benchmark's bulk-built store is a store the core reads like one built
by captures (live counts, texts, tokens, vectors; cached recall equal to exact
search), on SQLite and PostgreSQL, and a kept store is reused, not rebuilt."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import speed, synthetic  # noqa: E402
from memory.core import MemoryCore  # noqa: E402
from memory.index import text_hash  # noqa: E402
from memory.recall import RecallParams  # noqa: E402
from memory.store import utcnow  # noqa: E402
from memory.text import fts_text, normalise  # noqa: E402

SMALL = synthetic.StoreConfig(total=700, namespaces=7, sizes=(300, 100), pool=80)


def test_a_bulk_built_store_reads_like_a_captured_one(core):
    """Rows, live counts, norms, tokens and vectors as capture would write them;
    a cached recall of the big namespace equals exact search (zh, en, mixed)."""
    lay = synthetic.layout(SMALL)
    vecs = core.index.embedder.embed_documents(lay.pool[:50])  # fewer vectors than sentences: they are shared
    synthetic.build_sql(core.store, lay)
    synthetic.build_index(core.index, lay, vecs)

    per_ns = Counter(lay.spaces[i] for i in lay.ns.tolist())
    assert per_ns[lay.big] == 300 and per_ns[lay.mid] == 100 and sum(per_ns.values()) == 700
    for ns, n in per_ns.items():
        assert core.store.namespace_state(ns)[1] == n
        rows = core.store.search_rows(ns)[1]
        assert len(rows) == n and len({m.text for m in rows}) == n  # a text at most once per namespace
    assert core.index.count() == 700

    r = int(np.flatnonzero(lay.date >= 0)[0])  # a dated repeat, 「3月4日：…」
    m = core.store.get(lay.spaces[lay.ns[r]], f"{r:012x}")
    assert m.text == lay.text(r) and "：" in m.text
    stored = core.index.namespace_vectors(m.namespace)
    assert np.allclose(stored[(m.id, text_hash(m.text))], vecs[int(lay.base[r]) % 50])
    row = core.index._table.search().where(f"id = '{m.id}'").select(["tokens"]).limit(1).to_list()[0]
    assert row["tokens"] == fts_text(m.text)
    with core.store.engine.connect() as conn:
        norm = conn.exec_driver_sql(f"SELECT norm FROM memories WHERE id = '{m.id}'").scalar()
    assert norm == normalise(m.text)

    cached = MemoryCore(core.store, core.index, cache_mib=16)
    for q in ["你还记得我喜欢吃什么吗", "do you remember where my sister lives?", "周末要不要一起去成都"]:
        now = utcnow()
        # the paths compared, not the relevance decision: a synthetic store's sentences are drawn at random, so
        # none stands out for a line and the decision would rightly recall nothing on either path
        exact = [h.memory.id for h in core.recall(lay.big, [q], now=now,
                                                  params=RecallParams(k=10, exact_max=10**9, standout=0.0))]
        assert exact and [h.memory.id for h in cached.recall(lay.big, [q], now=now,
                                                             params=RecallParams(k=10, standout=0.0))] == exact


def test_a_kept_store_is_reused_and_a_broken_one_rebuilt(tmp_path, monkeypatch):
    """The second call finds the kept store by its key and reuses it; without its
    marker (a run that died while writing into it) it is built again."""
    monkeypatch.setitem(speed.STORES, "tiny", SMALL)
    first = speed._store("tiny", tmp_path)
    again = speed._store("tiny", tmp_path)
    assert not first.reused and again.reused and again.dir == first.dir and again.record == first.record
    synthetic.clear_marker(first.dir / "huiyi.db")
    assert not speed._store("tiny", tmp_path).reused


def test_the_ann_copy_is_built_once_and_its_vector_channel_is_checked_against_exact(sqlite_core, tmp_path):
    """``speed._ann_index`` copies a store's index and builds the ANN vector index on
    the copy (the original stays flat), reused on the next run; ``_vector_channel``
    times both and scores the ANN top 10 against the exact one (recall in [0, 1],
    here all found: 300 rows, every candidate refined)."""
    from memory.index import SearchIndex

    lay = synthetic.layout(SMALL)
    inner = sqlite_core.index.embedder
    vecs = inner.embed_documents(lay.pool[:50])
    idir = tmp_path / "speed-index"  # the fixture core has tmp_path / "index"
    flat = SearchIndex(idir, synthetic.PooledEmbedder(inner, lay.pool, vecs))
    synthetic.build_index(flat, lay, vecs)
    np.save(idir / "pool.npy", vecs)
    synthetic.build_sql(sqlite_core.store, lay)

    adir, record, reused = speed._ann_index(idir, inner)
    assert not reused and record["partitions"] >= 1 and speed._ann_index(idir, inner)[2]
    ann = SearchIndex(adir, synthetic.PooledEmbedder(inner, lay.pool, vecs))
    assert ann.has_ann() and not flat.has_ann() and ann.count() == flat.count() == 700
    out = speed._vector_channel(MemoryCore(sqlite_core.store, flat), MemoryCore(sqlite_core.store, ann), lay.big,
                                ["你还记得我喜欢吃什么吗", "do you remember where my sister lives?", "周末要不要一起去成都"])
    assert out["ann recall@10"] == 1.0 and 0.0 <= out["ann recall@10 id"] <= 1.0
    assert out["vector flat p50"] > 0 and out["vector ann p50"] > 0
