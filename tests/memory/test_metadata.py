"""Metadata on memories, batches, scoped forgets and change events in the core, on
SQLite and PostgreSQL with a real LanceDB index: tags are kept across versions
and filtered on inside one namespace only; a batch never touches another
person's ids; a group's forget leaves the person's other memories; every write of
a subscribed tenant leaves one change event, without its text."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from memory.admin import Authority, forget_scope
from memory.errors import MetadataError, NotFoundError
from memory.metadata import MAX_KEYS, check_filters, check_metadata, matches, merged
from memory.recall import EXACT_MAX, RecallParams
from memory.store import utcnow
from memory.types import ChatKind, ChatRef, Namespace, Visibility

A, B = Namespace("default", "tg:1"), Namespace("default", "tg:2")
ZH, EN = "我养了一只叫煤球的黑猫", "I love hiking in the Alps every summer"
PATHS = pytest.mark.parametrize("exact_max", [0, EXACT_MAX], ids=["index", "exact"])


@pytest.mark.parametrize("bad", [
    {"k": None}, {"k": [1]}, {"k": {"a": 1}}, {"bad key": 1}, {"": 1}, {"k": "x" * 201}, {"k": float("nan")},
    {"k": 2 ** 60}, {f"k{i}": i for i in range(MAX_KEYS + 1)}, {f"k{i}": "字" * 200 for i in range(4)}, ["k"], "k"])
def test_metadata_outside_its_limits_is_refused(bad):
    """Null, lists, objects, odd keys, long strings, NaN, huge ints, too many keys or bytes: MetadataError."""
    with pytest.raises(MetadataError):
        check_metadata(bad)


def test_filters_compare_json_types_exactly():
    """true never equals 1, "1" never 1, 1 equals 1.0; a list means any of; a missing key never matches."""
    meta = check_metadata({"pinned": True, "n": 1, "s": "1", "topic": "猫"})
    assert matches(meta, check_filters({"pinned": True, "topic": ["狗", "猫"]}))
    assert matches(meta, check_filters({"n": 1.0}))
    assert not matches(meta, check_filters({"pinned": 1}))
    assert not matches(meta, check_filters({"n": "1"}))
    assert not matches(meta, check_filters({"s": 1}))
    assert not matches(meta, check_filters({"absent": "x"}))
    assert merged(meta, {"n": None, "new": "en"}) == {"new": "en", "pinned": True, "s": "1", "topic": "猫"}
    with pytest.raises(MetadataError):
        check_filters({"k": []})


def test_range_filters_compare_numbers_by_value_and_strings_as_text():
    """$gt/$gte/$lt/$lte: every bound must hold; numbers by value (an int against a float bound), strings by
    code point (ISO dates as dates, 中文 too); a bound never matches a value of the other kind, nor a boolean."""
    meta = check_metadata({"n": 3, "f": 2.5, "day": "2026-05-04", "name": "乙", "flag": True})
    assert matches(meta, check_filters({"n": {"$gte": 3, "$lt": 10}}))
    assert not matches(meta, check_filters({"n": {"$gt": 3}}))
    assert matches(meta, check_filters({"f": {"$gt": 2, "$lte": 2.5}}))
    assert matches(meta, check_filters({"day": {"$gte": "2026-05-01", "$lt": "2026-06-01"}}))
    assert not matches(meta, check_filters({"day": {"$gte": "2026-06-01"}}))
    assert matches(meta, check_filters({"name": {"$gt": "丙", "$lt": "甲"}}))  # U+4E19 < U+4E59 < U+7532
    assert not matches(meta, check_filters({"n": {"$gte": "0"}}))  # a string bound never matches a number
    assert not matches(meta, check_filters({"day": {"$gte": 0}}))
    assert not matches(meta, check_filters({"flag": {"$gte": 0}}))
    assert not matches(meta, check_filters({"absent": {"$gte": 0}}))
    assert check_filters(check_filters({"n": {"$gte": 3}})) == check_filters({"n": {"$gte": 3}})  # idempotent


def test_or_filters_need_one_alternative_beside_every_other_key():
    """{"$or": [f1, f2]} matches when one alternative does, and the keys beside it must still match."""
    meta = check_metadata({"topic": "猫", "score": 3, "pinned": False})
    assert matches(meta, check_filters({"$or": [{"topic": "狗"}, {"score": {"$lte": 3}}]}))
    assert not matches(meta, check_filters({"$or": [{"topic": "狗"}, {"pinned": True}]}))
    assert matches(meta, check_filters({"pinned": False, "$or": [{"topic": ["狗", "猫"]}]}))
    assert not matches(meta, check_filters({"pinned": True, "$or": [{"topic": "猫"}]}))


@pytest.mark.parametrize("bad", [
    {"n": {}}, {"n": {"$gte": True}}, {"n": {"$gte": None}}, {"n": {"$eq": 1}}, {"n": {"gte": 1}},
    {"n": {"$gte": [1]}}, {"$or": []}, {"$or": {"a": 1}}, {"$or": [{"$or": [{"a": 1}]}]}, {"$or": ["a"]},
    {"$or": [{"a": 1}] * 21}, {"$and": [{"a": 1}]}, {"n": {"$gte": "x" * 201}}])
def test_filters_outside_their_forms_are_refused(bad):
    """An empty or unknown range, a boolean or null bound, an $or that is not a list of 1-20 filters or nests
    another $or, an unknown $ key: MetadataError."""
    with pytest.raises(MetadataError):
        check_filters(bad)


@PATHS
def test_or_and_range_filters_narrow_one_namespace_only(core, exact_max):
    """A range or $or filter lists and recalls only the caller's matching memories (zh and en), never another
    person's with the same tags, and none when nothing matches."""
    cat = core.add(A, core.new(A, ZH, metadata={"topic": "pets", "score": 3, "day": "2026-05-04"})).memory
    hike = core.add(A, core.new(A, EN, metadata={"topic": "travel", "score": 8, "day": "2026-07-01"})).memory
    core.add(A, core.new(A, "我家的猫喜欢晒太阳"))  # no tags
    theirs = core.add(B, core.new(B, ZH, metadata={"topic": "pets", "score": 3, "day": "2026-05-04"})).memory
    assert {m.id for m in core.find(A, {"score": {"$gte": 5}})[1]} == {hike.id}
    assert {m.id for m in core.find(A, {"day": {"$lt": "2026-06"}})[1]} == {cat.id}
    either = {"$or": [{"topic": "pets"}, {"score": {"$gt": 7}}]}
    assert {m.id for m in core.find(A, either)[1]} == {cat.id, hike.id}
    assert {m.id for m in core.find(B, either)[1]} == {theirs.id}
    params = RecallParams(exact_max=exact_max)
    assert {h.memory.id for h in core.recall(A, ["猫 Alps hiking"], params=params, filters=either)} == {cat.id, hike.id}
    assert {h.memory.id for h in core.recall(A, ["猫 Alps hiking"], params=params,
                                              filters={"score": {"$lt": 5}})} == {cat.id}
    assert core.recall(A, ["猫"], params=params, filters={"score": {"$gt": 100}}) == []


