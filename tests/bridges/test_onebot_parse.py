"""OneBot v11 event parsing (bridges.qq.parse) and CQ-code decoding (bridges.qq.cqcode).

Real payloads come from tests/data/im/onebot; their expected outcome is
indexed in tests/data/im_expected.json. Tests marked SYNTHETIC build events by
hand for cases the recorded data lacks.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.detect import detect_platform, iter_labelled_payloads
from bridges.qq.cqcode import decode_cq
from bridges.qq.parse import parse_event
from bridges.contract import InboundMessage
from conftest import TEST_DATA
from memory.types import ChatKind

QQ_DIR = TEST_DATA / "im" / "onebot"
EXPECTED = json.loads((Path(__file__).resolve().parents[1] / "data" / "im_expected.json").read_text("utf-8"))["files"]

SELF_ID = 2000000001


def _load(name: str) -> object:
    return json.loads((QQ_DIR / name).read_text("utf-8"))


def _group_event(message: object, **extra: object) -> dict:
    """SYNTHETIC: a group message event from user 123456 in group 987654 to bot SELF_ID."""
    return {
        "time": 1700000000,
        "self_id": SELF_ID,
        "post_type": "message",
        "message_type": "group",
        "sub_type": "normal",
        "message_id": -2147480001,
        "group_id": 987654,
        "user_id": 123456,
        "anonymous": None,
        "message": message,
        "raw_message": message if isinstance(message, str) else "",
        "font": 0,
        "sender": {"user_id": 123456, "nickname": "阿青", "card": "", "role": "member"},
        **extra,
    }


def _text(text: str) -> dict:
    return {"type": "text", "data": {"text": text}}


def _at(qq: object, **data: object) -> dict:
    return {"type": "at", "data": {"qq": str(qq), **data}}


# --- replay of recorded payloads ---------------------------------------------


def test_index_covers_every_onebot_file() -> None:
    """Every file under tests/data/im/onebot has an entry in im_expected.json, and no entry is stale."""
    on_disk = {f"onebot/{p.name}" for p in QQ_DIR.glob("*.json")}
    indexed = {k for k in EXPECTED if k.startswith("onebot/")}
    assert on_disk == indexed


@pytest.mark.parametrize("name", sorted(p.name for p in QQ_DIR.glob("*.json")))
def test_replay_recorded_payload(name: str) -> None:
    """Each recorded OneBot payload parses without raising into exactly the indexed outcome."""
    expected = EXPECTED[f"onebot/{name}"]
    labelled = list(iter_labelled_payloads(_load(name)))
    assert [label for label, _ in labelled] == list(expected)
    for label, payload in labelled:
        where = f"{name}:{label}"
        want = expected[label]
        if want == "not_payload":
            assert detect_platform(payload) is None, where
            continue
        assert detect_platform(payload) == "qq", where
        msg = parse_event(payload)
        if "ignored" in want:
            assert msg is None, where
            continue
        want = want["message"]
        assert isinstance(msg, InboundMessage), where
        assert f"{msg.platform}:{msg.sender_id}" == want["subject"], where
        assert (msg.chat_kind.value, msg.chat_id, msg.thread_id) == (want["chat_kind"], want["chat_id"], want["thread_id"]), where
        assert msg.text.startswith(want["text_prefix"]), where
        assert msg.mentions_bot is want["mentions_bot"], where
        assert (msg.reply_to.message_id if msg.reply_to else None) == want["reply_to"], where
        assert (msg.is_edit, msg.is_command) == (want["is_edit"], want["is_command"]), where
        msg.chat  # noqa: B018 - the chat must validate as a core ChatRef


def test_gocqhttp_private_event_fields() -> None:
    """The go-cqhttp docs private event maps user, nickname and a UTC timestamp from `time`."""
    msg = parse_event(_load("gocqhttp_docs_private_message_event.json"))
    assert msg is not None
    assert (msg.sender_id, msg.sender_name, msg.text, msg.message_id) == ("12345678", "小不点", "你好～", "12")
    assert msg.timestamp == datetime.fromtimestamp(1515204254, tz=UTC)
    assert msg.chat.key == "qq:private:12345678"


def test_nonebot_group_event_at_all() -> None:
    """An @all CQ code is a mention of "all", not of the bot, and is dropped from the text."""
    msg = parse_event(_load("nonebot_adapter_onebot_v11_test_events.json")[1])
    assert msg is not None
    assert (msg.chat_kind, msg.chat_id, msg.text, msg.mentions, msg.mentions_bot) == (ChatKind.GROUP, "1", "Test text", ("all",), False)


# --- CQ codes against the recorded reference data ----------------------------


def test_decode_cq_spec_string_equals_array() -> None:
    """OneBot spec: the CQ string form decodes into exactly the array form, escaped brackets as text."""
    data = _load("onebot11_spec_array_vs_string_example.json")
    assert decode_cq(data["string_format"]) == data["array_format"]


def test_decode_cq_spec_segment_pairs() -> None:
    """OneBot spec segment.md: every CQ string decodes into the segment shown just before it."""
    examples = _load("onebot11_spec_segment_examples.json")["examples"]
    pairs = 0
    for prev, cur in zip(examples, examples[1:]):
        if "cq_string" in cur and "segment" in prev and prev["section"] == cur["section"]:
            assert decode_cq(cur["cq_string"]) == [prev["segment"]], cur["section"]
            pairs += 1
    assert pairs >= 20


def test_decode_cq_gocqhttp_examples() -> None:
    """go-cqhttp docs: each code decodes into one segment of its type; data agrees with the doc's array form."""
    doc = _load("gocqhttp_docs_cqcode_examples.json")
    for example in doc["examples"]:
        segment = example["array_segment"]
        for i, cq in enumerate(example["cq_strings"]):
            decoded = decode_cq(cq)
            codes = [s for s in decoded if s["type"] != "text"]
            assert len(codes) == 1, cq
            if isinstance(segment, dict):
                assert codes[0]["type"] == segment["type"], cq
                if i == 0:  # later strings show other parameter values
                    assert codes[0]["data"].items() <= segment["data"].items(), cq
    assert decode_cq("[CQ:at,qq=114514]早上好啊") == [_at(114514), _text("早上好啊")]
    assert decode_cq("[CQ:reply,text=Hello World,qq=10086,time=3376656000,seq=5123]") == [
        {"type": "reply", "data": {"text": "Hello World", "qq": "10086", "time": "3376656000", "seq": "5123"}}
    ]


