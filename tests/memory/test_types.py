"""Namespace and chat values reject anything outside their strict patterns."""

from __future__ import annotations

import pytest

from memory.errors import NamespaceError
from memory.types import ChatKind, ChatRef, Namespace


@pytest.mark.parametrize("tenant,subject", [
    ("default", "tg:1' OR '1'='1"),
    ("default", "tg:1\" --"),
    ("default", "tg:1; DROP TABLE memories"),
    ("default", "tg:"),
    ("default", "tg:a b"),
    ("default", "TG:1"),
    ("default", "tg:1) OR (namespace != 'x"),
    ("Default", "tg:1"),
    ("", "tg:1"),
    ("de'fault", "tg:1"),
    ("default", "tg:1/other"),
    ("default", "*"),
    ("default", "tg:%"),
])
def test_namespace_rejects_injection_and_wildcards(tenant, subject):
    """Quotes, SQL, filter syntax, wildcards and empty parts raise NamespaceError at construction."""
    with pytest.raises(NamespaceError):
        Namespace(tenant, subject)


def test_namespace_string_form_roundtrips():
    """str(ns) is 'tenant/subject' and parse() inverts it."""
    ns = Namespace("mochi-bot", "wx:oABC_123-xyz")
    assert str(ns) == "mochi-bot/wx:oABC_123-xyz"
    assert Namespace.parse(str(ns)) == ns
    with pytest.raises(NamespaceError):
        Namespace.parse("a/b/c")


def test_namespace_is_frozen():
    """A namespace cannot be changed after construction."""
    ns = Namespace("default", "tg:1")
    with pytest.raises(AttributeError):
        ns.subject = "tg:2"  # type: ignore[misc]


def test_chatref_key_roundtrip_and_validation():
    """Chat keys carry platform, kind, id and topic; bad ids are refused."""
    c = ChatRef("tg", ChatKind.GROUP, "-1001293752024", "134545")
    assert c.key == "tg:group:-1001293752024:134545"
    assert c.group_key == "tg:group:-1001293752024"
    assert ChatRef.parse(c.key) == c
    with pytest.raises(NamespaceError):
        ChatRef("tg", ChatKind.GROUP, "-100' OR 1=1")


def test_json_depth_counts_nesting_without_recursion():
    """``json_depth``: 0 for a scalar, 1 per array or object level, and no RecursionError 5,000 deep."""
    from memory.types import json_depth

    assert [json_depth(v) for v in (1, "s", [], {}, [1, {"a": [2]}], {"a": {"b": {}}})] == [0, 0, 1, 1, 3, 3]
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    assert json_depth(deep) == 5_001 and json_depth(deep, limit=64) == 65


@pytest.mark.parametrize("depth", [65, 500, 951, 5000])
def test_load_json_refuses_a_value_nested_too_deep_with_a_value_error(depth):
    """``load_json`` answers a nesting past JSON_MAX_DEPTH with ValueError, whether the decoder could read it
    (≥ 500 then crashed ``repair_tree`` with RecursionError) or not (≥ ~950: RecursionError in the decoder)."""
    from memory.types import JSON_MAX_DEPTH, load_json

    with pytest.raises(ValueError, match=f"nested deeper than {JSON_MAX_DEPTH}"):
        load_json("[" * depth + "]" * depth)
    with pytest.raises(ValueError, match="nested deeper"):
        load_json(b'{"a": ' + b'{"b": ' * depth + b"1" + b"}" * depth + b"}")


def test_load_json_reads_json_at_the_depth_limit_and_repairs_its_strings():
    """64 levels are read; strings (keys too) repaired (a lone surrogate becomes U+FFFD); not JSON is ValueError."""
    from memory.types import JSON_MAX_DEPTH, load_json

    assert load_json("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH) is not None
    assert load_json('{"\\ud83c": ["x\\ud83c"]}') == {"\ufffd": ["x\ufffd"]}
    for bad in ("", "{", b"\xff", "nope"):
        with pytest.raises(ValueError):
            load_json(bad)