def test_metadata_is_kept_across_versions_and_patched_in_place(core):
    """Set at add (zh and en), kept by a new version and an edit, merged by a keyed supersede,
    patched without a new version; a bad patch changes nothing."""
    zh = core.add(A, core.new(A, ZH, key="pet.cat.name", metadata={"source": "crm", "lang": "zh"})).memory
    en = core.add(A, core.new(A, EN, metadata={"lang": "en", "score": 3})).memory
    assert core.get(A, zh.id).metadata == {"lang": "zh", "source": "crm"}
    assert core.get(A, en.id).metadata == {"lang": "en", "score": 3}
    r = core.add(A, core.new(A, "我的猫叫雪球", key="pet.cat.name", metadata={"topic": "pets"}),
                 said_at=utcnow() + timedelta(seconds=1))
    assert r.action == "superseded" and r.memory.metadata == {"lang": "zh", "source": "crm", "topic": "pets"}
    live = core.update(A, zh.id, "我的猫叫雪球，是白猫")
    assert live.version == 3 and live.metadata == {"lang": "zh", "source": "crm", "topic": "pets"}
    patched = core.set_metadata(A, zh.id, {"source": None, "pinned": True})
    assert patched.version == 3 and patched.metadata == {"lang": "zh", "pinned": True, "topic": "pets"}
    with pytest.raises(MetadataError):
        core.edit(A, zh.id, text="不该写进去", metadata={"bad key": 1})
    assert core.get(A, zh.id).text == "我的猫叫雪球，是白猫" and core.get(A, zh.id).version == 3
    assert core.list(A)[0].metadata or core.list(A)[1].metadata  # listings carry it


