"""The lifecycle through the turn pipeline: forget sticks across a full replay of
the same transcript, edits update what a message taught, the tenant's time zone
and the query's mood reach capture and recall, and the LLM extractor runs after
the reply (the real openai client against the fake server)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text as sql

from gateway.config import load_settings
from bridges.contract import InboundMessage
from gateway.pipeline import Pipeline
from memory.scoring import score as default_score
from memory.types import ChatKind, Namespace

NS = Namespace("default", "tg:1001")
T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=5)


def msg(text, mid, *, at=None, **kw) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id="1001", sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id="1001", text=text, timestamp=at or T0, **kw)


TRANSCRIPT = [
    msg("我叫阿杰", "1", at=T0),
    msg("我的秘密是我怕黑", "2", at=T0 + timedelta(minutes=1)),
    msg("我养了一只叫煤球的黑猫", "3", at=T0 + timedelta(minutes=2)),
    msg("我的猫叫雪球", "4", at=T0 + timedelta(minutes=3)),
    msg("你还记得我的猫吗？", "5", at=T0 + timedelta(minutes=4)),
]


@pytest.fixture
def pipeline(sqlite_core):
    return Pipeline(load_settings(), sqlite_core)


def texts(core) -> list[str]:
    return sorted(m.text for m in core.list(NS))


async def test_forget_sticks_across_a_full_replay_of_the_transcript(pipeline):
    """Forgotten memories (the secret, and the cat with its history) are not
    re-created by replaying the transcript — neither as duplicates nor after the
    delivery records are gone — their chat lines stay out of the tail, and saying
    it again later creates a new memory."""
    core = pipeline.core
    for m in TRANSCRIPT:
        await pipeline.handle("default", m)
    assert texts(core) == sorted(["我叫阿杰", "我的秘密是我怕黑", "我的猫叫雪球"])
    by_text = {m.text: m.id for m in core.list(NS)}
    core.forget(NS, by_text["我的秘密是我怕黑"], actor="tg:1001")
    core.forget(NS, by_text["我的猫叫雪球"], actor="tg:1001")
    assert texts(core) == ["我叫阿杰"]

    replay = [await pipeline.handle("default", m) for m in TRANSCRIPT]
    assert all(r.duplicate for r in replay) and texts(core) == ["我叫阿杰"]

    with core.store.engine.begin() as conn:  # the delivery records are lost (pruned, restored backup…)
        conn.execute(sql("DELETE FROM deliveries"))
    replay = [await pipeline.handle("default", m) for m in TRANSCRIPT]
    assert not any(r.duplicate for r in replay)
    assert texts(core) == ["我叫阿杰"]
    assert [r.captured for r in replay] == [[by_text["我叫阿杰"]], [], [], [], []]
    tail = [line.text for line in core.store.chat_tail("default", TRANSCRIPT[0].chat, 50)]
    assert not any("怕黑" in t or "雪球" in t or "煤球" in t for t in tail)

    later = await pipeline.handle("default", msg("我的秘密是我怕黑", "99", at=datetime.now(timezone.utc)))
    assert len(later.captured) == 1 and later.captured[0] != by_text["我的秘密是我怕黑"]
    assert "我的秘密是我怕黑" in texts(core)


async def test_edited_message_updates_its_memory_once(pipeline):
    """An edit updates the memory its message taught (same id, version 2); the same
    edit delivered twice is processed once; an edit of an unrelated message id
    leaves it alone."""
    core = pipeline.core
    first = await pipeline.handle("default", msg("我住在北京", "10"))
    mid = first.captured[0]
    edit = msg("我住在上海", "10", is_edit=True)
    r = await pipeline.handle("default", edit)
    again = await pipeline.handle("default", edit)
    assert r.captured == [mid] and again.duplicate
    live = core.get(NS, mid)
    assert live.text == "我住在上海" and live.version == 2
    assert [v.text for v in core.history(NS, mid)] == ["我住在北京", "我住在上海"]
    await pipeline.handle("default", msg("我喜欢猫", "11", is_edit=True))
    assert core.get(NS, mid).text == "我住在上海" and core.store.count(NS) == 2


@pytest.mark.parametrize("said, edited", [("我最喜欢的运动是游泳", "我最喜欢的运动是攀岩"),
                                          ("My favourite sport is swimming 🏊", "My favourite sport is climbing 🧗")])
async def test_an_edit_right_after_its_message_is_what_stays(pipeline, said, edited):
    """A message and its edit back to back (Telegram delivers both within a second) while the message's
    capture still waits after its answer: the edit is what the person said — the original's capture must not
    land after the edit and supersede it with the old words (zh and en)."""
    core = pipeline.core
    await pipeline.handle("default", msg(said, "20"), background_capture=True)
    await pipeline.handle("default", msg(edited, "20", is_edit=True), background_capture=True)
    assert await pipeline.drain(timeout=30)
    assert texts(core) == [edited]
    assert [line.text for line in core.store.chat_tail("default", msg(said, "20").chat, 5)
            if line.role == "user"] == [edited]


async def test_tenant_time_zone_resolves_relative_dates(sqlite_core, tmp_path, monkeypatch):
    """"明天" is resolved in the tenant's zone: at 2026-11-30 17:00 UTC it is
    2026-12-02 for a Shanghai tenant and 2026-12-01 for a New York one."""
    cfg = tmp_path / "huiyi.toml"
    cfg.write_text('[tenants.ny]\ntz = "America/New_York"\n[tenants.sh]\ntz = "Asia/Shanghai"\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(cfg))
    p = Pipeline(load_settings(), sqlite_core)
    at = datetime(2026, 11, 30, 17, 0, tzinfo=timezone.utc)
    await p.handle("ny", msg("我明天要面试", "1", at=at))
    await p.handle("sh", msg("我明天要面试", "1", at=at))
    assert [m.text for m in sqlite_core.list(Namespace("ny", "tg:1001"))] == ["我明天要面试（2026-12-01）"]
    assert [m.text for m in sqlite_core.list(Namespace("sh", "tg:1001"))] == ["我明天要面试（2026-12-02）"]


async def test_query_valence_reaches_recall(pipeline):
    """The latest message's valence (memory.emotion.analyse) is passed to the scorer."""
    seen: list[float] = []

    def scorer(rrf, memory, now, query_valence):
        seen.append(query_valence)
        return default_score(rrf, memory, now, query_valence)

    pipeline.core.scorer = scorer
    await pipeline.handle("default", msg("我养了一只叫煤球的黑猫", "1"))
    await pipeline.handle("default", msg("煤球走丢了，我好难过", "2", at=T0 + timedelta(minutes=1)))
    assert seen and all(v < -0.3 for v in seen)


