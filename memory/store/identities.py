"""Identity links and namespace moves (``memory.identity`` and ``memory.admin``).

A platform identity (``tg:123``) of a tenant can be linked by an admin to a
``person:<id>`` subject; ``move_namespace`` then carries the memories, history,
tombstones, conflict and association links and consolidated rows of the old
namespace into the new one in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlmodel import delete, select

from memory.store.base import StoreBase, utcnow
from memory.store.conflicts import _unlink
from memory.store.events import ADDED, CHANGED, FORGOTTEN, _emit
from memory.store.links import _unlink_links
from memory.store.traces import CLEARED
from memory.store.versions import _bump, _recount
from memory.store.tables import (ACCESS_TIMES_KEPT, _aware, _ChatLogRow, _ConflictRow, _ConsolidatedRow,
                                 _ConsolidationStateRow, _HistoryRow, _IdentityRow, _IndexOpRow, _LinkRow,
                                 _meta, _meta_json, _MemoryRow, _PauseRow, _TombstoneRow)
from memory.types import Namespace


@dataclass(frozen=True, slots=True)
class PersonRow:
    """One person of a tenant as ``Identities.tenant_people`` sees them:
    ``subject`` (``tg:42`` or ``person:…``), the platform ``identities`` linked to
    it (sorted; empty for an unlinked platform subject), live ``memories``,
    ``last_seen`` (UTC: the latest of their chat-log lines and memory writes;
    None when neither) and ``name`` (the latest display name they sent, "" when
    none)."""

    subject: str
    identities: tuple[str, ...]
    memories: int
    last_seen: datetime | None
    name: str


class Identities(StoreBase):
    """Identity links of a tenant (written by ``memory.admin`` only) and namespace moves."""

    def tenant_people(self, tenant: str) -> list[PersonRow]:
        """Every person of ``tenant``: each subject with live memories, each linked
        ``person:`` subject, and each platform identity that spoke in the recent
        chat log, a linked identity folded into its person. Ordered by
        ``last_seen``, newest first (never seen last), then subject. Only
        ``memory.admin.people`` calls this: like ``admin_namespaces`` it is a
        tenant-wide read."""
        from sqlalchemy import func

        with self._read() as s:
            counts = s.exec(select(_MemoryRow.namespace, func.count(), func.max(_MemoryRow.updated_at))
                            .where(_MemoryRow.tenant == tenant).group_by(_MemoryRow.namespace)).all()
            links = s.exec(select(_IdentityRow.platform_subject, _IdentityRow.subject)
                           .where(_IdentityRow.tenant == tenant)).all()
            lines = s.exec(select(_ChatLogRow.chat, _ChatLogRow.sender_id, _ChatLogRow.sender_name, _ChatLogRow.at)
                           .where(_ChatLogRow.tenant == tenant, _ChatLogRow.role == "user")
                           .order_by(_ChatLogRow.at)).all()
        linked = dict(links)
        people: dict[str, dict] = {}

        def person(subject: str) -> dict:
            return people.setdefault(subject, {"ids": set(), "n": 0, "seen": None, "name": ""})

        def seen(p: dict, at: datetime | None) -> None:
            at = _aware(at)
            if at is not None and (p["seen"] is None or at > p["seen"]):
                p["seen"] = at

        prefix = f"{tenant}/"
        for ns, n, last in counts:
            p = person(ns[len(prefix):] if ns.startswith(prefix) else ns)
            p["n"] += int(n)
            seen(p, last)
        for platform_subject, subject in links:
            person(subject)["ids"].add(platform_subject)
        for chat, sender_id, name, at in lines:
            if not sender_id:
                continue
            platform_subject = f"{chat.split(':', 1)[0]}:{sender_id}"
            p = person(linked.get(platform_subject, platform_subject))
            seen(p, at)
            if name:
                p["name"] = name  # oldest first: the latest name wins
        rows = [PersonRow(sub, tuple(sorted(p["ids"])), p["n"], p["seen"], p["name"]) for sub, p in people.items()]
        never = datetime.min.replace(tzinfo=None)
        rows.sort(key=lambda r: r.subject)
        rows.sort(key=lambda r: (r.last_seen is not None, r.last_seen.replace(tzinfo=None) if r.last_seen else never),
                  reverse=True)
        return rows

    def unlink_identity(self, tenant: str, platform_subject: str) -> str | None:
        """Remove the link of ``platform_subject`` in ``tenant``; the ``person:``
        subject it pointed at, or None when it was not linked. Its memories stay
        with that person (nothing says which were learned from this identity);
        from now on the identity is its own subject again."""
        with self._write() as s:
            row = s.exec(select(_IdentityRow).where(_IdentityRow.tenant == tenant,
                                                    _IdentityRow.platform_subject == platform_subject)).first()
            if row is None:
                return None
            subject = row.subject
            s.delete(row)
        return subject

    def resolve_identity(self, tenant: str, platform_subject: str) -> str | None:
        """The subject a platform identity (``tg:123``) is linked to in ``tenant``, or None."""
        # every turn asks (``memory.identity.resolve_identity``): through the DBAPI cursor
        rows = self._read_rows(f"SELECT subject FROM identities WHERE tenant = {self.mark} "
                               f"AND platform_subject = {self.mark}", (tenant, platform_subject))
        return rows[0][0] if rows else None

    def identities(self, ns: Namespace) -> list[str]:
        """Platform identities linked to ``ns``'s subject, sorted (empty when none)."""
        with self._read() as s:
            rows = s.exec(select(_IdentityRow.platform_subject).where(
                _IdentityRow.tenant == ns.tenant, _IdentityRow.subject == ns.subject)).all()
        return sorted(rows)

    def link_identities(self, tenant: str, platform_subjects: Sequence[str], subject: str, actor: str) -> None:
        """Point each platform identity of ``tenant`` at ``subject`` (insert or re-point)."""
        now = utcnow()
        with self._write() as s:
            for ps in platform_subjects:
                row = s.exec(select(_IdentityRow).where(_IdentityRow.tenant == tenant,
                                                        _IdentityRow.platform_subject == ps)).first()
                if row is None:
                    row = _IdentityRow(tenant=tenant, platform_subject=ps, subject=subject, linked_at=now, actor=actor)
                else:
                    row.subject, row.linked_at, row.actor = subject, now, actor
                s.add(row)

    def move_namespace(self, src: Namespace, dst: Namespace) -> tuple[list[str], list[str]]:
        """Move every memory, its history and the tombstones of ``src`` into ``dst``
        (same tenant; ValueError otherwise), in one transaction, with index outbox
        rows for both sides. Returns (ids gone from ``src``, ids changed in ``dst``).

        A memory whose canonical key already exists in ``dst`` is merged into that
        row: identical normalised text keeps the ``dst`` row (access times joined);
        a different text is a latest-wins update (the older text goes to history).
        Conflict and association links move with the memories they join; a link
        with a side merged into a ``dst`` row is dropped (that row now says
        something else), and so are the ``dst`` row's own links when its text
        changed. Pauses move too (``_move_pauses``). Consolidated rows
        move with their memories, their sources renamed to the rows the fragments
        landed in (``_move_consolidated``); ``src``'s consolidation state is dropped.
        Recall's marks waiting in either namespace's state row are folded into
        the rows first (``fold_marks``, the default half-life), so they move with them.
        """
        if src.tenant != dst.tenant:
            raise ValueError("identities can only be merged within one tenant")
        if src == dst:
            return [], []
        for ns in (src, dst):
            self.fold_marks(ns)  # type: ignore[attr-defined]
        now = utcnow()
        gone: list[str] = []
        changed: list[str] = []
        moved: set[str] = set()  # ids that keep their row, now in dst
        merged: dict[str, str] = {}  # src id → the dst row it was merged into
        revised: list[str] = []  # dst rows whose text a merge changed
        with self._write() as s:
            rows = s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(src))).all()
            by_key = {r.key: r for r in s.exec(select(_MemoryRow).where(_MemoryRow.namespace == str(dst))).all()}
            for r in rows:
                gone.append(r.id)
                other = by_key.get(r.key)
                hist = s.exec(select(_HistoryRow).where(_HistoryRow.namespace == str(src),
                                                        _HistoryRow.memory_id == r.id)).all()
                if other is None:
                    for h in hist:
                        h.namespace = str(dst)
                        s.add(h)
                    r.namespace = str(dst)
                    s.add(r)
                    changed.append(r.id)
                    moved.add(r.id)
                    s.add(_IndexOpRow(namespace=str(src), memory_id=r.id, op="delete", created_at=now))
                    s.add(_IndexOpRow(namespace=str(dst), memory_id=r.id, op="upsert", created_at=now))
                    continue
                for h in hist:
                    h.namespace, h.memory_id = str(dst), other.id
                    s.add(h)
                if r.meta and r.meta != "{}":  # the caller's tags of both rows (issue 26 item 17), src's last
                    other.meta = _meta_json({**_meta(other.meta), **_meta(r.meta)})
                times = sorted(set(json.loads(other.access_times or "[]")) | set(json.loads(r.access_times or "[]")))
                other.access_times = json.dumps(times[-ACCESS_TIMES_KEPT:])
                if r.norm != other.norm:
                    newer, older = (r, other) if _aware(r.updated_at) > _aware(other.updated_at) else (other, r)
                    s.add(_HistoryRow(memory_id=other.id, namespace=str(dst), version=other.version,
                                      text=older.text, category=older.category, key=older.key,
                                      origin=older.origin, visibility=older.visibility,
                                      source_message_id=older.source_message_id, source_fp=older.source_fp,
                                      valid_from=older.valid_from, valid_to=newer.valid_from))
                    if newer is r:
                        revised.append(other.id)
                        other.text, other.norm, other.category, other.entities = r.text, r.norm, r.category, r.entities
                        # the text discloses as where it was said, not as the row it lands in
                        other.origin, other.visibility = r.origin, r.visibility
                        other.source_message_id, other.source_fp = r.source_message_id, r.source_fp
                        other.context = r.context
                        other.importance, other.valence, other.arousal, other.emotion = (
                            r.importance, r.valence, r.arousal, r.emotion)
                        other.updated_at, other.valid_from = r.updated_at, r.valid_from
                    other.version += 1
                s.add(other)
                s.delete(r)
                merged[r.id] = other.id
                changed.append(other.id)
                s.add(_IndexOpRow(namespace=str(src), memory_id=r.id, op="delete", created_at=now))
                s.add(_IndexOpRow(namespace=str(dst), memory_id=other.id, op="upsert", created_at=now))
            s.flush()
            if rows:  # both sides' searches change: src empties, dst gains or re-texts rows
                _bump(s, src, -len(rows))
                _bump(s, dst, len(moved))
                # change events (issue 26 item 17): gone from src; in dst added (moved) or changed (merged into)
                _emit(s, self.event_tenants, src, FORGOTTEN, [(i, 0) for i in gone], now)
                versions = {r.id: r.version for r in rows if r.id in moved}
                versions.update({o.id: o.version for o in by_key.values() if o.id in set(merged.values())})
                _emit(s, self.event_tenants, dst, ADDED, [(i, versions[i]) for i in changed if i in moved], now)
                _emit(s, self.event_tenants, dst, CHANGED,
                      [(i, versions[i]) for i in dict.fromkeys(changed) if i not in moved], now)
            _unlink(s, dst, revised)
            _carry_pairs(s, _ConflictRow, "older_id", "newer_id", src, dst, moved)
            _unlink_links(s, dst, revised)
            _carry_pairs(s, _LinkRow, "a_id", "b_id", src, dst, moved)
            _move_consolidated(s, src, dst, moved, merged)
            if rows:
                s.flush()
                _recount(s, dst)  # what moved in is counted where recall reads it
            have = set(s.exec(select(_TombstoneRow.fingerprint).where(_TombstoneRow.namespace == str(dst))).all())
            for t in s.exec(select(_TombstoneRow).where(_TombstoneRow.namespace == str(src))).all():
                if t.fingerprint not in have:
                    s.add(_TombstoneRow(namespace=str(dst), fingerprint=t.fingerprint, forgotten_at=t.forgotten_at))
                s.delete(t)
            _move_pauses(s, src, dst)
            # src's last recall goes with it (memory.store.traces), the one held here too
            s.execute(text(CLEARED.format(mark=":ns")), {"ns": str(src)})
            self.held_traces.drop(src)
        return gone, sorted(set(changed))


