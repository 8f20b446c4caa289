"""Recall's marks still waiting in their namespace's state row (memory.store.pending) show in
what a person or an operator reads: the API's ``recalled_at`` (one memory, the list, the export)
and ``/memory list``'s "recalled …", in zh and en; nothing of them shows for another person."""

from __future__ import annotations

from datetime import datetime

import asyncio

import pytest
from fastapi.testclient import TestClient

from bridges.contract import InboundMessage
from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app
from memory.store import utcnow
from memory.types import ChatKind, Namespace

LOOPBACK = ("127.0.0.1", 50000)
FACTS = ["我养了一只叫煤球的黑猫", "I love hiking 🥾 in the Alps every summer"]


@pytest.fixture
def app():
    """The real app (SQLite + LanceDB in tmp), started by a loopback TestClient."""
    application = create_app(load_settings(tenants={"default": TenantSettings(admins=["tg:1"], language="en")}))
    with TestClient(application, client=LOOPBACK):
        yield application


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_recalled_at_shows_the_marks_waiting_in_the_row_and_after_the_fold(app):
    """Marked and flushed (waiting in tg:42's state row): get, list and export give the time in
    ``recalled_at`` and ``/memory list`` no longer says "recalled never"; tg:43's memory marked in
    tg:42's flush shows nothing; after the fold every view is the same."""
    c = TestClient(app, client=LOOPBACK)
    core = app.state.pipeline.core
    for fact in FACTS:
        assert c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": fact}]}).status_code == 200
    assert c.post("/v1/subjects/tg:43/memories", json={"infer": False, "messages": [{"text": FACTS[0]}]}).status_code == 200
    ids = [m["id"] for m in c.get("/v1/subjects/tg:42/memories").json()["items"]]
    theirs = c.get("/v1/subjects/tg:43/memories").json()["items"][0]["id"]
    ns = Namespace("default", "tg:42")
    at = utcnow()  # after each was stored: /memory list names a recall after that
    core.marks.note(ns, [*ids, theirs], at)
    assert core.flush_marks() == 2 and core.store.pending_marks(ns).times  # waiting in the state row

    def seen() -> dict:
        one = {i: [_at(t) for t in c.get(f"/v1/subjects/tg:42/memories/{i}").json()["recalled_at"]] for i in ids}
        listed = {m["id"]: [_at(t) for t in m["recalled_at"]] for m in c.get("/v1/subjects/tg:42/memories").json()["items"]}
        exported = {m["id"]: [_at(t) for t in m["recalled_at"]]
                    for m in c.get("/v1/subjects/tg:42/export").json()["memories"]}
        return {"one": one, "list": listed, "export": exported}

    before = seen()
    assert all(at in times for view in before.values() for times in view.values()), before
    msg = InboundMessage(platform="tg", message_id="c1", sender_id="42", sender_name="p", chat_kind=ChatKind.PRIVATE,
                         chat_id="42", text="/memory list", timestamp=utcnow(), is_command=True)
    reply = asyncio.run(app.state.pipeline.handle("default", msg)).reply
    assert reply.count("· recalled ") == 2 and "recalled never" not in reply, reply
    assert at not in [_at(t) for t in c.get(f"/v1/subjects/tg:43/memories/{theirs}").json()["recalled_at"]]
    core.fold_marks()
    assert not core.store.pending_marks(ns).times
    assert seen() == before


def test_marks_still_held_in_memory_show_in_get_list_and_export(app):
    """A turn's marks wait in the process up to a minute (memory.marks) before any row holds them; the
    API writes the subject's own first, so get, list and export right after give the recall in
    ``recalled_at`` (a person found the listing without it after a recall); tg:43's held marks stay
    held."""
    c = TestClient(app, client=LOOPBACK)
    core = app.state.pipeline.core
    core.marks.every_s = 3600.0
    for subject, fact in (("tg:42", FACTS[1]), ("tg:43", FACTS[0])):
        assert c.post(f"/v1/subjects/{subject}/memories", json={"infer": False, "messages": [{"text": fact}]}
                      ).status_code == 200
    mine = c.get("/v1/subjects/tg:42/memories").json()["items"][0]["id"]
    theirs = c.get("/v1/subjects/tg:43/memories").json()["items"][0]["id"]
    at = utcnow()
    core.note_recalled(Namespace("default", "tg:42"), [mine], at)
    core.note_recalled(Namespace("default", "tg:43"), [theirs], at)
    assert core.marks.pending == 2
    for view in ("get", "list", "export"):
        if view == "get":
            times = c.get(f"/v1/subjects/tg:42/memories/{mine}").json()["recalled_at"]
        elif view == "list":
            times = c.get("/v1/subjects/tg:42/memories").json()["items"][0]["recalled_at"]
        else:
            times = c.get("/v1/subjects/tg:42/export").json()["memories"][0]["recalled_at"]
        assert at in [_at(t) for t in times], view
    assert core.marks.pending == 1  # tg:43's mark still waits
