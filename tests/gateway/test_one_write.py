"""One write transaction before the answer (issue 29 item 2): a plain addressed message writes once on every
bridge — the signed callbacks' nonce is claimed in the transaction that logs the message — and a replay is still
refused, on every replica, with the same answers as before; a failed append leaves nothing claimed. Counted on
the real engine (SQLAlchemy events and the database's own statement trace: ``bench.sqltrips``), SQLite and
PostgreSQL, zh and en, WeChat with its recorded payloads."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from bench.sqltrips import SqlTrips, Trips
from bridges.contract import InboundMessage
from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from bridges.wechat.callback import sha1_signature
from conftest import TEST_DATA, _make_store
from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline
from memory.core import MemoryCore
from memory.errors import DuplicateDelivery, NonceUsed
from memory.index import SearchIndex
from memory.store import ChatLine, NonceClaim
from memory.types import ChatKind, ChatRef, Namespace

OB_SECRET = "ow-onebot-secret"
OA_TOKEN = "ow-oa-token"
WH_SECRET = "ow-webhook-secret"
TG_SECRET = "ow-tg-secret"
#: a recorded Official Account text callback (wechatpy's parser tests, tests/data/MANIFEST.md)
OA_TEXT = (TEST_DATA / "im" / "wechat" / "wechatpy_mp" / "test_parse_text_message.xml").read_text("utf-8")
TEXTS = {"zh": ["我养了一只叫煤球的猫", "煤球最近怎么样？"], "en": ["I have a cat called Mochi", "How is Mochi doing?"]}
#: reads a plain message makes before its answer at most: identity with whether the person paused learning in
#: this chat (one read: every replica honours a pause at the next line), the chat's tail, the
#: namespace's state, the recall's candidates; /v1/turns also reads whether the tenant has keys and resolves
#: the sender itself
READS = {"telegram": 4, "onebot": 4, "wechat": 4, "webhook": 4, "v1": 6}


class CountedPipeline(Pipeline):
    """The real pipeline, taking ``trips``' counts when each turn returns its answer (the capture runs after)."""

    trips: SqlTrips | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at_answer: list[Trips] = []

    async def handle(self, tenant, msg, **kwargs):
        res = await super().handle(tenant, msg, **kwargs)
        if self.trips is not None:
            self.at_answer.append(self.trips.counts())
        return res


def _settings(tmp_path, **tenant) -> object:
    return load_settings(data_dir=tmp_path, onebot={"secret": OB_SECRET}, tenants={"default": TenantSettings(
        telegram={"webhook_secret": TG_SECRET, "token": "123456:T", "api_base": "http://127.0.0.1:9"},
        wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60}, webhook={"secret": WH_SECRET}, **tenant)})


@pytest.fixture(params=["sqlite", "postgres"])
def app(request, tmp_path, embedder, monkeypatch):
    """Factory: ``app(**tenant_fields)`` → a TestClient of the real app over a real store (SQLite or PostgreSQL)
    with every bridge configured (no chat model unless the ``llm`` fixture set one); replicas share the store's
    database. The maintenance loop is put off: its SQL must not land among a turn's."""
    monkeypatch.setattr("gateway.maintenance.MAINTAIN_EVERY_S", 3600.0)
    first = _make_store(request.param, tmp_path, request)
    clients: list[TestClient] = []

    def make(**tenant) -> TestClient:
        from memory.store import Store

        store = first if not clients else Store(first.url, schema=first.schema)
        settings = _settings(tmp_path, **tenant)
        pipeline = CountedPipeline(settings, MemoryCore(store, SearchIndex(tmp_path / "index", embedder)))
        client = TestClient(create_app(settings, pipeline), client=("127.0.0.1", 50000),
                            raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)
    for c in clients[1:]:
        c.app.state.pipeline.core.store.close()


def _settle(c: TestClient) -> None:
    for name in ("telegram", "onebot", "wechat", "webhook"):
        runtime = getattr(c.app.state, name, None)
        if runtime is not None and hasattr(runtime, "turns"):
            assert c.portal.call(runtime.turns.idle, 60.0)
    assert c.portal.call(c.app.state.pipeline.drain, 60.0)


