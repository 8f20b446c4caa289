"""A watchdog for the event loop: a stall is logged with what the loop was
doing (issue 26 item 6).

Everything a turn does that blocks — a lazy import, a model load, a
synchronous database or file call — belongs in a worker thread or at start-up
(``gateway.warmup``); when something slips through, every request of the
process waits, ``/healthz`` included, and nothing says why. ``LoopWatch`` is a
daemon thread that asks the loop to run a no-op every ``every_s`` seconds; when
the loop has not run it ``warn_s`` seconds later, it logs one WARNING with the
loop thread's current stack (``sys._current_frames``), the frames that block
it, and once the loop answers again, one more line with the stall's length.
It costs one callback per ``every_s`` on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

__all__ = ["LoopWatch"]

log = logging.getLogger(__name__)


class LoopWatch:
    """Watch ``loop`` (running in the thread that calls ``start``) from a daemon
    thread: a no-op every ``every_s`` seconds, a WARNING with the loop thread's
    stack when it has not run within ``warn_s`` seconds (module docstring).
    ``stalls``: how many were seen; ``longest_s``: the longest, in seconds.
    Raises ValueError when ``warn_s`` or ``every_s`` is not positive."""

    def __init__(self, warn_s: float, every_s: float = 0.25) -> None:
        if warn_s <= 0 or every_s <= 0:
            raise ValueError("warn_s and every_s must be > 0")
        self.warn_s = warn_s
        self.every_s = every_s
        self.stalls = 0
        self.longest_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching the running loop; call it on the loop's thread."""
        loop = asyncio.get_running_loop()
        ident = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, args=(loop, ident), name="huiyi-loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (returns within ``every_s`` + ``warn_s`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.every_s + self.warn_s + 1.0)

    def _watch(self, loop: asyncio.AbstractEventLoop, ident: int) -> None:
        while not self._stop.wait(self.every_s):
            ran = threading.Event()
            t0 = time.monotonic()
            try:
                loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop is closed
                return
            if ran.wait(self.warn_s):
                continue
            frame = sys._current_frames().get(ident)
            stack = "".join(traceback.format_stack(frame, limit=30)) if frame is not None else "(no frame)\n"
            log.warning("event loop stalled for over %.1f s; the loop thread is at:\n%s", self.warn_s, stack)
            while not ran.wait(1.0):
                if self._stop.is_set() or loop.is_closed():
                    return
            took = time.monotonic() - t0
            self.stalls += 1
            self.longest_s = max(self.longest_s, took)
            log.warning("event loop ran again after %.1f s", took)
