"""Edges that hold (issue 13) on the real routes: placeholder identities fail
closed, lone surrogates are repaired at every boundary, a payload that parses
never gets a 5xx, display names are cleaned with a readable fallback, model
control words mean silence, and the reply language follows what the person
writes. Real SQLite + LanceDB in tmp_path, the fake OpenAI server and the fake
Bot API on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import logging
import time

import pytest
from pydantic import ValidationError

from bridges.common import FUTURE_SLACK
from bridges.contract import MAX_TEXT_CHARS
from bridges.qq.parse import ANONYMOUS_USER_ID
from bridges.telegram.parse import SERVICE_USER_IDS
from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from gateway.config import SHARED_SENDERS, TenantSettings
from memory.errors import NamespaceError
from memory.identity import platform_subject
from memory.types import ChatKind, ChatRef, Namespace

TG_SECRET = "tg-edge-secret"
TG = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
OB_TOKEN = "ob-edge-token"
OB = {"Authorization": f"Bearer {OB_TOKEN}"}
WH_SECRET = "wh-edge-secret"
NOW = int(time.time())
"""When the module was imported; events default to the time they are built (a OneBot event's ``time`` must be
within the freshness window when it arrives, however long the suite ran before this module)."""
SELF_ID = 2000000001


@pytest.fixture
def client(gateway, fake_telegram):
    """The real app: a Telegram bot against the fake Bot API, the OneBot route
    behind its access token, the generic webhook behind its secret."""
    return gateway(telegram={"token": "123456:EDGE-token", "webhook_secret": TG_SECRET, "bot_username": "huiyi_bot",
                             "api_base": fake_telegram.base_url},
                   webhook={"secret": WH_SECRET},
                   settings_overrides={"onebot": {"access_token": OB_TOKEN}})


def raw_json(body: dict) -> bytes:
    """JSON with non-ASCII escaped: a lone surrogate travels as ``\\ud83c``, as a broken client sends it."""
    return json.dumps(body).encode("ascii")


def tg_update(text: str, *, mid: int = 10, sender: int = 555, chat: int | None = None, chat_type: str = "private",
              date: int | None = None, first_name: str = "Ann", language: str | None = "zh-hans", uid: int = 1,
              **extra) -> dict:
    user = {"id": sender, "is_bot": False, "first_name": first_name}
    if language:
        user["language_code"] = language
    msg = {"message_id": mid, "date": int(time.time()) if date is None else date, "chat": {"id": chat if chat is not None else sender, "type": chat_type},
           "from": user, "text": text, **extra}
    return {"update_id": uid, "message": msg}


def ob_event(text: str, *, mid: int = 8101, user: int = 20005, group: int | None = None, at: int | None = None,
             card: str | None = None, nickname: str = "阿青") -> dict:
    sender = {"user_id": user, "nickname": nickname}
    if card is not None:
        sender["card"] = card
    event = {"time": int(time.time()) if at is None else at, "self_id": SELF_ID, "post_type": "message", "message_id": mid, "user_id": user,
             "message": [{"type": "text", "data": {"text": text}}], "raw_message": text, "font": 0, "sender": sender}
    if group is None:
        event.update(message_type="private", sub_type="friend")
    else:
        event.update(message_type="group", sub_type="normal", group_id=group)
        event["message"] = [{"type": "at", "data": {"qq": str(SELF_ID)}}] + event["message"]
    return event


def turn(client, **message):
    base = {"platform": "tg", "message_id": "1", "sender_id": "42", "chat_kind": "private", "chat_id": "42",
            "text": "你好"}
    return client.post("/v1/turns", content=raw_json({"message": {**base, **message}}),
                       headers={"content-type": "application/json"})


def webhook(client, body: dict):
    raw = raw_json(body)
    stamp = str(int(time.time()))
    return client.post("/webhook/default", content=raw, headers={
        TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign(WH_SECRET, stamp, raw), "Content-Type": "application/json"})


def core(client):
    return client.app.state.pipeline.core


def chat_lines(client, chat: ChatRef) -> list:
    return core(client).store.chat_tail("default", chat, 50)


# -- 1. placeholder identities fail closed ------------------------------------------------


@pytest.mark.parametrize("sender", ["None", "null", "undefined", "0", "000", "NULL", "nil", " ", ""])
def test_placeholder_sender_id_on_turns_is_400_and_nothing_is_stored(client, sender):
    """/v1/turns with a placeholder sender id answers 400 naming the reason; no
    chat line and no memory exist for any such caller."""
    r = turn(client, sender_id=sender, chat_id="42", text="我的银行卡密码是123456")
    assert r.status_code == 400
    assert "placeholder" in r.text or "sender_id" in r.text
    for subject in ("tg:None", "tg:null", "tg:undefined", "tg:0"):
        assert core(client).list(Namespace("default", subject)) == []


def test_two_placeholder_callers_never_share_a_person(client):
    """The issue's example: what one "None" caller says, another "None" caller cannot recall."""
    assert turn(client, sender_id="None", chat_id="None", message_id="a", text="我的狗叫旺财").status_code == 400
    r = turn(client, sender_id="None", chat_id="None", message_id="b", text="我的狗叫什么？")
    assert r.status_code == 400 and "recalled" not in r.json()


