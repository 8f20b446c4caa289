"""WeChat callbacks: the pure parser on every recorded XML (index in
tests/data/wechat_expected.json), URL verification and message callbacks in
plaintext (``signature``) and safe mode (``msg_signature`` + AES, with the
WeCom vectors from wechatpy), MsgId dedupe per sender, and the 5-second rule
against a fake WeChat API on 127.0.0.1: three retries give one reply and one
capture."""

from __future__ import annotations

import json
import secrets
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bridges.wechat.callback import WeChatCallback, cdata, sha1_signature
from bridges.wechat.parse import parse_message, parse_xml
from conftest import TEST_DATA
from memory.types import Namespace

IM = TEST_DATA / "im"
EXPECTED = json.loads((Path(__file__).resolve().parents[1] / "data" / "wechat_expected.json").read_text("utf-8"))
VECTORS = json.loads((IM / "wechat" / "wecom_crypto_vectors_wechatpy.json").read_text("utf-8"))
OA_TOKEN = "oa-token"


@pytest.mark.parametrize("rel", sorted(EXPECTED["files"]))
def test_every_recorded_callback_parses_as_indexed(rel):
    """Each real OA/WeCom XML parses into the indexed message, or is ignored."""
    want = EXPECTED["files"][rel]
    msg = parse_message((IM / rel).read_bytes(), platform="wecom" if "wechatpy_work" in rel else "wx")
    if "ignored" in want:
        assert msg is None
        return
    w = want["message"]
    assert f"{msg.platform}:{msg.sender_id}" == w["subject"]
    assert (msg.chat_kind.value, msg.chat_id, msg.message_id, msg.text) == (w["chat_kind"], w["chat_id"],
                                                                            w["message_id"], w["text"])
    assert msg.timestamp.timestamp() == w["timestamp"]


def test_every_fixture_file_is_indexed():
    """The index names every XML file under tests/data/im/wechat."""
    on_disk = {str(p.relative_to(IM)) for p in (IM / "wechat").rglob("*.xml")}
    assert on_disk == set(EXPECTED["files"])


@pytest.mark.parametrize("body", [
    b'<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY a "aaaa">]><xml><MsgType>text</MsgType><Content>&a;</Content></xml>',
    b"<xml><MsgType>text</MsgType>", b"<notxml/>", b"x" * (300 * 1024),
    # issue 13 item 11: the same declarations in UTF-16 passed a byte check for "<!DOCTYPE"
    ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE xml [<!ENTITY a "aaaa">]>'
     '<xml><MsgType>text</MsgType><Content>&a;</Content></xml>').encode("utf-16"),
    ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE xml [<!ENTITY a "' + "a" * 100 + '"><!ENTITY b "&a;&a;&a;&a;">]>'
     '<xml><Content>&b;&b;&b;</Content></xml>').encode("utf-16-le"),
])
def test_hostile_or_malformed_xml_is_ignored(body):
    """DOCTYPE/entity declarations, broken XML, a foreign root and oversized bodies parse to None."""
    assert parse_xml(body) is None and parse_message(body) is None


def test_cdata_splits_terminator_so_reply_text_cannot_inject_xml():
    """A reply containing ']]>' stays text inside the passive reply XML."""
    text = "a]]><MsgType>news</MsgType>b"
    root = ET.fromstring(f"<xml><Content>{cdata(text)}</Content></xml>")
    assert root.find("Content").text == text and root.find("MsgType") is None


def _oa_query(token: str = OA_TOKEN, ts: str | None = None, nonce: str | None = None) -> dict:
    """A signed plaintext-mode query string; a fresh numeric nonce per call, as WeChat sends."""
    ts = ts or str(int(time.time()))
    nonce = nonce or str(secrets.randbelow(10**10))
    return {"signature": sha1_signature(token, ts, nonce), "timestamp": ts, "nonce": nonce}


#: The recorded WeCom vectors were signed in 2014: a window that reaches back to then.
VECTOR_WINDOW = 2_000_000_000


def _wecom_cfg() -> dict:
    return {"kind": "wecom", "token": VECTORS["token"], "encoding_aes_key": VECTORS["encoding_aes_key"],
            "app_id": VECTORS["corp_id"], "agent_id": "1", "window": VECTOR_WINDOW}


