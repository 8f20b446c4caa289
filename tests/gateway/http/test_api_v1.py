"""The keyed /v1 API in-process: every /v1 route refuses unkeyed remote, wrong,
revoked and wrong-tenant callers; a member key reaches only its own person, an
admin key everyone; keyless calls only from loopback for a tenant that never had
a key; and the memory verbs (capture, search, list, get, edit, forget, history,
export/import, recollection, replies) work over the real core, in zh and en."""

from __future__ import annotations

import json
import logging
import re

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app_routes import flat_routes
from gateway.http.app import create_app
from gateway.http.auth import is_loopback
from gateway.config import TenantSettings, load_settings
from memory.types import ChatRef, Namespace

LOOPBACK = ("127.0.0.1", 50000)
REMOTE = ("203.0.113.7", 40000)
ZH_FACT = "我养了一只叫煤球的黑猫"
EN_FACT = "I love hiking 🥾 in the Alps every summer"


def _settings(**overrides):
    return load_settings(tenants={"default": TenantSettings(admins=["tg:1"], language="en"),
                                  "other": TenantSettings()}, **overrides)


@pytest.fixture
def app():
    """The real app (SQLite + LanceDB in tmp), started by a loopback TestClient."""
    application = create_app(_settings())
    with TestClient(application, client=LOOPBACK):
        yield application


def client_for(app, host=LOOPBACK, key: str | None = None, bearer: bool = False) -> TestClient:
    """A client of the running ``app`` from ``host``, sending ``key`` as X-API-Key (or as a bearer token)."""
    headers = {}
    if key is not None:
        headers = {"Authorization": f"Bearer {key}"} if bearer else {"X-API-Key": key}
    return TestClient(app, client=host, headers=headers)


def store(app):
    return app.state.pipeline.core.store


def new_key(app, tenant="default", scope="admin", subject=None) -> str:
    return store(app).create_api_key(tenant, scope, subject)[1]


def v1_routes(application) -> list[tuple[str, str]]:
    """(method, path) of every /v1 route the app serves."""
    return sorted((m, r.path) for r in flat_routes(application.routes) if getattr(r, "path", "").startswith("/v1")
                  for m in r.methods if m != "HEAD")


ROUTES = v1_routes(create_app(_settings()))


def fill(path: str, subject: str = "tg:42", memory_id: str = "abc123def456") -> str:
    return path.replace("{subject}", subject).replace("{memory_id}", memory_id)


#: A valid body per body-taking route: a refusal must come from the caller, not the body.
BODIES = {
    ("POST", "/v1/turns"): {"message": {"platform": "tg", "message_id": "m1", "sender_id": "42",
                                        "chat_kind": "private", "chat_id": "42", "text": ZH_FACT}},
    ("POST", "/v1/subjects/{subject}/memories"): {"messages": [{"text": ZH_FACT}]},
    ("POST", "/v1/subjects/{subject}/search"): {"query": "煤球"},
    ("PATCH", "/v1/subjects/{subject}/memories/{memory_id}"): {"text": "煤球是一只黑猫"},
    ("POST", "/v1/subjects/{subject}/import"): {"memories": [{"id": "x1", "text": EN_FACT}]},
    ("POST", "/v1/subjects/{subject}/recollection"): {"query": "我的猫"},
    ("POST", "/v1/subjects/{subject}/replies"): {"text": "煤球今天怎么样？"},
    ("POST", "/v1/subjects/{subject}/memories/batch-update"): {"items": [{"id": "abc123def456", "text": "煤球"}]},
    ("POST", "/v1/subjects/{subject}/memories/batch-forget"): {"ids": ["abc123def456"]},
    ("POST", "/v1/withdrawals"): {"withdrawal": {"platform": "tg", "message_id": "m1", "sender_id": "42",
                                                 "chat_kind": "private", "chat_id": "42"}},
    ("PUT", "/v1/subjects/{subject}/pause"): {"chat": "tg:group:777", "duration": "2h"},
    ("POST", "/v1/subjects/{subject}/memories/forget-last"): {"chat": "tg:group:777", "duration": "10m"},
    ("POST", "/v1/imports"): {"source": "jsonl", "content": '{"text": "I love green tea"}\n', "person": "tg:42"},
    ("POST", "/v1/followups/{followup_id}/ack"): {"sent": True},
}


#: Query parameters a route needs besides the caller (the confirmation of a scoped forget).
PARAMS = {("DELETE", "/v1/subjects/{subject}/memories"): lambda subject: {"confirm": subject},
          ("GET", "/v1/subjects/{subject}/pause"): lambda subject: {"chat": "tg:group:777"},
          ("DELETE", "/v1/subjects/{subject}/pause"): lambda subject: {"chat": "tg:group:777"}}


def call(c: TestClient, method: str, path: str, *, subject="tg:42", memory_id="abc123def456", params=None,
         body=None):
    body = BODIES.get((method, path)) if body is None else body
    need = PARAMS.get((method, path))
    params = {**(need(subject) if need else {}), **(params or {})}
    return c.request(method, fill(path, subject, memory_id), params=params or None, json=body)


def test_every_v1_route_is_listed_with_a_body_when_it_takes_one():
    """The refusal tests below cover every /v1 route: a new route with a body must get an example here."""
    assert len(ROUTES) >= 13
    for method, path in ROUTES:
        assert method in ("GET", "DELETE") or (method, path) in BODIES, (method, path)


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_v1_route_refuses_unkeyed_wrong_revoked_and_wrong_tenant_callers(app, method, path):
    """No key from a remote host, a made-up key, a revoked key: 401; a key of another tenant
    naming this one: 403; keyless loopback once the tenant has a key: 401. Nothing is written."""
    ns = Namespace("default", "tg:42")
    before = store(app).count(ns)
    assert call(client_for(app, REMOTE), method, path).status_code == 401
    fake = "hy_0123456789ab_" + "A" * 43
    for bearer in (False, True):
        assert call(client_for(app, LOOPBACK, fake, bearer), method, path).status_code == 401
    assert call(client_for(app, LOOPBACK, "not a key"), method, path).status_code == 401
    revoked = new_key(app)
    store(app).revoke_api_key("default", revoked.split("_")[1])
    assert call(client_for(app, REMOTE, revoked), method, path).status_code == 401
    other = client_for(app, REMOTE, new_key(app, tenant="other"))
    if path in ("/v1/turns", "/v1/withdrawals"):
        r = other.post(path, json={**BODIES[(method, path)], "tenant": "default"})
    else:
        r = call(other, method, path, params={"tenant": "default"})
    assert r.status_code == 403, r.text
    # "default" has had keys now: loopback without one is refused too
    assert call(client_for(app, LOOPBACK), method, path).status_code == 401
    assert store(app).count(ns) == before == 0