def test_placeholder_sender_on_platform_routes_is_400(client, fake_telegram):
    """Telegram from.id 0, OneBot user_id 0 and a webhook sender "null" fail closed with 400; nothing is sent."""
    r = client.post("/telegram/default", content=raw_json(tg_update("我喜欢猫", sender=0, chat=7)), headers=TG)
    assert r.status_code == 400 and "placeholder" in r.text
    r = client.post("/onebot/default", content=raw_json(ob_event("我喜欢猫", user=0)), headers=OB)
    assert r.status_code == 400 and "placeholder" in r.text
    r = webhook(client, {"sender_id": "null", "chat_id": "c1", "message_id": "m1", "text": "我喜欢猫"})
    assert r.status_code == 400 and "placeholder" in r.text
    assert fake_telegram.sent() == []


def test_core_refuses_a_placeholder_platform_identity():
    """memory.identity.platform_subject raises NamespaceError for placeholder ids, accepts real ones."""
    for uid in ("None", "null", "undefined", "0", "", "  "):
        with pytest.raises(NamespaceError, match="placeholder"):
            platform_subject("tg", uid)
    assert platform_subject("qq", "20005") == "qq:20005"


@pytest.mark.parametrize("admin,reason", [
    ("tg:1087968824", "GroupAnonymousBot"), ("tg:777000", "service account"), ("tg:136817688", "Channel_Bot"),
    ("qq:80000000", "anonymous"), ("tg:None", "placeholder"), ("qq:0", "placeholder"),
])
def test_shared_or_placeholder_admins_are_refused_in_config(admin, reason):
    """A tenant whose admins name an anonymous/shared sender or a placeholder does not load, with a clear error."""
    with pytest.raises(ValidationError, match=reason):
        TenantSettings(admins=["tg:12345", admin])
    assert TenantSettings(admins=["tg:12345", "qq:10001"]).admins == ["tg:12345", "qq:10001"]


def test_shared_sender_list_matches_what_the_parsers_ignore():
    """The config's shared senders are exactly the ids the Telegram and QQ parsers never attribute to a person."""
    assert {k.split(":")[1] for k in SHARED_SENDERS if k.startswith("tg:")} == SERVICE_USER_IDS
    assert {k.split(":")[1] for k in SHARED_SENDERS if k.startswith("qq:")} == {ANONYMOUS_USER_ID}


# -- 2. lone surrogates are repaired at every boundary --------------------------------------


@pytest.mark.parametrize("chat_type", [["private"], {"type": "private"}, None, 7])
def test_telegram_chat_type_of_any_json_shape_is_ignored_not_500(client, fake_telegram, chat_type):
    """``message.chat.type`` a list or an object (a TypeError in the parser before, so a 500 Telegram redelivers):
    200 and ignored, nothing stored or sent (issue 26.2)."""
    r = client.post("/telegram/default", content=raw_json(tg_update("我喜欢猫", mid=31, chat_type=chat_type)),
                    headers=TG)
    assert r.status_code == 200 and r.json() == {"ok": True, "ignored": True}
    assert chat_lines(client, ChatRef("tg", ChatKind.PRIVATE, "555")) == [] and fake_telegram.sent() == []


def test_lone_surrogate_on_telegram_is_answered_not_500(client, fake_telegram):
    """The issue's Update ("我喜欢\\ud83c") answers 200, is logged with U+FFFD, and the reply is sent."""
    r = client.post("/telegram/default", content=raw_json(tg_update("我喜欢\ud83c", first_name="小\ud83c明")),
                    headers=TG)
    assert r.status_code == 200 and r.json() == {"ok": True, "ignored": False}
    lines = chat_lines(client, ChatRef("tg", ChatKind.PRIVATE, "555"))
    assert [(ln.role, ln.text) for ln in lines][0] == ("user", "我喜欢\ufffd")
    assert lines[0].sender_name == "小明"
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1)
    assert fake_telegram.sent()[0]["text"] == "好的，我记得。"


