"""A memory new to the index is appended (LanceDB ``add``), not merged on its id
(``merge_insert``, ~2.5x the CPU): ``MemoryCore``'s ``_Unindexed``. An edit, a
write that failed (even one that committed before it raised), a write whose
outbox op was not cleared, and a restarted process merge, so no memory ever has
two rows; and if one had, searches would still give it once and a forget would
take both."""

from __future__ import annotations

import pytest

from memory.core import MemoryCore
from memory.errors import StoreError
from memory.types import Namespace


def rows_of(core: MemoryCore, memory_id: str) -> int:
    """The index's rows for ``memory_id`` (``SearchIndex.ids`` would hide a second one)."""
    return int(core.index._table.count_rows(f"id = '{memory_id}'"))


class Calls:
    """Counts the real LanceDB table's ``add`` and ``merge_insert`` calls (each goes on
    to the real method)."""

    def __init__(self, monkeypatch, table, fail_after_add: int = 0) -> None:
        self.adds = self.merges = 0
        self.fail_after_add = fail_after_add
        real_add, real_merge = table.add, table.merge_insert

        def add(*a, **kw):
            self.adds += 1
            out = real_add(*a, **kw)
            if self.fail_after_add:
                self.fail_after_add -= 1
                raise OSError("the commit went through, then the connection dropped")
            return out

        def merge_insert(*a, **kw):
            self.merges += 1
            return real_merge(*a, **kw)

        monkeypatch.setattr(table, "add", add)
        monkeypatch.setattr(table, "merge_insert", merge_insert)


def test_a_new_memory_is_appended_and_its_edit_merged(core, namespace, monkeypatch):
    """A stored memory is one appended row, found by BM25; its edit rewrites that
    row in place (a merge): still one row, found by the new words only."""
    calls = Calls(monkeypatch, core.index._table)
    mid = core.add(namespace, core.new(namespace, "我养了一只橘猫叫年糕 🐱", key="pet.cat")).memory.id
    assert (calls.adds, calls.merges) == (1, 0)
    assert rows_of(core, mid) == 1
    assert [h.id for h in core.index.search_bm25(namespace, ["年糕"], 5)] == [mid]
    core.edit(namespace, mid, text="My cat is called Mochi")
    assert (calls.adds, calls.merges) == (1, 1)
    assert rows_of(core, mid) == 1
    assert [h.id for h in core.index.search_bm25(namespace, ["mochi"], 5)] == [mid]
    assert core.index.search_bm25(namespace, ["年糕"], 5) == []


def test_a_write_that_committed_then_failed_is_merged_on_retry(core, namespace, monkeypatch):
    """The append commits, then raises: the outbox keeps the op (one attempt
    counted) and the next pass merges, so the memory still has one row."""
    calls = Calls(monkeypatch, core.index._table, fail_after_add=1)
    mid = core.add(namespace, core.new(namespace, "I'm allergic to peanuts", key="health.allergy")).memory.id
    assert calls.adds == 1 and core.store.outbox_depth() == 1
    assert core.maintain() == 1
    assert calls.merges == 1 and core.store.outbox_depth() == 0
    assert rows_of(core, mid) == 1


def test_an_op_left_after_the_write_is_merged_here_and_after_a_restart(core, namespace, monkeypatch):
    """The append succeeds but clearing its outbox op fails (SQL down for a
    moment): the op stays, and this process's next pass — or a restarted
    process's repair — merges rather than appending again."""
    real_clear = core.store.clear_ops
    failing = {"left": 2}

    def clear_ops(op_ids):
        if op_ids and failing["left"]:
            failing["left"] -= 1
            raise StoreError("the database went away")
        return real_clear(op_ids)

    monkeypatch.setattr(core.store, "clear_ops", clear_ops)
    calls = Calls(monkeypatch, core.index._table)
    first = core.add(namespace, core.new(namespace, "我在杭州西湖边跑步", key="hobby.run")).memory.id
    assert calls.adds == 1 and core.store.outbox_depth() == 1
    with pytest.raises(StoreError):
        core.maintain()
    assert (calls.adds, calls.merges) == (1, 1)
    assert rows_of(core, first) == 1
    # the process dies with the op still owed; a new one over the same SQL and index repairs it
    restarted = MemoryCore(core.store, core.index)
    assert restarted.maintain() == 1
    assert (calls.adds, calls.merges) == (1, 2)
    assert rows_of(core, first) == 1 and core.store.outbox_depth() == 0


def test_two_rows_of_one_id_read_as_one_and_a_forget_takes_both(core, namespace):
    """Were an append to meet a row already written (a replica that wrote it and
    died before clearing the op), searches give the memory once, at its best rank,
    and forgetting it removes both rows."""
    other = Namespace(namespace.tenant, "tg:3003")
    kept = core.add(namespace, core.new(namespace, "My sister lives in Chengdu 成都", key="family.sister")).memory
    core.add(other, core.new(other, "My sister lives in Chengdu too", key="family.sister"))
    core.index.upsert([kept], new={kept.id})
    assert rows_of(core, kept.id) == 2
    hits = core.index.search_bm25(namespace, ["chengdu", "sister"], 10)
    assert [h.id for h in hits] == [kept.id] and hits[0].rank == 1
    vec = core.index.vectors([kept])[0]
    assert [h.id for h in core.index.search_vector(namespace, vec, 10)] == [kept.id]
    core.forget(namespace, kept.id)
    core.maintain()
    assert rows_of(core, kept.id) == 0


def test_a_memory_stored_during_a_rebuild_is_merged_after_it(core, namespace, monkeypatch):
    """A rebuild from SQL writes rows outside the outbox: a memory stored just after
    it reset the table is written by the rebuild, and its own lingering write
    afterwards merges onto that row instead of appending a second."""
    slow = MemoryCore(core.store, core.index, index_linger_s=60)  # its write waits for flush_index
    stored = []
    real_reset = core.index.reset

    def reset():
        real_reset()
        stored.append(slow.add(namespace, slow.new(namespace, "我下个月搬去深圳", key="home.move")).memory.id)

    monkeypatch.setattr(core.index, "reset", reset)
    assert slow.rebuild_index() >= 1
    assert rows_of(core, stored[0]) == 1  # the rebuild read it from SQL
    calls = Calls(monkeypatch, core.index._table)
    slow.flush_index()
    assert (calls.adds, calls.merges) == (0, 1)
    assert rows_of(core, stored[0]) == 1 and core.store.outbox_depth() == 0
