"""bench groups: the generator's labels, the real parsers and turn on a tiny sample
of the four Chinese sets (tests/data/groups, never ../shared/data), and the
confusion and breach counts — zero on the sample, one for each planted fault."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench import groups
from bench.groups import BREACH, CONFUSIONS, GroupPlan, Turn
from bridges.qq.parse import parse_event
from bridges.telegram.parse import parse_update
from evals.recall import Probe
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.types import Namespace

DATA = Path(__file__).resolve().parents[1] / "data" / "groups"
LAYOUT = (GroupPlan("qq", "周末篮球群", 4, two_bots=True), GroupPlan("tg", "城市漫步", 4, two_bots=True))


def test_absent_data_is_said_and_exits_2(tmp_path, capsys):
    """Without the sets the bench stops with a message naming what it needs."""
    assert groups.run(tmp_path / "nowhere") == 2
    err = capsys.readouterr().err
    assert "dulemon" in err and "HUIYI_EVAL_DATA_DIR" in err


def test_the_world_is_deterministic_and_its_payloads_parse():
    """Same seed, same world; every person's payload parses into that person's message in the
    right chat, @小忆 is a mention of the bot, a quote keeps the speaker, the bot's own line is dropped."""
    sources = groups.load(DATA)
    a, b = groups.build(sources, layout=LAYOUT), groups.build(sources, layout=LAYOUT)
    assert json.dumps([e.deliveries for e in a.events]) == json.dumps([e.deliveries for e in b.events])
    assert {len(g.members) for g in a.groups.values()} == {4} and all(len(g.bots) == 2 for g in a.groups.values())
    kinds = {e.kind for e in a.events}
    assert {"fact", "about", "bot", "quote", "question", "list", "private", "chat"} <= kinds
    seen = 0
    for ev in a.events:
        for tenant, payload in ev.deliveries:
            msg = parse_event(payload) if ev.platform == "qq" else parse_update(
                payload, bot_id=str(groups.TG_BOTS[tenant.split("_")[1]]), bot_username=groups.TG_USERNAMES[tenant.split("_")[1]])
            if ev.sender == f"bot:{tenant.split('_')[1]}":
                assert msg is None  # its own line (OneBot message_sent)
                continue
            assert msg is not None
            seen += 1
            if not ev.sender.startswith("bot:"):
                assert msg.sender_id == str(a.members[ev.sender].uid)
            assert msg.chat.is_group == (ev.chat != "private")
            if ev.kind in ("fact", "question") and ev.chat != "private":
                assert msg.mentions_bot == tenant.endswith("_xiaoyi") and ev.text in msg.text
            if ev.kind == "quote":
                assert msg.reply_to is not None and msg.reply_to.message_id != msg.message_id
    assert seen > 50
    for q in (e.question for e in a.events if e.question):
        assert (q.member, q.fact) in a.told and q.answerable == (q.chat in ("private", a.told[(q.member, q.fact)][0]))


async def test_counts_on_the_sample_and_each_planted_fault_is_counted(sqlite_core):
    """Through the real parsers and turn the sample has questions, hits, and no confusion or
    breach; a memory planted in B's namespace from A's line, one from a bot's line, a fact of B
    recalled for A and a private memory recalled in the group are each counted once."""
    world = groups.build(groups.load(DATA), layout=LAYOUT)
    pipeline = Pipeline(load_settings(tenants=groups.tenants_settings(world)), Probe(sqlite_core))
    obs = await groups.drive(world, pipeline)
    report = groups.score(world, obs)
    assert report.turns > 50 and report.ignored.get("bot", 0) >= 2
    assert sum(f["answerable"] for f in report.members.values()) > 0
    assert sum(f["probes"] for f in report.members.values()) > 0
    assert sum(f["hits@6"] for f in report.members.values()) > 0
    assert [(f.kind, f.why) for f in report.findings] == []

    # plant: B's namespace holds a memory captured from A's fact message, and one from a bot's line
    a, b = (world.members[k] for k in world.groups["g1"].members[:2])
    tenant = "qq_xiaoyi"
    a_fact = next(ev for ev in world.events if ev.sender == a.key and ev.kind == "fact" and ev.chat == "g1")
    bot_line = next(ev for ev in world.events if ev.sender == "bot:ahua" and ev.chat == "g1")
    ns_b = Namespace(tenant, b.subject)
    core = pipeline.core
    core.add(ns_b, core.new(ns_b, a_fact.text + "呀", source_message_id=str(a_fact.mid)))
    core.add(ns_b, core.new(ns_b, bot_line.text + "呢", source_message_id=str(bot_line.mid)))
    obs.memories[tenant][b.subject] = core.list(ns_b, limit=100)
    # plant: B's group question recalls A's fact memory (a confusion) and B's private memory (a breach)
    question = next(ev for ev in world.events if ev.sender == b.key and ev.kind == "question" and ev.chat == "g1")
    private = next(m for m in obs.memories[tenant][b.subject] if m.origin and not m.origin.is_group)
    recalled = [("planted-a", str(ns_b), "qq:group:700000", a_fact.text, str(a_fact.mid)),
                (private.id, str(ns_b), private.origin.key, private.text, private.source_message_id)]
    obs.turns.append(Turn(question, tenant, str(ns_b), "qq:group:700000", recalled, None))
    planted = groups.score(world, obs)
    assert planted.count(CONFUSIONS[1]) == 1  # A's line stored as B's
    assert planted.count(CONFUSIONS[2]) == 1  # a bot's line stored as a member's
    assert planted.count(CONFUSIONS[0]) == 1  # a fact of A recalled for B
    assert planted.count(BREACH) == 1 and planted.breaches == 1
    assert planted.confusions == 3
    text = "\n".join(groups.tables(world, planted))
    assert "disclosure breach" in text and "captured from bot:ahua" in text


def test_holds_reads_a_fact_inside_other_words():
    """A fact's content is found inside a longer text, whole or by most of its bigrams; a short one never."""
    core = groups._core("我养猫，会在网上发它的照片")
    assert groups.holds("小王说：养猫，会在网上发它的照片！", core)
    assert groups.holds("养了猫，会在网上发它的照片", core)
    assert not groups.holds("我喜欢运动", core)
    assert not groups.holds("我是男性", groups._core("我是"))


def test_a_group_outside_4_to_8_is_refused():
    """The layout's groups have 4-8 members; another size is a clear error."""
    with pytest.raises(ValueError, match="4-8"):
        groups.build(groups.load(DATA), layout=(dataclasses.replace(LAYOUT[0], size=9),))
