"""The generic JSON webhook and the group-chat rules through it: HMAC
signature over timestamp + body, the 5-minute replay window and
signatures accepted once, the documented
schema, replies in the response or to a callback URL (fake receiver on
127.0.0.1), and — checked on the prompts the fake model actually received —
disclosure (a private fact never reaches a group prompt), the speaker rule
(quoting does not change it), and the conversation tail (per topic, bounded
age, bot lines in it but never captured)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from memory.types import ChatKind, ChatRef, Namespace

SECRET = "whsec-test"


def post(client, body: dict, *, secret: str = SECRET, ts: int | None = None, tenant: str = "default",
         drain: bool = True):
    """POST a signed webhook body; with ``drain`` wait for the capture that runs
    after the answer (the webhook answers first) so the store can be inspected."""
    raw = json.dumps(body, ensure_ascii=False).encode()
    stamp = str(ts if ts is not None else int(time.time()))
    r = client.post(f"/webhook/{tenant}", content=raw,
                    headers={TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign(secret, stamp, raw),
                             "Content-Type": "application/json"})
    if drain:
        assert client.portal.call(client.app.state.pipeline.drain, 30)
    return r


def msg(text: str, *, sender: str = "u1", chat: str | None = None, mid: str = "m1", group: bool = False, **kw) -> dict:
    return {"sender_id": sender, "sender_name": sender.upper(), "chat_id": chat or sender, "message_id": mid,
            "chat_type": "group" if group else "private", "text": text, **kw}


@pytest.fixture
def client(gateway):
    return gateway(webhook={"secret": SECRET})


def prompts(llm) -> list[str]:
    """Every reply prompt the fake model received (fact-extraction calls left out),
    flattened to one string each."""
    from memory.model_prompts import EXTRACTION_SYSTEM

    return [" | ".join(m["content"] for m in r["messages"]) for r in llm.requests
            if "messages" in r and r["messages"][0]["content"] != EXTRACTION_SYSTEM]


def test_signed_message_gets_its_reply_in_the_response(client, llm):
    """A valid request runs a turn and answers 200 with the WebhookReply."""
    llm.enqueue("你好 U1")
    r = post(client, msg("我叫小林"))
    assert r.status_code == 200
    assert r.json() == {"ok": True, "tenant": "default", "chat_id": "u1", "chat_kind": "private", "chat_type": "private", "thread_id": None,
                        "message_id": "m1", "reply_to_message_id": None, "reply": "你好 U1", "addressed": True,
                        "duplicate": False}
    assert client.app.state.pipeline.core.store.count(Namespace("default", "web:u1")) == 1


@pytest.mark.parametrize("tamper", ["wrong-secret", "stale", "year-old", "future", "no-headers", "body-changed"])
def test_bad_signature_or_stale_timestamp_is_401_and_nothing_stored(client, llm, tamper):
    """Forged, stale (> 5 min), missing or body-mismatched signatures: 401, no turn, no memory, no model call."""
    body = msg("我的密码是1234")
    if tamper == "wrong-secret":
        r = post(client, body, secret="guess")
    elif tamper == "stale":
        r = post(client, body, ts=int(time.time()) - 301)
    elif tamper == "year-old":
        r = post(client, body, ts=int(time.time()) - 365 * 24 * 3600)
    elif tamper == "future":
        r = post(client, body, ts=int(time.time()) + 310)
    elif tamper == "no-headers":
        r = client.post("/webhook/default", json=body)
    else:
        stamp = str(int(time.time()))
        r = client.post("/webhook/default", content=json.dumps(msg("别的内容")).encode(),
                        headers={TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign(SECRET, stamp, json.dumps(body).encode())})
    assert r.status_code == 401
    assert client.app.state.pipeline.core.store.count(Namespace("default", "web:u1")) == 0
    assert prompts(llm) == []


def test_tenant_without_secret_refuses_everything(gateway):
    """No webhook.secret configured: even a 'signed' request is 401."""
    c = gateway()
    assert post(c, msg("hi"), secret="").status_code == 401


@pytest.mark.parametrize("body", [
    {"sender_id": "u1", "chat_id": "u1", "message_id": "m1"},
    msg("hi", sender="u 1"),
    msg("hi") | {"chat_type": "channel"},
    msg("hi") | {"unknown": 1},
    msg(""),
    msg(" \n\u3000"),
    msg("\u200b\ufeff"),
])
def test_invalid_schema_is_400(client, body):
    """Missing fields, ids outside the pattern, unknown chat types/fields and empty or whitespace text: 400 with
    a reason."""
    r = post(client, body)
    assert r.status_code == 400 and r.json()["error"] == "BadPayload"
    detail = r.json()["detail"]
    assert detail.startswith("invalid webhook message: ") and "'loc'" not in detail and "Error(" not in detail


def test_a_bad_date_is_named_in_a_readable_reason_and_unknown_routes_answer_in_the_same_shape(client):
    """A timestamp outside 1970–2100 is 400 with the field and the reason in words (no Python repr); an
    unknown path is 404 and a wrong method 405, each as {"error", "detail"} like every other error."""
    r = post(client, msg("hi") | {"timestamp": "2999-01-01T00:00:00Z"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("invalid webhook message: timestamp: ") and "1970" in r.json()["detail"]
    assert "ValueError(" not in r.json()["detail"]
    r = client.get("/no-such-path")
    assert r.status_code == 404 and r.json() == {"error": "NotFound", "detail": "Not Found"}
    r = client.get("/webhook/default")
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed" and "POST" in r.headers["allow"]


def test_replayed_signature_is_refused_and_a_re_signed_retry_is_a_duplicate(client, llm, caplog):
    """Issue 13 B: the same signed request twice — the second is 401 with a reason and a log line, nothing processed; a retry signed again (new timestamp) is a duplicate with no reply and no second capture."""
    llm.enqueue("好的")
    body = msg("我在学吉他🎸，周末练琴", mid="dup")
    ts = int(time.time())
    assert post(client, body, ts=ts).json()["reply"] == "好的"
    calls = len(llm.requests)
    replay = post(client, body, ts=ts)
    assert replay.status_code == 401 and replay.json() == {
        "error": "Unauthorized", "detail": "nonce already used (replayed request)"}
    assert "refused a webhook callback for tenant default: nonce already used" in caplog.text
    retry = post(client, body, ts=ts - 1)  # the client signs again
    assert retry.status_code == 200 and retry.json()["duplicate"] is True and retry.json()["reply"] is None
    assert len(llm.requests) == calls
    assert client.app.state.pipeline.core.store.count(Namespace("default", "web:u1")) == 1


def test_callback_url_gets_the_signed_reply(gateway, llm, fake_callback):
    """With a callback URL the request answers 202 at once and the reply is POSTed, signed, to the URL."""
    c = gateway(webhook={"secret": SECRET, "callback_url": f"{fake_callback.base_url}/callback"})
    llm.enqueue("晚点回复你")
    r = post(c, msg("我明天要考试", mid="cb1"))
    assert r.status_code == 202 and r.json() == {"ok": True, "accepted": True}
    assert fake_callback.wait_for(lambda: len(fake_callback.received) == 1, timeout=40)
    headers, raw = fake_callback.received[0]
    assert headers["x-huiyi-signature"] == sign(SECRET, headers["x-huiyi-timestamp"], raw)
    assert json.loads(raw)["reply"] == "晚点回复你" and json.loads(raw)["message_id"] == "cb1"


def test_callback_mode_answers_once_the_message_is_claimed_and_refuses_a_replay(gateway, llm, fake_callback):
    """With a callback URL the 202 comes once the message and its signature are claimed (one transaction, in the
    turn): the same signed request again is 401, the re-signed retry a duplicate; one reply is called back."""
    c = gateway(webhook={"secret": SECRET, "callback_url": f"{fake_callback.base_url}/callback"})
    llm.enqueue("Good luck with the exam")
    body, ts = msg("I have an exam tomorrow, 明天考试", mid="cb2"), int(time.time())
    assert post(c, body, ts=ts).status_code == 202
    replay = post(c, body, ts=ts)
    assert replay.status_code == 401 and replay.json()["detail"] == "nonce already used (replayed request)"
    assert post(c, body, ts=ts - 1).status_code == 202  # signed again: a duplicate, nothing called back
    assert c.portal.call(c.app.state.webhook.close, 40) is None
    assert c.portal.call(c.app.state.pipeline.drain, 30)  # the capture runs after the reply
    assert [json.loads(raw)["reply"] for _, raw in fake_callback.received] == ["Good luck with the exam"]
    assert [line.text for line in c.app.state.pipeline.core.store.chat_tail(
        "default", ChatRef("web", ChatKind.PRIVATE, "u1"), 5)] == ["I have an exam tomorrow, 明天考试",
                                                                  "Good luck with the exam"]


def test_private_fact_is_never_in_a_group_prompt(client, llm):
    """A fact told in private reaches the next private prompt but not the prompt of a group turn."""
    post(client, msg("我的秘密是我怕黑", mid="p1"))
    post(client, msg("你记得我的秘密吗", mid="p2"))
    assert "怕黑" in prompts(llm)[-1].split(" | ")[0]  # recalled into the private system prompt
    r = post(client, msg("@bot 你知道我的秘密吗", chat="g1", group=True, mid="g1", mentions_bot=True))
    assert r.json()["reply_to_message_id"] == "g1"
    assert "怕黑" not in prompts(llm)[-1]


def test_group_fact_is_recalled_in_that_group_and_in_private_only(client, llm):
    """A fact learned in group g1 is recalled in g1 and in private, never in group g2."""
    post(client, msg("@bot 我养了一只叫煤球的猫", chat="g1", group=True, mid="a", mentions_bot=True))
    post(client, msg("@bot 煤球最近怎么样", chat="g1", group=True, mid="b", mentions_bot=True))
    assert "煤球的猫" in prompts(llm)[-1].split(" | ")[0]
    post(client, msg("@bot 煤球最近怎么样", chat="g2", group=True, mid="c", mentions_bot=True))
    assert "煤球的猫" not in prompts(llm)[-1].split(" | ")[0]
    post(client, msg("煤球最近怎么样", mid="d"))
    assert "煤球的猫" in prompts(llm)[-1].split(" | ")[0]


def test_quoting_someone_does_not_change_the_speaker(client):
    """A's reply quoting B's message is A's message: A's memory, B's namespace untouched."""
    post(client, msg("我更喜欢狗", sender="a", chat="g1", group=True, mid="q1", mentions_bot=True,
                     reply_to={"message_id": "q0", "sender_id": "b", "text": "我喜欢猫"}))
    core = client.app.state.pipeline.core
    assert [m.text for m in core.list(Namespace("default", "web:a"))] == ["我更喜欢狗"]
    assert core.store.count(Namespace("default", "web:b")) == 0


