"""Maintenance hands the C heap's free pages back to the system (``release_free_heap``:
glibc's ``malloc_trim``), so RSS does not keep every worker thread's arena at its peak."""

from __future__ import annotations

import platform

import pytest

from gateway.maintenance import release_free_heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_heap_is_released_on_glibc():
    """After freeing ~40 MB of small buffers (zh and en text), the call reaches malloc_trim and says so,
    each time it is called."""
    blocks = [("记忆 memory 🧠 " * 40).encode() + bytes(i % 251 for _ in range(8)) for i in range(40_000)]
    assert len(blocks) == 40_000
    del blocks
    assert release_free_heap() is True
    assert release_free_heap() is True


_PROBE = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "held":
    from gateway.maintenance import fix_heap_thresholds
    assert fix_heap_thresholds()
libc.free(libc.malloc(8 * 2**20))  # above any threshold: a mapping of its own, freed
before = libc.mallinfo2().hblkhd
blocks = [libc.malloc(2**20) for _ in range(4)]
mapped = libc.mallinfo2().hblkhd - before
for b in blocks:
    libc.free(b)
print(mapped, libc.mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_a_freed_big_buffer_does_not_move_the_mmap_threshold():
    """M1 of the soak (issue 41): after a freed 8 MiB mapped buffer glibc served the next 1 MiB buffers from
    its arenas (its moving mmap threshold), whose free tops stay resident; with the thresholds held each
    is a mapping of its own, given back whole when freed. In fresh interpreters: a test process's heap has
    free chunks of its own that would serve the buffers whatever the threshold."""
    import subprocess
    import sys
    from pathlib import Path

    def run(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[2])
        mapped, left = out.stdout.split()
        return int(mapped), int(left)

    assert run("moving")[0] == 0  # glibc's own behaviour: the threshold moved past 1 MiB
    mapped, left = run("held")
    assert mapped >= 4 * 2**20 and left == 0


def test_heap_thresholds_must_be_positive():
    from gateway.maintenance import fix_heap_thresholds

    with pytest.raises(ValueError):
        fix_heap_thresholds(0, 1)


_ARENAS_PROBE = """
import ctypes, os, sys, threading
if sys.argv[1] == "limited":
    from gateway.maintenance import limit_heap_arenas
    assert limit_heap_arenas(2)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
together = threading.Barrier(13)
def work():
    libc.malloc(1024)  # the thread's first allocation: glibc picks its heap
    together.wait()  # alive together, so none hands its heap to the next
    together.wait()
threads = [threading.Thread(target=work) for _ in range(12)]
for t in threads:
    t.start()
together.wait()
os.dup2(1, 2)  # malloc_stats writes to stderr: one "Arena N:" block a heap
libc.malloc_stats()
together.wait()
for t in threads:
    t.join()
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_ARENA_MAX is glibc's")
def test_threads_share_the_limited_heaps():
    """Issue 41's soak: every thread that allocates gets a glibc heap of its own up to 8 per core (LanceDB's
    runtime alone filled the 16 of 2 cores), each keeping its own fragments; limited before the threads
    start, 12 threads share 2. In fresh interpreters: glibc fixes its limit at the 9th heap."""
    import subprocess
    import sys
    from pathlib import Path

    def heaps(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _ARENAS_PROBE, mode], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[2])
        return out.stdout.count("Arena ")

    assert heaps("default") >= 9  # glibc's own: a heap a thread, past 8
    assert heaps("limited") == 2


def test_heap_arenas_must_be_at_least_one():
    from gateway.maintenance import limit_heap_arenas

    with pytest.raises(ValueError):
        limit_heap_arenas(0)
