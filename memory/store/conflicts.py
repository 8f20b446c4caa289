"""Conflict links: two live memories of one namespace that disagree without a
clear change (``memory.contradiction``'s unsure band, "I have a car" / "I don't
have a car"). Both stay live; the link lets the recollection tell them as a
change, older first (「之前说……，后来说……」).

Every read and write takes the ``Namespace`` first and filters on it in SQL; a
link is written only when both ids are live memories of that namespace, read in
the same transaction, so no link ever joins two namespaces. A forget, retract
or new version of either side deletes its links in the transaction that makes
the change (``_unlink``, called by ``memory.store.memories``); ``move_namespace``
carries them along with the memories (``memory.store.identities``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete
from sqlmodel import Session, func, select

from memory.errors import NotFoundError
from memory.store.base import StoreBase, raw_datetime, utcnow
from memory.store.tables import _aware, _ConflictRow, _MemoryRow
from memory.store.versions import _count
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class Conflict:
    """A conflict link of one namespace: ``older_id`` was said before ``newer_id``;
    ``at`` is when the link was made (aware UTC)."""

    older_id: str
    newer_id: str
    at: datetime

    def other(self, memory_id: str) -> str:
        """The id on the other side of ``memory_id`` (ValueError when it is neither)."""
        if memory_id == self.older_id:
            return self.newer_id
        if memory_id == self.newer_id:
            return self.older_id
        raise ValueError(f"{memory_id!r} is not a side of this conflict")


_T = _ConflictRow.__table__  # type: ignore[attr-defined]
# built once: supersede and recall run these on every write and turn, where building
# ORM statements cost more than the (nearly always empty) answer
_UNLINK_SQL = delete(_T).where(_T.c.namespace == bindparam("ns"),
                               _T.c.older_id.in_(bindparam("ids", expanding=True))
                               | _T.c.newer_id.in_(bindparam("ids", expanding=True)))


def _unlink(s: Session, ns: Namespace, memory_ids: Sequence[str]) -> int:
    """In session ``s``: delete every conflict link of ``ns`` with one of ``memory_ids`` on either side;
    returns how many were deleted."""
    if not memory_ids:
        return 0
    return int(s.connection().execute(_UNLINK_SQL, {"ns": str(ns), "ids": list(memory_ids)}).rowcount or 0)


class Conflicts(StoreBase):
    """Conflict links between the live memories of one namespace."""

    def add_conflict(self, ns: Namespace, older_id: str, newer_id: str, at: datetime | None = None) -> bool:
        """Link ``older_id`` (said first) and ``newer_id`` (said later) of ``ns`` as a
        conflict; True when the link is new, False when the pair is already linked
        (either way round). Raises ValueError for one id on both sides and
        NotFoundError unless both are live memories of ``ns`` (read in the same
        transaction, so a link never joins two namespaces or a forgotten memory)."""
        if older_id == newer_id:
            raise ValueError("a memory cannot conflict with itself")
        with self._write() as s:
            both = _MemoryRow.id.in_([older_id, newer_id])  # type: ignore[attr-defined]
            live = s.exec(select(func.count()).select_from(_MemoryRow)
                          .where(_MemoryRow.namespace == str(ns), both)).one()
            if live != 2:
                raise NotFoundError(f"memories {older_id!r} and {newer_id!r} are not both live in {ns}")
            pair = [older_id, newer_id]
            linked = select(_T.c.id).where(_T.c.namespace == str(ns), _T.c.older_id.in_(pair), _T.c.newer_id.in_(pair))
            if s.execute(linked).first() is not None:
                return False
            s.add(_ConflictRow(namespace=str(ns), older_id=older_id, newer_id=newer_id, created_at=at or utcnow()))
            _count(s, ns, conflicts=1)  # recall reads conflict links only where some were made
        return True

    def conflicts(self, ns: Namespace, memory_ids: Sequence[str] | None = None) -> list[Conflict]:
        """Conflict links of ``ns`` with one of ``memory_ids`` on either side (None:
        every link of ``ns``), newest link first. Through the DBAPI cursor
        (``StoreBase._read_rows``). Raises StoreError."""
        if memory_ids is not None and not memory_ids:
            return []
        mark = self.mark
        if memory_ids is None:
            where, params = f"namespace = {mark}", (str(ns),)
        else:  # recall's conflict marks, once per recall
            ids = list(memory_ids)
            marks = ", ".join([mark] * len(ids))
            where, params = f"namespace = {mark} AND (older_id IN ({marks}) OR newer_id IN ({marks}))", \
                (str(ns), *ids, *ids)
        rows = self._read_rows(f"SELECT older_id, newer_id, created_at FROM memory_conflicts WHERE {where} "
                               "ORDER BY created_at DESC, id DESC", params)
        return [Conflict(older, newer, _aware(raw_datetime(at))) for older, newer, at in rows]  # type: ignore[arg-type]

    def clear_conflicts(self, ns: Namespace, memory_id: str) -> None:
        """Delete the conflict links of ``memory_id`` in ``ns`` (none: nothing happens)."""
        with self._write() as s:
            _unlink(s, ns, [memory_id])
