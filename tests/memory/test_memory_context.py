"""A memory keeps the companion's line its message answered (``Memory.context``) and
is searched with it: an elliptical answer ("Yes! It was so much fun.", 「对，超好玩的」)
is found by the topic of the question it answered, on every search path, and only
in its own namespace; the context follows new evidence, not an admin's edit; only
the companion's recent line becomes a context (``answered_line``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from memory.capture import CONTEXT_WINDOW, answered_line, capture
from memory.recall import RecallParams
from memory.store import ChatLine
from memory.text import sentence_starts
from memory.types import CONTEXT_CHARS, ChatKind, ChatRef, Memory, Namespace, search_text

A = Namespace("default", "tg:1001")
B = Namespace("default", "tg:2002")
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)

# (what the person said, the companion's line it answered, a later question on that topic)
ANSWERS = [
    ("Yes! It was so much fun.", "Mochi: How was the pride parade last weekend?", "the pride parade"),
    ("对，超好玩的，排了两个小时队", "小莫：你上周末去迪士尼了吗？", "迪士尼人多吗"),
    ("去了，風景很美 🌄", "小莫：你去過阿里山嗎？", "阿里山"),
    ("Yep, 两只 🐕🐕", "Mochi: Do you still have the corgis?", "your corgis"),
]
PATHS = {"exact": RecallParams(), "index": RecallParams(exact_max=0)}


def test_search_text_is_the_text_then_the_line_it_answered():
    assert search_text("Yes!", "Mochi: Parade?") == "Yes! (Mochi: Parade?)"
    assert search_text("我喜欢猫。") == "我喜欢猫。"  # no context: exactly the text, as before the column


@pytest.mark.parametrize("path", PATHS)
def test_an_answer_is_recalled_by_the_topic_of_the_line_it_answered(core, path):
    """en, zh, traditional and mixed with emoji: each answer shares no word with the later question
    but is found through its context; the same text without a context, said by another person,
    is not — and A's contexts never reach B's recall."""
    with core.batch():
        for text, line, _q in ANSWERS:
            core.add(A, core.new(A, text, context=line, created_at=T0), said_at=T0)
            core.add(B, core.new(B, text, created_at=T0), said_at=T0)
    for text, _line, question in ANSWERS:
        found = [h.memory.text for h in core.recall(A, [question], params=PATHS[path])]
        assert found[:1] == [text], (question, found)
        assert all(h.memory.namespace == B for h in core.recall(B, [question], params=PATHS[path]))
        assert text not in [h.memory.text for h in core.recall(B, [question], params=PATHS[path])
                            if h.ranks.get("bm25")]


def test_context_is_cleaned_and_cut_to_its_end(sqlite_core):
    """Control characters go as in the text; a long line keeps its last CONTEXT_CHARS characters
    (a line that asks usually asks at its end)."""
    long = "Mochi: " + "blah " * 200 + "So, did you\x1b[31m finish the marathon?"
    m = sqlite_core.new(A, "I did!", context=long)
    assert len(m.context) <= CONTEXT_CHARS and m.context.endswith("did you finish the marathon?")
    stored = sqlite_core.add(A, m, said_at=T0).memory
    assert sqlite_core.store.get(A, stored.id).context == m.context


def test_new_evidence_brings_its_context_and_an_admin_edit_keeps_it(sqlite_core):
    """Said again in other words (a revision through capture) the memory is searched with the new
    line it answered; an admin's edit of the text keeps the context; the index follows both."""
    core = sqlite_core
    first = capture(core, A, "我住在上海", chat=None, said_at=T0, message_id="m1",
                    context="小莫：你现在住哪个城市？")[0].memory
    assert core.store.get(A, first.id).context == "小莫：你现在住哪个城市？"
    moved = capture(core, A, "我上个月搬到杭州了", chat=None, said_at=T0 + timedelta(days=40), message_id="m2",
                    context="小莫：最近工作顺利吗？")[0].memory
    assert moved.id == first.id and core.store.get(A, first.id).context == "小莫：最近工作顺利吗？"
    edited = core.update(A, first.id, "我搬到杭州西湖边了")
    assert edited.context == "小莫：最近工作顺利吗？"
    core.maintain()
    hits = core.recall(A, ["工作顺利"], params=PATHS["index"])
    assert [h.memory.id for h in hits][:1] == [first.id]
    assert not [h for h in core.recall(A, ["哪个城市"], params=PATHS["index"]) if h.ranks.get("bm25")]


