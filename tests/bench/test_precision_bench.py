"""``python -m bench precision``: both sides of the real turn — the evidence among what it injects, the
share of unrelated lines that inject the person's memories, what questions and chit-chat write —
scored right on a tiny constructed set (tests/data/precision/tiny: no big dataset)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import precision  # noqa: E402
from evals.recall import Doc, Query, RecallRun, Suite, metrics  # noqa: E402

TINY = ROOT / "tests" / "data" / "precision" / "tiny"


def test_labelling_rule_shares_a_content_word_in_both_languages():
    """A line relates to a memory when they share a content word after jieba and the stop list; function
    words, chat words and fillers never make a line related."""
    assert precision.related("团子今天又挑食了", "我养了一只橘猫，叫团子。")
    assert not precision.related("好冷啊，冻死了", "我养了一只橘猫，叫团子。")
    assert not precision.related("哈哈哈我也觉得", "我觉得博物馆很值得去。")
    assert precision.related("my puppy chewed my shoes", "I adopted a puppy named Biscuit")
    assert not precision.related("so cold today brrr", "I adopted a puppy named Biscuit last week.")
    assert not precision.related("lol same", "I really like the same coffee shop")
    assert precision.content_words("嗯，我知道了。") == frozenset()


def test_negatives_score_counts_turns_that_inject_an_unrelated_memory():
    """Share of negative turns that inject a memory unrelated to the line, beside the share that inject
    anything and the mean injected: a turn injecting a related memory only is not counted."""
    got = precision.score_negatives(
        ["好冷啊，冻死了", "团子今天又挑食了", "so cold today", "how's Biscuit?"],
        [["我养了一只橘猫，叫团子。"], ["我养了一只橘猫，叫团子。"], [], ["I adopted a puppy named Biscuit"]])
    assert got == {"n": 4, "unrelated": 0.25, "any": 0.75, "injected": 0.75}


def test_any_at_injected_scores_what_the_turn_put_into_the_prompt():
    """any@injected reads the turn's injected list, not its ranking: the evidence ranked first but not
    injected scores 1 at @5 and 0 injected."""
    suite = Suite("s", "t", "k", {"p": (Doc("a", "x"), Doc("b", "y"))},
                  (Query(("p",), ("q",), frozenset({"a"})), Query(("p",), ("q2",), frozenset({"b"}))))

    class Turn:
        def __init__(self, n):
            self.recalled = ["m"] * n

    run = RecallRun([["a", "b"], ["a", "b"]], [0.0, 0.0], [(Turn(0),), (Turn(2),)], [[], ["a", "b"]])
    m = metrics(suite, run, [5])
    assert m["any@5"] == 1.0 and m["any@injected"] == 0.5 and m["injected"] == 1.0


def test_spurious_conflicts_are_acknowledgements_or_other_topics():
    """A recorded conflict is spurious when a side is an acknowledgement, when both sides hold topic
    slots that differ, or when they share no content word; same slot or a shared word may be real."""
    assert precision.spurious("嗯，我知道了。", "我在杭州的一家银行上班。") == "acknowledgement"
    assert precision.spurious("ok thanks", "I work as a nurse") == "acknowledgement"
    assert precision.spurious("我在上海读研", "我在南京读研", "profile.school", "profile.school") == ""
    assert precision.spurious("我在上海上班", "我喜欢爵士乐", "profile.job", "preference.music") == "slot"
    assert precision.spurious("I love hiking", "I hate hiking") == ""
    assert precision.spurious("我现在感觉好多了。", "我很迷茫，不知道该朝着什么方向发展。") == "topic"


def test_knob_parses_recall_k_and_recall_params_fields():
    """--knob takes recall_k or a RecallParams number/boolean field (or several of one type joined by +),
    each value of the field's type; anything else is refused with the reason."""
    assert precision.parse_knob(None) == ("", [None])
    assert precision.parse_knob("vector_floor=0.84,0.9") == ("vector_floor", [0.84, 0.9])
    assert precision.parse_knob("recall_k=3,6") == ("recall_k", [3, 6])
    assert precision.parse_knob("vector_floor+matched_vector_floor=0.9") == ("vector_floor+matched_vector_floor", [0.9])
    for bad, why in (("nope=1", "neither"), ("channels=bm25", "not a number"), ("recall_k=x", "integer"),
                     ("vector_floor=", "no value"), ("vector_floor+recall_k=1", "differ in type")):
        with pytest.raises(ValueError, match=why):
            precision.parse_knob(bad)