def test_reply_to_the_bot_addresses_it_and_keyword_triggers(gateway, llm):
    """In groups the bot answers a reply to its own message and a configured keyword, not plain chatter."""
    c = gateway(webhook={"secret": SECRET}, group_keywords=["小忆"])
    plain = post(c, msg("今天好热", chat="g1", group=True, mid="1")).json()
    assert plain["addressed"] is False and plain["reply"] is None
    assert post(c, msg("小忆你在吗", chat="g1", group=True, mid="2")).json()["addressed"] is True
    quoted = post(c, msg("对呀", chat="g1", group=True, mid="3",
                         reply_to={"message_id": "bot1", "is_bot": True, "text": "今天热吗"})).json()
    assert quoted["addressed"] is True


def test_tail_is_per_topic_bounded_in_age_and_bot_lines_are_not_captured(gateway, llm):
    """Topic t2's prompt omits t1's lines and lines older than tail_max_age; the bot's reply is in the tail, never a memory."""
    c = gateway(webhook={"secret": SECRET}, tail_max_age=3600)
    now = datetime.now(UTC)
    old = (now - timedelta(hours=2)).isoformat()
    post(c, msg("@bot 很久以前的话", chat="g", group=True, thread_id="t2", mid="o", mentions_bot=True, timestamp=old))
    post(c, msg("@bot 话题一里我说我喜欢下雨", chat="g", group=True, thread_id="t1", mid="x", mentions_bot=True))
    llm.enqueue("我也喜欢下雨天")
    post(c, msg("@bot 我在话题二", chat="g", group=True, thread_id="t2", mid="y", mentions_bot=True))
    post(c, msg("@bot 继续说", chat="g", group=True, thread_id="t2", mid="z", mentions_bot=True))
    last = llm.requests[-1]["messages"]
    texts = [m["content"] for m in last[1:]]
    assert not any("很久以前" in t or "话题一" in t for t in texts)
    assert {"role": "assistant", "content": "我也喜欢下雨天"} in last
    store = c.app.state.pipeline.core.store
    assert store.count(Namespace("default", "web:bot")) == 0
    tail = store.chat_tail("default", ChatRef("web", ChatKind.GROUP, "g", "t2"), 10)
    assert [line.role for line in tail].count("bot") >= 1


