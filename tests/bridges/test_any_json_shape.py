"""Every JSON shape at every place of every recorded Telegram and OneBot payload
parses into a message, None (ignored, logged) or a ValidationError (a 400) —
never another exception (a 500 that the platform redelivers; issue 26.2)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from bridges.contract import InboundMessage, Withdrawal
from bridges.detect import iter_labelled_payloads
from bridges.qq.parse import parse_event, parse_recall
from bridges.telegram.parse import parse_migration, parse_update
from conftest import TEST_DATA

#: One value of every JSON type and of the shapes that broke parsers before: containers where a
#: scalar belongs (``chat.type`` as a list was a TypeError), huge and negative numbers, a lone surrogate.
SHAPES = ([], [1, "a"], {}, {"k": [1]}, None, True, False, 0, -1, 10**30, 1.5, "", "x", "\ud83c", "private")


def _places(value: object, path: tuple = ()) -> Iterator[tuple]:
    """Every path into ``value`` (dict keys and list indices), the root excluded."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*path, key)
        yield from _places(inner, (*path, key))


def _mutants(payload: dict) -> Iterator[tuple[str, dict]]:
    for path in _places(payload):
        for shape in SHAPES:
            out = copy.deepcopy(payload)
            node = out
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = copy.deepcopy(shape)
            yield f"{'.'.join(map(str, path))}={shape!r}", out


#: Shapes the recorded OneBot events lack (SYNTHETIC, written after the OneBot v11 spec's examples):
#: a group message with an @ and a reply segment, and the two withdrawal notices.
ONEBOT_EXTRA = [
    ("group message", {"time": 1700000000, "self_id": 2000000001, "post_type": "message", "message_type": "group",
                       "sub_type": "normal", "message_id": 8101, "group_id": 9002, "user_id": 20005, "font": 0,
                       "message": [{"type": "reply", "data": {"id": "77", "qq": "2000000001"}},
                                   {"type": "at", "data": {"qq": "2000000001"}},
                                   {"type": "text", "data": {"text": "我养了一只猫"}}],
                       "raw_message": "我养了一只猫", "sender": {"user_id": 20005, "nickname": "阿青", "card": "青",
                                                              "role": "member"}}),
    ("friend_recall", {"time": 1700000000, "self_id": 2000000001, "post_type": "notice",
                       "notice_type": "friend_recall", "user_id": 20005, "message_id": 8102}),
    ("group_recall", {"time": 1700000000, "self_id": 2000000001, "post_type": "notice", "notice_type": "group_recall",
                      "group_id": 9002, "user_id": 20005, "operator_id": 20006, "message_id": 8103}),
]


def _payloads(platform: str) -> list[tuple[str, dict]]:
    out = list(ONEBOT_EXTRA) if platform == "onebot" else []
    for path in sorted((TEST_DATA / "im" / platform).glob("*.json")):
        for label, payload in iter_labelled_payloads(json.loads(path.read_text("utf-8"))):
            out.append((f"{path.name}{label}", payload))
    return out


def _parses_or_refuses(parse, payload: dict, where: str, ok: tuple[type, ...]) -> None:
    try:
        result = parse(payload)
    except ValidationError:
        return
    except Exception as exc:  # noqa: BLE001 - what this test exists to find
        pytest.fail(f"{where}: {type(exc).__name__}: {exc}")
    assert result is None or isinstance(result, ok), where


@pytest.mark.parametrize("platform", ["telegram", "onebot"])
def test_every_shape_at_every_place_is_parsed_ignored_or_refused(platform):
    """Thousands of mutated real payloads (every place × every shape): no parser raises but ValidationError."""
    payloads = _payloads(platform)
    assert len(payloads) >= 5
    n = 0
    for name, payload in payloads:
        for where, mutant in _mutants(payload):
            n += 1
            if platform == "telegram":
                _parses_or_refuses(lambda p: parse_update(p, bot_id="7000000001", bot_username="huiyi_bot"),
                                   mutant, f"{name} {where}", (InboundMessage,))
                _parses_or_refuses(parse_migration, mutant, f"{name} {where} (migration)", (tuple,))
            else:
                _parses_or_refuses(parse_event, mutant, f"{name} {where}", (InboundMessage,))
                _parses_or_refuses(parse_recall, mutant, f"{name} {where} (recall)", (Withdrawal,))
    assert n >= 1000, n


def test_chat_type_as_a_list_or_an_object_is_ignored_not_a_type_error():
    """The shape the issue found: ``message.chat.type`` a list or an object is a chat of no known kind."""
    base = {"update_id": 1, "message": {"message_id": 5, "date": 1700000000, "text": "我喜欢猫",
                                        "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
                                        "chat": {"id": 42, "type": "private"}}}
    assert parse_update(base) is not None
    for shape in (["private"], {"type": "private"}):
        bad = copy.deepcopy(base)
        bad["message"]["chat"]["type"] = shape
        assert parse_update(bad) is None
