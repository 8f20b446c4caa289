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
