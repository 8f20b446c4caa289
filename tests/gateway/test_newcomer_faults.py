"""Faults a newcomer found (issue: newcomer test), pinned on the real routes: out-of-range
timestamps with an offset are 400 everywhere, control characters in message ids are 400 and a
503 never carries SQL, placeholder and shared anonymous subjects are refused on every /v1 route
and in ``huiyi keys create``. Real SQLite (and PostgreSQL where reachable) + LanceDB in tmp_path,
the fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import time

import pytest
from typer.testing import CliRunner

from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from memory.types import SHARED_SENDERS, Namespace

WH_SECRET = "wh-newcomer-secret"
EDGE_TIMES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00"]
SECRET_TEXT = "我喜欢茶 and my PIN is 4711"


@pytest.fixture
def client(gateway):
    """The real app with the generic webhook behind its secret; keyless /v1 from loopback."""
    return gateway(webhook={"secret": WH_SECRET})


def turn(client, **message):
    base = {"platform": "tg", "message_id": "1", "sender_id": "42", "chat_kind": "private", "chat_id": "42",
            "text": "你好"}
    return client.post("/v1/turns", json={"message": {**base, **message}})


def webhook(client, body: dict):
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()))
    return client.post("/webhook/default", content=raw, headers={
        TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign(WH_SECRET, stamp, raw), "Content-Type": "application/json"})


def core(client):
    return client.app.state.pipeline.core


# -- 1. out-of-range timestamps with an offset -------------------------------------------


@pytest.mark.parametrize("when", EDGE_TIMES)
def test_out_of_range_timestamp_with_offset_on_turns_is_400(client, when):
    """/v1/turns with a timestamp whose offset carries it past the calendar's ends answers 400, not 500."""
    r = turn(client, timestamp=when, text="我喜欢茶 I like tea")
    assert r.status_code == 400, r.text
    assert "1970" in r.text


@pytest.mark.parametrize("when", EDGE_TIMES)
def test_out_of_range_timestamp_with_offset_on_signed_webhook_is_400(client, when):
    """A correctly signed webhook message with such a timestamp answers 400; nothing is stored."""
    r = webhook(client, {"sender_id": "42", "chat_id": "c1", "message_id": "m1", "text": "我喜欢茶", "timestamp": when})
    assert r.status_code == 400, r.text
    assert core(client).list(Namespace("default", "webhook:42")) == []


@pytest.mark.parametrize("when", EDGE_TIMES + ["1969-12-31T12:00:00+00:00", "2100-01-02T00:00:00Z"])
@pytest.mark.parametrize("text", ["我喜欢茶", "I like green tea 🍵"])
def test_out_of_range_timestamp_on_memory_api_is_400_and_text_never_logged(client, caplog, when, text):
    """POST /v1/subjects/…/memories bounds timestamps like /v1/turns (1970–2100): 400, nothing
    stored, and the message text appears in no log record."""
    caplog.set_level(logging.DEBUG)
    r = client.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": text, "timestamp": when}]})
    assert r.status_code == 400, r.text
    assert "1970" in r.text
    assert core(client).list(Namespace("default", "tg:42")) == []
    assert all(text not in rec.getMessage() and text not in (rec.exc_text or "") for rec in caplog.records)


def test_in_range_timestamp_with_offset_on_memory_api_is_stored(client):
    """The bound refuses only out-of-range times: 2024 at +08:00 is stored."""
    r = client.post("/v1/subjects/tg:42/memories",
                    json={"infer": False, "messages": [{"text": "我喜欢茶", "timestamp": "2024-05-01T08:00:00+08:00"}]})
    assert r.status_code == 200, r.text
    assert [m.text for m in core(client).list(Namespace("default", "tg:42"))] == ["我喜欢茶"]


# -- 2. control characters in message ids; 503 details --------------------------------------


@pytest.mark.parametrize("mid", ["n\x00b", "a\nb", "x\x1by", "中\x7f文"])
def test_control_character_in_message_id_on_turns_is_400(client, mid):
    """A message id with a control character (NUL, newline, ESC, DEL) is refused at the boundary with 400."""
    r = turn(client, message_id=mid, text="我喜欢猫 I like cats")
    assert r.status_code == 400, r.text
    assert "control" in r.text
    assert "INSERT" not in r.text and "SELECT" not in r.text


def test_control_character_in_message_id_on_webhook_is_400(client):
    """The webhook builds the same InboundMessage: a NUL in its message id is 400 too."""
    r = webhook(client, {"sender_id": "42", "chat_id": "c1", "message_id": "n\x00b", "text": "我喜欢猫"})
    assert r.status_code == 400, r.text


