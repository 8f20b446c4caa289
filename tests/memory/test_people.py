"""memory.admin.people lists a tenant's people — subjects with memories, linked
persons with their identities, speakers of the chat log — with counts, last
seen and names, searchable and paged, never another tenant's; unlink undoes one
identity of a link. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory import admin
from memory.store import ChatLine
from memory.types import ChatKind, ChatRef, Namespace

T0 = datetime.now(timezone.utc)


def _remember(core, ns: Namespace, text: str) -> str:
    return core.add(ns, core.new(ns, text), actor="test").memory.id


def _said(core, tenant: str, platform: str, uid: str, name: str, at: datetime) -> None:
    core.store.append_chat(tenant, ChatRef(platform, ChatKind.PRIVATE, uid), ChatLine("user", uid, "hi", at, "", name))


def test_people_of_a_tenant_with_identities_counts_names_and_search(core):
    """Every person once, a linked person with its identities, newest seen first; search by id or name (zh, en)."""
    a = admin.Authority("test", "default")
    _remember(core, Namespace("default", "tg:1"), "我养了一只叫煤球的黑猫")
    _remember(core, Namespace("default", "tg:1"), "I love hiking in the Alps")
    _remember(core, Namespace("default", "qq:7"), "我住在杭州")
    _remember(core, Namespace("other", "tg:9"), "secret of another tenant")
    _said(core, "default", "tg", "1", "Alice", T0)
    _said(core, "default", "tg", "2", "小明", T0 + timedelta(hours=1))
    _said(core, "default", "qq", "7", "老王", T0 - timedelta(days=1))
    linked = admin.link(core, a, "default", ["qq:7", "wx:o7"])

    page = admin.people(core, a, "default")
    subjects = [p.subject for p in page.items]
    assert page.total == 3 and "tg:9" not in subjects
    assert subjects[0] == "tg:2"  # last seen, newest first: tg:2 spoke an hour after every memory was written
    by = {p.subject: p for p in page.items}
    person = by[linked.person.subject]
    assert person.identities == ("qq:7", "wx:o7") and person.memories == 1 and person.name == "老王"
    assert by["tg:1"].memories == 2 and by["tg:1"].name == "Alice" and by["tg:2"].memories == 0

    assert [p.subject for p in admin.people(core, a, "default", query="alice").items] == ["tg:1"]
    assert [p.subject for p in admin.people(core, a, "default", query="小明").items] == ["tg:2"]
    assert [p.subject for p in admin.people(core, a, "default", query="WX:O7").items] == [linked.person.subject]
    assert admin.people(core, a, "default", query="nobody").total == 0
    second = admin.people(core, a, "default", limit=2, offset=2)
    assert second.total == 3 and [p.subject for p in second.items] == subjects[2:]


def test_people_refuses_another_tenants_authority_and_bad_pages(core):
    """A tenant's admin lists only their own tenant; a limit out of range is a ValueError."""
    with pytest.raises(PermissionError):
        admin.people(core, admin.Authority("test", "other"), "default")
    with pytest.raises(ValueError):
        admin.people(core, admin.Authority("test", "default"), "default", limit=0)
    with pytest.raises(ValueError):
        admin.people(core, admin.Authority("test", "default"), "default", offset=-1)


def test_unlink_makes_an_identity_its_own_subject_again(core):
    """After unlink the identity resolves to itself; the memories stay with the person; audited."""
    from memory.identity import resolve_subject

    a = admin.Authority("api:k1", "default")
    _remember(core, Namespace("default", "tg:5"), "I play the cello")
    person = admin.link(core, a, "default", ["tg:5", "qq:5"]).person
    assert resolve_subject(core.store, "default", "tg:5") == person
    assert admin.unlink(core, a, "default", "tg:5") == person
    assert resolve_subject(core.store, "default", "tg:5") == Namespace("default", "tg:5")
    assert resolve_subject(core.store, "default", "qq:5") == person
    assert core.store.count(person) == 1
    assert any(r["action"] == "unlink" and r["actor"] == "api:k1" for r in core.store.audit_records(person))
    with pytest.raises(ValueError):
        admin.unlink(core, a, "default", "tg:5")  # no longer linked
    with pytest.raises(ValueError):
        admin.unlink(core, a, "default", person.subject)
    with pytest.raises(PermissionError):
        admin.unlink(core, admin.Authority("x", "other"), "default", "qq:5")