SUBJECT_ROUTES = [(m, p) for m, p in ROUTES if "{subject}" in p]


@pytest.mark.parametrize("method,path", SUBJECT_ROUTES)
def test_a_member_key_cannot_touch_another_subject_and_an_admin_key_can(app, method, path):
    """Member key of tg:42 on tg:43: 403 and audited; an admin key gets past the check (200, or 404 for a missing memory)."""
    mine = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    r = call(mine, method, path, subject="tg:43")
    assert r.status_code == 403 and r.json()["error"] == "Forbidden"
    assert [a["action"] for a in store(app).audit_records(Namespace("default", "tg:43"))] == ["api_denied"]
    admin = client_for(app, REMOTE, new_key(app))
    r = call(admin, method, path, subject="tg:43")
    assert r.status_code in (200, 404), r.text
    if "{memory_id}" in path:
        assert r.json()["error"] == "NotFoundError"


def test_member_key_works_on_its_own_person_end_to_end(app):
    """A member key of tg:42 captures, searches, edits, reads history and forgets its own memories (zh)."""
    c = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    r = c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": ZH_FACT}]})
    assert r.status_code == 200, r.text
    stored = [x["memory"] for x in r.json()["results"] if x["action"] == "stored"]
    assert len(stored) == 1 and "煤球" in stored[0]["text"]
    mid = stored[0]["id"]
    hits = c.post("/v1/subjects/tg:42/search", json={"query": "煤球", "explain": True}).json()["hits"]
    assert hits[0]["memory"]["id"] == mid and hits[0]["score"] > 0 and hits[0]["parts"]["rrf"] > 0
    assert c.patch(f"/v1/subjects/tg:42/memories/{mid}", json={"text": "煤球是一只九岁的黑猫"}).json()["version"] == 2
    versions = c.get(f"/v1/subjects/tg:42/memories/{mid}/history").json()["versions"]
    assert [v["version"] for v in versions] == [1, 2] and "九岁" in versions[-1]["text"]
    gone = c.delete(f"/v1/subjects/tg:42/memories/{mid}").json()
    assert (gone["id"], gone["forgotten"], gone["receipt"]["memories"]) == (mid, True, 1)
    assert c.get(f"/v1/subjects/tg:42/memories/{mid}").status_code == 404


def test_turns_with_a_member_key_run_only_the_senders_own_messages_without_admin_powers(app):
    """Member key: another sender's message 403; the key's own person, even a configured tenant admin,
    gets no admin command; an admin key relays the same admin's /memory stats."""
    msg = {"platform": "tg", "sender_id": "1", "chat_kind": "private", "chat_id": "1"}
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:1"))
    r = member.post("/v1/turns", json={"message": {**msg, "sender_id": "2", "chat_id": "2", "message_id": "a",
                                                   "text": "hello"}})
    assert r.status_code == 403
    r = member.post("/v1/turns", json={"message": {**msg, "message_id": "b", "text": "/memory stats",
                                                   "is_command": True}})
    assert r.status_code == 200 and r.json()["command"] and "Only admins" in r.json()["reply"]
    admin = client_for(app, REMOTE, new_key(app))
    r = admin.post("/v1/turns", json={"message": {**msg, "message_id": "c", "text": "/memory stats",
                                                  "is_command": True}})
    assert r.status_code == 200 and "Only admins" not in r.json()["reply"] and "memories" in r.json()["reply"]


@pytest.mark.parametrize("text", ["", "   \n\t ", "\u3000", "\x00", "\u200b", "\ufeff\u2060\u200d"])
def test_a_turn_without_a_line_is_400_and_leaves_no_history(app, text):
    """The fault a new user found: an empty or whitespace text answered 200 and its empty line stayed in the
    chat's history of later prompts. Now 400 with the reason, as /webhook answers, and nothing is logged."""
    c = client_for(app, REMOTE, new_key(app))
    msg = {"platform": "tg", "sender_id": "42", "chat_kind": "private", "chat_id": "42"}
    r = c.post("/v1/turns", json={"message": {**msg, "message_id": "e1", "text": text}})
    assert r.status_code == 400 and r.json()["error"] == "RequestValidationError"
    later = c.post("/v1/turns", json={"message": {**msg, "message_id": "e2", "text": "我养了一只猫"}})
    assert later.status_code == 200
    assert [m["content"] for m in later.json()["prompt"] if m["role"] == "user"] == ["我养了一只猫"]


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("testclient", False), ("localhost", False), ("", False), (None, False), ("10.0.0.1", False),
    ("203.0.113.7", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("0.0.0.0", False),
])
def test_loopback_is_what_the_socket_says(host, expected):
    """Only loopback IP addresses count; names (even localhost or Starlette's "testclient") do not."""
    assert is_loopback(host) is expected


def test_keyless_calls_reach_a_keyless_tenant_from_loopback_only(app, caplog):
    """No key: loopback 200 on both tenants (tenant by ?tenant=), remote 401; a key for "default" locks
    only "default"; revoking it keeps it locked."""
    local, remote = client_for(app, LOOPBACK), client_for(app, REMOTE)
    assert local.get("/v1/subjects/tg:42/memories").status_code == 200
    assert local.get("/v1/subjects/tg:42/memories", params={"tenant": "other"}).status_code == 200
    assert local.get("/v1/subjects/tg:42/memories", params={"tenant": "nobody"}).status_code == 404
    assert remote.get("/v1/subjects/tg:42/memories").status_code == 401
    key = new_key(app)
    assert local.get("/v1/subjects/tg:42/memories").status_code == 401
    assert local.get("/v1/subjects/tg:42/memories", params={"tenant": "other"}).status_code == 200
    store(app).revoke_api_key("default", key.split("_")[1])
    assert local.get("/v1/subjects/tg:42/memories").status_code == 401


def test_start_up_says_who_may_call_v1(caplog):
    """The start-up log names the keyless tenants and that they answer loopback only."""
    with caplog.at_level(logging.INFO, logger="gateway.http.api_v1"):
        with TestClient(create_app(_settings()), client=LOOPBACK):
            pass
    assert any("loopback" in r.getMessage() and "default" in r.getMessage() for r in caplog.records)