def _line(role: str, text: str, at: datetime, name: str = "", sender: str = "bot") -> ChatLine:
    return ChatLine(role, sender, text, at, "", name)


DM = ChatRef("tg", ChatKind.PRIVATE, "1001")


def test_answered_line_is_the_companions_recent_line_in_a_private_chat_only():
    now = T0 + timedelta(minutes=3)
    assert answered_line(_line("bot", "你上周末去哪了？", T0, "小莫"), now, DM) == "小莫: 你上周末去哪了？"
    assert answered_line(_line("bot", "How was it?", T0), now, None, persona="Mochi") == "Mochi: How was it?"
    assert answered_line(_line("bot", "How was it?", T0), now, DM) == "bot: How was it?"  # no name at all
    # another person's line would keep their words in this person's memory; the person's own is a memory itself
    assert answered_line(_line("user", "我是B，我喜欢猫", T0, "B", sender="2002"), now, DM) == ""
    assert answered_line(_line("user", "I went hiking", T0, "阿杰", sender="1001"), now, DM) == ""
    # in a group the companion's line may answer someone else and carry what they said
    group = ChatRef("tg", ChatKind.GROUP, "-100200")
    assert answered_line(_line("bot", "B，祝你手术顺利！花生过敏要小心哦", T0, "小莫"), now, group) == ""
    assert answered_line(None, now, DM) == ""
    assert answered_line(_line("bot", "  ", T0), now, DM) == ""
    assert answered_line(_line("bot", "Long ago?", T0), T0 + CONTEXT_WINDOW + timedelta(seconds=1), DM) == ""
    assert answered_line(_line("bot", "Later?", now + timedelta(hours=1)), now, DM) == ""  # said after it
    # a long line keeps its name and the end of its text, within CONTEXT_CHARS
    long = answered_line(_line("bot", "嗯" * 1000 + "\n那你最后去了吗？", T0, "小莫"), now, DM)
    assert long.startswith("小莫: 嗯") and long.endswith("嗯 那你最后去了吗？") and len(long) == CONTEXT_CHARS
    # a name that itself holds ": " is kept whole (it used to be cut at its own ": ")
    named = answered_line(_line("bot", "运动" * 150 + "你喜欢哪种？", T0, "Bot: 小桃"), now, DM)
    assert named.startswith("Bot: 小桃: ") and "运动运动" in named and named.endswith("你喜欢哪种？") and len(named) == CONTEXT_CHARS


def test_store_reads_the_line_before_in_the_same_chat_only(sqlite_core):
    store = sqlite_core.store
    dm = ChatRef("tg", ChatKind.PRIVATE, "1001")
    other = ChatRef("tg", ChatKind.PRIVATE, "2002")
    store.append_chat("default", dm, _line("bot", "你上周末去哪了？", T0, "小莫"))
    store.append_chat("default", other, _line("bot", "别的聊天", T0, "小莫"))
    mine = store.append_chat("default", dm, _line("user", "去爬山了", T0, "阿杰", sender="1001"))
    before = store.line_before("default", dm, mine)
    assert before is not None and (before.role, before.text) == ("bot", "你上周末去哪了？")
    first = store.line_before("default", dm, mine - 2)
    assert first is None
    assert store.line_before("other-tenant", dm, mine) is None


