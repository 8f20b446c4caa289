"""/v1 rate limits (gateway.http.ratelimit): a key or an address over its limit gets 429 with Retry-After
before its body is read (nothing written), counted in /metrics; limits are per tenant; Redis storage
shares the counts between gateways (a restart or another replica), memory storage does not; a failing
storage lets calls through; the platform webhooks are not limited."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from fastapi.testclient import TestClient

from gateway.config import ConfigError, RateLimitSettings, TenantRateLimits, TenantSettings, load_settings
from gateway.http.app import create_app
from memory.types import Namespace

LOOPBACK = ("127.0.0.1", 50000)
REDIS = os.environ.get("HUIYI_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ZH = "我养了一只叫煤球的黑猫"
EN = "I love hiking in the Alps every summer"


def _settings(data_dir=None, storage="memory://", address="600/minute", exempt_loopback=True, strategy="moving-window",
              **tenant_limits):
    """Tenants default (its rate limits ``tenant_limits``) and other (the defaults); ``address``: the gateway-wide per_address."""
    limits = TenantRateLimits(**tenant_limits)
    extra = {"data_dir": data_dir} if data_dir else {}
    return load_settings(rate_limit=RateLimitSettings(storage_uri=storage, per_address=address,
                                                      exempt_loopback=exempt_loopback, strategy=strategy),
                         tenants={"default": TenantSettings(language="en", rate_limit=limits),
                                  "other": TenantSettings(language="zh_CN")}, **extra)


def _remote() -> tuple[str, int]:
    """A documentation address (RFC 3849) of its own per test: the ASGI scope's client, no traffic;
    Redis counts from earlier runs never meet it."""
    return f"2001:db8::{uuid.uuid4().hex[:4]}", 40000


def _capture(client: TestClient, subject: str, text: str):
    return client.post(f"/v1/subjects/{subject}/memories", json={"messages": [{"text": text}], "infer": False})


def _metric(client: TestClient, line_start: str) -> float:
    body = client.get("/metrics").text
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(line_start)]
    return sum(values)


def test_a_leaked_member_key_gets_429_with_retry_after_and_writes_nothing():
    """A member key over per_member_key is refused (429, Retry-After in seconds, ErrorOut) before its body
    is read: the refused zh/en lines are not stored; another member key and the admin key still work;
    the refusals are counted in /metrics by limit and tenant."""
    app = create_app(_settings(per_member_key="2/minute", per_admin_key="100/minute"))
    with TestClient(app, client=LOOPBACK) as local:
        s = app.state.pipeline.core.store
        leaked = s.create_api_key("default", "member", "tg:42")[1]
        other = s.create_api_key("default", "member", "tg:43")[1]
        admin = s.create_api_key("default", "admin")[1]
        flood = TestClient(app, client=_remote(), headers={"X-API-Key": leaked})
        assert _capture(flood, "tg:42", ZH).status_code == 200
        assert _capture(flood, "tg:42", EN).status_code == 200
        refused = _capture(flood, "tg:42", "我换了新工作 and moved to Berlin")
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert refused.json()["error"] == "RateLimited" and "API key" in refused.json()["detail"]
        texts = [m.text for m in app.state.pipeline.core.list(Namespace("default", "tg:42"))]
        assert sorted(texts) == sorted([ZH, EN])
        assert flood.get("/v1/subjects/tg:42/memories").status_code == 429  # every route, reads too
        assert _capture(TestClient(app, client=_remote(), headers={"X-API-Key": other}), "tg:43", EN).status_code == 200
        admin_client = TestClient(app, client=_remote(), headers={"X-API-Key": admin})
        assert admin_client.get("/v1/subjects/tg:42/memories").json()["total"] == 2
        assert _metric(local, 'huiyi_rate_limited_total{limit="key",tenant="default"}') == 2


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter", "fixed-window"])
def test_the_address_limit_counts_before_the_key_and_spares_loopback(strategy):
    """per_address refuses the third call from one remote address even with wrong keys (401 before that),
    so a flood of guessed keys stops too; loopback is not counted unless exempt_loopback is off; the same
    with each of the limits package's strategies."""
    app = create_app(_settings(address="2/minute", strategy=strategy))
    with TestClient(app, client=LOOPBACK) as local:
        guesser = TestClient(app, client=_remote(), headers={"X-API-Key": "hy_wrong"})
        assert [guesser.get("/v1/subjects/tg:42/memories").status_code for _ in range(3)] == [401, 401, 429]
        assert [local.get("/v1/subjects/tg:42/memories").status_code for _ in range(4)] == [200] * 4
        assert _metric(local, 'huiyi_rate_limited_total{limit="address",tenant=""}') == 1
    strict = create_app(_settings(address="2/minute", exempt_loopback=False))
    with TestClient(strict, client=LOOPBACK) as local:
        assert [local.get("/v1/subjects/tg:42/memories").status_code for _ in range(3)] == [200, 200, 429]