def test_missing_data_is_said_not_raised(tmp_path):
    """Without the evaluation sets the bench says which files are missing and where, and returns None."""
    said: list[str] = []
    assert precision.run(tmp_path / "nowhere", tmp_path, emit=said.append) is None
    assert "HUIYI_EVAL_DATA_DIR" in said[0] and "locomo10.json" in said[0] and "memorybank" in said[0]


def test_tiny_set_end_to_end_scores_a_known_injection(tmp_path, embedder):
    """One Chinese person and two English ones (a LoCoMo conversation), unrelated lines: with every
    memory past the vector floor (-1) each negative turn injects all the person's memories (unrelated:
    share 1) and the question's evidence is injected; with the floor at 1 and no character shared with a
    memory or its context, the unrelated lines inject nothing (share 0). The capture side counts every
    tag and probing question; the operating point is picked on dev."""
    out: list[str] = []
    work = tmp_path / "w"
    work.mkdir()
    points = precision.run(TINY, work, knob="vector_floor=-1.0,1.0", per_person=2, embedder=embedder,
                           labels=TINY / "labels.jsonl", smalltalk=TINY / "smalltalk_en.txt",
                           questions=TINY / "questions.jsonl", emit=out.append)
    assert points is not None
    at = {(p.value, p.split): p for p in points}
    everything, nothing = at[(-1.0, "all")], at[(1.0, "all")]
    assert everything.negatives["zh"]["n"] == 2 and everything.negatives["en"]["n"] == 2  # Alice and Bob
    assert everything.negatives["zh"] == {"n": 2, "unrelated": 1.0, "any": 1.0, "injected": 2.0}
    assert everything.negatives["en"]["unrelated"] == 1.0 and everything.negatives["en"]["injected"] >= 1
    assert everything.positives["memorybank-cn"]["any@injected"] == 1.0
    assert everything.positives["memorybank-cn"]["n"] == 2
    assert nothing.negatives["zh"] == {"n": 2, "unrelated": 0.0, "any": 0.0, "injected": 0.0}
    assert nothing.negatives["en"]["unrelated"] == 0.0
    text = "\n".join(out)
    assert "operating point picked on dev: vector_floor=" in text
    assert "tag questions zh" in text and "tag questions en" in text and "probing questions zh" in text
    assert "chit-chat zh" in text and "chit-chat en" in text


def test_pr_curve_orders_each_split_from_strict_to_loose_with_recall_and_precision():
    """The decision's precision/recall curve: one row per value and split, the stricter setting (fewer memories a
    negative turn) first; recall is the mean any@injected, precision 1 − the share of negative turns injecting an
    unrelated memory (zh and en negatives weighted by turns)."""
    def point(value, split, found, unrelated_zh, unrelated_en, inj):
        return precision.Point(value, split,
                               {"locomo-speaker": {"n": 10, "any@injected": found},
                                "memorybank-cn": {"n": 5, "any@injected": found}},
                               {"zh": {"n": 30, "unrelated": unrelated_zh, "any": unrelated_zh, "injected": inj},
                                "en": {"n": 10, "unrelated": unrelated_en, "any": unrelated_en, "injected": inj}})

    points = [point(2.5, "dev", 0.9, 0.2, 0.1, 1.5), point(5.0, "dev", 0.7, 0.0, 0.0, 0.2),
              point(2.5, "held-out", 0.8, 0.4, 0.0, 1.1)]
    text = precision.pr_curve(points, "standout")
    rows = [line.split() for line in text.splitlines()[3:]]
    assert [(r[0], r[1]) for r in rows] == [("dev", "5.0"), ("dev", "2.5"), ("held-out", "2.5")]
    assert rows[0][2:4] == ["0.700", "1.000"]
    assert rows[1][2:4] == ["0.900", "0.825"]  # 1 − (30·0.2 + 10·0.1) / 40
    assert rows[2][2:4] == ["0.800", "0.700"]
