"""Association links (issue 17): weighted pairs of live memories of one namespace that grow on
co-use and decay with a half-life; a link never joins two namespaces, and forget, edit, retract,
forget-all and identity merges keep them honest — on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from memory.admin import Authority, forget_subject
from memory.links import ENTITY_MAX_SHARE, ENTITY_SEP, W_MAX, LinkParams, decayed, entities, grown, spread
from memory.recall import RecallParams
from memory.store import MAX_LINKED_IDS
from memory.types import ChatKind, ChatRef, Namespace, Visibility

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TEXTS = ["我养了一只叫煤球的黑猫🐈", "煤球上周去看了兽医", "I walk Mochi in 中山公園 every Sunday",
         "老板又改需求了，加班到十点！", "My sister Lena lives in Berlin"]


def _memories(core, ns, texts=TEXTS) -> list[str]:
    """Store ``texts`` in ``ns`` without entity links (the tests make their own); their ids. One index
    write for them all (``batch()``; its deferred entity links are made, or here not, before the finally)."""
    core.links = LinkParams(entity=0.0)
    try:
        with core.batch():
            return [core.add(ns, core.new(ns, t)).memory.id for t in texts]
    finally:
        core.links = LinkParams()


def test_the_weight_grows_on_co_use_and_halves_every_half_life():
    """w·2^(−Δ/h) then + amount, capped at W_MAX; a time before the last write does not grow it."""
    assert decayed(4.0, T0, T0 + timedelta(days=30), 30.0) == pytest.approx(2.0)
    assert decayed(4.0, T0, T0 + timedelta(days=7), 7.0) == pytest.approx(2.0)
    assert decayed(4.0, T0, T0 - timedelta(days=3), 30.0) == 4.0
    assert grown(2.0, T0, T0 + timedelta(days=30), 1.0, 30.0) == pytest.approx(2.0)
    assert grown(W_MAX, T0, T0, 5.0) == W_MAX
    with pytest.raises(ValueError):
        grown(1.0, T0, T0, 0.0)
    with pytest.raises(ValueError):
        decayed(1.0, T0, T0, 0.0)


def test_pairs_are_linked_once_each_way_and_grow_then_decay(core, namespace):
    """Three ids make three pairs; each side sees the other; a second co-use a half-life later weighs
    0.5 + 1; reasons accumulate in a fixed order."""
    a, b, c, *_ = _memories(core, namespace)
    assert core.store.strengthen_links(namespace, [a, b, c, a], reason="recalled", at=T0) == 3
    got = core.store.links_of(namespace, [a, b], at=T0)
    assert sorted(o for o, _, _ in got[a]) == sorted([b, c]) and sorted(o for o, _, _ in got[b]) == sorted([a, c])
    assert all(w == pytest.approx(1.0) and r == "recalled" for n in got.values() for _, w, r in n)
    later = T0 + timedelta(days=30)
    assert core.store.strengthen_links(namespace, [b, a], reason="entity", at=later) == 1
    got = core.store.links_of(namespace, [a], at=later)
    assert got[a][0] == (b, pytest.approx(1.5), "recalled,entity")  # strongest first
    assert got[a][1] == (c, pytest.approx(0.5), "recalled")
    assert core.store.links_of(namespace, [a], at=later, min_weight=1.0)[a] == [(b, pytest.approx(1.5),
                                                                                 "recalled,entity")]
    assert core.store.links_of(namespace, [a], at=later, half_life_days=60.0)[a][1][1] == pytest.approx(2 ** -0.5)
    assert core.store.count_links(namespace) == 3


def test_only_live_ids_of_the_namespace_are_linked_and_the_pairs_are_capped(core, namespace):
    """Unknown ids and a lone id link nothing; a bad reason is refused; at most MAX_LINKED_IDS ids are paired."""
    ids = _memories(core, namespace, [f"第{i}件事：我喜欢 item {i}" for i in range(MAX_LINKED_IDS + 3)])
    assert core.store.strengthen_links(namespace, [ids[0], "ffffffffffff"], reason="recalled") == 0
    assert core.store.strengthen_links(namespace, [ids[0]], reason="recalled") == 0
    with pytest.raises(ValueError):
        core.store.strengthen_links(namespace, ids[:2], reason="gossip")
    n = MAX_LINKED_IDS
    assert core.store.strengthen_links(namespace, ids, reason="cluster") == n * (n - 1) // 2
    assert core.store.links_of(namespace, [ids[-1]])[ids[-1]] == []


def test_a_link_never_joins_two_namespaces(core, namespace):
    """Ids of another namespace are ignored on write, and a read of one namespace never sees the other's links,
    even when asked for the other's ids."""
    other = Namespace(namespace.tenant, "tg:2002")
    mine = _memories(core, namespace, TEXTS[:2])
    theirs = _memories(core, other, TEXTS[2:4])
    assert core.store.strengthen_links(namespace, [mine[0], theirs[0]], reason="recalled") == 0
    assert core.store.strengthen_links(other, [*mine, *theirs], reason="recalled") == 1
    assert core.store.count_links(namespace) == 0
    assert core.store.links_of(namespace, theirs) == {theirs[0]: [], theirs[1]: []}
    assert core.store.links_of(other, mine) == {mine[0]: [], mine[1]: []}
    assert core.store.links_of(other, [theirs[0]])[theirs[0]][0][0] == theirs[1]


