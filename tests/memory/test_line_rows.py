"""What a logged line writes: a plain message claims its delivery id and its content fingerprint in one
deliveries row (a re-push under a new id within the window is still a duplicate, a failed turn frees
both), and its query vector rides on the row write that marks its capture done — SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from memory.errors import DuplicateDelivery
from memory.store import ChatLine, utcnow
from memory.types import ChatKind, ChatRef, Namespace

CHAT = ChatRef("tg", ChatKind.PRIVATE, "1001")
NS = Namespace("default", "tg:1001")
WINDOW = timedelta(minutes=10)


def _line(text: str, message_id: str) -> ChatLine:
    return ChatLine("user", "1001", text, utcnow(), message_id, "小明")


def _deliveries(store) -> int:
    return int(store._read_rows("SELECT count(*) FROM deliveries", ())[0][0])


def test_a_plain_line_claims_its_id_and_its_content_in_one_row(store):
    """One row for both claims; the same content re-pushed under a new id within the window is a duplicate
    and writes nothing; a new message is not."""
    store.append_chat("default", CHAT, _line("我下周去杭州出差 ✈️", "1"), claim="default|tg|1001|1",
                      fingerprint=("fp|default|1001|abc", WINDOW))
    assert _deliveries(store) == 1
    with pytest.raises(DuplicateDelivery):
        store.append_chat("default", CHAT, _line("我下周去杭州出差 ✈️", "2"), claim="default|tg|1001|2",
                          fingerprint=("fp|default|1001|abc", WINDOW))
    with pytest.raises(DuplicateDelivery):  # the id alone, re-delivered
        store.append_chat("default", CHAT, _line("I moved to Berlin!", "1"), claim="default|tg|1001|1",
                          fingerprint=("fp|default|1001|def", WINDOW))
    assert _deliveries(store) == 1
    assert not store.claim_fingerprint("fp|default|1001|abc", WINDOW)  # a command's claim sees it too
    store.append_chat("default", CHAT, _line("I moved to Berlin!", "3"), claim="default|tg|1001|3",
                      fingerprint=("fp|default|1001|def", WINDOW))
    assert _deliveries(store) == 2


def test_a_stale_fingerprint_lets_go_and_a_failed_turn_frees_both_claims(store):
    """Past the window the same content is new again (the old row keeps its id); release_delivery of the
    id frees the id and the fingerprint of its row."""
    store.append_chat("default", CHAT, _line("今天好累，加班到十点", "1"), claim="default|tg|1001|1",
                      fingerprint=("fp|default|1001|abc", timedelta(0)))
    store.append_chat("default", CHAT, _line("今天好累，加班到十点", "2"), claim="default|tg|1001|2",
                      fingerprint=("fp|default|1001|abc", timedelta(0)))
    assert _deliveries(store) == 2
    store.release_delivery("default|tg|1001|2")
    store.append_chat("default", CHAT, _line("今天好累，加班到十点", "2"), claim="default|tg|1001|2",
                      fingerprint=("fp|default|1001|abc", WINDOW))
    assert _deliveries(store) == 2


def test_capture_done_keeps_the_line_vector_in_the_same_write(store):
    """capture_done(vectors=…) marks the capture done and keeps the vector; a line without one is only
    marked done."""
    a = store.append_chat("default", CHAT, _line("我养了一只叫煤球的猫", "1"), capture=NS)
    b = store.append_chat("default", CHAT, _line("My cat Mochi is 3 🐱", "2"), capture=NS)
    vec = np.arange(4, dtype=np.float32).tobytes()
    store.capture_done(a, b, vectors={a: ("e5/4/h1", vec)})
    m = store.mark
    rows = {r[0]: r[1:] for r in store._read_rows(
        f"SELECT id, vector, vector_key, capture_ns, capture_queued FROM chat_log WHERE id IN ({m}, {m})", (a, b))}
    assert bytes(rows[a][0]) == vec and rows[a][1:3] == ("e5/4/h1", "")
    assert rows[b][0] is None and rows[b][2:] == ("", None)
    assert store.captures_due() == 0


def test_the_chat_log_is_trimmed_back_to_keep_on_one_append_in_a_few(store):
    """With ``keep`` 32 the log is trimmed on one append in 32 // TRIM_SLACK (line ids are consecutive here):
    between trims it holds at most that many lines more, each trim brings it back to the newest 32 (zh, en,
    emoji), and a line whose capture is still due is never trimmed."""
    from memory.store.chatlog import TRIM_SLACK

    keep = 32
    step = keep // TRIM_SLACK
    due = store.append_chat("default", CHAT, _line("我叫小明，I'm Ming 🐱", "0"), keep=keep, capture=NS)
    sizes = []
    for i in range(1, 81):
        store.append_chat("default", CHAT, _line(f"第{i}句 line {i} ✨", str(i)), keep=keep)
        sizes.append(len(store.chat_tail("default", CHAT, 500)))
    assert max(sizes) <= keep + step and min(sizes[40:]) <= keep + 1  # + 1: the line still due
    tail = store.chat_tail("default", CHAT, 500)
    assert tail[0].id == due and tail[-1].text == "第80句 line 80 ✨"
    assert [int(line.message_id) for line in tail[1:]] == list(range(81 - (len(tail) - 1), 81))


def test_a_redacted_line_is_not_logged_again_but_its_claims_hold(store):
    """A line withdrawn (or forgotten) is not appended again by a redelivery — the insert checks the redaction
    itself — while the delivery is still claimed; another sender's line of the same message id is logged."""
    store.withdraw_line(NS, CHAT, "7")
    assert store.append_chat("default", CHAT, _line("别记这个 🙈", "7"), claim="default|tg|1001|7",
                             fingerprint=("fp|default|1001|x", WINDOW), capture=NS) is None
    assert store.chat_tail("default", CHAT) == [] and _deliveries(store) == 1
    with pytest.raises(DuplicateDelivery):
        store.append_chat("default", CHAT, _line("别记这个 🙈", "7"), claim="default|tg|1001|7")
    other = ChatLine("user", "2002", "I'm someone else", utcnow(), "7", "Ann")
    assert store.append_chat("default", CHAT, other) is not None
    assert [line.text for line in store.chat_tail("default", CHAT)] == ["I'm someone else"]
    assert store.captures_due() == 0