class Sender:
    """One person on every bridge, each request signed as the platform signs it."""

    def __init__(self, c: TestClient, uid: int) -> None:
        self.c, self.uid, self.n = c, uid, 0

    def _mid(self) -> int:
        self.n += 1
        return self.uid * 100 + self.n

    def telegram(self, text: str):
        mid = self._mid()
        return self.c.post("/telegram/default", headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}, json={
            "update_id": mid, "message": {"message_id": mid, "date": int(time.time()), "text": text,
                                          "chat": {"id": self.uid, "type": "private"},
                                          "from": {"id": self.uid, "is_bot": False, "first_name": "Ann"}}})

    def onebot(self, text: str):
        raw = json.dumps({"time": int(time.time()), "self_id": 10001, "post_type": "message", "message_id": self._mid(),
                          "user_id": self.uid, "message": [{"type": "text", "data": {"text": text}}],
                          "raw_message": text, "font": 0, "sender": {"user_id": self.uid, "nickname": "阿杰"},
                          "message_type": "private", "sub_type": "friend"}, ensure_ascii=False).encode()
        signature = "sha1=" + hmac.new(OB_SECRET.encode(), raw, hashlib.sha1).hexdigest()
        return self.c.post("/onebot/default", content=raw, headers={"X-Signature": signature})

    def wechat(self, text: str, query: dict | None = None):
        return self.c.post("/wechat/default", params=query or oa_query(), content=oa_body(text, f"o{self.uid}",
                                                                                       self._mid()))

    def webhook(self, text: str):
        body = json.dumps({"sender_id": f"w{self.uid}", "chat_id": f"w{self.uid}", "message_id": f"m{self._mid()}",
                           "text": text}, ensure_ascii=False).encode()
        return post_webhook(self.c, body)

    def v1(self, text: str):
        return self.c.post("/v1/turns", json={"background_capture": True, "message": {
            "platform": "tg", "sender_id": str(self.uid), "chat_kind": "private", "chat_id": str(self.uid),
            "message_id": f"v{self._mid()}", "text": text}})


def oa_query(ts: int | None = None) -> dict:
    """A fresh plaintext-mode query string, signed as WeChat signs it."""
    ts_s, nonce = str(ts or int(time.time())), str(secrets.randbelow(10**10))
    return {"signature": sha1_signature(OA_TOKEN, ts_s, nonce), "timestamp": ts_s, "nonce": nonce}


def oa_body(text: str, user: str = "fromUser", msg_id: int | None = None) -> bytes:
    """The recorded text callback, as ``user`` saying ``text`` (its own MsgId unless one is given)."""
    xml = OA_TEXT.replace("this is a test", text).replace("fromUser", user)
    if msg_id is not None:
        xml = xml.replace("1234567890123456", str(msg_id))
    return xml.encode("utf-8")


def post_webhook(c: TestClient, body: bytes, ts: int | None = None):
    ts_s = str(ts or int(time.time()))
    return c.post("/webhook/default", content=body, headers={
        TIMESTAMP_HEADER: ts_s, SIGNATURE_HEADER: sign(WH_SECRET, ts_s, body), "Content-Type": "application/json"})


def _turn_trips(c: TestClient, send, text: str) -> Trips:
    """Send one message, wait for its turn and capture; the counts when it returned its answer."""
    pipeline = c.app.state.pipeline
    pipeline.at_answer.clear()
    pipeline.trips = SqlTrips(pipeline.core.store).start()
    try:
        r = send(text)
        assert r.status_code in (200, 202), r.text
        _settle(c)
    finally:
        pipeline.trips.stop()
        pipeline.trips = None
    (at_answer,) = pipeline.at_answer
    return at_answer


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_plain_addressed_message_writes_once_before_its_answer_on_every_bridge(app, lang):
    """Telegram, OneBot (signed), WeChat (signed), the generic webhook (signed) and /v1/turns: the second message
    of a person (a memory to recall) makes exactly one write transaction before its answer — the signed
    callbacks' nonce claimed with the line, its delivery and its capture — and a bounded number of reads;
    a person whose identities an admin linked resolves by a read too."""
    c = app()
    first, second = TEXTS[lang]
    for i, bridge in enumerate(READS):
        sender = Sender(c, 700 + i)
        send = getattr(sender, bridge)
        assert send(first).status_code in (200, 202)
        _settle(c)
        trips = _turn_trips(c, send, second)
        assert trips.writes == 1, (bridge, trips)
        assert trips.reads <= READS[bridge], (bridge, trips)
    store = c.app.state.pipeline.core.store
    store.link_identities("default", ["web:w799", "tg:799"], "person:p799", "test")
    sender = Sender(c, 799)
    assert sender.webhook(first).status_code == 200
    _settle(c)
    trips = _turn_trips(c, sender.webhook, second)
    assert (trips.writes, trips.reads <= READS["webhook"]) == (1, True), trips
    assert store.count(Namespace("default", "person:p799")) >= 1