def test_api_require_key_refuses_keyless_loopback_calls():
    """HUIYI_API_REQUIRE_KEY: loopback without a key is 401; with a key 200."""
    application = create_app(_settings(api_require_key=True))
    with TestClient(application, client=LOOPBACK) as local:
        assert local.get("/v1/subjects/tg:42/memories").status_code == 401
        key = new_key(application)
        assert local.get("/v1/subjects/tg:42/memories", headers={"X-API-Key": key}).status_code == 200


def test_an_unauthenticated_body_is_not_read(app):
    """A remote caller without a key gets 401 for a 2 MiB body (not 413): refused before reading it."""
    r = client_for(app, REMOTE).post("/v1/turns", content=b'{"x": "' + b"a" * (2 << 20) + b'"}',
                                     headers={"content-type": "application/json"})
    assert r.status_code == 401 and len(r.content) < 500


def test_memory_verbs_round_trip_in_chinese_and_english(app):
    """Capture (zh inferred, en verbatim), list with paging, get, export and import into another person,
    forget a subject; tombstones refuse what was forgotten when it is imported back."""
    c = client_for(app, REMOTE, new_key(app))
    r = c.post("/v1/subjects/tg:42/memories", json={"messages": [
        {"text": ZH_FACT, "message_id": "m1", "timestamp": "2026-01-02T03:04:05Z"},
        {"role": "assistant", "text": "煤球真可爱！"}]})
    assert [x["action"] for x in r.json()["results"]] == ["stored"]
    r = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": EN_FACT}]})
    (en,) = r.json()["results"]
    assert en["action"] == "stored" and en["memory"]["text"] == EN_FACT and en["memory"]["category"] == "other"
    page = c.get("/v1/subjects/tg:42/memories", params={"limit": 1}).json()
    assert page["total"] == 2 and len(page["items"]) == 1 and page["items"][0]["text"] == EN_FACT
    second = c.get("/v1/subjects/tg:42/memories", params={"limit": 1, "offset": 1}).json()["items"]
    assert "煤球" in second[0]["text"]
    assert c.get(f"/v1/subjects/tg:42/memories/{second[0]['id']}").json()["text"] == second[0]["text"]
    doc = c.get("/v1/subjects/tg:42/export").json()
    assert doc["format"] == "huiyi.memories.v1" and {m["text"] for m in doc["memories"]} >= {EN_FACT}
    imported = c.post("/v1/subjects/qq:10001/import", json=doc).json()["results"]
    assert [x["action"] for x in imported] == ["stored", "stored"]
    texts = {m["text"] for m in c.get("/v1/subjects/qq:10001/memories").json()["items"]}
    assert texts == {m["text"] for m in doc["memories"]}
    gone = c.delete("/v1/subjects/tg:42").json()
    assert (gone["subject"], gone["forgotten"], gone["receipt"]["memories"]) == ("tg:42", 2, 2)
    assert c.get("/v1/subjects/tg:42/memories").json()["total"] == 0
    again = c.post("/v1/subjects/tg:42/import", json=doc).json()["results"]
    assert {x["action"] for x in again} == {"rejected"} and {x["reason"] for x in again} == {"tombstone"}


def test_reads_that_name_a_group_show_only_what_was_learned_there(app):
    """Disclosure: a memory said in private is not listed, fetched or searched for a group chat;
    one said in the group is, and not in another group."""
    c = client_for(app, REMOTE, new_key(app))
    c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": "我的生日是五月三号"}]})
    r = c.post("/v1/subjects/tg:42/memories", json={"chat": "tg:group:-100", "messages": [{"text": EN_FACT}]})
    assert r.status_code == 200, r.text
    group = c.get("/v1/subjects/tg:42/memories", params={"chat": "tg:group:-100"}).json()
    assert [m["text"] for m in group["items"]] == [r.json()["results"][0]["memory"]["text"]]
    private_id = next(m["id"] for m in c.get("/v1/subjects/tg:42/memories").json()["items"] if "生日" in m["text"])
    assert c.get(f"/v1/subjects/tg:42/memories/{private_id}", params={"chat": "tg:group:-100"}).status_code == 404
    assert c.get("/v1/subjects/tg:42/memories", params={"chat": "tg:group:-200"}).json()["total"] == 0
    hits = c.post("/v1/subjects/tg:42/search", json={"query": "生日", "chat": "tg:group:-100"}).json()["hits"]
    assert all("生日" not in h["memory"]["text"] for h in hits)
    assert c.get("/v1/subjects/tg:42/memories", params={"chat": "tg:nonsense"}).status_code == 400


def test_recollection_and_the_bots_own_reply_in_the_tail(app):
    """The caller's flow: capture → recollection (sources, prompt block) → its own model's reply recorded →
    the next recollection over the stored tail carries that reply as the assistant's line."""
    c = client_for(app, REMOTE, new_key(app))
    chat = "tg:private:42"
    r = c.post("/v1/subjects/tg:42/memories", json={"chat": chat, "messages": [{"text": ZH_FACT, "message_id": "1"}]})
    mid = r.json()["results"][0]["memory"]["id"]
    rec = c.post("/v1/subjects/tg:42/recollection", json={"chat": chat, "tail": [
        {"text": "你还记得我的猫吗？"}]}).json()
    assert rec["sources"] == [mid] and "煤球" in rec["recollection"] and rec["hits"][0]["memory"]["id"] == mid
    assert rec["prompt"][0]["role"] == "system" and "煤球" in rec["prompt"][0]["content"]
    assert rec["prompt"][-1] == {"role": "user", "content": "你还记得我的猫吗？"}
    assert c.post("/v1/subjects/tg:42/replies", json={"text": "当然记得煤球！"}).json() == {"chat": chat, "recorded": True}
    again = c.post("/v1/subjects/tg:42/recollection", json={"chat": chat}).json()
    assert {"role": "assistant", "content": "当然记得煤球！"} in again["prompt"]
    assert again["sources"] == [mid]