def test_limits_are_per_tenant_and_a_tenant_may_limit_an_address():
    """Tenant default's per_address caps one address across its keys; tenant other keeps its defaults."""
    app = create_app(_settings(address=None, per_admin_key=None, per_address="3/minute"))
    with TestClient(app, client=LOOPBACK):
        s = app.state.pipeline.core.store
        keys = [s.create_api_key("default", "admin")[1] for _ in range(2)]
        other = s.create_api_key("other", "admin")[1]
        where = _remote()
        codes = [TestClient(app, client=where, headers={"X-API-Key": keys[n % 2]}).get("/v1/subjects/tg:1/memories")
                 .status_code for n in range(4)]
        assert codes == [200, 200, 200, 429]
        assert TestClient(app, client=where, headers={"X-API-Key": other}).get(
            "/v1/subjects/tg:1/memories").status_code == 200


def test_platform_webhooks_are_not_rate_limited():
    """The platform routes answer as before (401 unsigned here), never 429, past the /v1 address limit."""
    app = create_app(_settings(address="1/minute"))
    with TestClient(app, client=LOOPBACK):
        platform = TestClient(app, client=_remote())
        codes = {platform.post("/webhook/default", json={"text": "hi"}).status_code for _ in range(3)}
        codes |= {platform.post("/telegram/default", json={"update_id": 1}).status_code for _ in range(3)}
        assert 429 not in codes and codes == {401}


def test_bad_limits_are_refused_when_the_settings_load(monkeypatch):
    """A limit the limits package cannot read, or a storage it cannot use, is a ConfigError naming the key."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__RATE_LIMIT__PER_MEMBER_KEY", "lots per minute")
    with pytest.raises(ConfigError, match="(?i)per_member_key"):
        load_settings()
    monkeypatch.delenv("HUIYI_TENANTS__DEFAULT__RATE_LIMIT__PER_MEMBER_KEY")
    monkeypatch.setenv("HUIYI_RATE_LIMIT__STORAGE_URI", "memcached://127.0.0.1:11211")
    with pytest.raises(ConfigError, match="(?i)storage_uri"):
        load_settings()
    monkeypatch.setenv("HUIYI_RATE_LIMIT__STORAGE_URI", REDIS)
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__RATE_LIMIT__PER_ADMIN_KEY", "30/second;1000/hour")
    cfg = load_settings()
    assert cfg.rate_limit.storage_uri == REDIS and cfg.tenants["default"].rate_limit.per_admin_key == "30/second;1000/hour"


def _redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url():
    """The Redis of the test machine; skipped where there is none, except under CI=true."""
    if not _redis_up():
        if os.environ.get("CI") == "true":
            pytest.fail("Redis at 127.0.0.1:6379 is unreachable and CI=true")
        pytest.skip("Redis unreachable")
    return REDIS


@pytest.mark.parametrize("storage", ["redis", "memory"])
def test_redis_counts_are_shared_by_gateways_and_memory_counts_are_not(tmp_path, redis_url, storage):
    """Two gateways one after the other on the same data (a restart, or the next replica): with Redis the
    second refuses a key the first used up; with memory:// each counts alone."""
    uri = redis_url if storage == "redis" else "memory://"
    where = _remote()
    first = create_app(_settings(tmp_path / "data", storage=uri, per_admin_key="2/minute"))
    with TestClient(first, client=LOOPBACK):
        key = first.state.pipeline.core.store.create_api_key("default", "admin")[1]
        a = TestClient(first, client=where, headers={"X-API-Key": key})
        assert [_capture(a, "tg:7", text).status_code for text in (ZH, EN)] == [200, 200]
    second = create_app(_settings(tmp_path / "data", storage=uri, per_admin_key="2/minute"))
    with TestClient(second, client=LOOPBACK):
        b = TestClient(second, client=where, headers={"X-API-Key": key})
        assert _capture(b, "tg:7", "第三句").status_code == (429 if storage == "redis" else 200)


def test_a_failing_storage_lets_calls_through_and_is_counted():
    """Redis that does not answer (a closed loopback port) never takes /v1 down: calls succeed, each
    counted in huiyi_rate_limit_errors_total."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(_settings(storage=f"redis://127.0.0.1:{port}/0", per_admin_key="1/minute"))
    with TestClient(app, client=LOOPBACK) as local:
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        c = TestClient(app, client=_remote(), headers={"X-API-Key": key})
        assert [_capture(c, "tg:8", text).status_code for text in (ZH, EN)] == [200, 200]
        assert _metric(local, "huiyi_rate_limit_errors_total") >= 2


def test_the_in_process_storage_is_never_let_through_on_a_slow_loop():
    """timeout_s bounds networked storage only: with memory:// and a timeout no call could meet (1 µs),
    the limit still refuses; CI at load 30 once let a third call through when the loop came back late."""
    settings = _settings(per_member_key="1/minute")
    settings.rate_limit.timeout_s = 1e-6
    app = create_app(settings)
    with TestClient(app, client=LOOPBACK) as local:
        key = app.state.pipeline.core.store.create_api_key("default", "member", "tg:42")[1]
        c = TestClient(app, client=_remote(), headers={"X-API-Key": key})
        assert [c.get("/v1/subjects/tg:42/memories").status_code for _ in range(3)] == [200, 429, 429]
        assert _metric(local, "huiyi_rate_limit_errors_total") == 0