def test_wechat_recorded_callback_is_answered_once_its_retry_is_a_duplicate_and_its_replay_is_refused(
        app, llm, monkeypatch):
    """The recorded OA text callback, signed: answered once; WeChat's retry (same query string, same body) answers
    'success' and processes nothing; the query string with another body (as the same openid, zh) is 401; on a
    second replica over the same database the query string is refused too. One nonce row, one line, one model
    call."""
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    llm.enqueue("Noted!")
    c = app()
    q = oa_query()
    first = c.post("/wechat/default", params=q, content=oa_body("this is a test"))
    assert first.status_code == 200 and "Noted!" in first.text
    _settle(c)
    calls = len(llm.requests)
    retry = c.post("/wechat/default", params=q, content=oa_body("this is a test"))
    assert retry.status_code == 200 and retry.text == "success"
    forged = c.post("/wechat/default", params=q, content=oa_body("/memory forget all", msg_id=1))
    assert forged.status_code == 401 and forged.json()["detail"] == \
        "nonce already used with another body (replayed signature)"
    other = c.post("/wechat/default", params=q, content=oa_body("我住在杭州", msg_id=2))
    assert other.status_code == 401
    replica = app()
    again = replica.post("/wechat/default", params=q, content=oa_body("我住在上海", msg_id=3))
    assert again.status_code == 401 and "nonce already used" in again.json()["detail"]
    _settle(c)
    store = c.app.state.pipeline.core.store
    chat = ChatRef("wx", ChatKind.PRIVATE, "fromUser")
    assert [(line.role, line.text) for line in store.chat_tail("default", chat, 10)] == [
        ("user", "this is a test"), ("bot", "Noted!")]
    assert len(llm.requests) == calls
    assert store.claim_nonce("default", "wechat", hashlib.sha256(
        f"{q['timestamp']}.{q['nonce']}".encode()).hexdigest()) == hashlib.sha256(oa_body("this is a test")).hexdigest()