def test_decode_cq_param_escapes_json_card() -> None:
    """go-cqhttp docs: &#44; &#91; &#93; inside a parameter decode, so the JSON card payload is valid JSON."""
    doc = _load("gocqhttp_docs_cqcode_examples.json")
    cq = next(s for e in doc["examples"] for s in e["cq_strings"] if s.startswith("[CQ:json"))
    (segment,) = decode_cq(cq)
    card = json.loads(segment["data"]["data"])
    assert card["prompt"] == "[应用]"
    escapes = {row["escape"]: row["char"] for row in doc["cq_escape_table"]}
    assert escapes == {"&amp;": "&", "&#91;": "[", "&#93;": "]", "&#44;": ","}


# --- synthetic CQ edge cases --------------------------------------------------


def test_escaped_brackets_are_text_never_a_segment() -> None:
    """SYNTHETIC: &#91;CQ:at,qq=1&#93; in text is literal text, not an @ segment."""
    assert decode_cq("see &#91;CQ:at,qq=1&#93; &amp; more") == [_text("see [CQ:at,qq=1] & more")]
    msg = parse_event(_group_event("&#91;不是at&#93;[CQ:at,qq=42] hi"))
    assert msg is not None and msg.text == "[不是at]@42 hi" and msg.mentions == ("42",)


def test_decode_cq_unescapes_in_one_pass() -> None:
    """SYNTHETIC: &amp;#91; is the literal text "&#91;", not "[" (no double unescape)."""
    assert decode_cq("&amp;#91;") == [_text("&#91;")]
    assert decode_cq("[CQ:share,title=a&amp;#44;b]") == [{"type": "share", "data": {"title": "a&#44;b"}}]