@PATHS
def test_metadata_filters_narrow_one_namespace_and_never_reach_another(core, exact_max):
    """Two people with the same tags: a filtered list or recall of one returns only that person's
    matching memories; no match recalls nothing; a group chat's filter sees only what it discloses."""
    dm, g = ChatRef("tg", ChatKind.PRIVATE, "1"), ChatRef("tg", ChatKind.GROUP, "-100111")
    cat = core.add(A, core.new(A, ZH, origin=dm, metadata={"topic": "pets"})).memory
    hike = core.add(A, core.new(A, EN, origin=g, visibility=Visibility.GROUP, metadata={"topic": "travel"})).memory
    dog = core.add(A, core.new(A, "My dog Rex loves the Alps too", origin=g, visibility=Visibility.GROUP,
                               metadata={"topic": "pets"})).memory
    core.add(A, core.new(A, "我家的猫喜欢晒太阳"))  # no tags
    theirs = core.add(B, core.new(B, ZH, metadata={"topic": "pets"})).memory
    total, page = core.find(A, {"topic": "pets"})
    assert total == 2 and {m.id for m in page} == {cat.id, dog.id}
    assert core.find(A, {"topic": "pets"}, chat=g)[0] == 1
    assert {m.id for m in core.find(B, {"topic": ["pets", "travel"]})[1]} == {theirs.id}
    params = RecallParams(exact_max=exact_max)
    ids = {h.memory.id for h in core.recall(A, ["猫 Alps"], params=params, filters={"topic": "pets"})}
    assert ids <= {cat.id, dog.id} and ids
    assert {h.memory.id for h in core.recall(A, ["Alps hiking"], params=params, filters={"topic": "travel"})} \
        == {hike.id}
    assert core.recall(A, ["猫"], params=params, filters={"topic": "nothing"}) == []
    assert {h.memory.id for h in core.recall(A, ["猫 dog"], chat=g, params=params, filters={"topic": "pets"})} \
        <= {dog.id}
    assert theirs.id not in {h.memory.id for h in core.recall(A, [ZH], params=params, filters={"topic": "pets"})}


def test_batches_touch_only_the_callers_namespace(core):
    """forget_many forgets (and tombstones) A's ids and answers B's as not found, leaving them live;
    edit_many likewise; a bad patch in a batch changes nothing."""
    said = utcnow() - timedelta(minutes=5)
    a1 = core.add(A, core.new(A, ZH), said_at=said).memory
    a2 = core.add(A, core.new(A, EN), said_at=said).memory
    b1 = core.add(B, core.new(B, "我在上海做程序员")).memory
    with pytest.raises(MetadataError):
        core.edit_many(A, [(a1.id, "新的文本", None), (a2.id, None, {"bad key": 1})])
    assert core.get(A, a1.id).version == 1
    done = core.edit_many(A, [(a1.id, None, {"topic": "pets"}), (b1.id, "被改了", None)])
    assert done[a1.id][0] == "updated" and done[a1.id][1].metadata == {"topic": "pets"}
    assert done[b1.id] == ("not_found", None)
    assert core.get(B, b1.id).text == "我在上海做程序员"
    done = core.forget_many(A, [a1.id, b1.id, a1.id, "nosuchid"])
    assert {i: r is not None for i, r in done.items()} == {a1.id: True, b1.id: False, "nosuchid": False}
    assert done[a1.id].memories == 1 and done[a1.id].tombstones >= 1
    assert core.get(B, b1.id).version == 1
    with pytest.raises(NotFoundError):
        core.get(A, a1.id)
    assert core.add(A, core.new(A, ZH), said_at=said).reason == "tombstone"  # forgotten as every forget


