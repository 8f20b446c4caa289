"""The two ways recall runs its channels: the exact in-process search of a small
namespace and the LanceDB index of a large one. Same memories, same fusion;
vectors always belong to the text they embed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memory.recall import EXACT_MAX, RecallParams, bm25_confidence, bm25_scores
from memory.types import Memory, Namespace

FACTS = ["我养了一只叫煤球的黑猫", "我喜欢喝美式咖啡", "I love hiking in the Alps", "我的WiFi密码忘了",
         "My sister lives in Paris 🗼", "我在上海做程序员", "我對花生過敏", "週末我常去爬山",
         "明天要去面试了有点紧张", "我最近在学吉他 🎸", "我女朋友叫小丽", "I work as a nurse in Leeds"]
QUERIES = ["你还记得我的猫吗？", "咖啡", "hiking", "wifi 密码", "Where does my sister live?", "上海",
           "花生过敏", "爬山", "面试", "吉他", "小丽是谁", "nurse", "程序員", "煤球 🐱"]


def _fill(core, ns: Namespace) -> dict[str, str]:
    """FACTS in ``ns``, in one index write (an add reads nothing of the index; the tests recall afterwards)."""
    with core.batch():
        return {core.add(ns, core.new(ns, t)).memory.id: t for t in FACTS}


def test_exact_and_index_paths_agree_on_the_best_memory(core):
    """For zh / en / mixed / traditional / emoji queries both paths return the same
    memories, and the same one first (per-namespace BM25 statistics may reorder the tail)."""
    ns = Namespace("default", "tg:42")
    other = Namespace("default", "tg:43")
    _fill(core, ns)
    _fill(core, other)  # the index holds another person's copy of every text
    for q in QUERIES:
        exact = core.recall(ns, [q], params=RecallParams(k=5, exact_max=EXACT_MAX))
        indexed = core.recall(ns, [q], params=RecallParams(k=5, exact_max=0))
        assert exact and indexed, q
        assert exact[0].memory.id == indexed[0].memory.id, q
        assert {h.memory.namespace for h in exact + indexed} == {ns}


def test_a_namespace_above_the_threshold_uses_the_index(sqlite_core):
    """Over ``exact_max`` memories the index path runs: dropping the index then
    empties recall, while at the threshold recall still reads SQL."""
    ns = Namespace("default", "tg:7")
    _fill(sqlite_core, ns)
    sqlite_core.index.reset()
    n = len(FACTS)
    assert sqlite_core.recall(ns, ["咖啡"], params=RecallParams(exact_max=n - 1)) == []
    assert sqlite_core.recall(ns, ["咖啡"], params=RecallParams(exact_max=n))[0].memory.text == "我喜欢喝美式咖啡"


def test_vectors_follow_the_text_not_the_id(sqlite_core, embedder, tmp_path):
    """A cached or stored vector is used only for the exact text it embeds: after an
    update whose index write has not happened yet, a fresh process embeds the new
    text instead of reading the stale row."""
    from memory.index import SearchIndex

    ns = Namespace("default", "tg:9")
    mid = sqlite_core.add(ns, sqlite_core.new(ns, "我养了一只叫煤球的黑猫")).memory.id
    mem = sqlite_core.get(ns, mid)
    cold = SearchIndex(tmp_path / "index", embedder)  # empty cache: reads the stored row
    np.testing.assert_allclose(cold.vectors([mem]), embedder.embed_documents([mem.text]), atol=1e-5)
    # SQL moves on, the index does not (its outbox op is still pending)
    new = sqlite_core.store.supersede(ns, mid, sqlite_core.new(ns, "I moved to Berlin last spring"))
    colder = SearchIndex(tmp_path / "index", embedder)
    np.testing.assert_allclose(colder.vectors([new]), embedder.embed_documents([new.text]), atol=1e-5)
    assert not np.allclose(colder.vectors([new]), embedder.embed_documents([mem.text]), atol=1e-3)
    hits = sqlite_core.recall(ns, ["Berlin"], params=RecallParams(channels=("vector",)))
    assert [h.memory.text for h in hits] == ["I moved to Berlin last spring"]


def test_group_chat_sees_only_its_group_on_the_exact_path(sqlite_core):
    """Disclosure is applied to the rows read from SQL before either channel runs."""
    from memory.types import ChatKind, ChatRef, Visibility

    ns = Namespace("default", "tg:5")
    g = ChatRef("tg", ChatKind.GROUP, "-1001", "77")  # a forum topic of group -1001
    same_group_other_topic = ChatRef("tg", ChatKind.GROUP, "-1001", "78")
    dm = ChatRef("tg", ChatKind.PRIVATE, "5")
    sqlite_core.add(ns, sqlite_core.new(ns, "我的猫叫煤球", origin=dm, visibility=Visibility.PRIVATE))
    grp = sqlite_core.add(ns, sqlite_core.new(ns, "我家的猫喜欢晒太阳", origin=g, visibility=Visibility.GROUP)).memory
    for chat in (g, same_group_other_topic):
        for channels in (("bm25",), ("vector",), ("bm25", "vector")):
            hits = sqlite_core.recall(ns, ["猫"], chat=chat, params=RecallParams(channels=channels))
            assert [h.memory.id for h in hits] == [grp.id]


def test_bm25_scores():
    """Okapi BM25 with Lucene's IDF: rarer terms weigh more, repeated terms saturate,
    longer documents are normalised, query weights scale, no match scores 0."""
    docs = [["猫", "煤球"], ["猫", "咖啡"], ["咖啡", "咖啡", "咖啡"], ["hiking", "alps", "hiking", "trail", "long", "walk"]]
    s = bm25_scores(docs, {"煤球": 1.0})
    assert s[0] > 0 and s[1:] == [0.0, 0.0, 0.0]
    rare, common = bm25_scores(docs, {"煤球": 1.0})[0], bm25_scores(docs, {"猫": 1.0})[0]
    assert rare > common > 0
    one, three = bm25_scores(docs, {"咖啡": 1.0})[1:3]
    assert three > one and three < 3 * one  # saturation (k1)
    half = bm25_scores(docs, {"煤球": 0.5})[0]
    assert half == pytest.approx(rare / 2)
    assert bm25_scores([], {"x": 1.0}) == [] and bm25_scores(docs, {}) == [0.0] * 4


def test_bm25_length_floor_ranks_short_memories_by_their_words_not_their_length():
    """Below ``BM25_MIN_LENGTH`` tokens a memory is not favoured for being short: of
    two short memories the one that says the query's word twice wins, where plain
    Okapi BM25 (``min_length=0``) preferred the shorter one; a long text (60
    tokens) is still normalised against them (zh and en)."""
    from memory.recall import BM25_MIN_LENGTH
    from memory.text import tokens

    assert 0 < BM25_MIN_LENGTH <= 32
    said = ["I love hiking", "Last summer I went hiking in the Alps with my sister and we loved it, hiking",
            "我有猫", "我喜欢猫，猫也喜欢我，晚上它睡在我的床上", "my sister lives in Paris"]
    docs = [tokens(t) for t in said]
    assert all(len(d) < BM25_MIN_LENGTH for d in docs)
    for q, short, longer in (("hiking", 0, 1), ("猫", 2, 3)):
        terms = {t: 1.0 for t in tokens(q)}
        floored, plain = bm25_scores(docs, terms), bm25_scores(docs, terms, min_length=0)
        assert floored[longer] > floored[short] > 0, q
        assert plain[short] > plain[longer] > 0, q
    verbose = docs + [tokens("hiking " + " ".join(f"word{i}" for i in range(59)))]
    s = bm25_scores(verbose, {"hike": 1.0})
    assert s[0] > s[-1] > 0  # one mention in 60 tokens: normalised, below the short memory's


def test_bm25_confidence_is_the_idf_weighted_share_of_the_query_in_the_best_hit():
    """A best hit holding the rare words of the question is trusted fully; one holding
    only a common word of a long Chinese question is not; the share counts by IDF
    and by query weight, is capped at 1 and is 0 without terms (zh, en, traditional)."""
    from memory.text import tokens

    said = ["我知道了", "我在谈恋爱，很开心", "我喜欢猫", "我知道你很忙", "I painted a sunset", "I love hiking"]
    docs = [tokens(t) for t in said]
    q = {t: 1.0 for t in tokens("小度，你知道么我談戀愛了")}
    weak, strong = bm25_confidence(q, docs[0], docs), bm25_confidence(q, docs[1], docs)
    assert 0 < weak < strong == 1.0
    en = {t: 1.0 for t in tokens("What did I paint?")}
    assert bm25_confidence(en, docs[4], docs) == 1.0 and bm25_confidence(en, docs[5], docs) == 0.0
    assert bm25_confidence({}, docs[0], docs) == 0.0
    assert bm25_confidence(q, docs[0], docs, full=1.0) < weak  # a higher bar: less trust
    older = {t: (0.25 if t in tokens("我知道") else 1.0) for t in q}  # the word only in an older tail line
    assert bm25_confidence(older, docs[0], docs) < weak


def test_confidence_scaling_changes_only_the_weights_never_the_candidates(sqlite_core):
    """Scaling the BM25 channel by its confidence reorders the fused candidates at
    most: the same memories come back with and without it, for zh and en queries."""
    ns = Namespace("default", "tg:12")
    _fill(sqlite_core, ns)
    for q in QUERIES + ["小度，你知道么我去爬山了", "do you remember where my sister lives and what I do"]:
        on = sqlite_core.recall(ns, [q], params=RecallParams(k=50))
        off = sqlite_core.recall(ns, [q], params=RecallParams(k=50, bm25_full_coverage=0))
        assert {h.memory.id for h in on} == {h.memory.id for h in off}, q


def test_data_root_of_the_previous_version_opens_and_upgrades(tmp_path, embedder):
    """A chat log without the capture columns gets them (and their index); a
    LanceDB table without ``text_hash`` is rebuilt from SQL instead of failing."""
    import json
    import sqlite3

    import lancedb
    import pyarrow as pa

    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import ChatLine, Store
    from memory.types import ChatKind, ChatRef

    db = tmp_path / "h.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE chat_log (id INTEGER PRIMARY KEY, tenant VARCHAR(64) NOT NULL, "
                    "chat VARCHAR(300) NOT NULL, role VARCHAR(16) NOT NULL, sender_id VARCHAR NOT NULL, "
                    "sender_name VARCHAR NOT NULL, message_id VARCHAR NOT NULL, text VARCHAR NOT NULL, "
                    "at DATETIME NOT NULL)")
        con.execute("INSERT INTO chat_log (tenant, chat, role, sender_id, sender_name, message_id, text, at) "
                    "VALUES ('default', 'tg:private:9', 'user', '9', '', '1', '旧的一行', '2026-01-01 00:00:00')")
    store = Store(f"sqlite:///{db}")
    ns = Namespace("default", "tg:9")
    dm = ChatRef("tg", ChatKind.PRIVATE, "9")
    assert [line.text for line in store.chat_tail("default", dm)] == ["旧的一行"]
    now = datetime.now(timezone.utc)
    store.append_chat("default", dm, ChatLine("user", "9", "我喜欢喝美式咖啡", now, "2"), capture=ns)
    assert [p.text for p in store.pending_captures(now + timedelta(minutes=1))] == ["我喜欢喝美式咖啡"]
    with sqlite3.connect(db) as con:
        assert "ix_chat_log_capture_queued" in {r[1] for r in con.execute("PRAGMA index_list('chat_log')")}

    mid = store.add(ns, Memory(id="abc123def456", namespace=ns, text="我喜欢喝美式咖啡", key="drink")).id
    old = pa.schema([pa.field("id", pa.string()), pa.field("namespace", pa.string()),
                     pa.field("visibility", pa.string()), pa.field("origin", pa.string()),
                     pa.field("tokens", pa.string()), pa.field("vector", pa.list_(pa.float32(), embedder.dim))])
    lancedb.connect(tmp_path / "index").create_table("memories", schema=old)
    (tmp_path / "index" / "index_meta.json").write_text(json.dumps({"model": embedder.name, "dim": embedder.dim}))
    core = MemoryCore(store, SearchIndex(tmp_path / "index", embedder))
    assert core.index.ids(ns) == {mid}
    assert [h.memory.id for h in core.recall(ns, ["咖啡"], params=RecallParams(exact_max=0))] == [mid]
    core.close()



def test_an_index_of_older_tokens_is_rebuilt_with_the_current_ones(tmp_path, embedder):
    """An index whose full-text column holds another tokenizer version's tokens
    (unstemmed English, version 1) is dropped and re-made from SQL at open, so the
    index path finds "painted" for "paint" like the exact path does."""
    import json

    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store
    from memory.text import TOKENS_VERSION

    ns = Namespace("default", "tg:11")
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", embedder))
    core.add(ns, core.new(ns, "I painted a sunset by the lake"))
    core.add(ns, core.new(ns, "我养了一只叫煤球的黑猫"))
    core.close()
    meta = tmp_path / "index" / "index_meta.json"
    assert json.loads(meta.read_text())["tokens"] == TOKENS_VERSION
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "tokens": TOKENS_VERSION - 1}))

    index = SearchIndex(tmp_path / "index", embedder)
    assert index.needs_rebuild and index.count() == 0
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), index)
    try:
        assert index.count() == 2 and json.loads(meta.read_text())["tokens"] == TOKENS_VERSION
        hits = core.recall(ns, ["What did I paint?"], params=RecallParams(exact_max=0, channels=("bm25",)))
        assert [h.memory.text for h in hits] == ["I painted a sunset by the lake"]
    finally:
        core.close()
