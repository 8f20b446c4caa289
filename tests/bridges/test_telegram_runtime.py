"""Telegram runtime end to end: the webhook route (secret header), turns, and
replies sent through aiogram's Bot to a fake Bot API server on 127.0.0.1 —
reply targets, forum topics, plain-text escaping, splitting, edits, group →
supergroup migration, ignored updates, redelivery, long polling and
set-webhook. Real payloads from tests/data/im/telegram where they exist."""

from __future__ import annotations

import json
import time

import pytest

from bridges.telegram.send import TEXT_LIMIT, split_text, utf16_len
from conftest import TEST_DATA
from memory.types import ChatKind, ChatRef, Namespace

TG = TEST_DATA / "im" / "telegram"
SECRET = "s3cret-Token_1"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
NOW = int(time.time())


def real(name: str) -> dict:
    return json.loads((TG / name).read_text("utf-8"))


def update(message: dict, uid: int = 1, kind: str = "message") -> dict:
    return {"update_id": uid, kind: message}


def text_message(text: str, *, mid: int = 10, chat: int = 555, chat_type: str = "private", sender: int = 555,
                 name: str = "Ann", date: int = NOW, **extra) -> dict:
    msg = {"message_id": mid, "date": date, "chat": {"id": chat, "type": chat_type},
           "from": {"id": sender, "is_bot": False, "first_name": name, "language_code": "zh-hans"}, "text": text}
    msg.update(extra)
    return msg


def mention(text: str, **kw) -> dict:
    """A group message that @-mentions the bot at its start (SYNTHETIC)."""
    return text_message(f"@huiyi_bot {text}", entities=[{"type": "mention", "offset": 0, "length": 10}], **kw)


@pytest.fixture
def client(gateway, fake_telegram):
    return gateway(telegram={"token": "123456:TEST-token", "webhook_secret": SECRET, "bot_username": "huiyi_bot",
                             "api_base": fake_telegram.base_url},
                   group_keywords=["blah"])


def core(client):
    return client.app.state.pipeline.core


@pytest.mark.parametrize("headers", [{}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"},
                                     {"X-Telegram-Bot-Api-Secret-Token": SECRET + "x"}])
def test_wrong_or_missing_secret_is_401_and_nothing_processed(client, fake_telegram, headers):
    """Without the exact secret header the update is refused: 401, no chat line, no memory, no send."""
    r = client.post("/telegram/default", json=update(text_message("我养了一只叫煤球的猫")), headers=headers)
    assert r.status_code == 401
    c = core(client)
    assert c.store.chat_tail("default", ChatRef("tg", ChatKind.PRIVATE, "555")) == []
    assert c.store.count(Namespace("default", "tg:555")) == 0
    assert fake_telegram.sent() == []


def test_webhook_without_configured_secret_refuses(gateway, fake_telegram):
    """A tenant without webhook_secret never accepts webhook updates (401)."""
    c = gateway(telegram={"token": "123456:TEST-token", "api_base": fake_telegram.base_url})
    assert c.post("/telegram/default", json=update(text_message("hi")), headers=HEADERS).status_code == 401


def test_private_message_is_answered_in_the_same_chat_without_reply_or_parse_mode(client, fake_telegram, llm):
    """A real private Update: the reply goes to that chat as plain text, not as a reply, no parse_mode."""
    llm.enqueue("你好呀 <b>朋友</b> *not bold* & [link](x)")
    upd = real("teloxide_update_private_text.json")
    r = client.post("/telegram/default", json=upd, headers=HEADERS)
    assert r.status_code == 200 and r.json() == {"ok": True, "ignored": False}
    (sent,) = fake_telegram.sent()
    assert sent["chat_id"] == upd["message"]["chat"]["id"]
    assert sent["text"] == "你好呀 <b>朋友</b> *not bold* & [link](x)"
    assert "parse_mode" not in sent and "reply_parameters" not in sent and "message_thread_id" not in sent