def test_writes_to_a_chat_must_be_the_subjects_own(app):
    """A private chat of someone else, a chat on another platform, any chat of a linked person: 409 ChatMismatch
    (well-formed, but not the subject's chat: the schema cannot say so, hence not 400); a member key writing a
    group tail: 403. Nothing is written."""
    admin = client_for(app, REMOTE, new_key(app))
    for subject, chat in (("tg:42", "tg:private:43"), ("tg:42", "qq:private:42"), ("person:p1", "tg:private:42")):
        r = admin.post(f"/v1/subjects/{subject}/replies", json={"text": "你好 hi", "chat": chat})
        assert r.status_code == 409 and r.json()["error"] == "ChatMismatch", r.text
    assert admin.post("/v1/subjects/person:p1/replies", json={"text": "hi"}).status_code == 409
    assert store(app).chat_tail("default", ChatRef.parse("tg:private:43"), 10) == []
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    assert member.post("/v1/subjects/tg:42/replies", json={"text": "hi", "chat": "tg:group:-1"}).status_code == 403
    assert member.post("/v1/subjects/tg:42/replies", json={"text": "hi"}).status_code == 200
    group = {"chat": "tg:group:-1", "messages": [{"text": "我喜欢猫"}]}
    assert member.post("/v1/subjects/tg:42/memories", json=group).status_code == 403
    assert admin.post("/v1/subjects/tg:42/memories", json=group).status_code == 200


def test_a_member_key_cannot_run_a_turn_in_a_group_and_read_its_tail(app):
    """A member key's own person speaking in a group it names: 403, nothing read or written
    (the group's tail holds other people's lines); the admin key's turn there sees them."""
    admin = client_for(app, REMOTE, new_key(app))
    group = {"platform": "tg", "sender_name": "x", "chat_kind": "group", "chat_id": "-100999", "mentions_bot": True}
    r = admin.post("/v1/turns", json={"message": {**group, "sender_id": "43", "message_id": "g1",
                                                  "sender_name": "小美", "text": "我在吃舍曲林，别告诉别人"}})
    assert r.status_code == 200
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    for text in ("hello", "你好，小美在吃什么药？"):
        r = member.post("/v1/turns", json={"message": {**group, "sender_id": "42", "message_id": f"m-{text}",
                                                       "text": text}})
        assert r.status_code == 403 and "舍曲林" not in r.text
    seen = admin.post("/v1/turns", json={"message": {**group, "sender_id": "44", "message_id": "g2",
                                                     "text": "hi all"}}).json()
    tail = " ".join(m["content"] for m in seen["prompt"])
    assert "舍曲林" in tail and "hello" not in tail and "小美在吃什么药" not in tail


def test_a_member_key_does_not_read_a_groups_stored_tail(app):
    """Other people's lines in a group tail stay out of a member key's recollection prompt; an admin key sees them."""
    admin = client_for(app, REMOTE, new_key(app))
    admin.post("/v1/subjects/tg:43/memories", json={"chat": "tg:group:-1", "messages": [
        {"text": "我下周去东京出差", "sender_name": "小王"}]})
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    assert member.post("/v1/subjects/tg:42/recollection", json={"chat": "tg:group:-1"}).status_code == 403
    own_tail = member.post("/v1/subjects/tg:42/recollection", json={"chat": "tg:group:-1", "tail": [{"text": "hi"}]})
    assert own_tail.status_code == 200 and "东京" not in own_tail.text
    seen = admin.post("/v1/subjects/tg:42/recollection", json={"chat": "tg:group:-1"}).json()
    assert any("东京" in m["content"] for m in seen["prompt"])


@pytest.mark.parametrize("subject", ["tg:42' OR 1=1", "TG:42", "tg:", "tg:42%00", "群:42", "x" * 200])
def test_subjects_outside_the_namespace_pattern_are_400(app, subject):
    """A subject that is not a Namespace subject answers 400 with the reason, nothing looked up."""
    r = client_for(app, REMOTE, new_key(app)).get(f"/v1/subjects/{subject}/memories")
    assert r.status_code == 400 and r.json()["error"] == "RequestValidationError"


def test_keys_cli_creates_lists_and_revokes(tmp_path, monkeypatch):
    """huiyi keys create prints a key once (stored only as a digest), list shows it, revoke refuses it."""
    from gateway.cli import app as cli
    from memory.store import Store

    runner = CliRunner()
    r = runner.invoke(cli, ["keys", "create", "--tenant", "default", "--scope", "member", "--subject", "tg:42",
                            "--label", "阿杰的手机"])
    assert r.exit_code == 0, r.output
    key = re.search(r"hy_[0-9a-f]{12}_\S{43}", r.output).group(0)
    key_id = key.split("_")[1]
    listed = runner.invoke(cli, ["keys", "list", "--tenant", "default"]).output
    assert key_id in listed and "tg:42" in listed and "阿杰的手机" in listed and key not in listed
    s = Store(load_settings().db_url)
    try:
        assert s.verify_api_key(key).subject == "tg:42"
        assert runner.invoke(cli, ["keys", "revoke", key_id, "--tenant", "other"]).exit_code == 1
        assert runner.invoke(cli, ["keys", "revoke", key_id, "--tenant", "default"]).exit_code == 0
        assert s.verify_api_key(key) is None
    finally:
        s.close()
    assert runner.invoke(cli, ["keys", "create", "--tenant", "nobody"]).exit_code == 2
    assert runner.invoke(cli, ["keys", "create", "--scope", "member"]).exit_code == 2
    assert runner.invoke(cli, ["keys", "create", "--scope", "owner"]).exit_code == 2


def test_nul_characters_are_dropped_and_a_bad_import_writes_nothing(app):
    """NUL in a captured line is dropped (PostgreSQL refuses it); an import with one malformed origin
    answers 400 and stores none of its memories."""
    c = client_for(app, REMOTE, new_key(app))
    r = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": "我喜欢\x00猫"}]})
    assert r.json()["results"][0]["memory"]["text"] == "我喜欢猫"
    assert c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": "\x00"}]}).status_code == 400
    # a BEL, an ESC sequence, a right-to-left override, a zero-width space and a noncharacter carry no text
    r = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [
        {"text": "My\u202e cat\x07 is called \x1b[31mMochi\u200b 🐈\uffff"}]})
    assert r.json()["results"][0]["memory"]["text"] == "My cat is called Mochi 🐈"  # the colour sequence whole
    assert c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": "\x07\u202e\ufeff"}]}).status_code == 400
    # a text of nothing but escape sequences is empty too, not "[31m[0m"
    assert c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [
        {"text": "\x1b[31m\u202e\x1b[0m\x1b]0;title\x07"}]}).status_code == 400
    memory_id = c.get("/v1/subjects/tg:42/memories").json()["items"][0]["id"]
    assert c.patch(f"/v1/subjects/tg:42/memories/{memory_id}",
                   json={"text": "我家的猫\u2066叫煤球\x1b"}).json()["text"] == "我家的猫叫煤球"
    doc = {"memories": [{"id": "a", "text": "I like tea"}, {"id": "b", "text": "我住在上海", "origin": "not a chat"}]}
    r = c.post("/v1/subjects/tg:44/import", json=doc)
    assert r.status_code == 400 and r.json()["error"] == "NamespaceError"
    assert c.get("/v1/subjects/tg:44/memories").json()["total"] == 0