def test_oa_url_verification_echoes_only_with_a_valid_signature(gateway):
    """GET with a valid signature answers echostr; a wrong one answers 401."""
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN})
    q = _oa_query() | {"echostr": "hello-123"}
    r = c.get("/wechat/default", params=q)
    assert r.status_code == 200 and r.text == "hello-123"
    assert c.get("/wechat/default", params=q | {"nonce": "43"}).status_code == 401


def test_wecom_url_verification_with_wechatpy_vectors(gateway):
    """The WeCom vector's echostr decrypts with its msg_signature; the off-by-one nonce is refused."""
    c = gateway(wechat=_wecom_cfg())
    ok = VECTORS["cases"]["test_check_signature_should_ok"]
    q = {"msg_signature": ok["signature"], "timestamp": ok["timestamp"], "nonce": ok["nonce"], "echostr": ok["echo_str"]}
    r = c.get("/wechat/default", params=q)
    assert r.status_code == 200 and r.text.isdigit()
    bad = VECTORS["cases"]["test_check_signature_should_fail"]
    assert c.get("/wechat/default", params=q | {"nonce": bad["nonce"]}).status_code == 401


def test_wecom_encrypted_message_gets_an_encrypted_passive_reply(gateway, llm):
    """The vector's encrypted callback runs a turn for 'messense'; the passive reply decrypts to the model's text."""
    llm.enqueue("收到你的消息啦")
    c = gateway(wechat=_wecom_cfg() | {"reply_within": 60})  # a cold first turn may exceed the default 4 s
    case = VECTORS["cases"]["test_decrypt_message"]
    q = {"msg_signature": case["signature"], "timestamp": case["timestamp"], "nonce": case["nonce"]}
    r = c.post("/wechat/default", params=q, content=case["xml"].encode())
    assert r.status_code == 200
    outer = parse_xml(r.content)
    assert outer["MsgSignature"] == sha1_signature(VECTORS["token"], outer["TimeStamp"], outer["Nonce"],
                                                   outer["Encrypt"])
    cb = WeChatCallback(type("Cfg", (), _wecom_cfg())())
    inner = cb.open({"msg_signature": outer["MsgSignature"], "timestamp": outer["TimeStamp"],
                     "nonce": outer["Nonce"]}, r.content)
    assert inner["Content"] == "收到你的消息啦" and inner["ToUserName"] == "messense" and inner["AgentID"] == "1"
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "test"}


def test_wecom_encrypt_vector_decrypts_and_verifies():
    """wechatpy's expected encrypted reply verifies with our signature check and decrypts to the reply XML."""
    case = VECTORS["cases"]["test_encrypt_message"]
    cb = WeChatCallback(type("Cfg", (), _wecom_cfg())())
    outer = parse_xml(case["expected"])
    fields = cb.open({"msg_signature": outer["MsgSignature"], "timestamp": outer["TimeStamp"],
                      "nonce": outer["Nonce"]}, case["expected"].encode())
    assert fields == parse_xml(case["reply"])
    sealed = cb.seal(case["reply"], {"nonce": case["nonce"], "timestamp": case["timestamp"]})
    again = parse_xml(sealed)
    assert cb.open({"msg_signature": again["MsgSignature"], "timestamp": again["TimeStamp"], "nonce": again["Nonce"]},
                   sealed.encode()) == fields


def _oa_text(text: str, *, user: str = "oUser1", msg_id: str = "6001", created: int | None = None) -> bytes:
    created = created or int(time.time())
    return (f"<xml><ToUserName><![CDATA[gh_account]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
            f"<CreateTime>{created}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId></xml>").encode()


def test_oa_plaintext_message_with_wrong_signature_is_401_and_nothing_stored(gateway):
    """A forged plaintext callback is refused before parsing: nothing captured."""
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN})
    r = c.post("/wechat/default", params=_oa_query(token="forged"), content=_oa_text("我叫小王"))
    assert r.status_code == 401
    assert c.app.state.pipeline.core.store.count(Namespace("default", "wx:oUser1")) == 0


def test_oa_plaintext_message_gets_a_passive_reply(gateway, llm):
    """A signed plaintext text message is answered in the HTTP response as reply XML."""
    llm.enqueue("你好，小王")
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60})
    r = c.post("/wechat/default", params=_oa_query(), content=_oa_text("我叫小王"))
    reply = parse_xml(r.content)
    assert reply["MsgType"] == "text" and reply["Content"] == "你好，小王"
    assert reply["ToUserName"] == "oUser1" and reply["FromUserName"] == "gh_account"
    assert c.app.state.pipeline.core.store.count(Namespace("default", "wx:oUser1")) == 1


