"""Telegram Update/Message parsing (bridges.telegram.parse) and payload detection (bridges.detect).

Real payloads come from tests/data/im/telegram; their expected outcome is
indexed in tests/data/im_expected.json. Tests marked SYNTHETIC build payloads
by hand for cases the recorded data lacks.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.detect import detect_platform, iter_labelled_payloads, iter_payloads
from bridges.telegram.parse import parse_update
from bridges.contract import InboundMessage
from conftest import TEST_DATA
from memory.types import ChatKind

TG_DIR = TEST_DATA / "im" / "telegram"
EXPECTED = json.loads((Path(__file__).resolve().parents[1] / "data" / "im_expected.json").read_text("utf-8"))["files"]

BOT_ID = "7000000001"
BOT_USERNAME = "huiyi_bot"


def _load(name: str) -> object:
    return json.loads((TG_DIR / name).read_text("utf-8"))


def _check(expected: object, payload: dict, where: str) -> None:
    """Assert that ``payload`` parses into what the index entry ``expected`` says."""
    if expected == "not_payload":
        assert detect_platform(payload) is None, where
        return
    assert detect_platform(payload) == "tg", where
    msg = parse_update(payload)
    if "ignored" in expected:
        assert msg is None, where
        return
    want = expected["message"]
    assert isinstance(msg, InboundMessage), where
    assert f"{msg.platform}:{msg.sender_id}" == want["subject"], where
    assert msg.chat_kind.value == want["chat_kind"], where
    assert msg.chat_id == want["chat_id"], where
    assert msg.thread_id == want["thread_id"], where
    assert msg.text.startswith(want["text_prefix"]), where
    assert msg.mentions_bot is want["mentions_bot"], where
    assert (msg.reply_to.message_id if msg.reply_to else None) == want["reply_to"], where
    assert msg.is_edit is want["is_edit"], where
    assert msg.is_command is want["is_command"], where
    assert msg.timestamp.tzinfo is not None, where
    msg.chat  # noqa: B018 - the chat must validate as a core ChatRef


def _user(uid: int = 42, **extra: object) -> dict:
    return {"id": uid, "is_bot": False, "first_name": "Ann", **extra}


def _group_msg(text: str | None, entities: list[dict] | None = None, **extra: object) -> dict:
    """SYNTHETIC: a supergroup text message from user 42 as an Update."""
    msg = {
        "message_id": 10,
        "from": _user(),
        "chat": {"id": -1001234567890, "title": "g", "type": "supergroup"},
        "date": 1700000000,
        "text": text,
        **extra,
    }
    if entities is not None:
        msg["entities"] = entities
    return {"update_id": 1, "message": msg}


def _utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


# --- replay of recorded payloads ---------------------------------------------


def test_index_covers_every_telegram_file() -> None:
    """Every file under tests/data/im/telegram has an entry in im_expected.json, and no entry is stale."""
    on_disk = {f"telegram/{p.name}" for p in TG_DIR.glob("*.json")}
    indexed = {k for k in EXPECTED if k.startswith("telegram/")}
    assert on_disk == indexed


@pytest.mark.parametrize("name", sorted(p.name for p in TG_DIR.glob("*.json")))
def test_replay_recorded_payload(name: str) -> None:
    """Each recorded Telegram payload parses without raising into exactly the indexed outcome."""
    expected = EXPECTED[f"telegram/{name}"]
    labelled = list(iter_labelled_payloads(_load(name)))
    assert [label for label, _ in labelled] == list(expected)
    for label, payload in labelled:
        _check(expected[label], payload, f"{name}:{label}")


def test_getupdates_response_is_expanded() -> None:
    """A getUpdates response {ok, result: [...]} yields its updates, not itself."""
    data = _load("slackanalyzer_getupdates_channel_post_sender_chat.json")
    payloads = list(iter_payloads(data))
    assert len(payloads) == 1 and payloads[0]["update_id"] == 808628153
    assert detect_platform(data) is None


def test_forum_topic_message_gets_thread_and_topic_root_is_not_a_quote() -> None:
    """In a forum topic thread_id is the topic, and the implicit reply to the topic's creation message is no quote."""
    msg = parse_update(_load("teloxide_message_forum_topic_message_reply.json"))
    assert msg is not None
    assert (msg.chat_kind, msg.thread_id, msg.reply_to) == (ChatKind.GROUP, "4", None)
    assert msg.chat.key == "tg:group:-1001847508954:4"