def test_callback_retries_429_and_5xx_but_not_other_4xx(gateway, llm, fake_callback, caplog):
    """Issue 13 item 5: a callback answered 503 then 429 (Retry-After 1) is retried and lands once, signed;
    one answered 400 is not retried and the loss is logged with the status."""
    c = gateway(webhook={"secret": SECRET, "callback_url": f"{fake_callback.base_url}/callback"})
    fake_callback.fail_next.extend([503, 429])
    assert post(c, msg("我喜欢乌龙茶", mid="r1")).status_code == 202
    assert fake_callback.wait_for(lambda: len(fake_callback.received) == 1, timeout=40)
    assert fake_callback.attempts == 3
    headers, raw = fake_callback.received[0]
    assert sign(SECRET, headers[TIMESTAMP_HEADER.lower()], raw) == headers[SIGNATURE_HEADER.lower()]
    fake_callback.fail_next.append(400)
    with caplog.at_level("ERROR", logger="bridges.webhook.runtime"):
        assert post(c, msg("我喜欢红茶", mid="r2")).status_code == 202
        assert c.portal.call(c.app.state.webhook.close, 40) is None
    assert fake_callback.attempts == 4 and len(fake_callback.received) == 1
    assert any("HTTP 400" in r.getMessage() and "not retried" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["chat_kind", "chat_type"])
