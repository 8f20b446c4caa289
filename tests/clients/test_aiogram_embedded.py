"""aiogram in embedded mode (huiyi_client.embedded): the gateway runs in the bot's process, its lifespan (core,
maintenance) around the block, and the same Router and middleware (huiyi_client.aiogram) work over it in a real
Dispatcher fed with Updates, answering through a fake Bot API on loopback: the handler gets the recollection and
prompt in ``data["huiyi"]``, /memory and /记忆 are answered, maintenance compacts the index while the bot runs,
and a program whose memory.py shadows the gateway gets a refusal naming the file (a separate interpreter)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "clients" / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "clients" / "python"))

from aiogram import Bot, Dispatcher, Router  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.types import Message, Update  # noqa: E402
from huiyi_client.aiogram import HuiyiMiddleware, memory_router  # noqa: E402
from huiyi_client.embedded import embedded  # noqa: E402

from gateway.config import TenantSettings, load_settings  # noqa: E402
from memory.types import Namespace  # noqa: E402

USER = {"id": 77, "is_bot": False, "first_name": "Lin 林", "language_code": "en"}


def update(n: int, text: str, chat: dict | None = None) -> Update:
    chat = chat or {"id": 77, "type": "private", "first_name": "Lin 林"}
    entities = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}] if text.startswith("/") else None
    return Update.model_validate({"update_id": n, "message": {
        "message_id": n, "date": int(time.time()), "chat": chat, "from": USER, "text": text, "entities": entities}})


@pytest.fixture
async def bot(fake_telegram):
    b = Bot("42000:TEST", session=AiohttpSession(api=TelegramAPIServer.from_base(fake_telegram.base_url)))
    yield b
    await b.session.close()


@pytest.fixture
async def hy(tmp_path, monkeypatch):
    """The embedded gateway (data root in tmp_path, maintenance every 50 ms) and its client."""
    import gateway.maintenance

    monkeypatch.setattr(gateway.maintenance, "MAINTAIN_EVERY_S", 0.05)
    monkeypatch.setattr(gateway.maintenance, "OPTIMIZE_AFTER_WRITES", 1)
    settings = load_settings(data_dir=tmp_path / "bot-data", tenants={"default": TenantSettings(language="en")})
    async with embedded(settings) as client:
        yield client


def dispatcher(hy) -> tuple[Dispatcher, Router]:
    dp, chats = Dispatcher(), Router()
    dp.include_routers(memory_router(hy), chats)  # /memory first, then the catch-all
    dp.message.middleware(HuiyiMiddleware(hy))
    return dp, chats


async def test_handler_data_carries_the_recollection_and_prompt_of_the_embedded_gateway(hy, bot, fake_telegram,
                                                                                          tmp_path):
    """Message 1 is captured into the in-process core (under the given data root); message 2's handler gets
    data["huiyi"] citing it, and a prompt whose tail holds the bot's recorded answer and the question."""
    dp, chats = dispatcher(hy)
    seen: list = []

    @chats.message()
    async def chat(message: Message, huiyi, huiyi_record_reply) -> None:
        seen.append(huiyi)
        answer = "Mochi sounds lovely 🐱！"
        await message.answer(answer)
        await huiyi_record_reply(answer)

    await dp.feed_update(bot, update(1, "My cat is called Mochi，她是一只三花猫"))
    (mem,) = hy.app.state.pipeline.core.list(Namespace("default", "tg:77"))
    assert "Mochi" in mem.text and (tmp_path / "bot-data" / "huiyi.db").is_file()
    await dp.feed_update(bot, update(2, "What is my cat called? 我的猫叫什么？"))
    rec = seen[1]
    assert rec.sources == (mem.id,) and "Mochi" in rec.text
    assert {"role": "assistant", "content": "Mochi sounds lovely 🐱！"} in rec.prompt
    assert rec.prompt[-1] == {"role": "user", "content": "What is my cat called? 我的猫叫什么？"}
    assert [p["text"] for p in fake_telegram.sent()] == ["Mochi sounds lovely 🐱！"] * 2


async def test_memory_commands_run_in_the_embedded_gateway(hy, bot, fake_telegram):
    """/memory list lists what the person said (English and Chinese); /记忆 帮助 answers the help; neither reaches
    the plain handler nor is captured."""
    dp, chats = dispatcher(hy)
    ran: list[str] = []

    @chats.message()
    async def chat(message: Message) -> None:
        ran.append(message.text)

    await hy.capture("tg:77", ["I live in Hangzhou with my sister", "我最喜欢的水果是荔枝"])
    await dp.feed_update(bot, update(3, "/memory list"))
    await dp.feed_update(bot, update(4, "/记忆 帮助"))
    texts = [p["text"] for p in fake_telegram.sent()]
    assert len(texts) == 2 and "Hangzhou" in texts[0] and "荔枝" in texts[0] and "/memory" in texts[1]
    assert ran == [] and len(hy.app.state.pipeline.core.list(Namespace("default", "tg:77"))) == 2


async def test_maintenance_runs_while_the_bot_runs(hy, bot):
    """The gateway's maintenance loop runs inside the block: the index written by a capture is optimised (writes
    since optimize back to 0) without a restart."""
    dp, chats = dispatcher(hy)

    @chats.message()
    async def chat(message: Message) -> None:
        pass

    await dp.feed_update(bot, update(5, "I started learning the guitar 吉他 last week"))
    index = hy.app.state.pipeline.core.index
    deadline = time.monotonic() + 30
    while index.writes_since_optimize and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert hy.app.state.pipeline.core.list(Namespace("default", "tg:77")) and index.writes_since_optimize == 0


def test_a_programs_own_memory_py_blocks_embedding_with_a_clear_reason(tmp_path):
    """A bot directory with memory.py first on sys.path: embedded() raises EmbeddingBlocked naming the file, before
    any gateway module is imported; the bot's memory module stays its own."""
    (tmp_path / "memory.py").write_text("MINE = 'mine 我的'\n", encoding="utf-8")
    code = ("import asyncio, sys, memory\n"
            "from huiyi_client.embedded import embedded, EmbeddingBlocked\n"
            "async def main():\n"
            "    try:\n"
            "        async with embedded():\n"
            "            pass\n"
            "    except EmbeddingBlocked as exc:\n"
            "        print(exc)\n"
            "asyncio.run(main())\n"
            "assert memory.MINE == 'mine 我的' and 'gateway' not in sys.modules and 'memory.types' not in sys.modules\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUIYI_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "clients" / "python"), str(ROOT)])
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{tmp_path / 'memory.py'} shadows huiyi's top-level package 'memory'" in r.stdout
