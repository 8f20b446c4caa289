"""Conflicts (issue 12 item 10, the unsure band): a new statement that disagrees with a
live one without a clear change keeps both live, linked in SQL per namespace; the
recollection tells the pair as a change, older first, in the person's language,
with both citations; disclosure, forget, edit and isolation hold for the link."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from memory.admin import Authority, forget_subject
from memory.capture import capture, is_gateway_text, without_gateway_text
from memory.contradiction import judge, outcome
from memory.errors import NotFoundError
from memory.model_prompts import CHANGES_CLOSE, CHANGES_OPEN
from memory.reconstruct import reconstruct, template_recollection, told
from memory.store import ChatLine, Conflict, Store
from memory.types import ChatKind, ChatRef, Hit, Namespace

DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
GROUP = ChatRef("tg", ChatKind.GROUP, "-100777")
OTHER_GROUP = ChatRef("tg", ChatKind.GROUP, "-100888")
T0 = datetime.now(timezone.utc) - timedelta(days=40)
LATER = T0 + timedelta(days=30)

# (old, new, query): the judge is unsure about each pair, in zh and en
PAIRS = {
    "zh": ("我会开车。", "我不会开车。", "我会开车吗？"),
    "en": ("I have a car.", "I don't have a car.", "Do I have a car?"),
}


def said(core, ns, old, new, *, old_chat=DM, new_chat=DM):
    """Capture ``old`` then, 30 days later, ``new``; the two memories."""
    (a,) = capture(core, ns, old, chat=old_chat, said_at=T0, message_id="1", addressed=True)
    (b,) = capture(core, ns, new, chat=new_chat, said_at=LATER, message_id="2", addressed=True)
    return a, b


@pytest.mark.parametrize("old, new", [
    ("我会开车", "我不会开车"), ("我會開車。", "我不會開車了！"), ("我有车😊", "我没有车了😢"),
    ("I have a car", "I don't have a car."), ("I have a car", "I don’t have a car."),
    ("I love my apartment", "My apartment is awful"), ("我喜欢跑步", "跑步太累了"),
])
def test_the_judge_is_unsure_about_a_one_sided_negation_or_an_opposite_feeling(old, new):
    """zh (simplified, traditional, emoji), en (straight and curly apostrophe): conflict, not a change."""
    v = judge(old, new)
    assert (v.kind, v.changes, v.conflicts, outcome(v)) == ("conflict", False, True, "conflict")


@pytest.mark.parametrize("old, new, expected", [
    ("I love coffee.", "I hate coffee now.", "supersede"), ("我住在上海", "我上个月搬到杭州了", "supersede"),
    ("我不吃香菜", "我从来不吃香菜", "unrelated"), ("I don't smoke", "I never smoke", "unrelated"),
    ("我有车", "我有一只猫", "unrelated"), ("I don't have a car", "I have a bike", "unrelated"),
])
def test_clear_changes_still_supersede_and_agreeing_negations_are_no_conflict(old, new, expected):
    """The unsure band sits between: a clear change supersedes; a negation on both sides, or another topic,
    marks nothing."""
    assert outcome(judge(old, new)) == expected


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_unsure_pair_stays_both_live_and_marked(core, namespace, lang):
    """Both statements stay live, each at version 1, linked once as (older, newer) in SQL."""
    old, new, _ = PAIRS[lang]
    a, b = said(core, namespace, old, new)
    assert (a.action, b.action) == ("stored", "stored")
    assert {m.id for m in core.list(namespace)} == {a.memory.id, b.memory.id}
    assert [len(core.history(namespace, m.memory.id)) for m in (a, b)] == [1, 1]
    assert [(c.older_id, c.newer_id) for c in core.store.conflicts(namespace)] == [(a.memory.id, b.memory.id)]
    assert core.store.add_conflict(namespace, b.memory.id, a.memory.id) is False  # either way round: one link
    assert core.index.ids(namespace) == {a.memory.id, b.memory.id}


@pytest.mark.parametrize("lang, older_part, newer_part", [
    ("zh", "之前说「我会开车。」", "后来说「我不会开车。」"),
    ("en", 'earlier said "I have a car."', 'later said "I don\'t have a car."'),
])
def test_the_template_tells_the_pair_as_a_change_older_first_with_both_sources(sqlite_core, namespace, lang,
                                                                                older_part, newer_part):
    """Recalled, the pair is one line 之前说……，后来说…… / earlier said …, later said …, older first; the
    recollection cites both ids in that order, and capture would not learn the line back."""
    old, new, query = PAIRS[lang]
    a, b = said(sqlite_core, namespace, old, new)
    hits = sqlite_core.recall(namespace, [query], chat=DM)
    paired = {h.memory.id: h.conflict.id for h in hits if h.conflict is not None}
    assert paired == {a.memory.id: b.memory.id, b.memory.id: a.memory.id}  # both recalled, each carries the other
    assert all([m.id for m in told(h)] == [a.memory.id, b.memory.id] for h in hits if h.conflict is not None)
    # told as of exactly 40 days after the first statement: "now" read here can be a calendar day past
    # T0 + 40 days in the tenant's time zone (a suite that passes 16:00 UTC, midnight in UTC+8)
    rec = template_recollection(hits, lang="zh_CN" if lang == "zh" else "en", name="阿杰", now=T0 + timedelta(days=40))
    (line,) = [x for x in rec.text.splitlines() if old in x or new in x]  # the pair is told once
    assert older_part in line and newer_part in line and line.index(older_part) < line.index(newer_part)
    assert ("40天前" if lang == "zh" else "40 days ago") in line
    first = rec.sources.index(a.memory.id)
    assert rec.sources[first + 1] == b.memory.id
    assert is_gateway_text(line) and without_gateway_text(rec.text).strip() == ""


def test_one_recalled_side_brings_its_partner_along(sqlite_core, namespace):
    """A hit whose partner was not recalled gets it from SQL (same namespace), told older first."""
    old, new, _ = PAIRS["zh"]
    a, b = said(sqlite_core, namespace, old, new)
    (h,) = sqlite_core.with_conflicts(namespace, [Hit(b.memory, 0.5)], DM)
    assert h.conflict is not None and h.conflict.id == a.memory.id
    assert [m.text for m in told(h)] == [old, new]


@pytest.mark.parametrize("lang, answer, rule", [
    ("zh", "你之前说你会开车[src:{a}]，后来说你不会开车[src:{b}]。", "之前说……[src:旧编号]，后来说……[src:新编号]"),
    ("en", "You earlier said you have a car [src:{a}], later said you don't have a car [src:{b}].",
     "you earlier said … [src:OLD], later said … [src:NEW]"),
])
async def test_the_model_is_asked_for_the_change_and_its_cited_answer_validates(sqlite_core, namespace, llm, lang,
                                                                               answer, rule):
    """The prompt holds both memories and a <changes> block [older] → [newer] with the rule to tell it as a
    change; an answer citing both, older first, passes grounding and keeps both sources in order."""
    from gateway.config import LLMSettings
    from gateway.llm import ChatModel

    old, new, query = PAIRS[lang]
    a, b = said(sqlite_core, namespace, old, new)
    hits = sqlite_core.recall(namespace, [query], chat=DM)
    llm.enqueue(answer.format(a=a.memory.id, b=b.memory.id))
    model = ChatModel(LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=5))
    rec = await reconstruct(hits, tail=[ChatLine("user", "1001", query, datetime.now(timezone.utc), "9", "阿杰")],
                            complete=model.complete, lang="zh_CN" if lang == "zh" else "en",
                            now=datetime.now(timezone.utc), persona_name="小忆", persona_voice="温柔",
                            person_name="阿杰", min_hits=1, timeout_s=10)
    system, user = (m["content"] for m in llm.requests[-1]["messages"])
    assert rule in system
    assert f"{CHANGES_OPEN}\n[{a.memory.id}] → [{b.memory.id}]\n{CHANGES_CLOSE}" in user
    assert f"[{a.memory.id}] {old}" in user and f"[{b.memory.id}] {new}" in user
    assert rec.mode == "reconstructed" and rec.fallback_reason is None
    assert rec.sources == (a.memory.id, b.memory.id)
    assert ("之前说" in rec.text and "后来说" in rec.text) if lang == "zh" else "earlier said" in rec.text


@pytest.mark.parametrize("private_first", [True, False])
def test_a_private_side_never_joins_a_group_recollection(core, namespace, private_first):
    """One side said in private, the other in a group: in that group only the group side is told, alone;
    in private both, as a change; in another group neither."""
    old, new, query = PAIRS["zh"]
    chats = (DM, GROUP) if private_first else (GROUP, DM)
    a, b = said(core, namespace, old, new, old_chat=chats[0], new_chat=chats[1])
    assert len(core.store.conflicts(namespace)) == 1
    group_side, private_side = (b, a) if private_first else (a, b)
    in_group = core.recall(namespace, [query], chat=GROUP)
    assert [h.memory.id for h in in_group] == [group_side.memory.id] and in_group[0].conflict is None
    rec = template_recollection(in_group, lang="zh_CN", name="阿杰", now=datetime.now(timezone.utc))
    assert private_side.memory.text not in rec.text and "后来说" not in rec.text
    assert rec.sources == (group_side.memory.id,)
    assert core.with_conflicts(namespace, [Hit(group_side.memory, 0.5)], GROUP)[0].conflict is None
    in_private = core.recall(namespace, [query], chat=DM)
    assert {h.memory.id: h.conflict.id for h in in_private} == {a.memory.id: b.memory.id, b.memory.id: a.memory.id}
    told_in_private = template_recollection(in_private, lang="zh_CN", name="阿杰", now=datetime.now(timezone.utc))
    assert "之前说「我会开车。」" in told_in_private.text and "后来说「我不会开车。」" in told_in_private.text
    assert told_in_private.sources == (a.memory.id, b.memory.id)
    assert core.recall(namespace, [query], chat=OTHER_GROUP) == []


@pytest.mark.parametrize("side", ["older", "newer"])
def test_forgetting_either_side_clears_the_mark(core, namespace, side):
    """Forget one side: the link is gone from SQL and the other side is recalled alone."""
    old, new, query = PAIRS["en"]
    a, b = said(core, namespace, old, new)
    gone, kept = (a, b) if side == "older" else (b, a)
    core.forget(namespace, gone.memory.id)
    assert core.store.conflicts(namespace) == []
    hits = core.recall(namespace, [query], chat=DM)
    assert [(h.memory.id, h.conflict) for h in hits] == [(kept.memory.id, None)]


def test_an_edit_re_judges_the_mark(core, namespace):
    """A new version of one side drops the link, and links again only while the new text is still unsure."""
    old, new, _ = PAIRS["zh"]
    a, b = said(core, namespace, old, new)
    core.update(namespace, b.memory.id, "我现在还不会开车")
    assert [(c.older_id, c.newer_id) for c in core.store.conflicts(namespace)] == [(a.memory.id, b.memory.id)]
    core.update(namespace, b.memory.id, "我养了一只叫煤球的猫")
    assert core.store.conflicts(namespace) == []


def test_forget_all_removes_every_mark(core, namespace):
    """Forgetting everything of a person leaves no conflict link of theirs."""
    for lang in ("zh", "en"):
        old, new, _ = PAIRS[lang]
        capture(core, namespace, old, chat=DM, said_at=T0, message_id=f"{lang}1")
        capture(core, namespace, new, chat=DM, said_at=LATER, message_id=f"{lang}2")
    assert len(core.store.conflicts(namespace)) == 2
    receipt = forget_subject(core, namespace, Authority(actor="operator:test", tenant=namespace.tenant))
    assert receipt.memories == 4 and receipt.conflicts == 2  # each link counted once, by the forget that cut it
    assert core.store.conflicts(namespace) == []


def test_a_conflict_never_links_two_namespaces(core, namespace):
    """Two people's disagreeing statements are never linked; a link naming another namespace's memory is
    refused; reads of one namespace never see another's links."""
    other = Namespace(namespace.tenant, "tg:2002")
    old, new, query = PAIRS["en"]
    (a,) = capture(core, namespace, old, chat=DM, said_at=T0, message_id="1")
    (b,) = capture(core, other, new, chat=ChatRef("tg", ChatKind.PRIVATE, "2002"), said_at=LATER, message_id="2")
    assert core.store.conflicts(namespace) == [] and core.store.conflicts(other) == []
    with pytest.raises(NotFoundError):
        core.store.add_conflict(namespace, a.memory.id, b.memory.id)
    with pytest.raises(NotFoundError):
        core.store.add_conflict(other, a.memory.id, b.memory.id)
    (c,) = capture(core, namespace, new, chat=DM, said_at=LATER, message_id="3")
    assert [(x.older_id, x.newer_id) for x in core.store.conflicts(namespace)] == [(a.memory.id, c.memory.id)]
    assert core.store.conflicts(other, [a.memory.id, c.memory.id]) == []
    assert all(h.conflict is None for h in core.recall(other, [query]))


