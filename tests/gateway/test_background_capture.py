"""Capture after the reply: a bridge that answers in its own HTTP response gets
the reply before the capture has run, and the capture is durable — the person's
chat-log line carries it until it is done, a crash or a failure leaves it for
``resume_captures``, and a forget of the person removes it with the line."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from gateway.config import load_settings
from bridges.contract import InboundMessage
from gateway.pipeline import Pipeline
from memory.store import ChatLine
from memory.types import ChatKind, ChatRef, Namespace

NS = Namespace("default", "tg:1001")
DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
SECRET = "whsec-bg"


def msg(text: str, mid: str) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id="1001", sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id="1001", text=text,
                          timestamp=datetime.now(timezone.utc))


@pytest.fixture
def pipeline(sqlite_core):
    return Pipeline(load_settings(), sqlite_core)


async def test_background_turn_returns_before_the_capture_and_drain_finishes_it(pipeline):
    """The turn result says the capture is pending; after drain the fact is stored
    and its chat-log line is no longer pending."""
    res = await pipeline.handle("default", msg("我养了一只叫煤球的黑猫🐈", "1"), background_capture=True)
    assert res.capture_pending and res.captured == []
    assert await pipeline.drain(10)
    assert [m.text for m in pipeline.core.list(NS)] == ["我养了一只叫煤球的黑猫🐈"]
    assert pipeline.core.store.pending_captures(datetime.now(timezone.utc) + timedelta(seconds=1)) == []


async def test_a_capture_lost_in_a_crash_is_resumed(pipeline):
    """A line whose capture was queued but never ran (the process died after the
    reply) is captured by resume_captures, once; a fresh one is left to its task."""
    store = pipeline.core.store
    said = datetime.now(timezone.utc) - timedelta(minutes=5)
    store.append_chat("default", DM, ChatLine("user", "1001", "I work as a nurse in Leeds", said, "7"), capture=NS)
    assert await pipeline.resume_captures(older_than_s=60) == 0  # queued just now: maybe still running elsewhere
    assert await pipeline.resume_captures(older_than_s=0) == 1
    mem = pipeline.core.list(NS)
    assert [m.text for m in mem] == ["I work as a nurse in Leeds"]
    assert mem[0].source_message_id == "7" and mem[0].origin == DM and mem[0].created_at == said
    assert await pipeline.resume_captures(older_than_s=0) == 0


async def test_a_failed_capture_stays_pending_and_a_retry_stores_it(pipeline, monkeypatch):
    """A capture that fails after the reply is logged and left on its line; the
    resume stores it. A capture that fails on its last try is given up (logged)."""
    import gateway.capture_queue as gp

    real = gp.capture
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(gp, "capture", flaky)
    await pipeline.handle("default", msg("我对花生过敏", "2"), background_capture=True)
    assert await pipeline.drain(10)
    assert pipeline.core.list(NS) == []
    assert await pipeline.resume_captures(older_than_s=0) == 1
    assert [m.text for m in pipeline.core.list(NS)] == ["我对花生过敏"]

    monkeypatch.setattr(gp, "capture", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("always")))
    await pipeline.handle("default", msg("我喜欢周末去爬山", "3"), background_capture=True)
    assert await pipeline.drain(10)
    assert await pipeline.resume_captures(older_than_s=0) == 1  # last try: fails, given up
    assert await pipeline.resume_captures(older_than_s=0) == 0


async def test_forgetting_the_person_removes_a_pending_capture(pipeline):
    """forget_subject deletes the person's chat lines, pending captures with them:
    nothing they said comes back afterwards."""
    from memory.admin import Authority, forget_subject

    store = pipeline.core.store
    store.append_chat("default", DM, ChatLine("user", "1001", "我的秘密是我怕黑", datetime.now(timezone.utc), "9"),
                      capture=NS)
    forget_subject(pipeline.core, NS, Authority("admin:1", "default"))
    assert await pipeline.resume_captures(older_than_s=0) == 0
    assert pipeline.core.list(NS) == []


def test_a_pending_line_is_not_pruned_from_the_chat_log(sqlite_core):
    """The chat log keeps its bounded length, but not by dropping a line whose
    capture is still due."""
    store = sqlite_core.store
    t0 = datetime.now(timezone.utc)
    store.append_chat("default", DM, ChatLine("user", "1001", "我叫阿杰", t0, "1"), keep=2, capture=NS)
    for i in range(2, 6):
        store.append_chat("default", DM, ChatLine("user", "1001", f"line {i}", t0, str(i)), keep=2)
    pending = store.pending_captures(t0 + timedelta(minutes=1))
    assert [(p.text, p.namespace, p.chat) for p in pending] == [("我叫阿杰", NS, DM)]
    assert [line.text for line in store.chat_tail("default", DM, 10)] == ["我叫阿杰", "line 4", "line 5"]


def test_webhook_answers_before_a_slow_capture_finishes(gateway, llm):
    """Through the real app: with LLM fact extraction taking 1.5 s, the webhook's
    answer (with the reply) comes back well before it; the fact lands afterwards."""
    client = gateway(webhook={"secret": SECRET})

    def post(mid: str, text: str):
        raw = json.dumps({"sender_id": "u1", "chat_id": "u1", "message_id": mid, "text": text},
                         ensure_ascii=False).encode()
        ts = str(int(time.time()))
        return client.post("/webhook/default", content=raw, headers={
            TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(SECRET, ts, raw), "Content-Type": "application/json"})

    llm.enqueue_extraction(json.dumps({"facts": []}))
    assert post("m0", "你好").status_code == 200  # warm-up: first tokenisation, clients
    assert client.portal.call(client.app.state.pipeline.drain, 30)
    llm.enqueue("你好阿杰")
    llm.enqueue_extraction(json.dumps({"facts": [{"text": "我叫阿杰", "category": "profile", "key": "name",
                                                   "importance": 0.9}]}, ensure_ascii=False), delay=1.5)
    t0 = time.perf_counter()
    r = post("m1", "我叫阿杰")
    answered = time.perf_counter() - t0
    assert r.status_code == 200 and r.json()["reply"] == "你好阿杰"
    assert answered < 1.0
    ns = Namespace("default", "web:u1")
    assert client.app.state.pipeline.core.store.count(ns) == 0
    assert client.portal.call(client.app.state.pipeline.drain, 30)
    assert [m.text for m in client.app.state.pipeline.core.list(ns)] == ["我叫阿杰"]


def test_v1_turns_can_capture_in_the_background(gateway):
    """``background_capture`` on the HTTP API: the answer says the capture is
    pending; without it the answer lists what was captured, as before."""
    client = gateway()
    body = {"tenant": "default", "message": {"platform": "tg", "message_id": "1", "sender_id": "1001",
                                             "chat_kind": "private", "chat_id": "1001", "text": "我在上海做程序员"}}
    r = client.post("/v1/turns", json={**body, "background_capture": True})
    assert r.status_code == 200 and r.json()["capture_pending"] is True and r.json()["captured"] == []
    assert client.portal.call(client.app.state.pipeline.drain, 30)
    assert [m.text for m in client.app.state.pipeline.core.list(NS)] == ["我在上海做程序员"]
    body["message"] = {**body["message"], "message_id": "2", "text": "我喜欢喝美式咖啡"}
    r = client.post("/v1/turns", json=body)
    assert r.json()["capture_pending"] is False and len(r.json()["captured"]) == 1


async def test_two_background_captures_of_one_person_keep_the_latest_fact(pipeline):
    """Captures of one person may finish in any order; latest-wins still holds
    because it compares when the facts were said."""
    t0 = datetime.now(timezone.utc)
    first = msg("我的猫叫煤球", "a").model_copy(update={"timestamp": t0})
    second = msg("我的猫叫雪球", "b").model_copy(update={"timestamp": t0 + timedelta(seconds=2)})
    await asyncio.gather(pipeline.handle("default", second, background_capture=True),
                         pipeline.handle("default", first, background_capture=True))
    assert await pipeline.drain(10)
    assert [m.text for m in pipeline.core.list(NS)] == ["我的猫叫雪球"]


@pytest.fixture
def any_pipeline(core):
    """A pipeline over the SQLite and the PostgreSQL core."""
    return Pipeline(load_settings(), core)


async def test_forget_subject_while_captures_are_queued_brings_nothing_back(any_pipeline):
    """Facts whose capture is still queued when the person is forgotten are not
    stored afterwards (the queue runs after the forget); said again later, they are."""
    from memory.admin import Authority, forget_subject

    p = any_pipeline
    for i, text in enumerate(["我的生日是6月14日", "我养了一只叫团子的猫", "I live in Leeds"]):
        res = await p.handle("default", msg(text, f"q{i}"), background_capture=True)
        assert res.capture_pending
    # the worker has not run yet: nothing awaited since the turns returned
    forget_subject(p.core, NS, Authority("admin:1", "default"))
    assert await p.drain(10)
    assert await p.resume_captures(older_than_s=0) == 0
    assert p.core.list(NS) == []
    later = msg("我养了一只叫团子的猫", "q9").model_copy(update={"timestamp": datetime.now(timezone.utc)
                                                                    + timedelta(seconds=1)})
    await p.handle("default", later, background_capture=True)
    assert await p.drain(10)
    assert [m.text for m in p.core.list(NS)] == ["我养了一只叫团子的猫"]


def command(text: str, mid: str) -> InboundMessage:
    return msg(text, mid).model_copy(update={"is_command": True, "language": "en"})


@pytest.mark.parametrize("stored_first", [True, False], ids=["with-a-memory", "only-queued"])
async def test_memory_forget_all_covers_captures_still_pending(pipeline, stored_first):
    """/memory forget all + confirm with facts whose capture is still due (a crash
    before it ran, or simply not run yet): they count as something to forget, none
    of them is stored afterwards, and none of the person's lines stays in the
    conversation tail that prompts are built from."""
    store = pipeline.core.store
    said = datetime.now(timezone.utc) - timedelta(minutes=2)
    store.append_chat("default", DM, ChatLine("user", "1001", "我对花生过敏", said, "p1"), capture=NS)
    if stored_first:
        await pipeline.handle("default", msg("我喜欢喝美式咖啡", "p2"))
        assert len(pipeline.core.list(NS)) == 1
    ask = await pipeline.handle("default", command("/memory forget all", "p3"))
    assert ask.command and "confirm" in (ask.reply or "")
    done = await pipeline.handle("default", command("/memory forget all confirm", "p4"))
    assert done.command and pipeline.core.list(NS) == []
    assert await pipeline.resume_captures(older_than_s=0) == 0
    assert pipeline.core.list(NS) == []
    assert [line for line in store.chat_tail("default", DM, 20) if line.role == "user"] == []


def test_group_forget_all_stops_that_groups_pending_captures_only(sqlite_core):
    """A tombstone for what someone said in one group refuses that group's queued
    facts and leaves their private ones and another group's alone."""
    from memory.types import Visibility

    core = sqlite_core
    g1, g2 = ChatRef("tg", ChatKind.GROUP, "-1001"), ChatRef("tg", ChatKind.GROUP, "-1002")
    said = datetime.now(timezone.utc) - timedelta(minutes=1)
    core.forget_everything_said_before_now(NS, g1.group_key)

    def add(text, chat, vis):
        return core.add(NS, core.new(NS, text, origin=chat, visibility=vis, created_at=said), said_at=said).action

    assert add("我家的猫叫煤球", g1, Visibility.GROUP) == "rejected"
    assert add("我喜欢爬山", g2, Visibility.GROUP) == "stored"
    assert add("我对花生过敏", DM, Visibility.PRIVATE) == "stored"


