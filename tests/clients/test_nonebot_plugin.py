"""nonebot_plugin_huiyi (clients/nonebot) under nonebug, in remote mode against the real
gateway on a loopback socket with the fake chat model: a private message is answered with
the gateway's reply and captured, a group @-mention is answered as a reply, a /记忆 command
is answered by the gateway; its metadata carries the config class; and it loads in a bot
that has a memory.py of its own (a separate interpreter, without the gateway on the path)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nonebot
import pytest
from nonebot.adapters.onebot.v11 import Adapter, Bot, Message, MessageSegment
from nonebug import App

from fake_openai import served

ROOT = Path(__file__).resolve().parents[2]
for part in ("python", "nonebot"):
    sys.path.insert(0, str(ROOT / "clients" / part))

from gateway.http.app import create_app  # noqa: E402
from gateway.config import TenantSettings, load_settings  # noqa: E402
from memory.types import Namespace  # noqa: E402

SELF_ID = "10001"


@pytest.fixture
def gateway_url(llm, monkeypatch):
    """The real gateway under uvicorn on 127.0.0.1 with the fake chat model; yields (url, app, admin key)."""
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    application = create_app(load_settings(tenants={"default": TenantSettings(language="zh_CN")}))
    with served(application) as url:
        key = application.state.pipeline.core.store.create_api_key("default", "admin")[1]
        yield url, application, key


@pytest.fixture
def plugin(gateway_url, monkeypatch):
    """The plugin loaded into nonebug's NoneBot, configured through the driver's config (the bot's .env)."""
    url, application, key = gateway_url
    if Adapter.get_name() not in nonebot.get_adapters():  # as a bot's bot.py registers it
        nonebot.get_driver().register_adapter(Adapter)
    config = nonebot.get_driver().config
    config.huiyi_url = url
    monkeypatch.setattr(config, "huiyi_api_key", key, raising=False)
    # the gateway's own bridge plugin may be loaded in this session by other tests: keep it out of these events
    bridge = sys.modules.get("bridges.qq.huiyi_plugin")
    if bridge is not None:
        monkeypatch.setitem(bridge._state, "pipeline", None)
        monkeypatch.setitem(bridge._state, "factory", None)
    loaded = nonebot.get_plugin("nonebot_plugin_huiyi") or nonebot.load_plugin("nonebot_plugin_huiyi")
    yield loaded, application, url, key
    # a plugin stays loaded for the session: point it at a closed port, never at a gateway someone runs on 8080
    config.huiyi_url = "http://127.0.0.1:9"


def event(message, *, group: int | None = None, user: int = 4242, mid: int = 1) -> dict:
    base = {"time": int(time.time()), "self_id": int(SELF_ID), "post_type": "message", "message_id": mid,
            "user_id": user, "message": message, "raw_message": "", "font": 0,
            "sender": {"user_id": user, "nickname": "阿杰", "card": "", "role": "member"}}
    if group is None:
        return base | {"message_type": "private", "sub_type": "friend"}
    return base | {"message_type": "group", "sub_type": "normal", "group_id": group, "anonymous": None}


async def run(app: App, raw: dict, expect: Message | str | None) -> None:
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter), self_id=SELF_ID)
        ev = Adapter.json_to_event(raw)
        ctx.receive_event(bot, ev)
        if expect is not None:
            ctx.should_call_send(ev, expect, result={"message_id": 9999})


def test_metadata_names_the_config_and_the_adapter(plugin):
    """PluginMetadata carries the Config class read from .env and the OneBot v11 adapter."""
    from nonebot_plugin_huiyi import Config

    meta = plugin[0].metadata
    assert meta.config is Config and meta.supported_adapters == {"~onebot.v11"} and meta.type == "application"


async def test_private_message_gets_the_gateways_reply_and_is_captured(app: App, plugin, llm):
    """A private message: the fake model's reply is sent back, and the fact lands in the gateway."""
    application = plugin[1]
    llm.enqueue("记住了，你喜欢榴莲")
    await run(app, event([{"type": "text", "data": {"text": "我喜欢吃榴莲🍈"}}], mid=11), "记住了，你喜欢榴莲")
    texts = [m.text for m in application.state.pipeline.core.list(Namespace("default", "qq:4242"))]
    assert texts == ["我喜欢吃榴莲🍈"]


async def test_group_mention_is_answered_as_a_reply_and_commands_by_the_gateway(app: App, plugin, llm):
    """@bot in a group: the reply quotes the message; /记忆 列表 in private lists what the gateway remembers."""
    llm.enqueue("好的，I'll remember Hangzhou")
    raw = event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": " 我住在杭州"}}],
                group=123, mid=12)
    await run(app, raw, MessageSegment.reply(12) + MessageSegment.text("好的，I'll remember Hangzhou"))
    # what the gateway answers /记忆 列表 for this person (the listing is deterministic: ids, texts, "never recalled")
    from huiyi_client import AsyncHuiyi

    url, key = plugin[2], plugin[3]
    async with AsyncHuiyi(url, key) as hy:
        listing = (await hy.turn({"platform": "qq", "message_id": "probe", "sender_id": "4242", "chat_kind": "private",
                                  "chat_id": "4242", "text": "/记忆 列表", "is_command": True})).reply
    assert "我住在杭州" in listing
    await run(app, event([{"type": "text", "data": {"text": "/记忆 列表"}}], mid=13), listing)


def test_the_plugin_loads_in_a_bot_with_its_own_memory_py(tmp_path):
    """A bot directory with memory.py: the plugin loads (no top-level memory or gateway package imported)."""
    (tmp_path / "memory.py").write_text("MINE = True\n", encoding="utf-8")
    code = ("import memory, sys, nonebot; assert memory.MINE; nonebot.init(driver='~none'); "
            "nonebot.load_plugin('nonebot_plugin_huiyi'); import memory as m2; assert m2.MINE; "
            "assert 'gateway' not in sys.modules and 'memory.types' not in sys.modules; "
            "assert nonebot.get_plugin('nonebot_plugin_huiyi') is not None; print('loaded')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUIYI_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / "clients" / p) for p in ("nonebot", "python"))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "loaded" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("group", [None, 123])
async def test_a_withdrawn_message_is_withdrawn_in_the_gateway(app: App, plugin, llm, group):
    """friend_recall / group_recall reach the gateway from a remote bot too (issue 26.3): the memory goes."""
    application = plugin[1]
    ns = Namespace("default", "qq:4242")
    llm.enqueue("好的")
    segs = [{"type": "text", "data": {"text": "我对芒果过敏。"}}]
    if group:
        segs = [{"type": "at", "data": {"qq": SELF_ID}}, *segs]
    await run(app, event(segs, group=group, mid=21),
              MessageSegment.reply(21) + MessageSegment.text("好的") if group else "好的")
    assert [m.text for m in application.state.pipeline.core.list(ns)] == ["我对芒果过敏。"]
    notice = {"time": int(time.time()), "self_id": int(SELF_ID), "post_type": "notice", "user_id": 4242,
              "message_id": 21, "notice_type": "group_recall" if group else "friend_recall"}
    if group:
        notice |= {"group_id": group, "operator_id": 4242}
    await run(app, notice, None)
    assert application.state.pipeline.core.list(ns) == []
