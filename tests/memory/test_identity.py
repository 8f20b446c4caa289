"""Identity links (memory.identity, memory.admin.link) and the small SQL records
the slash commands rely on (last recall, pending confirmations, group-scoped
listings, tenant counts) — on SQLite and PostgreSQL with a real LanceDB index."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory import admin
from memory.explain import RecallTrace, TraceEntry, explain
from memory.identity import resolve, resolve_subject
from memory.store import utcnow
from memory.types import Category, ChatKind, ChatRef, Namespace, ScoreParts, Visibility

AUTH = admin.Authority(actor="admin:tg:9", tenant="default")
T = "default"


def ns(subject: str) -> Namespace:
    return Namespace(T, subject)


def add(core, subject: str, text: str, **fields):
    n = ns(subject)
    return core.add(n, core.new(n, text, **fields)).memory


def test_link_resolves_both_identities_to_one_person_and_moves_memories(core):
    """After a link, both platform ids resolve to one person namespace holding both memories; the old namespaces are empty, also in the index."""
    cat = add(core, "tg:1", "我养了一只叫煤球的黑猫", category=Category.RELATIONSHIP)
    pot = add(core, "qq:2", "我最喜欢吃火锅", category=Category.PREFERENCE)
    assert resolve(core.store, T, "tg", "1") == ns("tg:1")
    result = admin.link(core, AUTH, T, ["tg:1", "qq:2"])
    person = result.person
    assert person.subject.startswith("person:") and result.identities == ("qq:2", "tg:1") and result.moved == 2
    assert resolve(core.store, T, "tg", "1") == person == resolve(core.store, T, "qq", "2")
    assert resolve_subject(core.store, T, person.subject) == person
    assert {m.id for m in core.list(person)} == {cat.id, pot.id}
    assert core.list(ns("tg:1")) == [] and core.list(ns("qq:2")) == []
    assert core.index.ids(ns("tg:1")) == set() and core.index.ids(person) == {cat.id, pot.id}
    assert [h.memory.id for h in core.recall(person, ["煤球"])][:1] == [cat.id]
    assert core.recall(ns("tg:1"), ["煤球"]) == []
    assert core.store.identities(person) == ["qq:2", "tg:1"]
    assert core.store.audit_records(person)[0]["action"] == "link"
    assert core.store.audit_records(ns("qq:2"))[0]["action"] == "link_out"
    assert resolve(core.store, "other", "tg", "1") == Namespace("other", "tg:1")  # links are per tenant


def test_link_merges_same_key_latest_wins_and_keeps_tombstones(core):
    """On a key clash the newer text wins with the older in history; a duplicate collapses; what was forgotten stays forgotten."""
    t0 = utcnow() - timedelta(days=3)
    add(core, "tg:1", "I live in Paris", key="profile:city", created_at=t0)
    newer = add(core, "qq:2", "I live in Rome", key="profile:city", created_at=t0 + timedelta(days=1))
    add(core, "tg:1", "I like tea", key="pref:tea", created_at=t0)
    add(core, "qq:2", "I like tea", key="pref:tea", created_at=t0)
    gone = add(core, "tg:1", "I hate cilantro", created_at=t0)
    core.forget(ns("tg:1"), gone.id)
    person = admin.link(core, AUTH, T, ["qq:2", "tg:1"]).person
    live = {m.key: m for m in core.list(person)}
    assert set(live) == {"profile:city", "pref:tea"}
    city = live["profile:city"]
    assert city.text == "I live in Rome" and city.id == newer.id and city.version == 2
    assert [v.text for v in core.history(person, city.id)] == ["I live in Paris", "I live in Rome"]
    again = core.add(person, core.new(person, "I hate cilantro", created_at=t0), said_at=t0)
    assert again.action == "rejected"


def test_linking_joins_and_merges_existing_people(core):
    """Linking an identity of one person to an identity of another merges both people into one subject."""
    p1 = admin.link(core, AUTH, T, ["tg:1", "qq:2"]).person
    add(core, "wx:3", "I run every morning")
    p2 = admin.link(core, AUTH, T, ["wx:3", "tg:4"]).person
    assert p1 != p2
    merged = admin.link(core, AUTH, T, ["qq:2", "wx:3"])
    assert merged.person == min(p1, p2)
    assert set(merged.identities) == {"tg:1", "qq:2", "wx:3", "tg:4"}
    for platform, uid in (("tg", "1"), ("qq", "2"), ("wx", "3"), ("tg", "4")):
        assert resolve(core.store, T, platform, uid) == merged.person
    assert [m.text for m in core.list(merged.person)] == ["I run every morning"]


def test_link_needs_tenant_authority_and_two_platform_identities(core):
    """Another tenant's admin, a single identity or a person subject are refused."""
    with pytest.raises(PermissionError):
        admin.link(core, admin.Authority("admin:tg:9", "other"), T, ["tg:1", "qq:2"])
    with pytest.raises(ValueError):
        admin.link(core, AUTH, T, ["tg:1", "tg:1"])
    with pytest.raises(ValueError):
        admin.link(core, AUTH, T, ["tg:1", "person:abc"])
    with pytest.raises(ValueError):
        core.store.move_namespace(ns("tg:1"), Namespace("other", "tg:1"))


