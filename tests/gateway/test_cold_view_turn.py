"""A namespace's view loading never holds up a turn (issue 41 item 6): while the
cache's loader thread is still loading it — held at the cache boundary by a gate
in ``memory.cache._load`` — a turn through the real pipeline is answered from
the exact path (a large namespace's recall from the index), and a view so far
behind that it needs a whole reload is reloaded in the loader thread too. Real
SQLite and PostgreSQL, LanceDB in tmp_path, the real offline embedder."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from conftest import hold_calls

from bridges.contract import InboundMessage
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory import cache as cache_module
from memory.core import MemoryCore
from memory.recall import RecallParams
from memory.store import utcnow
from memory.types import ChatKind, Namespace

T0 = datetime(2026, 12, 1, 9, tzinfo=timezone.utc)
NS = Namespace("default", "tg:1001")
FACTS = ["我养了一只叫煤球的黑猫", "我喜欢喝美式咖啡，不加糖。", "I love hiking in the Alps", "My sister lives in Paris 🗼",
         "我在上海做程序员", "我對花生過敏", "I work as a nurse in Leeds"]


def msg(text: str, mid: str, at: datetime) -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id="1001", sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id="1001", text=text, timestamp=at)


@pytest.fixture
def gate(monkeypatch):
    """Whole view loads wait in the loader thread until the test opens the gate (at most 30 s)."""
    entered, opened = hold_calls(monkeypatch, cache_module, "_load", 30)
    yield opened, entered
    opened.set()


@pytest.fixture
def hot(core):
    """The gateway's core over the test's stores: recall's cache loads in the background."""
    with core.batch():
        ids = [core.add(NS, core.new(NS, t)).memory.id for t in FACTS]
    c = MemoryCore(core.store, core.index, cache_mib=64, cache_background=True)
    c.facts = ids  # type: ignore[attr-defined]
    yield c
    c.cache.close()  # type: ignore[union-attr]


async def test_a_turn_is_answered_while_its_namespace_is_still_loading(hot, gate):
    """The first turn after start-up: its namespace's load is held in the loader thread, and the turn is
    answered meanwhile — its recollection names the cat (zh) from the exact path; once the load finishes
    the next turn (en) is served from the cached view."""
    opened, entered = gate
    pipeline = Pipeline(load_settings(), hot)
    cache = hot.cache
    first = await pipeline.handle("default", msg("你还记得煤球吗？", "1", T0))
    assert entered.wait(10) and not opened.is_set()
    assert not cache.idle(0) and not cache.held(NS)  # the load is still running: the turn did not wait on it
    assert hot.facts[0] in first.recalled and "煤球" in first.recollection
    opened.set()
    assert cache.idle(30) and cache.held(NS)
    hits = cache.hits
    second = await pipeline.handle("default", msg("Where does my sister live?", "2", T0 + timedelta(minutes=1)))
    assert hot.facts[3] in second.recalled and "Paris" in second.recollection
    assert cache.hits > hits
    await pipeline.drain()


def test_a_large_namespace_is_answered_from_the_index_while_its_view_loads(hot, core, gate):
    """Past the exact path's size (``exact_max`` 0 here), the recall made while the view loads goes through
    the index and gives what the index path gives without any cache (zh and en)."""
    opened, entered = gate
    params = RecallParams(k=5, exact_max=0)
    now = utcnow()
    for q in ["你还记得我的猫吗？", "Where does my sister live?"]:
        got = hot.recall(NS, [q], params=params, now=now)
        assert entered.wait(10) and not cache_held(hot)
        want = core.recall(NS, [q], params=params, now=now)
        assert got and [h.memory.id for h in got] == [h.memory.id for h in want], q
    opened.set()
    assert hot.cache.idle(30) and hot.cache.held(NS)


def cache_held(core: MemoryCore) -> bool:
    return core.cache.held(NS)  # type: ignore[union-attr]


def test_a_view_too_far_behind_is_reloaded_off_the_recall(hot, core, gate):
    """A held view whose namespace lost a quarter of its rows elsewhere (two forgets through another core,
    as another replica would) needs a whole reload: the recall does not make it — it answers from the exact
    path, the forgotten memories never among its hits — and the loader thread does; then the view is used."""
    opened, entered = gate
    opened.set()  # the first load goes through
    now = utcnow()
    hot.recall(NS, ["咖啡"], now=now)
    assert hot.cache.idle(30) and hot.cache.held(NS)
    opened.clear()
    entered.clear()
    for gone in hot.facts[:2]:  # the cat and the coffee
        core.forget(NS, gone)
    hits = hot.recall(NS, ["煤球 咖啡 Paris"], params=RecallParams(k=5), now=now)
    assert entered.wait(10) and not hot.cache.idle(0)  # the reload waits at the gate, the recall did not
    assert {h.memory.id for h in hits}.isdisjoint(hot.facts[:2]) and hot.facts[3] in {h.memory.id for h in hits}
    opened.set()
    assert hot.cache.idle(30)
    version, _ = core.store.namespace_state(NS)
    assert hot.cache.get(NS, version) is not None
    again = hot.recall(NS, ["煤球 咖啡 Paris"], params=RecallParams(k=5), now=now)
    assert [h.memory.id for h in again] == [h.memory.id for h in hits]
