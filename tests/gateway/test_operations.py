"""Operators' view of a running gateway: /healthz and /readyz (database, index,
model; 503 when one is gone), Prometheus /metrics moving with turns, and JSON
log lines that carry the turn id and none of a person's words."""

from __future__ import annotations

import io
import json
import logging
import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import gateway.http.health
from gateway.http.app import create_app
from gateway.config import LLMSettings, TenantSettings, load_settings
from gateway.logs import configure_logging
from gateway.pipeline import Pipeline

DM = {"platform": "tg", "sender_id": "42", "sender_name": "小明", "chat_kind": "private", "chat_id": "42"}
SECRET_WORDS = "我的秘密：猫叫煤球🐈 and my PIN is zq7391！"


LOOPBACK = ("127.0.0.1", 50000)  # keyless /v1 answers loopback callers only (gateway.http.auth)

def _app(core, tenant: TenantSettings | None = None, **settings):
    s = load_settings(tenants={"default": tenant or TenantSettings()}, **settings)
    return create_app(s, pipeline=Pipeline(s, core))


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _samples(client: TestClient) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def _turn(client: TestClient, message_id: str, text: str) -> dict:
    r = client.post("/v1/turns", json={"message": {**DM, "message_id": message_id, "text": text}})
    assert r.status_code == 200, r.text
    return r.json()


def _gone(core) -> None:
    """Take the store's database away: the SQLite file deleted, the PostgreSQL schema dropped."""
    store = core.store
    if store.is_sqlite:
        store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(store.engine.url.database + suffix).unlink(missing_ok=True)
    else:
        import psycopg

        from conftest import PG_URL

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{store.schema}" CASCADE')
        store.close()


def test_healthz_and_readyz_answer_ok_with_every_check_named(core):
    """Alive and ready: /healthz is ok, /readyz 200 lists database, index and Telegram (aiogram loaded at
    start-up, issue 26 item 6) as ok (no model configured)."""
    with TestClient(_app(core), client=LOOPBACK) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        r = client.get("/readyz")
        assert r.status_code == 200
        assert r.json() == {"status": "ready", "checks": {"database": "ok", "index": "ok", "telegram": "ok",
                                                          "console_secret": "ok"}}


def test_gateways_on_one_database_with_different_console_secrets_are_not_ready(core, monkeypatch):
    """Two gateways over one database whose console secrets differ (each made its own, as behind the multi-host
    balancer, where half the console's requests bounced to the login page): /readyz of each says 503 naming
    console_secret and HUIYI_CONSOLE__SECRET; with the same secret both are ready, and the secret is in no row."""
    monkeypatch.setattr(gateway.http.health, "CACHE_S", 0.0)
    with TestClient(_app(core, console={"secret": "s3cret-one"}), client=LOOPBACK) as one, \
            TestClient(_app(core, console={"secret": "s3cret-two"}), client=LOOPBACK) as two:
        for client in (one, two):
            r = client.get("/readyz")
            assert r.status_code == 503, r.text
            check = r.json()["checks"]["console_secret"]
            assert check.startswith("failed: ") and "HUIYI_CONSOLE__SECRET" in check
        rows = _console_secret_rows(core)
        assert len(rows) == 2 and not any("s3cret" in str(r) for r in rows)
    assert _console_secret_rows(core) == []  # both stopped: their records went with them
    with TestClient(_app(core, console={"secret": "same"}), client=LOOPBACK) as one, \
            TestClient(_app(core, console={"secret": "same"}), client=LOOPBACK) as two:
        for client in (one, two):
            r = client.get("/readyz")
            assert r.status_code == 200 and r.json()["checks"]["console_secret"] == "ok"


def _console_secret_rows(core) -> list[tuple]:
    from sqlalchemy import text

    with core.store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT * FROM console_secrets")).all()]


