"""Recall's marks waiting in their namespace's state row (memory.store.pending): a flush writes
that one row, every reader of access times and links merges it, a fold writes the memories and
links rows without changing what any reader sees, and isolation and forgets hold — on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memory.marks import RecallMarks
from memory.recall import RecallParams
from memory.store import utcnow
from memory.types import Namespace
from tests.memory.test_marks import _links, _stored

TEXTS = ["我养了一只叫煤球的黑猫🐈", "煤球上周去看了兽医！", "I walk Mochi in 中山公園 every Sunday",
         "My sister Lena lives in Berlin", "我妹妹在柏林读书"]


def _raw(core, ns, mid) -> list[str]:
    """The access times the memories row itself holds (no pending merged)."""
    m = core.store.mark
    return json.loads(core.store._read_rows(f"SELECT access_times FROM memories WHERE namespace = {m} AND id = {m}",
                                            (str(ns), mid))[0][0])


def _link_rows(core, ns) -> int:
    return int(core.store._read_rows(f"SELECT count(*) FROM memory_links WHERE namespace = {core.store.mark}",
                                     (str(ns),))[0][0])


def _pending_text(core, ns) -> str:
    rows = core.store._read_rows(f"SELECT marks FROM namespace_state WHERE namespace = {core.store.mark}",
                                 (str(ns),))
    return rows[0][0] or ""


def _every_reader(core, ns, a, at) -> dict:
    """What each reader of access times and links shows of memory ``a`` of ``ns`` at ``at``."""
    key = core.store.get(ns, a).key
    return {
        "get": core.store.get(ns, a).access_times,
        "get_many": core.store.get_many(ns, [a])[a].access_times,
        "list": {m.id: m for m in core.store.list(ns)}[a].access_times,
        "find_by_key": core.store.find_by_key(ns, key).access_times,
        "key_and_tombstone": core.store.key_and_tombstone(ns, key, [])[0].access_times,
        "candidates": core.store.candidates(ns, [a])[a].times(),
        "live_if_at_most": {t.id: t for t in core.store.live_if_at_most(ns, 50)}[a].candidate().times(),
        "get_many_of": core.store.get_many_of({ns: [a]})[ns][a].access_times,
        "links_of": _links(core, ns, a, at),
        "count_links": core.store.count_links(ns),
    }


def _windows(core, ns, ids, t0):
    """Three flushed windows of marks: (a, b), (a, b, c), (b, a, d)."""
    a, b, c, d, _ = ids
    marks = RecallMarks(core.store, every_s=3600.0)
    for k, turn in enumerate(([a, b], [a, b, c], [b, a, d])):
        marks.note(ns, turn, t0 + timedelta(minutes=k))
        marks.flush()
    return marks


def test_a_flush_writes_the_namespace_row_and_every_reader_sees_the_times(core, namespace, monkeypatch):
    """After the flushes the memories and links rows are as stored; get, get_many, list, find_by_key,
    candidates, live_if_at_most, get_many_of and links_of all show the pending times and weight,
    and after the fold the rows hold exactly what those readers showed. Every co-used pair linked
    (NEW_LINK_USES = 1), so that each reader has pairs of one co-use to show; the shipped rule's
    pairs are the next test's."""
    from memory.store import pending

    monkeypatch.setattr(pending, "NEW_LINK_USES", 1)
    ids = _stored(core, namespace, TEXTS)
    a, b, c, d, e = ids
    t0 = utcnow() - timedelta(hours=1)
    _windows(core, namespace, ids, t0)
    assert len(_raw(core, namespace, a)) == 1 and _link_rows(core, namespace) == 0  # only the state row written
    at = utcnow()
    seen = _every_reader(core, namespace, a, at)
    assert len(seen["get"]) == 4 and {t0 + timedelta(minutes=k) for k in range(3)} < set(seen["get"])
    assert seen["links_of"] == {b: pytest.approx(3.0, rel=1e-3), c: pytest.approx(1.0, rel=1e-3),
                                d: pytest.approx(1.0, rel=1e-3)}
    assert seen["count_links"] == 5  # a-b, a-c, b-c, a-d, b-d
    assert core.fold_marks() == 4 + 5  # four memories, five pairs
    assert _pending_text(core, namespace) == "" and len(_raw(core, namespace, a)) == 4
    assert _link_rows(core, namespace) == 5
    assert _every_reader(core, namespace, a, at) == seen
    assert len(core.store.get(namespace, e).access_times) == 1  # never marked


