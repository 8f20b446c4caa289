"""Change events out: a tenant's memory changes reach a real loopback HTTP receiver,
signed (Standard Webhooks, HMAC-SHA256), in order, with ids and no text; a failing
receiver gets retries with backoff and, after max_attempts, leaves a dead letter
that the tenant's later events pass and a replay sends again; a clean shutdown
gives its claims back; a tenant without a URL leaves no event."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from standardwebhooks import Webhook, WebhookVerificationError

from gateway.config import ChangeEventSettings, TenantSettings, load_settings
from gateway.http.app import create_app

LOOPBACK = ("127.0.0.1", 50000)
ZH, EN = "我养了一只叫煤球的黑猫", "I love hiking in the Alps every summer"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class Receiver:
    """A real HTTP server on loopback that records each POST (headers, body) and
    answers ``fail`` (a list of status codes) first, then 204."""

    def __init__(self, fail: list[int] | None = None) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.fail = list(fail or [])
        self.seen = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.seen:
                    receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    status = receiver.fail.pop(0) if receiver.fail else 204
                    receiver.seen.notify_all()
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/huiyi"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, timeout: float = 20.0) -> list[tuple[dict[str, str], bytes]]:
        deadline = time.monotonic() + timeout
        with self.seen:
            while len(self.got) < n and time.monotonic() < deadline:
                self.seen.wait(0.1)
            return list(self.got)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _app(url: str, **hook):
    settings = load_settings(tenants={
        "default": TenantSettings(language="en", change_events=ChangeEventSettings(url=url, secret=SECRET, **hook)),
        "quiet": TenantSettings()})
    return create_app(settings)


def _delivered(got):
    """The verified bodies of ``got`` (each signature checked with the tenant's secret)."""
    return [Webhook(SECRET).verify(body, headers) for headers, body in got]


def test_changes_reach_the_receiver_signed_in_order_with_ids_and_no_text(receiver):
    """Capture (zh, en), edit, tag, forget through /v1: added, added, changed, changed, forgotten arrive
    in order, each verified with the secret (and refused with another), carrying the namespace, id and
    version and none of the texts; a tenant without a URL leaves no event."""
    app = _app(receiver.url)
    with TestClient(app, client=LOOPBACK) as c:
        zh = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": ZH}]}).json()
        en = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": EN}]}).json()
        zid, eid = zh["results"][0]["memory"]["id"], en["results"][0]["memory"]["id"]
        receiver.wait(2)  # delivered: a tag is news to the receiver (before, the added event would tell it)
        assert c.patch(f"/v1/subjects/tg:42/memories/{zid}", json={"text": "我的猫叫雪球"}).status_code == 200
        assert c.patch(f"/v1/subjects/tg:42/memories/{eid}", json={"metadata": {"topic": "travel"}}).status_code == 200
        assert c.delete(f"/v1/subjects/tg:42/memories/{zid}").status_code == 200
        c.post("/v1/subjects/tg:7/memories", params={"tenant": "quiet"},
               json={"infer": False, "messages": [{"text": ZH}]})
        got = receiver.wait(5)
        store = app.state.pipeline.core.store
        assert store.pending_events("quiet") == 0
    bodies = _delivered(got)
    assert [(b["type"], b["data"]["memory_id"], b["data"]["version"]) for b in bodies] == [
        ("memory.added", zid, 1), ("memory.added", eid, 1), ("memory.changed", zid, 2),
        ("memory.changed", eid, 1), ("memory.forgotten", zid, 0)]
    assert {(b["data"]["tenant"], b["data"]["namespace"], b["data"]["subject"]) for b in bodies} == {
        ("default", "default/tg:42", "tg:42")}
    raw = b"".join(body for _, body in got).decode("utf-8")
    for said in (ZH, EN, "煤球", "雪球", "hiking", "travel"):
        assert said not in raw
    headers, body = got[0]
    assert headers["webhook-id"].startswith("evt_") and headers["content-type"] == "application/json"
    other = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body.replace(b"tg:42", b"tg:43"), headers)