def test_readyz_is_503_when_the_database_is_gone(core, monkeypatch):
    """With the database gone (SQLite file deleted, PostgreSQL schema dropped) /readyz
    answers 503 naming the database check — once the cached verdict expires — while /healthz stays 200."""
    with TestClient(_app(core), client=LOOPBACK) as client:
        assert client.get("/readyz").status_code == 200
        _gone(core)
        assert client.get("/readyz").status_code == 200  # the verdict of a moment ago is reused (CACHE_S)
        monkeypatch.setattr(gateway.http.health, "CACHE_S", 0.0)
        r = client.get("/readyz")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "not ready" and body["checks"]["database"].startswith("failed: ")
        assert body["checks"]["index"] == "ok"
        assert client.get("/healthz").status_code == 200


def test_readyz_checks_the_configured_model(sqlite_core, llm, monkeypatch):
    """A configured model that answers keeps the gateway ready; one whose server is
    down makes /readyz 503 naming that model, within the probe timeout."""
    monkeypatch.setattr(gateway.http.health, "CACHE_S", 0.0)
    up = TenantSettings(llm=LLMSettings(base_url=llm.base_url, model="fake-chat"))
    with TestClient(_app(sqlite_core, up), client=LOOPBACK) as client:
        r = client.get("/readyz")
        assert r.status_code == 200 and r.json()["checks"][f"model:{llm.base_url.rstrip('/')}"] == "ok"
    down_url = _closed_port_url()
    down = TenantSettings(llm=LLMSettings(base_url=down_url, model="fake-chat"))
    with TestClient(_app(sqlite_core, down), client=LOOPBACK) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["checks"][f"model:{down_url}"].startswith("failed: ")


def test_metrics_move_with_turns_and_each_app_keeps_its_own(sqlite_core, llm):
    """After turns: stage and recall latencies are observed, the fallback reason, the
    failed reply model call, and a re-delivered message are counted; the queue gauges
    are exported; a second app in the same process starts from zero."""
    tenant = TenantSettings(llm=LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=5))
    with TestClient(_app(sqlite_core, tenant), client=LOOPBACK) as client:
        before = _samples(client)
        assert before.get(("huiyi_turns_total", (("outcome", "replied"),)), 0) == 0
        llm.enqueue("好的，我记住了。")
        _turn(client, "1", "我养了一只叫煤球的猫 I have a cat")
        llm.enqueue(status=500)  # the reply model fails: an apology, and an error counted
        _turn(client, "2", "你还记得我的猫吗？")
        dup = _turn(client, "2", "你还记得我的猫吗？")
        assert dup["duplicate"] is True
        m = _samples(client)
    assert m[("huiyi_turns_total", (("outcome", "replied"),))] == 2  # the apology is a reply too
    assert m[("huiyi_turns_total", (("outcome", "duplicate"),))] == 1
    assert m[("huiyi_deliveries_deduplicated_total", (("by", "id_or_content"),))] == 1
    assert m[("huiyi_turn_stage_seconds_count", (("stage", "total"),))] == 2
    assert m[("huiyi_turn_stage_seconds_count", (("stage", "recall"),))] == 2
    assert m[("huiyi_turn_stage_seconds_count", (("stage", "reply"),))] == 2
    assert m[("huiyi_recall_seconds_count", ())] == 2
    assert m[("huiyi_model_errors_total", (("error", "LLMError"), ("purpose", "reply")))] == 1
    assert sum(v for (name, _), v in m.items() if name == "huiyi_reconstruction_fallbacks_total") == 2
    assert ("huiyi_index_outbox_depth", ()) in m
    assert m[("huiyi_capture_queue_depth", (("where", "database"),))] == 0  # captured in the turn
    assert ("huiyi_capture_queue_depth", (("where", "process"),)) in m
    with TestClient(_app(sqlite_core), client=LOOPBACK) as other:
        assert _samples(other).get(("huiyi_turns_total", (("outcome", "replied"),)), 0) == 0


