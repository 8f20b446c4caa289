"""LanceDB's own caches of the index stay within ``SearchIndex``'s ``cache_mib``, however
many writes (each a new table version) the process reads; searches still find every
memory. Real SQLite + LanceDB in tmp_path, the real offline embedder."""

from __future__ import annotations

import pytest

from memory.core import MemoryCore
from memory.index import SearchIndex
from memory.recall import RecallParams
from memory.store import Store
from memory.types import Namespace

CAP_MIB = 0.125
LINES = [f"第{i}件小事：我今天喝了{i}杯奶茶 🧋" if i % 2 else f"note {i}: I walked {i} km by the river today"
         for i in range(12)]


def test_lancedb_caches_stay_within_the_bound_across_writes(tmp_path, embedder):
    """12 single-memory writes in three namespaces, each followed by an index search (zh and en): LanceDB's
    caches hold at most cache_mib (its defaults, GiBs, kept every version read: ~40 KiB a write), and the
    memories are all found."""
    index = SearchIndex(tmp_path / "index", embedder, cache_mib=CAP_MIB)
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), index)
    through_index = RecallParams(k=3, exact_max=0)  # every recall goes through LanceDB
    try:
        for i, line in enumerate(LINES):
            ns = Namespace("default", f"tg:{100 + i % 3}")
            core.add(ns, core.new(ns, line))
            assert core.recall(ns, [line], params=through_index), line
        assert 0 < index.cache_bytes <= CAP_MIB * 2**20
        assert sum(len(index.ids(Namespace("default", f"tg:{100 + j}"))) for j in range(3)) == len(LINES)
    finally:
        core.close()


def test_a_bound_that_is_not_positive_is_refused(tmp_path, embedder):
    """cache_mib 0 or below: ValueError, nothing opened."""
    with pytest.raises(ValueError, match="cache_mib"):
        SearchIndex(tmp_path / "index", embedder, cache_mib=0)
    assert not (tmp_path / "index").exists()


def test_opening_the_index_moves_pyarrow_to_malloc(tmp_path, embedder):
    """M1 of issue 41's soak: pyarrow's bundled mimalloc kept the index writes' buffers (freed on LanceDB's
    threads) inside its arena, ~47 KiB a stored memory without end; with the index open pyarrow allocates
    with malloc, whose free pages go back to the system, and a write and a search still work."""
    pa = pytest.importorskip("pyarrow")
    try:
        pa.set_memory_pool(pa.mimalloc_memory_pool())
    except NotImplementedError:
        pytest.skip("this pyarrow has no mimalloc")
    index = SearchIndex(tmp_path / "index", embedder, cache_mib=CAP_MIB)
    assert pa.default_memory_pool().backend_name == "system"
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), index)
    try:
        ns = Namespace("default", "tg:7")
        core.add(ns, core.new(ns, LINES[1]))
        assert core.recall(ns, [LINES[1]], params=RecallParams(k=3, exact_max=0))
    finally:
        core.close()
