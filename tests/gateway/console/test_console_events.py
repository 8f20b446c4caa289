"""The console's Events page, on SQLite and PostgreSQL: the session's tenant's
waiting count and dead letters (never another tenant's), a Replay button that
needs the CSRF token, sends the dead letter again and is audited with the
session's actor; in English and Chinese."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_helpers import REMOTE, console_app, login, session_csrf  # noqa: E402

from memory.store.events import ADDED, _emit  # noqa: E402
from memory.types import Namespace  # noqa: E402

NS, OTHER = Namespace("default", "tg:42"), Namespace("other", "tg:9")


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


def _dead(store, ns: Namespace, memory_id: str, error: str):
    with store._write_conn() as conn:
        _emit(conn, frozenset({ns.tenant}), ns, ADDED, [(memory_id, 1)])
    (e,) = [x for x in store.due_events(limit=50) if x.memory_id == memory_id]
    store.events_dead(e.id, error)
    return e


def test_dead_letters_are_listed_per_tenant_and_replayed_with_csrf_and_audit(app, core):
    """default sees its dead letter (not other's); a replay without the token is refused (403) and
    changes nothing; with it the letter is due again with its webhook-id, audited as the console."""
    mine = _dead(core.store, NS, "a1b2c3d4e5f6", "HTTP 500")
    theirs = _dead(core.store, OTHER, "0123456789ab", "ConnectError")
    key = core.store.create_api_key("default", "admin", None, "ops")[1]
    c = login(app, key)
    page = c.get("/console/events?lang=en").text
    assert mine.webhook_id in page and "HTTP 500" in page and theirs.webhook_id not in page
    assert 'id="dead">1<' in page and "Replay all" in page
    refused = c.post("/console/events/replay", data={"id": mine.webhook_id}, follow_redirects=False)
    assert refused.status_code == 403 and len(core.store.dead_events("default")) == 1
    csrf = session_csrf(c)
    other = c.post("/console/events/replay", data={"id": theirs.webhook_id, "csrf": csrf}, follow_redirects=False)
    assert other.status_code == 404 and len(core.store.dead_events("other")) == 1
    done = c.post("/console/events/replay", data={"id": mine.webhook_id, "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/console/events?done=replayed&n=1"
    assert core.store.dead_events("default") == []
    assert [e.webhook_id for e in core.store.due_events(limit=50)] == [mine.webhook_id]
    (rec,) = [r for r in core.store.audit_records(NS) if r["action"] == "event_replay"]
    assert rec["actor"].startswith("console:") and rec["detail"]["webhook_id"] == mine.webhook_id
    after = c.get(done.headers["location"]).text
    assert "Replayed 1 dead letter" in after and "No dead letter" in after


def test_the_events_page_speaks_chinese(app, core):
    """In Chinese: the title, the counts and the Replay button."""
    _dead(core.store, NS, "a1b2c3d4e5f6", "HTTP 500")
    c = login(app, core.store.create_api_key("default", "admin", None, "ops")[1])
    page = c.get("/console/events?lang=zh_CN").text
    assert "变更事件" in page and "死信" in page and "重放" in page and "该租户未配置 webhook" in page