def test_decode_cq_is_lenient() -> None:
    """SYNTHETIC: an unterminated or malformed code stays text; empty input gives no segments."""
    assert decode_cq("[CQ:at,qq=1") == [_text("[CQ:at,qq=1")]
    assert decode_cq("[CQ:]x") == [_text("[CQ:]x")]
    assert decode_cq("[CQ:rps]") == [{"type": "rps", "data": {}}]
    assert decode_cq("") == []
    assert decode_cq(None) == []  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]CQ:,=&#;914ab 表")), max_size=40))
def test_decode_cq_never_raises(s: str) -> None:
    """SYNTHETIC (property): any string decodes into well-formed segments without raising."""
    for seg in decode_cq(s):
        assert isinstance(seg["type"], str) and seg["type"]
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in seg["data"].items())


# --- synthetic events --------------------------------------------------------


def test_group_at_bot_sets_mentions_bot() -> None:
    """SYNTHETIC: an at-segment to self_id sets mentions_bot and is dropped from the text."""
    msg = parse_event(_group_event([_at(SELF_ID), _text(" 记住我喜欢喝茶")]))
    assert msg is not None
    assert msg.mentions_bot is True and msg.mentions == (str(SELF_ID),)
    assert msg.text == "记住我喜欢喝茶"
    assert (msg.chat_kind, msg.chat_id, msg.sender_id, msg.message_id) == (ChatKind.GROUP, "987654", "123456", "-2147480001")
    assert msg.chat.key == "qq:group:987654"


def test_group_at_bot_in_cq_string() -> None:
    """SYNTHETIC: the same @bot as a CQ-code string gives the same result."""
    msg = parse_event(_group_event(f"[CQ:at,qq={SELF_ID}] 记住我喜欢喝茶"))
    assert msg is not None and msg.mentions_bot is True and msg.text == "记住我喜欢喝茶"


def test_at_someone_else_is_rendered_and_keeps_the_speaker() -> None:
    """SYNTHETIC: @another member is kept in the text as @name/@qq; the speaker is still the sender."""
    msg = parse_event(_group_event([_text("我觉得"), _at(555, name="小明"), _text("很喜欢猫"), _at(556)]))
    assert msg is not None
    assert msg.text == "我觉得@小明很喜欢猫@556" and msg.mentions == ("555", "556") and msg.mentions_bot is False
    assert msg.sender_id == "123456"


def test_only_at_bot_without_text_is_ignored() -> None:
    """SYNTHETIC: a message that is only @bot (plus a face) has no text and is ignored."""
    assert parse_event(_group_event([_at(SELF_ID), {"type": "face", "data": {"id": "1"}}, _text("  ")])) is None


def test_reply_segment() -> None:
    """SYNTHETIC: a reply segment gives reply_to with the quoted id; its sender is unknown unless the segment names qq."""
    msg = parse_event(_group_event([{"type": "reply", "data": {"id": "-1500"}}, _at(SELF_ID), _text("对，就是这个")]))
    assert msg is not None and msg.reply_to is not None
    assert (msg.reply_to.message_id, msg.reply_to.sender_id, msg.reply_to.sender_is_bot) == ("-1500", None, False)
    assert msg.text == "对，就是这个" and msg.sender_id == "123456"
    to_bot = parse_event(_group_event(f"[CQ:reply,id=7,qq={SELF_ID},text=你喜欢什么]茶"))
    assert to_bot is not None and to_bot.reply_to is not None
    assert (to_bot.reply_to.sender_id, to_bot.reply_to.sender_is_bot, to_bot.reply_to.text) == (str(SELF_ID), True, "你喜欢什么")


def test_image_summary_is_text_image_alone_is_not() -> None:
    """SYNTHETIC: an image contributes its `summary` when given; an image without one adds nothing."""
    msg = parse_event(_group_event([{"type": "image", "data": {"file": "a.jpg", "summary": "[动画表情]"}}]))
    assert msg is not None and msg.text == "[动画表情]"
    assert parse_event(_group_event([{"type": "image", "data": {"file": "a.jpg"}}])) is None


