"""QQ through NoneBot2: huiyi's plugin under nonebug (real NoneBot matchers,
a fake OneBot bot whose sends are checked), and the NoneBot host mounted
in the gateway (adapter routes behind their access token / signature, the
quick-operation route behind the same credentials)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import nonebot
import pytest
from nonebot.adapters.onebot.v11 import Adapter, Bot, Message, MessageSegment
from nonebug import App

from conftest import TEST_DATA
from fake_platforms import ONEBOT_SECRET, ONEBOT_TOKEN
from gateway.config import OneBotSettings, load_settings
from gateway.pipeline import Pipeline
from memory.types import Namespace

SELF_ID = "10001"
NOW = int(time.time())


def event(message, *, group: int | None = 123, user: int = 42, mid: int = 555, anonymous: dict | None = None,
          sub_type: str | None = None) -> dict:
    base = {"time": int(time.time()), "self_id": int(SELF_ID), "post_type": "message", "message_id": mid, "user_id": user,
            "message": message, "raw_message": "", "font": 0,
            "sender": {"user_id": user, "nickname": "阿杰", "card": "", "role": "member"}}
    if group is None:
        return base | {"message_type": "private", "sub_type": sub_type or "friend"}
    return base | {"message_type": "group", "sub_type": sub_type or "normal", "group_id": group, "anonymous": anonymous}


@pytest.fixture
def plugin(sqlite_core, llm, monkeypatch):
    """The plugin loaded into nonebug's NoneBot, bound to a pipeline with the fake model."""
    from bridges.qq.host import NoneBotHost

    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    host = NoneBotHost(OneBotSettings())  # reuses nonebug's driver, registers the adapter, loads the plugin
    assert not host.owned
    pipeline = Pipeline(load_settings(), sqlite_core)
    host.plugin.bind(pipeline)
    yield pipeline
    host.plugin.unbind(pipeline)


async def run(app: App, raw: dict, expect_send: Message | None) -> None:
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter), self_id=SELF_ID)
        ev = Adapter.json_to_event(raw)
        ctx.receive_event(bot, ev)
        if expect_send is not None:
            ctx.should_call_send(ev, expect_send, result={"message_id": 9999})


async def test_group_mention_is_answered_with_a_reply_segment(app: App, plugin, llm):
    """@bot in a group: one send_msg to that group, a reply segment first, then the model's text."""
    llm.enqueue("记住啦，你喜欢爬山")
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": " 我喜欢爬山"}}])
    await run(app, raw, MessageSegment.reply(555) + MessageSegment.text("记住啦，你喜欢爬山"))
    assert await plugin.drain(30)  # the capture runs after the reply
    assert [m.text for m in plugin.core.list(Namespace("default", "qq:42"))] == ["我喜欢爬山"]


async def test_private_message_reply_has_no_reply_segment(app: App, plugin, llm):
    """A private message (the real go-cqhttp doc event) is answered without a reply segment."""
    raw = json.loads((TEST_DATA / "im/onebot/gocqhttp_docs_private_message_event.json").read_text("utf-8"))
    raw["self_id"] = int(SELF_ID)
    llm.enqueue("你好")
    await run(app, raw, Message(MessageSegment.text("你好")))


async def test_redelivered_event_is_answered_and_captured_once(app: App, plugin, llm):
    """The same event twice (implementation retry): one send, one memory."""
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": "我在上海工作"}}], mid=777)
    llm.enqueue("上海很好")
    await run(app, raw, MessageSegment.reply(777) + MessageSegment.text("上海很好"))
    await run(app, raw, None)  # nonebug fails the test on any unexpected API call
    assert await plugin.drain(30)
    assert plugin.core.store.count(Namespace("default", "qq:42")) == 1


async def test_anonymous_group_message_is_never_attributed(app: App, plugin):
    """An anonymous message (placeholder user id 80000000): no reply, no chat line, no memory for anyone."""
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": "我是匿名的，我喜欢猫"}}],
                user=80000000, sub_type="anonymous", anonymous={"id": 1, "name": "匿名", "flag": "x"})
    await run(app, raw, None)
    assert plugin.core.store.count(Namespace("default", "qq:80000000")) == 0


async def test_escaped_brackets_in_a_cq_string_stay_text(app: App, plugin, llm):
    """CQ-code string: &#91;CQ:at…&#93; is text, the real [CQ:at] addresses the bot."""
    raw = event(f"[CQ:at,qq={SELF_ID}] 我写了&#91;CQ:at,qq=1&#93;这段代码 &amp; 很开心")
    llm.enqueue("好")
    await run(app, raw, MessageSegment.reply(555) + MessageSegment.text("好"))
    assert await plugin.drain(30)
    (mem,) = plugin.core.list(Namespace("default", "qq:42"))
    assert "[CQ:at,qq=1]" in mem.text and "&" in mem.text