def test_a_failed_append_leaves_the_nonce_unclaimed_and_wechats_retry_is_processed(app):
    """The database fails inside the chat-log append (zh): the callback is answered 503 and nothing is claimed —
    no nonce, no delivery, no line — so WeChat's retry of the same query string and body is processed, once."""
    c = app()
    store = c.app.state.pipeline.core.store
    failed: list[str] = []

    def fail_once(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO CHAT_LOG") and not failed:
            failed.append(statement)
            raise OperationalError(statement, {}, Exception("disk I/O error"))

    q, body = oa_query(), oa_body("我周末喜欢去爬山", user="oFail", msg_id=4242)
    event.listen(store.engine, "before_cursor_execute", fail_once)
    try:
        r = c.post("/wechat/default", params=q, content=body)
    finally:
        event.remove(store.engine, "before_cursor_execute", fail_once)
    assert failed and r.status_code == 503
    chat = ChatRef("wx", ChatKind.PRIVATE, "oFail")
    assert store.chat_tail("default", chat, 5) == []
    retry = c.post("/wechat/default", params=q, content=body)
    assert retry.status_code == 200 and retry.text == "success"
    _settle(c)
    assert [line.text for line in store.chat_tail("default", chat, 5)] == ["我周末喜欢去爬山"]
    assert store.count(Namespace("default", "wx:oFail")) == 1
    assert c.post("/wechat/default", params=q, content=body).text == "success"  # now a retry of a handled one
    assert len(store.chat_tail("default", chat, 5)) == 1


def test_a_re_signed_duplicate_uses_its_nonce_up(app):
    """The generic webhook: a message re-sent with a new signature is a duplicate (nothing processed), and its
    signature is claimed all the same — the same request again is 401 (en)."""
    c = app()
    body = json.dumps({"sender_id": "d1", "chat_id": "d1", "message_id": "dup", "text": "I play the guitar"}).encode()
    now = int(time.time())
    assert post_webhook(c, body, now).json()["duplicate"] is False
    retry = post_webhook(c, body, now - 1)
    assert retry.status_code == 200 and retry.json()["duplicate"] is True
    replay = post_webhook(c, body, now - 1)
    assert replay.status_code == 401 and replay.json()["detail"] == "nonce already used (replayed request)"
    _settle(c)
    assert c.app.state.pipeline.core.store.count(Namespace("default", "web:d1")) == 1


# -- the store: the nonce in the append's transaction ---------------------------------------------------------


def _line(text: str, mid: str) -> ChatLine:
    return ChatLine("user", "5001", text, datetime.now(UTC), mid, "小林")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_append_claims_its_nonce_and_a_used_nonce_writes_nothing(core, lang):
    """append_chat with a nonce: the first claims it with the line; the same nonce again raises NonceUsed with the
    first digest and writes nothing (no line, no delivery claim); a fresh nonce on a claimed delivery raises
    DuplicateDelivery and leaves that nonce unclaimed; a redacted line is not logged but its nonce is claimed."""
    store, chat = core.store, ChatRef("tg", ChatKind.PRIVATE, "5001")
    first, second = TEXTS[lang]
    nonce = NonceClaim("default", "webhook", "n1" * 32, "digest-1")
    assert store.append_chat("default", chat, _line(first, "1"), claim="k1", nonce=nonce) is not None
    with pytest.raises(NonceUsed) as used:
        store.append_chat("default", chat, _line(second, "2"), claim="k2",
                          nonce=NonceClaim("default", "webhook", "n1" * 32, "digest-2"))
    assert used.value.digest == "digest-1"
    assert [line.text for line in store.chat_tail("default", chat, 5)] == [first]
    assert store.claim_delivery("k2")  # the replay's delivery was never claimed
    with pytest.raises(DuplicateDelivery):
        store.append_chat("default", chat, _line(first, "1"), claim="k1",
                          nonce=NonceClaim("default", "webhook", "n2" * 32, "digest-3"))
    assert store.claim_nonce("default", "webhook", "n2" * 32, "digest-3") is None
    store.withdraw_line(Namespace("default", "tg:5001"), chat, "3")
    assert store.append_chat("default", chat, _line(second, "3"), claim="k3",
                             nonce=NonceClaim("default", "webhook", "n3" * 32, "digest-4")) is None
    assert store.claim_nonce("default", "webhook", "n3" * 32, "other") == "digest-4"
    # per tenant and platform, as the nonce claimed alone
    assert store.append_chat("other", chat, _line(first, "1"),
                             nonce=NonceClaim("other", "webhook", "n1" * 32, "digest-1")) is not None
    assert store.append_chat("default", chat, _line(first, "4"),
                             nonce=NonceClaim("default", "onebot", "n1" * 32, "digest-1")) is not None


def test_racing_appends_with_one_nonce_log_one_line(core):
    """Eight threads append eight different lines with the same nonce at once: one line is logged, seven raise
    NonceUsed with its digest (PostgreSQL: the losers wait for the winner's commit, then read its digest)."""
    store, chat = core.store, ChatRef("tg", ChatKind.PRIVATE, "5002")
    barrier = threading.Barrier(8)
    outcomes: list[object] = []

    def append(i: int) -> None:
        barrier.wait()
        try:
            outcomes.append(store.append_chat("default", chat, _line(f"第{i}条消息 line {i}", str(i)), claim=f"r{i}",
                                              nonce=NonceClaim("default", "wechat", "race", f"d{i}")))
        except NonceUsed as exc:
            outcomes.append(exc.digest)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ids = [o for o in outcomes if isinstance(o, int)]
    (line,) = store.chat_tail("default", chat, 10)
    assert len(outcomes) == 8 and ids == [line.id]
    assert set(outcomes) - {line.id} == {f"d{line.message_id}"}


async def test_a_pipeline_turn_with_a_used_nonce_processes_nothing(core):
    """Pipeline.handle with a nonce already used by another body raises ReplayedRequest before anything is
    processed or claimed; with the same body where identical retries are allowed it is a duplicate."""
    from bridges.replay import ReplayedRequest, fresh_nonce

    pipe = Pipeline(load_settings(), core)
    now = time.time()
    msg = InboundMessage(platform="wx", message_id="9", sender_id="o9", chat_kind=ChatKind.PRIVATE, chat_id="o9",
                         text="我喜欢喝乌龙茶", timestamp=datetime.now(UTC) - timedelta(seconds=1))

    def nonce(body: bytes):
        return fresh_nonce("default", "wechat", timestamp=int(now), nonce="1.2", body=body, now=now, window=300,
                           allow_identical=True)

    assert not (await pipe.handle("default", msg, background_capture=True, nonce=nonce(b"a"))).duplicate
    again = msg.model_copy(update={"message_id": "10", "text": "我不喜欢喝茶"})
    with pytest.raises(ReplayedRequest):
        await pipe.handle("default", again, nonce=nonce(b"b"))
    assert (await pipe.handle("default", msg, nonce=nonce(b"a"))).duplicate
    assert await pipe.drain(30)
    assert [line.text for line in core.store.chat_tail("default", msg.chat, 5)] == ["我喜欢喝乌龙茶"]
    assert core.store.claim_delivery("default|wx|wx:private:o9|10")
