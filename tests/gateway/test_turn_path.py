"""One embedding per turn (issue 29.2): the query embedding starts before the SQL that
precedes recall (the recall waits for it in a worker thread), and the tail's older lines take the vectors their own turns kept with
the chat log — on another replica too — so the answer path never embeds a document.
Real e5-small (asymmetric: a query and a document vector differ), SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event

from bridges.contract import InboundMessage
from conftest import _make_store
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.core import MemoryCore
from memory.embed import E5SmallEmbedder
from memory.index import SearchIndex, text_hash
from memory.types import ChatKind, ChatRef, Namespace

DM = ChatRef("tg", ChatKind.PRIVATE, "2901")
NS = Namespace("default", "tg:2901")
T0 = datetime.now(timezone.utc) - timedelta(minutes=5)
LINES = {"zh": ["你周末一般做什么呀？", "那你喜欢看电影吗"],
         "en": ["What do you usually do at the weekend?", "Do you like films then?"]}


class CountingE5(E5SmallEmbedder):
    """The shipped e5-small, counting its model calls; ``gate`` (when set) is set at each query call's start."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []
        self.documents: list[str] = []
        self.gate: threading.Event | None = None

    def embed_query(self, text):
        self.queries.append(text)
        if self.gate is not None:
            self.gate.set()
        return super().embed_query(text)

    def embed_documents(self, texts):
        self.documents += list(texts)
        return super().embed_documents(texts)


@pytest.fixture(params=["sqlite", "postgres"])
def e5_store(request, tmp_path):
    """A real store (SQLite or PostgreSQL) and an index directory for e5-small cores over it."""
    store = _make_store(request.param, tmp_path, request)
    yield store, tmp_path / "index"


def _pipeline(store, index_dir) -> tuple[Pipeline, CountingE5]:
    emb = CountingE5()
    return Pipeline(load_settings(), MemoryCore(store, SearchIndex(index_dir, emb))), emb


def _msg(text: str, mid: str, at: datetime) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id="2901", sender_name="小林",
                          chat_kind=ChatKind.PRIVATE, chat_id="2901", text=text, timestamp=at)


@pytest.mark.parametrize("lang", ["zh", "en"])
async def test_a_turn_embeds_its_query_once_and_its_older_lines_from_the_chat_log(e5_store, lang):
    """A person with a memory: turn 2 makes one model call (its own query); its older line takes the
    vector turn 1 kept with the chat-log line (model and text hash), on this replica and on a fresh one
    with an empty cache — never a document embedding before the answer."""
    store, index_dir = e5_store
    first, second = LINES[lang]
    pipe, emb = _pipeline(store, index_dir)
    ns = NS
    pipe.core.add(ns, pipe.core.new(ns, "我喜欢看科幻电影" if lang == "zh" else "I love science fiction films"))
    await pipe.handle("default", _msg(first, "1", T0), background_capture=True)
    assert await pipe.drain(30)
    emb.queries.clear(), emb.documents.clear()
    res = await pipe.handle("default", _msg(second, "2", T0 + timedelta(seconds=30)), background_capture=True)
    assert (emb.queries, emb.documents) == ([second], [])  # before the answer: the capture runs after
    assert await pipe.drain(30)
    assert not res.duplicate
    kept = store.chat_tail("default", DM, 4)
    assert kept[0].text == first and kept[0].vector_key == f"{pipe.core.index.vector_key}/{text_hash(first)}"

    replica, other = _pipeline(store, index_dir)  # another process: nothing of the first one's cache
    await replica.handle("default", _msg(second + "？", "3", T0 + timedelta(seconds=60)), background_capture=True)
    assert other.documents == [] and other.queries == [second + "？"]
    assert await replica.drain(30)


async def test_the_query_embedding_starts_before_the_chat_log_append(e5_store):
    """The query embedding runs beside the SQL before recall: the chat-log insert waits (at most 20 s) for
    the embedding to have started, and does not wait in vain."""
    store, index_dir = e5_store
    pipe, emb = _pipeline(store, index_dir)
    emb.gate = started = threading.Event()
    waited: list[bool] = []

    def hold(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO CHAT_LOG"):
            waited.append(started.wait(20))

    event.listen(store.engine, "before_cursor_execute", hold)
    try:
        await pipe.handle("default", _msg("我最近在学做饭", "1", T0), background_capture=True)
    finally:
        event.remove(store.engine, "before_cursor_execute", hold)
    assert waited == [True]
    assert await pipe.drain(30)


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("text", ["我养了一只叫煤球的黑猫", "My sister Lena lives in Berlin and loves jazz 🎷"])
async def test_a_line_stored_as_it_was_said_takes_its_turns_query_vector(e5_store, text, reuse):
    """A statement captured word for word takes its turn's query vector through e5-small's query-to-passage map
    with ``SearchIndex.reuse_query_vectors``: one model call a turn; with the reuse off (the default: LoCoMo's
    held-out recall, docs/recall.md) it is embedded as a document after its turn's query."""
    store, index_dir = e5_store
    pipe, emb = _pipeline(store, index_dir)
    pipe.core.index.reuse_query_vectors = reuse
    res = await pipe.handle("default", _msg(text, "1", T0), background_capture=True)
    assert await pipe.drain(30)
    stored = [m.text for m in store.list(NS)]
    assert not res.duplicate and text in stored
    assert emb.queries == [text]
    assert (text in emb.documents) is (not reuse)


async def test_the_answer_path_awaits_one_thread_hop_and_signals_its_claim_at_the_append(sqlite_core, monkeypatch):
    """A plain message's answer path awaits one thread hop — identity with the pause, the line's append with
    the chat tail, and recall — beside the query embedding, started first in a worker thread of the loop's
    executor that the recall waits for (its end wakes no one); ``claimed`` is set once the append has committed,
    before the answer; the tail the answer used holds the line just logged."""
    import asyncio

    pipe = Pipeline(load_settings(), sqlite_core)
    sqlite_core.add(NS, sqlite_core.new(NS, "I love science fiction films"))
    await pipe.handle("default", _msg("Hello there, how are you today?", "0", T0), background_capture=True)
    assert await pipe.drain(30)
    hops: list[str] = []
    inner = asyncio.to_thread
    loop = asyncio.get_running_loop()
    executor = loop._default_executor
    submitted: list[str] = []
    submit = executor.submit

    def counted_submit(fn, /, *a, **kw):
        submitted.append(getattr(fn.args[0] if fn.args else fn, "__name__", repr(fn)))
        return submit(fn, *a, **kw)

    async def counted(fn, /, *a, **kw):
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await inner(fn, *a, **kw)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    monkeypatch.setattr(executor, "submit", counted_submit)
    claimed = asyncio.Event()
    res = await pipe.handle("default", _msg("Do you remember what films I love?", "1", T0 + timedelta(seconds=30)),
                            background_capture=True, claimed=claimed)
    monkeypatch.setattr(asyncio, "to_thread", inner)
    monkeypatch.undo()
    assert claimed.is_set()
    assert hops == ["_arrive"]
    assert submitted[0] == "embed"  # the query embedding first, before the hops
    assert res.recalled and "recall" in res.latency_ms
    assert res.prompt and any("what films I love" in m["content"] for m in res.prompt)
    assert await pipe.drain(30)
