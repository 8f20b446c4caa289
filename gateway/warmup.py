"""Start-up warm-up: what a first turn would otherwise load, loaded before
``/readyz`` says ready (issue 26 items 6–7, issue 29 item 4).

A process that imports or builds something on its first turn pays for it in
that turn, and when that happens on the event loop every other request waits
too: aiogram's import, which the first Telegram reply did on the loop, took
13–20 s on 2 idle cores (it builds hundreds of pydantic models) and far longer
under load — a whole-process stall with ``/healthz`` unanswered. aiogram is
loaded by the Telegram bridge itself, in a worker thread started at start-up,
its sends waiting for it and ``/readyz`` saying 503 until it is done
(``bridges.telegram.runtime.TelegramRuntime.prepare``). The rest,
``warm_up``, runs in a worker thread of the app's start-up, after the core is
built (jieba, OpenCC and the embedder are loaded there,
``gateway.service.build_core``) and before the app answers at all:

- the modules the turn imports on first use: the openai client (each
  configured tenant's ``ChatModel`` and the answer's models,
  ``ChatModel.warm``);
- the lazily built text tables: the emotion lexicon and its stemmer, jieba's
  part-of-speech tagger (entity links, capture's heuristics), the contradiction
  rules, capture's template patterns, both locale catalogues (Babel);
- the search paths: one recall (question, context line and a named period, zh
  and en) of a namespace that holds nothing, which runs the query analysis,
  the query embeddings and the date parser, and one full-text and one vector
  search of the index under that namespace's filter.

Then the app sends one request through itself on the loop, so that FastAPI
builds its route tables (which it does on the first request) before a
person's does (``gateway.http.app``).

Each step is timed; one that fails is logged and skipped (the turn then loads
it itself, as before), never raised: a warm-up is an optimisation, not a
condition of serving. The namespaces recalled most recently are warmed into
recall's cache in the background afterwards (``MemoryCore.warm_cache``): a
namespace not warm yet is searched through the exact path meanwhile
(``memory.cache``), so that part never delays readiness.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.pipeline import Pipeline

__all__ = ["warm_up", "warm_cache", "WarmUp", "WARM_NAMESPACE"]

log = logging.getLogger(__name__)

WARM_NAMESPACE = "person:warmup"
"""Subject of the namespace the warm-up recall searches: a ``person:`` id that
identity linking never mints (those are hex), so it holds nothing; the recall
only reads (no trace, no recall mark is written)."""

_SAMPLES = ("我上个月搬到了杭州，养了一只叫煤球的猫，今天特别开心！",
            "I moved to Lisbon last month and I love my new job, but I miss my sister.")
"""A zh and an en line the warm-up runs through the text paths (synthetic)."""


@dataclass
class WarmUp:
    """What ``warm_up`` did: ``steps`` maps each step's name to its seconds;
    ``failed`` each failed step to its error's class and message."""

    steps: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Total seconds of the steps."""
        return sum(self.steps.values())

    def run(self, name: str, fn: Callable[[], object], *, once: bool = False) -> None:
        """Time ``fn()`` as step ``name``; a failure is recorded and logged, not
        raised. ``once``: a step whose effect is the process's (imports, module
        caches), skipped when it succeeded before in this process."""
        if once and name in _DONE:
            return
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a step that fails is loaded by the first turn instead
            self.failed[name] = f"{type(exc).__name__}: {exc}"
            log.warning("warm-up: %s failed (%s: %s); the first turn loads it", name, type(exc).__name__, exc)
        else:
            if once:
                _DONE.add(name)
        self.steps[name] = time.perf_counter() - t0


_DONE: set[str] = set()
"""The ``once`` steps this process has done (a process that builds several apps, like the tests, pays once)."""


def warm_up(pipeline: Pipeline) -> WarmUp:
    """Load what the first turn of ``pipeline`` would load (module docstring).
    Blocking: call it in a worker thread before the app says ready.
    Returns the steps' timings; never raises."""
    report = WarmUp()
    tenants = list(pipeline.settings.tenants)

    def models() -> None:
        import openai  # noqa: F401 - the client's import is most of a ChatModel's first cost

        for t in tenants:
            model = pipeline.models.of(t)
            if model is not None:
                model.warm()

    report.run("chat models", models)
    report.run("locales", _locales, once=True)
    report.run("text tables", _text_tables, once=True)
    # the index's own table was probed when it opened; what is left is the process's (query planning, caches)
    report.run("search", lambda: _search(pipeline, tenants[0] if tenants else "default"), once=True)
    log.info("warm-up done in %.1f s (%s)", report.seconds,
             ", ".join(f"{k} {v:.2f} s" for k, v in report.steps.items()))
    return report


def _locales() -> None:
    from locales import LANGUAGES, catalogue_ids

    for lang in LANGUAGES:
        catalogue_ids(lang)


def _text_tables() -> None:
    import memory.contradiction  # noqa: F401 - capture imports it on its first fact
    from memory.capture import HeuristicExtractor, without_gateway_text
    from memory.emotion import analyse
    from memory.links import named_things

    now = datetime.now(timezone.utc)
    extractor = HeuristicExtractor()
    for line in _SAMPLES:
        analyse(line)
        named_things(line)
        without_gateway_text(line)
        extractor.extract(line, now, addressed=True)


def _search(pipeline: Pipeline, tenant: str) -> None:
    from memory.text import tokens
    from memory.types import ChatKind, ChatRef, Namespace

    core = pipeline.core
    ns = Namespace(tenant, WARM_NAMESPACE)
    chat = ChatRef("tg", ChatKind.PRIVATE, "0")
    for question, before in (("上个月我搬到哪里了？", "你还记得吗"), ("Where did I move last month?", "remember?")):
        core.recall(ns, [before, question], chat=chat)
        if core.index_ready:
            core.index.search_bm25(ns, tokens(question), 1, chat=chat)
            core.index.search_vector(ns, core.index.embed_tail([question])[0], 1, chat=chat)


def warm_cache(pipeline: Pipeline, limit: int) -> threading.Thread | None:
    """Load into recall's cache, in a daemon thread, the namespaces of every
    tenant recalled most recently (``MemoryCore.warm_cache``: at most ``limit``
    per tenant, never past the cache's budget); returns the thread, or None
    without a cache. A failure is logged."""
    core = pipeline.core
    if core.cache is None or limit <= 0:
        return None
    tenants = list(pipeline.settings.tenants)

    def run() -> None:
        t0 = time.perf_counter()
        try:
            n = core.warm_cache(tenants, limit)
        except Exception as exc:  # noqa: BLE001 - each namespace's first recall loads it instead
            log.warning("warm-up: recall cache not warmed (%s: %s)", type(exc).__name__, exc)
            return
        log.info("warm-up: %d namespace(s) loaded into recall's cache in %.1f s (%.0f MiB of %.0f)", n,
                 time.perf_counter() - t0, core.cache.nbytes / 2**20, core.cache.max_bytes / 2**20)

    thread = threading.Thread(target=run, name="huiyi-cache-warm", daemon=True)
    thread.start()
    return thread