async def test_standalone_plugin_builds_a_pipeline_from_settings(app: App, llm, monkeypatch, tmp_path):
    """In a bot of its own (gateway.huiyi_nonebot loaded, nothing bound) the first message builds a
    pipeline from HUIYI_* settings — the bot's .env as NoneBot read it (its driver config: the model) merged
    with the process environment (the model's URL) — and starts the gateway's maintenance beside it: the
    person is answered by that model and their fact lands in the configured data root (issue 26 item 13)."""
    from bridges.qq import huiyi_plugin
    from memory.store import Store

    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setattr(nonebot.get_driver().config, "huiyi_llm_model", "fake-chat", raising=False)  # .env
    nonebot.require("gateway.huiyi_nonebot")
    llm.enqueue("记住了")
    raw = event([{"type": "text", "data": {"text": "我喜欢吃榴莲🍈"}}], group=None, user=4242, mid=4243)
    try:
        await run(app, raw, Message(MessageSegment.text("记住了")))
        # the gateway's maintenance runs beside it: queued captures are resumed after a crash
        assert huiyi_plugin._state["task"] is not None and not huiyi_plugin._state["task"].done()
    finally:
        built = huiyi_plugin._state["pipeline"]
        if built is not None and huiyi_plugin._state["owned"]:
            huiyi_plugin.unbind(built)
            assert await built.drain(30)  # the capture runs after the reply
            built.core.close()
    assert built is not None
    store = Store(f"sqlite:///{tmp_path / 'data' / 'huiyi.db'}")
    try:
        assert [m.text for m in store.list(Namespace("default", "qq:4242"))] == ["我喜欢吃榴莲🍈"]
    finally:
        store.close()


def _sign(body: bytes) -> str:
    return "sha1=" + hmac.new(ONEBOT_SECRET.encode(), body, hashlib.sha1).hexdigest()


def test_hosted_gateway_mounts_onebot_routes_behind_credentials(gateway):
    """With onebot.enabled, /onebot/v11/* reach NoneBot (signature and token enforced) and our routes still win."""
    c = gateway(settings_overrides={"onebot": {"enabled": True, "secret": ONEBOT_SECRET,
                                                "access_token": ONEBOT_TOKEN}})
    assert c.get("/healthz").json() == {"status": "ok"}
    body = json.dumps({"time": NOW, "self_id": 1, "post_type": "meta_event", "meta_event_type": "heartbeat",
                       "status": {}, "interval": 5000}).encode()
    unsigned = c.post("/onebot/v11/http", content=body, headers={"X-Self-ID": "1"})
    assert unsigned.status_code == 401
    forged = c.post("/onebot/v11/http", content=body, headers={"X-Self-ID": "1", "X-Signature": "sha1=00"})
    assert forged.status_code == 403
    ok = c.post("/onebot/v11/http", content=body, headers={"X-Self-ID": "1", "X-Signature": _sign(body)})
    assert ok.status_code == 204
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect):
        with c.websocket_connect("/onebot/v11/ws", headers={"X-Self-ID": "2", "Authorization": "Bearer wrong"}) as ws:
            ws.receive_text()


def test_quick_operation_route_needs_signature(gateway, llm):
    """POST /onebot/<tenant>: unsigned → 401 and nothing stored; signed → the reply as a quick operation."""
    c = gateway(settings_overrides={"onebot": {"secret": ONEBOT_SECRET}})
    raw = json.dumps(event([{"type": "text", "data": {"text": "我喜欢喝奶茶"}}], group=None, user=7)).encode()
    assert c.post("/onebot/default", content=raw).status_code == 401
    assert c.app.state.pipeline.core.store.count(Namespace("default", "qq:7")) == 0
    llm.enqueue("奶茶好喝")
    r = c.post("/onebot/default", content=raw, headers={"X-Signature": _sign(raw)})
    assert r.json() == {"reply": "奶茶好喝", "auto_escape": True, "at_sender": False}
    assert c.app.state.pipeline.core.store.count(Namespace("default", "qq:7")) == 1


def test_quick_operation_in_a_group_quotes_the_message(gateway, llm):
    """A signed group @-mention on the quick-operation route: the reply quotes the message as a reply segment."""
    c = gateway(settings_overrides={"onebot": {"access_token": ONEBOT_TOKEN}})
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": "[早上好]"}}], mid=321)
    llm.enqueue("早呀 [CQ:face,id=1]")
    r = c.post("/onebot/default", json=raw, headers={"Authorization": f"Bearer {ONEBOT_TOKEN}"})
    assert r.json() == {"reply": [{"type": "reply", "data": {"id": "321"}},
                                  {"type": "text", "data": {"text": "早呀 [CQ:face,id=1]"}}], "at_sender": False}


