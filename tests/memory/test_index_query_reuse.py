"""With ``SearchIndex.reuse_query_vectors`` (off by default: docs/recall.md) a line
stored as it was said takes its turn's query vector through e5-small's
query-to-passage map, never the query vector itself; the rebuild from SQL keeps
such memories where they were. Real SQLite + LanceDB in tmp_path, the real e5-small."""

from __future__ import annotations

import numpy as np
import pytest

from memory.admin import OPERATOR, reindex
from memory.core import MemoryCore
from memory.embed import E5SmallEmbedder
from memory.index import SearchIndex
from memory.store import Store
from memory.types import Namespace

NS = Namespace("default", "tg:4242")
LINES = ["我养了一只叫煤球的黑猫", "我下个月要去成都出差，顺便吃火锅", "My sister Lena lives in Berlin and loves jazz",
         "I started learning the cello last winter 🎻"]


class CountingE5(E5SmallEmbedder):
    """The shipped e5-small, counting the texts it embeds as documents."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.documents: list[str] = []

    def embed_documents(self, texts):
        self.documents += list(texts)
        return super().embed_documents(texts)


class Unmapped(CountingE5):
    """An asymmetric embedder with no query-to-passage map for its configuration."""

    def document_from_query(self, vector):
        return None


def _stored(index: SearchIndex) -> dict[str, np.ndarray]:
    """{text hash: vector} of the namespace's index rows."""
    return {h: v for (_, h), v in index.namespace_vectors(NS).items()}


def _said(core: MemoryCore, lines) -> None:
    """Each of ``lines`` as a turn says it (its query vector embedded) and then stored as it was said, with the
    reuse on; the index written."""
    core.index.reuse_query_vectors = True
    for line in lines:
        core.index.embed_tail([line])
        core.add(NS, core.new(NS, line))
    core.maintain()


@pytest.fixture
def e5_core(tmp_path):
    emb = CountingE5()
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", emb))
    yield core, emb
    core.close()


def test_a_line_stored_as_said_is_stored_as_its_mapped_query_vector(e5_core):
    """The turn embedded the line as its query; its capture stores the map of that vector (no document call), which
    lies nearer the line's document vector than the query vector does (the query vector itself, stored before,
    stood out for unrelated chit-chat: docs/recall.md, "A line stored as it was said")."""
    from memory.index import text_hash

    core, emb = e5_core
    core.index.reuse_query_vectors = True
    queries = {line: core.index.embed_tail([line])[0].copy() for line in LINES}
    for line in LINES:
        core.add(NS, core.new(NS, line))
    core.maintain()
    assert emb.documents == []
    stored = _stored(core.index)
    documents = E5SmallEmbedder().embed_documents(LINES)
    for line, doc in zip(LINES, documents):
        v, q = stored[text_hash(line)], queries[line]
        assert np.allclose(v, emb.document_from_query(q), atol=1e-6)
        assert not np.allclose(v, q, atol=1e-3)
        assert float(v @ doc) >= 0.975 and float(v @ doc) > float(q @ doc) + 0.01, line
    assert core.index.reused_query_vectors == len(LINES)


def test_without_a_map_the_line_is_embedded_as_a_document(tmp_path):
    """An asymmetric embedder with no map (here: none; e5-small with int8 queries over q4 documents, which the map
    was not fitted on) embeds the captured line as a document: a query vector is never stored."""
    assert E5SmallEmbedder(query_precision="int8").document_from_query(np.ones(384, dtype=np.float32)) is None
    emb = Unmapped()
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", emb))
    try:
        _said(core, LINES[:2])
        assert emb.documents == LINES[:2] and core.index.reused_query_vectors == 0
    finally:
        core.close()


def test_the_rebuild_from_sql_keeps_a_mapped_memory_where_it_was(tmp_path):
    """A rebuild in a fresh process (no cached vectors) embeds every memory as a document: a memory stored through
    the map moves by less than the map's error (cosine ≥ 0.975) and its own words still find it first."""
    from memory.index import text_hash

    emb = CountingE5()
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", emb))
    try:
        _said(core, LINES)
        before = _stored(core.index)
    finally:
        core.close()
    fresh = CountingE5()
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", fresh))
    try:
        assert reindex(core, OPERATOR, progress=False) == len(LINES)
        after = _stored(core.index)
        assert sorted(fresh.documents) == sorted(LINES)
        for line in LINES:
            assert float(before[text_hash(line)] @ after[text_hash(line)]) >= 0.975
            assert core.recall(NS, [line])[0].memory.text == line
    finally:
        core.close()


# A MemoryBank-CN person's lines (dev people p00 and p02), each stored as it was said, and an LCCC line unrelated
# to every one of them: stored as query vectors, the line's best memory stood out (z 9.6 and 4.4 above the others,
# cosine 0.88 and 0.86, over recall's bar of 3.5); as document vectors or mapped, below 2.7.
UNRELATED = [
    (["你好，我叫张曼婷，很高兴认识你。", "我很喜欢绘画、弹钢琴和品茶，你觉得有什么好的书可以推荐给我吗？",
      "文艺作品吧，像《了不起的盖茨比》这种充满情调的。", "你好啊AI伴侣，今天我去了公园散步，看到了一些非常漂亮的景色，好想和你分享。",
      "我去的是绿禾公园，看到了一朵开得特别美的樱花，还有一只超级可爱的松鼠！", "如果你有机会，一定要来绿禾公园走一走，那里的景色真的很美。",
      "我还很喜欢读书，最近正在看一本讲述爱情的小说《何以笙箫默》，让我心情很多变。", "嗨，AI伴侣，今天我学了一道新的菜，叫做清蒸鲈鱼，非常好吃！",
      "我一般会配一些清淡的蔬菜，比如西葫芦或是西兰花，这样口感就更加清爽。"],
     "心疼！好好养着，你那腿那么好看，别让留啥印子了"),
    (["你好，我叫李雪，很高兴能认识你。", "我很喜欢旅游和看电影，你呢？", "我最近去了厦门，非常美丽。", "我最喜欢鼓浪屿，那里的美景和氛围都很棒。",
      "我想找一些电影观看，有什么好的推荐吗？", "我喜欢喜剧和爱情片。", "嗯，我会试着多读书、多写作，谢谢你的建议。",
      "最近我去了一场演唱会，非常开心。", "我去看了周杰伦的演唱会，非常震撼。"],
     "晚上九点和崔一起"),
]


class RawQuery(CountingE5):
    """The reuse as it was first built: the query vector itself stored as the document's."""

    def document_from_query(self, vector):
        return vector


@pytest.mark.parametrize("said, line", UNRELATED, ids=["p00", "p02"])
def test_memories_stored_as_said_do_not_stand_out_for_an_unrelated_line(tmp_path, said, line):
    """The relevance decision sees no query-side vector: with the lines stored as their query vectors an unrelated
    line recalled one of them (the fault: a query vector sits nearer other queries than a document does, and
    stands out); with the map, as with document vectors, it recalls nothing."""
    recalled = {}
    for name, emb in (("raw", RawQuery()), ("shipped", CountingE5())):
        core = MemoryCore(Store(f"sqlite:///{tmp_path / f'{name}.db'}"), SearchIndex(tmp_path / f"{name}-index", emb))
        try:
            _said(core, said)
            assert emb.documents == [] and core.index.reused_query_vectors == len(said)
            recalled[name] = [h.memory.text for h in core.recall(NS, [line])]
        finally:
            core.close()
    assert recalled["raw"], "the query-side vectors no longer stand out: this test pins nothing"
    assert recalled["shipped"] == []