def test_the_chat_kind_has_one_name_everywhere_with_the_old_one_accepted(name):
    """Issue 26.16: the webhook and /v1/turns both read ``chat_kind``; ``chat_type`` (the webhook's former name)
    is accepted on both."""
    from bridges.contract import InboundMessage
    from bridges.webhook.protocol import WebhookMessage

    body = {"sender_id": "u1", "chat_id": "g1", name: "group", "message_id": "m1", "text": "hi"}
    assert WebhookMessage.model_validate(body).to_inbound("wh").chat_kind.value == "group"
    turn = {"platform": "tg", "message_id": "1", "sender_id": "42", "chat_id": "-100", name: "group", "text": "hi",
            "timestamp": "2026-12-01T00:00:00+00:00"}
    assert InboundMessage.model_validate(turn).chat_kind.value == "group"


@pytest.mark.parametrize("depth", [65, 500, 951, 5000])
def test_a_body_nested_too_deep_is_400_not_a_recursion_error(client, depth):
    """A signed body nesting an array 65 to 5,000 deep (≥ 500 crashed repairing it: RecursionError, 500) is 400."""
    raw = ('{"sender_id": "u1", "chat_id": "u1", "message_id": "m1", "text": "hi", "x": '
           + "[" * depth + "]" * depth + "}").encode()
    stamp = str(int(time.time()))
    r = client.post("/webhook/default", content=raw, headers={TIMESTAMP_HEADER: stamp,
                                                              SIGNATURE_HEADER: sign(SECRET, stamp, raw)})
    assert r.status_code == 400 and r.json()["error"] == "BadPayload"
    assert r.json()["detail"] == "invalid webhook message: body: Value error, JSON nested deeper than 64 levels"
