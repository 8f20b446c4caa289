"""Fake platform APIs on 127.0.0.1 for the bridge tests, one per seam:

- ``FakeTelegram``: the Bot API (``/bot<token>/<method>``) as aiogram's session
  calls it; records every call's method and decoded parameters, answers
  ``sendMessage`` with a real Message object, serves queued updates to
  ``getUpdates``, and can answer a chat with a scripted error (e.g. the
  "group was upgraded to a supergroup" migration error), always (``errors``)
  or once each, in order (``fail_next``: a "thread not found" error only
  answers a call that names a thread).
- ``FakeWeChatAPI``: the OA/WeCom token and message endpoints; records sends.
- ``FakeCallback``: a receiver for generic-webhook callbacks; records bodies
  and headers.
- ``FakeOneBotAPI``: a OneBot v11 implementation's HTTP API (``send_msg``);
  records bodies and headers.

Each runs uvicorn in a thread (like ``fake_openai``); tests clear ``calls``
between uses with ``reset()``.

This module is also a pytest plugin (``pytest_plugins`` in tests/conftest.py):
it provides the fixtures of the bridge runtime tests and NoneBot's init
arguments for nonebug, which initialises NoneBot once per test session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from urllib.parse import parse_qsl

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fake_openai import LoopbackServer


class _Server(LoopbackServer):
    """A loopback fake with a polling helper for asynchronous deliveries."""

    def wait_for(self, predicate, timeout: float = 10.0) -> bool:
        """Poll ``predicate()`` until true or ``timeout`` seconds pass."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()


def _decode(value: str):
    try:
        return json.loads(value)
    except ValueError:
        return value


class FakeTelegram(_Server):
    """The Bot API. ``calls``: ``[(method, params)]`` with JSON-looking values decoded
    (so ``chat_id`` is an int, ``reply_parameters`` a dict)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.updates: deque[dict] = deque()
        self.errors: dict[int, dict] = {}
        self.fail_next: deque[dict] = deque()
        self._next_id = 1000
        super().__init__()

    def reset(self) -> None:
        self.calls.clear()
        self.updates.clear()
        self.errors.clear()
        self.fail_next.clear()

    def sent(self) -> list[dict]:
        """Parameters of every successful-or-not sendMessage call, in order."""
        return [p for m, p in self.calls if m == "sendmessage"]

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/bot{token}/{method}")
        async def call(token: str, method: str, request: Request):
            raw = (await request.body()).decode("utf-8")
            ctype = request.headers.get("content-type", "")
            if "json" in ctype:
                params = json.loads(raw or "{}")
            else:
                params = {k: _decode(v) for k, v in parse_qsl(raw, keep_blank_values=True)}
            name = method.lower()
            self.calls.append((name, params))
            if name == "sendmessage":
                chat_id = int(params["chat_id"])
                if chat_id in self.errors:
                    return JSONResponse(self.errors[chat_id], status_code=self.errors[chat_id]["error_code"])
                if self.fail_next:  # scripted one-off errors, in order (then the call succeeds)
                    error = self.fail_next.popleft()
                    if "message_thread_id" in params or "thread" not in error["description"]:
                        return JSONResponse(error, status_code=error["error_code"])
                self._next_id += 1
                kind = "private" if chat_id > 0 else "supergroup"
                result = {"message_id": self._next_id, "date": int(time.time()), "text": params.get("text", ""),
                          "chat": {"id": chat_id, "type": kind}}
                if "message_thread_id" in params:
                    result["message_thread_id"] = int(params["message_thread_id"])
                return {"ok": True, "result": result}
            if name == "getupdates":
                batch = list(self.updates)
                self.updates.clear()
                if not batch:
                    await asyncio.sleep(0.05)
                return {"ok": True, "result": batch}
            if name == "getme":
                return {"ok": True, "result": {"id": int(token.split(":")[0]), "is_bot": True, "first_name": "huiyi",
                                               "username": "huiyi_bot"}}
            return {"ok": True, "result": True}

        return app


class FakeWeChatAPI(_Server):
    """OA ``/cgi-bin/stable_token`` + ``/cgi-bin/message/custom/send`` and WeCom
    ``/cgi-bin/gettoken`` + ``/cgi-bin/message/send``. ``sends``: message bodies;
    ``token_calls``: how many tokens were handed out; ``fail_next``: scripted
    one-off answers to the next send calls, in order (``(http_status, body)``)."""

    def __init__(self) -> None:
        self.sends: list[dict] = []
        self.attempts = 0
        self.token_calls = 0
        self.fail_next: deque[tuple[int, dict]] = deque()
        super().__init__()

    def reset(self) -> None:
        self.sends.clear()
        self.attempts = 0
        self.token_calls = 0
        self.fail_next.clear()

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        def token():
            self.token_calls += 1
            return {"access_token": f"TOKEN{self.token_calls}", "expires_in": 7200}

        @app.post("/cgi-bin/stable_token")
        async def stable_token():
            return token()

        @app.get("/cgi-bin/gettoken")
        async def gettoken():
            return token()

        @app.post("/cgi-bin/message/custom/send")
        @app.post("/cgi-bin/message/send")
        async def send(request: Request, access_token: str = ""):
            if not access_token.startswith("TOKEN"):
                return {"errcode": 40001, "errmsg": "invalid credential"}
            self.attempts += 1
            if self.fail_next:
                status, body = self.fail_next.popleft()
                return JSONResponse(body, status_code=status)
            self.sends.append(await request.json())
            return {"errcode": 0, "errmsg": "ok"}

        return app


class FakeCallback(_Server):
    """Receives generic-webhook callbacks at ``/callback``: ``received`` holds
    ``(headers, raw body)`` pairs of the accepted ones; ``fail_next`` scripts
    one-off status codes for the next calls (``attempts`` counts every call)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, bytes]] = []
        self.fail_next: deque[int] = deque()
        self.attempts = 0
        super().__init__()

    def reset(self) -> None:
        self.received.clear()
        self.fail_next.clear()
        self.attempts = 0

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/callback")
        async def callback(request: Request):
            self.attempts += 1
            if self.fail_next:
                status = self.fail_next.popleft()
                return JSONResponse({"ok": False}, status_code=status,
                                    headers={"Retry-After": "1"} if status == 429 else None)
            self.received.append((dict(request.headers), await request.body()))
            return {"ok": True}

        return app


