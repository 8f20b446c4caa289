"""The capture worker reads once per batch what it used to read once per message
(issue 29.5): whether each message was withdrawn, and the companion's line before
it (the memory's context) — with the same contexts and the same refusals of a
withdrawn message as the per-message reads. zh and en, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import event

from bridges.contract import TurnResult
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.store import ChatLine, PendingCapture, utcnow
from memory.types import ChatKind, ChatRef, Namespace

T0 = datetime.now(timezone.utc) - timedelta(minutes=10)
ASKED = [("你们团队有多少人？", "八个人左右，都挺好相处的"), ("What do you do for a living?", "I'm a nurse in Leeds"),
         ("你周末喜欢干嘛？", "我周末喜欢去爬山"), ("Do you have any pets?", "I have a cat called Miso")]


async def test_a_capture_batch_reads_withdrawals_and_contexts_once_with_the_same_results(core):
    """Eight lines of eight people (one withdrawn) captured in one batch: the redactions read before and
    after the batch, the lines before read once; each memory's context is the companion's question it
    answered, and the withdrawn message stores nothing."""
    pipe = Pipeline(load_settings(), core)
    store = core.store
    jobs = []
    for i in range(8):
        asked, said = ASKED[i % len(ASKED)]
        chat, ns = ChatRef("tg", ChatKind.PRIVATE, str(3000 + i)), Namespace("default", f"tg:{3000 + i}")
        at = T0 + timedelta(seconds=i)
        store.append_chat("default", chat, ChatLine("bot", "bot", asked, at - timedelta(seconds=1), "", "Mochi"))
        line = store.append_chat("default", chat, ChatLine("user", str(3000 + i), said, at, f"m{i}"), capture=ns)
        jobs.append(PendingCapture(line, "default", ns, chat, f"m{i}", said, at, addressed=True, queued=utcnow()))
    store.withdraw_line(jobs[5].namespace, jobs[5].chat, "m5")  # withdrawn before its capture ran
    expected = {j.line_id: pipe.captures.context_of("default", j.chat, j.line_id, j.at) for j in jobs}
    seen: list[str] = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    def reading(statements):  # the store's hot reads go through the DBAPI cursor, beside SQLAlchemy's events
        seen.extend(sql for sql, _ in statements)
        return read_many(statements)

    read_many = store._read_many
    store._read_many = reading
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        results = [TurnResult(tenant="default", namespace=str(j.namespace), chat=j.chat.key, message_id=j.message_id)
                   for j in jobs]
        for job, res in zip(jobs, results):
            pipe.captures.put([], job, res, None)
        assert await pipe.drain(60)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
        del store._read_many
    # one check before the batch, one after it for the seven that stored something (it was 8 + 7 before)
    assert sum("chat_redactions" in s for s in seen) == 2, [s for s in seen if "chat_redactions" in s]
    assert sum("FROM chat_log" in s and "max(" in s.lower() for s in seen) == 1
    for j, res in zip(jobs, results):
        stored = core.list(j.namespace)
        if j.message_id == "m5":
            assert stored == [] and res.captured == []
            continue
        assert stored and res.captured, j.text
        assert all(m.context == expected[j.line_id] != "" for m in stored), (j.text, [m.context for m in stored])