def test_sender_role_and_group_card() -> None:
    """SYNTHETIC: sender_role comes from sender.role; the group card wins over the nickname as display name."""
    event = _group_event("hi", sender={"user_id": 123456, "nickname": "阿青", "card": "青青", "role": "admin"})
    msg = parse_event(event)
    assert msg is not None and (msg.sender_role, msg.sender_name) == ("admin", "青青")
    odd = parse_event(_group_event("hi", sender={"role": ["x"]}))
    assert odd is not None and odd.sender_role is None


def test_slash_text_is_command() -> None:
    """SYNTHETIC: text starting with "/" (after the @bot is dropped) is a command."""
    msg = parse_event(_group_event([_at(SELF_ID), _text(" /remember 我喜欢茶")]))
    assert msg is not None and msg.is_command is True and msg.text == "/remember 我喜欢茶"


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(_group_event("hi", anonymous={"id": 1, "name": "匿名者", "flag": "f"}, sub_type="anonymous", user_id=80000000), id="anonymous-gocqhttp"),
        pytest.param(_group_event("hi", anonymous={"id": 1, "name": "匿名者", "flag": "f"}), id="anonymous-object"),
        pytest.param(_group_event("hi", sub_type="anonymous"), id="anonymous-sub-type"),
        pytest.param(_group_event("hi", user_id=80000000), id="anonymous-placeholder-id"),
        pytest.param(_group_event("hi", post_type="message_sent", user_id=SELF_ID), id="message-sent"),
        pytest.param(_group_event("hi", user_id=SELF_ID), id="self-message"),
        pytest.param({"time": 1, "self_id": SELF_ID, "post_type": "notice", "notice_type": "group_increase", "group_id": 1, "user_id": 2}, id="notice"),
        pytest.param({"time": 1, "self_id": SELF_ID, "post_type": "request", "request_type": "friend", "user_id": 2, "comment": "hi"}, id="request"),
        pytest.param({"time": 1, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "heartbeat"}, id="meta-event"),
        pytest.param(_group_event("hi", message_type="guild"), id="unknown-message-type"),
    ],
)
def test_ignored_events(event: dict) -> None:
    """SYNTHETIC: anonymous, own (message_sent / self_id) and non-message events are ignored, never attributed."""
    assert parse_event(event) is None


@pytest.mark.parametrize(
    "event",
    [None, [], "x", {}, _group_event("hi", user_id=None), _group_event("hi", user_id="a b"), _group_event("hi", group_id=None),
     _group_event("hi", message_id=None), _group_event("hi", time="now"),
     _group_event(42), _group_event([1, {"type": "text", "data": None}, {"type": "at"}])],
)
def test_malformed_events_return_none(event: object, caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: malformed events give None with a log line, never an exception."""
    with caplog.at_level(logging.DEBUG, logger="bridges.qq.parse"):
        assert parse_event(event) is None  # type: ignore[arg-type]
    assert caplog.records


def test_logs_carry_no_message_text(caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: log lines about ignored events name ids, never the message text."""
    secret = "我的秘密日记"
    events = [
        _group_event(secret, anonymous={"id": 1, "name": "n", "flag": "f"}),
        _group_event(secret, post_type="message_sent", user_id=SELF_ID),
        _group_event(secret, group_id=None),
        _group_event(secret, time=None),
    ]
    with caplog.at_level(logging.DEBUG, logger="bridges.qq.parse"):
        for event in events:
            assert parse_event(event) is None
    assert caplog.records and all(secret not in r.getMessage() for r in caplog.records)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["post_type", "message_type", "sub_type", "message", "type", "data", "text", "qq", "id",
                         "user_id", "self_id", "group_id", "message_id", "time", "anonymous", "sender", "role"]),
        inner, max_size=6),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(_json)
def test_parse_event_never_raises(event: object) -> None:
    """SYNTHETIC (property): any JSON value gives an InboundMessage or None, never an exception."""
    result = parse_event(event)  # type: ignore[arg-type]
    assert result is None or isinstance(result, InboundMessage)


# -- forwards (issue 12, item 3) — SYNTHETIC: NapCat/LLOneBot inline forward content

def _private(message: object) -> dict:
    return {"post_type": "message", "message_type": "private", "sub_type": "friend", "time": 1764500100,
            "self_id": 10000, "user_id": 20001, "message_id": 9003, "message": message,
            "sender": {"user_id": 20001, "nickname": "阿杰"}}


