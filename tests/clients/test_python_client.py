"""The Python client (clients/python/huiyi_client) against the real gateway: the async
client over httpx's ASGI transport, the sync one over a real loopback socket (uvicorn on
a free port); typed results, errors mapped to exception classes, zh and en content; and
the client imports nothing of the gateway."""

from __future__ import annotations

import ast
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fake_openai import served as serve_app

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "clients" / "python"
sys.path.insert(0, str(CLIENT_DIR))

from huiyi_client import (AsyncHuiyi, AuthError, BadRequest, ForbiddenError, Hit, Huiyi, HuiyiError, Memory,  # noqa: E402
                          Message, NotFound, Receipt, Unavailable, Unreachable, Why, Withdrawn)

from gateway.http.app import create_app  # noqa: E402
from gateway.config import TenantSettings, load_settings  # noqa: E402

ZH = "我养了一只叫煤球的黑猫"
EN = "My sister Lily lives in Toronto 🇨🇦"


def _settings():
    return load_settings(tenants={"default": TenantSettings(language="en"), "other": TenantSettings()})


#: Optional integrations of the client and the one framework each may import besides the client.
#: embedded.py runs the gateway itself in the process, imported only when called (huiyi_client.embedded).
EXTRAS = {"aiogram.py": {"aiogram"}, "embedded.py": {"gateway"}}


def test_the_client_imports_only_httpx_and_the_standard_library():
    """huiyi_client needs neither the gateway nor its heavy dependencies: its imports are httpx and stdlib
    (an optional integration module also its own framework, e.g. aiogram)."""
    for path in (CLIENT_DIR / "huiyi_client").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tops = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
        tops |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and not node.level}
        third_party = tops - set(sys.stdlib_module_names) - {"__future__", "huiyi_client"}
        assert third_party <= {"httpx"} | EXTRAS.get(path.name, set()), (path, third_party)
        assert "httpx" in third_party or path.name in EXTRAS


@pytest.fixture
def app():
    """The real app, started (lifespan) by a loopback TestClient."""
    application = create_app(_settings())
    with TestClient(application, client=("127.0.0.1", 50000)):
        yield application


def _asgi(app, key: str | None = None, **kw) -> AsyncHuiyi:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    return AsyncHuiyi(api_key=key, http=httpx.AsyncClient(transport=transport, base_url="http://huiyi"), **kw)


async def test_async_client_runs_every_verb_with_typed_results(app):
    """capture → search (explain) → list → get → update → history → recollect → record_reply → export →
    import → delete → forget_subject, each returning its dataclass, in Chinese and English."""
    key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
    async with _asgi(app, key) as hy:
        added = await hy.capture("tg:42", [Message(ZH, message_id="1")], chat="tg:private:42")
        (stored,) = [a for a in added if a.action == "stored"]
        assert isinstance(stored.memory, Memory) and "煤球" in stored.memory.text
        verbatim = await hy.capture("tg:42", [EN], infer=False)
        assert verbatim[0].memory.text == EN
        hits = await hy.search("tg:42", "煤球", explain=True)
        assert isinstance(hits[0], Hit) and hits[0].memory.id == stored.memory.id and hits[0].parts.rrf > 0
        page = await hy.list("tg:42", limit=1)
        assert page.total == 2 and len(page.items) == 1
        assert (await hy.get("tg:42", stored.memory.id)).created_at.tzinfo is not None
        edited = await hy.update("tg:42", stored.memory.id, "煤球是一只黑猫，九岁了")
        assert edited.version == 2
        assert [v.version for v in await hy.history("tg:42", stored.memory.id)] == [1, 2]
        rec = await hy.recollect("tg:42", ["煤球最近还好吗？"], chat="tg:private:42")
        assert stored.memory.id in rec.sources and rec.prompt[0]["role"] == "system"
        assert await hy.record_reply("tg:42", "Of course, 煤球!") == "tg:private:42"
        doc = await hy.export("tg:42")
        assert (await hy.export("tg:42", chat="tg:group:-100"))["memories"] == []  # nothing was said in that group
        imported = await hy.import_memories("qq:10001", doc)
        by_source = {r.source_id: r for r in imported}
        # the edited memory is imported with its history: v1 stored, then v2 supersedes it
        assert by_source[stored.memory.id].action == "superseded" and by_source[verbatim[0].memory.id].action == "stored"
        moved = by_source[stored.memory.id].memory_id
        assert [v.text for v in await hy.history("qq:10001", moved)] == [ZH, "煤球是一只黑猫，九岁了"]
        why = await hy.why("tg:42", stored.memory.id, chat="tg:private:42", lang="zh_CN")
        assert isinstance(why, Why) and why.verdict == "recalled" and why.rank == 1 and "想起" in why.text, why
        with pytest.raises(NotFound):
            await hy.why("tg:42", stored.memory.id, turn="0123456789abcdef")
        with pytest.raises(BadRequest):
            await hy.why("tg:42", stored.memory.id, turn="yesterday")
        receipt = await hy.delete("tg:42", stored.memory.id)
        assert isinstance(receipt, Receipt) and receipt.memories == 1 and receipt.tombstones >= 1, receipt
        assert (await hy.why("tg:42", stored.memory.id, lang="en")).verdict == "forgotten"
        with pytest.raises(NotFound) as err:
            await hy.get("tg:42", stored.memory.id)
        assert err.value.status == 404 and err.value.error == "NotFoundError"
        said = await hy.capture("tg:42", [Message("I started learning the cello 🎻", message_id="7")],
                                chat="tg:private:42")
        taken = await hy.forget_last("tg:42", "tg:private:42", "10分钟")
        assert isinstance(taken, Withdrawn) and taken.ids == tuple(a.memory.id for a in said if a.memory), taken
        assert taken.receipt.tombstones == 0 and taken.lines == 1
        with pytest.raises(BadRequest) as err:
            await hy.forget_last("tg:42", "tg:private:42", "99999h")
        assert "too long" in str(err.value.detail)
        assert await hy.forget_subject("qq:10001") == 2



