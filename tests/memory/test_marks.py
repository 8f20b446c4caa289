"""Recall's marks held in process (memory.marks): written once per memory and per pair however many
turns marked them, the same weights and times as marking each turn at once, and a forget between a
mark and its flush always wins — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory.links import LinkParams
from memory.marks import RecallMarks
from memory.store import utcnow
from memory.types import Namespace

TEXTS = ["我养了一只叫煤球的黑猫🐈", "煤球上周去看了兽医！", "I walk Mochi in 中山公園 every Sunday",
         "My sister Lena lives in Berlin"]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _stored(core, ns, texts=TEXTS) -> list[str]:
    """Store ``texts`` in ``ns`` without entity links (the tests count the co-recall ones alone)."""
    core.links = LinkParams(entity=0.0)
    try:
        return [core.add(ns, core.new(ns, t)).memory.id for t in texts]
    finally:
        core.links = LinkParams()


def _links(core, ns, mid, at):
    return {o: w for o, w, _ in core.store.links_of(ns, [mid], at=at)[mid]}


def test_marks_wait_for_the_window_then_write_what_marking_each_turn_writes(core, namespace, monkeypatch):
    """Three turns' marks inside the window write nothing; the flush leaves the access times and
    co-recall weights that three mark_recalled calls leave in a twin namespace — with every co-used
    pair linked (NEW_LINK_USES = 1), as mark_recalled links them; the shipped rule, a pair linked
    from its second co-use, is tests/memory/test_pending_marks.py's."""
    from memory.store import pending

    monkeypatch.setattr(pending, "NEW_LINK_USES", 1)
    twin = Namespace(namespace.tenant, "tg:2002")
    a, b, c, _ = _stored(core, namespace)
    ta, tb, tc, _ = _stored(core, twin)
    clock = _Clock()
    marks = RecallMarks(core.store, every_s=30.0, clock=clock)
    t0 = utcnow()
    turns = [([a, b], t0), ([a, b, c], t0 + timedelta(seconds=5)), ([b, a], t0 + timedelta(seconds=9))]
    for ids, at in turns:
        marks.note(namespace, ids, at)
    assert marks.pending == 3 and core.store.count_links(namespace) == 0
    assert core.store.get(namespace, a).access_times == core.store.get(namespace, a).access_times[:1]
    for ids, at in turns:
        core.mark_recalled(twin, [{a: ta, b: tb, c: tc}[i] for i in ids], at)
    clock.now = 31.0
    marks.note(namespace, [c], t0 + timedelta(seconds=31))  # the window has passed: this one flushes
    core.mark_recalled(twin, [tc], t0 + timedelta(seconds=31))
    assert marks.pending == 0
    at = t0 + timedelta(minutes=1)
    for mine, theirs in ((a, ta), (b, tb), (c, tc)):
        assert core.store.get(namespace, mine).access_times[1:] == core.store.get(twin, theirs).access_times[1:]
        want = {({ta: a, tb: b, tc: c}[o]): w for o, w in _links(core, twin, theirs, at).items()}
        assert _links(core, namespace, mine, at) == pytest.approx(want, rel=1e-4)
    assert _links(core, namespace, a, at)[b] == pytest.approx(3.0, rel=1e-4)


def test_a_memory_forgotten_before_the_flush_stays_forgotten(core, namespace):
    """Marked, then forgotten (煤球), then flushed: no row, no link, no access time comes back; the
    marks of the others are written."""
    cat, vet, mochi, _ = _stored(core, namespace)
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [cat, vet, mochi], utcnow() - timedelta(seconds=1))
    marks.note(namespace, [cat, vet, mochi], utcnow())
    core.forget(namespace, cat)
    assert marks.flush() == 2
    assert core.store.get_many(namespace, [cat]) == {}
    assert cat not in _links(core, namespace, vet, utcnow())
    assert _links(core, namespace, vet, utcnow()) == {mochi: pytest.approx(2.0, rel=1e-4)}
    assert len(core.store.get(namespace, vet).access_times) == 3