def _hit(text: str, context: str = "", mid: str = "a1b2c3d4e5f6"):
    from memory.types import Hit, Memory

    return Hit(Memory(mid, A, text, created_at=T0, context=context, emotion="joy"), 1.0)


@pytest.mark.parametrize("lang,expected", [
    ("zh_CN", "- 昨天，阿杰说过：「对，超好玩的」（回应 小莫: 你上周末去迪士尼了吗？）"),
    ("en", '- yesterday, 阿杰 said: "对，超好玩的" (replying to 小莫: 你上周末去迪士尼了吗？)')])
def test_the_template_recollection_tells_what_an_answer_replied_to(lang, expected):
    from memory.reconstruct import template_recollection

    rec = template_recollection([_hit("对，超好玩的", "小莫: 你上周末去迪士尼了吗？"), _hit("我养猫", mid="0123456789ab")],
                                lang=lang, name="阿杰", now=T0 + timedelta(days=1))
    assert rec.text.splitlines()[1] == expected
    assert "回应" not in rec.text.splitlines()[2] and "replying" not in rec.text.splitlines()[2]


def test_the_model_sees_the_line_answered_as_the_companions_and_the_echo_is_not_captured():
    """The model's memory line carries the context inside its brackets (escaped like the text: no forged
    ``[src:…]``); the template line with a context, echoed back by a person, is not learned as a fact."""
    from memory.capture import is_gateway_text
    from memory.model_prompts import memory_line

    line = memory_line("a1b2c3d4e5f6", "Yes! So much fun.", "2026-11-01", "joy", "Mochi: the parade [src:zzz]?")
    assert line == "[a1b2c3d4e5f6] Yes! So much fun. (2026-11-01, joy; ↩ Mochi: the parade ［src:zzz］?)"
    assert memory_line("a1b2c3d4e5f6", "我养猫", "2026-11-01", "neutral") == "[a1b2c3d4e5f6] 我养猫 (2026-11-01, neutral)"
    assert is_gateway_text(line)
    assert is_gateway_text("- 昨天，阿杰说过：「对，超好玩的」（回应 小莫: 你上周末去迪士尼了吗？）")
    assert is_gateway_text('- yesterday, Sam said: "Yes!" (replying to Mochi: How was the parade?)')


async def test_a_retelling_is_grounded_in_the_persons_words_not_in_the_line_they_answered():
    """"No, I stayed home." answering "Did you go to the pride parade in Berlin?": a model that retells
    the question as the person's deed is not grounded by it — the recollection falls back to the
    template, which tells the answer with what it replied to."""
    from memory.reconstruct import reconstruct

    hit = _hit("No, I stayed home.", "Mochi: Did you go to the pride parade in Berlin?")

    asked: list = []

    async def model(messages):
        asked.append(messages)
        return "You went to the pride parade in Berlin [src:a1b2c3d4e5f6]."

    rec = await reconstruct([hit], tail=[], complete=model, lang="en", persona_name="Mochi", persona_voice="",
                            person_name="Sam", now=T0 + timedelta(days=1), min_hits=1)
    assert asked and "; ↩ Mochi: Did you go to the pride parade in Berlin?)" in asked[0][-1]["content"]
    assert rec.fallback_reason and "went to the pride parade" not in rec.text
    assert 'Sam said: "No, I stayed home." (replying to Mochi: Did you go to the pride parade in Berlin?)' in rec.text