async def test_a_hit_found_only_through_the_line_it_answered_has_via_context(app):
    """``Hit.via_context``: the search hit of a line that answered the companion's question on the topic
    (and says nothing of it) is marked, in zh and en; a hit whose text says it is not."""
    key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
    async with _asgi(app, key) as hy:
        for subject, topic, asked, other, query in (
                ("tg:42", "I ran my first marathon in Berlin", "How was the marathon training?",
                 "My sister Anna lives in Toronto", "marathon"),
                ("tg:43", "我跑完了人生第一个马拉松", "这周马拉松训练怎么样？", "我姐姐安娜住在多伦多", "马拉松")):
            await hy.capture(subject, [topic, Message(asked, role="assistant"), other], infer=False)
            marks = {h.memory.text: h.via_context for h in await hy.search(subject, query)}
            assert marks == {topic: False, other: True}, marks


async def test_async_client_maps_refusals_to_exceptions(app):
    """Wrong key → AuthError; member key on another person → ForbiddenError; a bad subject → BadRequest."""
    store = app.state.pipeline.core.store
    async with _asgi(app, "hy_0123456789ab_" + "x" * 43) as wrong:
        with pytest.raises(AuthError):
            await wrong.list("tg:42")
    member = store.create_api_key("default", "member", "tg:42")[1]
    async with _asgi(app, member) as hy:
        assert (await hy.list("tg:42")).total == 0
        with pytest.raises(ForbiddenError):
            await hy.search("tg:43", "猫")
        with pytest.raises(BadRequest):
            await hy.list("TG:42")


@pytest.fixture
def served():
    """The real app under uvicorn (lifespan on) on a free 127.0.0.1 port; yields its base URL and app."""
    application = create_app(_settings())
    with serve_app(application) as url:
        yield url, application


def test_sync_client_over_a_loopback_socket(served):
    """Keyless from 127.0.0.1 on a keyless tenant works (tenant chosen with tenant=); once the tenant has a
    key, keyless is refused and the key works: the bot's flow recollect → own model → record reply → capture."""
    url, application = served
    with Huiyi(url, tenant="other") as local:
        assert local.capture("qq:10001", ["我最喜欢的水果是芒果🥭"])[0].action == "stored"
        assert local.list("qq:10001").total == 1
    key = application.state.pipeline.core.store.create_api_key("default", "admin")[1]
    with Huiyi(url) as keyless:
        with pytest.raises(AuthError):
            keyless.list("tg:7")
    with Huiyi(url, api_key=key) as hy:
        hy.capture("tg:7", ["I'm allergic to peanuts", Message("Noted!", role="assistant")], chat="tg:private:7")
        rec = hy.recollect("tg:7", ["Is a snack with peanuts ok for me?"], chat="tg:private:7")
        assert rec.sources and "peanut" in rec.text.lower()
        assert hy.record_reply("tg:7", "How about some fruit? 🍎") == "tg:private:7"
        again = hy.recollect("tg:7", chat="tg:private:7")
        assert {"role": "assistant", "content": "How about some fruit? 🍎"} in again.prompt
        turn = hy.turn({"platform": "tg", "message_id": "t1", "sender_id": "7", "chat_kind": "private",
                        "chat_id": "7", "text": "which nuts am I allergic to?"})
        assert turn.reply is None and turn.recalled and turn.namespace == "default/tg:7"
        said = hy.turn({"platform": "tg", "message_id": "t2", "sender_id": "7", "chat_kind": "private",
                        "chat_id": "7", "text": "我对芒果过敏。"})
        assert said.captured and hy.withdraw({"platform": "tg", "message_id": "t2", "sender_id": "7",
                                              "chat_kind": "private", "chat_id": "7"}) == list(said.captured)


