"""The HTTP gateway in-process (Starlette TestClient): health, turns, Telegram
and OneBot webhooks (behind their secret / access token), and 4xx answers for
malformed bodies."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from conftest import TEST_DATA
from gateway.http.app import create_app
from gateway.config import TenantSettings, load_settings

TG_SECRET = {"X-Telegram-Bot-Api-Secret-Token": "tg-secret"}
ONEBOT_TOKEN = {"Authorization": "Bearer ob-token"}


@pytest.fixture
def client():
    settings = load_settings(tenants={"default": TenantSettings(telegram={"webhook_secret": "tg-secret"})},
                             onebot={"access_token": "ob-token"})
    with TestClient(create_app(settings), client=("127.0.0.1", 50000)) as c:  # loopback: keyless /v1 allowed
        yield c


def test_serve_freezes_the_start_up_objects_out_of_the_collector():
    """``huiyi serve``'s app (freeze_gc) moves what start-up loaded out of the cyclic collector once ready,
    and still answers; an app built without it (the tests', every other) freezes nothing."""
    import gc

    settings = load_settings(tenants={"default": TenantSettings()})
    gc.unfreeze()
    try:
        with TestClient(create_app(settings), client=("127.0.0.1", 50000)) as c:
            assert c.get("/healthz").json() == {"status": "ok"} and gc.get_freeze_count() == 0
        with TestClient(create_app(settings, freeze_gc=True), client=("127.0.0.1", 50000)) as c:
            assert gc.get_freeze_count() > 10_000
            assert c.get("/healthz").json() == {"status": "ok"}
    finally:
        gc.unfreeze()


def test_healthz(client):
    """/healthz answers ok once the core is up."""
    assert client.get("/healthz").json() == {"status": "ok"}


def test_turn_roundtrip_recalls_what_was_said(client):
    """POST /v1/turns captures a fact and recalls it on the next turn."""
    base = {"platform": "tg", "sender_id": "1", "sender_name": "Ann", "chat_kind": "private", "chat_id": "1"}
    r1 = client.post("/v1/turns", json={"message": {**base, "message_id": "1", "text": "I have a cat named Mochi"}})
    assert r1.status_code == 200 and len(r1.json()["captured"]) == 1
    r2 = client.post("/v1/turns", json={"message": {**base, "message_id": "2", "text": "how is Mochi?"}})
    body = r2.json()
    assert body["recalled"] == r1.json()["captured"] and "Mochi" in body["recollection"]


@pytest.mark.parametrize("body,code", [
    (b"not json", 400),
    (b"[1,2]", 400),
    (json.dumps({"message": {"platform": "tg"}}).encode(), 400),
    (json.dumps({"message": {"platform": "tg", "message_id": "1", "sender_id": "1' OR 1=1", "chat_kind": "private",
                             "chat_id": "1", "text": "hi"}}).encode(), 400),
    (json.dumps({"tenant": "nobody", "message": {"platform": "tg", "message_id": "1", "sender_id": "1",
                                                 "chat_kind": "private", "chat_id": "1", "text": "hi"}}).encode(), 404),
])
def test_malformed_turns_get_4xx_with_reason(client, body, code):
    """Bad JSON, missing fields, injected ids and unknown tenants answer 4xx with an error name."""
    r = client.post("/v1/turns", content=body, headers={"content-type": "application/json"})
    assert r.status_code == code
    assert "error" in r.json()


def test_telegram_webhook_real_update_and_ignored_update(client):
    """A real private-text Update runs a turn; a reaction update answers 200 and is ignored."""
    upd = json.loads((TEST_DATA / "im/telegram/teloxide_update_private_text.json").read_text())
    r = client.post("/telegram/default", json=upd, headers=TG_SECRET)
    assert r.status_code == 200 and r.json() == {"ok": True, "ignored": False}
    react = json.loads((TEST_DATA / "im/telegram/teloxide_update_message_reaction_user.json").read_text())
    r2 = client.post("/telegram/default", json=react, headers=TG_SECRET)
    assert r2.json() == {"ok": True, "ignored": True}
    assert client.post("/telegram/default", content=b"{oops", headers=TG_SECRET).status_code == 400
    assert client.post("/telegram/default", json=upd).status_code == 401


def test_onebot_webhook_real_event(client):
    """A OneBot v11 private message event runs a turn; a meta event is ignored with 200."""
    event = json.loads((TEST_DATA / "im/onebot/gocqhttp_docs_private_message_event.json").read_text())
    event["time"] = int(time.time())  # recorded long ago: events outside the window are refused (issue 13 B)
    assert client.post("/onebot/default", json=event, headers=ONEBOT_TOKEN).status_code == 200
    assert client.post("/onebot/default", json=event).status_code == 401
    meta = {"time": int(time.time()), "self_id": 1, "post_type": "meta_event", "meta_event_type": "heartbeat"}
    r = client.post("/onebot/default", json=meta, headers=ONEBOT_TOKEN)
    assert r.status_code == 200 and r.json() == {}


def test_app_import_does_not_load_platform_frameworks():
    """Importing the app loads neither nonebot, aiogram nor wechatpy (they load lazily, per configured bridge)."""
    import subprocess
    import sys

    code = ("import sys, gateway.http.app; "
            "print([m for m in ('nonebot', 'aiogram', 'wechatpy') if m in sys.modules])")
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("patch,code", [
    ({"timestamp": "0001-01-01T00:00:00Z"}, 400),
    ({"text": "a" * 20_001}, 400),
    ({"message_id": "x" * 200}, 400),
])
def test_out_of_range_fields_answer_400_not_500(client, patch, code):
    """Ancient timestamps, oversized text and ids are refused at the edge (lone surrogates are repaired instead)."""
    base = {"platform": "tg", "message_id": "1", "sender_id": "1", "chat_kind": "private", "chat_id": "1", "text": "hi"}
    body = json.dumps({"message": {**base, **patch}}).encode()
    r = client.post("/v1/turns", content=body, headers={"content-type": "application/json"})
    assert r.status_code == code and "error" in r.json()


def test_oversized_and_deeply_nested_bodies_are_refused(client):
    """A body over 1 MiB answers 413; a pathologically nested one 400 — never 500."""
    assert client.post("/v1/turns", content=b'{"x": "' + b"a" * (2 << 20) + b'"}').status_code == 413
    assert client.post("/v1/turns", content=b"[" * 100_000 + b"]" * 100_000).status_code == 400



@pytest.mark.parametrize("depth", [65, 500, 951])
@pytest.mark.parametrize(("path", "headers", "body"), [
    ("/telegram/default", TG_SECRET, '{"update_id": 1, "deep": %s}'),
    ("/onebot/default", ONEBOT_TOKEN, '{"post_type": "message", "deep": %s}'),
    ("/v1/turns", {}, '{"deep": %s}'),
])
def test_a_platform_body_nested_too_deep_is_400_not_a_recursion_error(client, path, headers, body, depth):
    """A Telegram update, OneBot event or /v1/turns body with a member nested 65–951 deep (≥ 500 crashed
    repairing its strings: RecursionError, a 500) is 400 BadPayload, as a body that is not JSON."""
    r = client.post(path, content=body % ("[" * depth + "]" * depth), headers=headers)
    assert r.status_code == 400 and r.json() == {"error": "BadPayload",
                                                 "detail": "body is not JSON: JSON nested deeper than 64 levels"}


def test_naive_timestamp_is_taken_as_utc(client):
    """An ISO timestamp without a zone is accepted as UTC (README promises ISO 8601)."""
    base = {"platform": "tg", "message_id": "5", "sender_id": "1", "chat_kind": "private", "chat_id": "1",
            "text": "我喜欢喝乌龙茶", "timestamp": "2026-01-01T00:00:00"}
    assert client.post("/v1/turns", json={"message": base}).status_code == 200


def test_the_platform_webhooks_are_matched_before_the_v1_routes():
    """Starlette tries each route in turn: the platforms' webhooks (a message each) come before /v1's routes,
    and NoneBot's catch-all mount, when on, after both."""
    from gateway.http import api_v1

    settings = load_settings(tenants={"default": TenantSettings()}, onebot={"enabled": True})
    routes = create_app(settings).routes
    v1 = next(i for i, r in enumerate(routes) if getattr(r, "original_router", None) is api_v1.router)
    paths = [getattr(r, "path", "") for r in routes]
    for platform in ("/telegram/{tenant}", "/onebot/{tenant}", "/wechat/{tenant}", "/webhook/{tenant}"):
        assert paths.index(platform) < v1, paths
    assert paths[-1] in ("", "/"), paths  # the NoneBot mount answers what no route of ours does
