"""The aiogram hooks of the client (huiyi_client.aiogram) in a real Dispatcher fed with
Updates (feed_update), answering through a fake Bot API on loopback, with the memory in the
real gateway: the middleware puts the recollection and prompt into handler data and captures
after the handler, the bot's own answer joins the tail, /memory commands are answered by the
gateway, and a gateway that cannot be reached never stops the handler."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from aiogram import Bot, Dispatcher, Router  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.types import Message, Update  # noqa: E402
from huiyi_client import AsyncHuiyi  # noqa: E402
from huiyi_client.aiogram import HuiyiMiddleware, chat_key, memory_router  # noqa: E402

from gateway.http.app import create_app  # noqa: E402
from gateway.config import TenantSettings, load_settings  # noqa: E402
from memory.types import Namespace  # noqa: E402

USER = {"id": 42, "is_bot": False, "first_name": "阿杰", "language_code": "zh-hans"}


def update(n: int, text: str, chat: dict | None = None) -> Update:
    chat = chat or {"id": 42, "type": "private", "first_name": "阿杰"}
    entities = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}] if text.startswith("/") else None
    return Update.model_validate({"update_id": n, "message": {
        "message_id": n, "date": int(time.time()), "chat": chat, "from": USER, "text": text, "entities": entities}})


@pytest.fixture
def app():
    application = create_app(load_settings(tenants={"default": TenantSettings(language="zh_CN")}))
    with TestClient(application, client=("127.0.0.1", 50000)):
        yield application


@pytest.fixture
async def bot(fake_telegram):
    b = Bot("42000:TEST", session=AiohttpSession(api=TelegramAPIServer.from_base(fake_telegram.base_url)))
    yield b
    await b.session.close()


def _client(app) -> AsyncHuiyi:
    key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    return AsyncHuiyi(api_key=key, http=httpx.AsyncClient(transport=transport, base_url="http://huiyi"))


async def test_middleware_recollects_captures_and_records_the_bots_answer(app, bot, fake_telegram):
    """Message 1 is captured after the handler; message 2's handler gets a recollection citing it, with a prompt
    whose tail holds the bot's recorded answer to message 1."""
    hy = _client(app)
    dp, chats = Dispatcher(), Router()
    dp.include_routers(memory_router(hy), chats)  # a catch-all goes after the commands (aiogram tries in order)
    dp.message.middleware(HuiyiMiddleware(hy))
    seen: list[dict] = []

    @chats.message()
    async def chat(message: Message, huiyi, huiyi_chat, huiyi_record_reply) -> None:
        seen.append({"rec": huiyi, "chat": huiyi_chat})
        answer = "煤球好可爱！🐈‍⬛"
        await message.answer(answer)
        await huiyi_record_reply(answer)

    await dp.feed_update(bot, update(1, "我养了一只叫煤球的黑猫"))
    (mem,) = app.state.pipeline.core.list(Namespace("default", "tg:42"))
    assert "煤球" in mem.text and seen[0]["chat"] == "tg:private:42"
    await dp.feed_update(bot, update(2, "煤球最近不爱吃饭怎么办？"))
    rec = seen[1]["rec"]
    assert rec.sources == (mem.id,) and "煤球" in rec.text
    assert {"role": "assistant", "content": "煤球好可爱！🐈‍⬛"} in rec.prompt
    assert rec.prompt[-1] == {"role": "user", "content": "煤球最近不爱吃饭怎么办？"}
    assert [p["text"] for p in fake_telegram.sent()] == ["煤球好可爱！🐈‍⬛"] * 2
    await hy.aclose()


async def test_memory_commands_are_answered_by_the_gateway(app, bot, fake_telegram):
    """/memory list and /记忆 帮助 reach the gateway as turns; its localised reply is sent to the chat; the
    command is not captured and the plain handler does not run."""
    hy = _client(app)
    dp, chats = Dispatcher(), Router()
    dp.include_routers(memory_router(hy), chats)
    dp.message.middleware(HuiyiMiddleware(hy))
    ran: list[str] = []

    @chats.message()
    async def chat(message: Message) -> None:
        ran.append(message.text)

    await hy.capture("tg:42", ["I live in Hangzhou with my sister"])
    await dp.feed_update(bot, update(3, "/memory list"))
    await dp.feed_update(bot, update(4, "/记忆 帮助"))
    texts = [p["text"] for p in fake_telegram.sent()]
    assert len(texts) == 2 and "Hangzhou" in texts[0] and "/记忆" in texts[1]
    assert ran == [] and len(app.state.pipeline.core.list(Namespace("default", "tg:42"))) == 1
    await hy.aclose()


async def test_an_unreachable_gateway_leaves_huiyi_none_and_the_handler_runs(bot, fake_telegram):
    """With the gateway down the handler still answers, with ``huiyi`` None; nothing raises."""
    hy = AsyncHuiyi("http://127.0.0.1:9", api_key="hy_0123456789ab_" + "a" * 43, timeout=2)
    dp = Dispatcher()
    dp.message.middleware(HuiyiMiddleware(hy))
    got: list = []

    @dp.message()
    async def chat(message: Message, huiyi) -> None:
        got.append(huiyi)
        await message.answer("在呢")

    await dp.feed_update(bot, update(5, "hello there"))
    assert got == [None] and [p["text"] for p in fake_telegram.sent()] == ["在呢"]
    await hy.aclose()


def test_chat_keys_follow_the_gateways_form():
    """Private chats by user id, groups and forum topics as tg:group:<id>[:<topic>]."""
    private = update(6, "hi").message
    group = update(7, "hi", {"id": -100123, "type": "supergroup", "title": "猫友会"}).message
    topic = Message.model_validate({**group.model_dump(by_alias=True, exclude_none=True), "message_thread_id": 9,
                                    "is_topic_message": True})
    assert [chat_key(m) for m in (private, group, topic)] == ["tg:private:42", "tg:group:-100123",
                                                              "tg:group:-100123:9"]