class FakeOneBotAPI(_Server):
    """A OneBot v11 implementation's HTTP API (``/send_msg``, what NapCat or
    go-cqhttp serve at their API root): ``sends`` holds ``(headers, body)`` of
    the accepted calls; ``fail_next`` scripts one-off ``(http_status, body)``
    answers for the next calls (``attempts`` counts every call)."""

    def __init__(self) -> None:
        self.sends: list[tuple[dict, dict]] = []
        self.fail_next: deque[tuple[int, dict]] = deque()
        self.attempts = 0
        super().__init__()

    def reset(self) -> None:
        self.sends.clear()
        self.fail_next.clear()
        self.attempts = 0

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/send_msg")
        async def send_msg(request: Request):
            self.attempts += 1
            if self.fail_next:
                status, body = self.fail_next.popleft()
                return JSONResponse(body, status_code=status)
            self.sends.append((dict(request.headers), await request.json()))
            return {"status": "ok", "retcode": 0, "data": {"message_id": 7000 + len(self.sends)}}

        return app


# -- pytest plugin ---------------------------------------------------------

#: The OneBot credentials NoneBot is initialised with (nonebug reads them once).
ONEBOT_TOKEN = "qq-access-token"
ONEBOT_SECRET = "qq-signing-secret"


def pytest_configure(config: pytest.Config) -> None:
    from nonebug import NONEBOT_INIT_KWARGS

    config.stash[NONEBOT_INIT_KWARGS] = {"driver": "~fastapi", "onebot_access_token": ONEBOT_TOKEN,
                                         "onebot_secret": ONEBOT_SECRET}


@pytest.fixture(scope="session")
def fake_telegram_server():
    server = FakeTelegram().start()
    yield server
    server.stop()


@pytest.fixture
def fake_telegram(fake_telegram_server):
    """The fake Bot API with no calls, updates or scripted errors."""
    fake_telegram_server.reset()
    return fake_telegram_server


