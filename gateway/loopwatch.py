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
A loop that is waiting for I/O — its thread inside the selector's poll — is
idle, not stalled: the watch sees that in the thread's frame and leaves it
asleep; it asks a busy loop for one callback per ``every_s``. (Waking an idle
loop four times a second cost 0.35 ms of loop CPU a second on 2 shared cores,
measured 2026-12-06.)
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
        waiting = _poll_code(loop)
        while not self._stop.wait(self.every_s):
            if waiting is not None:
                frame = sys._current_frames().get(ident)
                if frame is not None and frame.f_code is waiting:
                    continue  # asleep in the poll for I/O: idle, and a callback would only wake it
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


def _poll_code(loop: asyncio.AbstractEventLoop):
    """The code of the Python frame ``loop``'s thread is in while it waits for I/O
    (its selector's ``select``, around the poll itself); None for a loop without a
    Python selector (uvloop): every tick then asks it for a callback."""
    selector = getattr(loop, "_selector", None)
    select = getattr(type(selector), "select", None)
    return getattr(select, "__code__", None)