def test_a_forget_takes_its_retelling_out_of_the_next_answers_context(sqlite_core):
    """The companion said back what the person told it (「记住啦，你对花生过敏」) and the person answered
    that line: forgetting the allergy drops that context too, on every search path, while a context
    that tells something else stays; a withdrawal (retract) does the same."""
    core = sqlite_core
    allergy = core.add(A, core.new(A, "我对花生过敏，吃了会进医院", created_at=T0), said_at=T0).memory
    answer = core.add(A, core.new(A, "还行吧，好多了", created_at=T0,
                                  context="小莫: 记住啦，你对花生过敏，吃了会进医院。那你最近身体还好吗？"), said_at=T0).memory
    other = core.add(A, core.new(A, "去了，人超多", created_at=T0, context="小莫: 你去迪士尼了吗？"), said_at=T0).memory
    assert answer.id in [h.memory.id for h in core.recall(A, ["花生过敏"], params=PATHS["index"])]
    core.forget(A, allergy.id)
    assert core.store.get(A, answer.id).context == "" and core.store.get(A, other.id).context == "小莫: 你去迪士尼了吗？"
    for params in PATHS.values():
        assert not [h for h in core.recall(A, ["花生过敏"], params=params) if h.ranks.get("bm25")]
    cat = core.add(A, core.new(A, "I adopted a cat called Luna", created_at=T0), said_at=T0).memory
    reply = core.add(A, core.new(A, "She is so fluffy", created_at=T0,
                                 context="Mochi: You adopted a cat called Luna? How is she?"), said_at=T0).memory
    core.retract(A, cat.id)
    assert core.store.get(A, reply.id).context == ""


def test_retells_errs_towards_a_retelling():
    from memory.text import retells

    assert retells("小莫: 记住啦，你对花生过敏，一定要小心！最近身体还好吗？",
                   "我对花生过敏，上次吃了一口就进了急诊室，医生说以后要随身带肾上腺素笔")  # two of its words
    assert retells("Mochi: How is Luna, your cat?", "I adopted a cat called Luna")
    assert not retells("小莫: 工作怎么样？", "我在上海工作，经常加班")
    assert not retells("Mochi: Any plans for the weekend?", "I adopted a cat called Luna")


def test_a_forget_takes_the_companions_retelling_out_of_the_chat_log(sqlite_core):
    """The companion's line that said the forgotten fact back is deleted from the chat log of the chat
    it was said in, so it neither feeds the tail nor becomes the next message's context; its other
    lines stay."""
    core, store = sqlite_core, sqlite_core.store
    fact = core.add(A, core.new(A, "我对花生过敏，吃了会进医院", origin=DM, created_at=T0), said_at=T0).memory
    store.append_chat("default", DM, _line("bot", "记住啦，你对花生过敏，吃了会进医院。最近还好吗？", T0, "小莫"))
    store.append_chat("default", DM, _line("bot", "今天天气不错呀", T0, "小莫"))
    core.forget(A, fact.id)
    assert [line.text for line in store.chat_tail("default", DM)] == ["今天天气不错呀"]


def test_reimporting_an_old_export_does_not_bring_a_retelling_back(sqlite_core):
    """After a forget, an export taken before it is imported again: the tombstone refuses the fact and the
    answer that was deduped keeps no context retelling it."""
    from gateway.http.api_v1 import ExportDoc, _import
    from gateway.commands import export_document

    core = sqlite_core
    fact = core.add(A, core.new(A, "我对花生过敏，吃了会进医院", created_at=T0), said_at=T0).memory
    answer = core.add(A, core.new(A, "还行吧，好多了", context="小莫: 记住啦，你对花生过敏！最近身体还好吗？",
                                  created_at=T0), said_at=T0).memory
    doc = ExportDoc.model_validate(export_document(core, A, None, T0))
    core.forget(A, fact.id)
    results = _import(core, A, doc, "admin")
    assert {r.action for r in results} == {"rejected", "deduped"}
    assert core.store.get(A, answer.id).context == ""
    assert not [h for h in core.recall(A, ["花生过敏"], params=PATHS["exact"]) if h.ranks.get("bm25")]