@pytest.fixture
def pipeline_llm(sqlite_core, llm, monkeypatch):
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    return Pipeline(load_settings(), sqlite_core)


async def test_llm_extraction_runs_after_the_reply(pipeline_llm, llm):
    """With a chat model the reply is asked for first, then the facts; the model's
    keys and emotion are stored."""
    facts = {"facts": [{"text": "我养了一只叫煤球的黑猫", "category": "relationship", "key": "pet.cat.name",
                        "importance": 0.9, "valence": 0.5, "arousal": 0.3, "emotion": "love", "event_time": None}]}
    llm.enqueue("煤球一定很可爱！")
    llm.enqueue_extraction(json.dumps(facts, ensure_ascii=False))
    r = await pipeline_llm.handle("default", msg("我家有只黑猫，名字叫煤球，超可爱", "1"))
    assert r.reply == "煤球一定很可爱！"
    assert "<message>" not in llm.requests[0]["messages"][-1]["content"]
    assert "<message>" in llm.extraction_requests[0]["messages"][-1]["content"]
    m = pipeline_llm.core.get(NS, r.captured[0])
    assert (m.key, m.emotion, m.importance, m.text) == ("pet.cat.name", "love", 0.9, "我养了一只叫煤球的黑猫")


async def test_malformed_llm_extraction_still_captures(pipeline_llm, llm):
    """A broken extraction answer never loses the message: the heuristic stores it."""
    llm.enqueue("好的")
    llm.enqueue_extraction('{"facts": [{"text": "我叫\\阿杰"')
    r = await pipeline_llm.handle("default", msg("我叫阿杰", "1"))
    assert r.reply == "好的" and len(r.captured) == 1
    assert pipeline_llm.core.get(NS, r.captured[0]).key == "profile.name"


@pytest.mark.parametrize("said, asked, day", [
    ("周五生日", "我什么时候生日？", "生日"), ("Birthday on Friday.", "When is my birthday?", "Birthday"),
])
async def test_a_subjectless_statement_in_private_is_recalled_later(pipeline, said, asked, day):
    """A private 「周五生日」 is the speaker's birthday (dated in the tenant's zone) and
    「我什么时候生日？」 recalls it."""
    at = datetime(2026, 11, 30, 17, 0, tzinfo=timezone.utc)  # Tuesday 2026-12-01 01:00 in Shanghai
    first = await pipeline.handle("default", msg(said, "40", at=at))
    (mid,) = first.captured
    memory = pipeline.core.get(NS, mid)
    assert memory.key == "profile.birthday" and day in memory.text and "2026-12-04" in memory.text
    later = await pipeline.handle("default", msg(asked, "41", at=at + timedelta(hours=1)))
    assert later.captured == [] and mid in later.recalled