def test_forget_edit_and_retract_remove_a_memorys_links(core, namespace):
    """Forget drops every link of the memory in its transaction; an edit drops the old text's links;
    retract too; the rest stay."""
    a, b, c, d, e = _memories(core, namespace)
    core.store.strengthen_links(namespace, [a, b, c, d, e], reason="recalled")
    assert core.store.count_links(namespace) == 10
    core.forget(namespace, a)
    assert core.store.count_links(namespace) == 6
    assert all(a not in (o for o, _, _ in n) for n in core.store.links_of(namespace, [b, c, d, e]).values())
    core.update(namespace, b, "煤球上个月打了疫苗💉")
    assert core.store.count_links(namespace) == 3 and core.store.links_of(namespace, [b])[b] == []
    core.store.retract(namespace, c)
    assert core.store.count_links(namespace) == 1


def test_forget_all_leaves_no_link(core, namespace):
    """Forgetting everything of a person leaves none of their links."""
    ids = _memories(core, namespace)
    core.store.strengthen_links(namespace, ids, reason="entity")
    forget_subject(core, namespace, Authority(actor="operator:test", tenant=namespace.tenant))
    assert core.store.count_links(namespace) == 0


def test_linking_identities_carries_the_links_into_the_new_namespace(core, namespace):
    """move_namespace takes each link along with both its memories; the old namespace keeps none."""
    a, b, *_ = _memories(core, namespace)
    core.store.strengthen_links(namespace, [a, b], reason="recalled", at=T0)
    person = Namespace(namespace.tenant, "person:p1")
    core.store.move_namespace(namespace, person)
    assert core.store.count_links(namespace) == 0
    assert core.store.links_of(person, [a], at=T0)[a] == [(b, pytest.approx(1.0), "recalled")]


# -- where links come from, and the association channel of recall ---------------

DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
GROUP = ChatRef("tg", ChatKind.GROUP, "-100777")
CAT = "我养了一只叫煤球的黑猫"
VET = "昨天带它去宠物医院看兽医了，打了疫苗💉"
VET_Q = "兽医怎么说？"