def test_msgid_dedupe_is_per_sender(gateway, llm):
    """Two users sending the same MsgId are two messages; the same user's repeat is a duplicate."""
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN})
    for user in ("oA", "oB", "oA"):
        assert c.post("/wechat/default", params=_oa_query(), content=_oa_text("我喜欢画画", user=user, msg_id="77"),
                      ).status_code == 200
    store = c.app.state.pipeline.core.store
    assert store.count(Namespace("default", "wx:oA")) == 1 and store.count(Namespace("default", "wx:oB")) == 1
    assert len(llm.requests) == 2


def test_slow_reply_goes_through_the_api_once_despite_three_retries(gateway, llm, fake_wechat):
    """Model slower than reply_within: each of WeChat's 3 deliveries answers 'success' fast; one API reply, one capture."""
    llm.enqueue("我记住煤球了", delay=1.5)
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "app_id": "wxapp", "app_secret": "sec",
                        "api_base": fake_wechat.base_url, "reply_within": 0.3})
    body = _oa_text("我养了一只叫煤球的猫", msg_id="9001")
    with c.unsettled():  # the answers alone, not the replies that follow them
        for _ in range(3):
            t0 = time.perf_counter()
            r = c.post("/wechat/default", params=_oa_query(), content=body)
            assert r.status_code == 200 and r.text == "success"
            assert time.perf_counter() - t0 < 1.2
    assert fake_wechat.wait_for(lambda: len(fake_wechat.sends) == 1, timeout=40)
    time.sleep(0.3)
    assert fake_wechat.sends == [{"touser": "oUser1", "msgtype": "text", "text": {"content": "我记住煤球了"}}]
    assert c.app.state.pipeline.core.store.count(Namespace("default", "wx:oUser1")) == 1
    assert len([r for r in llm.requests if "messages" in r]) == 1


def test_wecom_slow_reply_uses_the_app_message_api(gateway, llm, fake_wechat):
    """WeCom: a late reply is sent with message/send, the AgentID and a corp token."""
    llm.enqueue("稍等回复", delay=0.8)
    c = gateway(wechat=_wecom_cfg() | {"app_secret": "corpsecret", "api_base": fake_wechat.base_url,
                                       "reply_within": 0.1})
    case = VECTORS["cases"]["test_decrypt_message"]
    q = {"msg_signature": case["signature"], "timestamp": case["timestamp"], "nonce": case["nonce"]}
    assert c.post("/wechat/default", params=q, content=case["xml"].encode()).text == "success"
    assert fake_wechat.wait_for(lambda: len(fake_wechat.sends) == 1, timeout=40)
    assert fake_wechat.sends[0] == {"touser": "messense", "msgtype": "text", "agentid": 1,
                                    "text": {"content": "稍等回复"}}


async def test_reply_api_retries_transient_failures_and_not_others(fake_wechat):
    """Issue 13 item 5: a 502 and an errcode -1 (system busy) are retried and the text lands once; an
    errcode 45015 (window closed) is raised at once after one attempt, naming WeChat's code."""
    import httpx

    from bridges.wechat.api import WeChatAPI, WeChatAPIError
    from gateway.config import WeChatSettings

    cfg = WeChatSettings(kind="oa", token=OA_TOKEN, app_id="wxapp", app_secret="sec", api_base=fake_wechat.base_url)
    async with httpx.AsyncClient(timeout=10) as client:
        api = WeChatAPI(cfg, client)
        fake_wechat.fail_next.extend([(502, {"errmsg": "bad gateway"}), (200, {"errcode": -1, "errmsg": "system busy"})])
        assert await api.send_text("oUser1", "我记得你喜欢乌龙茶") == 1
        assert fake_wechat.attempts == 3 and [s["text"]["content"] for s in fake_wechat.sends] == ["我记得你喜欢乌龙茶"]
        fake_wechat.fail_next.append((200, {"errcode": 45015, "errmsg": "response out of time limit"}))
        with pytest.raises(WeChatAPIError, match="45015") as err:
            await api.send_text("oUser1", "还在吗")
        assert err.value.errcode == 45015 and fake_wechat.attempts == 4


# -- freshness and replay (issue 13 B) -------------------------------------------

YEAR = 365 * 24 * 3600


def _model_calls(llm) -> int:
    return len([r for r in llm.requests if "messages" in r])