@pytest.fixture
def json_log():
    """The process's logging set up as ``huiyi serve`` does, into a buffer; restored afterwards."""
    import structlog

    root = logging.getLogger()
    level = root.level
    buf = io.StringIO()
    handlers: list[logging.Handler] = []

    def setup(allow_text: bool = False) -> io.StringIO:
        buf.seek(0)
        buf.truncate()
        handlers.append(configure_logging(json_logs=True, allow_text=allow_text, stream=buf))
        return buf

    yield setup
    for h in handlers:
        root.removeHandler(h)
    root.setLevel(level)
    structlog.reset_defaults()


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_json_log_lines_carry_the_turn_id_and_no_message_text(sqlite_core, llm, json_log):
    """Every line a turn writes is one JSON object with the turn's id (its warnings,
    and lines written in its worker threads, too); the turn ends with a 'turn done' line of ids and latencies; neither the
    person's words nor the reply appear anywhere while the privacy switch is off."""
    tenant = TenantSettings(llm=LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=5))
    buf = json_log()
    with TestClient(_app(sqlite_core, tenant), client=LOOPBACK) as client:
        llm.enqueue(status=500)  # a warning inside the turn: reply failed
        _turn(client, "1", SECRET_WORDS)
        _turn(client, "1", SECRET_WORDS)  # a duplicate: its own turn id
    lines = _lines(buf)
    done = [x for x in lines if x["event"] == "turn done"]
    assert len(done) == 1 and done[0]["level"] == "info" and done[0]["logger"] == "gateway.pipeline"
    turn = done[0]["turn_id"]
    assert len(turn) == 16 and done[0]["namespace"] == "default/tg:42" and "total" in done[0]["latency_ms"]
    assert "text" not in done[0] and "reply" not in done[0]
    failed = [x for x in lines if x["event"].startswith("reply failed")]
    assert failed and all(x["turn_id"] == turn and x["level"] == "warning" for x in failed)
    captured = [x for x in lines if x["logger"] == "memory.capture"]  # written in a worker thread
    assert captured and all(x.get("turn_id") == turn for x in captured)
    dups = [x for x in lines if x["event"].startswith("duplicate delivery")]
    assert dups and dups[0]["turn_id"] != turn
    raw = buf.getvalue()
    for words in ("煤球", "zq7391", "秘密", "I can't answer", "Sorry"):
        assert words not in raw


def test_privacy_switch_lets_the_words_into_the_turn_line(sqlite_core, json_log):
    """With ``audit_fragments`` on (the one privacy switch) the 'turn done' line also carries the message text."""
    buf = json_log(allow_text=True)
    s = load_settings(tenants={"default": TenantSettings()}, audit_fragments=True)
    with TestClient(create_app(s, pipeline=Pipeline(s, sqlite_core)), client=LOOPBACK) as client:
        _turn(client, "1", SECRET_WORDS)
    done = [x for x in _lines(buf) if x["event"] == "turn done"]
    assert len(done) == 1 and done[0]["text"] == SECRET_WORDS


def test_example_dashboard_queries_only_metrics_the_gateway_exports(sqlite_core):
    """docs/grafana-dashboard.json asks only for metric names a pipeline's registry has."""
    import re

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    asked = {name for p in dashboard["panels"] for t in p["targets"] for name in re.findall(r"huiyi_\w+", t["expr"])}
    p = Pipeline(load_settings(), sqlite_core)
    exported = {s.name for fam in p.metrics.registry.collect() for s in fam.samples} | \
               {f"{fam.name}_bucket" for fam in p.metrics.registry.collect() if fam.type == "histogram"} | \
               {f"{fam.name}_total" for fam in p.metrics.registry.collect() if fam.type == "counter"} | \
               {fam.name for fam in p.metrics.registry.collect()}
    assert asked and asked <= exported, asked - exported


@pytest.mark.parametrize("path, fails", [("", "HTTP 404"), ("/nowhere", "HTTP 404")])
def test_readyz_calls_a_wrong_model_url_not_ready_and_names_it(sqlite_core, llm, monkeypatch, path, fails):
    """Issue 26.11: a 404 from a wrong path (the server root without /v1, a typo) was "ok" (any answer under 500);
    now /readyz is 503 and the check names the URL and what to look at."""
    monkeypatch.setattr(gateway.http.health, "CACHE_S", 0.0)
    wrong = llm.base_url.removesuffix("/v1") + path
    t = TenantSettings(llm=LLMSettings(base_url=wrong, model="fake-chat"))
    with TestClient(_app(sqlite_core, t), client=LOOPBACK) as client:
        r = client.get("/readyz")
    check = r.json()["checks"][f"model:{wrong}"]
    assert r.status_code == 503 and check.startswith("failed: ") and fails in check and "/v1" in check