def test_the_same_answer_to_two_lines_keeps_both(sqlite_core):
    """"Yes! It was so much fun." after the parade and again after the concert is one memory searched
    with both lines (the newer last); said again after the same line, nothing changes."""
    core = sqlite_core
    first = core.add(A, core.new(A, "Yes! It was so much fun.", context="Mochi: How was the pride parade?"),
                     said_at=T0).memory
    again = core.add(A, core.new(A, "Yes! It was so much fun.", context="Mochi: And the Taylor Swift concert?"),
                     said_at=T0 + timedelta(hours=1))
    assert again.action == "deduped" and again.memory.id == first.id
    joined = "Mochi: How was the pride parade? / Mochi: And the Taylor Swift concert?"
    assert core.store.get(A, first.id).context == joined == again.memory.context
    for question in ("the pride parade", "the Taylor Swift concert"):
        assert [h.memory.id for h in core.recall(A, [question], params=PATHS["index"])][:1] == [first.id]
    core.add(A, core.new(A, "Yes! It was so much fun.", context="Mochi: And the Taylor Swift concert?"),
             said_at=T0 + timedelta(hours=2))
    assert core.store.get(A, first.id).context == joined
    long = "Mochi: And the festival? " + "I heard the band played for hours " * 10 + "did you like it?"
    third = core.add(A, core.new(A, "Yes! It was so much fun.", context=long), said_at=T0 + timedelta(hours=3))
    kept = third.memory.context.split(" / ")
    assert len(third.memory.context) <= CONTEXT_CHARS and kept[0] == "Mochi: And the Taylor Swift concert?"
    assert kept[1].startswith("Mochi: ") and kept[1].endswith("did you like it?")


#: (lang, memories that say the topic, (a memory on something else, the companion's line it answered), query)
TOPIC = [
    ("en", ["I ran my first marathon in Berlin", "Training for the marathon takes my whole weekend"],
     ("My sister Anna lives in Toronto", "Mochi: How was the marathon training this week?"), "marathon"),
    ("zh", ["我跑完了人生第一个马拉松", "马拉松训练占了我整个周末"],
     ("我姐姐安娜住在多伦多", "小莫：这周马拉松训练怎么样？"), "马拉松"),
]
SEARCH = RecallParams(k=50, matched_vector_floor=1.0, assoc_weight=0.0)  # the console's and /memory search's


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("lang", "topic", "other", "query"), TOPIC, ids=[t[0] for t in TOPIC])
def test_a_hit_found_only_through_the_line_it_answered_is_marked_via_context(core, path, lang, topic, other, query):
    """Searching "marathon" lists 「My sister Anna lives in Toronto」 only because it answered "How was the
    marathon training?": that hit says ``via_context``, the memories that say marathon do not — the mark a
    bulk forget by topic needs to leave it out (it was forgotten with the marathon memories)."""
    with core.batch():
        said = [core.add(A, core.new(A, t, created_at=T0), said_at=T0).memory.id for t in topic]
        anna = core.add(A, core.new(A, other[0], context=other[1], created_at=T0), said_at=T0).memory.id
    params = replace(SEARCH, exact_max=0) if path == "index" else SEARCH
    if path == "index":
        core.maintain()
    hits = {h.memory.id: h for h in core.recall(A, [query], params=params)}
    assert set(hits) == {*said, anna}, [h.memory.text for h in hits.values()]
    assert hits[anna].via_context and "bm25" in hits[anna].ranks
    assert not any(hits[i].via_context for i in said)


def test_via_context_is_decided_by_the_lists_that_ranked_the_hit():
    """``found_via_context``: the query lines of the BM25 lists that ranked the hit have words in its context
    and none in its text, whatever the other channels (a vector rank at the floor lowered once a word matched
    says little); no BM25 rank, a word of those lines in the text, or no context is not via context."""
    from memory.recall import found_via_context

    m = Memory(id="m1", namespace=A, text="My sister Anna lives in Toronto", context="Mochi: How was the marathon training?")
    searched = {"bm25": "marathon", "bm25~1": "what about my sister"}
    for ranks in ({"bm25": 2}, {"bm25": 2, "vector": 5}, {"bm25": 1, "time": 1, "assoc": 3}):
        assert found_via_context(m, ranks, searched), ranks
    for ranks in ({"vector": 1}, {"assoc": 1}, {"bm25~1": 3}, {"bm25": 2, "bm25~1": 3}, {}):
        assert not found_via_context(m, ranks, searched), ranks
    assert not found_via_context(replace(m, context=""), {"bm25": 2}, searched)
    assert not found_via_context(replace(m, text="Anna ran the marathon in Toronto"), {"bm25": 2}, searched)



