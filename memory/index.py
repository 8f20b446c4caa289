"""The LanceDB search index: derived data, rebuilt from SQL at will.

One table ``memories`` with one row per live memory:

============  ==========================================================
id            memory id (12 hex chars)
namespace     ``tenant/subject`` — BITMAP scalar index; every search is
              prefiltered on it (vector and full-text side alike)
visibility    ``private`` | ``group``
origin        group chat key (``tg:group:-100…``) for group memories, else ""
tokens        ``memory.text.fts_text`` — FTS index, whitespace tokenizer,
              no stemming/lower-casing/stopwords (the tokens are ours)
vector        embedding, float32[dim], L2-normalised (cosine = 1 - d²/2)
============  ==========================================================

Filters are built only from validated values (``Namespace``, ``ChatRef``,
hex ids) and every search uses ``where(..., prefilter=True)``: a post-filter
would both leak work across namespaces and return too few rows.

Vector search is flat (exact) until the table holds ``ANN_MIN_ROWS`` rows;
from then on ``optimize`` (maintenance, a full rebuild) builds an ANN index on
``vector`` (``ANN_INDEX``, L2 on the unit vectors, ⌈√rows⌉ partitions up to
``ANN_MAX_PARTITIONS``), and later optimizes fold new rows into it (rows not
yet in it are searched flat, so a new memory is found at once). A search
through it computes quantised distances to every row of the ``ANN_NPROBES``
partitions nearest the query and keeps those of the namespace (the prefilter
is an allow-list handed to the index: its cost is the partitions' rows, not
the namespace's), takes the best ``k × ANN_REFINE`` as candidates and re-ranks
them by their exact distances (``refine_factor``): the scores returned are
exact cosines, only the choice of candidates is approximate. A namespace (or
its disclosure in a group) too thin to fill ``k`` hits from those partitions
is searched again flat — exact, and cheap because few rows pass its filter.
LanceDB's dynamic probing (``maximum_nprobes`` above the minimum, or 0)
searched every partition under a prefilter in lancedb 0.40 (``analyze_plan``
on the bench's 1M store: 1.0M distances per query against 254k at 20 of 128
partitions, whether the namespace held 99 rows or 10k), so the probes are
fixed. Recall reaches the index only for namespaces above ``EXACT_MAX``
that its cache cannot hold (``memory.recall``); ``bench speed`` prints the
recall@10 of this search against the exact one.

The embedder's model name and dimension are stored in the table's schema
metadata (which travels with an ``s3://`` table) and, for a local index, in
``index_meta.json`` beside it; opening the index with a different embedder
drops it and marks it for re-embedding (``needs_rebuild``) instead of
failing — so every process on one index must use the same embedder.

Deleting a row in Lance only writes a deletion vector: the row's tokens and
vector stay in the fragment's data file, and every older table version keeps
its files, until compaction rewrites the fragment and cleanup removes the old
versions. ``purge()`` does both at once (compaction that materialises *every*
deletion — Lance's default only rewrites fragments with more than 10 %
deleted rows — then removal of all older versions, with the FTS and scalar
indices rebuilt over the compacted data and the vector index, when there is
one, rewritten without the deleted rows). A forget runs it (memory.core), so
afterwards no file under the index holds the forgotten text. It needs the
``pylance`` package (``Table.to_lance()``). Another *process* still reading an
older version at that moment sees one failed search (its recall degrades to
no recollection); searches in this process wait for the purge instead.

Several processes on one index (gateway replicas sharing the data root, or a
gateway and the operator CLI). Lance commits a write by putting the next
manifest only if no other writer put it first (on a local or network file
system: write a temporary manifest, rename it without replacing; object stores:
a conditional put) and retries or rebases a commit that lost the race
(``lance_table::io::commit``), so concurrent writers do not overwrite each
other's versions, and cleanup leaves files of a write still in progress
alone. Two things are still ours to order: a purge's compaction loses its
commit to a concurrent delete of the same fragments ("Rewrite transaction was
preempted", seen with two handles and no lock) and its cleanup with no age
limit pulls old versions from under another process's reads; and a write
must not put an older SQL state over a newer one that another process wrote
meanwhile. So every
index write of this class holds an exclusive ``flock`` on ``.write.lock`` in
the index directory (``writing()``, re-entrant in one process), and
``MemoryCore.maintain`` holds it around the whole pass: read the outbox and the
live rows from SQL, write the index, clear the ops. The SQL outbox stays the
source of truth: a failed or lost index write is re-applied by the next
maintenance pass of any process. Reads see other processes' writes at once
(``read_consistency_interval`` 0: each search checks for a newer version, one
small file listing). On object storage (``s3://…``) there is no file to lock,
so the lock against other processes is the one passed as ``write_lock``: on
PostgreSQL ``Store.index_write_lock`` (``gateway.service.index_writers``), a
transaction-scoped advisory lock taken per write pass — the whole of
``MemoryCore.maintain`` or one write method outside it — and released when
the pass ends or the holder's connection drops (a killed writer hands it over
as soon as the server sees its socket close; nothing to expire). One replica
writes at a time, each write pass costs one extra round trip, and the replica
that stored a capture has it in the index when its write pass returns; the
others see it at their next search (the version check above), and recall
re-reads every hit from SQL, so a stale index can miss a new memory for one
read but never serve a forgotten one (docs/DESIGN.md, "Several hosts"). Over
SQLite an object-store index has no lock but this process's: one gateway
process writes there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memory.embed import Embedder
from memory.errors import NamespaceError, SearchIndexError
from memory.text import TOKENS_VERSION
from memory.types import ChatRef, Memory, Namespace, Visibility

if TYPE_CHECKING:
    from memory.store import MemoryText

__all__ = ["text_hash", "SearchIndex", "IndexHit", "ANN_MIN_ROWS", "use_system_allocator"]

log = logging.getLogger(__name__)

TABLE = "memories"
SCHEMA = 2
"""Version of the index table's columns (2: ``text_hash``); an index without the
current columns is rebuilt from SQL when it is opened."""
VECTOR_CACHE = 4096
"""Embeddings kept in process, keyed by the hash of the text they embed (about
1.8 KiB each for e5-small's 384 dimensions): a line's query vector, reused by
the turns it stays in its chat's tail and as its capture's document vector
(``reuse_query_vectors``), and a new memory's document vector, read again when
recall's cache appends the memory to its view. Those reuses come within the
capture queue's bound (``MAX_QUEUED`` turns) and a few turns of each chat:
a 50-chat soak found 73.5% of its lookups here at 2,048 as at 20,000 (52.4% at
256). Recall of a namespace whose view is loading reads the rest from the index
rows (``vectors``' ``fetch``)."""
INDEX_CACHE_MIB = 64.0
"""Default bound, in MiB, of LanceDB's own caches in this process (``SearchIndex``'s
``cache_mib``): three quarters for its index cache (the full-text, scalar and
vector indices' parts), a quarter for its metadata cache (manifests, fragment and
file metadata). Each write commits a new table version whose manifest and
fragment metadata a search then reads; LanceDB's defaults (GiBs) keep every
version read, so a process that stores memories grew by tens of KiB a stored
memory, without end. Bounded, what is evicted is read again from the index
directory when a search needs it."""
ANN_MIN_ROWS = 100_000
"""Rows from which ``optimize`` builds the ANN vector index (``SearchIndex``'s
``ann_min_rows``). Below it every vector search stays flat and exact: it reads
only the namespace's own vectors (the prefilter), and a namespace big enough
to reach the index (above ``EXACT_MAX``, not in the cache) is then a large
share of a small table, while the index's training (k-means over the
partitions) costs a minute or more of a small machine's CPU at every full
rebuild. From here up it pays: the vector channel of a 10k namespace took
106 ms p50 flat against 18 ms through the index at 100k rows, 144 ms against
25 ms at 1M, recall@10 1.000 against the flat search (``bench speed``, 2 cores
at load average 2.4–3.2)."""
ANN_INDEX = "IVF_SQ"
"""The vector index type (LanceDB ``create_index(index_type=…)``): IVF partitions
of 8-bit scalar-quantised vectors. Its quantiser trains in a pass (a min and max
per dimension) where PQ's k-means codebooks doubled the build (measured once:
100k rows, 100 partitions, 2 loaded cores, 165 s against 325 s); the
quantised distances only pick the candidates, ``ANN_REFINE`` re-ranks them
exactly."""
ANN_MAX_PARTITIONS = 128
"""At most this many IVF partitions (else ⌈√rows⌉). k-means trains on 256 rows per
partition against every centroid, so its cost grows with the partitions'
square: 128 partitions took 54–177 s here (1M and 100k rows, as the load
varied); ⌈√1M⌉ = 1000 would take some 60 times as long. With 128 a 10k-memory
namespace in a 1M table still has ~80 rows in each partition."""
ANN_NPROBES = 20
"""IVF partitions searched per query: 20 of 128 hold ~1,500 rows of a 10k-memory
namespace in a 1M table, enough for ``k × ANN_REFINE`` candidates at recall's
40 per channel."""
ANN_REFINE = 10
"""Candidates per hit re-ranked with exact distances (``refine_factor``)."""
_ID_RE = re.compile(r"[0-9a-zA-Z_-]{1,32}")
_SAFE_RE = re.compile(r"[A-Za-z0-9_.@:/-]{1,300}")


def text_hash(text: str) -> str:
    """First 16 hex digits of the SHA-256 of ``text`` exactly as embedded: ties an
    index row's vector (and a cached one) to the text version it was made from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _precision(embedder) -> str:
    """Which vectors an embedder stores documents as: the ``memory.embed.vector_family``
    of its ``document_precision`` (e5-small's ``E5_PRECISIONS``: q4 and the reference
    make the same vectors, int8 others); ``reference`` for a model without one.
    Recorded in ``index_meta.json``; a missing entry (an index written before) is
    ``reference``."""
    from memory.embed import vector_family

    return vector_family(str(getattr(embedder, "document_precision", "reference")))


def _ranked(rows: list[dict], ns: Namespace, column: str, score: Callable[[float], float]) -> list[IndexHit]:
    """A search's rows as hits, best first, ranked from 1: only rows of ``ns``, and
    each id once (its first row: an append that met a row already written leaves
    two, ``SearchIndex.upsert``). ``score`` maps the row's ``column`` (0 absent)."""
    out: list[IndexHit] = []
    seen: set[str] = set()
    for r in rows:
        if r["namespace"] == str(ns) and r["id"] not in seen:
            seen.add(r["id"])
            out.append(IndexHit(r["id"], len(out) + 1, score(float(r.get(column, 0.0)))))
    return out


def _lit(value: str) -> str:
    """Quote a validated value for a Lance filter; raises NamespaceError otherwise."""
    if not _SAFE_RE.fullmatch(value):
        raise NamespaceError(f"unsafe filter value {value!r}")
    return f"'{value}'"


class _Text:
    """A text to embed as a document, without a memory around it (``SearchIndex.embed_ahead``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


@dataclass(frozen=True, slots=True)
class IndexHit:
    """A raw channel hit: memory id, 1-based rank and the channel's raw score
    (BM25 score, or cosine similarity in [-1, 1] for vectors)."""

    id: str
    rank: int
    score: float


class _SharedExclusive:
    """A small readers-writer lock: many searches at once, a purge alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    def acquire_shared(self) -> None:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1

    def release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True
            while self._readers:
                self._cond.wait()

    def release_exclusive(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


class _WriteLock:
    """The index's write lock, shared by the threads of this process: re-entrant
    (a depth count under ``mutex``); on the first entry it enters ``outer()``, the
    lock against other processes, and leaves it on the last. ``outer`` None: the
    in-process mutex alone (one process on the index)."""

    def __init__(self, outer: Callable[[], contextlib.AbstractContextManager] | None,
                 mutex: threading.RLock) -> None:
        self._outer = outer
        self._mutex = mutex
        self._depth = 0
        self._held: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._mutex:
            if self._depth == 0 and self._outer is not None:
                stack = contextlib.ExitStack()
                stack.enter_context(self._outer())
                self._held = stack
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._held is not None:
                    held, self._held = self._held, None
                    held.close()


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created when missing) until the block
    ends: the cross-process write lock of a local or network file system index.
    Closing the descriptor releases it, also when the process dies. Not POSIX
    (no ``fcntl``): no lock, one process per index."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def use_system_allocator() -> str:
    """Make pyarrow allocate its buffers with the C library's ``malloc`` (its
    "system" pool) instead of its bundled mimalloc, for this whole process; returns
    the pool's backend name. pyarrow's buffers here (the rows of every index
    write, the columns a search converts) are freed from other threads than the
    one that made them (LanceDB's), and mimalloc kept what was freed so inside
    its 1 GiB arena: the gateway's RSS grew with every stored memory (a capture-heavy
    in-process run: 68 KiB a memory with mimalloc, 21 KiB with the system pool;
    the soak's M1, issue 41), where ``malloc``'s free pages go back to the system
    (``gateway.maintenance``). Idempotent; buffers made before keep their pool."""
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name


def is_object_store(uri: str) -> bool:
    """Whether an index location is an object-store URI (``s3://bucket/prefix``)
    rather than a directory."""
    return "://" in uri


class SearchIndex:
    """LanceDB index under ``path`` (a directory or an ``s3://`` URI) for one embedder.

    ``ann_min_rows``: rows from which ``optimize`` builds the ANN vector index
    (``ANN_MIN_ROWS``; tests lower it). Thread-safe: writes are serialised by a
    lock. Raises SearchIndexError on LanceDB failures.
    """

    reuse_query_vectors: bool = False
    """Whether ``vectors`` gives a memory stored as it was said a vector made from
    its turn's cached query vector instead of embedding the text as a document (one
    model call a captured line, not two: ~11 ms of CPU saved a line stored as said):
    the embedder's ``document_from_query`` (e5-small: a linear map fitted on dev chat
    lines, cosine 0.984 to the document vector on held-out ones,
    ``memory.embed.E5_QUERY_MAP``); an asymmetric embedder without one embeds the
    document. The query vector itself is never stored: with e5 a text's query side
    made its memory stand out for unrelated lines. Off: through the map, unrelated
    chit-chat injected as often as without it (29 against 30 of 436 negative turns)
    and DuLeMon found more (held out 0.440 against 0.360), but LoCoMo's held-out
    any@10 fell by 0.006 (0.801 / 0.800 → 0.794 / 0.795 in two runs), over the
    0.005 a change may cost (docs/recall.md, "A line stored as it was said")."""

    def __init__(self, path: str | Path, embedder: Embedder, *, ann_min_rows: int = ANN_MIN_ROWS,
                 storage_options: dict[str, str] | None = None,
                 write_lock: Callable[[], contextlib.AbstractContextManager] | None = None,
                 cache_mib: float = INDEX_CACHE_MIB) -> None:
        """``storage_options``: LanceDB's object-store options for an ``s3://`` path
        (``endpoint``, ``region``, ``aws_access_key_id``, ``aws_secret_access_key``,
        ``allow_http``; unset ones come from the ``AWS_*`` environment).
        ``write_lock``: the lock against other processes' index writes, entered
        around each write (``Store.index_write_lock`` on PostgreSQL); None → an
        ``flock`` in the directory for a local path, and for an object store the
        in-process lock alone (one writing process: module docstring).
        ``cache_mib``: the bound of LanceDB's caches for this index, in MiB
        (``INDEX_CACHE_MIB``; ``cache_bytes`` says what they hold). Raises
        ValueError when it is not positive. Opening one makes pyarrow allocate
        with ``malloc`` process-wide (``use_system_allocator``)."""
        import lancedb

        if cache_mib <= 0:
            raise ValueError("cache_mib must be > 0")
        use_system_allocator()  # before the first table is read or written

        self.path = str(path)
        self.embedder = embedder
        self.ann_min_rows = ann_min_rows
        self._lock = threading.RLock()
        self.remote = is_object_store(self.path)
        if write_lock is None and not self.remote:
            lock_file = Path(self.path) / ".write.lock"
            write_lock = lambda: file_lock(lock_file)  # noqa: E731
        self._file_lock = _WriteLock(write_lock, self._lock)
        #: index writes since the last optimize: each write is a new fragment, and
        #: searches slow down with the fragment count (maintenance compacts early)
        self.writes_since_optimize = 0
        self._files = _SharedExclusive()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._vectors_lock = threading.Lock()
        #: document vectors made from a cached query vector (``reuse_query_vectors``) since opening
        self.reused_query_vectors = 0
        try:
            # 0: every read checks for a version another process committed (module docstring)
            cap = int(cache_mib * 2**20)
            self._session = lancedb.Session(index_cache_size_bytes=cap - cap // 4, metadata_cache_size_bytes=cap // 4)
            self._db = lancedb.connect(self.path, read_consistency_interval=timedelta(0),
                                       storage_options=dict(storage_options or {}) or None, session=self._session)
            self.needs_rebuild = False
            with self.writing():  # two processes opening an empty index create its table once
                self._table = self._open_or_create()
        except Exception as exc:
            raise SearchIndexError(f"cannot open index at {self.path}: {exc}") from exc

    # -- schema ---------------------------------------------------------

    def _meta_path(self) -> Path | None:
        return None if self.remote else Path(self.path) / "index_meta.json"

    def _meta(self) -> dict:
        """What this index records of its making: the embedder's model name,
        dimension and document precision, the table's schema and the token version. Kept in the table's
        Arrow schema metadata (key ``huiyi``), which travels with the table to an
        object store, and, for a local index, also in ``index_meta.json``."""
        return {"model": self.embedder.name, "dim": self.embedder.dim, "schema": SCHEMA, "tokens": TOKENS_VERSION,
                "precision": _precision(self.embedder)}

    @staticmethod
    def _table_meta(table) -> dict:
        """The ``huiyi`` entry of a table's schema metadata; {} when absent or unreadable."""
        try:
            raw = (table.schema.metadata or {}).get(b"huiyi")
            meta = json.loads(raw) if raw else {}
            return meta if isinstance(meta, dict) else {}
        except (ValueError, AttributeError):
            return {}

    def _read_meta(self) -> dict:
        """``index_meta.json`` as a dict; {} when it is missing or unreadable (the
        table is then treated as written by another embedder: re-embedded)."""
        p = self._meta_path()
        try:
            if p is not None and p.exists():
                meta = json.loads(p.read_text())
                return meta if isinstance(meta, dict) else {}
        except (OSError, ValueError) as exc:
            log.warning("index: %s is unreadable (%s)", p, exc)
        return {}

    def _write_meta(self) -> None:
        p = self._meta_path()
        if p is not None:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(self._meta()))

    def _schema(self):
        import pyarrow as pa

        return pa.schema([
            pa.field("id", pa.string()),
            pa.field("namespace", pa.string()),
            pa.field("visibility", pa.string()),
            pa.field("origin", pa.string()),
            pa.field("tokens", pa.string()),
            pa.field("text_hash", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), self.embedder.dim)),
        ], metadata={b"huiyi": json.dumps(self._meta()).encode()})

    def _open_or_create(self):
        """The table, opened or (missing, unreadable, or written for another
        embedder or schema) created empty. ``needs_rebuild`` says when rows were
        dropped; ``created`` when the table is new (a missing one included: the
        caller compares it with SQL, ``MemoryCore``)."""
        meta = self._read_meta()
        self.created = False
        if TABLE in self._table_names():
            try:
                table = self._db.open_table(TABLE)
                dim = table.schema.field("vector").type.list_size
                names = table.schema.names
                self._probe(table)
                if not meta:  # an object store keeps no file beside the table: its schema says
                    meta = self._table_meta(table)
            except Exception as exc:  # noqa: BLE001 - a corrupt manifest, fragment or index: derived data
                log.warning("index: table %r at %s is unreadable (%s: %s); it is replaced by an empty one and "
                            "rebuilt from SQL", TABLE, self.path, type(exc).__name__, exc)
                self._drop()
                self.needs_rebuild = True
            else:
                if meta.get("model") != self.embedder.name or dim != self.embedder.dim:
                    log.warning("index: embedder changed (%s/%s → %s/%s); the index will be re-embedded from SQL",
                                meta.get("model"), dim, self.embedder.name, self.embedder.dim)
                    self._drop()
                    self.needs_rebuild = True
                elif meta.get("precision", "reference") != _precision(self.embedder):
                    # vectors of two precisions never share a table: cosines across them are not comparable
                    log.warning("index: documents embedded at precision %s, this embedder makes %s; the index "
                                "will be re-embedded from SQL", meta.get("precision", "reference"),
                                _precision(self.embedder))
                    self._drop()
                    self.needs_rebuild = True
                elif meta.get("tokens", 1) != TOKENS_VERSION:
                    log.warning("index: full-text tokens of version %s, this huiyi makes %s; it will be rebuilt "
                                "from SQL", meta.get("tokens", 1), TOKENS_VERSION)
                    self._drop()
                    self.needs_rebuild = True
                elif "text_hash" not in names:
                    log.warning("index: written by an older huiyi (no text_hash column); it will be rebuilt from SQL")
                    self._drop()
                    self.needs_rebuild = True
                else:
                    self._ensure_id_index(table)
                    return table
        else:
            self._drop()  # a directory the table list does not show (a half-deleted table) goes too
        table = self._db.create_table(TABLE, schema=self._schema())
        self._create_indices(table)
        self._write_meta()
        self.created = True
        return table

    @staticmethod
    def _ensure_id_index(table) -> None:
        """Give a table written before it the BTREE index on ``id`` (the write lock
        held by the caller). ``upsert``'s merge on ``id`` joins the new rows with the
        table's ids: without the index it scans every id. One memory's ``upsert``
        costs 32.0 ms of CPU at 200k rows and 172.9 ms at 1M without it, 7.8-7.9 ms
        with it (2026-12-02, docs/recall.md, "Capture"). Building it reads the ids
        once (seconds at 1M); a failure is logged and the merge works without it."""
        try:
            if any(list(ix.columns) == ["id"] for ix in table.list_indices()):
                return
            log.info("index: adding the id index to %d rows", table.count_rows())
            SearchIndex._create_indices(table, only_id=True)
        except Exception as exc:  # noqa: BLE001 - a speed-up only: the merge scans without it
            log.warning("index: could not add the id index: %s", exc)

    @staticmethod
    def _probe(table) -> None:
        """Read the table's manifest, row count and both indices once (a search
        that matches nothing): raises when one of them is unreadable."""
        table.count_rows()
        where = "namespace = '~probe~'"
        table.search().where(where, prefilter=True).select(["id"]).limit(1).to_list()
        from lancedb.query import MatchQuery

        table.search(MatchQuery("~probe~", "tokens"), query_type="fts").where(where, prefilter=True) \
            .select(["id", "_score"]).limit(1).to_list()

    def _drop(self) -> None:
        """Remove the table, however broken: LanceDB's drop, else (a local index)
        its directory."""
        try:
            self._db.drop_table(TABLE)
            return
        except Exception as exc:  # noqa: BLE001 - missing, or too broken for LanceDB to drop
            reason = exc
        if self.remote:
            if TABLE in self._table_names():
                raise SearchIndexError(f"cannot drop the unreadable table at {self.path}: {reason}")
            return
        import shutil

        target = Path(self.path) / f"{TABLE}.lance"
        if target.exists():
            shutil.rmtree(target)

    def _table_names(self) -> list[str]:
        try:
            res = self._db.list_tables()
            return list(getattr(res, "tables", res))
        except AttributeError:  # older lancedb
            return list(self._db.table_names())

    @staticmethod
    def _create_indices(table, *, only_id: bool = False) -> None:
        """(Re)build the table's indices: the BTREE on ``id`` (``upsert``'s merge
        key), and unless ``only_id`` the BITMAP on ``namespace`` and the full-text
        index on ``tokens``."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table.create_scalar_index("id", index_type="BTREE", replace=True)
            if only_id:
                return
            table.create_scalar_index("namespace", index_type="BITMAP", replace=True)
            table.create_fts_index("tokens", base_tokenizer="whitespace", lower_case=False, stem=False,
                                   remove_stop_words=False, ascii_folding=False, max_token_length=None,
                                   with_position=False, replace=True)

    # -- writes ---------------------------------------------------------

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Hold this index's write lock: the threads of this process and, on a
        local or network file system, every other process on the same index
        directory (module docstring). Re-entrant; every write method takes it."""
        return self._file_lock.held()

    def upsert(self, memories: Sequence[Memory], *, new: Collection[str] = ()) -> None:
        """Index (or re-index) memories: tokens + embeddings, one batched write.

        ``new``: ids the caller knows have no row in the index (never written:
        ``MemoryCore``'s ``_Unindexed``); their rows are appended, the others
        merged on the id (``merge_insert``, which reads the id index: ~2.5x an
        append's CPU). Both kinds in one call make two writes. An id in ``new``
        that has a row after all gets a second row with the same values
        (searches keep the first of an id; a delete or merge takes both).
        Raises SearchIndexError; the caller keeps the outbox rows for a retry.
        """
        if not memories:
            return
        from memory.text import search_tokens

        ids = [m.id for m in memories]
        for i in ids:
            if not _ID_RE.fullmatch(i):
                raise NamespaceError(f"unsafe memory id {i!r}")
        vectors = self.vectors(memories, fetch=False)
        rows = [
            {
                "id": m.id,
                "namespace": str(m.namespace),
                "visibility": m.visibility.value,
                "origin": m.origin.group_key if (m.origin and m.visibility is Visibility.GROUP) else "",
                "tokens": " ".join(search_tokens(m.text, m.context)),  # fts_text(m.searched), from its parts
                "text_hash": text_hash(m.text),
                "vector": vectors[i],
            }
            for i, m in enumerate(memories)
        ]
        appended = [r for r in rows if r["id"] in new]
        merged = [r for r in rows if r["id"] not in new]
        try:
            with self.writing():
                if appended:
                    self._table.add(appended)
                    self.writes_since_optimize += 1
                if merged:
                    self._table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                        merged)
                    self.writes_since_optimize += 1
        except Exception as exc:
            raise SearchIndexError(f"index upsert failed: {exc}") from exc

    def delete(self, ns: Namespace, ids: Sequence[str]) -> None:
        """Remove rows of ``ns`` with these ids (rows of other namespaces are untouched)."""
        if not ids:
            return
        for i in ids:
            if not _ID_RE.fullmatch(i):
                raise NamespaceError(f"unsafe memory id {i!r}")
        where = f"namespace = {_lit(str(ns))} AND id IN ({', '.join(_lit(i) for i in ids)})"
        try:
            with self.writing():
                self._table.delete(where)
                self.writes_since_optimize += 1
        except Exception as exc:
            raise SearchIndexError(f"index delete failed: {exc}") from exc

    def delete_namespace(self, ns: Namespace) -> None:
        """Remove every row of ``ns``."""
        try:
            with self.writing():
                self._table.delete(f"namespace = {_lit(str(ns))}")
        except Exception as exc:
            raise SearchIndexError(f"index delete failed: {exc}") from exc

    def reset(self) -> None:
        """Drop and recreate the table (before a full rebuild from SQL), however
        broken the old one is. Searches of this process wait for it."""
        with self.writing():
            self._files.acquire_exclusive()
            try:
                self._drop()
                self._table = self._db.create_table(TABLE, schema=self._schema())
            finally:
                self._files.release_exclusive()
            self._create_indices(self._table)
            self._write_meta()
            self.needs_rebuild = False

    def optimize(self) -> None:
        """Compact fragments and fold new rows into the scalar, FTS and vector
        indices; build the vector index once the table reaches ``ann_min_rows``
        (``build_ann``, after the write lock is released; a failed build is
        logged and tried again next time, the search staying flat meanwhile).
        Runs off the hot path (maintenance task, full rebuild)."""
        with self.writing():
            self._table.optimize(cleanup_older_than=timedelta(minutes=5))
            self.writes_since_optimize = 0
        try:
            self.build_ann()
        except SearchIndexError as exc:
            log.warning("index: %s; vector search stays flat until the next optimize", exc)

    def has_ann(self) -> bool:
        """Whether the table has a vector index (``build_ann``)."""
        return any("vector" in ix.columns for ix in self._table.list_indices())

    def build_ann(self, *, force: bool = False) -> int:
        """Build the ANN vector index (``ANN_INDEX``, ⌈√rows⌉ partitions up to
        ``ANN_MAX_PARTITIONS``) unless there is one or the table has fewer than
        ``ann_min_rows`` rows (``force``: whatever the row count, from 256 rows,
        what k-means needs to train); returns its partitions, 0 when none was built. Minutes of CPU at a million rows, so it does not
        hold the write lock: Lance commits the index beside concurrent appends
        and deletes (their rows are searched flat until the next optimize), and
        a build that loses its commit to a compaction fails here and is tried
        again at the next ``optimize``. Raises SearchIndexError."""
        try:
            n = self.count()
            if self.has_ann() or n < (256 if force else max(256, self.ann_min_rows)):
                return 0
            parts = min(ANN_MAX_PARTITIONS, max(1, math.ceil(math.sqrt(n))))
            log.info("index: building the vector index (%s, %d partitions) over %d rows", ANN_INDEX, parts, n)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._table.create_index(metric="l2", vector_column_name="vector", index_type=ANN_INDEX,
                                         num_partitions=parts, replace=True)
            return parts
        except Exception as exc:
            raise SearchIndexError(f"vector index build failed: {exc}") from exc

    def purge(self) -> None:
        """Remove deleted rows from the files on disk: compact every fragment that
        has a deletion (whatever its share of deleted rows), fold the rows into the
        indices, and delete every older table version's files. Searches of this
        process wait until it is done. Raises SearchIndexError (the caller keeps the
        purge queued)."""
        try:
            with self.writing():
                self._files.acquire_exclusive()
                try:
                    self._table.to_lance().optimize.compact_files(materialize_deletions=True,
                                                                  materialize_deletions_threshold=0.0)
                    self._table.checkout_latest()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # "cleanup_older_than=0": intended, see the module docstring
                        self._table.optimize(cleanup_older_than=timedelta(0))
                finally:
                    self._files.release_exclusive()
        except Exception as exc:
            raise SearchIndexError(f"index purge failed: {exc}") from exc

    @property
    def cache_bytes(self) -> int:
        """Bytes LanceDB's caches of this index hold now (at most its ``cache_mib``)."""
        return self._session.size_bytes

    @property
    def vectors_held(self) -> int:
        """Embeddings held in process by text hash now (at most ``VECTOR_CACHE``)."""
        return len(self._vectors)

    def count(self) -> int:
        """Rows in the index (all namespaces; for maintenance and benchmarks)."""
        return int(self._table.count_rows())

    def ids(self, ns: Namespace) -> set[str]:
        """Ids indexed for ``ns``."""
        self._files.acquire_shared()
        try:
            rows = (self._table.search().where(f"namespace = {_lit(str(ns))}", prefilter=True)
                    .select(["id"]).limit(1_000_000).to_list())
        finally:
            self._files.release_shared()
        return {r["id"] for r in rows}

    # -- embeddings -----------------------------------------------------

    def _cached(self, h: str) -> np.ndarray | None:
        with self._vectors_lock:
            v = self._vectors.get(h)
            if v is not None:
                self._vectors.move_to_end(h)
            return v

    def _remember(self, h: str, v: np.ndarray) -> None:
        with self._vectors_lock:
            self._vectors[h] = v
            self._vectors.move_to_end(h)
            while len(self._vectors) > VECTOR_CACHE:
                self._vectors.popitem(last=False)

    def vectors(self, memories: Sequence[Memory | MemoryText], *, fetch: bool = True) -> np.ndarray:
        """Document embeddings of ``memories``' texts (the person's words alone: the
        line a memory answered is searched by BM25 only): float32 ``(len(memories), dim)``,
        L2-normalised, in order. From the in-process cache (keyed by the text's hash,
        so a vector always belongs to exactly the text it embeds); then, with
        ``fetch``, from the index rows of those ids whose ``text_hash`` still matches
        (one query per namespace); then, with ``reuse_query_vectors``, for a text
        that was recently a query (a person's line stored as it was said), the
        embedder's ``document_from_query`` of its cached query vector
        (``embed_tail``'s; e5's query side of a text lies at cosine ~0.95 to its
        passage side, the mapped vector at ~0.98); the rest are embedded. Raises
        EmbedderError."""
        out = np.empty((len(memories), self.embedder.dim), dtype=np.float32)
        hashes = [text_hash(m.text) for m in memories]
        missing: list[int] = []
        for i, h in enumerate(hashes):
            v = self._cached(h)
            if v is None:
                missing.append(i)
            else:
                out[i] = v
        if missing and fetch:
            stored = self._stored_vectors([memories[i] for i in missing])
            still = []
            for i in missing:
                v = stored.get((memories[i].id, hashes[i]))
                if v is None:
                    still.append(i)
                else:
                    out[i] = v
                    self._remember(hashes[i], v)
            missing = still
        to_document = getattr(self.embedder, "document_from_query", None)
        if missing and self.reuse_query_vectors and to_document is not None \
                and not getattr(self.embedder, "symmetric", False):  # symmetric: the same key already
            still = []
            for i in missing:
                q = self._cached("q:" + hashes[i])
                v = to_document(q) if q is not None else None
                if v is None:
                    still.append(i)
                else:
                    out[i] = v = np.asarray(v, dtype=np.float32)
                    self._remember(hashes[i], v)
                    self.reused_query_vectors += 1
            missing = still
        if missing:
            fresh = self.embedder.embed_documents([memories[i].text for i in missing]).astype(np.float32)
            for row, i in enumerate(missing):
                out[i] = fresh[row]
                self._remember(hashes[i], fresh[row])
        return out

    def embed_ahead(self, texts: Sequence[str]) -> int:
        """Put the document vectors of ``texts`` (memory texts about to be written)
        in this index's vector cache, one ``embed_documents`` call for those it
        lacks (``vectors``' rules, ``reuse_query_vectors`` included), so that the
        index write and a recall reading them from SQL before it embed nothing.
        Returns how many were not cached before. Raises EmbedderError."""
        docs = [_Text(t) for t in dict.fromkeys(texts)]
        fresh = sum(1 for d in docs if self._cached(text_hash(d.text)) is None)
        if fresh:
            self.vectors(docs, fetch=False)
        return fresh

    def embed_tail(self, lines: Sequence[str], *, known: Mapping[str, np.ndarray] | None = None,
                   embed_older: bool = True) -> np.ndarray:
        """Embeddings of a conversation tail, float32 ``(len(lines), dim)``: the last
        line as a query, the older ones as documents, each through the same cache as
        ``vectors`` — a tail line is embedded once however many turns it stays in
        the tail, and with a symmetric embedder (``Embedder.symmetric``: a query is
        embedded like a document) the message's own capture reuses its vector.

        An older line whose document vector is not cached takes ``known[line]``
        (the vector the turn computed when that line was the latest one, kept with
        the chat log: ``Store.keep_line_vector``); else, with ``embed_older``, it is
        embedded as a document; without it, it takes its query vector from the
        cache (computed here when it was the latest line), and failing that its
        row is zeros (no vector query for that line) — so a turn makes at most one
        model call: the latest line's, when that is not cached either. A line
        embedded as a query stands in for its document vector: e5's ``query:``
        and ``passage:`` vectors of one text differ a little (cosine ~0.9), which
        is why the document vector wins when there is one.
        Raises EmbedderError."""
        out = np.zeros((len(lines), self.embedder.dim), dtype=np.float32)
        symmetric = getattr(self.embedder, "symmetric", False)
        for i, line in enumerate(lines):
            query = i == len(lines) - 1
            key = text_hash(line) if (symmetric or not query) else "q:" + text_hash(line)
            v = self._cached(key)
            if v is None and not query:
                v = known.get(line) if known else None
                if v is None and not symmetric and not embed_older:
                    v = self._cached("q:" + text_hash(line))
                if v is not None:
                    out[i] = v
                    continue
                if not embed_older:
                    continue
            if v is None:
                v = (self.embedder.embed_query(line) if query else self.embedder.embed_documents([line])[0])
                v = np.asarray(v, dtype=np.float32)
                self._remember(key, v)
            out[i] = v
        return out

    def query_vector(self, line: str) -> np.ndarray | None:
        """The cached query vector of ``line`` (``embed_tail``'s for its last line),
        None when it is not cached. No model call."""
        return self._cached(text_hash(line) if getattr(self.embedder, "symmetric", False) else "q:" + text_hash(line))

    @property
    def vector_key(self) -> str:
        """What a vector kept outside the index is valid for: this embedder's name,
        its query side's ``memory.embed.vector_family`` unless the reference's, and
        its dimension (``<name>[@<family>]/<dim>``); a vector kept under another key
        was made by another model or rounding and is not used (``Store.keep_line_vector``)."""
        from memory.embed import vector_family

        family = vector_family(str(getattr(self.embedder, "query_precision", "reference")))
        tag = "" if family == "reference" else f"@{family}"
        return f"{getattr(self.embedder, 'name', type(self.embedder).__name__)}{tag}/{self.embedder.dim}"

    def _stored_vectors(self, memories: Sequence[Memory | MemoryText]) -> dict[tuple[str, str], np.ndarray]:
        """``{(id, text_hash): vector}`` of these memories' index rows (their own
        namespaces only); {} when the index cannot be read."""
        by_ns: dict[Namespace, list[str]] = {}
        for m in memories:
            if _ID_RE.fullmatch(m.id):
                by_ns.setdefault(m.namespace, []).append(m.id)
        out: dict[tuple[str, str], np.ndarray] = {}
        for ns, ids in by_ns.items():
            where = f"namespace = {_lit(str(ns))} AND id IN ({', '.join(_lit(i) for i in ids)})"
            try:
                self._files.acquire_shared()
                try:
                    rows = (self._table.search().where(where, prefilter=True)
                            .select(["id", "text_hash", "vector"]).limit(2 * len(ids)).to_list())
                finally:
                    self._files.release_shared()
            except Exception as exc:  # noqa: BLE001 - the caller embeds what it cannot read
                log.warning("index: cannot read stored vectors of %s: %s", ns, exc)
                continue
            for r in rows:
                out[(r["id"], r["text_hash"])] = np.asarray(r["vector"], dtype=np.float32)
        return out

    def namespace_vectors(self, ns: Namespace) -> dict[tuple[str, str], np.ndarray]:
        """``{(id, text_hash): vector}`` of every index row of ``ns``, in one
        prefiltered read (recall's cache loads a cold namespace with it: one scan
        of the namespace instead of a query per id). {} when the index cannot be
        read (the caller embeds what it lacks)."""
        try:
            self._files.acquire_shared()
            try:
                tbl = (self._table.search().where(f"namespace = {_lit(str(ns))}", prefilter=True)
                       .select(["id", "text_hash", "vector"]).limit(10_000_000).to_arrow())
            finally:
                self._files.release_shared()
        except Exception as exc:  # noqa: BLE001 - the caller embeds what it cannot read
            log.warning("index: cannot read the vectors of %s: %s", ns, exc)
            return {}
        if tbl.num_rows == 0:
            return {}
        flat = tbl.column("vector").combine_chunks().values.to_numpy(zero_copy_only=False)
        matrix = np.asarray(flat, dtype=np.float32).reshape(tbl.num_rows, self.embedder.dim)
        return {(i, h): matrix[r] for r, (i, h) in enumerate(zip(tbl.column("id").to_pylist(),
                                                                 tbl.column("text_hash").to_pylist()))}

    # -- reads ----------------------------------------------------------

    @staticmethod
    def _where(ns: Namespace, chat: ChatRef | None) -> str:
        where = f"namespace = {_lit(str(ns))}"
        if chat is not None and chat.is_group:
            # disclosure: in a group only what was learned in that group
            where += f" AND visibility = 'group' AND origin = {_lit(chat.group_key)}"
        return where

    def search_bm25(self, ns: Namespace, query_tokens: Sequence[str], k: int,
                    chat: ChatRef | None = None, weights: Sequence[float] | None = None) -> list[IndexHit]:
        """BM25 over the tokens column, prefiltered on ``ns`` (and disclosure for
        group chats). ``weights`` (same length as ``query_tokens``) boost tokens of
        the latest message over older tail lines. [] for no tokens."""
        from lancedb.query import BooleanQuery, MatchQuery, Occur

        toks = [t for t in query_tokens if t]
        if not toks:
            return []
        try:
            if weights is None:
                q = MatchQuery(" ".join(dict.fromkeys(toks)), "tokens", operator="OR")
            else:
                best: dict[str, float] = {}
                for t, w in zip(toks, weights):
                    best[t] = max(best.get(t, 0.0), w)
                q = BooleanQuery([(Occur.SHOULD, MatchQuery(t, "tokens", boost=w)) for t, w in best.items()])
            self._files.acquire_shared()
            try:
                rows = (self._table.search(q, query_type="fts").where(self._where(ns, chat), prefilter=True)
                        .select(["id", "namespace", "_score"]).limit(k).to_list())
            finally:
                self._files.release_shared()
        except Exception as exc:
            raise SearchIndexError(f"full-text search failed: {exc}") from exc
        return _ranked(rows, ns, "_score", lambda v: v)

    def search_vector(self, ns: Namespace, vector: np.ndarray, k: int, chat: ChatRef | None = None, *,
                      exact: bool = False) -> list[IndexHit]:
        """The ``k`` nearest of ``ns``'s rows (and disclosure for group chats) to the
        unit ``vector``, best first, scored by exact cosine: a flat search, or
        through the ANN index once the table has one (module docstring: its
        candidates are approximate, their scores exact; fewer than ``k`` found
        there: flat again). ``exact``: flat whatever the table has (benchmarks
        and tests compare the two)."""
        try:
            self._files.acquire_shared()
            try:
                rows = self._nearest(ns, vector, k, chat, exact)
                if not exact and len(rows) < k and self.has_ann():  # too thin for the probed partitions
                    rows = self._nearest(ns, vector, k, chat, True)
            finally:
                self._files.release_shared()
        except Exception as exc:
            raise SearchIndexError(f"vector search failed: {exc}") from exc
        return _ranked(rows, ns, "_distance", lambda v: 1.0 - v / 2.0)

    def _nearest(self, ns: Namespace, vector: np.ndarray, k: int, chat: ChatRef | None, exact: bool) -> list[dict]:
        """One prefiltered vector query: flat (``exact``) or through the ANN index
        with fixed probes and the refine (without an index LanceDB ignores both)."""
        q = (self._table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
             .where(self._where(ns, chat), prefilter=True))
        q = q.bypass_vector_index() if exact else q.nprobes(ANN_NPROBES).refine_factor(ANN_REFINE)
        return q.select(["id", "namespace", "_distance"]).limit(k).to_list()