def test_group_mention_replies_to_the_addressed_message(client, fake_telegram, llm):
    """In a group the answer is a reply to the message that addressed the bot, in that group."""
    llm.enqueue("记住啦")
    msg = mention("我喜欢爬山", mid=77, chat=-100200, chat_type="supergroup", sender=42)
    client.post("/telegram/default", json=update(msg), headers=HEADERS)
    (sent,) = fake_telegram.sent()
    assert sent["chat_id"] == -100200
    assert sent["reply_parameters"] == {"message_id": 77, "allow_sending_without_reply": True}
    assert core(client).store.count(Namespace("default", "tg:42")) == 1


def test_forum_topic_reply_stays_in_the_topic(client, fake_telegram, llm):
    """A real forum-topic message (keyword trigger): the reply goes to the same topic of the same group."""
    llm.enqueue("在这个话题里回答你")
    msg = real("teloxide_message_forum_topic_message_reply.json")
    client.post("/telegram/default", json=update(msg), headers=HEADERS)
    (sent,) = fake_telegram.sent()
    assert sent["chat_id"] == msg["chat"]["id"] and sent["chat_id"] != msg["from"]["id"]
    assert sent["message_thread_id"] == msg["message_thread_id"]
    assert sent["reply_parameters"]["message_id"] == msg["message_id"]


def test_reply_to_another_bot_does_not_address_this_one(client, fake_telegram, llm):
    """In a group, replying to some other bot is not talking to us; replying to our bot (id from the token) is."""
    other = {"message_id": 1, "date": NOW, "chat": {"id": -100400, "type": "supergroup"},
             "from": {"id": 999, "is_bot": True, "first_name": "OtherBot"}, "text": "hi"}
    ours = other | {"message_id": 2, "from": {"id": 123456, "is_bot": True, "first_name": "huiyi"}}
    kw = {"chat": -100400, "chat_type": "supergroup", "sender": 7}
    client.post("/telegram/default", json=update(text_message("好的", mid=3, reply_to_message=other, **kw)),
                headers=HEADERS)
    assert fake_telegram.sent() == []
    llm.enqueue("在呢")
    client.post("/telegram/default", json=update(text_message("你在吗", mid=4, reply_to_message=ours, **kw), uid=2),
                headers=HEADERS)
    assert [s["reply_parameters"]["message_id"] for s in fake_telegram.sent()] == [4]


def test_unaddressed_group_message_gets_no_reply(client, fake_telegram):
    """A group message that neither mentions nor replies to the bot is not answered."""
    client.post("/telegram/default", json=update(text_message("随便聊聊", chat=-100300, chat_type="supergroup",
                                                              sender=7)), headers=HEADERS)
    assert fake_telegram.sent() == []


def test_long_reply_is_split_at_the_limit_and_only_the_first_chunk_replies(client, fake_telegram, llm):
    """A 9000-unit reply with emoji goes out in 3 chunks of <= 4096 UTF-16 units that join to the reply."""
    reply = ("第一段😀" * 700 + "\n\n") + ("word " * 900) + ("x" * 2500)
    llm.enqueue(reply)
    client.post("/telegram/default", json=update(mention("讲个长故事", mid=5, chat=-100201, chat_type="supergroup",
                                                         sender=43)), headers=HEADERS)
    sent = fake_telegram.sent()
    assert len(sent) == 3
    assert all(utf16_len(s["text"]) <= TEXT_LIMIT for s in sent)
    assert "".join(s["text"] for s in sent) == reply.strip()
    assert "reply_parameters" in sent[0] and all("reply_parameters" not in s for s in sent[1:])
    assert {s["chat_id"] for s in sent} == {-100201}


@pytest.mark.parametrize("name", [
    "teloxide_update_message_reaction_user.json",
    "teloxide_update_my_chat_member.json",
    "tgdocs_callback_query.json",
    "teloxide_update_supergroup_pinned_message.json",
])
def test_non_text_updates_answer_200_and_send_nothing(client, fake_telegram, name):
    """Reactions, member updates, callback queries and service messages: 200, ignored, nothing sent."""
    payload = real(name)
    if "update_id" not in payload:
        payload = {"update_id": 9, "callback_query": payload} if "data" in payload or "chat_instance" in payload \
            else update(payload)
    r = client.post("/telegram/default", json=payload, headers=HEADERS)
    assert r.status_code == 200 and r.json()["ignored"] is True
    assert fake_telegram.sent() == []