@pytest.mark.parametrize("text, expected", [
    (CAT, ["煤球", "黑猫"]), ("我們家的貓咪叫煤球", ["猫咪", "煤球"]), ("我妹妹小雨在北京读书", ["小雨", "北京", "妹妹", "读书"]),
    ("I walk Mochi in 中山公園 every Sunday", ["mochi", "中山公园"]),
    ("Yesterday Melanie's kids painted with me 😊", ["melanie"]), ("？？？", []), ("ok, thanks!", []),
])
def test_entities_are_proper_nouns_and_nouns_normalised(text, expected):
    """zh (simplified and traditional), en and mixed text: names, places, nouns; weekdays, interjections and
    punctuation name nothing."""
    assert entities(text) == expected


def test_a_memory_naming_what_older_ones_name_is_linked_to_them(core, namespace):
    """煤球 in a new memory links it to the older memory about 煤球 (reason entity); an unrelated one stays
    unlinked; an everyday word shared by too many memories links nothing."""
    cat = core.add(namespace, core.new(namespace, CAT)).memory.id
    other = core.add(namespace, core.new(namespace, "老板又改需求了，加班到十点！")).memory.id
    vet = core.add(namespace, core.new(namespace, "煤球上周去看了兽医")).memory.id
    assert core.store.links_of(namespace, [vet])[vet] == [(cat, pytest.approx(1.0), "entity")]
    assert core.store.links_of(namespace, [other])[other] == []
    many = [core.add(namespace, core.new(namespace, f"Berlin trip number {i}")).memory.id
            for i in range(ENTITY_MAX_SHARE + 2)]
    assert core.store.links_of(namespace, [many[-1]])[many[-1]] == []
    assert len(core.store.links_of(namespace, [many[1]])[many[1]]) >= 1


def _all_links(core, ns, ids):
    links = core.store.links_of(ns, ids, at=T0)
    return sorted({(min(a, b), max(a, b), round(w, 6), r) for a in ids for b, w, r in links[a]})


def test_a_batch_links_entities_as_adds_one_at_a_time_do(core, namespace):
    """Inside ``batch()`` the block's entity links are made at its end in one scan: the same pairs and weights
    as the same adds one at a time (a pair once, two shared entities count twice, a memory later in the block
    links to one earlier in it), zh, en and mixed; the everyday-word cut-off still holds."""
    texts = ["我养了一只叫煤球的黑猫🐈", "煤球上周去看了兽医", "Lena took 煤球 to Berlin",
             "My sister Lena lives in Berlin", "老板又改需求了，加班到十点！",
             *[f"Tokyo trip number {i}" for i in range(ENTITY_MAX_SHARE + 2)]]
    one_by_one = [core.add(namespace, core.new(namespace, t, created_at=T0)).memory.id for t in texts]
    other = Namespace(namespace.tenant, namespace.subject + "-batched")
    with core.batch():
        batched = [core.add(other, core.new(other, t, created_at=T0)).memory.id for t in texts]
        assert core.store.count_links(other) == 0  # made at the block's end
    rename = dict(zip(batched, one_by_one))
    got = sorted((min(rename[a], rename[b]), max(rename[a], rename[b]), w, r)
                 for a, b, w, r in _all_links(core, other, batched))
    want = _all_links(core, namespace, one_by_one)
    assert got == want
    lena_berlin = (min(one_by_one[2], one_by_one[3]), max(one_by_one[2], one_by_one[3]), 2.0, "entity")
    assert lena_berlin in want  # Lena and Berlin: two shared entities, one pair of weight 2
    assert core.store.links_of(other, [batched[-1]])[batched[-1]] == []  # Tokyo: named by too many


def _stored_entities(core, ns, memory_id):
    from sqlalchemy import text

    with core.store.engine.connect() as conn:
        return conn.execute(text("SELECT entities FROM memories WHERE namespace = :ns AND id = :id"),
                            {"ns": str(ns), "id": memory_id}).scalar_one()


