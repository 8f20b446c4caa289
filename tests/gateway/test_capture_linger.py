"""The capture worker with lingering index writes: a batch's messages are read
first and all their facts embedded in one model call before any is written, and
the batch's memories share one index write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bridges.contract import TurnResult
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.core import MemoryCore
from memory.store import ChatLine, PendingCapture, utcnow
from memory.types import ChatKind, ChatRef, Namespace
from tests.memory.test_index_linger import CountingEmbedder

LINES = ["我养了一只叫煤球的黑猫", "I work as a nurse in Leeds", "我妹妹住在成都", "My favourite band is Radiohead"]


async def test_a_batch_embeds_its_facts_in_one_call_and_shares_one_index_write(sqlite_core):
    """Four people's messages queued together: one embed_documents call for all of
    their facts (not one a message), stored before the lingering write, which then
    writes them in one go without embedding again."""
    core = MemoryCore(sqlite_core.store, sqlite_core.index, index_linger_s=30)
    pipeline = Pipeline(load_settings(), core)
    counting = CountingEmbedder(core.index.embedder)
    core.index.embedder = counting
    said = datetime.now(UTC) - timedelta(minutes=1)
    jobs, results = [], []
    for n, text in enumerate(LINES):
        ns, chat = Namespace("default", f"tg:{100 + n}"), ChatRef("tg", ChatKind.PRIVATE, str(100 + n))
        line = core.store.append_chat("default", chat, ChatLine("user", str(100 + n), text, said, f"m{n}"), capture=ns)
        jobs.append(PendingCapture(line, "default", ns, chat, f"m{n}", text, said, addressed=True, queued=utcnow()))
        results.append(TurnResult(tenant="default", namespace=str(ns), chat=chat.key, message_id=f"m{n}"))
    try:
        for job, res in zip(jobs, results):
            pipeline.captures.hold(job.line_id)
            pipeline.captures.put([], job, res, None)
        assert await pipeline.captures.drain(60)
        assert all(res.captured for res in results)
        assert counting.calls == 1
        assert any(core.index_lingering(job.namespace) for job in jobs)
        core.flush_index()
        assert counting.calls == 1 and core.index_writes == 1
        assert all(core.index.ids(job.namespace) == set(res.captured) for job, res in zip(jobs, results))
    finally:
        core.index.embedder = counting.inner
        core.flush_index()