def test_store_error_503_detail_is_generic_and_logged_without_text(client, caplog):
    """A database failure answers 503 whose detail names no statement, path or parameter; the reason
    is logged at WARNING for the operator, and the message text is in no log record."""
    from sqlalchemy import create_engine

    from gateway.http.errors import UNAVAILABLE

    store = core(client).store
    store.engine.dispose()
    store.engine = create_engine("sqlite:////nonexistent-dir/huiyi.db", hide_parameters=True)
    store._write_engine = store.engine.execution_options(huiyi_write=True)
    caplog.set_level(logging.DEBUG)
    r = turn(client, text=SECRET_TEXT)
    assert r.status_code == 503 and r.json() == {"error": "StoreError", "detail": UNAVAILABLE}
    assert any(rec.levelno == logging.WARNING and "StoreError" in rec.getMessage() for rec in caplog.records)
    assert all(SECRET_TEXT not in rec.getMessage() and SECRET_TEXT not in (rec.exc_text or "")
               for rec in caplog.records)


def test_store_error_on_postgresql_hides_sql_parameters(pg_schema):
    """On PostgreSQL a statement that fails (a NUL in a text parameter) raises StoreError whose text
    holds no parameter values (the engine hides them), so neither a log nor a client sees what was said."""
    from conftest import PG_URL
    from memory.errors import StoreError
    from memory.store import Store
    from memory.store.chatlog import ChatLine
    from memory.types import ChatKind, ChatRef

    store = Store(PG_URL, schema=pg_schema)
    try:
        line = ChatLine("user", "42", "我喜欢茶\x00 secret tea", _now(), "n\x00b", "")
        with pytest.raises(StoreError) as caught:
            store.append_chat("default", ChatRef("tg", ChatKind.PRIVATE, "42"), line)
        assert "secret tea" not in str(caught.value) and "我喜欢茶" not in str(caught.value)
    finally:
        store.close()


def _now():
    from datetime import UTC, datetime

    return datetime.now(UTC)


# -- 3. placeholder and shared anonymous subjects --------------------------------------------

NOBODY = ["tg:None", "tg:null", "tg:0", "tg:-1", "person:None", "qq:undefined"] + sorted(SHARED_SENDERS)


@pytest.mark.parametrize("subject", NOBODY)
def test_placeholder_or_shared_subject_on_memory_api_is_400(client, subject):
    """Capture, search, list and forget on a placeholder or shared anonymous subject answer 400 with
    the reason; nothing is stored."""
    r = client.post(f"/v1/subjects/{subject}/memories", json={"messages": [{"text": "我喜欢茶 I like tea"}]})
    assert r.status_code == 400, r.text
    assert "placeholder" in r.text or "shared by every anonymous sender" in r.text
    assert client.post(f"/v1/subjects/{subject}/search", json={"query": "茶 tea"}).status_code == 400
    assert client.get(f"/v1/subjects/{subject}/memories").status_code == 400
    assert client.delete(f"/v1/subjects/{subject}").status_code == 400
    assert core(client).list(Namespace("default", subject)) == []


@pytest.mark.parametrize("subject", sorted(SHARED_SENDERS))
def test_shared_anonymous_sender_on_turns_is_400(client, subject):
    """/v1/turns from Telegram's GroupAnonymousBot / service account or QQ's anonymous id answers 400:
    the platform parsers ignore them, and as a sender they would pool different people."""
    platform, uid = subject.split(":")
    r = turn(client, platform=platform, sender_id=uid, chat_kind="group", chat_id="-100", text="我喜欢茶")
    assert r.status_code == 400, r.text
    assert "shared by every anonymous sender" in r.text


@pytest.mark.parametrize("subject", ["tg:None", "tg:null", "tg:0", "tg:-1", "person:None", "tg:1087968824",
                                     "qq:80000000"])
def test_placeholder_or_shared_subject_in_keys_create_is_refused(subject):
    """huiyi keys create --scope member --subject <nobody> exits 2 with the reason and creates no key."""
    from gateway.cli import app as cli

    runner = CliRunner()
    r = runner.invoke(cli, ["keys", "create", "--tenant", "default", "--scope", "member", "--subject", subject])
    assert r.exit_code == 2, r.output
    assert "placeholder" in r.output or "shared by every anonymous sender" in r.output
    assert subject not in runner.invoke(cli, ["keys", "list", "--tenant", "default"]).output


def test_control_character_in_withdrawn_message_id_is_refused():
    """A withdrawal (recall notice) whose message id holds a NUL is refused before it is looked up in SQL."""
    from pydantic import ValidationError

    from bridges.contract import Withdrawal

    with pytest.raises(ValidationError, match="control"):
        Withdrawal(platform="qq", message_id="n\x00b", sender_id="10001", chat_kind="private", chat_id="10001")
    assert Withdrawal(platform="qq", message_id="撤回-1", sender_id="10001", chat_kind="private",
                      chat_id="10001").message_id == "撤回-1"
