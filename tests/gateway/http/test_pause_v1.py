"""Off the record over /v1: ``PUT/GET/DELETE /v1/subjects/{subject}/pause`` over the
real app (SQLite + LanceDB in tmp); a pause set there holds for ``/v1/turns`` and
``POST …/memories`` in that chat only; a duration that is none changes nothing."""

from __future__ import annotations

from test_api_v1 import LOOPBACK, app, client_for  # noqa: F401 - app: the fixture

PRIVATE = "tg:private:42"


def _turn(c, mid: str, text: str, chat_kind: str = "private", chat_id: str = "42") -> dict:
    r = c.post("/v1/turns", json={"message": {"platform": "tg", "message_id": mid, "sender_id": "42",
                                              "chat_kind": chat_kind, "chat_id": chat_id, "text": text,
                                              "mentions_bot": True}})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_pause_set_over_v1_holds_for_turns_and_captures_in_that_chat_only(app):  # noqa: F811
    """PUT pause (zh duration) → a turn in that private chat is paused and learns nothing, a capture call
    into that chat stores nothing, a group turn still learns; DELETE → the chat learns again."""
    c = client_for(app, LOOPBACK)
    r = c.put("/v1/subjects/tg:42/pause", json={"chat": PRIVATE, "duration": "一个半小时"})
    assert r.status_code == 200 and r.json()["paused"] and r.json()["until"]
    assert c.get("/v1/subjects/tg:42/pause", params={"chat": PRIVATE}).json()["paused"]
    turn = _turn(c, "m1", "I love hiking in the Alps every summer")
    assert turn["paused"] and turn["captured"] == []
    captured = c.post("/v1/subjects/tg:42/memories", json={"chat": PRIVATE, "messages": [{"text": "我养了一只叫煤球的黑猫"}]})
    assert captured.status_code == 200 and captured.json()["results"] == []
    group = _turn(c, "m2", "我下个月去成都出差。", chat_kind="group", chat_id="777")
    assert not group["paused"] and group["captured"]
    assert c.delete("/v1/subjects/tg:42/pause", params={"chat": PRIVATE}).json()["paused"] is False
    again = _turn(c, "m3", "I love hiking in the Alps every summer")
    assert not again["paused"] and again["captured"]


def test_an_unknown_duration_is_refused_and_changes_nothing(app):  # noqa: F811
    """A duration that names no time (or over 30 days): 400, no pause; a pause needs a chat."""
    c = client_for(app, LOOPBACK)
    for duration in ("forever", "好久", "90d"):
        r = c.put("/v1/subjects/tg:42/pause", json={"chat": PRIVATE, "duration": duration})
        assert r.status_code == 400, r.text
    assert c.get("/v1/subjects/tg:42/pause", params={"chat": PRIVATE}).json()["paused"] is False
    assert c.get("/v1/subjects/tg:42/pause").status_code == 400