def test_plaintext_callback_is_accepted_once_and_its_query_string_cannot_carry_another_body(gateway, llm, caplog):
    """Plaintext mode signs no body: a fresh query string works once; replayed with another body (forget all, as
    the same openid) it is 401 with a reason and a log line; replayed with the same body (WeChat's retry) it
    answers 'success' and processes nothing."""
    llm.enqueue("记住啦")
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60})
    q = _oa_query()
    body = _oa_text("我的狗叫旺财🐶", msg_id="7001")
    first = c.post("/wechat/default", params=q, content=body)
    assert parse_xml(first.content)["Content"] == "记住啦"
    calls = _model_calls(llm)
    forged = c.post("/wechat/default", params=q, content=_oa_text("/memory forget all", msg_id="7002"))
    assert forged.status_code == 401
    assert forged.json() == {"error": "Unauthorized", "detail": "nonce already used with another body (replayed signature)"}
    assert "refused a wechat callback for tenant default: nonce already used with another body" in caplog.text
    retry = c.post("/wechat/default", params=q, content=body)
    assert retry.status_code == 200 and retry.text == "success"
    assert _model_calls(llm) == calls
    store = c.app.state.pipeline.core.store
    assert store.count(Namespace("default", "wx:oUser1")) == 1
    assert store.pending_capture_count(Namespace("default", "wx:oUser1"), None) == 0


@pytest.mark.parametrize("age,what", [(YEAR, "a year old"), (301, "just past the window"),
                                      (-310, "too far in the future"), (-YEAR, "a year ahead")])
def test_plaintext_callback_outside_the_window_is_401(gateway, llm, age, what):
    """A correctly signed plaintext callback whose timestamp is {what} is refused: 401, no turn, no memory."""
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60})
    ts = str(int(time.time()) - age)
    r = c.post("/wechat/default", params=_oa_query(ts=ts), content=_oa_text("I love green tea 🍵", msg_id="8001"))
    assert r.status_code == 401 and r.json()["detail"] == "timestamp outside the 300 s window", what
    assert c.app.state.pipeline.core.store.count(Namespace("default", "wx:oUser1")) == 0
    assert _model_calls(llm) == 0
    inside = c.post("/wechat/default", params=_oa_query(ts=str(int(time.time()) - 250)),
                    content=_oa_text("I love green tea 🍵", msg_id="8001"))
    assert inside.status_code == 200


def test_url_verification_refuses_a_year_old_signature_and_a_reused_nonce(gateway):
    """GET verification: a year-old timestamp is 401; the same query string with another echostr is 401."""
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN})
    old = _oa_query(ts=str(int(time.time()) - YEAR)) | {"echostr": "e1"}
    assert c.get("/wechat/default", params=old).status_code == 401
    q = _oa_query()
    assert c.get("/wechat/default", params=q | {"echostr": "e1"}).text == "e1"
    assert c.get("/wechat/default", params=q | {"echostr": "e2"}).status_code == 401


def _oa_safe_post(c, token: str, xml: bytes, ts: int, nonce: str):
    from wechatpy.crypto import WeChatCrypto

    sealed = parse_xml(WeChatCrypto(token, VECTORS["encoding_aes_key"], "wxsafeapp").encrypt_message(
        xml.decode(), nonce, str(ts)))
    q = {"signature": sha1_signature(token, str(ts), nonce), "timestamp": str(ts), "nonce": nonce,
         "encrypt_type": "aes", "msg_signature": sealed["MsgSignature"]}
    body = f"<xml><ToUserName><![CDATA[gh_account]]></ToUserName><Encrypt><![CDATA[{sealed['Encrypt']}]]></Encrypt></xml>"
    return c.post("/wechat/default", params=q, content=body.encode())


def test_safe_mode_refuses_stale_timestamps_and_replayed_nonces(gateway, llm):
    """OA safe mode: a fresh encrypted callback is answered; the same nonce with another encrypted body is 401; a
    year-old or future timestamp, though correctly signed and encrypted, is 401."""
    llm.enqueue("好的，记住了")
    c = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "encoding_aes_key": VECTORS["encoding_aes_key"],
                        "app_id": "wxsafeapp", "reply_within": 60})
    now = int(time.time())
    assert _oa_safe_post(c, OA_TOKEN, _oa_text("我住在杭州", msg_id="9101"), now, "123").status_code == 200
    again = _oa_safe_post(c, OA_TOKEN, _oa_text("/memory forget all", msg_id="9102"), now, "123")
    assert again.status_code == 401 and "nonce already used" in again.json()["detail"]
    for ts in (now - YEAR, now + 400):
        r = _oa_safe_post(c, OA_TOKEN, _oa_text("我住在上海", msg_id="9103"), ts, "456")
        assert r.status_code == 401 and "window" in r.json()["detail"]
    assert [m.text for m in c.app.state.pipeline.core.list(Namespace("default", "wx:oUser1"))] == ["我住在杭州"]


