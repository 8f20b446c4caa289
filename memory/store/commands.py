"""State behind the slash commands, shared by every gateway replica: the last
recall of each namespace (``/memory why``, ``memory.explain``), confirmations
awaited from a person (``/memory forget all``), and the tenant-wide counts of
``memory.admin.stats``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import delete, select

from memory.store.base import StoreBase
from memory.store.tables import _aware, _ChatLogRow, _DeliveryRow, _LastRecallRow, _MemoryRow, _PendingRow
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class TenantCounts:
    """Counts over one tenant: live memories; people (namespaces holding
    memories); chats in the recent chat log; turns (deliveries processed,
    commands included); recalls (namespaces with a last-recall record, less
    those ``tenant_counts`` was told to leave out) and how many of those last
    recollections fell back."""

    memories: int
    people: int
    chats: int
    turns: int
    recalls: int
    fallbacks: int


class CommandState(StoreBase):
    """Last-recall traces, pending confirmations and tenant counts."""

    # -- last recall per namespace (memory.explain) ----------------------

    def save_last_recall(self, trace) -> None:
        """Replace the last-recall record of ``trace.namespace`` (a ``memory.explain.RecallTrace``):
        one row per namespace, its floors and misses a column of it (no row per turn)."""
        entries = json.dumps([{"id": e.memory_id, "pos": e.position, "score": e.score, "ranks": e.ranks,
                               "parts": None if e.parts is None else [e.parts.rrf, e.parts.retention,
                                                                      e.parts.activation, e.parts.emotion,
                                                                      e.parts.importance]}
                              for e in trace.entries])
        floors = json.dumps({"floors": trace.floors, "misses": [[m.memory_id, m.channel, round(m.score, 6),
                                                                 round(m.floor, 6)] for m in trace.misses]}
                            if trace.floors else {})
        ns = trace.namespace
        m = self.mark
        # every turn writes it: one upsert (of two replicas inserting the first record, the second
        # updates it), a statement as the driver takes it, in a transaction of its own (``_write_one``)
        self._write_one(f"INSERT INTO last_recall (namespace, tenant, chat, at, k, fallback_reason, entries, floors) "
                        f"VALUES ({', '.join([m] * 8)}) ON CONFLICT (namespace) DO UPDATE SET chat = excluded.chat, "
                        "at = excluded.at, k = excluded.k, fallback_reason = excluded.fallback_reason, "
                        "entries = excluded.entries, floors = excluded.floors",
                        (str(ns), ns.tenant, trace.chat, self.db_time(trace.at), int(trace.k), trace.fallback_reason,
                         entries, floors))

    def last_recall(self, ns: Namespace):
        """The last-recall record of ``ns`` (``memory.explain.RecallTrace``, its
        floors and misses with it), or None."""
        from memory.explain import Miss, RecallTrace, TraceEntry
        from memory.types import ScoreParts

        with self._read() as s:
            row = s.get(_LastRecallRow, str(ns))
        if row is None:
            return None
        entries = tuple(TraceEntry(e["id"], e["pos"], e["score"], e["ranks"],
                                   ScoreParts(*e["parts"]) if e.get("parts") else None)
                        for e in json.loads(row.entries))
        kept = json.loads(row.floors or "{}")
        misses = tuple(Miss(str(m), str(ch), float(sc), float(fl)) for m, ch, sc, fl in kept.get("misses") or ())
        return RecallTrace(ns, row.chat, _aware(row.at), row.k, row.fallback_reason, entries,  # type: ignore[arg-type]
                           dict(kept.get("floors") or {}), misses)

    def recently_recalled(self, tenant: str, limit: int) -> list[Namespace]:
        """Namespaces of ``tenant`` by the time of their last recall, newest first,
        at most ``limit`` (the namespaces recall's cache warms at start-up,
        ``MemoryCore.warm_cache``); names only, no content."""
        t = _LastRecallRow.__table__  # type: ignore[attr-defined]
        q = select(t.c.namespace).where(t.c.tenant == tenant).order_by(t.c.at.desc(), t.c.namespace).limit(limit)
        with self.engine.connect() as conn:
            return [Namespace.parse(r.namespace) for r in conn.execute(q)]

    # -- confirmations awaited (shared by every replica) -----------------

    def put_pending(self, ns: Namespace, key: str, at: datetime) -> None:
        """Record (or renew) a confirmation awaited under ``key`` for ``ns`` at ``at``."""
        full = f"{ns}|{key}"[:600]
        with self._write() as s:
            row = s.get(_PendingRow, full)
            if row is None:
                row = _PendingRow(key=full, namespace=str(ns), created_at=at)
            row.created_at = at
            s.add(row)

    def take_pending(self, ns: Namespace, key: str) -> datetime | None:
        """Remove the confirmation awaited under ``key`` for ``ns``; when it was
        asked for, or None. Only one caller (of any replica) gets it."""
        full = f"{ns}|{key}"[:600]
        with self._write() as s:
            row = s.get(_PendingRow, full)
            if row is None:
                return None
            at = _aware(row.created_at)
            n = s.exec(delete(_PendingRow).where(_PendingRow.key == full)).rowcount  # type: ignore[call-overload]
        return at if n else None

    # -- tenant-wide counts (memory.admin.stats only) --------------------

    def tenant_counts(self, tenant: str, leave_out: Sequence[str] = ()) -> TenantCounts:
        """Counts over one tenant for ``memory.admin.stats``: the one tenant-wide
        aggregate read besides ``admin_namespaces``. ``leave_out``: fallback
        reasons whose last recalls count neither as recalls nor as fallbacks
        (``memory.reconstruct.NOTHING_TO_RECALL``)."""
        from sqlalchemy import func

        like = tenant.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"
        with self._read() as s:
            memories = s.exec(select(func.count()).select_from(_MemoryRow).where(_MemoryRow.tenant == tenant)).one()
            people = s.exec(select(func.count(func.distinct(_MemoryRow.namespace))).where(
                _MemoryRow.tenant == tenant)).one()
            chats = s.exec(select(func.count(func.distinct(_ChatLogRow.chat))).where(
                _ChatLogRow.tenant == tenant)).one()
            turns = s.exec(select(func.count()).select_from(_DeliveryRow).where(
                _DeliveryRow.key.like(like, escape="\\"))).one()  # type: ignore[attr-defined]
            counted = [_LastRecallRow.tenant == tenant]
            if leave_out:
                counted.append(_LastRecallRow.fallback_reason.not_in(list(leave_out)))  # type: ignore[attr-defined]
            recalls = s.exec(select(func.count()).select_from(_LastRecallRow).where(*counted)).one()
            fallbacks = s.exec(select(func.count()).select_from(_LastRecallRow).where(
                *counted, _LastRecallRow.fallback_reason != "")).one()
        return TenantCounts(int(memories), int(people), int(chats), int(turns), int(recalls), int(fallbacks))