def test_lone_surrogate_on_onebot_and_webhook_and_turns(client):
    """OneBot text and nickname, webhook text and name, /v1/turns text and name: repaired, 200 each."""
    r = client.post("/onebot/default", content=raw_json(ob_event("我喜欢\udc00周杰伦", nickname="\ud83c")), headers=OB)
    assert r.status_code == 200 and r.json()["reply"] == "好的，我记得。"
    line = chat_lines(client, ChatRef("qq", ChatKind.PRIVATE, "20005"))[0]
    assert (line.text, line.sender_name) == ("我喜欢\ufffd周杰伦", "QQ用户20005")
    r = webhook(client, {"sender_id": "u1", "sender_name": "\ud83cBo", "chat_id": "u1", "message_id": "m1",
                         "text": "I like \ud83c jazz"})
    assert r.status_code == 200 and r.json()["reply"] == "好的，我记得。"
    r = turn(client, text="我养了一只猫\ud83c", sender_name="\ud83c")
    assert r.status_code == 200 and r.json()["reply"] == "好的，我记得。"


def test_model_answer_with_lone_surrogate_is_stored_repaired(client, llm):
    """A reply holding a lone surrogate is repaired; the issue's extraction answer
    ({"facts":[{"text":"我喜欢周杰伦\ud83c"}]}) is unusable, so the offline
    extractor captures the fact instead of losing it."""
    llm.enqueue("周杰伦的歌很好听\ud83c")
    llm.enqueue_extraction(json.dumps({"facts": [{"text": "我喜欢周杰伦\ud83c", "category": "preference",
                                                  "key": "music.singer", "importance": 0.8}]}))
    r = turn(client, text="我喜欢周杰伦", sender_id="77", chat_id="77")
    assert r.status_code == 200 and r.json()["reply"] == "周杰伦的歌很好听\ufffd"
    captured = r.json()["captured"]
    assert len(captured) == 1
    assert core(client).get(Namespace("default", "tg:77"), captured[0]).text == "我喜欢周杰伦"


@pytest.mark.parametrize("text, clean", [("我喜欢\ud83c！", "我养了一只猫。"), ("I like \udc00 jazz.", "I have a cat.")])
def test_a_lone_surrogate_is_not_stored_as_a_fact(client, caplog, text, clean):
    """「我喜欢\ud83c」 is repaired to U+FFFD for the chat log, but damaged content is no memory (logged); a clean
    sentence of the same message still is (issue 26.5)."""
    ns = Namespace("default", "tg:79")
    with caplog.at_level(logging.INFO, logger="memory.core"):
        r = turn(client, text=text, sender_id="79", chat_id="79")
    assert r.status_code == 200 and r.json()["captured"] == [] and core(client).list(ns) == []
    assert any("damaged" in rec.getMessage() for rec in caplog.records)
    r = turn(client, text=f"{text} {clean}", sender_id="79", chat_id="79", message_id="2")
    assert [m.text for m in core(client).list(ns)] == [clean]


def test_recall_query_with_lone_surrogate_does_not_raise(client):
    """MemoryCore.recall repairs its query lines: a lone surrogate finds what the repaired text finds."""
    ns = Namespace("default", "tg:78")
    assert turn(client, text="我喜欢周杰伦", sender_id="78", chat_id="78").status_code == 200
    hits = core(client).recall(ns, ["周杰伦\ud83c"])
    assert [h.memory.text for h in hits] == ["我喜欢周杰伦"]


def test_config_strings_are_repaired():
    """Persona, name, apology and keywords with a lone surrogate are repaired when the config loads."""
    t = TenantSettings(persona_name="小\ud83c忆", persona="温柔\udc00", apology="稍等\ud83c", group_keywords=["小忆\ud83c"])
    assert (t.persona_name, t.persona, t.apology, t.group_keywords) == ("小\ufffd忆", "温柔\ufffd", "稍等\ufffd",
                                                                        ["小忆\ufffd"])


# -- 9. a payload that parses never gets a 5xx -------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\u3000"])
def test_blank_command_text_is_not_500(client, text):
    """/v1/turns with is_command true and blank text is no 5xx: 400 with the reason, as any blank turn (nothing
    ran, nothing was logged)."""
    r = turn(client, text=text or " ", is_command=True)
    assert r.status_code == 400 and r.json()["error"] == "RequestValidationError"


