"""The turn end to end: identity, dedupe, addressing, recall, prompt, reply and
capture — with and without a chat model (fake OpenAI server on loopback)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gateway.config import load_settings
from bridges.contract import InboundMessage, ReplyRef
from gateway.pipeline import Pipeline
from memory.types import ChatKind, Namespace

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def msg(text, *, sender="1001", chat_id=None, kind=ChatKind.PRIVATE, mid="1", at=T0, **kw) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id=sender, sender_name="阿杰", chat_kind=kind,
                          chat_id=chat_id or sender, text=text, timestamp=at, **kw)


@pytest.fixture
def pipeline(sqlite_core):
    return Pipeline(load_settings(), sqlite_core)


@pytest.fixture
def pipeline_llm(sqlite_core, llm, monkeypatch):
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    return Pipeline(load_settings(), sqlite_core)


async def test_private_turn_without_model_returns_prompt_and_captures(pipeline):
    """No model configured: the turn recalls, builds the prompt, returns no reply, and captures."""
    r1 = await pipeline.handle("default", msg("我养了一只叫煤球的黑猫", mid="1"))
    assert r1.addressed and r1.reply is None and len(r1.captured) == 1
    r2 = await pipeline.handle("default", msg("你还记得煤球吗？", mid="2", at=T0 + timedelta(days=2)))
    assert r2.recalled == r1.captured
    assert "煤球" in r2.recollection
    system = r2.prompt[0]["content"]
    assert "<recollection>" in system and "煤球" in system
    assert r2.prompt[-1] == {"role": "user", "content": "你还记得煤球吗？"}
    assert r2.captured == []  # a question is not a fact


async def test_redelivered_message_is_processed_once(pipeline):
    """The same delivery twice: the second is a duplicate and captures nothing."""
    first = await pipeline.handle("default", msg("我喜欢喝美式咖啡", mid="42"))
    again = await pipeline.handle("default", msg("我喜欢喝美式咖啡", mid="42"))
    assert first.captured and again.duplicate and again.captured == []
    assert pipeline.core.store.count(Namespace("default", "tg:1001")) == 1


async def test_reply_through_fake_openai_server(pipeline_llm, llm):
    """With a model, the real openai client sends the assembled prompt and the reply comes back."""
    await pipeline_llm.handle("default", msg("我养了一只叫煤球的黑猫", mid="1"))
    llm.enqueue("当然记得煤球呀，它最近还好吗？")
    r = await pipeline_llm.handle("default", msg("你记得我的猫吗", mid="2"))
    assert r.reply == "当然记得煤球呀，它最近还好吗？"
    sent = llm.requests[-1]
    assert sent["model"] == "fake-chat"
    assert "煤球" in sent["messages"][0]["content"]


async def test_model_failure_degrades_to_apology_and_still_captures(pipeline_llm, llm):
    """HTTP 500 from the model: a localised apology goes out and the fact is still captured."""
    llm.enqueue(status=500)
    llm.enqueue(status=500)
    r = await pipeline_llm.handle("default", msg("我下周要去成都出差", mid="7"))
    assert r.reply and "抱歉" in r.reply
    assert len(r.captured) == 1


async def test_group_message_not_addressed_is_not_answered_or_captured(pipeline):
    """In a group the bot answers only when addressed; unaddressed text is not captured by default."""
    r = await pipeline.handle("default", msg("我喜欢打篮球", kind=ChatKind.GROUP, chat_id="-100200", mid="5"))
    assert not r.addressed and r.prompt == [] and r.captured == []
    r2 = await pipeline.handle("default", msg("我喜欢打篮球", kind=ChatKind.GROUP, chat_id="-100200", mid="6",
                                              mentions_bot=True))
    assert r2.addressed and len(r2.captured) == 1


async def test_quoting_someone_does_not_change_the_speaker(pipeline):
    """A reply quoting B's message is still A's message: A's namespace, A's memory, B untouched."""
    quote = ReplyRef(message_id="9", sender_id="2002", text="我是B，我喜欢猫")
    r = await pipeline.handle("default", msg("我更喜欢狗", kind=ChatKind.GROUP, chat_id="-100300", mid="10",
                                             mentions_bot=True, reply_to=quote))
    assert r.namespace == "default/tg:1001"
    assert pipeline.core.store.count(Namespace("default", "tg:2002")) == 0
    texts = [m.text for m in pipeline.core.list(Namespace("default", "tg:1001"))]
    assert texts == ["我更喜欢狗"]


async def test_private_memory_never_in_group_prompt(pipeline):
    """A fact told in private does not appear in the prompt of a group turn."""
    await pipeline.handle("default", msg("我的秘密是我怕黑", mid="1"))
    r = await pipeline.handle("default", msg("你知道我的秘密吗", kind=ChatKind.GROUP, chat_id="-100400", mid="2",
                                             mentions_bot=True))
    assert r.recalled == []
    assert "怕黑" not in r.prompt[0]["content"]


async def test_memory_commands_are_never_captured(pipeline):
    """/memory commands are not facts about the speaker."""
    r = await pipeline.handle("default", msg("/memory list 我的猫", mid="3", is_command=True))
    assert r.command and r.captured == []


async def test_bot_mention_is_not_part_of_the_captured_fact(sqlite_core, monkeypatch):
    """'@mochi_bot 我养了一只猫' in a group is captured as '我养了一只猫'."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__TELEGRAM_BOT_USERNAME", "mochi_bot")
    p = Pipeline(load_settings(), sqlite_core)
    r = await p.handle("default", msg("@Mochi_Bot 我养了一只叫煤球的猫", kind=ChatKind.GROUP, chat_id="-100500",
                                      mid="77", mentions_bot=True))
    assert [p.core.get(Namespace("default", "tg:1001"), i).text for i in r.captured] == ["我养了一只叫煤球的猫"]
    # its edit keeps the mention out too (the edit revises the same memory)
    e = await p.handle("default", msg("@mochi_bot 我养了一只叫煤球的狗", kind=ChatKind.GROUP, chat_id="-100500",
                                      mid="77", mentions_bot=True, is_edit=True))
    assert [p.core.get(Namespace("default", "tg:1001"), i).text for i in e.captured] == ["我养了一只叫煤球的狗"]