def test_reply_thread_in_non_forum_supergroup_is_not_a_topic() -> None:
    """message_thread_id without is_topic_message (a reply thread) leaves the chat without thread."""
    msg = parse_update(_load("teloxide_update_supergroup_reply_thread_bot_command.json"))
    assert msg is not None
    assert msg.thread_id is None
    assert msg.reply_to is not None and msg.reply_to.sender_id == "6962620676"
    assert msg.sender_id == "5964236329"  # the replier stays the speaker


def test_anonymous_admin_text_is_not_attributed() -> None:
    """A text sent on behalf of the group (sender_chat / GroupAnonymousBot) is ignored, never given a person."""
    assert parse_update(_load("teloxide_message_sender_chat_author_signature_forward_origin.json")) is None


def test_legacy_reply_without_from_has_unknown_sender() -> None:
    """A reply_to_message without `from` (old payloads) gives a ReplyRef with sender_id None."""
    msg = parse_update(_load("tgdocs_reply_message.json"))
    assert msg is not None and msg.reply_to is not None
    assert (msg.reply_to.message_id, msg.reply_to.sender_id, msg.reply_to.text) == ("1334", None, "Original")


def test_fields_of_a_private_text() -> None:
    """A private text maps id, name (first + last), language and a UTC timestamp from `date`."""
    msg = parse_update(_load("teloxide_message_text.json"))
    assert msg is not None
    assert msg.sender_name == "Андрей Власов"
    assert msg.language == "en"
    assert msg.timestamp == datetime.fromtimestamp(1568289890, tz=UTC)
    assert msg.chat.key == "tg:private:250918540"


def test_edited_message_is_edit() -> None:
    """edited_message updates and bare Messages with edit_date are edits."""
    assert parse_update(_load("tgdocs_edited_message.json")).is_edit is True
    assert parse_update(_load("aiogram_v2_tests_dataset.json")["EDITED_MESSAGE"]).is_edit is True


def test_caption_counts_as_text() -> None:
    """A photo's caption is the message text."""
    msg = parse_update(_load("teloxide_message_photo_caption_above_media.json"))
    assert msg is not None and msg.text == "El Psy Kongroo"


# --- synthetic edge cases ----------------------------------------------------


def test_mention_entity_of_bot_sets_mentions_bot() -> None:
    """SYNTHETIC: a `mention` entity equal to @bot_username (any case) sets mentions_bot."""
    payload = _group_msg("hi @Huiyi_Bot remember me", [{"type": "mention", "offset": 3, "length": 10}])
    msg = parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.mentions_bot is True
    assert msg.mentions == ("@Huiyi_Bot",)
    assert msg.chat_kind is ChatKind.GROUP and msg.sender_id == "42"
    assert parse_update(payload).mentions_bot is False  # bot unknown: no guess


def test_mention_of_someone_else_is_not_the_bot() -> None:
    """SYNTHETIC: a mention of another user (even a prefix of the bot name) is not mentions_bot."""
    payload = _group_msg("@huiyi_bo hi", [{"type": "mention", "offset": 0, "length": 9}])
    msg = parse_update(payload, bot_id=BOT_ID, bot_username="@" + BOT_USERNAME)
    assert msg is not None and msg.mentions_bot is False and msg.mentions == ("@huiyi_bo",)