def test_what_a_memory_names_is_stored_with_its_text_and_follows_an_edit(core, namespace):
    """``memories.entities`` holds the text's named things (zh, traditional, en, mixed) from the add on,
    "" for a text naming nothing, and the new text's after an edit — what entity linking reads instead of
    tagging every older memory again."""
    cat = core.add(namespace, core.new(namespace, "我們家的貓咪叫煤球")).memory.id
    mixed = core.add(namespace, core.new(namespace, "I walk Mochi in 中山公園 every Sunday")).memory.id
    empty = core.add(namespace, core.new(namespace, "？？？😂")).memory.id
    assert _stored_entities(core, namespace, cat).split(ENTITY_SEP) == ["猫咪", "煤球"]
    assert _stored_entities(core, namespace, mixed).split(ENTITY_SEP) == ["mochi", "中山公园"]
    assert _stored_entities(core, namespace, empty) == ""
    core.update(namespace, mixed, "My sister Lena lives in Berlin")
    assert _stored_entities(core, namespace, mixed).split(ENTITY_SEP) == ["lena", "berlin"]


def test_rows_written_before_the_entities_column_link_as_stored_ones_do(core, namespace):
    """A row whose ``entities`` is NULL (written before migration 0007) is tagged when a new memory names
    what it names: the same pairs and weights as with the column filled, zh and en."""
    from sqlalchemy import text

    texts = ["我养了一只叫煤球的黑猫🐈", "My sister Lena lives in Berlin", "老板又改需求了，加班到十点！"]
    news = ["煤球上周去看了兽医", "Lena took 煤球 to Berlin"]
    old_ns = Namespace(namespace.tenant, namespace.subject + "-legacy")
    got = {}
    for ns in (namespace, old_ns):
        olds = _memories(core, ns, texts)
        if ns == old_ns:
            with core.store.engine.begin() as conn:
                conn.execute(text("UPDATE memories SET entities = NULL WHERE namespace = :ns"), {"ns": str(ns)})
            assert _stored_entities(core, ns, olds[0]) is None
        ids = olds + [core.add(ns, core.new(ns, t, created_at=T0)).memory.id for t in news]
        rename = {i: k for k, i in enumerate(ids)}
        got[ns] = sorted((*sorted((rename[a], rename[b])), w, r) for a, b, w, r in _all_links(core, ns, ids))
    assert got[namespace] == got[old_ns] and len(got[namespace]) >= 3


def test_memories_recalled_together_are_linked(core, namespace):
    """mark_recalled links each pair of the ids that went into one prompt; one id links nothing."""
    ids = _memories(core, namespace, ["I love jazz 🎷", "我在杭州上班", "My sister Lena lives in Berlin"])
    core.mark_recalled(namespace, ids[:1])
    assert core.store.count_links(namespace) == 0
    core.mark_recalled(namespace, ids, T0)
    got = core.store.links_of(namespace, [ids[0]], at=T0)[ids[0]]
    assert sorted(o for o, _, _ in got) == sorted(ids[1:]) and {r for _, _, r in got} == {"recalled"}


def test_the_association_channel_brings_up_the_linked_memory(core, namespace):
    """Talking about the vet visit brings up 煤球 through its link, ranked by the association channel alone;
    with the channel off, or without the link, it does not come up."""
    cat = core.add(namespace, core.new(namespace, CAT)).memory.id
    vet = core.add(namespace, core.new(namespace, VET)).memory.id
    assert [h.memory.id for h in core.recall(namespace, [VET_Q])] == [vet]
    core.mark_recalled(namespace, [cat, vet])
    hits = core.recall(namespace, [VET_Q])
    assert [h.memory.id for h in hits] == [vet, cat]
    assert hits[1].ranks == {"assoc": 1}
    assert [h.memory.id for h in core.recall(namespace, [VET_Q], params=RecallParams(assoc_weight=0.0))] == [vet]


@pytest.mark.parametrize("query", ["？？？", "😂😂", "量子力学的基本原理是什么", "What is the capital of Peru?"])
def test_no_hit_spreads_nothing(core, namespace, query):
    """A content-free or unrelated query still recalls nothing, links or not."""
    ids = _memories(core, namespace, [CAT, VET])
    core.mark_recalled(namespace, ids)
    assert core.recall(namespace, [query]) == []


