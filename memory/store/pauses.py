"""Off the record: a person's pause of learning in one chat (``/memory pause``),
kept in SQL so that every gateway replica honours it at the person's next line.

A pause is keyed by namespace and chat key (``ChatRef.key``): one in a private
chat does not stop learning in a group, nor the other way round. It lasts from
``since`` until ``until`` (None: until resumed); an expired row counts as no
pause and is deleted by the next ``pause``/``resume`` of that key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import delete, select

from memory.store.base import StoreBase, raw_datetime
from memory.store.tables import _aware, _PauseRow
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause in force: ``chat`` (a chat key), ``since``, ``until`` (None: until resumed)."""

    namespace: Namespace
    chat: str
    since: datetime
    until: datetime | None


def _key(ns: Namespace, chat: str) -> str:
    return f"{ns}|{chat}"[:600]


class Pauses(StoreBase):
    """``/memory pause`` state: ``pause``, ``resume``, ``paused``."""

    def pause(self, ns: Namespace, chat: str, since: datetime, until: datetime | None) -> Pause:
        """Pause learning from ``ns`` in chat ``chat`` (a chat key) from ``since``
        until ``until`` (aware datetimes; None: until ``resume``). A pause in force
        is replaced (a new duration counts from now). Returns the pause."""
        with self._write() as s:
            row = s.get(_PauseRow, _key(ns, chat))
            if row is None:
                row = _PauseRow(key=_key(ns, chat), namespace=str(ns), chat=chat[:300], since=since, until=until)
            row.since, row.until = since, until
            s.add(row)
        return Pause(ns, chat, since, until)

    def resume(self, ns: Namespace, chat: str, now: datetime) -> Pause | None:
        """End the pause of ``ns`` in ``chat``; the pause that was in force at
        ``now``, or None when there was none (an expired one is dropped too)."""
        was = self.paused(ns, chat, now)
        with self._write() as s:
            s.exec(delete(_PauseRow).where(_PauseRow.key == _key(ns, chat)))  # type: ignore[call-overload]
        return was

    def paused(self, ns: Namespace, chat: str, now: datetime) -> Pause | None:
        """The pause of ``ns`` in ``chat`` in force at ``now``, or None. Asked on
        every turn: a raw read (``_read_rows``), not an ORM session."""
        rows = self._read_rows(f"SELECT chat, since, until FROM record_pauses WHERE key = {self.mark}",
                               (_key(ns, chat),))
        if not rows:
            return None
        key, since, until = rows[0]
        since, until = _aware(raw_datetime(since)), _aware(raw_datetime(until)) if until is not None else None
        if until is not None and until <= now:
            return None
        return Pause(ns, key, since, until)  # type: ignore[arg-type]

    def identity_and_pause(self, tenant: str, platform_subject: str, chat: str,
                           now: datetime) -> tuple[str | None, Pause | None]:
        """``resolve_identity(tenant, platform_subject)`` and ``paused(ns, chat,
        now)`` of the namespace it resolves to (the linked subject's, else the
        identity's own), in one statement: what every turn asks first, one read
        (and one round trip) where it was two. Raises StoreError."""
        m = self.mark
        rows = self._read_rows(
            f"SELECT i.subject, p.chat, p.since, p.until FROM (SELECT {m} AS t, {m} AS s) q "
            "LEFT JOIN identities i ON i.tenant = q.t AND i.platform_subject = q.s "
            f"LEFT JOIN record_pauses p ON p.key = substr(q.t || '/' || coalesce(i.subject, q.s) || '|' || {m}, 1, 600)",
            (tenant, platform_subject, chat))
        linked, key, since, until = rows[0] if rows else (None, None, None, None)
        if key is None:
            return linked, None
        ns = Namespace(tenant, linked or platform_subject)
        since, until = _aware(raw_datetime(since)), _aware(raw_datetime(until)) if until is not None else None
        if until is not None and until <= now:
            return linked, None
        return linked, Pause(ns, key, since, until)  # type: ignore[arg-type]

    def pauses(self, ns: Namespace, now: datetime) -> list[Pause]:
        """Every pause of ``ns`` in force at ``now``, in any chat (the console's view), by chat key."""
        with self._read() as s:
            rows = s.exec(select(_PauseRow).where(_PauseRow.namespace == str(ns)).order_by(_PauseRow.chat)).all()
        out = []
        for row in rows:
            until = _aware(row.until)
            if until is None or until > now:
                out.append(Pause(ns, row.chat, _aware(row.since), until))  # type: ignore[arg-type]
        return out
