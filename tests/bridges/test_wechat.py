"""WeChat callbacks: the pure parser on every recorded XML (index in
tests/data/wechat_expected.json), URL verification and message callbacks in
plaintext (``signature``) and safe mode (``msg_signature`` + AES, with the
WeCom vectors from wechatpy), MsgId dedupe per sender, and the 5-second rule
against a fake WeChat API on 127.0.0.1: three retries give one reply and one
capture."""

from __future__ import annotations

import json
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


def _oa_query(token: str = OA_TOKEN, ts: str | None = None, nonce: str = "42") -> dict:
    ts = ts or str(int(time.time()))
    return {"signature": sha1_signature(token, ts, nonce), "timestamp": ts, "nonce": nonce}


def _wecom_cfg() -> dict:
    return {"kind": "wecom", "token": VECTORS["token"], "encoding_aes_key": VECTORS["encoding_aes_key"],
            "app_id": VECTORS["corp_id"], "agent_id": "1"}


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