@pytest.mark.parametrize("date", [4102444800, -1, 10**20])
def test_out_of_range_telegram_date_is_clamped_to_receipt(client, date):
    """Telegram "date" of 2100, -1 or 10^20: 200, and the line carries the time of receipt."""
    before = time.time()
    r = client.post("/telegram/default", content=raw_json(tg_update("我明天考科目二", date=date, mid=31)), headers=TG)
    assert r.status_code == 200 and r.json()["ignored"] is False
    line = chat_lines(client, ChatRef("tg", ChatKind.PRIVATE, "555"))[0]
    assert before - 5 <= line.at.timestamp() <= time.time() + 5


@pytest.mark.parametrize("at", [-1, 4102444800])
def test_out_of_range_onebot_time_is_refused_on_the_route_and_clamped_by_the_parser(client, at):
    """OneBot "time" of -1 or year 2100: the /onebot route refuses it as stale (401, issue 13 B: the event's time
    is its freshness), never a 500; the parser (used by the NoneBot plugin too) clamps it to the time of receipt."""
    from bridges.qq.parse import parse_event

    r = client.post("/onebot/default", content=raw_json(ob_event("我明天考科目二", at=at)), headers=OB)
    assert r.status_code == 401
    assert chat_lines(client, ChatRef("qq", ChatKind.PRIVATE, "20005")) == []
    msg = parse_event(ob_event("我明天考科目二", at=at))
    assert abs(msg.timestamp.timestamp() - time.time()) < 60


def test_far_future_time_is_clamped_but_near_future_kept():
    """bridges.common.epoch_utc keeps a time within FUTURE_SLACK of now and clamps a later one."""
    import logging
    from datetime import UTC, datetime

    from bridges.common import epoch_utc

    now = datetime(2026, 1, 1, tzinfo=UTC)
    log = logging.getLogger("test")
    near = now.timestamp() + FUTURE_SLACK.total_seconds() - 60
    assert epoch_utc(near, log, "x", now=now).timestamp() == near
    assert epoch_utc(now.timestamp() + FUTURE_SLACK.total_seconds() + 60, log, "x", now=now) == now
    assert epoch_utc(-1, log, "x", now=now) == now
    assert epoch_utc(0, log, "x", now=now) == datetime(1970, 1, 1, tzinfo=UTC)


def test_overlong_platform_text_is_cut_with_a_log_line(client, caplog):
    """Telegram and OneBot text over MAX_TEXT_CHARS: 200, the stored line is cut to MAX_TEXT_CHARS, a WARNING says so."""
    long = "猫" * (MAX_TEXT_CHARS + 500)
    with caplog.at_level("WARNING"):
        r = client.post("/telegram/default", content=raw_json(tg_update(long, mid=41)), headers=TG)
        assert r.status_code == 200
        r2 = client.post("/onebot/default", content=raw_json(ob_event(long, mid=42)), headers=OB)
        assert r2.status_code == 200
    assert len(chat_lines(client, ChatRef("tg", ChatKind.PRIVATE, "555"))[0].text) == MAX_TEXT_CHARS
    assert len(chat_lines(client, ChatRef("qq", ChatKind.PRIVATE, "20005"))[0].text) == MAX_TEXT_CHARS
    assert sum(f"cut to {MAX_TEXT_CHARS}" in rec.getMessage() for rec in caplog.records) == 2


def test_overlong_text_on_turns_is_still_a_400(client):
    """The HTTP API (not a platform) is told why instead: 400."""
    assert turn(client, text="a" * (MAX_TEXT_CHARS + 1)).status_code == 400


def test_wechat_create_time_far_in_the_future_is_clamped(gateway):
    """A plaintext WeChat callback with CreateTime in 2100 answers 200 and is logged at the time of receipt."""
    import secrets

    from bridges.wechat.callback import sha1_signature

    c = gateway(wechat={"kind": "oa", "token": "oa-token", "reply_within": 60})
    ts, nonce = str(int(time.time())), secrets.token_hex(8)
    query = {"signature": sha1_signature("oa-token", ts, nonce), "timestamp": ts, "nonce": nonce}
    xml = ("<xml><ToUserName>gh_1</ToUserName><FromUserName>oUser1</FromUserName><CreateTime>4102444800</CreateTime>"
           "<MsgType>text</MsgType><Content>我明天考科目二</Content><MsgId>9001</MsgId></xml>").encode()
    r = c.post("/wechat/default", params=query, content=xml)
    assert r.status_code == 200
    line = c.app.state.pipeline.core.store.chat_tail("default", ChatRef("wx", ChatKind.PRIVATE, "oUser1"), 5)[0]
    assert abs(line.at.timestamp() - time.time()) < 60