async def test_claim_and_chat_line_commit_together(pipeline):
    """The delivery of a plain message is claimed in the transaction that logs its
    line: a re-delivery is a duplicate and writes no second line."""
    first = await pipeline.handle("default", msg("我在上海做程序员", "c1"), background_capture=True)
    again = await pipeline.handle("default", msg("我在上海做程序员", "c1"), background_capture=True)
    assert not first.duplicate and again.duplicate and not again.capture_pending
    assert await pipeline.drain(10)
    lines = pipeline.core.store.chat_tail("default", DM, 10)
    assert [line.message_id for line in lines] == ["c1"]
    assert [m.text for m in pipeline.core.list(NS)] == ["我在上海做程序员"]


async def test_nul_in_a_message_is_dropped_not_fatal(any_pipeline):
    """A NUL character (PostgreSQL refuses it in text) is dropped from the text."""
    res = await any_pipeline.handle("default", msg("我喜欢\x00猫", "n1"))
    assert not res.duplicate
    assert [m.text for m in any_pipeline.core.list(NS)] == ["我喜欢猫"]


def test_oversized_bodies_are_refused_before_they_are_read(gateway):
    """Over 1 MiB: 413 from the declared length, before signature or parsing; the
    error never echoes what was sent."""
    client = gateway(webhook={"secret": SECRET})
    big = b'{"text": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    for path in ("/webhook/default", "/v1/turns"):
        r = client.post(path, content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and len(r.content) < 1000
    raw = json.dumps({"sender_id": "u1", "chat_id": "u1", "message_id": "m1", "text": "字" * 16_001},
                     ensure_ascii=False).encode()
    ts = str(int(time.time()))
    r = client.post("/webhook/default", content=raw, headers={
        TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(SECRET, ts, raw), "Content-Type": "application/json"})
    assert r.status_code == 400 and "字字字" not in r.text


def test_group_scoped_redaction_and_pending_count(sqlite_core):
    """Redacting what someone said in one group removes their lines there (every
    topic) and nothing else; the pending count follows the same scope."""
    store = sqlite_core.store
    now = datetime.now(timezone.utc)
    g1, g1_topic = ChatRef("tg", ChatKind.GROUP, "-1001"), ChatRef("tg", ChatKind.GROUP, "-1001", "7")
    g2 = ChatRef("tg", ChatKind.GROUP, "-1002")
    for i, chat in enumerate((g1, g1_topic, g2, DM)):
        store.append_chat("default", chat, ChatLine("user", "1001", f"line {i}", now, f"l{i}"), capture=NS)
    store.append_chat("default", g1, ChatLine("user", "2002", "someone else", now, "o1"))
    assert store.pending_capture_count(NS) == 4 and store.pending_capture_count(NS, g1.group_key) == 2
    assert store.redact_speaker(NS, g1.group_key) == 2
    assert [x.text for x in store.chat_tail("default", g1, 10)] == ["someone else"]
    assert store.chat_tail("default", g1_topic, 10) == []
    assert [x.text for x in store.chat_tail("default", g2, 10)] == ["line 2"]
    assert store.pending_capture_count(NS) == 2


class _Recorder:
    """The core's embedder, recording each embed_documents call."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_documents(self, texts):
        self.calls.append(list(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def _queue(pipeline, texts: list[str], first: int = 2000):
    """Each text a private line of a person of its own, queued to the capture worker as a background turn
    queues it (its chat-log line carries the capture); returns the turn results."""
    from bridges.contract import TurnResult
    from memory.identity import resolve
    from memory.store import PendingCapture, utcnow

    store, out = pipeline.core.store, []
    for k, text in enumerate(texts):
        sender = str(first + k)
        chat = ChatRef("tg", ChatKind.PRIVATE, sender)
        ns = resolve(store, "default", "tg", sender)
        said = datetime.now(timezone.utc)
        line = store.append_chat("default", chat, ChatLine("user", sender, text, said, f"m{k}"), capture=ns)
        res = TurnResult(tenant="default", namespace=str(ns), chat=chat.key, message_id=f"m{k}")
        pipeline.captures.hold(line)
        pipeline.captures.put([], PendingCapture(line, "default", ns, chat, f"m{k}", text, said, addressed=True,
                                                 queued=utcnow()), res, None)
        out.append(res)
    return out


async def test_a_worker_batch_embeds_its_documents_in_one_call_and_chit_chat_nothing(pipeline):
    """The documents of one worker batch — many people, zh and en — are embedded in one embed_documents call;
    a batch of chit-chat that stores nothing embeds nothing."""
    index = pipeline.core.index
    rec = index.embedder = _Recorder(index.embedder)
    try:
        chat = _queue(pipeline, ["哈哈哈哈", "好的谢谢", "ok thanks!", "lol same", "在吗"])
        assert await pipeline.drain(20)
        assert rec.calls == [] and all(r.captured == [] for r in chat)
        facts = _queue(pipeline, ["我养了一只叫煤球的黑猫", "哈哈哈", "I work as a nurse in Leeds", "我对花生过敏",
                                  "ok", "I moved to Berlin last spring"], first=3000)
        assert await pipeline.drain(20)
    finally:
        index.embedder = rec.inner
    stored = [r for r in facts if r.captured]
    assert len(stored) == 4 and len(rec.calls) == 1
    texts = sorted(pipeline.core.get(Namespace.parse(r.namespace), i).text for r in stored for i in r.captured)
    assert sorted(rec.calls[0]) == texts


async def test_the_capture_queue_stays_bounded_when_captures_fall_behind(pipeline, monkeypatch):
    """Turns answered first arriving faster than their captures finish (the worker
    is held): the queue in memory never holds more than ``max_queued`` turns, the
    turns past it wait for room instead of answering, and once the captures move
    every turn answers and every line's capture is done."""
    import threading

    import gateway.capture_queue as gp

    gate = threading.Event()
    real = gp.capture

    def held(*args, **kwargs):
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(gp, "capture", held)
    queue = pipeline.captures
    queue.max_queued = 4
    turns = [asyncio.create_task(pipeline.handle("default", msg(f"我的第{i}个爱好是集邮和养花", str(100 + i)),
                                                 background_capture=True)) for i in range(3 * queue.max_queued)]
    peak, full_since = 0, None
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline and not all(t.done() for t in turns):
        await asyncio.sleep(0.01)
        peak = max(peak, queue.queued())
        if full_since is None and peak >= queue.max_queued:
            full_since = time.monotonic()
        if full_since is not None and time.monotonic() - full_since > 2.0:
            break
    assert peak == queue.max_queued
    assert sum(not t.done() for t in turns) > 0  # waiting for room, not answered
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(*turns), 60)
    assert all(r.capture_pending for r in results)
    assert await pipeline.drain(60)
    assert pipeline.core.store.pending_captures(datetime.now(timezone.utc) + timedelta(seconds=1)) == []
