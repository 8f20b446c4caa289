"""The durable capture queue: what a turn leaves to capture, and who runs it.

A person's message is durable from its turn on: its chat-log line carries its
capture (``Store.append_chat(capture=…)``) until the capture is done. A turn
that captures before it returns calls ``capture``; one answered first
(``background_capture``) hands what follows its answer to ``put``. One worker
runs that queue in batches (``AFTER_BATCH``), each batch in one thread and one
``MemoryCore.batch()`` (one index write), so that the answers of the next
turns compete with one background thread, not one per message; captures that
need the tenant's model (LLM extraction: a network call each) run as tasks of
their own, ``CAPTURE_CONCURRENCY`` at a time. ``drain`` waits for what runs;
``resume`` (the maintenance task, ``gateway.maintenance``) runs what a crash
or a failure left in the chat log.

The queue in memory is bounded (``MAX_QUEUED``): each waiting turn holds its
result, recall trace and recollection until its batch runs, so when turns
arrive faster than captures finish (a saturated CPU), a turn finding the queue
full waits for room (``room``) before it answers, and the chats slow down to
the rate the captures keep, instead of the backlog (and the captures' lag
behind the chat) growing without end.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from bridges.contract import TurnResult
from gateway.config import Settings, TenantSettings
from gateway.llm import ChatModels
from gateway.withdrawals import retract_from
from gateway.followups import ANSWER_WINDOW as FOLLOWUP_ANSWER_WINDOW
from memory.capture import LLMExtractor, answered_line, capture, facts_of
from memory.never_store import holds_secret
from memory.core import MemoryCore
from memory.store import ChatLine, PendingCapture, utcnow
from memory.explain import RecallTrace
from memory.types import ChatRef, Namespace

__all__ = ["CaptureQueue", "without_bot_mention"]

log = logging.getLogger(__name__)

CAPTURE_CONCURRENCY = 4
"""Background captures with LLM extraction running at once per queue."""
AFTER_BATCH = 32
"""Turns whose after-work (bookkeeping, heuristic capture) one worker batch takes."""
MAX_QUEUED = 256
"""Turns answered first whose after-work may wait in this process's queue (``put``;
eight worker batches, ~15–50 s of captures at the 2-core soaks' 300–1,000 a
minute, under ``RESUME_AFTER_S``): a turn
finding this many waits for room before it answers (``room``). One queued turn
holds a few KiB of Python objects without a chat model (its result, recall
trace, recollection and tail: 3.2 KiB by ``tracemalloc`` over 300 chat-mix turns
queued behind a held worker, net of what their captures then stored, so a lower
bound), more with a model's prompt and reply; the bound matters most for the
captures' lag behind the chat, which grew by ~350 turns a minute at load 15–18
without it."""
RESUME_AFTER_S = 60.0
"""A capture queued this many seconds ago and still not done is resumed."""
RENEW_AFTER = timedelta(seconds=RESUME_AFTER_S / 2)
"""A capture taken sooner than this after its queueing keeps the lease its chat-log
append gave it (``Store.take_captures``' ``renew_after``: read, not written), with
at least the other half of the resume age left to finish before another replica
may resume it; one taken later renews its lease first."""


@dataclass
class _After:
    """What is left of a turn answered first (``CaptureQueue.put``)."""

    after: list[Callable[[], None]]
    job: PendingCapture | None
    res: TurnResult
    audit: Callable[[], None] | None


@dataclass(frozen=True)
class _BatchReads:
    """What a capture batch reads once for all of its messages instead of once
    each: ``redacted`` (``Store.redacted_among``) and ``before`` (the line before
    each private line, ``Store.lines_before``), read with the batch's lease check
    (``Store.take_captures_with``: one round trip). A withdrawal landing after this
    read is still caught: the jobs that stored something (``stored``) are
    checked again, together, after the batch (``recheck``)."""

    redacted: set[tuple[str, str, str]]
    before: dict[int, ChatLine]
    stored: list[PendingCapture] = field(default_factory=list)
    """The batch's jobs that stored something: checked for a withdrawal once more after the batch."""

    def recheck(self, core: MemoryCore) -> set[int]:
        """After the batch: retract what the jobs of ``stored`` taught when their
        message was withdrawn while the batch ran (one read for them all); the line
        ids of those retracted."""
        if not self.stored:
            return set()
        gone = core.store.redacted_among([(j.tenant, j.chat, j.message_id) for j in self.stored])
        out = set()
        for j in self.stored:
            if (j.tenant, j.chat.key, j.message_id) in gone:
                retract_from(core, j.namespace, j.chat, j.message_id)
                out.add(j.line_id)
        return out



class CaptureQueue:
    """The captures of every tenant's turns over one core, in this process."""

    def __init__(self, settings: Settings, core: MemoryCore, models: ChatModels) -> None:
        self.settings = settings
        self.core = core
        self.models = models
        self._tasks: set[asyncio.Task] = set()
        self._running: set[int] = set()  # chat-log line ids whose capture runs in this process
        self._vectors: dict[int, tuple[str, bytes]] = {}  # line id -> query vector kept with its capture_done
        self._traces: dict[int, Namespace] = {}  # line id -> namespace whose held recall trace its capture writes
        self._slots: asyncio.Semaphore | None = None
        self._after: list[_After] = []  # queued for the worker (put)
        self._worker: asyncio.Task | None = None
        self.max_queued = MAX_QUEUED  # the bound ``room`` keeps (MAX_QUEUED; a test lowers it)
        self._room: asyncio.Event | None = None  # set whenever the queue shrinks (made on the loop)

    def queued(self) -> int:
        """Captures queued or running in this process (the after-work queue and model captures)."""
        return len(self._after) + sum(1 for t in self._tasks if t is not self._worker)

    async def room(self) -> None:
        """Wait until fewer than ``max_queued`` turns wait in this queue (module
        docstring): the backpressure of a turn answered first, awaited before
        ``put``. Returns at once while the queue has room."""
        while self.queued() >= self.max_queued:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            if self._after and (self._worker is None or self._worker.done()):
                self._start_worker()
            try:  # re-checked each second: a wake-up missed costs a second, never a hang
                await asyncio.wait_for(self._room.wait(), 1.0)
            except TimeoutError:
                pass

    def _shrunk(self, *_: object) -> None:
        """Wake the turns waiting in ``room``: the queue just shrank (also a task's done callback)."""
        if self._room is not None:
            self._room.set()

    def hold(self, line_id: int) -> None:
        """Line ``line_id``'s capture runs in this process from now on (its turn has
        not answered yet): ``resume`` leaves it alone until ``release``."""
        self._running.add(line_id)

    def release(self, line_id: int) -> None:
        """The capture of ``line_id`` no longer runs here: the line keeps it for ``resume``."""
        self._running.discard(line_id)
        self._write_kept(line_id)

    def keep_vector(self, line_id: int, key: str, vector: bytes) -> None:
        """Keep the query vector a turn computed for its line ``line_id`` with the
        line (``Store.keep_line_vector``): when the line's capture runs here, in the
        row write that marks it done (``Store.capture_done(vectors=…)``), else now.
        Thread-safe (dict operations under the GIL). Raises StoreError."""
        if line_id in self._running:
            self._vectors[line_id] = (key, vector)
            if line_id in self._running:  # still held: its capture_done takes it
                return
            if self._vectors.pop(line_id, None) is None:
                return
        self.core.store.keep_line_vector(line_id, key, vector)

    def keep_trace(self, line_id: int | None, trace: RecallTrace) -> None:
        """Hand the recall trace of a turn (``memory.explain``: what ``/memory why``
        reads) to the capture of its line ``line_id`` when that runs here: held in
        the store (``Store.hold_last_recall``: read at once on this process), then
        written by the capture's first version bump of the namespace, else by the
        transaction that marks the line done, else on its own
        (``memory.store.traces``) — no write of its own on a turn that captures.
        A line with no capture held here (off the record, capture off, no line)
        writes it now (``Store.save_last_recall``). Thread-safe; raises StoreError."""
        if line_id and line_id in self._running:
            self.core.store.hold_last_recall(trace)  # held before it is named: a release in between writes it
            self._traces[line_id] = trace.namespace
            if line_id in self._running:  # still held: its capture writes it
                return
            if self._traces.pop(line_id, None) is None:  # released meanwhile, and written then
                return
        self.core.store.save_last_recall(trace)

    def _done(self, *line_ids: int) -> None:
        """``Store.capture_done`` of these lines, with the vectors and recall traces kept for them."""
        vectors = {i: v for i in line_ids if (v := self._vectors.pop(i, None)) is not None}
        recalls = [ns for i in line_ids if (ns := self._traces.pop(i, None)) is not None]
        try:
            self.core.store.capture_done(*line_ids, vectors=vectors, recalls=recalls)
        except BaseException:
            for ns in recalls:  # not written: still held in the store, written on its own
                self._save_held(ns)
            raise

    def _write_kept(self, *line_ids: int) -> None:
        """Write what was kept for each of ``line_ids``' captures on its own (none marked
        its line done here): the query vector, and the turn's recall trace unless the
        capture's own write carried it."""
        for line_id in line_ids:
            kept = self._vectors.pop(line_id, None)
            if kept is not None:
                try:
                    self.core.store.keep_line_vector(line_id, *kept)
                except Exception:  # noqa: BLE001 - a vector kept is a saved embedding, never the turn's
                    log.exception("could not keep the query vector of line %d", line_id)
            ns = self._traces.pop(line_id, None)
            if ns is not None:
                self._save_held(ns)

    def _save_held(self, ns: Namespace) -> None:
        """Write the recall trace held for ``ns`` on its own; a failure is logged (the
        trace stays held: this process still reads it, a later write may carry it)."""
        try:
            self.core.store.save_held_recall(ns)
        except Exception:  # noqa: BLE001 - an explanation aid, never the turn's
            log.exception("could not record the recall of %s", ns)

    async def settle(self, lines: Iterable[int], timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until none of ``lines`` has a capture
        queued or running in this process."""
        lines = list(lines)
        deadline = time.monotonic() + timeout
        while any(line in self._running for line in lines) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def context_of(self, tenant: str, chat: ChatRef, line_id: int | None, at: datetime,
                   before: dict[int, ChatLine] | None = None) -> str:
        """The context of the person's line ``line_id`` of ``chat``: the companion's
        line just before it (``memory.capture.answered_line``), "" when none (and
        in a group, without reading the log). ``before``: the lines before a
        batch's lines, read at once (``Store.lines_before``); else read here.
        Blocking (SQL)."""
        if not line_id or chat.is_group:
            return ""
        line = before.get(line_id) if before is not None else self.core.store.line_before(tenant, chat, line_id)
        persona = self.settings.tenant(tenant).persona_name
        said = answered_line(line, at, chat, persona=persona)
        if said or line is None or line.role != "bot" or at - line.at > FOLLOWUP_ANSWER_WINDOW:
            return said
        # a follow-up question (gateway.followups) is answered hours later, not minutes: its line still counts
        if self.core.store.followup_sent_in(tenant, chat.key, line.at):
            return answered_line(line, at, chat, persona=persona, window=FOLLOWUP_ANSWER_WINDOW)
        return said

    async def capture(self, job: PendingCapture, *, last_try: bool = False) -> list[str]:
        """Capture ``job`` now, in a thread (the extractor is made here, on the
        loop); returns the ids stored or updated (``_capture_sync``)."""
        try:
            extractor = await self.models.extractor(job.tenant, job.namespace.subject)
            return await asyncio.to_thread(self._capture_sync, job, extractor, last_try)
        finally:
            self._running.discard(job.line_id)
            if job.line_id in self._vectors or job.line_id in self._traces:  # not marked done here: on their own
                await asyncio.to_thread(self._write_kept, job.line_id)

    def _capture_sync(self, job: PendingCapture, extractor: LLMExtractor | None, last_try: bool, *,
                      done: list[int] | None = None, taken: bool = False,
                      batch: _BatchReads | None = None, facts: list | None = None) -> list[str]:
        """In a worker thread: capture one person's line into its namespace and mark
        its chat-log line done; returns the ids stored or updated. A failure is
        logged and leaves the line for ``resume`` — unless ``last_try``,
        which gives it up (logged at ERROR) so that a message that always fails is
        not retried forever. ``done``: collect the line id there instead of marking
        it (the caller marks a batch at once). A line this process queued is taken
        first (``Store.take_captures``: with its text as it is now, which an edit may
        have changed meanwhile) unless ``taken`` says the caller did (and passed the
        job with that text); one another replica claimed meanwhile is left to it.
        ``batch``: what the worker read at once for its whole batch (whether the
        message was withdrawn, the line before it) instead of a read each;
        ``facts``: the message's facts the worker read first (``_facts_ahead``)."""
        if job.queued is not None and job.line_id and not taken:
            took = self.core.store.take_captures({job.line_id: job.queued}, renew_after=RENEW_AFTER)
            if job.line_id not in took:
                log.info("capture of %s message %s left to the replica that claimed it", job.namespace,
                         job.message_id)
                return []
            job = replace(job, text=took[job.line_id])
        t = self.settings.tenant(job.tenant)
        redacted = (job.tenant, job.chat.key, job.message_id) in batch.redacted if batch is not None \
            else self.core.store.is_redacted(job.tenant, job.chat, job.message_id)
        if redacted:
            log.info("capture of %s message %s skipped: the message was withdrawn", job.namespace, job.message_id)
            if job.line_id:
                self._done(job.line_id)
            return []
        try:
            context = self.context_of(job.tenant, job.chat, job.line_id, job.at,
                                      batch.before if batch is not None else None)
            results = capture(self.core, job.namespace, without_bot_mention(job.text, t), chat=job.chat,
                              said_at=job.at, message_id=job.message_id, extractor=extractor, tz=t.tz,
                              addressed=_said_to_bot(job, t), own_texts=(t.persona,), context=context,
                              never_store=t.never_store, facts=facts)
        except Exception:  # noqa: BLE001 - capture never breaks the turn; the line keeps it for a retry
            if not last_try:
                log.exception("capture failed for %s message %s; it will be retried", job.namespace, job.message_id)
                return []
            log.exception("capture of %s message %s failed again; given up", job.namespace, job.message_id)
            results = []
        if job.line_id and done is not None:
            done.append(job.line_id)
        elif job.line_id:
            self._done(job.line_id)
        if results and batch is not None:
            batch.stored.append(job)  # the worker checks the batch's withdrawals once, after it (_recheck)
        elif results and self.core.store.is_redacted(job.tenant, job.chat, job.message_id):
            # withdrawn while this capture ran: what it just stored goes too
            retract_from(self.core, job.namespace, job.chat, job.message_id)
            return []
        return [r.memory.id for r in results if r.memory is not None and r.action not in ("rejected", "conflict")]

    def _facts_ahead(self, jobs: list[PendingCapture], reads: _BatchReads) -> dict[int, list]:
        """With lingering index writes (``MemoryCore.embed_first``): the facts of each of
        a batch's ``jobs`` (``memory.capture.facts_of``, by line id), all embedded in
        one model call before the first of them is written — not one call a message
        (~10 % more CPU a text at e5-small). {} without lingering; a job whose
        reading fails is left out (its capture reads, and fails, on its own)."""
        if self.core.index_linger_s <= 0 or len(jobs) < 2:
            return {}
        out: dict[int, list] = {}
        for job in jobs:
            if not job.line_id or (job.tenant, job.chat.key, job.message_id) in reads.redacted:
                continue
            t = self.settings.tenant(job.tenant)
            try:
                context = self.context_of(job.tenant, job.chat, job.line_id, job.at, reads.before)
                out[job.line_id] = facts_of(job.namespace, without_bot_mention(job.text, t), chat=job.chat,
                                            said_at=job.at, tz=t.tz, addressed=_said_to_bot(job, t),
                                            own_texts=(t.persona,), context=context, never_store=t.never_store)
            except Exception:  # noqa: BLE001 - its capture reads it again, and logs what fails
                log.debug("facts of line %d not read ahead; its capture reads them", job.line_id, exc_info=True)
        self.core.embed_first([f.text for facts in out.values() for f in facts if not holds_secret(f.text)])
        return out

    def put(self, after: list[Callable[[], None]], job: PendingCapture | None, res: TurnResult,
            audit: Callable[[], None] | None) -> None:
        """Queue what follows a turn answered first: its bookkeeping ``after`` (recall
        trace, ACT-R access times), the capture ``job`` (its ids land in
        ``res.captured``), then ``audit`` (the turn's audit line), each run in a
        thread. One worker runs the queue in batches (module docstring); a
        capture that needs the tenant's model runs as its own task instead. It
        does not wait: a caller keeps the bound by awaiting ``room`` first."""
        item = _After(after, job, res, audit)
        if job is not None and self.models.of(job.tenant) is not None:
            if self._slots is None:
                self._slots = asyncio.Semaphore(CAPTURE_CONCURRENCY)
            task = asyncio.create_task(self._run_model_capture(item, self._slots))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(self._shrunk)
            return
        self._after.append(item)
        if self._worker is None or self._worker.done():
            self._start_worker()

    def _start_worker(self) -> None:
        # a context of its own: the worker outlives the turn that started it (no stale turn_id)
        self._worker = asyncio.create_task(self._after_worker(), context=contextvars.Context())
        self._tasks.add(self._worker)
        self._worker.add_done_callback(self._tasks.discard)

    async def _run_model_capture(self, item: _After, slots: asyncio.Semaphore) -> None:
        async with slots:
            if item.after:
                await asyncio.to_thread(_run_all, item.after)
            item.res.captured = await self.capture(item.job)  # type: ignore[arg-type]
            if item.audit is not None:
                await asyncio.to_thread(item.audit)

    async def _after_worker(self) -> None:
        while self._after:
            batch = self._after[:AFTER_BATCH]
            del self._after[:AFTER_BATCH]
            self._shrunk()

            def work() -> None:
                done: list[int] = []
                mine = {item.job.line_id: item.job.queued for item in batch
                        if item.job is not None and item.job.line_id and item.job.queued is not None}
                all_jobs = [item.job for item in batch if item.job is not None]
                # the lease check, the redactions and the lines before: one call for the batch
                taken, redacted, before = self.core.store.take_captures_with(
                    mine, [(j.tenant, j.chat, j.message_id) for j in all_jobs],
                    [j.line_id for j in all_jobs if j.line_id and not j.chat.is_group], renew_after=RENEW_AFTER)
                reads = _BatchReads(redacted, before)
                jobs: list[PendingCapture | None] = []
                for item in batch:
                    if item.job is not None and item.job.line_id in mine and item.job.line_id not in taken:
                        log.info("capture of %s message %s left to the replica that claimed it",
                                 item.job.namespace, item.job.message_id)
                        jobs.append(None)
                        continue
                    jobs.append(replace(item.job, text=taken[item.job.line_id])
                                if item.job is not None and item.job.line_id in taken else item.job)
                facts = self._facts_ahead([j for j in jobs if j is not None], reads)
                with self.core.batch():
                    for item, job in zip(batch, jobs):
                        _run_all(item.after)
                        if job is None:
                            continue
                        item.res.captured = self._capture_sync(job, None, last_try=False, done=done, taken=True,
                                                               batch=reads, facts=facts.get(job.line_id))
                withdrawn = reads.recheck(self.core)  # withdrawn while the batch ran: what it taught goes
                for item in batch:
                    if item.job is not None and item.job.line_id in withdrawn:
                        item.res.captured = []
                self._done(*done)  # after the batch's index write (or its queueing: MemoryCore's index_linger_s)
                for item in batch:
                    if item.job is not None:
                        self.release(item.job.line_id)
                # the turn audit lines last, once the batch is written
                for item in batch:
                    if item.audit is not None:
                        item.audit()

            try:
                await asyncio.to_thread(work)
            except Exception:  # noqa: BLE001 - the lines keep their captures for resume
                log.exception("background capture batch of %d failed", len(batch))
                lines = [item.job.line_id for item in batch if item.job is not None]
                self._running.difference_update(lines)
                await asyncio.to_thread(self._write_kept, *lines)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait for the captures running after their turns (at most ``timeout``
        seconds); True when none is left. What is not done stays durable in the
        chat log for ``resume``."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self._tasks or self._after:
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if left is not None and left <= 0:
                return False
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=left)
            else:
                await asyncio.sleep(0)
        return True

    async def resume(self, older_than_s: float = RESUME_AFTER_S, limit: int = 100) -> int:
        """Run the captures that were queued more than ``older_than_s`` seconds ago
        and never finished (the process died after the reply, or the capture
        failed), one at a time, each tried one last time; returns how many ran.
        Each line is claimed first (``Store.claim_captures``: a lease of
        ``older_than_s`` seconds in the database), so two replicas resuming at the
        same moment never run the same line; captures in flight in this process
        are left alone."""
        jobs = await asyncio.to_thread(self.core.store.claim_captures,
                                       utcnow() - timedelta(seconds=older_than_s), limit)
        ran = 0
        for job in jobs:
            if job.line_id in self._running:
                continue
            if job.tenant not in self.settings.tenants:
                log.warning("pending capture of line %d: tenant %s is no longer configured; dropped",
                            job.line_id, job.tenant)
                await asyncio.to_thread(self.core.store.capture_done, job.line_id)
                continue
            self._running.add(job.line_id)
            await self.capture(job, last_try=True)
            ran += 1
        if ran:
            log.info("resumed %d pending capture(s)", ran)
        return ran


def without_bot_mention(text: str, t: TenantSettings) -> str:
    """The message without the @-mention of this tenant's Telegram bot: "@mochi_bot
    我养了只猫" is a fact about the cat, not about the bot's handle."""
    name = (t.telegram.bot_username or t.telegram_bot_username or "").lstrip("@")
    if not name:
        return text
    return re.sub(rf"(?i)@{re.escape(name)}\b", "", text).strip()


def _said_to_bot(job: PendingCapture, t: TenantSettings) -> bool:
    """Was the line said to the bot (its subject-less statements are then the
    speaker's, memory.capture)? Private chats always; in a group what the turn
    decided, or for a line read back from the store, true when the tenant does not
    capture all group messages (then only addressed ones were queued)."""
    if not job.chat.is_group:
        return True
    if job.addressed is not None:
        return job.addressed
    return not t.capture_all_group_messages


def _run_all(fns: list[Callable[[], None]]) -> None:
    for f in fns:
        f()