def test_unexpected_error_answers_500_and_keeps_the_connection(fake_llm):
    """An error no handler maps answers a JSON 500 and the same HTTP/1.1 connection serves the next request
    (uvicorn on 127.0.0.1, not the in-process client)."""
    from fastapi import FastAPI

    from fake_openai import LoopbackServer
    from gateway.http.errors import install_handlers

    class Server(LoopbackServer):
        def _make_app(self):
            app = FastAPI()
            install_handlers(app)

            @app.get("/boom")
            async def boom():
                raise RuntimeError("bug")

            @app.get("/ok")
            async def ok():
                return {"ok": True}

            return app

    server = Server().start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/boom")
        r1 = conn.getresponse()
        assert r1.status == 500 and json.loads(r1.read())["error"] == "InternalError"
        assert r1.getheader("connection", "").lower() != "close"
        conn.request("GET", "/ok")
        r2 = conn.getresponse()
        assert r2.status == 200 and json.loads(r2.read()) == {"ok": True}
        conn.close()
    finally:
        server.stop()


# -- 3. display names ------------------------------------------------------------------------


def test_filler_group_card_gives_readable_fallback_in_prompt(client, llm):
    """A QQ group card of "\\u3164" falls back to the nickname; with none visible either, to QQ用户20005 in the prompt."""
    r = client.post("/onebot/default", content=raw_json(ob_event("我明天考科目二", group=9001, card="\u3164",
                                                                 nickname="\u200b\u3164")), headers=OB)
    assert r.status_code == 200
    prompt = json.dumps(llm.requests[-1]["messages"], ensure_ascii=False)
    assert "QQ用户20005: 我明天考科目二" in prompt and "\u3164:" not in prompt
    llm.requests.clear()
    r = client.post("/onebot/default", content=raw_json(ob_event("我后天考科目三", mid=8102, group=9001,
                                                                 card="\u3164", nickname="阿\u200b青")), headers=OB)
    assert r.status_code == 200
    assert "阿青: 我后天考科目三" in json.dumps(llm.requests[-1]["messages"], ensure_ascii=False)


def test_zero_width_nickname_is_cleaned_in_the_recollection_header(client):
    """A Telegram first name with zero-width characters reaches the recollection header cleaned."""
    body = tg_update("我养了一只猫，叫煤球", first_name="A\u200bn\u200dn\u2060", mid=51)
    assert client.post("/telegram/default", content=raw_json(body), headers=TG).status_code == 200
    r = turn(client, sender_id="555", chat_id="555", message_id="52", text="煤球最近怎么样？", sender_name="A\u200bnn")
    rec = r.json()["recollection"]
    assert "Ann" in rec and "\u200b" not in rec


@pytest.mark.parametrize("name", [None, "", "\u3164", "\u200b\u200c"])
def test_missing_or_invisible_sender_name_on_turns(client, llm, name):
    """sender_name null, empty or invisible on /v1/turns: 200, and the prompt names the person 用户 + id, never blank."""
    r = turn(client, sender_name=name, chat_kind="group", chat_id="-100", mentions_bot=True, text="我明天考科目二")
    assert r.status_code == 200
    assert "Telegram用户42: 我明天考科目二" in json.dumps(llm.requests[-1]["messages"], ensure_ascii=False)


# -- 6. model control words mean silence -----------------------------------------------------


@pytest.mark.parametrize("answer", ["NO_REPLY", " no_reply ", "[NO_REPLY]", "NO_REPLY。", "   ", "\n\t"])
def test_control_word_or_blank_answer_is_silence_on_every_route(client, llm, fake_telegram, answer):
    """NO_REPLY (any case, bracketed, with punctuation) or a blank answer: nothing is sent or logged as the bot."""
    llm.enqueue(answer)
    r = client.post("/telegram/default", content=raw_json(tg_update("嗯", mid=61)), headers=TG)
    assert r.status_code == 200
    llm.enqueue(answer)
    r2 = client.post("/onebot/default", content=raw_json(ob_event("嗯", mid=62)), headers=OB)
    assert r2.status_code == 200 and r2.json() == {}
    llm.enqueue(answer)
    r3 = turn(client, text="嗯", message_id="63")
    assert r3.status_code == 200 and r3.json()["reply"] is None
    assert fake_telegram.sent() == []
    for chat in (ChatRef("tg", ChatKind.PRIVATE, "555"), ChatRef("qq", ChatKind.PRIVATE, "20005"),
                 ChatRef("tg", ChatKind.PRIVATE, "42")):
        assert [ln.role for ln in chat_lines(client, chat)] == ["user"]