_NODES = [{"message_id": 1, "user_id": 20002, "sender": {"nickname": "小周"},
           "message": [{"type": "text", "data": {"text": "我叫小周。"}}]},
          {"message_id": 2, "user_id": 20002, "message": "I love jazz 🎷"}]


def test_an_inline_forward_is_someone_elses_words():
    """A message that is only a forward with inline content carries its texts,
    marked forwarded (never a command)."""
    msg = parse_event(_private([{"type": "forward", "data": {"id": "fw1", "content": _NODES}}]))
    assert msg is not None and msg.forwarded and msg.text == "我叫小周。\nI love jazz 🎷" and not msg.is_command


def test_own_text_next_to_a_forward_keeps_only_the_senders_words():
    """With text of its own, the forwarded part is dropped, and the message is the sender's."""
    msg = parse_event(_private([{"type": "text", "data": {"text": "看看这个"}},
                                {"type": "forward", "data": {"id": "fw1", "content": _NODES}}]))
    assert msg is not None and not msg.forwarded and msg.text == "看看这个"


def test_a_bare_forward_id_is_ignored():
    """go-cqhttp sends only the forward's id: no text, nothing to parse."""
    assert parse_event(_private([{"type": "forward", "data": {"id": "fw1"}}])) is None
    assert parse_event(_private("[CQ:forward,id=fw1]")) is None


# -- withdrawals (issue 12, item 4) — SYNTHETIC: OneBot v11 notice shapes from the spec

def test_friend_and_group_recall_notices_parse():
    """friend_recall: the author withdrew in private; group_recall: author and operator in the group."""
    from bridges.qq.parse import parse_recall

    friend = parse_recall({"time": 1764500200, "self_id": 10000, "post_type": "notice", "notice_type": "friend_recall",
                           "user_id": 20001, "message_id": 9002})
    assert (friend.sender_id, friend.message_id, friend.chat.key, friend.operator_id) == ("20001", "9002", "qq:private:20001",
                                                                                          "20001")
    group = parse_recall({"time": 1764500200, "self_id": 10000, "post_type": "notice", "notice_type": "group_recall",
                          "group_id": 30001, "user_id": 20001, "operator_id": 20009, "message_id": -12345})
    assert (group.sender_id, group.message_id, group.chat.is_group, group.operator_id) == ("20001", "-12345", True, "20009")


@pytest.mark.parametrize("event", [
    {"post_type": "notice", "notice_type": "group_increase", "group_id": 1, "user_id": 2},
    {"post_type": "notice", "notice_type": "friend_recall", "user_id": 20001},
    {"post_type": "notice", "notice_type": "group_recall", "user_id": 20001, "message_id": 1},
    {"post_type": "message", "message_type": "private", "user_id": 20001, "message_id": 1},
    "not an object",
])
def test_other_or_malformed_notices_are_no_withdrawal(event):
    """Anything but a well-formed recall notice gives None, never an error."""
    from bridges.qq.parse import parse_recall

    assert parse_recall(event) is None


def test_an_event_of_an_unknown_post_type_is_ignored_with_an_info_line(caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: a post type or message type OneBot v11 does not define is ignored with an INFO line naming it;
    heartbeats (meta_event), notices, requests, the bot's own message_sent and go-cqhttp's guild messages stay
    below INFO."""
    with caplog.at_level(logging.INFO, logger="bridges.qq.parse"):
        assert parse_event(_group_event("我养了一只猫", post_type="message_v2")) is None
        assert parse_event(_group_event("我养了一只猫", message_type="weird_msg_type")) is None
        assert [(r.levelno, name in r.getMessage()) for r, name in zip(caplog.records, ("message_v2", "weird_msg_type"),
                                                                         strict=True)] == [(logging.INFO, True)] * 2
        caplog.clear()
        assert parse_event(_group_event("hi", message_type="guild")) is None
        for post_type in ("meta_event", "notice", "request", "message_sent"):
            assert parse_event(_group_event("hi", post_type=post_type, user_id=SELF_ID)) is None
    assert caplog.records == []