async def test_async_client_metadata_batches_and_scoped_forget(app):
    """capture with metadata → list / search with filters → update a patch → update_many / delete_many with
    another person's id (not_found, untouched) → forget_scope of a group (confirm) then of everything."""
    from huiyi_client import BatchResult

    key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
    async with _asgi(app, key) as hy:
        (zh,) = await hy.capture("tg:42", [ZH], infer=False, metadata={"topic": "pets", "lang": "zh"})
        (en,) = await hy.capture("tg:42", [EN], infer=False, chat="tg:group:-100", metadata={"lang": "en"})
        (theirs,) = await hy.capture("tg:43", [ZH], infer=False, metadata={"topic": "pets"})
        assert zh.memory.metadata == {"lang": "zh", "topic": "pets"}
        page = await hy.list("tg:42", filters={"topic": "pets"})
        assert page.total == 1 and page.items[0].id == zh.memory.id
        hits = await hy.search("tg:42", "煤球 Toronto", filters={"lang": ["en"]})
        assert [h.memory.id for h in hits] == [en.memory.id]
        patched = await hy.update("tg:42", zh.memory.id, metadata={"topic": None, "pinned": True})
        assert patched.metadata == {"lang": "zh", "pinned": True} and patched.version == 1
        done = await hy.update_many("tg:42", [{"id": zh.memory.id, "text": "煤球是一只黑猫"},
                                              {"id": theirs.memory.id, "text": "不该改"}])
        assert [(r.id, r.status) for r in done] == [(zh.memory.id, "updated"), (theirs.memory.id, "not_found")]
        assert isinstance(done[0], BatchResult) and done[0].memory.version == 2
        gone = await hy.delete_many("tg:42", [theirs.memory.id, "nosuchid1"])
        assert {r.status for r in gone} == {"not_found"}
        assert (await hy.get("tg:43", theirs.memory.id)).text == ZH
        with pytest.raises(BadRequest):
            await hy.forget_scope("tg:42", confirm="tg:43")
        assert await hy.forget_scope("tg:42", confirm="tg:42", chat="tg:group:-100") == 1
        assert [m.id for m in (await hy.list("tg:42")).items] == [zh.memory.id]
        assert await hy.forget_scope("tg:42", confirm="tg:42") == 1
    member = app.state.pipeline.core.store.create_api_key("default", "member", "tg:43")[1]
    async with _asgi(app, member) as hy:
        with pytest.raises(ForbiddenError):
            await hy.forget_scope("tg:43", confirm="tg:43")


# -- newcomer faults: lone surrogates and a gateway that is down ------------------------------


async def test_lone_surrogate_in_client_text_is_repaired_not_unicode_encode_error(app):
    """capture / search / subject with a lone surrogate (half an emoji) send U+FFFD in its place instead of
    raising UnicodeEncodeError, in Chinese and English text; the damaged text is refused as a memory (issue 26.5)."""
    async with _asgi(app) as hy:
        added = await hy.capture("tg:42", [Message("我喜欢\ud83c草莓")], infer=False)
        assert (added[0].action, added[0].reason, added[0].memory) == ("rejected", "damaged", None)
        added = await hy.capture("tg:42", ["I like \udc00 strawberries"], infer=False)
        assert (added[0].action, added[0].reason) == ("rejected", "damaged")
        await hy.capture("tg:42", [Message("我喜欢草莓")], infer=False)
        assert isinstance(await hy.search("tg:42", "\ud83c"), list)
        assert [h.memory.text for h in await hy.search("tg:42", "草莓\ud83c")] == ["我喜欢草莓"]
        with pytest.raises(BadRequest):  # the repaired subject is outside its pattern: a 400, not an encode error
            await hy.list("tg:4\ud83c2")


def test_lone_surrogate_in_sync_client_text_is_repaired(served):
    """The sync client repairs lone surrogates the same way over a real socket."""
    url, _ = served
    with Huiyi(url) as hy:
        assert hy.capture("tg:42", [Message("我喜欢\ud83c草莓")], infer=False)[0].reason == "damaged"
        hy.capture("tg:42", [Message("我喜欢草莓")], infer=False)
        assert any("草莓" in h.memory.text for h in hy.search("tg:42", "\ud83c草莓"))