def test_control_word_inside_a_real_answer_is_removed(client, llm):
    """A real answer that also carries NO_REPLY reaches the person without the control word."""
    llm.enqueue("加油！NO_REPLY")
    assert turn(client, text="我明天考试").json()["reply"] == "加油！"


@pytest.mark.parametrize("answer, spoken", [
    ("你养了一只叫煤球的黑猫[src:a1b2c3d4e5f6]，它最近还好吗？", "你养了一只叫煤球的黑猫，它最近还好吗？"),
    ("Coal is a lovely name [src: zz99, a1b2c3d4e5f6]. How is he?【src：不存在】", "Coal is a lovely name. How is he?"),
    ("<recollection>\n记得你说过喜欢猫 [a1b2c3d4e5f6]\n</recollection>\n要不要聊聊煤球？", "记得你说过喜欢猫\n\n要不要聊聊煤球？"),
    ("Sure!＜/memories＞ Tell me more [src:", "Sure! Tell me more"),
])
def test_citation_markers_and_block_tags_never_reach_a_person(client, llm, fake_telegram, answer, spoken):
    """A model reply carrying ``[src:ID]`` markers (ours or invented, ASCII or full-width, one left open), memory
    ids or the recollection's tags reaches the person without them on Telegram, OneBot and /v1/turns, and the
    chat tail keeps what was said (issue 26.4)."""
    llm.enqueue(answer)
    assert client.post("/telegram/default", content=raw_json(tg_update("嗯", mid=71)), headers=TG).status_code == 200
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1)
    assert fake_telegram.sent()[0]["text"] == spoken
    llm.enqueue(answer)
    r = client.post("/onebot/default", content=raw_json(ob_event("嗯", mid=72)), headers=OB)
    assert r.json()["reply"] == spoken  # a private quick operation: the text itself
    llm.enqueue(answer)
    assert turn(client, text="嗯", message_id="73").json()["reply"] == spoken
    assert [ln.text for ln in chat_lines(client, ChatRef("tg", ChatKind.PRIVATE, "555")) if ln.role == "bot"] == [spoken]


def test_a_reply_of_markers_alone_is_silence(client, llm):
    """Nothing left once the markers and tags are gone: the bot stays silent instead of sending punctuation."""
    llm.enqueue("[src:a1b2c3d4e5f6]。<recollection></recollection>")
    assert turn(client, text="嗯", message_id="74").json()["reply"] is None


# -- 7. the reply language follows what the person writes -----------------------------------


def test_chinese_writer_with_english_app_gets_chinese_command_replies(client, fake_telegram):
    """A person writing Chinese from a Telegram app set to English gets the Chinese command reply."""
    body = tg_update("/memory 列表", language="en", mid=71,
                     entities=[{"type": "bot_command", "offset": 0, "length": 7}])
    assert client.post("/telegram/default", content=raw_json(body), headers=TG).status_code == 200
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1)
    zh = fake_telegram.sent()[0]["text"]
    body = tg_update("/memory list", language="en", mid=72, sender=556,
                     entities=[{"type": "bot_command", "offset": 0, "length": 7}])
    assert client.post("/telegram/default", content=raw_json(body), headers=TG).status_code == 200
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 2)
    en = fake_telegram.sent()[1]["text"]
    assert zh == "我还没有记下关于你的事。" and en == "I don't remember anything about you yet."


def test_language_falls_back_to_previous_turns_then_hint_then_default(client):
    """An emoji-only command: the person's earlier Chinese lines decide; without any, the platform hint; then the tenant."""
    assert turn(client, sender_id="81", chat_id="81", message_id="1", text="我喜欢喝乌龙茶",
                language="en").status_code == 200
    r = turn(client, sender_id="81", chat_id="81", message_id="2", text="/memory", is_command=True, language="en")
    assert "记忆" in r.json()["reply"]
    r = turn(client, sender_id="82", chat_id="82", message_id="1", text="/memory", is_command=True, language="en")
    assert "memor" in r.json()["reply"].lower()
    r = turn(client, sender_id="83", chat_id="83", message_id="1", text="/memory", is_command=True)
    assert "记忆" in r.json()["reply"]


