"""A forget answers with a receipt counted from what it deleted: the memory and
its versions, index rows, cache entries and BM25 postings, chat-log lines,
contexts, derived consolidated memories, links, conflicts, change events and
tombstones — on SQLite and PostgreSQL, and the same message sent again after
the forget is not learned from evidence older than it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory.capture import capture
from memory.errors import NotFoundError
from memory.store import ChatLine
from memory.types import ChatKind, ChatRef, ForgetReceipt, Namespace

NS = Namespace("default", "tg:1001")
CHAT = ChatRef("tg", ChatKind.PRIVATE, "1001")

#: lang: (what the person said, what it was changed to, the companion's retelling, an unrelated memory that
#: conflicts, an unrelated one, the context line of another memory that retells it)
SAID = {
    "zh_CN": ("我对花生过敏，上次吃了一口就进了急诊室😱", "我对花生和腰果过敏，上次吃了一口就进了急诊室",
              "记住啦，你对花生和腰果过敏，一定要小心！", "我不对花生过敏", "我家猫叫煤球",
              "小忆: 你对花生和腰果过敏，那今晚吃什么？"),
    "en": ("I'm allergic to peanuts, one bite sent me to the ER last year.",
           "I'm allergic to peanuts and cashews, one bite sent me to the ER last year.",
           "Noted: you're allergic to peanuts and cashews, be careful!", "I'm not allergic to peanuts.",
           "My cat is called Mochi.", "Mia: allergic to peanuts and cashews, so what's for dinner?"),
}


@pytest.mark.parametrize("lang", SAID)
def test_the_receipt_counts_what_the_forget_deleted(core, lang):
    """One memory with one older version, a conflict, an association link, a consolidated memory citing it,
    a companion line and another memory's context retelling it, a cached view and a webhook subscriber:
    the receipt says exactly that, and each thing counted is gone."""
    said, changed, retold, conflicting, other, context = SAID[lang]
    core.store.subscribe_events(["default"])
    t0 = datetime.now(timezone.utc) - timedelta(minutes=5)
    m = core.add(NS, core.new(NS, said, origin=CHAT, source_message_id="m1", created_at=t0)).memory
    core.update(NS, m.id, changed)
    c = core.add(NS, core.new(NS, conflicting, origin=CHAT)).memory
    assert core.store.add_conflict(NS, m.id, c.id)
    o = core.add(NS, core.new(NS, other, origin=CHAT, context=context)).memory
    core.store.strengthen_links(NS, [m.id, o.id], reason="recalled")
    d = core.add(NS, core.new(NS, retold.replace("！", "。"), origin=CHAT)).memory
    core.store.put_consolidated(NS, d.id, "fact", 0.9, [m.id])
    core.store.append_chat("default", CHAT, ChatLine("user", "1001", said, t0, "m1", "阿杰"))
    core.store.append_chat("default", CHAT, ChatLine("bot", "bot", retold, t0 + timedelta(seconds=5), "", "小忆"))
    assert core.recall(NS, [said]), "the namespace is searched, so the cache holds its view"
    receipt = core.forget(NS, m.id, actor="test")
    assert (receipt.memories, receipt.versions, receipt.derived, receipt.conflicts) == (1, 1, 1, 1)
    assert receipt.links >= 1 and receipt.contexts == 1
    assert receipt.chat_lines == 2  # the person's line it was learned from and the companion's retelling
    assert receipt.index_rows == 2  # its row and the derived one's
    assert (receipt.events, receipt.receivers) == (2, 1)  # memory.forgotten of both, to the one webhook
    # both versions' texts, the evidence's fingerprint, and the derived memory's text
    assert receipt.tombstones >= 3
    if core.cache is not None:
        assert receipt.cache_entries == 2 and receipt.bm25_postings > 4
    with pytest.raises(NotFoundError):
        core.get(NS, m.id)
    with pytest.raises(NotFoundError):
        core.get(NS, d.id)
    assert core.store.conflicts(NS) == []
    assert core.get(NS, o.id).context == ""
    assert [line.text for line in core.store.chat_tail("default", CHAT, 20)] == []


def test_receipts_add_up_and_keep_the_receivers_of_one_webhook():
    """Two receipts add field by field; the receivers are the same webhook, so the larger count stays."""
    a = ForgetReceipt(memories=1, versions=2, events=1, receivers=1, tombstones=3)
    b = ForgetReceipt(memories=1, chat_lines=4, events=1, receivers=1, tombstones=1)
    assert a + b == ForgetReceipt(memories=2, versions=2, chat_lines=4, events=2, receivers=1, tombstones=4)


@pytest.mark.parametrize("text", ["我对花生过敏，上次吃了一口就进了急诊室😱", "I'm allergic to peanuts, I carry an EpiPen."])
def test_the_same_message_sent_again_after_the_forget_is_not_learned_again(core, text):
    """Forgotten, the same message said at the same time (a re-send, a replay) stores nothing; said again
    after the forget it is new evidence and is learned."""
    said = datetime.now(timezone.utc) - timedelta(minutes=10)
    (first,) = [r.memory for r in capture(core, NS, text, chat=CHAT, said_at=said, message_id="m1")
                if r.memory is not None]
    core.forget(NS, first.id)
    again = capture(core, NS, text, chat=CHAT, said_at=said, message_id="m1-resent")
    assert [r.memory for r in again if r.memory is not None and r.action not in ("rejected",)] == []
    assert core.list(NS) == []
    later = capture(core, NS, text, chat=CHAT, said_at=datetime.now(timezone.utc) + timedelta(seconds=1),
                    message_id="m2")
    assert [m.text for m in core.list(NS)] == [r.memory.text for r in later if r.memory is not None]


@pytest.mark.parametrize("texts", [("我家猫叫煤球，三岁了", "我在杭州工作"), ("My cat Mochi is three.", "I work in Hangzhou.")])
def test_the_cached_view_leaves_process_memory_at_once_and_is_counted(core, texts):
    """With recall's cache on, a forget drops the namespace's cached view (its text with it) in the same call
    and counts the rows and BM25 postings it held for the forgotten memory; the next recall reloads it."""
    from memory.core import MemoryCore
    from memory.text import tokens

    cached = MemoryCore(core.store, core.index, cache_mib=16)  # shares the fixture's stores; closed by it
    m = cached.add(NS, cached.new(NS, texts[0], origin=CHAT)).memory
    cached.add(NS, cached.new(NS, texts[1], origin=CHAT))
    assert [h.memory.id for h in cached.recall(NS, [texts[0]])][:1] == [m.id]
    assert cached.cache.held(NS)
    receipt = cached.forget(NS, m.id)
    assert not cached.cache.held(NS)
    assert receipt.cache_entries == 1 and receipt.bm25_postings == len(set(tokens(texts[0])))
    assert m.id not in [h.memory.id for h in cached.recall(NS, [texts[0]])]