def test_redelivery_storm_is_answered_once(client, fake_telegram, llm):
    """The same Update delivered three times: one reply, one capture."""
    upd = update(text_message("我住在杭州", mid=31))
    for _ in range(3):
        assert client.post("/telegram/default", json=upd, headers=HEADERS).status_code == 200
    assert len(fake_telegram.sent()) == 1
    assert core(client).store.count(Namespace("default", "tg:555")) == 1


def test_edited_message_updates_what_was_captured(client, fake_telegram, llm):
    """An edit replaces the captured fact of the original (the old text is forgotten) and is not answered again."""
    client.post("/telegram/default", json=update(text_message("我喜欢喝美式咖啡", mid=40)), headers=HEADERS)
    edited = text_message("我喜欢喝拿铁咖啡", mid=40, edit_date=NOW + 60)
    r = client.post("/telegram/default", json=update(edited, uid=2, kind="edited_message"), headers=HEADERS)
    assert r.status_code == 200
    ns = Namespace("default", "tg:555")
    assert [m.text for m in core(client).list(ns)] == ["我喜欢喝拿铁咖啡"]
    assert len(fake_telegram.sent()) == 1
    tail = core(client).store.chat_tail("default", ChatRef("tg", ChatKind.PRIVATE, "555"))
    assert [line.text for line in tail if line.role == "user"] == ["我喜欢喝拿铁咖啡"]


def test_group_to_supergroup_migration_moves_history_and_group_memories(client, fake_telegram, llm):
    """After the real migrate_from service message, the supergroup sees the old group's tail and memories."""
    old, new = "-599075523", "-1001555296434"
    client.post("/telegram/default", json=update(mention("我养了一只叫煤球的猫", mid=3, chat=int(old), chat_type="group",
                                                         sender=42)), headers=HEADERS)
    migrate = real("teloxide_message_anonymous_admin_migrate_from.json")
    r = client.post("/telegram/default", json=update(migrate, uid=4), headers=HEADERS)
    assert r.status_code == 200 and r.json()["ignored"] is True
    c = core(client)
    ns = Namespace("default", "tg:42")
    (mem,) = c.list(ns)
    assert mem.origin == ChatRef("tg", ChatKind.GROUP, new)
    assert c.store.chat_tail("default", ChatRef("tg", ChatKind.GROUP, old)) == []
    assert [line.text for line in c.store.chat_tail("default", ChatRef("tg", ChatKind.GROUP, new))][0].endswith("煤球的猫")
    assert any(a["action"] == "migrate_chat" for a in c.store.audit_records(ns))
    hits = c.recall(ns, ["煤球"], chat=ChatRef("tg", ChatKind.GROUP, new))
    assert [h.memory.id for h in hits] == [mem.id]


def test_send_to_migrated_group_follows_the_new_chat_id(client, fake_telegram, llm):
    """Telegram answers 'upgraded to a supergroup': the chat migrates and the reply goes to the new id."""
    fake_telegram.errors[-4001] = {"ok": False, "error_code": 400, "description":
                                   "Bad Request: group chat was upgraded to a supergroup chat",
                                   "parameters": {"migrate_to_chat_id": -1004001}}
    llm.enqueue("收到")
    client.post("/telegram/default", json=update(mention("我是程序员", mid=8, chat=-4001, chat_type="group", sender=9)),
                headers=HEADERS)
    assert [s["chat_id"] for s in fake_telegram.sent()] == [-4001, -1004001]
    (mem,) = core(client).list(Namespace("default", "tg:9"))
    assert mem.origin == ChatRef("tg", ChatKind.GROUP, "-1004001")


def test_long_polling_processes_queued_updates(gateway, fake_telegram, llm):
    """serve --polling: the webhook is deleted, getUpdates is polled, and the update is answered."""
    from fastapi.testclient import TestClient

    from gateway.http.app import create_app
    from gateway.config import TenantSettings, load_settings

    fake_telegram.updates.append(update(text_message("我在学日语", mid=90), uid=500))
    llm.enqueue("加油")
    settings = load_settings(tenants={"default": TenantSettings(telegram={
        "token": "123456:TEST-token", "api_base": fake_telegram.base_url, "poll_timeout": 1})})
    with TestClient(create_app(settings, telegram_polling=True)):
        assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1, timeout=40)
    methods = [m for m, _ in fake_telegram.calls]
    assert methods.index("deletewebhook") < methods.index("getupdates")
    offsets = [p.get("offset") for m, p in fake_telegram.calls if m == "getupdates"]
    assert 501 in offsets