def test_a_private_memory_never_surfaces_in_a_group_through_a_link(core, namespace):
    """The cat was told in private, the vet visit in the group: in the group only the vet visit comes up;
    in private both."""
    cat = core.add(namespace, core.new(namespace, CAT, origin=DM, visibility=Visibility.PRIVATE)).memory.id
    vet = core.add(namespace, core.new(namespace, VET, origin=GROUP, visibility=Visibility.GROUP)).memory.id
    core.mark_recalled(namespace, [cat, vet])
    assert [h.memory.id for h in core.recall(namespace, [VET_Q], chat=GROUP)] == [vet]
    assert [h.memory.id for h in core.recall(namespace, [VET_Q], chat=DM)] == [vet, cat]


def test_a_link_never_brings_up_another_namespaces_memory(core, namespace):
    """The same texts in two namespaces, linked only in one: the other recalls its own memory alone."""
    other = Namespace(namespace.tenant, "tg:2002")
    mine = _memories(core, namespace, [CAT, VET])
    theirs = _memories(core, other, [CAT, VET])
    core.mark_recalled(namespace, mine)
    core.mark_recalled(other, [mine[0], theirs[1]])  # a foreign id links nothing
    assert [h.memory.id for h in core.recall(other, [VET_Q])] == [theirs[1]]
    assert [h.memory.id for h in core.recall(namespace, [VET_Q])] == [mine[1], mine[0]]


def test_a_forgotten_memory_is_never_brought_up_by_a_link(core, namespace):
    """Forget the cat: its link goes with it, and the vet visit is recalled alone."""
    cat, vet = _memories(core, namespace, [CAT, VET])
    core.mark_recalled(namespace, [cat, vet])
    core.forget(namespace, cat)
    assert [h.memory.id for h in core.recall(namespace, [VET_Q])] == [vet]


def test_spreading_activation_weighs_sources_links_and_fans():
    """A_j = Σ W_i · w/(w+1) / (1 + ln fan_i): stronger sources and links spread more; a crowded source less."""
    links = {"a": [("x", 1.0, "recalled"), ("y", 3.0, "entity")], "b": [("x", 1.0, "recalled")],
             "c": [("z", 1.0, "cluster")] + [(f"n{i}", 1.0, "cluster") for i in range(9)]}
    act = dict(spread([("a", 1.0), ("b", 0.5), ("c", 1.0)], links))
    fan2 = 1 + math.log(2)
    assert act["y"] == pytest.approx(0.75 / fan2)
    assert act["x"] == pytest.approx(0.5 / fan2 + 0.5 * 0.5)
    assert act["z"] == pytest.approx(0.5 / (1 + math.log(10)))
    assert spread([("a", 1.0)], {}) == [] and spread([], links) == []


@pytest.mark.parametrize("text", TEXTS + ["Caroline去了Paris看Eiffel铁塔，還買了2本書！", "我和小明在北京大学读书。。。😂",
                                          "ＡＢＣ公司的Ｌｅｎａ说：明天见～", "", "   ", "!!!???"])
def test_named_things_are_tagged_block_by_block_as_the_whole_text(text):
    """``named_things`` tags each of jieba posseg's blocks on its own (held per block): the
    (word, flag) pairs are exactly those of ``posseg.cut`` over the whole simplified text, so
    the entities are too — zh, traditional, en, mixed, emoji and full-width text."""
    import jieba.posseg as pseg

    from memory import links
    from memory.text import initialise, to_simplified

    initialise()
    simple = to_simplified(text)
    whole = [(p.word, p.flag) for p in pseg.cut(simple)]
    assert [pair for b in pseg.re_han_internal.split(simple) if b for pair in links._tagged(b)] == whole
    if any(f == "nr" or f == "ns" for _w, f in whole):
        assert links.named_things(text)