def test_pending_confirmation_is_taken_once_and_per_namespace(core):
    """A pending confirmation is returned once, only for its namespace and key."""
    at = utcnow()
    core.store.put_pending(ns("tg:1"), "forget_all|x", at)
    assert core.store.take_pending(ns("tg:2"), "forget_all|x") is None
    assert abs((core.store.take_pending(ns("tg:1"), "forget_all|x") - at).total_seconds()) < 1e-3
    assert core.store.take_pending(ns("tg:1"), "forget_all|x") is None


def test_last_recall_round_trips_and_is_replaced(core):
    """The last-recall record keeps ranks and score parts, one per namespace, replaced by the next recall."""
    m = add(core, "tg:1", "I like tea")
    chat = ChatRef("tg", ChatKind.PRIVATE, "1")
    parts = ScoreParts(rrf=0.03, retention=0.9, activation=-1.5, emotion=1.1, importance=1.2)
    first = RecallTrace(ns("tg:1"), chat.key, utcnow(), 1, "", (TraceEntry(m.id, 1, 0.03, {"bm25": 1}, parts),))
    core.store.save_last_recall(first)
    got = core.store.last_recall(ns("tg:1"))
    assert got.entries == first.entries and got.k == 1 and got.chat == chat.key
    assert core.store.last_recall(ns("tg:2")) is None
    second = RecallTrace(ns("tg:1"), "tg:group:-100:7", utcnow(), 6, "recall failed: X", ())
    core.store.save_last_recall(second)
    assert core.store.last_recall(ns("tg:1")).fallback_reason == "recall failed: X"
    assert explain(core.store.last_recall(ns("tg:1")), m).verdict == "hidden_in_chat"


def test_group_listing_sees_topics_and_treats_underscore_literally(core):
    """list_in_group covers every topic of the group, nothing private, and `_` in a chat id is not a wildcard."""
    g = ChatRef("tg", ChatKind.GROUP, "a_b")
    topic = ChatRef("tg", ChatKind.GROUP, "a_b", "7")
    lookalike = ChatRef("tg", ChatKind.GROUP, "axb")
    in_group = add(core, "tg:1", "I sing in a choir", origin=g, visibility=Visibility.GROUP)
    in_topic = add(core, "tg:1", "I swim on Sundays", origin=topic, visibility=Visibility.GROUP)
    add(core, "tg:1", "I paint at night", origin=lookalike, visibility=Visibility.GROUP)
    add(core, "tg:1", "My secret is I fear the dark", origin=g, visibility=Visibility.PRIVATE)
    got = core.store.list_in_group(ns("tg:1"), g.group_key)
    assert {m.id for m in got} == {in_group.id, in_topic.id}
    assert core.store.count_in_group(ns("tg:1"), g.group_key) == 2
    assert core.store.count_in_group(ns("tg:2"), g.group_key) == 0


def test_tenant_counts_and_stats(core):
    """stats counts memories, people, chats and turns of one tenant only, within the authority's tenant."""
    add(core, "tg:1", "I like tea")
    add(core, "tg:2", "I like coffee")
    other = Namespace("other_t", "tg:1")
    core.add(other, core.new(other, "I like juice"))
    core.store.claim_delivery("default|tg|tg:private:1|1")
    core.store.claim_delivery("defaultx|tg|tg:private:1|1")
    core.store.claim_delivery("other_t|tg|tg:private:1|1")
    s = admin.stats(core, AUTH, T)
    assert (s.memories, s.people, s.turns, s.fallback_rate) == (2, 2, 1, None)
    with pytest.raises(PermissionError):
        admin.stats(core, AUTH, "other_t")
