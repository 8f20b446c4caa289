"""Follow-ups in the running app: sent through the fake Telegram Bot API (``sendMessage``) and the fake OneBot
API (``send_msg`` to the person), and offered to a ``/v1`` bot through ``GET /v1/followups/due`` + ack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.dates import zone
from memory.types import ChatKind, ChatRef, Memory, Namespace, Visibility

SELF_ID = 3456
TZ = zone("Asia/Shanghai")


def _add_plan(store, ns: Namespace, chat: ChatRef, text: str, said: datetime, day: datetime, mid: str) -> None:
    store.add(ns, Memory(id=mid, namespace=ns, text=text, key=f"event.{mid}", created_at=said, updated_at=said,
                         event_time=day, origin=chat, visibility=Visibility.PRIVATE))


def _midnight(moment: datetime) -> datetime:
    d = moment.astimezone(TZ).date()
    return datetime(d.year, d.month, d.day, tzinfo=TZ).astimezone(UTC)


@pytest.fixture
def client(gateway, fake_telegram, fake_onebot):
    return gateway(telegram={"token": "123456:FOLLOW-token", "api_base": fake_telegram.base_url},
                   followups={"waking_hours": "00:00-24:00"},
                   settings_overrides={"onebot": {"api_roots": {str(SELF_ID): fake_onebot.base_url + "/"}}})


def test_the_app_sends_follow_ups_through_telegram_and_onebot(client, fake_telegram, fake_onebot):
    """A plan ten days ahead, asked about the day after it: 「面试怎么样啦？」 through sendMessage to the private chat,
    "How did the exam go?" through send_msg to the QQ user (the bot that heard the opt-in)."""
    store = client.app.state.pipeline.core.store
    now = datetime.now(UTC)
    day = _midnight(now + timedelta(days=10))
    tg = Namespace("default", "tg:4242")
    qq = Namespace("default", "qq:10001")
    store.set_followups(tg, True, lang="zh_CN")
    store.set_followups(qq, True, lang="en", bot_id=str(SELF_ID))
    _add_plan(store, tg, ChatRef("tg", ChatKind.PRIVATE, "4242"), "下周三我要面试", now - timedelta(days=1), day, "p1")
    _add_plan(store, qq, ChatRef("qq", ChatKind.PRIVATE, "10001"), "I have an exam next Friday", now - timedelta(days=1),
              day, "p2")
    report = client.portal.call(client.app.state.followups.tick, day + timedelta(days=1, hours=3))
    assert (report.scheduled, report.sent) == (2, 2)
    (sent,) = fake_telegram.sent()
    assert (sent["chat_id"], sent["text"]) == (4242, "面试怎么样啦？")
    (_, body), = fake_onebot.sends
    assert (body["message_type"], body["user_id"], body["message"][-1]["data"]["text"]) == \
        ("private", 10001, "How did the exam go?")
    assert client.portal.call(client.app.state.followups.tick, day + timedelta(days=1, hours=4)).sent == 0
    assert len(fake_telegram.sent()) == 1 and len(fake_onebot.sends) == 1


def test_a_v1_bot_claims_due_follow_ups_and_acknowledges_them(client):
    """A chat on a platform the gateway has no bot for: GET /v1/followups/due claims it once (a second call gets
    nothing), the ack keeps it as the companion's line; an unknown or second ack is 404."""
    store = client.app.state.pipeline.core.store
    now = datetime.now(UTC)
    ns = Namespace("default", "web:alice")
    chat = ChatRef("web", ChatKind.PRIVATE, "alice")
    store.set_followups(ns, True, lang="en")
    _add_plan(store, ns, chat, "I have a job interview next Tuesday", now - timedelta(days=6),
              _midnight(now - timedelta(days=2)), "w1")
    due = client.get("/v1/followups/due")
    assert due.status_code == 200, due.text
    (item,) = due.json()["items"]
    assert (item["subject"], item["chat"], item["text"], item["memory_id"]) == \
        ("web:alice", "web:private:alice", "How did the interview go?", "w1")
    assert client.get("/v1/followups/due").json()["items"] == []
    ack = client.post(f"/v1/followups/{item['id']}/ack", json={"sent": True})
    assert ack.status_code == 200 and ack.json() == {"id": item["id"], "state": "sent"}
    assert store.chat_tail("default", chat, 2)[-1].text == "How did the interview go?"
    assert client.post(f"/v1/followups/{item['id']}/ack", json={"sent": True}).status_code == 404
    assert client.post("/v1/followups/999999/ack", json={"sent": False}).status_code == 404