def test_set_webhook_cli_registers_url_and_secret(fake_telegram, monkeypatch):
    """`huiyi telegram set-webhook` sends the URL, the secret token and the update types huiyi reads."""
    from typer.testing import CliRunner

    from gateway.cli import app

    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKEN", "123456:TEST-token")
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__TELEGRAM__WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__TELEGRAM__API_BASE", fake_telegram.base_url)
    res = CliRunner().invoke(app, ["telegram", "set-webhook", "--url", "https://bot.example.org/"])
    assert res.exit_code == 0, res.output
    ((method, params),) = fake_telegram.calls
    assert method == "setwebhook"
    assert params["url"] == "https://bot.example.org/telegram/default"
    assert params["secret_token"] == SECRET and params["allowed_updates"] == ["message", "edited_message"]


@pytest.mark.parametrize("text,limit", [("a" * 10, 4), ("😀" * 5, 4), ("ab cd ef gh", 5), ("x\n\ny" * 3, 4)])
def test_split_text_respects_utf16_limit_and_round_trips(text, limit):
    """Chunks never exceed the limit in UTF-16 units, never split a surrogate pair, and join back to the text."""
    chunks = split_text(text, limit)
    assert "".join(chunks) == text
    assert all(0 < utf16_len(c) <= limit for c in chunks)


def test_thread_not_found_resends_without_the_thread(client, fake_telegram, llm, caplog):
    """Issue 13 item 5: the forum-topic reply whose first sendMessage gets 400 "message thread not found"
    is sent again to the same chat without the topic, instead of being dropped."""
    llm.enqueue("在这个话题里回答你")
    fake_telegram.fail_next.append({"ok": False, "error_code": 400,
                                    "description": "Bad Request: message thread not found"})
    msg = real("teloxide_message_forum_topic_message_reply.json")
    with caplog.at_level("WARNING", logger="bridges.telegram.send"):
        assert client.post("/telegram/default", json=update(msg), headers=HEADERS).status_code == 200
    first, second = fake_telegram.sent()
    assert first["message_thread_id"] == msg["message_thread_id"] and "message_thread_id" not in second
    assert second["chat_id"] == msg["chat"]["id"] and second["text"] == "在这个话题里回答你"
    assert any("is gone" in r.getMessage() for r in caplog.records)


def test_429_waits_retry_after_and_5xx_is_retried(client, fake_telegram, llm):
    """A 429 with retry_after 1 is retried after about a second; two 502s are retried with backoff; one reply lands."""
    llm.enqueue("好的")
    fake_telegram.fail_next.extend([
        {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}},
        {"ok": False, "error_code": 502, "description": "Bad Gateway"},
        {"ok": False, "error_code": 502, "description": "Bad Gateway"},
    ])
    t0 = time.monotonic()
    assert client.post("/telegram/default", json=update(text_message("你好", mid=77)), headers=HEADERS).status_code == 200
    assert time.monotonic() - t0 >= 1.0
    sent = fake_telegram.sent()
    assert len(sent) == 4 and [p["text"] for p in sent] == ["好的"] * 4
    assert not fake_telegram.fail_next


def test_unrecoverable_send_error_is_logged_with_chat_and_reason(client, fake_telegram, llm, caplog):
    """403 (bot blocked) is not retried: one call, a WARNING naming the chat and Telegram's reason."""
    llm.enqueue("好的")
    fake_telegram.fail_next.append({"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"})
    with caplog.at_level("WARNING"):
        assert client.post("/telegram/default", json=update(text_message("你好", mid=78)),
                           headers=HEADERS).status_code == 200
    assert len(fake_telegram.sent()) == 1
    assert any("555" in r.getMessage() and "blocked" in r.getMessage() for r in caplog.records)