def _move_pauses(s, src: Namespace, dst: Namespace) -> None:
    """In session ``s`` (inside ``move_namespace``): each pause of ``src``
    (``memory.store.pauses``) becomes ``dst``'s in the same chat, so a person
    who went off the record stays off it once linked. Where ``dst`` has a pause
    in that chat too, the one that lasts longer is kept (None, until resumed,
    outlasts any end); it starts at the earlier ``since``."""
    for row in s.exec(select(_PauseRow).where(_PauseRow.namespace == str(src))).all():
        key = f"{dst}|{row.chat}"[:600]
        there = s.get(_PauseRow, key)
        if there is None:
            s.add(_PauseRow(key=key, namespace=str(dst), chat=row.chat, since=row.since, until=row.until))
        else:
            ends = [_aware(u) for u in (there.until, row.until)]
            there.until = None if None in ends else max(ends)  # type: ignore[type-var]
            there.since = min(_aware(there.since), _aware(row.since))
            s.add(there)
        s.delete(row)


def _carry_pairs(s, table, first: str, second: str, src: Namespace, dst: Namespace, moved: set[str]) -> None:
    """In session ``s``: the rows of ``table`` (conflict or association links,
    each joining the memory ids in columns ``first`` and ``second``) of ``src``
    move to ``dst`` when both their memories moved; the others are deleted."""
    for row in s.exec(select(table).where(table.namespace == str(src))).all():
        if getattr(row, first) in moved and getattr(row, second) in moved:
            row.namespace = str(dst)
            s.add(row)
        else:
            s.delete(row)


def _move_consolidated(s, src: Namespace, dst: Namespace, moved: set[str], merged: dict[str, str]) -> None:
    """In session ``s`` (inside ``move_namespace``): every consolidated row of
    ``src`` whose memory kept its row moves to ``dst`` with its sources renamed
    (a fragment merged into a ``dst`` row is cited as that row; one that is gone
    is dropped); a row whose memory was merged into a ``dst`` row is dropped (that
    row is what ``dst`` had). A row left citing nothing is dropped with its
    memory staying an ordinary one. ``src``'s consolidation state is deleted."""
    for row in s.exec(select(_ConsolidatedRow).where(_ConsolidatedRow.namespace == str(src))).all():
        if row.memory_id not in moved:
            s.delete(row)
            continue
        sources = [merged.get(m, m) for m in json.loads(row.sources or "[]")]
        sources = [m for m in dict.fromkeys(sources) if (m in moved or m in merged.values()) and m != row.memory_id]
        if not sources:
            s.delete(row)
            continue
        row.namespace, row.sources = str(dst), json.dumps(sources)
        s.add(row)
    s.exec(delete(_ConsolidationStateRow).where(_ConsolidationStateRow.namespace == str(src)))  # type: ignore[call-overload]
