"""Off the record and taking back the last minutes, through real Telegram and
OneBot payloads → parser → Pipeline.handle, on SQLite and PostgreSQL:
``/memory pause [duration]``, ``/memory resume``, ``/memory forget last <duration>``
(``/记忆 暂停 30分钟``, ``/记忆 继续``, ``/记忆 忘记 最近 10分钟``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.durations import DurationTooLong, parse_duration
from gateway.observability import read_turns
from gateway.pipeline import Pipeline
from memory.types import ChatKind, ChatRef, Namespace
from test_commands import Clock, ob, tg, turn

USER = 408258968
QQ_USER = 10001
GROUP = 777


@pytest.fixture
def pipe(core, settings):
    return Pipeline(settings, core)


@pytest.fixture
def settings():
    from gateway.config import load_settings

    return load_settings()


@pytest.fixture
def clock():
    return Clock()


def _tail(pipe: Pipeline, chat: ChatRef) -> list[str]:
    return [line.text for line in pipe.core.store.chat_tail("default", chat, 50)]


async def test_a_paused_private_chat_learns_nothing_and_keeps_no_line_but_still_recalls(pipe, clock):
    """After /memory pause a private message is answered with recall of what was known before, yet nothing is
    captured (inline or in the background), its line and the reply leave the chat log, the audit marks it paused."""
    before = await turn(pipe, tg(clock, "I love green tea."))
    (tea,) = before.captured
    paused = await turn(pipe, tg(clock, "/memory pause"))
    assert paused.command and "Off the record in this chat until you send /memory resume" in paused.reply
    assert "I still remember what you told me before" in paused.reply
    said = await turn(pipe, tg(clock, "What tea do I love? My sister moved to Lisbon 🏙️."))
    assert said.paused and said.captured == [] and tea in said.recalled
    msg = await turn(pipe, tg(clock, "My brother works at a bakery in Porto."))  # also in the background path
    assert msg.paused
    from bridges.telegram.parse import parse_update

    bg = await pipe.handle("default", parse_update(tg(clock, "I started learning the cello.")), background_capture=True)
    await pipe.drain(10)
    assert bg.paused and bg.captured == [] and not bg.capture_pending
    ns = Namespace.parse(before.namespace)
    assert [m.id for m in pipe.core.list(ns)] == [tea]
    tail = _tail(pipe, ChatRef("tg", ChatKind.PRIVATE, str(USER)))
    assert tail == ["I love green tea."]  # the paused lines went after their replies
    records = read_turns(pipe.settings.data_dir, datetime.now(UTC).date())
    assert [r["paused"] for r in records if r["message_id"] == said.message_id] == [True]
    assert [r["paused"] for r in records if r["message_id"] == before.message_id] == [False]
    # resumed: learning goes on
    back = await turn(pipe, tg(clock, "/memory resume"))
    assert "Back on the record" in back.reply
    after = await turn(pipe, tg(clock, "My brother works at a bakery in Porto."))
    assert not after.paused and len(after.captured) == 1


async def test_a_pause_in_private_does_not_stop_learning_in_a_group_nor_the_other_way(pipe, clock):
    """QQ: paused in private, the person's group line is still learned; paused in the group, their private line is."""
    await turn(pipe, ob(clock, "/记忆 暂停", user=QQ_USER))
    private = await turn(pipe, ob(clock, "我养了一只叫煤球的猫。", user=QQ_USER))
    assert private.paused and private.captured == []
    group = await turn(pipe, ob(clock, "我下个月去成都出差。", user=QQ_USER, group=GROUP, at_bot=True))
    assert not group.paused and len(group.captured) == 1
    await turn(pipe, ob(clock, "/记忆 继续", user=QQ_USER))
    g_pause = await turn(pipe, ob(clock, "/记忆 暂停", user=QQ_USER, group=GROUP, at_bot=True))
    assert "不留记录" in g_pause.reply and "以前告诉我的事我还记得" in g_pause.reply
    in_group = await turn(pipe, ob(clock, "我最近在学吉他。", user=QQ_USER, group=GROUP, at_bot=True))
    assert in_group.paused and in_group.captured == []
    other = await turn(pipe, ob(clock, "我对花生过敏。", user=10002, group=GROUP, at_bot=True))
    assert not other.paused and len(other.captured) == 1  # someone else in the group is not paused by it
    again = await turn(pipe, ob(clock, "我最近在学吉他。", user=QQ_USER))
    assert not again.paused and len(again.captured) == 1
    assert "我最近在学吉他。" not in _tail(pipe, ChatRef("qq", ChatKind.GROUP, str(GROUP)))