#: (lang, name, a companion's line whose naive cut starts after an abbreviation or mid-word, what is kept)
CLIPPED = [
    ("en", "Mochi", "I saw the photos from St. Petersburg with Dr. Li and Mr. Brown, e.g. the one at the Hermitage. "
                    "Did you get to the ballet?", "Did you get to the ballet?"),
    ("en", "Mochi", "You told me about the trip to St. Petersburg. Did you meet Dr. Li, e.g. at the clinic, "
                    "or only Mr. Brown?", "Did you meet Dr. Li, e.g. at the clinic, or only Mr. Brown?"),
    ("zh", "小莫", "上次你说想去圣彼得堡看芭蕾，还说要带上你妹妹和她的同学一起去，说了好久呢。后来去成了吗？人多不多？",
     "后来去成了吗？人多不多？"),
]


@pytest.mark.parametrize("lang, name, line, kept", CLIPPED, ids=[c[0] + str(i) for i, c in enumerate(CLIPPED)])
def test_a_clipped_context_starts_at_a_real_sentence_not_after_st_or_dr(lang, name, line, kept):
    """A companion's line too long for the context is cut at the start of a sentence — never after "St.",
    "Dr.", "Mr." or "e.g." (the cut fell at "St." and kept "Petersburg…"), nor mid-word — keeping the end of
    the line that fits: the question; answered_line cuts a line longer than CONTEXT_CHARS the same way."""
    from memory.types import clip_line

    room = len(name) + 2 + len(kept) + 12  # a few characters more than the kept sentences, less than one more
    assert clip_line(f"{name}: {line}", room, name) == f"{name}: {kept}"
    long = line * (CONTEXT_CHARS // len(line) + 1)
    said = ChatLine(id=1, role="bot", text=long, at=T0, sender_id="bot", sender_name=name)
    context = answered_line(said, T0 + timedelta(minutes=1), ChatRef("tg", ChatKind.PRIVATE, "1001"))
    assert len(context) <= CONTEXT_CHARS and context.endswith(kept)
    text = context.removeprefix(f"{name}: ")
    assert any(long[i:] == text for i in sentence_starts(long)), text


@pytest.mark.parametrize("lang, first, second, kept", [
    ("en", "Mochi: How was the pride parade?",
     "Mochi: I read about the new exhibition at the museum on St. Mark's Square that Dr. Rossi curated, the one "
     "with the glass from Murano. Did you go on Sunday?", "Mochi: Did you go on Sunday?"),
    ("zh", "小莫: 游行好玩吗？",
     "小莫: 我看到圣马可广场那家博物馆的新展览了，是罗西博士策划的，展的都是穆拉诺岛的玻璃，听说排队要两个小时，"
     "门口还有人卖冰淇淋和明信片，晚上八点以后人会少一些，很多人都说值得专门去一趟，尤其是二楼那个玻璃吊灯的展厅。你周日去了吗？",
     "小莫: 你周日去了吗？"),
])
def test_joined_contexts_are_each_cut_at_a_sentence_start(sqlite_core, lang, first, second, kept):
    """The same answer to two lines keeps both, each cut to half the room at the start of a sentence of it
    (not after "St." or "Dr.", not mid-word)."""
    core = sqlite_core
    m = core.add(A, core.new(A, "Yes! It was so much fun.", context=first), said_at=T0).memory
    again = core.add(A, core.new(A, "Yes! It was so much fun.", context=second), said_at=T0 + timedelta(hours=1))
    assert again.memory.id == m.id and core.store.get(A, m.id).context == f"{first} / {kept}"
