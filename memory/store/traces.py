"""Each namespace's last recall (``memory.explain.RecallTrace``, what ``/memory
why`` reads) in its ``namespace_state`` row, and the traces this process holds
until a write carries them.

A trace shares its namespace's state row (``trace_at``, ``trace_reason``,
``trace``) because a turn whose line is captured writes that row anyway: the
capture's version bump (``Store.add``) sets the trace in the same row update.
A turn whose capture runs in this process hands its trace over instead of
writing it (``HeldTraces.hold``, ``gateway.capture_queue.CaptureQueue.keep_trace``):

- the capture's first ``add`` to the namespace carries it (``_bump_sql`` with
  the trace: the row update it made anyway, no statement of its own);
- a capture that stores nothing (chit-chat, a duplicate, a withdrawn line) writes
  it in the transaction that marks its line done (``Store.capture_done``: one
  statement more in the same transaction, on PostgreSQL the same round trip);
- a capture that fails or is left to another replica writes it alone
  (``Store.save_held_recall``), as does a turn with no capture here (off the
  record, capture off, not addressed in a group: ``Store.save_last_recall``).

Guarantees:

- Newer wins: every write sets the trace only when the row holds none or an older
  one (``trace_at`` ≤ the new trace's time, compared in the statement itself), and
  this process holds only the newest trace of a namespace; two turns of one person
  whose captures finish out of order, or on two replicas, leave the later
  message's trace.
- Read your own trace: ``Store.last_recall`` on this process merges the trace
  held here (the newer of held and stored), so ``/memory why`` right after a turn
  explains that turn. Another replica reads it once the capture's transaction
  commits (usually well under a second after the answer; at most the capture
  queue's lag).
- A crash before the capture commits loses only that trace (the one before it
  stays): a ranking explanation, never a memory nor anything acknowledged; the
  capture itself is resumed from the chat log.

The ``trace`` column is JSON: ``{"chat": ChatRef.key, "k": int, "entries":
[{"id", "pos", "score", "ranks", "parts": [rrf, retention, activation, emotion,
importance] | null}, …], "floors": {channel: floor}, "misses": [[id, channel,
score, floor], …]}``; ids and numbers only, never memory or message text.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

from memory.types import Namespace

__all__ = ["HeldTraces", "trace_json", "trace_from", "upsert_sql", "upsert_params", "utc", "CLEARED"]


def trace_json(trace) -> str:
    """The ``trace`` column of ``trace`` (a ``memory.explain.RecallTrace``): its
    chat, k, entries, floors and misses as compact JSON (module docstring)."""
    return json.dumps({
        "chat": trace.chat, "k": int(trace.k),
        "entries": [{"id": e.memory_id, "pos": e.position, "score": e.score, "ranks": e.ranks,
                     "parts": None if e.parts is None else [e.parts.rrf, e.parts.retention, e.parts.activation,
                                                            e.parts.emotion, e.parts.importance]}
                    for e in trace.entries],
        "floors": dict(trace.floors),
        "misses": [[m.memory_id, m.channel, round(m.score, 6), round(m.floor, 6)] for m in trace.misses]},
        separators=(",", ":"), ensure_ascii=False)


def trace_from(ns: Namespace, at: datetime, reason: str | None, text: str):
    """The ``memory.explain.RecallTrace`` of ``ns`` a row holds: ``at`` (naive: UTC),
    ``reason`` (its ``trace_reason``) and ``text`` (its ``trace`` JSON)."""
    from memory.explain import Miss, RecallTrace, TraceEntry
    from memory.types import ScoreParts

    kept = json.loads(text)
    entries = tuple(TraceEntry(e["id"], e["pos"], e["score"], e["ranks"],
                               ScoreParts(*e["parts"]) if e.get("parts") else None)
                    for e in kept.get("entries") or ())
    misses = tuple(Miss(str(m), str(ch), float(sc), float(fl)) for m, ch, sc, fl in kept.get("misses") or ())
    return RecallTrace(ns, kept.get("chat", ""), at if at.tzinfo else at.replace(tzinfo=timezone.utc),
                       int(kept.get("k", 0)), reason or "", entries, dict(kept.get("floors") or {}), misses)


def _newer(column: str) -> str:
    """An upsert's SET of ``column``: the new value when the row holds no trace or an older one."""
    return (f"{column} = CASE WHEN namespace_state.trace_at IS NULL OR namespace_state.trace_at <= excluded.trace_at "
            f"THEN excluded.{column} ELSE namespace_state.{column} END")