def test_wecom_recorded_callback_from_2014_is_refused_with_the_default_window(gateway, llm):
    """The wechatpy WeCom vector is correctly signed but was made in 2014: with the default window it is 401."""
    c = gateway(wechat=_wecom_cfg() | {"window": 300})
    case = VECTORS["cases"]["test_decrypt_message"]
    q = {"msg_signature": case["signature"], "timestamp": case["timestamp"], "nonce": case["nonce"]}
    r = c.post("/wechat/default", params=q, content=case["xml"].encode())
    assert r.status_code == 401 and r.json()["detail"] == "timestamp outside the 300 s window"
    assert _model_calls(llm) == 0


def test_nonce_claimed_on_one_replica_is_refused_on_another(gateway, llm):
    """Two gateway replicas on one database (the per-test data root): a query string used on the first is refused
    on the second, since the nonces live in SQL."""
    llm.enqueue("收到")
    a = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60})
    b = gateway(wechat={"kind": "oa", "token": OA_TOKEN, "reply_within": 60})
    assert a.app.state.pipeline.core.store is not b.app.state.pipeline.core.store
    q = _oa_query()
    assert a.post("/wechat/default", params=q, content=_oa_text("我喜欢周杰伦", msg_id="9201")).status_code == 200
    r = b.post("/wechat/default", params=q, content=_oa_text("我喜欢蔡依林", msg_id="9202"))
    assert r.status_code == 401 and "nonce already used" in r.json()["detail"]


def test_plaintext_tenant_is_warned_about_at_start_up(gateway, caplog):
    """A tenant with a WeChat token and no encoding_aes_key gets a start-up WARNING recommending safe mode; a safe-mode one does not."""
    gateway(wechat={"kind": "oa", "token": OA_TOKEN})
    warned = [r for r in caplog.records if "plaintext mode" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING" and "encoding_aes_key" in warned[0].getMessage()
    caplog.clear()
    gateway(wechat={"kind": "oa", "token": OA_TOKEN, "encoding_aes_key": VECTORS["encoding_aes_key"],
                    "app_id": "wxsafeapp"})
    assert not [r for r in caplog.records if "plaintext mode" in r.getMessage()]

@pytest.mark.parametrize("msg_type", ["link", "chatrecord", "merged_msg"])
def test_a_forwarded_chat_record_is_not_the_senders_text(msg_type):
    """WeChat marks no forwarded text; a forwarded chat record arrives as a non-text
    type and is ignored, so its content never becomes the sender's words (issue 12)."""
    from bridges.wechat.parse import parse_message

    xml = (f"<xml><ToUserName>gh_1</ToUserName><FromUserName>oUser1</FromUserName><CreateTime>1764500100</CreateTime>"
           f"<MsgType>{msg_type}</MsgType><Title>群聊的聊天记录</Title><Description>小周：我叫小周。</Description>"
           f"<MsgId>123456</MsgId></xml>")
    assert parse_message(xml) is None


def test_a_message_of_an_unknown_msg_type_is_ignored_with_an_info_line(caplog):
    """An Official Account / WeCom MsgType outside the documented ones is ignored with an INFO line naming it;
    media, locations and links, which arrive routinely, stay below INFO."""
    import logging

    from bridges.wechat.parse import parse_message

    def xml(msg_type: str) -> str:
        return (f"<xml><ToUserName>gh_1</ToUserName><FromUserName>oUser1</FromUserName><CreateTime>1764500100"
                f"</CreateTime><MsgType>{msg_type}</MsgType><Content>我养了一只猫</Content><MsgId>1</MsgId></xml>")

    with caplog.at_level(logging.INFO, logger="bridges.wechat.parse"):
        assert parse_message(xml("hologram")) is None
        assert [(r.levelno, "hologram" in r.getMessage()) for r in caplog.records] == [(logging.INFO, True)]
        caplog.clear()
        for msg_type in ("image", "location", "link", "video"):
            assert parse_message(xml(msg_type)) is None
    assert caplog.records == []