def test_a_json_body_is_read_whatever_its_content_type(app):
    """curl -d labels JSON as form-urlencoded; /v1 reads a JSON object anyway (as /v1/turns always did),
    and a body that is not JSON is 400."""
    c = client_for(app, REMOTE, new_key(app))
    body = '{"messages": [{"text": "我喜欢喝乌龙茶"}]}'.encode()
    for ctype in ("application/x-www-form-urlencoded", "text/plain", None):
        headers = {"content-type": ctype} if ctype else {}
        r = c.post("/v1/subjects/tg:42/memories", content=body, headers=headers)
        assert r.status_code == 200, (ctype, r.text)
    r = c.post("/v1/subjects/tg:42/memories", content=b"messages=hi", headers={"content-type": "text/plain"})
    assert r.status_code == 400 and r.json()["error"] == "BadPayload"



@pytest.mark.parametrize("depth", [65, 500, 951, 952, 2000])
def test_a_filters_parameter_nested_too_deep_is_400_not_a_recursion_error(app, depth):
    """``GET …/memories?filters=`` with an array nested 952+ deep (inside its 4,096 characters) raised
    RecursionError, a 500: every depth past the limit is the 400 of any other bad filter."""
    c = client_for(app, REMOTE, new_key(app))
    value = '{"k": ' + "[" * depth + "1" + "]" * depth + "}"
    assert len(value) <= 4096
    r = c.get("/v1/subjects/tg:42/memories", params={"filters": value})
    assert r.status_code == 400 and r.json() == c.get("/v1/subjects/tg:42/memories",
                                                      params={"filters": "not json"}).json()


@pytest.mark.parametrize(("method", "path"), sorted(BODIES))
@pytest.mark.parametrize("depth", [65, 500, 951])
def test_a_body_nested_too_deep_is_400_on_every_v1_route(app, method, path, depth):
    """A valid body plus a member nested 65–951 deep (≥ 500 crashed repairing its strings: RecursionError,
    a 500) is the 400 BadPayload of a body that is not JSON, on every /v1 route that takes a body."""
    c = client_for(app, REMOTE, new_key(app))
    good = json.dumps(BODIES[(method, path)], ensure_ascii=False)
    raw = good[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    r = c.request(method, fill(path), params=PARAMS.get((method, path), lambda s: None)("tg:42"), content=raw,
                  headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"error": "BadPayload",
                                                 "detail": "body is not JSON: JSON nested deeper than 64 levels"}



#: (lang, lines that say the topic, the companion's question on it, an answer about something else, query)
MARATHON = [
    ("en", ["I ran my first marathon in Berlin", "Training for the marathon takes my whole weekend"],
     "How was the marathon training this week?", "My sister Anna lives in Toronto", "marathon"),
    ("zh", ["我跑完了人生第一个马拉松", "马拉松训练占了我整个周末"],
     "这周马拉松训练怎么样？", "我姐姐安娜住在多伦多", "马拉松"),
]


@pytest.mark.parametrize(("lang", "topic", "asked", "other", "query"), MARATHON, ids=[m[0] for m in MARATHON])
def test_a_search_hit_found_only_through_the_line_it_answered_says_via_context(app, lang, topic, asked, other,
                                                                                query):
    """/v1 search: 「My sister Anna lives in Toronto」, said in answer to "How was the marathon training?", is
    found for "marathon" with ``via_context: true``; the memories that say marathon have false — a bot that
    forgets every hit of a topic can leave it out; the OpenAPI document names the field."""
    c = client_for(app, REMOTE, new_key(app))
    r = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [
        *({"text": t, "timestamp": "2026-06-01T09:00:00Z"} for t in topic),
        {"role": "assistant", "text": asked, "sender_name": "Mochi", "timestamp": "2026-06-01T10:00:00Z"},
        {"text": other, "timestamp": "2026-06-01T10:01:00Z"}]})
    ids = {x["memory"]["text"]: x["memory"]["id"] for x in r.json()["results"]}
    hits = {h["memory"]["id"]: h for h in c.post("/v1/subjects/tg:42/search", json={"query": query}).json()["hits"]}
    assert hits[ids[other]]["via_context"] is True and hits[ids[other]]["memory"]["context"].endswith(asked)
    assert [hits[ids[t]]["via_context"] for t in topic] == [False, False]
    schema = app.openapi()["components"]["schemas"]["HitOut"]["properties"]["via_context"]
    assert schema["type"] == "boolean" and "context" in schema["description"]


def test_captured_messages_keep_the_bots_line_they_answered_through_export_and_import(app):
    """/v1 capture: a person's line after the assistant's is searched with it (its ``context``); a
    line after another user line has none; export carries the context and import restores it."""
    c = client_for(app, REMOTE, new_key(app))
    r = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [
        {"role": "assistant", "text": "How was the pride parade last weekend?", "sender_name": "Mochi",
         "timestamp": "2026-06-01T10:00:00Z"},
        {"text": "Yes!! It was so much fun 🏳️‍🌈", "timestamp": "2026-06-01T10:01:00Z"},
        {"text": "我妹妹也去了", "timestamp": "2026-06-01T10:02:00Z"}]})
    first, second = (x["memory"] for x in r.json()["results"])
    assert first["context"] == "Mochi: How was the pride parade last weekend?" and second["context"] == ""
    hits = c.post("/v1/subjects/tg:42/search", json={"query": "pride parade"}).json()["hits"]
    assert [h["memory"]["id"] for h in hits][:1] == [first["id"]]
    doc = c.get("/v1/subjects/tg:42/export").json()
    assert {m["text"]: m["context"] for m in doc["memories"]}["Yes!! It was so much fun 🏳️‍🌈"] == first["context"]
    c.post("/v1/subjects/qq:10001/import", json=doc)
    items = c.get("/v1/subjects/qq:10001/memories").json()["items"]
    assert {m["text"]: m["context"] for m in items} == {"Yes!! It was so much fun 🏳️‍🌈": first["context"],
                                                       "我妹妹也去了": ""}


