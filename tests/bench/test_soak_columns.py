"""The soak's allocator columns (``bench.soak``) follow what the process allocates."""

from __future__ import annotations

import platform
import sqlite3

import pytest

from bench.soak import native_mib, python_heap_mib


def test_python_heap_counts_small_objects():
    """~40 MiB of small objects (zh and en strings, 64-byte tuples) show in pymalloc's objects and arenas."""
    arenas0, objects0 = python_heap_mib()
    held = [(f"记忆 memory {i}", i) for i in range(300_000)]
    arenas1, objects1 = python_heap_mib()
    assert len(held) == 300_000
    assert objects1 - objects0 > 20  # MiB: each string and tuple is under pymalloc's 512-byte limit
    assert arenas1 >= objects1 and arenas1 - arenas0 > 20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")
def test_native_columns_follow_malloc_and_sqlite():
    """A 16 MiB bytes object is malloc's (over pymalloc's limit); an in-memory SQLite table is SQLite's."""
    used0, _free, sqlite0 = native_mib()
    block = bytes(16 * 2**20)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("记忆 memory " * 8,)] * 20_000)
    used1, _free, sqlite1 = native_mib()
    assert len(block) == 16 * 2**20
    assert used1 - used0 >= 16
    assert sqlite1 - sqlite0 > 1
    conn.close()