def test_a_failing_receiver_gets_retries_with_backoff_then_the_event_is_given_up(monkeypatch, tmp_path):
    """Two refusals (500, 503): the first event is tried again after the backoff with the same
    webhook-id, later events wait behind it (order kept); with max_attempts the last one is given up.
    The second gateway has a store of its own: the first one's events are counted delivered when the
    receiver answers and deleted just after, so a stop in between leaves them to be sent again (at
    least once), which under load made them the second gateway's pending events."""
    receiver = Receiver(fail=[500, 503])
    try:
        app = _app(receiver.url, backoff_s=0.2, max_attempts=3)
        with TestClient(app, client=LOOPBACK) as c:
            first = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": ZH}]}).json()
            c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": EN}]})
            got = receiver.wait(4)
            sender = app.state.change_events
            deadline = time.monotonic() + 10  # the receiver records a request before the sender reads its answer
            while sender.delivered < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sender.failed == 2 and sender.delivered == 2
        ids = [h["webhook-id"] for h, _ in got]
        assert ids[0] == ids[1] == ids[2] and ids[3] != ids[0]  # the same event three times, then the next
        assert [json.loads(b)["data"]["memory_id"] for _, b in got][:3] == [first["results"][0]["memory"]["id"]] * 3
        stamps = [int(h["webhook-timestamp"]) for h, _ in got]
        assert stamps == sorted(stamps)
    finally:
        receiver.close()
    dead = Receiver(fail=[500] * 10)
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "second"))
    try:
        app = _app(dead.url, backoff_s=0.1, max_attempts=2)
        with TestClient(app, client=LOOPBACK) as c:
            c.post("/v1/subjects/tg:43/memories", json={"infer": False, "messages": [{"text": EN}]})
            dead.wait(2)
            deadline = time.monotonic() + 10
            while app.state.change_events.given_up < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert app.state.change_events.given_up == 1
            store = app.state.pipeline.core.store
            assert store.pending_events() == 1  # a dead letter, not deleted
            assert [(e.attempts, e.last_error) for e in store.dead_events("default")] == [(2, "HTTP 500")]
    finally:
        dead.close()


@pytest.mark.parametrize("bad", [dict(url="ftp://x/y", secret=SECRET), dict(url="http://127.0.0.1/h"),
                                 dict(url="http://127.0.0.1/h", secret="whsec_c2hvcnQ="),
                                 dict(url="http://127.0.0.1/h", secret=SECRET, events=["memory.read"])])
def test_change_event_settings_refuse_what_cannot_be_sent(bad):
    """Not http(s), no secret, a secret under 24 bytes, an unknown event: a configuration error."""
    with pytest.raises(ValueError):
        ChangeEventSettings(**bad)


def test_a_given_up_event_is_a_dead_letter_the_rest_go_on_and_a_replay_sends_it_with_its_id():
    """The receiver refuses the first event until it is given up (max_attempts 2): it stays as a dead
    letter with its last error, the tenant's next event is delivered after it, /metrics shows the
    dead letter, its age and the given-up count, and a replay sends it again with its webhook-id and
    original timestamp."""
    from gateway.webhooks import replay_dead_letters

    receiver = Receiver(fail=[500, 503])
    try:
        app = _app(receiver.url, backoff_s=0.1, max_attempts=2)
        with TestClient(app, client=LOOPBACK) as c:
            first = c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": ZH}]}).json()
            c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": EN}]})
            receiver.wait(3)
            sender, store = app.state.change_events, app.state.pipeline.core.store
            deadline = time.monotonic() + 10
            while sender.delivered < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            (dead,) = store.dead_events("default")
            assert (dead.memory_id, dead.attempts, dead.last_error) == (first["results"][0]["memory"]["id"], 2, "HTTP 503")
            metrics = c.get("/metrics").text
            assert 'huiyi_change_events_given_up_total{tenant="default"} 1.0' in metrics
            assert 'huiyi_change_events_outbox_depth{state="dead",tenant="default"} 1.0' in metrics
            assert 'huiyi_change_events_oldest_undelivered_seconds{tenant="default"}' in metrics
            assert [e.webhook_id for e in replay_dead_letters(store, "default", "test")] == [dead.webhook_id]
            got = receiver.wait(4)
        ids = [h["webhook-id"] for h, _ in got]
        assert ids[0] == ids[1] == ids[3] == dead.webhook_id and ids[2] != ids[0]
        bodies = _delivered(got)
        assert bodies[3] == bodies[0] and bodies[3]["timestamp"] == dead.created_at.isoformat()
        assert [r["action"] for r in store.audit_records(dead.namespace)][:1] == ["event_replay"]
    finally:
        receiver.close()


