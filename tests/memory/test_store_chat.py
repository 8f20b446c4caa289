"""Store operations of the IM runtimes (issue 5), on SQLite and PostgreSQL:
chat migration is scoped by tenant, audited and idempotent; the chat tail is
per topic and bounded in age; an edited line is replaced in place; memories
are found by the message they were captured from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.store import ChatLine
from memory.types import ChatKind, ChatRef, Namespace, Visibility

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OLD = ChatRef("tg", ChatKind.GROUP, "-555")
NEW = ChatRef("tg", ChatKind.GROUP, "-100555")


def _group_memory(core, ns: Namespace, text: str, chat: ChatRef, mid: str = "1"):
    return core.add(ns, core.new(ns, text, origin=chat, visibility=Visibility.GROUP, source_message_id=mid,
                                 created_at=T0)).memory


def test_migration_moves_only_this_tenants_chat(core):
    """Tenant a's group moves (log, topics, memory origins, index disclosure); tenant b's same chat id stays."""
    a, b = Namespace("a", "tg:1"), Namespace("b", "tg:1")
    ma = _group_memory(core, a, "我养了一只猫", OLD)
    mb = _group_memory(core, b, "我养了一只狗", OLD)
    topic = ChatRef("tg", ChatKind.GROUP, "-555", "7")
    for tenant in ("a", "b"):
        core.store.append_chat(tenant, OLD, ChatLine("user", "1", f"{tenant} hello", T0, "1"))
        core.store.append_chat(tenant, topic, ChatLine("user", "1", f"{tenant} topic", T0, "2"))

    moved = core.store.migrate_chat("a", OLD, NEW, actor="bridge:tg")
    core.maintain()
    assert (moved.chat_lines, moved.memories, moved.namespaces) == (2, 1, (a,))
    assert core.get(a, ma.id).origin == NEW and core.get(b, mb.id).origin == OLD
    assert [x.text for x in core.store.chat_tail("a", NEW)] == ["a hello"]
    assert [x.text for x in core.store.chat_tail("a", ChatRef("tg", ChatKind.GROUP, "-100555", "7"))] == ["a topic"]
    assert core.store.chat_tail("a", OLD) == [] and [x.text for x in core.store.chat_tail("b", OLD)] == ["b hello"]
    assert [h.memory.id for h in core.recall(a, ["猫"], chat=NEW)] == [ma.id]
    assert core.recall(a, ["猫"], chat=OLD) == []
    assert [h.memory.id for h in core.recall(b, ["狗"], chat=OLD)] == [mb.id]
    assert [r["action"] for r in core.store.audit_records(a)].count("migrate_chat") == 1
    assert "migrate_chat" not in [r["action"] for r in core.store.audit_records(b)]
    again = core.store.migrate_chat("a", OLD, NEW, actor="bridge:tg")
    assert (again.chat_lines, again.memories) == (0, 0)


def test_migration_refuses_private_or_cross_platform_chats(core):
    """Only group chats of one platform, without topics, migrate."""
    with pytest.raises(ValueError):
        core.store.migrate_chat("a", ChatRef("tg", ChatKind.PRIVATE, "1"), NEW, actor="t")
    with pytest.raises(ValueError):
        core.store.migrate_chat("a", OLD, ChatRef("qq", ChatKind.GROUP, "1"), actor="t")


def test_chat_tail_age_bound_is_relative_to_now(core):
    """Lines older than max_age before `now` are left out; the count bound still applies."""
    for i, hours in enumerate((10, 3, 2, 1, 0)):
        core.store.append_chat("a", OLD, ChatLine("user", "1", f"l{i}", T0 - timedelta(hours=hours), str(i)))
    texts = [x.text for x in core.store.chat_tail("a", OLD, 10, max_age=timedelta(hours=2, minutes=30), now=T0)]
    assert texts == ["l2", "l3", "l4"]
    assert [x.text for x in core.store.chat_tail("a", OLD, 2, max_age=timedelta(days=1), now=T0)] == ["l3", "l4"]


def test_edit_chat_line_and_find_by_source(core):
    """An edit rewrites the person's line; find_by_source finds memories of that message in that chat only."""
    ns = Namespace("a", "tg:1")
    core.store.append_chat("a", OLD, ChatLine("user", "1", "原话", T0, "42"))
    core.store.append_chat("a", OLD, ChatLine("bot", "bot", "机器人的话", T0, ""))
    assert len(core.store.edit_chat_line("a", OLD, "42", "改过的话")) == 1
    assert [x.text for x in core.store.chat_tail("a", OLD)] == ["改过的话", "机器人的话"]
    assert core.store.edit_chat_line("a", OLD, "43", "x") == []
    m = _group_memory(core, ns, "我喜欢雨天", OLD, mid="42")
    _group_memory(core, ns, "我喜欢晴天", NEW, mid="42")
    assert [x.id for x in core.store.find_by_source(ns, OLD, "42")] == [m.id]
    assert core.store.find_by_source(Namespace("b", "tg:1"), OLD, "42") == []