@pytest.fixture(scope="session")
def fake_wechat_server():
    server = FakeWeChatAPI().start()
    yield server
    server.stop()


@pytest.fixture
def fake_wechat(fake_wechat_server):
    """The fake WeChat reply API with no sends."""
    fake_wechat_server.reset()
    return fake_wechat_server


@pytest.fixture(scope="session")
def fake_onebot_server():
    server = FakeOneBotAPI().start()
    yield server
    server.stop()


@pytest.fixture
def fake_onebot(fake_onebot_server):
    """The fake OneBot HTTP API with no calls."""
    fake_onebot_server.reset()
    return fake_onebot_server


@pytest.fixture(scope="session")
def fake_callback_server():
    server = FakeCallback().start()
    yield server
    server.stop()


@pytest.fixture
def fake_callback(fake_callback_server):
    """The fake generic-webhook callback receiver, empty."""
    fake_callback_server.reset()
    return fake_callback_server


def _settling_client():
    from fastapi.testclient import TestClient

    class SettlingClient(TestClient):
        """A TestClient of the real app that, after each request to a platform
        webhook (``/telegram/``, ``/onebot/``, ``/wechat/``: they answer once the
        message is claimed, before the reply — ``bridges.ack``), waits until
        every acknowledged turn has sent its reply and captured (``settle``), so
        a test reads the end state. Inside ``with client.unsettled():`` it does
        not wait: the test sees the answer alone."""

        settling = True

        def request(self, method, url, *args, **kwargs):
            response = super().request(method, url, *args, **kwargs)
            if self.settling and str(url).startswith(("/telegram/", "/onebot/", "/wechat/")):
                self.settle()
            return response

        def settle(self, timeout: float = 60.0) -> None:
            """Wait for the turns the platform routes acknowledged early, their
            replies, then every capture queued after an answer."""
            state = self.app.state
            for name in ("telegram", "onebot", "wechat"):
                runtime = getattr(state, name, None)
                if runtime is not None:
                    assert self.portal.call(runtime.turns.idle, timeout), f"{name} turns still running"
            assert self.portal.call(state.pipeline.drain, timeout), "captures still running"

        @contextlib.contextmanager
        def unsettled(self):
            self.settling = False
            try:
                yield self
            finally:
                self.settling = True

    return SettlingClient


@pytest.fixture
def gateway(llm, monkeypatch):
    """Factory: ``gateway(**tenant_fields)`` → a running TestClient of the real app
    (SQLite + LanceDB under the per-test data root) whose ``default`` tenant has
    these fields and the fake chat model. ``gateway.settings_overrides`` go to
    ``load_settings``. The client settles after platform webhooks
    (``SettlingClient``: ``client.settle()``, ``with client.unsettled():``)."""
    from fastapi.testclient import TestClient

    from gateway.http.app import create_app
    from gateway.config import TenantSettings, load_settings

    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    clients: list[TestClient] = []
    settling = _settling_client()

    def make(*, settings_overrides: dict | None = None, **tenant: object) -> TestClient:
        settings = load_settings(tenants={"default": TenantSettings(**tenant)}, **(settings_overrides or {}))
        client = settling(create_app(settings), client=("127.0.0.1", 50000))  # loopback: keyless /v1 (gateway.http.auth)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        _close_bot_sessions(client)
        client.__exit__(None, None, None)


def _close_bot_sessions(client) -> None:
    """Close the aiohttp sessions of the app's Telegram bots once their turns are idle, before the app stops.
    aiogram's ``AiohttpSession.close`` then sleeps 250 ms for TLS connections to shut down (aiohttp's graceful
    shutdown advice); the fake Bot API is plain HTTP on loopback, with no TLS connection to wait for, and that
    sleep was a quarter of a second of every test that sent a Telegram reply. The runtime's own ``close`` still
    runs at the app's shutdown and finds the sessions closed."""
    telegram = getattr(client.app.state, "telegram", None)
    if telegram is None or client.portal is None:  # the app never started, or the test stopped it already
        return

    async def close() -> None:
        await telegram.turns.idle(30.0)
        for bot in list(telegram._bots.values()):
            session = getattr(bot.session, "_session", None)
            if session is not None and not session.closed:
                await session.close()

    client.portal.call(close)
