"""Off the record in the console, on SQLite and PostgreSQL: the person page lists
the chats a person has paused and pauses or resumes one (CSRF, audited with the
session's actor); a pause made there holds for the next turn through the bridge."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test_commands: the bridge payloads
from console_helpers import REMOTE, console_app, login, session_csrf  # noqa: E402

from memory.types import Namespace  # noqa: E402
from test_commands import Clock, tg, turn  # noqa: E402

NS = Namespace("default", "tg:408258968")
CHAT = "tg:private:408258968"


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


async def test_pause_and_resume_a_persons_chat_from_the_console(app, core):
    """Pause (zh duration) → the page lists it and a Telegram turn in that chat learns nothing; a duration that
    is none is refused and changes nothing; Resume → the chat learns again; both audited as the console."""
    clock = Clock()
    pipe = app.state.pipeline
    await turn(pipe, tg(clock, "I love green tea."))
    c = login(app, core.store.create_api_key("default", "admin", None, "ops")[1])
    csrf = session_csrf(c)
    page = f"/console/people/{NS.subject}"
    assert "Learning is not paused in any chat." in c.get(page + "?lang=en").text
    bad = c.post(page + "/pause", data={"csrf": csrf, "chat": CHAT, "duration": "好久"}, follow_redirects=False)
    assert bad.status_code == 400 and core.store.pauses(NS, clock_now()) == []
    done = c.post(page + "/pause", data={"csrf": csrf, "chat": CHAT, "duration": "30分钟"}, follow_redirects=False)
    assert done.status_code == 303
    shown = c.get(done.headers["location"] + "&lang=en").text
    assert "Paused." in shown and CHAT in shown and "until " in shown
    said = await turn(pipe, tg(clock, "My sister lives in Lisbon."))
    assert said.paused and said.captured == []
    resumed = c.post(page + "/resume", data={"csrf": csrf, "chat": CHAT}, follow_redirects=False)
    assert resumed.status_code == 303 and core.store.pauses(NS, clock_now()) == []
    again = await turn(pipe, tg(clock, "My sister lives in Lisbon."))
    assert not again.paused and again.captured
    actions = [(r["action"], r["actor"].split(":")[0]) for r in core.store.audit_records(NS)
               if r["action"] in ("pause", "resume")]
    assert sorted(actions) == [("pause", "console"), ("resume", "console")]


def clock_now():
    from memory.store import utcnow

    return utcnow()
