"""The audit log: append-only records of who did what to which namespace.

Records carry ids and a JSON ``detail``, never the text of a forgotten memory.
Written by ``memory.core`` and ``memory.admin`` (and by ``migrate_chat`` in the
same transaction as the move); read back per namespace for admin views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import insert
from sqlmodel import select

from memory.store.base import StoreBase, utcnow
from memory.store.tables import _aware, _AuditRow
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An audit record written in the transaction of the write it records
    (``MemoryRows.add(audit=…)``), its memory id that write's: ``action``,
    ``actor`` and ``detail`` (checked by ``memory.audit.AuditLog.entry``)."""

    action: str
    actor: str
    detail: dict[str, object] = field(default_factory=dict)


class AuditLog(StoreBase):
    """Appending and reading audit records of one namespace."""

    def audit(self, ns: Namespace, action: str, actor: str, memory_id: str | None = None, **detail: object) -> None:
        """Append an audit record (append-only). Never pass memory text of a forget."""
        with self._write_conn() as conn:
            conn.execute(insert(_AuditRow.__table__), [self._audit_values(ns, action, actor, memory_id, detail)])  # type: ignore[attr-defined]

    @staticmethod
    def _audit_values(ns: Namespace, action: str, actor: str, memory_id: str | None,
                      detail: dict[str, object]) -> dict[str, object]:
        """The column values of one audit record (``detail`` as JSON, non-JSON values as str)."""
        return dict(at=utcnow(), actor=actor, action=action, namespace=str(ns), memory_id=memory_id,
                    detail=json.dumps(detail, ensure_ascii=False, default=str))

    def was_forgotten(self, ns: Namespace, memory_id: str) -> bool:
        """Whether ``ns``'s audit holds a forget of ``memory_id`` (an id and an
        action: the text is long gone), for "why not recalled" of an id no longer live."""
        with self._read() as s:
            return s.exec(select(_AuditRow.id).where(_AuditRow.namespace == str(ns), _AuditRow.memory_id == memory_id,
                                                     _AuditRow.action == "forget").limit(1)).first() is not None

    def audit_records(self, ns: Namespace, limit: int = 100) -> list[dict]:
        """Audit records of ``ns``, newest first, as plain records (for admin views)."""
        with self._read() as s:
            rows = s.exec(select(_AuditRow).where(_AuditRow.namespace == str(ns))
                          .order_by(_AuditRow.id.desc()).limit(limit)).all()  # type: ignore[union-attr]
        return [{"at": _aware(r.at), "actor": r.actor, "action": r.action, "memory_id": r.memory_id,
                 "detail": json.loads(r.detail)} for r in rows]