def test_the_app_sends_wechat_follow_ups_through_the_customer_service_api_once(gateway, fake_wechat):
    """An Official Account: 「面试怎么样啦？」 goes to the openid through /cgi-bin/message/custom/send within 48 hours
    of the person's last message; a send refused with HTTP 502 is tried once (never again inside the call) and
    retried on a later tick; the answer is kept as the companion's line."""
    from memory.store import ChatLine

    client = gateway(wechat={"kind": "oa", "app_id": "wxAPP", "app_secret": "s3cret", "api_base": fake_wechat.base_url},
                     followups={"waking_hours": "00:00-24:00", "retry_after_s": 60})
    store = client.app.state.pipeline.core.store
    now = datetime.now(UTC)
    day = _midnight(now + timedelta(days=10))
    ns = Namespace("default", "wx:oUser1")
    chat = ChatRef("wx", ChatKind.PRIVATE, "oUser1")
    store.set_followups(ns, True, lang="zh_CN")
    _add_plan(store, ns, chat, "下周三我要面试", now - timedelta(days=1), day, "x1")
    at = day + timedelta(days=1, hours=3)
    store.append_chat("default", chat, ChatLine("user", "oUser1", "今天好紧张", at - timedelta(hours=20)))
    fake_wechat.fail_next.append((502, {"errcode": -1, "errmsg": "system busy"}))
    report = client.portal.call(client.app.state.followups.tick, at)
    assert (report.sent, report.retried) == (0, 1) and fake_wechat.attempts == 1 and fake_wechat.sends == []
    report = client.portal.call(client.app.state.followups.tick, at + timedelta(minutes=2))
    assert report.sent == 1
    assert fake_wechat.sends == [{"touser": "oUser1", "msgtype": "text", "text": {"content": "面试怎么样啦？"}}]
    assert store.chat_tail("default", chat, 1)[-1].text == "面试怎么样啦？"
    assert client.portal.call(client.app.state.followups.tick, at + timedelta(hours=1)).sent == 0
    assert len(fake_wechat.sends) == 1


def test_the_app_posts_webhook_follow_ups_to_the_callback_url_signed_and_once(gateway, fake_callback):
    """A generic-webhook tenant with a callback URL: "How did the interview go?" and 「考试怎么样啦？」 are POSTed there
    as signed {"event": "followup"} bodies, not left for the /v1 due-list; a callback refused with HTTP 503 is
    retried on a later tick, never twice within one."""
    import json

    from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

    client = gateway(webhook={"secret": "hook-secret", "callback_url": fake_callback.base_url + "/callback"},
                     followups={"waking_hours": "00:00-24:00", "retry_after_s": 60})
    store = client.app.state.pipeline.core.store
    now = datetime.now(UTC)
    day = _midnight(now + timedelta(days=10))
    for user, text, lang in (("alice", "I have a job interview next Tuesday", "en"), ("xiaoming", "下周二我要考试📚", "zh_CN")):
        ns = Namespace("default", f"web:{user}")
        store.set_followups(ns, True, lang=lang)
        _add_plan(store, ns, ChatRef("web", ChatKind.PRIVATE, user), text, now - timedelta(days=1), day,
                  f"h{len(lang)}")
    fake_callback.fail_next.append(503)
    at = day + timedelta(days=1, hours=3)
    report = client.portal.call(client.app.state.followups.tick, at)
    assert (report.sent, report.retried, report.left_for_api) == (1, 1, 0) and fake_callback.attempts == 2
    assert client.get("/v1/followups/due").json()["items"] == []
    report = client.portal.call(client.app.state.followups.tick, at + timedelta(minutes=2))
    assert report.sent == 1 and fake_callback.attempts == 3
    bodies = {}
    for headers, raw in fake_callback.received:
        assert headers[SIGNATURE_HEADER.lower()] == sign("hook-secret", headers[TIMESTAMP_HEADER.lower()], raw)
        body = json.loads(raw)
        bodies[body["person_id"]] = body
    assert {p: (b["event"], b["chat_id"], b["chat_kind"], b["reply"]) for p, b in bodies.items()} == {
        "alice": ("followup", "alice", "private", "How did the interview go?"),
        "xiaoming": ("followup", "xiaoming", "private", "考试怎么样啦？")}
    assert all(b["followup_id"] > 0 for b in bodies.values())
    assert client.portal.call(client.app.state.followups.tick, at + timedelta(hours=1)).sent == 0
    assert len(fake_callback.received) == 2