_OWNED_HOST_SCRIPT = r"""
import json, sys
from fastapi.testclient import TestClient
from gateway.http.app import create_app
from gateway.config import load_settings

event = json.loads(sys.argv[1])
app = create_app(load_settings(onebot={"enabled": True, "access_token": "tok"}))
with TestClient(app) as c:
    with c.websocket_connect("/onebot/v11/ws", headers={"X-Self-ID": "10001", "Authorization": "Bearer tok"}) as ws:
        ws.send_text(json.dumps(event))
        call = json.loads(ws.receive_text())
        ws.send_text(json.dumps({"status": "ok", "retcode": 0, "data": {"message_id": 1}, "echo": call["echo"]}))
        print("CALL " + json.dumps(call, ensure_ascii=False))
"""


def test_gateway_owned_nonebot_serves_a_reverse_websocket_bot(llm, tmp_path):
    """Production topology (a fresh process, NoneBot initialised by the gateway): a OneBot implementation
    connects by reverse WebSocket with its token, pushes a group @-mention, and gets send_msg with a reply segment."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    llm.enqueue("你好呀")
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": "我喜欢跑步"}}], mid=808)
    env = {**os.environ, "HUIYI_DATA_DIR": str(tmp_path / "data"), "HUIYI_LLM_BASE_URL": llm.base_url,
           "HUIYI_LLM_MODEL": "fake-chat"}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _OWNED_HOST_SCRIPT, json.dumps(raw)], capture_output=True, text=True,
                         cwd=root, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("CALL ")]  # NoneBot logs to stdout too
    call = json.loads(line[len("CALL "):])
    assert call["action"] == "send_msg"
    params = call["params"]
    assert (params["message_type"], params["group_id"], params["user_id"]) == ("group", 123, 42)
    assert params["message"] == [{"type": "reply", "data": {"id": "808"}}, {"type": "text", "data": {"text": "你好呀"}}]


# -- freshness and replay on the quick-operation route (issue 13 B) ----------------


def test_quick_operation_accepts_a_signed_body_once(gateway, llm, caplog):
    """OneBot signs the body but no time: the same signed body again is 401 with a reason and a log line, and
    nothing is processed twice."""
    c = gateway(settings_overrides={"onebot": {"secret": ONEBOT_SECRET}})
    raw = json.dumps(event([{"type": "text", "data": {"text": "我喜欢喝奶茶🧋，不加糖"}}], group=None, user=8)).encode()
    llm.enqueue("记住啦")
    assert c.post("/onebot/default", content=raw, headers={"X-Signature": _sign(raw)}).json()["reply"] == "记住啦"
    calls = len(llm.requests)
    again = c.post("/onebot/default", content=raw, headers={"X-Signature": _sign(raw)})
    assert again.status_code == 401 and again.json() == {"error": "Unauthorized",
                                                         "detail": "nonce already used (replayed request)"}
    assert "refused a onebot callback for tenant default: nonce already used" in caplog.text
    assert len(llm.requests) == calls
    assert c.app.state.pipeline.core.store.count(Namespace("default", "qq:8")) == 1


@pytest.mark.parametrize("age", [365 * 24 * 3600, 301, -310], ids=["year-old", "stale", "future"])
@pytest.mark.parametrize("auth", ["secret", "token"])
def test_quick_operation_refuses_events_outside_the_window(gateway, llm, age, auth):
    """A correctly signed (or token-bearing) event whose `time` is a year old, just stale or too far ahead: 401,
    no turn, no memory; the same event re-timed to now is answered."""
    cfg = {"secret": ONEBOT_SECRET} if auth == "secret" else {"access_token": ONEBOT_TOKEN}
    c = gateway(settings_overrides={"onebot": cfg})
    e = event([{"type": "text", "data": {"text": "I have a cat named Mochi 🐱"}}], group=None, user=9)

    def post(body: dict):
        raw = json.dumps(body).encode()
        headers = {"X-Signature": _sign(raw)} if auth == "secret" else {"Authorization": f"Bearer {ONEBOT_TOKEN}"}
        return c.post("/onebot/default", content=raw, headers=headers | {"Content-Type": "application/json"})

    r = post(e | {"time": int(time.time()) - age})
    assert r.status_code == 401 and r.json()["detail"] == "timestamp outside the 300 s window"
    assert c.app.state.pipeline.core.store.count(Namespace("default", "qq:9")) == 0
    assert [x for x in llm.requests if "messages" in x] == []
    llm.enqueue("Mochi!")
    assert post(e | {"time": int(time.time())}).status_code == 200