def test_linking_identities_carries_the_mark_into_the_new_namespace(core, namespace):
    """move_namespace takes the link along with both memories; the old namespace keeps none."""
    old, new, _ = PAIRS["zh"]
    a, b = said(core, namespace, old, new)
    person = Namespace(namespace.tenant, "person:p1")
    core.store.move_namespace(namespace, person)
    assert core.store.conflicts(namespace) == []
    assert [(c.older_id, c.newer_id) for c in core.store.conflicts(person)] == [(a.memory.id, b.memory.id)]


def test_an_older_database_gets_the_conflict_table_when_opened(tmp_path, namespace):
    """A data root from before conflicts (schema at the baseline revision, no
    memory_conflicts table) is upgraded in place by revision 0002 and keeps working."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).close()
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute("DROP TABLE memory_conflicts")
        conn.execute("UPDATE alembic_version SET version_num = '0001_baseline'")
    store = Store(url)
    try:
        assert store.conflicts(namespace) == []
        with pytest.raises(NotFoundError):
            store.add_conflict(namespace, "aaaaaaaaaaaa", "bbbbbbbbbbbb")
    finally:
        store.close()


def test_a_conflict_value_names_the_other_side():
    """Conflict.other gives the partner of either side and refuses an id that is neither."""
    c = Conflict("aaaaaaaaaaaa", "bbbbbbbbbbbb", datetime.now(timezone.utc))
    assert (c.other("aaaaaaaaaaaa"), c.other("bbbbbbbbbbbb")) == ("bbbbbbbbbbbb", "aaaaaaaaaaaa")
    with pytest.raises(ValueError):
        c.other("cccccccccccc")
