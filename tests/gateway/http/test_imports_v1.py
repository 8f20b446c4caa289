"""POST /v1/imports: the importers of ``huiyi import --from …`` over a file in the body,
on SQLite and PostgreSQL — a summary answer, a malformed line reported by its number,
idempotent on a second call, tombstones honoured, a MaiBot database sent as base64 read
in memory, a character card's lorebook; a member key imports only into its own person."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline
from memory.types import Namespace

DATA = Path(__file__).resolve().parents[2] / "data" / "import"
REMOTE = ("203.0.113.7", 40000)


@pytest.fixture
def app(core):
    s = load_settings(tenants={"default": TenantSettings(language="en", tz="Asia/Shanghai")})
    application = create_app(s, pipeline=Pipeline(s, core))
    with TestClient(application, client=REMOTE):
        yield application


def _client(app, scope="admin", subject=None) -> TestClient:
    key = app.state.pipeline.core.store.create_api_key("default", scope, subject)[1]
    return TestClient(app, client=REMOTE, headers={"X-API-Key": key})


def test_a_jsonl_file_is_imported_with_a_summary_once_and_nothing_forgotten_comes_back(app, core):
    """The plain JSONL fixture: memories and messages stored for the person, its malformed lines
    reported by number; the same call again imports nothing (``already``); a memory forgotten
    after its import is refused when a file brings it back from before the forget."""
    c = _client(app)
    body = {"source": "jsonl", "content": (DATA / "plain.jsonl").read_text("utf-8"), "person": "tg:1001"}
    first = c.post("/v1/imports", json=body)
    assert first.status_code == 200, first.text
    out = first.json()
    assert out["source"] == "jsonl" and out["memories"] >= 2 and out["imported"] >= 2
    assert out["skipped"]["malformed"] == 3 and [p["reason"] for p in out["problems"]] == ["malformed"] * 3
    assert all(isinstance(p["line"], int) and p["line"] > 0 for p in out["problems"])
    ns = Namespace("default", "tg:1001")
    stored = {m.text: m for m in core.list(ns, limit=100)}
    assert len(stored) == out["memories"]
    again = c.post("/v1/imports", json=body).json()
    assert again["memories"] == again["imported"] == 0 and again["skipped"]["already"] >= out["imported"]
    assert again["skipped"]["malformed"] == 3
    assert len(core.list(ns, limit=100)) == len(stored)
    gone = next(iter(stored.values()))
    assert c.delete(f"/v1/subjects/tg:1001/memories/{gone.id}").status_code == 200
    back = json.dumps({"text": gone.text, "kind": "memory", "at": "2026-01-01T10:00:00+08:00"}, ensure_ascii=False)
    refused = c.post("/v1/imports", json={"source": "jsonl", "content": back, "person": "tg:1001"}).json()
    assert refused["memories"] == 0 and refused["skipped"] == {"forgotten": 1}
    assert gone.text not in {m.text for m in core.list(ns, limit=100)}


def test_a_maibot_database_and_a_card_lorebook_come_over_through_the_route(app, core, tmp_path):
    """A MaiBot database sent as base64 (read in memory, nothing written to disk) with a mapping, and a
    SillyTavern character card's lorebook, each summarised."""
    db = tmp_path / "MaiBot.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((DATA / "maibot_person_info.sql").read_text(encoding="utf-8"))
    conn.close()
    c = _client(app)
    r = c.post("/v1/imports", json={"source": "maibot", "content_base64": base64.b64encode(db.read_bytes()).decode(),
                                    "mapping": {"qq:20001": "qq:20001", "qq:20002": "qq:20002"}})
    assert r.status_code == 200, r.text
    assert r.json()["memories"] == 4 and sorted(p["line"] for p in r.json()["problems"]) == [2, 3]
    assert "小林喜欢吃辣" in {m.text for m in core.list(Namespace("default", "qq:20001"), limit=50)}
    card = (DATA / "sillytavern_card.json").read_text("utf-8")
    lore = c.post("/v1/imports", json={"source": "sillytavern", "content": card, "person": "tg:7"}).json()
    assert lore["memories"] == 3 and lore["skipped"] == {"disabled": 1, "empty": 1, "malformed": 1}
    assert "用户养了一只叫煤球的黑猫" in {m.text for m in core.list(Namespace("default", "tg:7"), limit=50)}


def test_a_member_key_imports_only_into_its_own_person_and_bad_files_write_nothing(app, core):
    """A member key: its own person yes, another person or a mapping 403; a file that is not its source,
    bad base64, or both person and mapping: 400, nothing stored."""
    member = _client(app, "member", "tg:55")
    line = json.dumps({"text": "I love green tea 🍵", "kind": "memory"})
    own = member.post("/v1/imports", json={"source": "jsonl", "content": line, "person": "tg:55"})
    assert own.status_code == 200 and own.json()["memories"] == 1
    assert member.post("/v1/imports", json={"source": "jsonl", "content": line, "person": "tg:56"}).status_code == 403
    assert member.post("/v1/imports", json={"source": "jsonl", "content": line,
                                            "mapping": {"x": "tg:55"}}).status_code == 403
    admin = _client(app)
    for body in ({"source": "mem0", "content": "{not json", "person": "tg:57"},
                 {"source": "maibot", "content_base64": "!!!", "person": "tg:57"},
                 {"source": "maibot", "content_base64": base64.b64encode(b"hello").decode(), "person": "tg:57"},
                 {"source": "jsonl", "content": line, "person": "tg:57", "mapping": {"a": "tg:57"}},
                 {"source": "csv", "content": line, "person": "tg:57"}):
        r = admin.post("/v1/imports", json=body)
        assert r.status_code == 400, (body, r.text)
    assert core.list(Namespace("default", "tg:57"), limit=5) == []
