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