def test_text_mention_of_bot_id_sets_mentions_bot() -> None:
    """SYNTHETIC: a `text_mention` whose user.id is bot_id sets mentions_bot; mentions holds the id."""
    entity = {"type": "text_mention", "offset": 0, "length": 5, "user": {"id": int(BOT_ID), "is_bot": True, "first_name": "Huiyi"}}
    msg = parse_update(_group_msg("Huiyi, hi", [entity]), bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.mentions_bot is True and msg.mentions == (BOT_ID,)


def test_command_addressed_to_bot() -> None:
    """SYNTHETIC: /remember@botname at offset 0 is a command for this bot and mentions it."""
    text = f"/remember@{BOT_USERNAME} I like tea"
    payload = _group_msg(text, [{"type": "bot_command", "offset": 0, "length": len("/remember@") + len(BOT_USERNAME)}])
    msg = parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.is_command is True and msg.mentions_bot is True
    assert msg.text == text


def test_command_addressed_to_another_bot_is_not_ours() -> None:
    """SYNTHETIC: /remember@otherbot is neither our command nor a mention of us."""
    payload = _group_msg("/remember@other_bot x", [{"type": "bot_command", "offset": 0, "length": 19}])
    msg = parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.is_command is False and msg.mentions_bot is False


def test_command_not_at_start_is_not_a_command() -> None:
    """SYNTHETIC: a bot_command entity after other text does not make the message a command."""
    payload = _group_msg("try /start", [{"type": "bot_command", "offset": 4, "length": 6}])
    assert parse_update(payload, bot_username=BOT_USERNAME).is_command is False


def test_entity_offsets_are_utf16_code_units() -> None:
    """SYNTHETIC: with Cyrillic and emoji (2 UTF-16 units each) before it, the mention is sliced exactly."""
    prefix = "Привет 😂👍 "
    text = f"{prefix}@huiyi_bot как дела"
    offset = _utf16_len(prefix)
    assert offset != len(prefix)  # the emoji make Python indices differ
    payload = _group_msg(text, [{"type": "mention", "offset": offset, "length": 10}])
    msg = parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.mentions == ("@huiyi_bot",) and msg.mentions_bot is True


def test_entity_outside_text_is_skipped() -> None:
    """SYNTHETIC: an entity past the end of the text (seen in aiogram's FORWARDED_MESSAGE) is skipped, not fatal."""
    payload = _group_msg("short", [{"type": "mention", "offset": 3, "length": 10}, {"type": "mention", "offset": "x", "length": 1}])
    msg = parse_update(payload, bot_username=BOT_USERNAME)
    assert msg is not None and msg.mentions == ()


def test_caption_entities_are_used_for_captions() -> None:
    """SYNTHETIC: a mention inside a caption is read from caption_entities."""
    payload = _group_msg("", None, caption="@huiyi_bot look", caption_entities=[{"type": "mention", "offset": 0, "length": 10}], photo=[{"file_id": "x"}])
    del payload["message"]["text"]
    msg = parse_update(payload, bot_username=BOT_USERNAME)
    assert msg is not None and msg.text == "@huiyi_bot look" and msg.mentions_bot is True


def test_topic_message_thread_id() -> None:
    """SYNTHETIC: is_topic_message with message_thread_id gives a thread; without the flag there is none."""
    topic = _group_msg("hi", is_topic_message=True, message_thread_id=77)
    plain = _group_msg("hi", message_thread_id=77)
    assert parse_update(topic).thread_id == "77"
    assert parse_update(plain).thread_id is None


def test_reply_to_bot_message() -> None:
    """SYNTHETIC: replying to the bot's message records the bot as quoted sender; the speaker stays the replier."""
    quoted = {"message_id": 9, "from": {"id": int(BOT_ID), "is_bot": True, "first_name": "Huiyi"},
              "chat": {"id": -1001234567890, "type": "supergroup"}, "date": 1699999999, "text": "what do you like?"}
    msg = parse_update(_group_msg("tea", reply_to_message=quoted))
    assert msg is not None and msg.sender_id == "42"
    assert msg.reply_to is not None
    assert (msg.reply_to.message_id, msg.reply_to.sender_id, msg.reply_to.sender_is_bot) == ("9", BOT_ID, True)
    assert msg.reply_to.text == "what do you like?"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(_group_msg("hi", **{"from": {"id": 99, "is_bot": True, "first_name": "B"}}), id="from-bot"),
        pytest.param(_group_msg("hi", **{"from": {"id": 1087968824, "is_bot": False, "first_name": "Group"}}), id="group-anonymous-bot-id"),
        pytest.param(_group_msg("hi", sender_chat={"id": -1001234567890, "type": "supergroup"}), id="sender-chat"),
        pytest.param({"update_id": 2, "channel_post": {"message_id": 1, "chat": {"id": -100, "type": "channel"}, "date": 1, "text": "x"}}, id="channel-post"),
        pytest.param({"update_id": 2, "edited_channel_post": {"message_id": 1, "chat": {"id": -100, "type": "channel"}, "date": 1, "text": "x"}}, id="edited-channel-post"),
        pytest.param({"update_id": 3, "chat_member": {"chat": {"id": -1, "type": "group"}}}, id="chat-member"),
        pytest.param({"update_id": 4, "poll": {"id": "p"}}, id="unknown-update-type"),
        pytest.param({"update_id": 5}, id="update-without-content"),
        pytest.param(_group_msg("   "), id="whitespace-text"),
        pytest.param(_group_msg(None, new_chat_members=[_user(5)]), id="service-message-text-null"),
    ],
)
def test_ignored_updates(payload: dict) -> None:
    """SYNTHETIC: bots, anonymous senders, channels, non-message updates and empty texts are ignored."""
    assert parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME) is None