def test_forget_scope_of_a_group_leaves_the_persons_other_memories(core):
    """A group's forget takes what was learned there (every topic) and tombstones the group; the
    private memory and the other group's stay; another person's memories of that group stay."""
    g, g2 = ChatRef("tg", ChatKind.GROUP, "-100111"), ChatRef("tg", ChatKind.GROUP, "-100222")
    topic = ChatRef("tg", ChatKind.GROUP, "-100111", "7")
    said = utcnow() - timedelta(minutes=5)
    kept = core.add(A, core.new(A, ZH)).memory
    core.add(A, core.new(A, EN, origin=g, visibility=Visibility.GROUP), said_at=said)
    core.add(A, core.new(A, "我在上海做程序员", origin=topic, visibility=Visibility.GROUP), said_at=said)
    other = core.add(A, core.new(A, "週末我常去爬山", origin=g2, visibility=Visibility.GROUP)).memory
    theirs = core.add(B, core.new(B, EN, origin=g, visibility=Visibility.GROUP)).memory
    with pytest.raises(PermissionError):
        forget_scope(core, A, Authority("api:x", "other"), g.group_key)
    assert forget_scope(core, A, Authority("api:x", "default"), g.group_key).memories == 2
    assert set(core.store.iter_ids(A)) == {kept.id, other.id}
    assert core.get(B, theirs.id)
    again = core.add(A, core.new(A, EN, origin=g, visibility=Visibility.GROUP), said_at=said)
    assert again.action == "rejected" and again.reason == "tombstone"


def test_change_events_are_written_with_each_write_of_a_subscribed_tenant(core):
    """add → added, supersede/edit/metadata → changed (with the version), forget → forgotten, in
    order, ids only; a tenant that did not subscribe leaves none; a claimed event is not claimed again."""
    other = Namespace("other", "tg:1")
    core.store.subscribe_events(["default"])
    m = core.add(A, core.new(A, ZH)).memory
    core.add(other, core.new(other, ZH))
    core.update(A, m.id, "我的猫叫雪球")
    core.set_metadata(A, m.id, {"topic": "pets"})  # version 2 is still to be told: that event covers the tag
    core.set_metadata(A, m.id, {"topic": "pets"})  # no change, no event
    core.forget(A, m.id)
    assert core.store.pending_events("other") == 0
    due = core.store.due_events(limit=10)
    assert [(e.event, e.memory_id, e.version) for e in due] == [
        ("memory.added", m.id, 1), ("memory.changed", m.id, 2), ("memory.forgotten", m.id, 0)]
    assert {e.namespace for e in due} == {A}
    assert core.store.due_events(limit=10) == []  # leased
    with core.store.engine.connect() as conn:
        cols = [c[0] for c in conn.execute(text("SELECT * FROM change_events")).cursor.description]
    assert "text" not in cols
    core.store.events_retry(due[0].id, utcnow() - timedelta(seconds=1))
    assert [e.id for e in core.store.due_events(limit=10)] == [due[0].id]  # the rest stay leased behind it
    core.store.events_done([e.id for e in due])
    assert core.store.pending_events() == 0


def test_linking_identities_keeps_tags_and_tells_the_move_as_events(core):
    """Two identities linked into one person: a moved memory keeps its tags, a merged one gets both rows'
    tags; the old namespace's ids leave as memory.forgotten, the person's arrive as added or changed."""
    from memory.admin import link

    tg, qq = Namespace("default", "tg:5"), Namespace("default", "qq:5")
    core.store.subscribe_events(["default"])
    moved = core.add(tg, core.new(tg, EN, metadata={"lang": "en"})).memory
    core.add(tg, core.new(tg, ZH, key="pet.cat.name", metadata={"from": "tg"}))
    kept = core.add(qq, core.new(qq, ZH, key="pet.cat.name", metadata={"topic": "pets"})).memory
    core.store.events_done([e.id for e in core.store.due_events(limit=50)])
    person = link(core, Authority("test", "default"), "default", ["tg:5", "qq:5"]).person
    by_id = {m.id: m for m in core.list(person)}
    assert by_id[moved.id].metadata == {"lang": "en"}
    # qq:5 moves first (sorted), so tg:5's cat lands in qq:5's row, which keeps its id
    assert by_id[kept.id].metadata == {"from": "tg", "topic": "pets"} and len(by_id) == 2
    events = [(e.event, str(e.namespace), e.memory_id) for e in core.store.due_events(limit=50)]
    assert {("memory.forgotten", str(tg), moved.id), ("memory.added", str(person), moved.id),
            ("memory.forgotten", str(qq), kept.id), ("memory.added", str(person), kept.id)} <= set(events)
    # the merge kept kept's text and version: its added event, not sent yet, tells the merged memory
    assert [ev for ev in events if ev[1:] == (str(person), kept.id)] == [("memory.added", str(person), kept.id)]