def upsert_sql(mark: str) -> str:
    """The statement that writes a trace alone (parameters: namespace, trace_at,
    trace_reason, trace, namespace, namespace; ``mark`` the driver's placeholder):
    into the namespace's state row, newer wins (module docstring). A namespace
    without a row gets one at version 0 (nothing written to search yet), its live
    count read from ``memories`` — only then: the count is under a CASE that an
    existing row skips — and its counters 0 when it has no memory (nothing linked,
    in conflict or dormant), else NULL (unknown: recall reads)."""
    return ("INSERT INTO namespace_state (namespace, version, live, links, conflicts, dormant, trace_at, "
            "trace_reason, trace) "
            f"SELECT {mark}, 0, n, CASE WHEN n = 0 THEN 0 END, CASE WHEN n = 0 THEN 0 END, CASE WHEN n = 0 THEN 0 END, "
            f"{mark}, {mark}, {mark} FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM namespace_state "
            f"WHERE namespace = {mark}) THEN 0 ELSE (SELECT count(*) FROM memories WHERE namespace = {mark}) END AS n) c "
            # WHERE: SQLite's parser needs it between an INSERT's SELECT and its ON CONFLICT
            "WHERE 1 = 1 ON CONFLICT (namespace) DO UPDATE SET "
            + ", ".join(_newer(c) for c in ("trace", "trace_reason", "trace_at")))


def upsert_params(trace, db_time) -> tuple:
    """``upsert_sql``'s parameters for ``trace``; ``db_time``: the store's
    ``StoreBase.db_time`` (a timestamp as its driver takes it)."""
    ns = str(trace.namespace)
    return ns, db_time(utc(trace.at)), trace.fallback_reason, trace_json(trace), ns, ns


def utc(at: datetime) -> datetime:
    """``at`` in UTC (a naive one is UTC already): what every write of ``trace_at``
    stores, so that SQL compares like with like (on SQLite, as text)."""
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


CLEARED = "UPDATE namespace_state SET trace_at = NULL, trace_reason = NULL, trace = NULL WHERE namespace = {mark}"
"""The statement that clears a namespace's trace (``format(mark=…)``; parameter: the namespace)."""


class HeldTraces:
    """Traces of this process's turns not written yet, the newest per namespace
    (module docstring). Thread-safe. A trace stays held until the write that
    carries it commits (``written``), so a reader here never misses it meanwhile;
    two writers of one held trace write the same thing (newer wins in SQL too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_ns: dict[str, object] = {}

    def __len__(self) -> int:
        return len(self._by_ns)

    def hold(self, trace) -> None:
        """Hold ``trace`` for its namespace unless a newer one (a later ``at``) is held."""
        key = str(trace.namespace)
        with self._lock:
            had = self._by_ns.get(key)
            if had is None or utc(had.at) <= utc(trace.at):  # type: ignore[attr-defined]
                self._by_ns[key] = trace

    def get(self, ns: Namespace | str):
        """The trace held for ``ns``, or None."""
        return self._by_ns.get(str(ns))

    def written(self, trace) -> None:
        """``trace`` is committed: no longer held, unless a newer one took its place."""
        key = str(trace.namespace)
        with self._lock:
            if self._by_ns.get(key) is trace:
                del self._by_ns[key]

    def drop(self, ns: Namespace | str) -> None:
        """Forget the trace held for ``ns`` (its namespace moved away: ``Store.move_namespace``)."""
        with self._lock:
            self._by_ns.pop(str(ns), None)

    def newer(self, ns: Namespace, stored):
        """The newer of ``stored`` (the trace read from SQL, or None) and the one held for ``ns``."""
        held = self.get(ns)
        if held is None or (stored is not None and utc(stored.at) > utc(held.at)):
            return stored
        return held

    def all(self) -> list:
        """Every trace held."""
        with self._lock:
            return list(self._by_ns.values())

    def of_tenant(self, tenant: str) -> list:
        """The traces held for namespaces of ``tenant``."""
        with self._lock:
            return [t for t in self._by_ns.values() if t.namespace.tenant == tenant]  # type: ignore[attr-defined]