@pytest.mark.parametrize(
    "payload",
    [None, [], "text", 12, {}, {"message_id": 1, "chat": "x"}, {"update_id": 1, "message": "x"},
     {"update_id": 1, "message": {"message_id": 1, "date": 1, "text": "x"}},
     {"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "date": 1, "text": "x"}},
     {"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "from": {"id": "a b"}, "date": 1, "text": "x"}},
     {"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "from": {"id": 1}, "date": "x", "text": "x"}}],
)
def test_malformed_input_returns_none(payload: object, caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: non-objects and messages missing chat, from, a valid id or date give None and a warning, never an exception."""
    with caplog.at_level(logging.DEBUG, logger="bridges.telegram.parse"):
        assert parse_update(payload) is None  # type: ignore[arg-type]
    assert caplog.records, "an ignored payload must leave a log line"


def test_logs_at_info_and_above_carry_no_message_text(caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: warnings about ignored messages name ids, never the message text."""
    secret = "my secret diary entry"
    payloads = [
        {"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "date": 1, "text": secret}},
        _group_msg(secret, sender_chat={"id": -1, "type": "supergroup"}),
        _group_msg(secret, **{"from": {"id": 9, "is_bot": True}}),
        {"update_id": 1, "channel_post": {"message_id": 1, "chat": {"id": -100, "type": "channel"}, "date": 1, "text": secret}},
    ]
    with caplog.at_level(logging.DEBUG, logger="bridges.telegram.parse"):
        for payload in payloads:
            assert parse_update(payload) is None
    assert caplog.records
    assert all(secret not in r.getMessage() for r in caplog.records)


def test_sender_name_falls_back_to_username_and_is_never_the_id() -> None:
    """SYNTHETIC: without first/last name the username is the display name; the id stays the numeric id."""
    msg = parse_update(_group_msg("hi", **{"from": {"id": 42, "is_bot": False, "first_name": "", "username": "ann"}}))
    assert msg is not None and (msg.sender_name, msg.sender_id) == ("ann", "42")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["update_id", "message", "edited_message", "message_id", "chat", "from", "id", "type",
                         "date", "text", "entities", "offset", "length", "is_topic_message", "message_thread_id",
                         "reply_to_message", "sender_chat", "is_bot", "caption", "user", "quote"]),
        inner, max_size=6),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(_json)
def test_parse_update_never_raises(payload: object) -> None:
    """SYNTHETIC (property): any JSON value gives an InboundMessage or None, never an exception."""
    result = parse_update(payload)  # type: ignore[arg-type]
    assert result is None or isinstance(result, InboundMessage)


# --- detect / iter -----------------------------------------------------------


def test_detect_platform_shapes() -> None:
    """detect_platform: Update and bare Message are tg, OneBot events qq, anything else None."""
    assert detect_platform({"update_id": 1}) == "tg"
    assert detect_platform({"message_id": 1, "chat": {"id": 1}}) == "tg"
    assert detect_platform({"post_type": "message", "message_id": 1}) == "qq"
    assert detect_platform({"id": 1, "first_name": "x"}) is None
    assert detect_platform({"ok": True, "result": []}) is None
    assert detect_platform([]) is None  # type: ignore[arg-type]


def test_iter_payloads_containers() -> None:
    """iter_payloads expands getUpdates results, arrays and named-object dicts, and passes single payloads through."""
    update = {"update_id": 1, "message": {}}
    assert list(iter_payloads({"ok": True, "result": [update, "junk"]})) == [update]
    assert list(iter_payloads([update, 3])) == [update]
    assert list(iter_payloads(update)) == [update]
    assert list(iter_labelled_payloads({"UPDATE": update, "LINK": "https://t.me", "_meta": {"a": 1}})) == [("UPDATE", update)]
    assert list(iter_payloads("nope")) == []


# -- forwards (issue 12, item 3) — SYNTHETIC: shapes from the Bot API "MessageOrigin" docs

_ORIGINS = [
    {"forward_origin": {"type": "user", "date": 1764500000, "sender_user": {"id": 3003, "is_bot": False, "first_name": "周"}}},
    {"forward_origin": {"type": "hidden_user", "date": 1764500000, "sender_user_name": "小周"}},
    {"forward_origin": {"type": "chat", "date": 1764500000, "sender_chat": {"id": -1001234, "type": "supergroup", "title": "群"}}},
    {"forward_origin": {"type": "channel", "date": 1764500000, "chat": {"id": -1005678, "type": "channel", "title": "频道"},
                        "message_id": 42, "author_signature": "编辑"}},
    {"forward_from": {"id": 3003, "is_bot": False, "first_name": "Zhou"}, "forward_date": 1764500000},
    {"forward_from_chat": {"id": -1005678, "type": "channel", "title": "News"}, "forward_from_message_id": 7,
     "forward_date": 1764500000},
    {"forward_sender_name": "Zhou", "forward_date": 1764500000},
    {"forward_signature": "editor", "forward_date": 1764500000},
]


@pytest.mark.parametrize("origin", _ORIGINS)
@pytest.mark.parametrize("text", ["我叫小周。", "My name is Zhou.", "/memory forget all"])
def test_every_forward_shape_is_marked_forwarded(origin, text):
    """Each forward_origin type and each older forward_* field marks the message
    forwarded; a forwarded /command is no command."""
    payload = {"update_id": 1, "message": {"message_id": 9, "date": 1764500100, "text": text,
                                           "chat": {"id": 3002, "type": "private"},
                                           "from": {"id": 3002, "is_bot": False, "first_name": "A"}, **origin}}
    msg = parse_update(payload, bot_id=BOT_ID, bot_username=BOT_USERNAME)
    assert msg is not None and msg.forwarded and msg.text == text and msg.sender_id == "3002"
    assert not msg.is_command


def test_a_plain_message_is_not_forwarded():
    """Without forward fields a message is the sender's own."""
    payload = {"message_id": 9, "date": 1764500100, "text": "我叫小周。", "chat": {"id": 3002, "type": "private"},
               "from": {"id": 3002, "is_bot": False, "first_name": "A"}}
    assert parse_update(payload).forwarded is False


def test_an_update_of_an_unknown_type_is_ignored_with_an_info_line(caplog: pytest.LogCaptureFixture) -> None:
    """SYNTHETIC: an Update kind the Bot API does not document is ignored with a line an operator sees at the
    default level (INFO), naming the kind; the documented non-message kinds, which a bot receives routinely,
    stay below it (a new user found an unknown kind answered 200 with no line at all)."""
    from bridges.telegram.parse import KNOWN_UPDATES

    with caplog.at_level(logging.INFO, logger="bridges.telegram.parse"):
        assert parse_update({"update_id": 7, "my_new_kind": {"text": "我养了一只猫"}}) is None
        assert [(r.levelno, "my_new_kind" in r.getMessage()) for r in caplog.records] == [(logging.INFO, True)]
        caplog.clear()
        for kind in sorted(KNOWN_UPDATES):
            assert parse_update({"update_id": 8, kind: {"id": "1"}}) is None
    assert caplog.records == []
