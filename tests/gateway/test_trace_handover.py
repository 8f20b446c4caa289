"""A turn hands its recall trace to the capture of its line: a capture that stores a fact writes the trace in
its version bump's row update (no statement of its own), one that stores nothing in the transaction that marks
the line done, and a turn with no capture here writes it as before; the gateway that holds the trace answers
``/memory why`` from it before the capture commits, another replica once it has — SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import pytest
from conftest import hold_calls
from sqlalchemy import event

from bridges.contract import InboundMessage
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.store import Store
from memory.types import ChatKind, Namespace

NS = Namespace("default", "tg:1001")


def msg(text: str, mid: str, at: datetime) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id="1001", sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id="1001", text=text, timestamp=at)


@pytest.fixture
def pipe(core):
    return Pipeline(load_settings(), core)


class _TraceWrites:
    """The SQL statements of ``store``'s engine that write a trace (``trace_at``), while inside."""

    def __init__(self, store: Store) -> None:
        self.store, self.sql = store, []

    def _heard(self, _conn, _cursor, statement, _params, _context, _many) -> None:
        if "trace_at" in statement and not statement.lstrip().startswith("SELECT"):
            self.sql.append(statement)

    def __enter__(self) -> _TraceWrites:
        event.listen(self.store.engine, "before_cursor_execute", self._heard)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.store.engine, "before_cursor_execute", self._heard)


async def _held_captures(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Captures wait (in their thread) until ``go`` is set; ``entered`` says one is waiting."""
    import gateway.capture_queue as gp

    return hold_calls(monkeypatch, gp, "capture", 20)


@pytest.mark.parametrize("text,stores", [("我养了一只叫煤球的黑猫🐈", True), ("哈哈哈 好的 👍", False)],
                         ids=["a-fact", "chit-chat"])
async def test_the_trace_is_written_by_the_capture_and_read_here_before_it_commits(pipe, monkeypatch, text, stores):
    """Background turn: while its capture waits, this gateway's last recall is the turn's and another replica's
    is none; once the capture ran, exactly one statement wrote the trace — the version bump when the capture
    stored a fact (its ``changes`` log beside it), capture_done's when it stored nothing — and the replica
    reads it."""
    entered, go = await _held_captures(monkeypatch)
    store = pipe.core.store
    at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=1)
    res = await pipe.handle("default", msg(text, "1", at), background_capture=True)
    assert res.capture_pending
    for _ in range(2000):
        if entered.is_set():
            break
        await asyncio.sleep(0.01)
    assert entered.is_set()
    other = Store(store.url, schema=store.schema)
    try:
        mine = await asyncio.to_thread(store.last_recall, NS)
        assert mine is not None and mine.at == at and mine.chat == "tg:private:1001"
        assert await asyncio.to_thread(other.last_recall, NS) is None
        with _TraceWrites(store) as writes:
            go.set()
            assert await pipe.drain(20)
        assert bool(pipe.core.list(NS)) is stores
        assert len(writes.sql) == 1
        assert ("changes" in writes.sql[0]) is stores  # the bump's row update carried it
        assert len(store.held_traces) == 0
        assert (await asyncio.to_thread(other.last_recall, NS)).at == at
    finally:
        go.set()
        other.close()


async def test_a_turn_without_a_capture_here_writes_its_trace_itself(pipe):
    """Off the record (/memory pause): nothing is captured, and the turn writes its trace at once, as before —
    another replica reads it when the turn returns."""
    store = pipe.core.store
    at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=2)
    pause = msg("/memory pause", "1", at).model_copy(update={"is_command": True, "language": "en"})
    await pipe.handle("default", pause)
    with _TraceWrites(store) as writes:
        res = await pipe.handle("default", msg("我今天有点累", "2", at + timedelta(seconds=30)))
    assert res.paused and not res.capture_pending and res.captured == []
    assert len(writes.sql) == 1 and "changes" not in writes.sql[0]
    other = Store(store.url, schema=store.schema)
    try:
        assert (await asyncio.to_thread(other.last_recall, NS)).at == at + timedelta(seconds=30)
    finally:
        other.close()
