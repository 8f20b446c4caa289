"""A hand edit (``memory.capture.edit``) re-reads category and canonical key from
its new text, refuses a text another memory already holds, and keeps a
consolidated memory's type — on SQLite and PostgreSQL (issue 26 item 18)."""

from __future__ import annotations

import pytest

from memory.capture import edit, edit_reading
from memory.consolidate import KEY_PREFIX
from memory.emotion import analyse
from memory.errors import KeyTakenError
from memory.text import normalise
from memory.types import Category, Namespace

NS = Namespace("default", "tg:1001")


@pytest.mark.parametrize("before,after,category,key", [
    ("I love green tea.", "My cat is called Mochi.", Category.RELATIONSHIP, "pet.cat.name"),
    ("我喜欢绿茶", "我家猫叫煤球", Category.RELATIONSHIP, "pet.cat.name"),
    ("I love green tea.", "Worked late again, so tired", Category.OTHER, None),
    ("我喜欢绿茶", "叫煤球", Category.OTHER, None),
])
def test_an_edit_is_stored_under_the_category_and_key_of_its_new_text(core, before, after, category, key):
    """Slot text → that slot's key; text without a slot → its keyword category and the default key of the
    new text (never the old text's key, which a later capture of the old text would supersede); the emotion
    is the new text's too (not the tea's "love")."""
    mid = core.add(NS, core.new(NS, before, category=Category.PREFERENCE, emotion="love", valence=0.6)).memory.id
    live = edit(core, NS, mid, after, actor="self:tg:1001")
    got = core.get(NS, mid)
    assert (live.version, got.text) == (2, after)
    if key is None:
        assert got.key == f"{got.category.value}:{normalise(after)}" and got.category is not Category.PREFERENCE
    else:
        assert (got.category, got.key) == (category, key)
    assert (got.emotion, got.valence) == (analyse(after).label, analyse(after).valence) and got.emotion != "love"
    assert [v.text for v in core.history(NS, mid)] == [before, after]
    assert core.add(NS, core.new(NS, before, category=Category.PREFERENCE)).action == "stored"  # a memory of its own
    assert core.get(NS, mid).text == after


@pytest.mark.parametrize("home,tea,moved", [("I live in Porto.", "I love green tea.", "I live in Lisbon."),
                                            ("我住在北京", "我喜欢绿茶", "我住在杭州")])
def test_an_edit_into_a_slot_another_memory_holds_raises_and_writes_nothing(core, home, tea, moved):
    """KeyTakenError names the holder; the edited memory keeps its text, version and history."""
    slot = edit_reading(home, "").key
    holder = core.add(NS, core.new(NS, home, key=slot)).memory.id
    mid = core.add(NS, core.new(NS, tea)).memory.id
    with pytest.raises(KeyTakenError) as taken:
        edit(core, NS, mid, moved, actor="self:tg:1001")
    assert taken.value.holder == holder
    kept = core.get(NS, mid)
    assert (kept.text, kept.version, len(core.history(NS, mid))) == (tea, 1, 1)
    assert core.get(NS, holder).text == home


def test_a_consolidated_memory_keeps_its_type_and_category_when_edited(core):
    """A long-term memory (key consolidated:<type>:…) stays of its type; only the text part of its key changes."""
    text, new = "经常加班，工作压力大", "最近不怎么加班了"
    key = f"{KEY_PREFIX}pattern:{normalise(text)}"
    mid = core.add(NS, core.new(NS, text, category=Category.ROUTINE, key=key)).memory.id
    edit(core, NS, mid, new, actor="self:tg:1001")
    got = core.get(NS, mid)
    assert (got.category, got.key) == (Category.ROUTINE, f"{KEY_PREFIX}pattern:{normalise(new)}")
