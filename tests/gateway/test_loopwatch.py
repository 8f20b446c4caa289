"""The event loop's watchdog (issue 26 item 6): a loop blocked past the bound is
logged with the frames that block it, then with how long it took; a loop that
keeps running is not, and an idle one is not woken."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gateway.loopwatch import LoopWatch


def _blocking_lazy_load() -> None:
    time.sleep(0.6)  # what an import on the loop does to every other request


def test_a_stalled_loop_is_logged_with_the_blocking_frames(caplog):
    """The loop blocked 0.6 s (bound 0.2 s): one WARNING whose stack names the blocking function, then the
    stall's length; the watchdog counts it."""
    watch = LoopWatch(0.2, every_s=0.05)

    async def main() -> None:
        watch.start()
        await asyncio.sleep(0.2)
        _blocking_lazy_load()
        await asyncio.sleep(0.3)
        await asyncio.to_thread(watch.stop)

    with caplog.at_level("WARNING", logger="gateway.loopwatch"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert any("stalled" in m and "_blocking_lazy_load" in m for m in messages), messages
    assert any("ran again after" in m for m in messages)
    assert watch.stalls == 1 and 0.4 <= watch.longest_s < 5


def test_a_loop_that_keeps_running_is_not_reported(caplog):
    """Awaiting (not blocking) for 0.5 s with a 0.2 s bound logs nothing."""
    watch = LoopWatch(0.2, every_s=0.05)

    async def main() -> None:
        watch.start()
        await asyncio.sleep(0.5)
        await asyncio.to_thread(watch.stop)

    with caplog.at_level("WARNING", logger="gateway.loopwatch"):
        asyncio.run(main())
    assert not caplog.records and watch.stalls == 0


def test_bounds_must_be_positive():
    """A zero or negative bound is refused (the setting's 0 means: no watchdog)."""
    with pytest.raises(ValueError):
        LoopWatch(0)
    with pytest.raises(ValueError):
        LoopWatch(1.0, every_s=-1)


def test_an_idle_loop_is_left_asleep():
    """A loop waiting for I/O (an await with nothing due) for 0.5 s gets (almost) no callback from its watch
    (every 0.02 s: 25 ticks; a few allowed where a loaded machine has the loop still busy at a tick): it is
    idle, and waking it would cost a wake-up per tick."""
    watch = LoopWatch(0.2, every_s=0.02)
    posted: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        inner = loop.call_soon_threadsafe

        def counted(callback, *args, **kwargs):
            if threading.current_thread().name == "huiyi-loop-watch":
                posted.append(callback)
            return inner(callback, *args, **kwargs)

        loop.call_soon_threadsafe = counted
        watch.start()
        await asyncio.sleep(0.1)
        posted.clear()
        await asyncio.sleep(0.5)
        await asyncio.to_thread(watch.stop)

    asyncio.run(main())
    assert len(posted) <= 3 and watch.stalls == 0, posted