def test_marks_never_cross_namespaces(core, namespace):
    """An id of another namespace marked in this one touches and links nothing of either."""
    other = Namespace(namespace.tenant, "tg:2002")
    mine = _stored(core, namespace, TEXTS[:2])
    theirs = _stored(core, other, TEXTS[2:])
    marks = RecallMarks(core.store, every_s=3600.0)
    marks.note(namespace, [mine[0], theirs[0]], utcnow())
    assert marks.flush() == 1
    assert core.store.count_links(namespace) == 0 and core.store.count_links(other) == 0
    assert len(core.store.get(other, theirs[0]).access_times) == 1


def test_a_turn_holds_its_marks_and_close_writes_them(core, namespace):
    """note_recalled holds the marks (nothing written yet); MemoryCore.close writes them."""
    a, b, *_ = _stored(core, namespace)
    core.marks.every_s = 3600.0
    core.note_recalled(namespace, [a, b], utcnow() - timedelta(seconds=1))
    core.note_recalled(namespace, [a, b])
    assert core.store.count_links(namespace) == 0
    core.close()
    assert core.store.count_links(namespace) == 1
    assert len(core.store.get(namespace, a).access_times) == 3


def test_a_periodic_pass_writes_marks_only_once_their_window_passed(core, namespace):
    """``flush_due`` (the gateway's 15 s maintenance pass) leaves marks younger than the
    window in memory, so a pass more frequent than the window does not shorten it; once
    the window passed it writes them all, and ``flush_marks`` (shutdown) always writes."""
    a, b, _, _ = _stored(core, namespace)
    clock = _Clock()
    marks = RecallMarks(core.store, every_s=60.0, clock=clock)
    marks.note(namespace, [a, b], utcnow() - timedelta(seconds=1))
    marks.note(namespace, [a, b], utcnow())
    clock.now = 15.0
    assert not marks.due() and marks.flush_due() == 0 and marks.pending == 2
    assert len(core.store.get(namespace, a).access_times) == 1 and core.store.count_links(namespace) == 0
    clock.now = 61.0
    assert marks.due() and marks.flush_due() == 2 and marks.pending == 0
    assert len(core.store.get(namespace, a).access_times) == 3 and core.store.count_links(namespace) == 1
    assert not marks.due() and marks.flush_due() == 0  # nothing held: nothing due
    core.note_recalled(namespace, [b])
    assert core.flush_marks(due_only=True) == 0 and core.flush_marks() == 1


def test_one_namespaces_marks_are_written_alone_and_the_others_window_goes_on(core, namespace):
    """``flush(ns)`` (a command about to list ``ns``'s memories) writes that namespace's times and
    pairs now and nothing of another's, whose marks stay held until their window passes; a namespace
    holding nothing writes nothing."""
    other = Namespace(namespace.tenant, "tg:2002")
    a, b = _stored(core, namespace, TEXTS[:2])
    c, d = _stored(core, other, TEXTS[2:])
    clock = _Clock()
    marks = RecallMarks(core.store, every_s=60.0, clock=clock)
    for _ in range(2):  # two co-uses: a pair a fold links (memory.store.pending.NEW_LINK_USES)
        marks.note(namespace, [a, b], utcnow())
        marks.note(other, [c, d], utcnow())
    clock.now = 30.0
    assert marks.flush(namespace) == 2 and marks.pending == 2
    assert len(core.store.get(namespace, a).access_times) == 3 and core.store.count_links(namespace) == 1
    assert len(core.store.get(other, c).access_times) == 1 and core.store.count_links(other) == 0
    assert marks.flush(namespace) == 0 and not marks.due()  # the other's window started at 0, not at 30
    clock.now = 61.0
    assert marks.flush_due() == 2 and marks.pending == 0 and core.store.count_links(other) == 1