def test_mixed_text_language_is_the_majority_script():
    """locales.written_language: the majority script decides, emoji alone decides nothing."""
    from locales import turn_language, written_language

    assert written_language("我喜欢Taylor Swift") == "zh_CN"
    assert written_language("I went to 星巴克 today") == "en"
    assert written_language("我養了一隻貓！") == "zh_CN"
    assert written_language("ｈｅｌｌｏ　ｗｏｒｌｄ") == "en"
    assert written_language("😀🎉 123") is None
    assert turn_language("😀", ["hello there"], "zh-hans", "zh_CN") == "en"
    assert turn_language("😀", [], "en-US", "zh_CN") == "en"
    assert turn_language("😀", [], None, "en") == "en"


# -- 4. a re-push with a new message id is the same message ----------------------------------


def test_onebot_repush_with_new_message_id_is_one_turn(client, llm):
    """The issue's pair (8101 and 15358246: same self_id, group, user, time, text) gets one reply and one tail line;
    the same text at another second, or from another person, is a turn of its own."""
    now = int(time.time())
    first = ob_event("@小忆 我明天考科目二", mid=8101, group=9002, at=now)
    again = ob_event("@小忆 我明天考科目二", mid=15358246, group=9002, at=now)
    r1 = client.post("/onebot/default", content=raw_json(first), headers=OB)
    r2 = client.post("/onebot/default", content=raw_json(again), headers=OB)
    assert r1.status_code == r2.status_code == 200
    assert r1.json()["reply"][1]["data"]["text"] == "好的，我记得。" and r2.json() == {}
    group = ChatRef("qq", ChatKind.GROUP, "9002")
    assert [(ln.role, ln.message_id) for ln in chat_lines(client, group)] == [("user", "8101"), ("bot", "")]
    later = ob_event("@小忆 我明天考科目二", mid=8102, group=9002, at=now + 1)
    other = ob_event("@小忆 我明天考科目二", mid=8103, group=9002, user=20006, at=now)
    assert client.post("/onebot/default", content=raw_json(later), headers=OB).json()["reply"]
    assert client.post("/onebot/default", content=raw_json(other), headers=OB).json()["reply"]
    assert [ln.message_id for ln in chat_lines(client, group) if ln.role == "user"] == ["8101", "8102", "8103"]


def test_telegram_and_command_repush_are_deduplicated(client, fake_telegram):
    """A Telegram message and a /memory command re-pushed under new ids run once each (one reply each)."""
    now = int(time.time())
    for mid in (91, 92):
        assert client.post("/telegram/default", content=raw_json(tg_update("我喜欢乌龙茶", mid=mid, date=now - 5)),
                           headers=TG).status_code == 200
    cmd = {"entities": [{"type": "bot_command", "offset": 0, "length": 7}]}
    for mid in (93, 94):
        assert client.post("/telegram/default", content=raw_json(tg_update("/memory 列表", mid=mid, date=now - 4,
                                                                           **cmd)), headers=TG).status_code == 200
    assert fake_telegram.wait_for(lambda: len(fake_telegram.sent()) >= 2)
    time.sleep(0.3)
    assert len(fake_telegram.sent()) == 2


def test_fingerprint_claim_expires_after_its_window(sqlite_core):
    """Store.claim_fingerprint: refused within the window, claimable again after it."""
    from datetime import timedelta

    from memory.store import utcnow

    store = sqlite_core.store
    window = timedelta(minutes=10)
    t0 = utcnow()
    assert store.claim_fingerprint("fp|x|1", window, now=t0)
    assert not store.claim_fingerprint("fp|x|1", window, now=t0 + timedelta(minutes=9))
    assert store.claim_fingerprint("fp|x|1", window, now=t0 + timedelta(minutes=11))
    assert not store.claim_fingerprint("fp|x|1", window, now=t0 + timedelta(minutes=12))


# -- 11. slow and hostile clients --------------------------------------------------------------