async def test_a_pause_with_a_chinese_duration_ends_by_itself(pipe, clock):
    """/记忆 暂停 30分钟: for the next half hour nothing is learned; a line 31 minutes later is learned again.
    /memory help shows the pause."""
    reply = await turn(pipe, tg(clock, "/记忆 暂停 30分钟", lang="zh-hans"))
    assert "这个聊天现在不留记录，直到" in reply.reply
    helped = await turn(pipe, tg(clock, "/memory help"))
    assert "/memory pause" in helped.reply and "Off the record in this chat until" in helped.reply
    inside = await turn(pipe, tg(clock, "我妹妹在里斯本读书。", lang="zh-hans", wait=600))
    assert inside.paused and inside.captured == []
    later = await turn(pipe, tg(clock, "我妹妹在里斯本读书。", lang="zh-hans", wait=31 * 60))
    assert not later.paused and len(later.captured) == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("/memory pause forever and ever", "I can't read “forever and ever” as a length of time; nothing changed."),
    ("/memory pause 45d", "“45d” is too long; nothing changed. At most 30 days."),
    ("/记忆 暂停 好久好久", "我看不懂「好久好久」是多长时间，什么都没有改变。"),
    ("/memory forget last", "Usage: /memory forget <id> | forget all | forget last <duration>"),
    ("/记忆 忘记 最近", "用法：/记忆 forget（忘记）<编号>"),
    ("/记忆 忘记 最近 一会儿", "我看不懂「一会儿」是多长时间，什么都没有改变。"),
])
async def test_an_unknown_duration_is_answered_and_changes_nothing(pipe, clock, text, expected):
    """A duration that is no duration (or longer than 30 days) gets a clear answer; no pause starts, nothing is forgotten."""
    said = await turn(pipe, tg(clock, "I love green tea."))
    reply = await turn(pipe, tg(clock, text, lang="zh-hans" if "记忆" in text else "en"))
    assert expected in reply.reply
    ns = Namespace.parse(said.namespace)
    assert pipe.core.store.paused(ns, f"tg:private:{USER}", datetime.now(UTC)) is None
    assert pipe.core.store.count(ns) == 1


async def test_forget_last_ten_minutes_takes_back_only_that_time_in_that_chat(pipe, clock):
    """/memory forget last 10m withdraws what was said in this chat in the last 10 minutes and what it taught;
    older memories, and what was said in another chat meanwhile, stay."""
    old = await turn(pipe, tg(clock, "I love green tea."))
    group_said = await turn(pipe, ob(clock, "我下个月去成都出差。", user=QQ_USER, group=GROUP, at_bot=True))
    recent = await turn(pipe, tg(clock, "My sister lives in Lisbon.", wait=20 * 60))
    more = await turn(pipe, tg(clock, "I work as a nurse at night."))
    assert len(recent.captured) == 1 and len(more.captured) == 1
    gone = await turn(pipe, tg(clock, "/memory forget last 10m"))
    assert "Taken back what I learned from you in this chat in the last 10 minutes: 2 memories" in gone.reply
    ns = Namespace.parse(old.namespace)
    assert [m.id for m in pipe.core.list(ns)] == old.captured
    assert _tail(pipe, ChatRef("tg", ChatKind.PRIVATE, str(USER))) == ["I love green tea."]
    assert pipe.core.store.count(Namespace.parse(group_said.namespace)) == 1
    assert [a["action"] for a in pipe.core.store.audit_records(ns)][0] == "forget_last"


async def test_forget_last_in_chinese_on_qq(pipe, clock):
    """/记忆 忘记 最近 10分钟 on QQ: the last ten minutes of the private chat go, the memory of an hour ago stays."""
    old = await turn(pipe, ob(clock, "我对花生过敏。", user=QQ_USER))
    await turn(pipe, ob(clock, "我最近在学吉他，每周三上课。", user=QQ_USER, wait=3600))
    gone = await turn(pipe, ob(clock, "/记忆 忘记 最近 10分钟", user=QQ_USER))
    assert "已收回最近10分钟里我在这个聊天中从你那儿学到的：1条记忆" in gone.reply
    assert [m.id for m in pipe.core.list(Namespace.parse(old.namespace))] == old.captured


async def test_a_pause_made_on_one_replica_holds_on_another(core, settings, clock):
    """Two gateways over one database: the pause sent to one is honoured by the other at the next line."""
    one, two = Pipeline(settings, core), Pipeline(settings, core)
    await turn(one, tg(clock, "/memory pause 2h"))
    said = await turn(two, tg(clock, "My sister lives in Lisbon."))
    assert said.paused and said.captured == []
    await turn(two, tg(clock, "/memory resume"))
    again = await turn(one, tg(clock, "My sister lives in Lisbon."))
    assert not again.paused and len(again.captured) == 1


@pytest.mark.parametrize(("text", "minutes"), [
    ("2h", 120), ("30m", 30), ("90 minutes", 90), ("1h30m", 90), ("30分钟", 30), ("２小时", 120), ("两小时", 120),
    ("一个半小时", 90), ("半小时", 30), ("1小时30分钟", 90), ("十五分鐘", 15), ("3天", 3 * 1440),
])
def test_durations_in_chinese_and_english(text, minutes):
    """gateway.durations reads zh and en durations (full-width digits, Chinese numerals, traditional units)."""
    assert parse_duration(text).total_seconds() == minutes * 60


@pytest.mark.parametrize("text", ["", "abc", "10", "-5m", "0m", "分钟", "很久", "一万亿天", "三三天"])
def test_what_is_no_duration(text):
    """No number, no unit, zero or negative: no duration."""
    assert parse_duration(text) is None


@pytest.mark.parametrize("text", ["31d", "三百天", "99999999999999999999h", "9999999999d"])
def test_past_30_days_is_too_long(text):
    """Past 30 days — however far past (10**20 hours overflowed timedelta: a 500 on chat, webhook and /v1) —
    is read and refused as too long."""
    with pytest.raises(DurationTooLong):
        parse_duration(text)