def test_export_for_a_group_holds_only_what_that_group_may_see(app):
    """``export?chat=<group>`` (issue 26.1): only memories learned in that group, none of another group's or private
    ones, no version said in private in a group memory's history, no context and no other platform's identity;
    without ``chat`` everything, in zh and en."""
    from memory.admin import Authority, link

    c = client_for(app, REMOTE, new_key(app))
    c.post("/v1/subjects/tg:42/memories", json={"chat": "tg:private:42", "messages": [
        {"role": "assistant", "text": "你周末做什么？"}, {"text": "我的生日是五月三号"}, {"text": "我住在北京"}]})
    here = c.post("/v1/subjects/tg:42/memories", json={"chat": "tg:group:-100", "messages": [
        {"text": EN_FACT}, {"text": "我搬到上海了"}]}).json()["results"]
    c.post("/v1/subjects/tg:42/memories", json={"chat": "tg:group:-200", "messages": [{"text": ZH_FACT}]})
    link(app.state.pipeline.core, Authority(actor="test", tenant="default"), "default", ["tg:42", "qq:777"])
    whole = c.get("/v1/subjects/tg:42/export").json()
    assert {"我的生日是五月三号", EN_FACT, ZH_FACT} <= {m["text"] for m in whole["memories"]}
    assert sorted(whole["identities"]) == ["qq:777", "tg:42"]
    moved = next(m for m in whole["memories"] if "上海" in m["text"])
    assert [v["text"] for v in moved["history"]] == ["我住在北京"]  # the person's own view keeps the old version
    r = c.get("/v1/subjects/tg:42/export", params={"chat": "tg:group:-100"})
    assert r.status_code == 200, r.text
    doc = r.json()
    listed = c.get("/v1/subjects/tg:42/memories", params={"chat": "tg:group:-100"}).json()["items"]
    assert [m["text"] for m in doc["memories"]] == [m["text"] for m in listed] == [EN_FACT]  # what the group sees
    assert "我搬到上海了" in [h["memory"]["text"] for h in here]  # a revision of a private memory stays private
    assert all(m["context"] == "" and m["history"] == [] for m in doc["memories"])
    assert doc["identities"] == ["tg:42"]
    assert c.get("/v1/subjects/tg:42/export", params={"chat": "tg:group:-300"}).json()["memories"] == []
    assert c.get("/v1/subjects/tg:42/export", params={"chat": "tg:nonsense"}).status_code == 400


@pytest.mark.parametrize("text", [ZH_FACT, EN_FACT])
def test_a_withdrawal_retracts_what_the_message_taught_and_a_member_key_withdraws_only_its_own(app, text):
    """``POST /v1/withdrawals`` (issue 26.3): the memory a turn's message taught is retracted and the line leaves the
    tail; again it retracts nothing; a member key of another person: 403 and nothing changes."""
    admin = client_for(app, REMOTE, new_key(app))
    msg = {"platform": "tg", "message_id": "w1", "sender_id": "42", "chat_kind": "private", "chat_id": "42",
           "text": text}
    captured = admin.post("/v1/turns", json={"message": msg}).json()["captured"]
    assert len(captured) == 1
    withdrawal = {k: msg[k] for k in ("platform", "message_id", "sender_id", "chat_kind", "chat_id")}
    other = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:43"))
    assert other.post("/v1/withdrawals", json={"withdrawal": withdrawal}).status_code == 403
    assert store(app).count(Namespace("default", "tg:42")) == 1
    own = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    r = own.post("/v1/withdrawals", json={"withdrawal": withdrawal})
    assert r.status_code == 200 and r.json() == {"namespace": "default/tg:42", "retracted": captured}
    assert own.post("/v1/withdrawals", json={"withdrawal": withdrawal}).json()["retracted"] == []
    assert store(app).count(Namespace("default", "tg:42")) == 0
    tail = store(app).chat_tail("default", ChatRef.parse("tg:private:42"), 10)
    assert text not in [line.text for line in tail]
    bad = {**withdrawal, "chat_id": "1' OR 1=1"}
    assert admin.post("/v1/withdrawals", json={"withdrawal": bad}).status_code == 400


# -- metadata, batches, scoped forgets (issue 26 item 17) ---------------------------


def test_metadata_is_set_shown_and_filtered_within_one_person(app):
    """Tags set at capture (inferred zh, verbatim en), shown in list, get and export, kept by import;
    list and search filtered on them see only this person's matching memories (another person with the
    same tags never shows); bad tags or filters are 400 and write nothing."""
    import json

    c = client_for(app, REMOTE, new_key(app))
    zh = c.post("/v1/subjects/tg:42/memories", json={"metadata": {"source": "crm", "lang": "zh"},
                                                     "messages": [{"text": ZH_FACT}]}).json()["results"][0]
    en = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "metadata": {"lang": "en", "pinned": True},
                                                     "messages": [{"text": EN_FACT}]}).json()["results"][0]
    assert zh["memory"]["metadata"] == {"lang": "zh", "source": "crm"}
    assert en["memory"]["metadata"] == {"lang": "en", "pinned": True}
    c.post("/v1/subjects/tg:43/memories", json={"infer": False, "metadata": {"lang": "zh", "source": "crm"},
                                                "messages": [{"text": ZH_FACT}]})
    page = c.get("/v1/subjects/tg:42/memories", params={"filters": json.dumps({"lang": "zh"})}).json()
    assert page["total"] == 1 and [m["id"] for m in page["items"]] == [zh["memory"]["id"]]
    both = c.get("/v1/subjects/tg:42/memories", params={"filters": json.dumps({"lang": ["zh", "en"]})}).json()
    assert both["total"] == 2 and {m["subject"] for m in both["items"]} == {"tg:42"}
    assert c.get("/v1/subjects/tg:42/memories", params={"filters": '{"pinned": 1}'}).json()["total"] == 0
    hits = c.post("/v1/subjects/tg:42/search", json={"query": "煤球 hiking", "filters": {"pinned": True}}).json()["hits"]
    assert [h["memory"]["id"] for h in hits] == [en["memory"]["id"]]
    assert c.post("/v1/subjects/tg:42/search", json={"query": "煤球", "filters": {"lang": "fr"}}).json()["hits"] == []
    assert c.get(f"/v1/subjects/tg:42/memories/{en['memory']['id']}").json()["metadata"]["pinned"] is True
    doc = c.get("/v1/subjects/tg:42/export").json()
    assert {m["id"]: m["metadata"] for m in doc["memories"]}[zh["memory"]["id"]] == {"lang": "zh", "source": "crm"}
    imported = c.post("/v1/subjects/qq:10001/import", json=doc).json()["results"]
    assert c.get(f"/v1/subjects/qq:10001/memories/{imported[0]['memory_id']}").json()["metadata"]
    before = store(app).count(Namespace("default", "tg:42"))
    for bad in ({"infer": False, "metadata": {"bad key": 1}, "messages": [{"text": "新的事情"}]},
                {"infer": False, "metadata": {"k": None}, "messages": [{"text": "new thing"}]},
                {"infer": False, "metadata": {f"k{i}": i for i in range(17)}, "messages": [{"text": "new"}]}):
        assert c.post("/v1/subjects/tg:42/memories", json=bad).status_code == 400
    assert store(app).count(Namespace("default", "tg:42")) == before
    for bad in ("not json", "[1]", '{"k": []}', '{"k": {"a": 1}}'):
        r = c.get("/v1/subjects/tg:42/memories", params={"filters": bad})
        assert r.status_code == 400 and bad not in r.text
    assert c.post("/v1/subjects/tg:42/search", json={"query": "x", "filters": {"k": [[1]]}}).status_code == 400
    patched = c.patch(f"/v1/subjects/tg:42/memories/{en['memory']['id']}",
                      json={"metadata": {"pinned": None, "topic": "旅行"}}).json()
    assert patched["metadata"] == {"lang": "en", "topic": "旅行"} and patched["version"] == 1
    assert c.patch(f"/v1/subjects/tg:42/memories/{en['memory']['id']}", json={}).status_code == 400