def test_an_emptied_outbox_reads_zero_on_metrics_not_a_gap(receiver):
    """Once a tenant's events are all delivered its outbox series stay on /metrics at 0 (they
    vanished, so a dashboard showed a gap instead of an empty queue)."""
    app = _app(receiver.url)
    with TestClient(app, client=LOOPBACK) as c:
        c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": ZH}]})
        receiver.wait(1)
        store = app.state.pipeline.core.store
        deadline = time.monotonic() + 10
        while store.pending_events() and time.monotonic() < deadline:
            time.sleep(0.05)
        metrics = c.get("/metrics").text
    assert 'huiyi_change_events_outbox_depth{state="pending",tenant="default"} 0.0' in metrics
    assert 'huiyi_change_events_outbox_depth{state="dead",tenant="default"} 0.0' in metrics
    assert 'huiyi_change_events_oldest_undelivered_seconds{tenant="default"} 0.0' in metrics


def test_an_inferred_capture_with_tags_sends_one_event_for_its_memory(receiver):
    """POST …/memories with infer and metadata stores, then tags: the receiver gets one memory.added
    of version 1, not an added and a changed of the same version."""
    app = _app(receiver.url)
    with TestClient(app, client=LOOPBACK) as c:
        out = c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": ZH}], "metadata": {"src": "app"}}).json()
        ids = {r["memory"]["id"] for r in out["results"] if r["memory"]}
        assert ids
        got = receiver.wait(len(ids))
        time.sleep(2 * 1.0)  # two more looks of the sender: nothing else arrives
        got = receiver.got
    assert [(b["type"], b["data"]["version"]) for b in _delivered(got)] == [("memory.added", 1)] * len(ids)


def test_an_inferred_capture_writes_its_tags_with_the_memory(receiver):
    """POST …/memories with infer and metadata: each memory it stores holds the tags from its own write,
    so no later tagging (a ``metadata`` audit record, a second write) leaves a window in which the sender
    could deliver memory.added before the tags and then a memory.changed of the same version."""
    from memory.types import Namespace

    app = _app(receiver.url)
    with TestClient(app, client=LOOPBACK) as c:
        out = c.post("/v1/subjects/tg:43/memories", json={"messages": [{"text": ZH}], "metadata": {"src": "app"}}).json()
        stored = [r["memory"] for r in out["results"] if r["action"] == "stored"]
        store = app.state.pipeline.core.store
    assert stored and all(m["metadata"] == {"src": "app"} for m in stored)
    ns = Namespace("default", "tg:43")
    tagged = [r for r in store.audit_records(ns) if r["action"] == "metadata"]
    assert tagged == [], tagged
    assert all(store.get(ns, m["id"]).metadata == {"src": "app"} for m in stored)


def test_a_clean_shutdown_gives_back_what_the_sender_claimed():
    """The receiver hangs; the app stops while a delivery is in flight: the claimed event is due at
    once for the next sender (no 120 s lease to wait out), unclaimed."""
    gate = threading.Event()
    received = threading.Event()

    class Hang(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            received.set()
            gate.wait(30)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        app = _app(f"http://127.0.0.1:{server.server_port}/h", timeout_s=30)
        with TestClient(app, client=LOOPBACK) as c:
            c.post("/v1/subjects/tg:42/memories", json={"infer": False, "messages": [{"text": EN}]})
            assert received.wait(20)
            store = app.state.pipeline.core.store
        with store.engine.connect() as conn:
            from sqlalchemy import text

            (due_at, holder), = conn.execute(text("SELECT due_at, holder FROM change_events")).all()
        due = due_at if isinstance(due_at, datetime) else datetime.fromisoformat(due_at)
        assert holder is None and due.replace(tzinfo=timezone.utc) <= datetime.now(timezone.utc)
    finally:
        gate.set()
        server.shutdown()
        server.server_close()