async def test_subjectless_statements_in_groups_count_only_when_the_bot_is_addressed(sqlite_core, tmp_path, monkeypatch):
    """In a group that captures every message, 「上周用 docker 部署了个人博客」 not
    addressed to the bot is nobody's statement; addressed (a mention), it is the speaker's."""
    cfg = tmp_path / "huiyi.toml"
    cfg.write_text('[tenants.default]\ncapture_all_group_messages = true\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(cfg))
    p = Pipeline(load_settings(), sqlite_core)
    def said(text, mid, **kw):  # Tuesday 2026-12-01 01:00 in Shanghai: last week began on 2026-11-23
        return msg(text, mid, at=datetime(2026, 11, 30, 17, 0, tzinfo=timezone.utc), **kw).model_copy(update={"chat_kind": ChatKind.GROUP, "chat_id": "-100500"})

    text = "上周用 docker 部署了个人博客"
    quiet = [await p.handle("default", said(t, f"5{i}")) for i, t in enumerate([text, "Went hiking in the Alps last week"])]
    assert [r.captured for r in quiet] == [[], []] and sqlite_core.list(NS) == []
    loud = [await p.handle("default", said(t, f"6{i}", mentions_bot=True))
            for i, t in enumerate([text, "Went hiking in the Alps last week"])]
    assert [len(r.captured) for r in loud] == [1, 1]
    assert sorted(m.text for m in sqlite_core.list(NS)) == \
        ["Went hiking in the Alps last week (2026-11-23~2026-11-29)", text + "（2026-11-23~2026-11-29）"]


async def test_the_gateways_own_words_sent_back_store_nothing(sqlite_core, tmp_path, monkeypatch):
    """The tenant's persona prompt pasted back, a recollection with its [src:…]
    markers and the template's lines echoed by a client store nothing; the
    person's own sentence in the same message does."""
    persona = "I am Momo, a gentle friend with a good memory. My favourite drink is oolong tea and I live in Hangzhou."
    cfg = tmp_path / "huiyi.toml"
    cfg.write_text(f'[tenants.default]\npersona = "{persona}"\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(cfg))
    p = Pipeline(load_settings(), sqlite_core)
    echoes = [persona, "（回忆）你之前说过我喜欢爵士乐[src:abcdef123456]",
              "你记得关于阿杰的这些事：\n- 23个月前，阿杰说过：「我喜欢爵士乐」",
              "What you remember about 阿杰:\n- yesterday, 阿杰 said: \"I love jazz\""]
    results = [await p.handle("default", msg(t, f"7{i}")) for i, t in enumerate(echoes)]
    assert [r.captured for r in results] == [[], [], [], []] and sqlite_core.list(NS) == []
    mine = await p.handle("default", msg(persona + "\nI live in Chengdu.", "79"))
    assert [sqlite_core.get(NS, i).text for i in mine.captured] == ["I live in Chengdu."]


@pytest.mark.parametrize("origin, text", [
    ({"forward_origin": {"type": "user", "date": 1764500000, "sender_user": {"id": 3003, "is_bot": False,
                                                                             "first_name": "周"}}}, "我叫小周。"),
    ({"forward_from": {"id": 3003, "is_bot": False, "first_name": "Zhou"}, "forward_date": 1764500000},
     "My name is Zhou. I love jazz."),
    ({"forward_origin": {"type": "hidden_user", "date": 1764500000, "sender_user_name": "小周"}}, "周五生日"),
])
async def test_forwarded_text_is_not_the_forwarders_statement(pipeline, origin, text):
    """A forwarded message teaches nothing about the forwarder: no memory (their own
    name stays), and the chat log keeps the line marked as forwarded."""
    from bridges.telegram.parse import parse_update

    core = pipeline.core
    ns = Namespace("default", "tg:3002")
    own = {"message_id": 1, "date": 1764500000, "text": "我叫阿杰。", "chat": {"id": 3002, "type": "private"},
           "from": {"id": 3002, "is_bot": False, "first_name": "A", "language_code": "zh-hans"}}
    await pipeline.handle("default", parse_update(own))
    fwd = parse_update({**own, "message_id": 2, "date": 1764500100, "text": text, **origin})
    res = await pipeline.handle("default", fwd)
    assert res.captured == [] and [m.text for m in core.list(ns)] == ["我叫阿杰。"]
    tail = [line.text for line in core.store.chat_tail("default", fwd.chat, 10) if line.role == "user"]
    assert tail[:1] == ["我叫阿杰。"] and tail[1] == "［转发］" + text


# -- withdrawals (issue 12, item 4) ------------------------------------------------------

QQ = Namespace("default", "qq:20001")


def qq_msg(text, mid, *, group=False, at=None):
    from bridges.qq.parse import parse_event

    event = {"post_type": "message", "message_type": "group" if group else "private", "sub_type": "friend",
             "time": int((at or T0).timestamp()), "self_id": 10000, "user_id": 20001, "message_id": mid,
             "message": ([{"type": "at", "data": {"qq": "10000"}}] if group else []) + [{"type": "text", "data": {"text": text}}],
             "sender": {"user_id": 20001, "nickname": "阿杰"}}
    if group:
        event["group_id"] = 30001
    return parse_event(event)


def recall(mid, *, group=False):
    from bridges.qq.parse import parse_recall

    notice = {"post_type": "notice", "notice_type": "group_recall" if group else "friend_recall", "time": 1764500200,
              "self_id": 10000, "user_id": 20001, "message_id": mid}
    if group:
        notice.update(group_id=30001, operator_id=20009)
    return parse_recall(notice)


@pytest.mark.parametrize("text, query", [("我对芒果过敏。", "我对什么过敏？"), ("I'm allergic to mangoes.", "What am I allergic to?")])
@pytest.mark.parametrize("group", [False, True])
async def test_a_withdrawn_message_unteaches_what_it_taught(pipeline, text, query, group):
    """friend_recall / group_recall of 9002 retracts its memory, takes its line out of
    the tail and out of recall; a second notice changes nothing; another message's
    memory stays."""
    core = pipeline.core
    await pipeline.handle("default", qq_msg("我叫阿杰。", 9001, group=group))
    taught = await pipeline.handle("default", qq_msg(text, 9002, group=group, at=T0 + timedelta(minutes=1)))
    (mid,) = taught.captured
    assert await pipeline.withdraw("default", recall(9002, group=group)) == [mid]
    assert await pipeline.withdraw("default", recall(9002, group=group)) == []
    assert [m.text for m in core.list(QQ)] == ["我叫阿杰。"]
    later = await pipeline.handle("default", qq_msg(query, 9003, group=group, at=T0 + timedelta(minutes=2)))
    assert mid not in later.recalled
    from memory.types import ChatRef

    tail = [line.text for line in core.store.chat_tail("default", ChatRef.parse(taught.chat), 20)]
    assert text not in tail and "我叫阿杰。" in tail
    assert core.index.ids(QQ) == {m.id for m in core.list(QQ)}


async def test_a_linked_persons_withdrawal_takes_its_line_out_too(pipeline):
    """A QQ identity linked to a person (``person:…``): the withdrawn message's memory goes, its chat-log line
    leaves the tail, and a message arriving after its withdrawal is not logged (the line was kept before: the
    redaction looked for a platform subject)."""
    from memory.admin import Authority, link

    core = pipeline.core
    person = link(core, Authority(actor="test", tenant="default"), "default", ["qq:20001", "tg:1001"]).person
    taught = await pipeline.handle("default", qq_msg("我对芒果过敏。", 9201))
    (mid,) = taught.captured
    assert await pipeline.withdraw("default", recall(9201)) == [mid]
    assert core.list(person) == []
    await pipeline.withdraw("default", recall(9202))
    await pipeline.handle("default", qq_msg("I'm allergic to mangoes.", 9202))
    tail = [line.text for line in core.store.chat_tail("default", qq_msg("x", 1).chat, 20)]
    assert "我对芒果过敏。" not in tail and "I'm allergic to mangoes." not in tail and core.list(person) == []


async def test_a_withdrawal_before_the_capture_ran_stores_nothing(pipeline):
    """The notice arrives while the capture is still queued (background capture), or
    even before the message itself: nothing is learned and nothing is logged."""
    core = pipeline.core
    queued = await pipeline.handle("default", qq_msg("我对芒果过敏。", 9102), background_capture=True)
    assert queued.capture_pending
    await pipeline.withdraw("default", recall(9102))
    await pipeline.drain()
    assert core.list(QQ) == []
    await pipeline.withdraw("default", recall(9103))  # the notice overtakes its message
    late = await pipeline.handle("default", qq_msg("I'm allergic to mangoes.", 9103))
    assert late.captured == [] and core.list(QQ) == []
    tail = [line.text for line in core.store.chat_tail("default", qq_msg("x", 1).chat, 20)]
    assert "我对芒果过敏。" not in tail and "I'm allergic to mangoes." not in tail