async def test_private_chat_log_is_keyed_by_the_sender(pipeline):
    """A private message naming someone else's chat id never sees that person's chat log."""
    await pipeline.handle("default", msg("我养了一只叫煤球的黑猫", sender="42", mid="1"))
    r = await pipeline.handle("default", msg("我说过什么？", sender="43", chat_id="42", mid="2"))
    assert r.chat == "tg:private:43"
    assert all("煤球" not in m["content"] for m in r.prompt)


async def test_failed_turn_releases_its_delivery_for_the_retry(pipeline, monkeypatch):
    """A turn that crashes midway is not recorded as delivered: the platform's retry runs."""
    def boom(*a, **kw):
        raise RuntimeError("store down")

    monkeypatch.setattr(pipeline, "addressed", boom)
    with pytest.raises(RuntimeError):
        await pipeline.handle("default", msg("我喜欢喝美式咖啡", mid="9"))
    monkeypatch.undo()
    again = await pipeline.handle("default", msg("我喜欢喝美式咖啡", mid="9"))
    assert not again.duplicate and len(again.captured) == 1


async def test_a_fact_keeps_the_companions_line_it_answered(pipeline):
    """The companion's line just before a person's message is the memory's context (searched with
    it); in a group another member's line before it is not (their words stay out of this memory)."""
    from memory.store import ChatLine
    from memory.types import ChatRef

    now = datetime.now(timezone.utc).replace(microsecond=0)
    store = pipeline.core.store
    store.append_chat("default", ChatRef("tg", ChatKind.PRIVATE, "1001"),
                      ChatLine("bot", "bot", "你上周末去迪士尼了吗？", now - timedelta(minutes=2), "", "小莫"))
    r = await pipeline.handle("default", msg("我去了，人超多，排了两个小时队", mid="1", at=now))
    [mid] = r.captured
    assert store.get(Namespace("default", "tg:1001"), mid).context == "小莫: 你上周末去迪士尼了吗？"
    found = await pipeline.handle("default", msg("迪士尼怎么样？", mid="2", at=now + timedelta(minutes=1)))
    assert mid in found.recalled
    shown = await pipeline.handle("default", msg(f"/memory show {mid}", mid="2b", at=now + timedelta(minutes=1),
                                                 is_command=True))
    assert "我去了，人超多，排了两个小时队\n回应：小莫: 你上周末去迪士尼了吗？\n" in shown.reply

    group = ChatRef("tg", ChatKind.GROUP, "-100200")
    store.append_chat("default", group, ChatLine("user", "2002", "我是B，周末去迪士尼吗？", now, "b1", "B"))
    r2 = await pipeline.handle("default", msg("I went hiking with my sister", kind=ChatKind.GROUP, chat_id="-100200",
                                              mid="3", at=now + timedelta(minutes=2), mentions_bot=True))
    [gid] = r2.captured
    assert store.get(Namespace("default", "tg:1001"), gid).context == ""


async def test_recall_is_as_of_the_messages_own_time(pipeline):
    """A turn recalls as of its message's timestamp when that is past: 「上个月」 in a message
    of 15 June (delivered late, replayed, or an evaluation's question) names May, not the
    month before the wall clock; a timestamp ahead of the clock recalls at the clock."""
    core, ns = pipeline.core, Namespace("default", "tg:1001")
    clock = datetime.now(timezone.utc)
    last_month = (clock.replace(day=1) - timedelta(days=1)).replace(day=15, hour=12)
    for text, said in (("我去杭州旅行了", datetime(2026, 5, 10, 12, tzinfo=timezone.utc)),
                       ("我去厦门旅行了", last_month)):
        core.add(ns, core.new(ns, text, created_at=said), said_at=said)
    core.maintain()
    ids = {m.text: m.id for m in core.list(ns)}
    june = await pipeline.handle("default", msg("我上个月去哪里旅行了？", mid="1",
                                                at=datetime(2026, 6, 15, 12, tzinfo=timezone.utc)))
    assert june.recalled[0] == ids["我去杭州旅行了"]
    ahead = await pipeline.handle("default", msg("我上个月去哪里旅行了？", mid="2", at=clock + timedelta(days=400)))
    assert ahead.recalled[0] == ids["我去厦门旅行了"]