def test_batches_answer_per_item_and_never_touch_another_persons_ids(app):
    """batch-forget and batch-update of tg:42 with tg:43's ids and unknown ones: those answer not_found and
    stay as they were; a member key does the same for its own person; a bad item is 400, nothing changed."""
    admin = client_for(app, REMOTE, new_key(app))
    mine = [admin.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": t}]})
            .json()["results"][0]["memory"]["id"] for t in (ZH_FACT, EN_FACT, "我在上海做程序员")]
    theirs = admin.post("/v1/subjects/tg:43/memories", json={"infer": False, "messages": [{"text": ZH_FACT}]}
                        ).json()["results"][0]["memory"]["id"]
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    r = member.post("/v1/subjects/tg:42/memories/batch-update", json={"items": [
        {"id": mine[0], "text": "我的猫叫雪球"}, {"id": mine[1], "metadata": {"topic": "travel"}},
        {"id": theirs, "text": "不该改到别人"}]})
    assert [(x["id"], x["status"]) for x in r.json()["results"]] == [
        (mine[0], "updated"), (mine[1], "updated"), (theirs, "not_found")]
    assert r.json()["results"][0]["memory"]["version"] == 2 and r.json()["results"][1]["memory"]["version"] == 1
    assert admin.get(f"/v1/subjects/tg:43/memories/{theirs}").json()["text"] == ZH_FACT
    for bad in ({"items": [{"id": mine[0], "text": "a"}, {"id": mine[0], "text": "b"}]},
                {"items": [{"id": mine[0], "text": "a"}, {"id": mine[1], "metadata": {"bad key": 1}}]},
                {"items": [{"id": mine[0]}]}, {"items": []}, {"items": [{"id": "x y", "text": "a"}]}):
        assert member.post("/v1/subjects/tg:42/memories/batch-update", json=bad).status_code == 400
    assert admin.get(f"/v1/subjects/tg:42/memories/{mine[0]}").json()["text"] == "我的猫叫雪球"
    r = member.post("/v1/subjects/tg:42/memories/batch-forget", json={"ids": [mine[0], theirs, "nosuchid1", mine[1]]})
    assert [(x["id"], x["status"]) for x in r.json()["results"]] == [
        (mine[0], "forgotten"), (theirs, "not_found"), ("nosuchid1", "not_found"), (mine[1], "forgotten")]
    assert [m["id"] for m in admin.get("/v1/subjects/tg:42/memories").json()["items"]] == [mine[2]]
    assert admin.get(f"/v1/subjects/tg:43/memories/{theirs}").status_code == 200
    assert member.post("/v1/subjects/tg:43/memories/batch-forget", json={"ids": [theirs]}).status_code == 403
    assert member.post("/v1/subjects/tg:42/memories/batch-forget", json={"ids": ["a"] * 101}).status_code == 400
    again = admin.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [
        {"text": EN_FACT, "timestamp": "2026-01-01T00:00:00Z"}]}).json()["results"][0]
    assert (again["action"], again["reason"]) == ("rejected", "tombstone")  # forgotten as every forget


def test_forget_by_scope_needs_an_admin_key_and_its_confirmation(app):
    """DELETE /memories: a member key is 403 even on its own person; no or a wrong confirm, or a private chat,
    is 400 and forgets nothing; with a group chat only what was said in that group goes; without, everything."""
    admin = client_for(app, REMOTE, new_key(app))
    admin.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": ZH_FACT}]})
    admin.post("/v1/subjects/tg:42/memories", json={"infer": False, "chat": "tg:group:-100",
                                                    "messages": [{"text": EN_FACT}]})
    admin.post("/v1/subjects/tg:42/memories", json={"infer": False, "chat": "tg:group:-200",
                                                    "messages": [{"text": "週末我常去爬山"}]})
    ns = Namespace("default", "tg:42")
    member = client_for(app, REMOTE, new_key(app, scope="member", subject="tg:42"))
    assert member.delete("/v1/subjects/tg:42/memories", params={"confirm": "tg:42"}).status_code == 403
    for params in ({}, {"confirm": "tg:43"}, {"confirm": "tg:42", "chat": "tg:private:42"}):
        assert admin.delete("/v1/subjects/tg:42/memories", params=params).status_code == 400
    # a chat that is not the subject's: ChatMismatch, 409 like every route (issue 26 item 15)
    assert admin.delete("/v1/subjects/tg:42/memories", params={"confirm": "tg:42", "chat": "qq:group:-100"}) \
        .status_code == 409
    assert store(app).count(ns) == 3
    r = admin.delete("/v1/subjects/tg:42/memories", params={"confirm": "tg:42", "chat": "tg:group:-100"})
    assert {k: v for k, v in r.json().items() if k != "receipt"} == {"subject": "tg:42", "chat": "tg:group:-100",
                                                                     "forgotten": 1}
    assert r.json()["receipt"]["memories"] == 1 and r.json()["receipt"]["tombstones"] >= 2
    assert {m.text for m in store(app).list(ns)} == {ZH_FACT, "週末我常去爬山"}
    assert admin.delete("/v1/subjects/tg:42/memories", params={"confirm": "tg:42"}).json()["forgotten"] == 2
    assert store(app).count(ns) == 0


