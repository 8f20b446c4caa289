"""What a recall reads from SQL (issue 29.3): the namespace's state once, then its
candidates — and the association-link, dormant and conflict reads only for a
namespace that was ever given one, counted in ``namespace_state`` in the
transaction that makes it; the hits are the same either way. SQLite and PostgreSQL."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import event

from memory.cache import NamespaceCache
from memory.links import LinkParams
from memory.store import NamespaceStats, utcnow
from memory.store.base import StoreBase
from memory.types import Namespace

TEXTS = ["我养了一只叫煤球的黑猫", "煤球上周去看了兽医", "I walk Mochi in the park every Sunday",
         "老板又改需求了，加班到十点", "My sister Lena lives in Berlin"]
TAIL = ["我的猫叫什么名字？"]
TAIL_EN = ["Where does my sister live?"]


@contextmanager
def _statements(store):
    """The SQL statements run on ``store``'s engine inside the block: through
    SQLAlchemy (its cursor event) and through the DBAPI cursor of recall's hot reads
    (``StoreBase._read_rows``, which SQLAlchemy's events do not see)."""
    seen: list[str] = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    read_rows = StoreBase._read_rows

    def recording(self, sql, params):
        seen.append(sql)
        return read_rows(self, sql, params)

    event.listen(store.engine, "before_cursor_execute", record)
    StoreBase._read_rows = recording
    try:
        yield seen
    finally:
        StoreBase._read_rows = read_rows
        event.remove(store.engine, "before_cursor_execute", record)


def _tables(statements) -> list[str]:
    """The table each statement reads first (``FROM <table>``)."""
    return [s.split("FROM ", 1)[1].split()[0] for s in statements]


def _person(core, subject="tg:29", texts=TEXTS) -> tuple[Namespace, list[str]]:
    """A namespace holding ``texts``, stored without entity links (no link of any kind yet)."""
    ns = Namespace("default", subject)
    core.links = LinkParams(entity=0.0)
    try:
        with core.batch():
            ids = [core.add(ns, core.new(ns, t)).memory.id for t in texts]
    finally:
        core.links = LinkParams()
    return ns, ids


def _touches(statements, table: str) -> bool:
    return any(table in s for s in statements)


def test_a_recall_of_a_namespace_without_links_conflicts_or_dormant_memories_reads_none_of_them(core):
    """Cached path, warm, zh and en: the state read and the candidates' rows (``Store.candidates``,
    through the DBAPI cursor), nothing else; no read of memory_links, memory_conflicts or
    consolidated."""
    core.cache = NamespaceCache(16)
    ns, _ = _person(core)
    assert core.store.namespace_stats(ns) == NamespaceStats(version=5, live=5, links=0, conflicts=0, dormant=0)
    for tail in (TAIL, TAIL_EN):
        assert core.recall(ns, tail)  # loads the view
        with _statements(core.store) as seen:
            hits = core.recall(ns, tail)
        assert hits
        assert not any(_touches(seen, t) for t in ("memory_links", "memory_conflicts", "consolidated")), seen
        assert _tables(seen) == ["namespace_state", "memories"], seen


def test_links_conflicts_and_dormant_marks_are_counted_and_read_with_the_same_hits(core):
    """Each kind, once made, is counted in namespace_state and read again by recall; the hits equal those
    of a recall that reads everything (the counters unknown, as on a row written before them)."""
    core.cache = NamespaceCache(16)
    ns, ids = _person(core, "tg:30")
    core.store.strengthen_links(ns, ids[:2], reason="recalled", at=utcnow())
    assert core.store.add_conflict(ns, ids[2], ids[3])
    core.store.put_consolidated(ns, ids[4], "fact", 0.1, [ids[0]], at=utcnow() - timedelta(days=90))
    assert core.store.sweep_dormant(ns, unused_since=utcnow() - timedelta(days=30), below=0.5) == [ids[4]]
    stats = core.store.namespace_stats(ns)
    assert (stats.links, stats.conflicts, stats.dormant) == (1, 1, 1)
    now = utcnow()
    for tail in (TAIL, TAIL_EN):
        with _statements(core.store) as seen:
            hits = core.recall(ns, tail, now=now)
        assert _touches(seen, "memory_links") and _touches(seen, "memory_conflicts") and _touches(seen, "consolidated")
        unknown = core.recall(ns, tail, now=now, stats=NamespaceStats(stats.version, stats.live))
        assert [(h.memory.id, h.score, h.conflict.id if h.conflict else None) for h in hits] == \
            [(h.memory.id, h.score, h.conflict.id if h.conflict else None) for h in unknown]


def test_moving_a_namespace_counts_what_moved_into_the_target(core):
    """An identity merge carries links and conflicts into the target: its counters follow (recounted in
    the move's transaction), so the target's recall still reads them."""
    src, ids = _person(core, "tg:31")
    dst, _ = _person(core, "tg:32", ["我在上海工作", "I play the violin"])
    core.store.strengthen_links(src, ids[:3], reason="recalled", at=utcnow())
    core.store.add_conflict(src, ids[3], ids[4])
    assert core.store.namespace_stats(dst).links == 0
    core.store.move_namespace(src, dst)
    stats = core.store.namespace_stats(dst)
    assert stats.links == core.store.count_links(dst) > 0
    assert stats.conflicts == len(core.store.conflicts(dst)) == 1
