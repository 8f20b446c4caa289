"""The maintenance task of a serving gateway: the background work the app (and
an embedding host: ``gateway.huiyi_nonebot``, the NoneBot plugin's and the
Python client's embedded modes) starts beside the turns, and stops with them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.pipeline import Pipeline

__all__ = ["maintenance", "release_free_heap", "fix_heap_thresholds", "limit_heap_arenas", "MAINTAIN_EVERY_S",
           "OPTIMIZE_EVERY_S", "OPTIMIZE_AFTER_WRITES", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "ARENA_MAX"]

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 15.0
OPTIMIZE_EVERY_S = 600.0
OPTIMIZE_AFTER_WRITES = 32
MMAP_THRESHOLD = 128 * 1024
"""Bytes from which glibc serves an allocation with a mapping of its own, returned
whole when it is freed (``fix_heap_thresholds``): glibc's initial value, held."""
TRIM_THRESHOLD = 128 * 1024
"""Free bytes at the top of a glibc heap from which ``free`` gives them back: glibc's initial value, held."""
ARENA_MAX = 2
"""glibc heaps (arenas) the process's threads share at most (``limit_heap_arenas``); glibc's own
limit is 8 per core, reached by LanceDB's runtime threads alone."""


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim(0)``, every
    arena, free pages inside the heap too); True when it did, False where the C
    library is not glibc. The turns' worker threads each allocate in a glibc arena
    of their own; what they free stays in it, so without this the gateway's RSS kept
    the high-water mark of every arena, and rose with fragmentation under load."""
    global _trim
    if _trim is None:
        import ctypes
        import ctypes.util

        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _trim = libc.malloc_trim
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _trim = False
    if _trim is False:
        return False
    _trim(0)
    return True


_trim = None  # glibc's malloc_trim once looked up; False: not glibc

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h


def _mallopt():
    """glibc's ``mallopt(int, int) -> int`` through ctypes, or None where the C library has none."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def limit_heap_arenas(arenas: int = ARENA_MAX) -> bool:
    """Let the process's threads share at most ``arenas`` glibc heaps (``mallopt``'s
    ``M_ARENA_MAX``, as the ``MALLOC_ARENA_MAX`` environment variable would at exec);
    True when glibc took it, False where the C library is not glibc or refused it.
    glibc gives each new thread a heap of its own until 8 per core: LanceDB's runtime
    (its workers and blocking-I/O threads, 25–62 of them under the soak's load),
    onnxruntime's and the turns' worker threads filled all 16 on 2 cores, and each
    heap keeps what its threads freed fragmented between the blocks still in use,
    which ``malloc_trim`` returns only page by page. Effective only before the
    process has made more than 8 heaps (glibc fixes its limit when it makes the
    9th): call it before the threads start, as ``gateway.service.build_core``
    does before the embedder and the index open. Raises ValueError for fewer than 1."""
    if arenas < 1:
        raise ValueError("arenas must be >= 1")
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, arenas))


def fix_heap_thresholds(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Hold glibc's mmap and trim thresholds (bytes) where they are set, instead of
    letting glibc raise them; True when it did, False where the C library is not
    glibc or refused a value. Once a mapped block is freed, glibc raises its mmap
    threshold to that block's size (up to 32 MiB) and its trim threshold to twice
    that, for good: LanceDB and Arrow free a buffer of a few MiB at every index
    write or search, so from then on such buffers were carved from the worker
    threads' arenas, whose free tops ``malloc_trim`` does not return (it trims
    only the main arena's). The gateway's RSS then grew with every stored memory
    (a loop of single-row index writes: +33 MiB per 1,000 writes with glibc's
    moving thresholds, +7.5 MiB held at 128 KiB). Setting either value turns the
    moving thresholds off (``mallopt``). Call it once, before the load: the app
    does when its maintenance task starts. Raises ValueError for a threshold that
    is not positive."""
    if mmap_threshold <= 0 or trim_threshold <= 0:
        raise ValueError("heap thresholds must be > 0 bytes")
    mallopt = _mallopt()
    if mallopt is None:
        return False
    # mallopt answers 1 on success, 0 on a refused value
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) & bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))


async def maintenance(pipeline: Pipeline) -> None:
    """The maintenance task of a serving pipeline, every MAINTAIN_EVERY_S seconds
    until cancelled. Off the hot path: resume captures a crash or failure left pending
    (``CaptureQueue.resume``); apply pending index writes; optimize (compact fragments,
    fold new rows into the indices) every OPTIMIZE_EVERY_S seconds, or sooner once
    OPTIMIZE_AFTER_WRITES index writes have piled up (each write is a fragment and
    an unoptimized table makes every search slower); prune the nonces of signed
    callbacks that no replay window reaches any more (``Nonces.prune``); start
    the sleep consolidation of idle people and the dormancy sweep in a task of
    their own unless the last pass still runs (``ConsolidationScheduler.start``,
    ``memory.consolidate``); start
    the index's rebuild from SQL again when the one begun at start-up (a missing
    or unreadable index, ``MemoryCore``) failed, and begin one when the index
    vanished or became unreadable while serving (``MemoryCore.check_index``);
    return the C heap's free pages to the system (``release_free_heap``).
    Before the first pass it holds glibc's heap thresholds (``fix_heap_thresholds``).
    Cancelling it cancels the
    consolidation pass it started (``ConsolidationScheduler.stop``)."""
    try:
        if not fix_heap_thresholds():
            log.info("heap thresholds left to the C library (not glibc)")
    except Exception as exc:  # noqa: BLE001 - memory use only: serve all the same
        log.warning("fixing the heap thresholds: %s", exc)
    try:
        await _maintain_forever(pipeline)
    finally:  # cancelled with the app: a consolidation pass it started goes too
        await pipeline.consolidation.stop()


async def _maintain_forever(pipeline: Pipeline) -> None:
    """``maintenance``'s loop."""
    last_opt = asyncio.get_running_loop().time()
    while True:
        await asyncio.sleep(MAINTAIN_EVERY_S)
        if pipeline.core.start_rebuild():  # a rebuild of a missing or unreadable index failed: again
            log.warning("index: not ready; rebuilding it from SQL again")
        try:  # an index directory deleted or damaged while serving: rebuilt now, not at the next restart
            await asyncio.to_thread(pipeline.core.check_index)
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("checking the index: %s", exc)
        try:
            await pipeline.captures.resume()
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("resuming pending captures: %s", exc)
        try:  # in a task of its own: a long run never delays the index maintenance below
            pipeline.consolidation.start()
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("starting consolidation: %s", exc)
        try:  # recall's access times and co-recall links held in memory (memory.marks), once their window passed
            await asyncio.to_thread(pipeline.core.flush_marks, due_only=True)
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("writing recall marks: %s", exc)
        try:
            await asyncio.to_thread(pipeline.nonces.prune)
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("pruning callback nonces: %s", exc)
        try:  # what the turns freed goes back to the system (glibc keeps it in its arenas)
            await asyncio.to_thread(release_free_heap)
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("releasing free heap: %s", exc)
        try:
            await asyncio.to_thread(pipeline.core.maintain)
            now = asyncio.get_running_loop().time()
            if (now - last_opt >= OPTIMIZE_EVERY_S
                    or pipeline.core.index.writes_since_optimize >= OPTIMIZE_AFTER_WRITES):
                await asyncio.to_thread(pipeline.core.index.optimize)
                last_opt = now
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("index maintenance: %s", exc)