def test_half_a_body_gets_408_within_the_body_timeout():
    """A client that sends half its body and stalls gets 408 after settings.body_timeout_s, not a held connection
    (the real app under uvicorn on 127.0.0.1)."""
    import socket

    from fake_openai import LoopbackServer
    from gateway.http.app import create_app
    from gateway.config import load_settings

    settings = load_settings(body_timeout_s=1.0)

    class Server(LoopbackServer):
        def _make_app(self):
            return create_app(settings, pipeline=object())  # the body is read before the pipeline is touched

    server = Server().start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
            t0 = time.monotonic()
            sock.sendall(b"POST /v1/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"message\": ")
            answer = sock.recv(4096)
            waited = time.monotonic() - t0
        assert answer.startswith(b"HTTP/1.1 408") and b"BodyTimeout" in answer
        assert 0.9 <= waited < 10
    finally:
        server.stop()


# -- 10. a stalled or lost database ------------------------------------------------------------


def test_silent_database_listener_fails_fast_with_store_error(monkeypatch):
    """A PostgreSQL URL whose listener accepts and never answers fails with StoreError within the connect timeout
    (it took 136 s before)."""
    import socket

    from memory.errors import StoreError
    from memory.store import Store, base

    # the store reads the timeout when it builds its engine: 2 s here pins the same path as the real 10 s
    monkeypatch.setattr(base, "CONNECT_TIMEOUT_S", 2)
    CONNECT_TIMEOUT_S = base.CONNECT_TIMEOUT_S
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cannot open database"):
            Store(f"postgresql://huiyi@127.0.0.1:{port}/huiyi")
        assert time.monotonic() - t0 < CONNECT_TIMEOUT_S * 2 + 5


def test_database_lost_while_serving_answers_503(client):
    """The database file removed under a running gateway (SQLite: its directory made unreadable is not portable,
    so the engine is pointed at a path that cannot open): the turn answers 503, not 500."""
    from sqlalchemy import create_engine

    store = core(client).store
    store.engine.dispose()
    store.engine = create_engine("sqlite:////nonexistent-dir/huiyi.db")
    store._write_engine = store.engine.execution_options(huiyi_write=True)
    r = turn(client, text="我喜欢猫")
    assert r.status_code == 503 and r.json()["error"] == "StoreError"


# -- withdrawals on every OneBot route (issue 26.3) ------------------------------------------


def ob_recall(mid: int, *, user: int = 20005, group: int | None = None, operator: int | None = None) -> dict:
    notice = {"time": int(time.time()), "self_id": SELF_ID, "post_type": "notice", "user_id": user, "message_id": mid,
              "notice_type": "friend_recall" if group is None else "group_recall"}
    if group is not None:
        notice.update(group_id=group, operator_id=operator or user)
    return notice


@pytest.mark.parametrize("text", ["我对芒果过敏。", "I'm allergic to mangoes."])
@pytest.mark.parametrize("group", [None, 9003])
def test_onebot_http_withdrawal_after_the_capture_unteaches_it(client, llm, text, group):
    """``POST /onebot/{tenant}`` with friend_recall / group_recall (it answered ``{}`` and kept the memory before):
    the memory the message taught is retracted and its line leaves the tail; another message's memory stays."""
    ns = Namespace("default", "qq:20005")
    assert client.post("/onebot/default", content=raw_json(ob_event("我叫阿青。", mid=8301, group=group)),
                       headers=OB).status_code == 200
    client.post("/onebot/default", content=raw_json(ob_event(text, mid=8302, group=group)), headers=OB)
    assert any("芒果" in m.text or "mango" in m.text for m in core(client).list(ns))
    r = client.post("/onebot/default", content=raw_json(ob_recall(8302, group=group, operator=20006)), headers=OB)
    assert r.status_code == 200 and r.json() == {}
    assert [m.text for m in core(client).list(ns)] == ["我叫阿青。"]
    chat = ChatRef("qq", ChatKind.GROUP, str(group)) if group else ChatRef("qq", ChatKind.PRIVATE, "20005")
    assert text not in [ln.text for ln in chat_lines(client, chat)]


def test_onebot_http_withdrawal_before_its_message_keeps_it_out(client, llm):
    """The notice overtakes its message on the HTTP route: the message is neither logged nor captured."""
    ns = Namespace("default", "qq:20005")
    assert client.post("/onebot/default", content=raw_json(ob_recall(8311)), headers=OB).json() == {}
    client.post("/onebot/default", content=raw_json(ob_event("我对芒果过敏。", mid=8311)), headers=OB)
    assert core(client).list(ns) == []
    assert "我对芒果过敏。" not in [ln.text for ln in chat_lines(client, ChatRef("qq", ChatKind.PRIVATE, "20005"))]