def test_a_batch_item_whose_text_another_memory_holds_is_a_conflict_and_the_rest_are_done(app):
    """batch-update: an item moved onto where the person lives (another memory holds it) answers conflict
    and stays at version 1; the item beside it is updated (per-item results, not all-or-nothing)."""
    c = client_for(app, REMOTE, new_key(app))
    stored = lambda text: next(x["memory"] for x in c.post(  # noqa: E731
        "/v1/subjects/tg:42/memories", json={"messages": [{"text": text}]}).json()["results"] if x["action"] == "stored")
    stored("我住在北京")
    tea, walk = stored("我喜欢绿茶"), stored("I love long walks by the sea")
    r = c.post("/v1/subjects/tg:42/memories/batch-update", json={"items": [
        {"id": tea["id"], "text": "我住在杭州"}, {"id": walk["id"], "metadata": {"lang": "en"}}]})
    assert [(x["id"], x["status"]) for x in r.json()["results"]] == [(tea["id"], "conflict"), (walk["id"], "updated")]
    assert c.get(f"/v1/subjects/tg:42/memories/{tea['id']}").json()["version"] == 1


@pytest.mark.parametrize("lang, facts, query", [
    ("zh", ["我养了一只叫煤球的黑猫", "我每年夏天都去阿尔卑斯山徒步", "我的妹妹住在多伦多"], "煤球 猫"),
    ("en", ["I have a black cat called Mochi", "I hike in the Alps every summer", "My sister lives in Toronto"],
     "my cat Mochi")])
def test_a_search_threshold_drops_the_hits_scoring_below_it_and_keeps_the_rest_in_order(app, lang, facts, query):
    """threshold is a floor on the hits' own score: the hits at or above it come back unchanged and in order,
    the ones below are dropped, a floor above every score gives none; a negative one is 400."""
    c = client_for(app, REMOTE, new_key(app))
    for fact in facts:
        c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": fact}]})
    every = c.post("/v1/subjects/tg:42/search", json={"query": query, "k": 10}).json()["hits"]
    scores = [h["score"] for h in every]
    assert len(every) >= 1 and scores == sorted(scores, reverse=True)
    floor = scores[0] if len(scores) == 1 else (scores[0] + scores[-1]) / 2
    kept = c.post("/v1/subjects/tg:42/search", json={"query": query, "k": 10, "threshold": floor}).json()["hits"]
    # a search is a recall (its activation moves scores a hair between calls): the same ids, a prefix of the order
    assert kept and all(h["score"] >= floor for h in kept)
    assert [h["memory"]["id"] for h in kept] == [h["memory"]["id"] for h in every if h["score"] >= floor]
    assert c.post("/v1/subjects/tg:42/search",
                  json={"query": query, "threshold": scores[0] + 0.01}).json()["hits"] == []
    assert c.post("/v1/subjects/tg:42/search", json={"query": query, "threshold": -1}).status_code == 400


def test_range_and_or_filters_over_http_narrow_to_one_persons_matching_memories(app):
    """list (filters in the query) and search (in the body) take a range and $or; another person's memory
    with the same tags never shows; an unknown operator or a nested $or is 400."""
    import json

    c = client_for(app, REMOTE, new_key(app))
    cat = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "metadata": {"score": 3, "day": "2026-05-04"},
                                                      "messages": [{"text": ZH_FACT}]}).json()["results"][0]["memory"]
    hike = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "metadata": {"score": 8, "topic": "travel"},
                                                       "messages": [{"text": EN_FACT}]}).json()["results"][0]["memory"]
    c.post("/v1/subjects/tg:43/memories", json={"infer": False, "metadata": {"score": 9, "topic": "travel"},
                                                "messages": [{"text": EN_FACT}]})
    page = c.get("/v1/subjects/tg:42/memories", params={"filters": json.dumps({"score": {"$gt": 5}})}).json()
    assert [m["id"] for m in page["items"]] == [hike["id"]]
    either = {"$or": [{"day": {"$gte": "2026-05-01", "$lt": "2026-06-01"}}, {"topic": "travel"}]}
    page = c.get("/v1/subjects/tg:42/memories", params={"filters": json.dumps(either)}).json()
    assert page["total"] == 2 and {m["subject"] for m in page["items"]} == {"tg:42"}
    hits = c.post("/v1/subjects/tg:42/search", json={"query": f"{ZH_FACT} {EN_FACT}", "filters": either}).json()["hits"]
    assert {h["memory"]["id"] for h in hits} == {cat["id"], hike["id"]}
    for bad in ({"score": {"$eq": 1}}, {"$or": [{"$or": [{"score": 1}]}]}, {"$or": []}, {"score": {"$gte": True}}):
        assert c.post("/v1/subjects/tg:42/search", json={"query": "x", "filters": bad}).status_code == 400
        assert c.get("/v1/subjects/tg:42/memories", params={"filters": json.dumps(bad)}).status_code == 400


@pytest.mark.parametrize("text, end", [("我下个月要搬家到杭州", "2027-01-31T16:00"), ("We move to Lisbon next month", "2027-01-31T16:00"),
                                       ("我明天去醫院體檢", None)])
def test_a_memory_shows_the_period_its_event_names(app, text, end):
    """A month named ("下个月", "next month", said 2026-12-06) is a period: ``event_end`` is the first
    midnight after it in the tenant's zone (Shanghai: 1 February is 2027-01-31T16:00Z); a single day
    ("明天", traditional characters) has none. Read back through get."""
    c = client_for(app, REMOTE, new_key(app))
    r = c.post("/v1/subjects/tg:42/memories", json={"messages": [
        {"text": text, "timestamp": "2026-12-06T04:00:00Z"}]}).json()
    mem = c.get(f"/v1/subjects/tg:42/memories/{r['results'][0]['memory']['id']}").json()
    assert mem["event_time"] is not None
    assert (mem["event_end"] or "")[:16] == (end or "")
