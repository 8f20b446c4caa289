"""Two bots of one gateway in one group: on QQ the other bot's line arrives as a
member's (OneBot has no is_bot flag); it is never captured, answered or logged as
a person's, while the members around it still are (found by ``bench groups``); SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC

import pytest

from bridges.contract import InboundMessage
from bridges.qq.parse import parse_event
from gateway.config import TenantSettings, load_settings
from gateway.pipeline import Pipeline
from memory.types import ChatKind, ChatRef, Namespace

XIAOYI, AHUA, GROUP = 10001, 10002, 700000


def event(self_id: int, user: int, text: str, mid: int, *, at: int | None = None, group: bool = True,
          nickname: str = "阿花") -> dict:
    """A OneBot v11 message event as ``self_id``'s implementation pushes it (array message)."""
    segs = ([{"type": "at", "data": {"qq": str(at)}}] if at else []) + [{"type": "text", "data": {"text": text}}]
    e = {"time": int(time.time()), "self_id": self_id, "post_type": "message", "message_id": mid, "user_id": user,
         "message": segs, "raw_message": text, "font": 0, "sender": {"user_id": user, "nickname": nickname}}
    if group:
        e.update(message_type="group", sub_type="normal", group_id=GROUP, anonymous=None)
        e["sender"].update(card="", role="member")
    else:
        e.update(message_type="private", sub_type="friend")
    return e


@pytest.fixture
def pipeline(core):
    tenants = {"xiaoyi": TenantSettings(persona_name="小忆", qq={"self_ids": [str(XIAOYI)]}),
               "ahua": TenantSettings(persona_name="阿花", qq={"self_ids": [str(AHUA)]},
                                      capture_all_group_messages=True),
               "tgbot": TenantSettings(telegram={"token": "7002:TEST-token"})}
    return Pipeline(load_settings(tenants=tenants), core)


@pytest.mark.parametrize("text", ["我超级爱吃肉，红烧肉最好了", "I keep two cats and I love pizza 🍕"])
async def test_another_bots_line_addressed_to_this_bot_is_no_members_memory(pipeline, text):
    """阿花 @-ing 小忆 in the group they share: 小忆 neither answers nor learns it, and its chat log
    holds no line of 阿花's account; a member saying the same to 小忆 is learned (zh and en)."""
    core = pipeline.core
    res = await pipeline.handle("xiaoyi", parse_event(event(XIAOYI, AHUA, text, 1, at=XIAOYI)))
    assert not res.addressed and res.captured == [] and res.reply is None and not res.recalled
    assert core.list(Namespace("xiaoyi", f"qq:{AHUA}")) == []
    tail = core.store.chat_tail("xiaoyi", ChatRef("qq", ChatKind.GROUP, str(GROUP)), 10)
    assert [line.sender_id for line in tail] == []
    member = await pipeline.handle("xiaoyi", parse_event(event(XIAOYI, 30000, text, 2, at=XIAOYI, nickname="小王")))
    assert member.addressed and member.captured
    assert all(m.namespace == Namespace("xiaoyi", "qq:30000") for m in core.list(Namespace("xiaoyi", "qq:30000")))


async def test_a_bot_capturing_every_group_line_does_not_learn_the_other_bots_lines(pipeline):
    """阿花 captures every group line: 小忆's lines (another account of the gateway) are not among
    them, in the group nor in a private chat; a member's unaddressed line is."""
    core = pipeline.core
    await pipeline.handle("ahua", parse_event(event(AHUA, XIAOYI, "我在IT部门工作了15年", 3, nickname="小忆")))
    await pipeline.handle("ahua", parse_event(event(AHUA, XIAOYI, "我养了一只叫煤球的猫", 4, group=False,
                                                    nickname="小忆")))
    assert core.list(Namespace("ahua", f"qq:{XIAOYI}")) == []
    res = await pipeline.handle("ahua", parse_event(event(AHUA, 30001, "我在IT部门工作了15年", 5, nickname="小李")))
    assert res.captured and core.list(Namespace("ahua", "qq:30001"))


async def test_a_telegram_bot_of_the_gateway_is_no_person_either(pipeline):
    """The Telegram bot id of a tenant (its token's prefix) is a bot account: a message naming it
    as the sender (a client of /v1/turns, a bridge without is_bot) teaches nothing."""
    from datetime import datetime

    msg = InboundMessage(platform="tg", message_id="9", sender_id="7002", sender_name="bot", chat_kind=ChatKind.GROUP,
                         chat_id="-1001", text="我住在杭州", timestamp=datetime.now(UTC), mentions_bot=True)
    res = await pipeline.handle("default", msg)
    assert res.captured == [] and not res.addressed
    assert pipeline.core.list(Namespace("default", "tg:7002")) == []