def _dead_url() -> str:
    import socket

    with socket.socket() as s:  # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_gateway_down_raises_client_error_not_httpx_connect_error_sync():
    """A gateway that is down raises Unreachable (an Unavailable, a HuiyiError) with the httpx error as
    its cause, not a raw httpx.ConnectError."""
    with Huiyi(_dead_url(), timeout=5) as hy:
        with pytest.raises(Unreachable) as err:
            hy.search("tg:42", "茶 tea")
    assert isinstance(err.value, Unavailable) and isinstance(err.value, HuiyiError)
    assert err.value.status == 0 and isinstance(err.value.__cause__, httpx.ConnectError)


async def test_gateway_down_raises_client_error_not_httpx_connect_error_async():
    """The async client wraps transport errors the same way."""
    async with AsyncHuiyi(_dead_url(), timeout=5) as hy:
        with pytest.raises(Unreachable) as err:
            await hy.capture("tg:42", ["我喜欢茶 I like tea"])
    assert err.value.error == "ConnectError" and isinstance(err.value.__cause__, httpx.ConnectError)


def test_a_429_is_rate_limited_with_retry_after_in_seconds():
    """Over the per-address limit the client raises RateLimited (still a BadRequest for older callers) with
    retry_after, the seconds of the answer's Retry-After (≥ 1); other errors carry retry_after None."""
    from huiyi_client import RateLimited

    from gateway.config import RateLimitSettings

    app = create_app(load_settings(rate_limit=RateLimitSettings(per_address="2/minute", exempt_loopback=False),
                                   tenants={"default": TenantSettings(language="en")}))
    with TestClient(app, client=("203.0.113.7", 40000)) as http:
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        hy = Huiyi(api_key=key, http=http)
        with pytest.raises(NotFound) as missing:
            hy.get("tg:42", "abc123def456")
        assert missing.value.retry_after is None
        hy.capture("tg:42", ["我养了一只叫煤球的黑猫"], infer=False)
        with pytest.raises(RateLimited) as limited:
            hy.capture("tg:42", ["I love hiking in the Alps"], infer=False)
    assert isinstance(limited.value, BadRequest) and limited.value.status == 429
    assert limited.value.retry_after is not None and 1 <= limited.value.retry_after <= 60


def test_retry_after_reads_seconds_and_http_dates():
    """Retry-After is delay-seconds or an HTTP date (RFC 9110); a date in the past is 0, garbage is None."""
    from email.utils import format_datetime

    from huiyi_client import _retry_after

    assert _retry_after("7") == 7.0 and _retry_after(None) is None and _retry_after("soon") is None
    later = datetime.now(timezone.utc) + timedelta(seconds=90)
    assert 80 <= _retry_after(format_datetime(later, usegmt=True)) <= 91
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_verify_event_checks_the_gateways_signature_and_returns_the_event():
    """Change events the gateway really POSTed (capture zh and en) verify with the tenant's secret (with or
    without its whsec_ prefix, body as bytes or str) into ChangeEvents with the memory's ids; a changed body,
    another secret, a stale timestamp or a missing header raise SignatureError (a ValueError)."""
    import base64
    import secrets
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from huiyi_client import ChangeEvent, SignatureError, verify_event

    from gateway.config import ChangeEventSettings

    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            got.append((dict(self.headers.items()), self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    raw_secret = base64.b64encode(secrets.token_bytes(32)).decode()
    secret = "whsec_" + raw_secret
    app = create_app(load_settings(tenants={"default": TenantSettings(language="en", change_events=ChangeEventSettings(
        url=f"http://127.0.0.1:{server.server_port}/hook", secret=secret))}))
    try:
        with TestClient(app, client=("127.0.0.1", 50000)) as http:
            hy = Huiyi(http=http)
            ids = [hy.capture("tg:42", [text], infer=False)[0].memory.id for text in (ZH, EN)]
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        server.shutdown()
        server.server_close()
    events = [verify_event(body, headers, secret) for headers, body in got]
    assert all(isinstance(e, ChangeEvent) for e in events)
    assert [(e.type, e.memory_id, e.subject, e.namespace, e.version) for e in events] == [
        ("memory.added", ids[0], "tg:42", "default/tg:42", 1), ("memory.added", ids[1], "tg:42", "default/tg:42", 1)]
    headers, body = got[0]
    assert events[0].id == headers["webhook-id"] and events[0].timestamp.tzinfo is not None
    assert verify_event(body.decode("utf-8"), headers, raw_secret) == events[0]
    sent = int(headers["webhook-timestamp"])
    other = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    for bad_body, bad_headers, key, now in (
            (body.replace(b"tg:42", b"tg:43"), headers, secret, None), (body, headers, other, None),
            (body, headers, secret, sent + 301), (body, headers, secret, sent - 301),
            (body, {k: v for k, v in headers.items() if k.lower() != "webhook-signature"}, secret, None)):
        with pytest.raises(SignatureError):
            verify_event(bad_body, bad_headers, key, now=now)
    assert issubclass(SignatureError, ValueError)