@pytest.mark.parametrize("path", ["index", "exact", "cached"])
def test_recall_scores_the_same_with_pending_marks_and_after_the_fold(core, namespace, path):
    """What recall ranks and scores (activation reads the access times, the association channel
    the links) is the same while the marks wait in the state row and once they are folded: through
    the index (Store.candidates), the exact path (live_if_at_most) and recall's cache (its view
    holds texts and vectors; the candidates' times are read with Store.candidates)."""
    exact_max = 200 if path == "exact" else 0
    if path == "cached":
        from memory.cache import NamespaceCache

        core.cache = NamespaceCache(16)
    ids = _stored(core, namespace, TEXTS)
    t0 = utcnow() - timedelta(hours=2)
    _windows(core, namespace, ids, t0)
    params = RecallParams(exact_max=exact_max)
    now = utcnow()
    queries = [["煤球怎么样了？"], ["Where does Lena live?"], ["周末做什么"]]

    def ranked():
        return [[(h.memory.id, round(h.score, 12), h.memory.access_times) for h in
                 core.recall(namespace, q, params=params, now=now)] for q in queries]

    before = ranked()
    assert any(hits for hits in before) and _pending_text(core, namespace)
    core.fold_marks()
    assert not _pending_text(core, namespace)
    assert ranked() == before


def test_a_flush_past_the_fold_size_folds_in_its_own_transaction(core, namespace):
    """Once the namespace's row would hold more than fold_at memories and pairs, the flush writes
    the memories and links rows and clears it; readers see the same before and after."""
    a, b, c, *_ = _stored(core, namespace, TEXTS)
    t0 = utcnow() - timedelta(minutes=5)
    assert core.store.pend_marks(namespace, {a: [t0], b: [t0]}, {(a, b): (2.0, t0, 2)}, fold_at=4) == 2
    assert _pending_text(core, namespace) and _link_rows(core, namespace) == 0
    shown = core.store.get(namespace, a).access_times
    t1 = t0 + timedelta(minutes=1)
    core.store.pend_marks(namespace, {c: [t1]}, {(a, c): (2.0, t1, 2)}, fold_at=4)  # 5 > 4: folds
    assert not _pending_text(core, namespace) and _link_rows(core, namespace) == 2
    assert core.store.get(namespace, a).access_times == shown and len(_raw(core, namespace, c)) == 2


def test_a_pair_co_used_once_is_not_linked_by_the_fold(core, namespace, monkeypatch):
    """With the rule on (NEW_LINK_USES = 2, shipped; docs/scaling.md) a recalled link needs two
    co-uses: one prompt's memories came from one query.
    A pair co-used in one turn is dropped at the fold (no reader showed it either); in two turns,
    in one window or in two, it is linked with both co-uses' weight; a pair already linked (here by
    an entity) still strengthens from a single co-use, as every reader showed before the fold."""
    from memory.store import pending

    monkeypatch.setattr(pending, "NEW_LINK_USES", 2)
    a, b, c, d, e = _stored(core, namespace, TEXTS)
    t0 = utcnow() - timedelta(hours=1)
    core.store.strengthen_links(namespace, [d, e], reason="entity", at=t0)
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [a, b], t0)  # a-b once
    marks.note(namespace, [a, c], t0 + timedelta(minutes=1))  # a-c twice in one window …
    marks.note(namespace, [c, a], t0 + timedelta(minutes=2))
    marks.flush()
    marks.note(namespace, [b, c], t0 + timedelta(minutes=3))  # … b-c once in each of two windows
    marks.note(namespace, [d, e], t0 + timedelta(minutes=3))  # d-e: linked, co-used once
    marks.flush()
    marks.note(namespace, [b, c], t0 + timedelta(minutes=4))
    marks.flush()
    at = utcnow()
    shown = {m: _links(core, namespace, m, at) for m in (a, b, d)}
    assert shown[a] == {c: pytest.approx(2.0, rel=1e-3)} and b not in shown[a]
    assert shown[b] == {c: pytest.approx(2.0, rel=1e-3)}
    assert shown[d][e] > 1.5  # the entity link grown by one co-use
    assert core.store.count_links(namespace) == 3
    core.fold_marks()
    assert _link_rows(core, namespace) == 3  # a-c, b-c, d-e; never a-b
    assert {m: _links(core, namespace, m, at) for m in (a, b, d)} == shown
    assert "recalled" in core.store.links_of(namespace, [d], at=at)[d][0][2]


