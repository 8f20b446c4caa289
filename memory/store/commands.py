"""State behind the slash commands, shared by every gateway replica: the last
recall of each namespace (``/memory why``, ``memory.explain``), confirmations
awaited from a person (``/memory forget all``), and the tenant-wide counts of
``memory.admin.stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import delete, select

from memory.store.base import StoreBase, raw_datetime
from memory.store.tables import _aware, _ChatLogRow, _DeliveryRow, _MemoryRow, _NamespaceStateRow, _PendingRow
from memory.store.traces import trace_from, upsert_params, upsert_sql, utc
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

    # -- last recall per namespace (memory.explain; memory.store.traces) --

    def save_last_recall(self, trace) -> None:
        """Write ``trace`` (a ``memory.explain.RecallTrace``) as the last recall of
        ``trace.namespace`` now, in its ``namespace_state`` row: one upsert in a
        transaction of its own, newer wins (a trace of an earlier message than the
        one stored is not written). For a turn with no capture in this process;
        one with a capture hands its trace over (``hold_last_recall``). Raises StoreError."""
        self._write_one(upsert_sql(self.mark), upsert_params(trace, self.db_time))
        self.held_traces.written(trace)

    def hold_last_recall(self, trace) -> None:
        """Hold ``trace`` in this process for the capture of the same line to write
        (``memory.store.traces``: with the capture's first version bump of the
        namespace, else with ``capture_done(recalls=…)``, else
        ``save_held_recall``); ``last_recall`` here reads it at once. Never raises."""
        self.held_traces.hold(trace)

    def save_held_recall(self, ns: Namespace) -> None:
        """Write the trace held for ``ns`` now, on its own (nothing when none is
        held): a capture that did not carry it (it failed, or another replica took
        it). Raises StoreError; the trace stays held then."""
        held = self.held_traces.get(ns)
        if held is not None:
            self.save_last_recall(held)

    def save_held_recalls(self) -> int:
        """Write every trace this process still holds, each on its own (at close:
        captures that did not finish leave theirs here); how many. Raises
        StoreError at the first that fails (it and the rest stay held)."""
        held = self.held_traces.all()
        for trace in held:
            self.save_last_recall(trace)
        return len(held)

    def last_recall(self, ns: Namespace):
        """The last recall of ``ns`` (``memory.explain.RecallTrace``, its floors and
        misses with it), or None: the newer of its ``namespace_state`` row's and the
        one this process holds unwritten (``hold_last_recall``). Raises StoreError."""
        rows = self._read_rows(f"SELECT trace_at, trace_reason, trace FROM namespace_state WHERE namespace = {self.mark}"
                               " AND trace_at IS NOT NULL", (str(ns),))
        stored = trace_from(ns, raw_datetime(rows[0][0]), rows[0][1], rows[0][2]) if rows else None
        return self.held_traces.newer(ns, stored)

    def recently_recalled(self, tenant: str, limit: int) -> list[Namespace]:
        """Namespaces of ``tenant`` by the time of their last recall, newest first,
        at most ``limit`` (the namespaces recall's cache warms at start-up,
        ``MemoryCore.warm_cache``); names only, no content. The traces held here
        count at their own time."""
        m = self.mark
        rows = self._read_rows(f"SELECT namespace, trace_at FROM namespace_state WHERE trace_at IS NOT NULL AND "
                               f"substr(namespace, 1, {m}) = {m} ORDER BY trace_at DESC, namespace LIMIT {m}",
                               (len(tenant) + 1, f"{tenant}/", int(limit)))
        at = {ns: _aware(raw_datetime(t)) for ns, t in rows}
        for held in self.held_traces.of_tenant(tenant):
            key = str(held.namespace)
            at[key] = max(utc(held.at), at.get(key, utc(held.at)))
        ranked = sorted(at.items(), key=lambda kv: (-kv[1].timestamp(), kv[0]))[: max(int(limit), 0)]
        return [Namespace.parse(ns) for ns, _ in ranked]

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
        (``memory.reconstruct.NOTHING_TO_RECALL``). A last recall this process
        holds unwritten (``hold_last_recall``) counts in place of its row's."""
        from sqlalchemy import func

        like = tenant.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"
        held = self.held_traces.of_tenant(tenant)
        t = _NamespaceStateRow.__table__  # type: ignore[attr-defined]
        # the traces live in the namespaces' state rows, which carry no tenant column: their names' prefix
        traced = [t.c.trace_at.is_not(None), func.substr(t.c.namespace, 1, len(tenant) + 1) == f"{tenant}/"]
        counted = [*traced, t.c.trace_reason.not_in(list(leave_out))] if leave_out else traced
        with self._read() as s:
            memories = s.exec(select(func.count()).select_from(_MemoryRow).where(_MemoryRow.tenant == tenant)).one()
            people = s.exec(select(func.count(func.distinct(_MemoryRow.namespace))).where(
                _MemoryRow.tenant == tenant)).one()
            chats = s.exec(select(func.count(func.distinct(_ChatLogRow.chat))).where(
                _ChatLogRow.tenant == tenant)).one()
            turns = s.exec(select(func.count()).select_from(_DeliveryRow).where(
                _DeliveryRow.key.like(like, escape="\\"))).one()  # type: ignore[attr-defined]
            recalls = s.exec(select(func.count()).select_from(t).where(*counted)).one()  # type: ignore[call-overload]
            fallbacks = s.exec(select(func.count()).select_from(t).where(  # type: ignore[call-overload]
                *counted, t.c.trace_reason != "")).one()
            stored = {ns: (_aware(at), reason) for ns, at, reason in s.exec(  # type: ignore[call-overload]
                select(t.c.namespace, t.c.trace_at, t.c.trace_reason).where(
                    *traced, t.c.namespace.in_([str(h.namespace) for h in held])))} if held else {}
        recalls, fallbacks = _one(recalls), _one(fallbacks)
        for h in held:
            at, had = stored.get(str(h.namespace), (None, None))
            if at is not None and at > utc(h.at):
                continue  # the row's is newer: it counts already
            for reason, sign in ((had, -1), (h.fallback_reason, 1)):  # the held trace in place of the row's
                if reason is not None and reason not in leave_out:
                    recalls += sign
                    fallbacks += sign * (reason != "")
        return TenantCounts(_one(memories), _one(people), _one(chats), _one(turns), recalls, fallbacks)


def _one(value) -> int:
    """A count read with ``Session.exec(...).one()`` as an int."""
    return int(value[0] if isinstance(value, tuple) or hasattr(value, "_mapping") else value)
