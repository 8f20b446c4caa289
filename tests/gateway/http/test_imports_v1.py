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


def test_a_time_out_of_range_is_a_malformed_line_not_a_500(app, core):
    """jsonl ``"at": 1e30`` / ``1e308`` / ``"0001-01-01T00:00:00+14:00"``, a SillyTavern ``send_date`` of
    1e400, a mem0 ``created_at`` of 1e30 and a LivingMemory ``create_time`` of -1e20: 200, each bad line
    ``malformed`` with its number, the zh and en lines around it stored."""
    c = _client(app)
    lines = ['{"text": "我养了一只叫煤球的黑猫", "kind": "memory"}', '{"text": "我在上海工作", "at": 1e30}',
             '{"text": "x", "at": 1e308}', '{"text": "x", "at": "0001-01-01T00:00:00+14:00"}',
             '{"text": "I love green tea 🍵", "kind": "memory", "at": 1790000000}']
    r = c.post("/v1/imports", json={"source": "jsonl", "content": "\n".join(lines), "person": "tg:61"})
    assert r.status_code == 200, r.text
    assert r.json()["skipped"] == {"malformed": 3} and r.json()["memories"] == 2
    assert [(p["line"], p["reason"]) for p in r.json()["problems"]] == [(2, "malformed"), (3, "malformed"),
                                                                         (4, "malformed")]
    assert {m.text for m in core.list(Namespace("default", "tg:61"), limit=9)} == {"我养了一只叫煤球的黑猫",
                                                                                        "I love green tea 🍵"}
    st = '{"mes": "我住在成都", "is_user": true, "name": "阿杰", "send_date": 1e400}'
    mem0 = json.dumps({"results": [{"memory": "Allergic to peanuts", "created_at": 1e30}]})
    living = json.dumps({"memories": [{"content": "喜欢爬山", "metadata": {"create_time": -1e20}}]})
    for source, content in (("sillytavern", st), ("mem0", mem0), ("livingmemory", living)):
        r = c.post("/v1/imports", json={"source": source, "content": content, "person": "tg:62"})
        assert r.status_code == 200 and r.json()["problems"] == [
            {"line": 1, "reason": "malformed", "detail": r.json()["problems"][0]["detail"]}], (source, r.text)
    assert core.list(Namespace("default", "tg:62"), limit=5) == []


def test_a_maibot_upload_whose_person_info_is_a_view_is_a_quick_400(app, core, tmp_path):
    """A 4 KB MaiBot upload whose ``person_info`` is a view over an unbounded recursive CTE answers 400
    "person_info is not a table" (its query is never run), nothing written; a member key included."""
    db = tmp_path / "view.db"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE VIEW person_info AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
                           "FROM c) SELECT n AS rowid, 'qq' AS platform, n AS user_id, 'x' AS nickname, "
                           "NULL AS points FROM c;")
    conn.close()
    body = {"source": "maibot", "content_base64": base64.b64encode(db.read_bytes()).decode(), "person": "tg:63"}
    for c in (_client(app), _client(app, "member", "tg:63")):
        r = c.post("/v1/imports", json=body)
        assert r.status_code == 400 and "person_info is not a table" in r.text, r.text
    assert core.list(Namespace("default", "tg:63"), limit=5) == []


def test_one_person_for_several_peoples_file_is_400_naming_the_ids(app, core, tmp_path):
    """``person`` with a mem0 export of alice's and bob's memories, a MaiBot database of qq:20001 and
    qq:20002, or jsonl lines of tg:42 and tg:43: 400 naming the ids and ``mapping``, nothing written
    (bob's "Allergic to peanuts" never becomes tg:45's)."""
    c = _client(app)
    mem0 = json.dumps({"results": [{"memory": "喜欢爬山 ⛰️", "user_id": "alice"},
                                   {"memory": "Allergic to peanuts", "user_id": "bob"}]}, ensure_ascii=False)
    db = tmp_path / "MaiBot.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((DATA / "maibot_person_info.sql").read_text(encoding="utf-8"))
    conn.close()
    jsonl = '{"text": "我对花生过敏", "subject": "tg:42"}\n{"text": "I love the sea", "subject": "tg:43"}'
    for body, ids in (({"source": "mem0", "content": mem0, "person": "tg:45"}, ("alice", "bob")),
                      ({"source": "maibot", "content_base64": base64.b64encode(db.read_bytes()).decode(),
                        "person": "tg:45"}, ("qq:20001", "qq:20002")),
                      ({"source": "jsonl", "content": jsonl, "person": "tg:45"}, ("tg:42", "tg:43"))):
        r = c.post("/v1/imports", json=body)
        assert r.status_code == 400 and all(i in r.text for i in ids) and "mapping" in r.text, r.text
    assert core.list(Namespace("default", "tg:45"), limit=5) == []
    mapped = c.post("/v1/imports", json={"source": "mem0", "content": mem0, "mapping": {"alice": "tg:46"}}).json()
    assert mapped["memories"] == 1 and mapped["skipped"] == {"unmapped": 1}


def test_validation_says_what_is_missing_and_a_member_key_defaults_to_its_own_person(app, core):
    """No file: "give the file as content or content_base64"; no person nor mapping with an admin key:
    "name the person (person) or map the source's ids (mapping)" — "not both" only when both are given;
    a member key that names nobody imports into its own person."""
    admin = _client(app)
    line = json.dumps({"text": "我最喜歡喝烏龍茶 🍵", "kind": "memory"}, ensure_ascii=False)
    nofile = admin.post("/v1/imports", json={"source": "jsonl", "person": "tg:64"})
    assert nofile.status_code == 400 and "content or content_base64" in nofile.text
    assert "not both" not in nofile.text
    both = admin.post("/v1/imports", json={"source": "jsonl", "content": line, "content_base64": "", "person": "tg:64"})
    assert both.status_code == 400 and "not both" in both.text
    nobody = admin.post("/v1/imports", json={"source": "jsonl", "content": line})
    assert nobody.status_code == 400 and "name the person (person) or map" in nobody.text
    assert "not both" not in nobody.text
    member = _client(app, "member", "tg:65")
    own = member.post("/v1/imports", json={"source": "jsonl", "content": line})
    assert own.status_code == 200 and own.json()["memories"] == 1, own.text
    assert {m.text for m in core.list(Namespace("default", "tg:65"), limit=5)} == {"我最喜歡喝烏龍茶 🍵"}
    assert core.list(Namespace("default", "tg:64"), limit=5) == []