def test_a_namespace_row_holds_only_its_own_ids(core, namespace):
    """An id of another namespace marked in this one is not kept in this one's row, and the other
    namespace's readers never see it."""
    other = Namespace(namespace.tenant, "tg:2002")
    mine = _stored(core, namespace, TEXTS[:2])
    theirs = _stored(core, other, TEXTS[2:4])
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [mine[0], theirs[0], mine[1]], utcnow())
    assert marks.flush() == 2
    text = _pending_text(core, namespace)
    assert mine[0] in text and theirs[0] not in text and not _pending_text(core, other)
    assert len(core.store.get(other, theirs[0]).access_times) == 1
    assert _links(core, other, theirs[0], utcnow()) == {}
    core.fold_marks()
    assert len(_raw(core, other, theirs[0])) == 1 and _link_rows(core, other) == 0


def test_a_memory_forgotten_while_its_marks_wait_stays_forgotten(core, namespace):
    """Marked, flushed into the state row, then forgotten: its pairs and its times leave the row in the
    forget's transaction (nothing of it waits for a fold that a quiet person may never reach), no reader
    shows it as a neighbour, and the fold writes no row or link for it."""
    cat, vet, mochi, *_ = _stored(core, namespace, TEXTS)
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [cat, vet, mochi], utcnow() - timedelta(minutes=2))
    marks.note(namespace, [cat, vet, mochi], utcnow() - timedelta(minutes=1))
    marks.flush()
    assert cat in _links(core, namespace, vet, utcnow())
    core.forget(namespace, cat)
    assert cat not in _links(core, namespace, vet, utcnow()) and core.store.count_links(namespace) == 1
    assert cat not in _pending_text(core, namespace) and vet in _pending_text(core, namespace)
    core.fold_marks()
    assert core.store.get_many(namespace, [cat]) == {}
    assert _links(core, namespace, vet, utcnow()) == {mochi: pytest.approx(2.0, rel=1e-3)}
    assert _link_rows(core, namespace) == 1 and len(_raw(core, namespace, vet)) == 3


def test_a_flush_racing_another_process_on_the_row_keeps_both_marks(core, namespace, monkeypatch):
    """PostgreSQL: another process writes the namespace's row between this flush's read and its
    write; the flush sees its row changed, rolls back and merges again, so neither window's times
    are lost (and no row lock is held across the memories rows a forget writes first)."""
    if core.store.is_sqlite:
        pytest.skip("SQLite: BEGIN IMMEDIATE serializes the writers of one file")
    from memory.store import PendingMarks, Store

    a, b, *_ = _stored(core, namespace, TEXTS)
    other = Store(core.store.url, schema=core.store.schema)
    t0 = utcnow() - timedelta(minutes=3)
    added = PendingMarks.added
    raced = []

    def racing(self, times, pairs):
        if not raced:
            raced.append(0)  # the other process's own flush runs this too: once
            raced[0] = other.pend_marks(namespace, {b: [t0 + timedelta(minutes=1)]}, {})
        return added(self, times, pairs)

    monkeypatch.setattr(PendingMarks, "added", racing)
    try:
        assert core.store.pend_marks(namespace, {a: [t0]}, {}) == 1
    finally:
        other.close()
    assert raced == [1]
    assert t0 in core.store.get(namespace, a).access_times
    assert t0 + timedelta(minutes=1) in core.store.get(namespace, b).access_times


def test_linking_identities_carries_the_marks_waiting_in_the_row(core, namespace):
    """Marks flushed into tg:1001's row, then tg:1001 merged into tg:2002: the moved memory keeps
    its pending time in its new namespace (folded into its row before the move)."""
    other = Namespace(namespace.tenant, "tg:2002")
    a, *_ = _stored(core, namespace, TEXTS[:1])
    at = utcnow()
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [a], at)
    marks.flush()
    core.store.move_namespace(namespace, other)
    assert at in core.store.get(other, a).access_times
    assert not _pending_text(core, namespace)
