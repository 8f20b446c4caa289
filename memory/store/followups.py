"""Follow-ups the person agreed to (issue 39 item 2): who opted in, and the
questions owed about plans whose time has passed — kept in SQL so that a
replica restart neither loses nor doubles one, and two replicas never both send
one.

``followup_prefs``: one row per namespace, written by ``/memory followups
on|off`` (``set_followups``); no row is off (the default).

``followups``: one row per (namespace, memory) — ``schedule_followup`` inserts
it once (the unique key makes a second schedule of the same plan, on any
replica, a no-op). A row's ``state``:

- ``due``: to be sent at ``due_at`` or later;
- ``sending``: claimed by one sender (``claim_followup``: a conditional UPDATE
  ``WHERE state = 'due'`` that sets the person's ``day_key`` — unique, so a
  second follow-up of one person on one local day cannot be claimed on any
  replica: at most one a day);
- ``sent``: the platform accepted it (``followup_sent``);
- ``due`` again after a failed attempt that certainly sent nothing
  (``followup_retry``: the day's claim is given back);
- ``dropped``: given up after its attempts, or claimed by a sender that never
  reported (``drop_stale_claims``: a claim older than its lease may have been
  sent, so it is never sent again — at most once, never twice);
- ``skipped``: no longer to be asked (the memory was forgotten or withdrawn, the
  person opted out, the chat is off the record, the plan is too long past).

Only ids, chat keys and times are stored; the question's text is written when
it is sent and kept in the chat log like every companion line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import select as orm_select

from memory.store.base import StoreBase, utcnow
from memory.store.tables import _aware, _FollowupPrefRow, _FollowupRow, _MemoryRow, _to_memory
from memory.types import Memory, Namespace

__all__ = ["Followup", "FollowupPref", "Followups", "FOLLOWUP_STATES"]

FOLLOWUP_STATES = ("due", "sending", "sent", "dropped", "skipped")
_F = _FollowupRow.__table__  # type: ignore[attr-defined]
_P = _FollowupPrefRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class FollowupPref:
    """A person's follow-up choice: ``enabled``, the locale they chose it in
    (``lang``, "" when unknown) and the bot that heard them (``bot_id``, "" when
    none), as of ``updated_at``."""

    namespace: Namespace
    enabled: bool
    lang: str
    bot_id: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Followup:
    """One follow-up row (module docstring): ``chat`` is a ``ChatRef.key``;
    times aware UTC; ``attempts`` failed sends so far."""

    id: int
    tenant: str
    namespace: Namespace
    memory_id: str
    chat: str
    state: str
    due_at: datetime
    attempts: int = 0
    holder: str | None = None
    claimed_at: datetime | None = None
    sent_at: datetime | None = None
    day_key: str | None = None
    last_error: str = ""


def _followup(r) -> Followup:
    return Followup(r.id, r.tenant, Namespace.parse(r.namespace), r.memory_id, r.chat, r.state, _aware(r.due_at),
                    r.attempts, r.holder, _aware(r.claimed_at), _aware(r.sent_at), r.day_key, r.last_error or "")


class Followups(StoreBase):
    """Opt-ins and the follow-up schedule (module docstring)."""

    # -- the person's choice -------------------------------------------------

    def set_followups(self, ns: Namespace, enabled: bool, *, lang: str = "", bot_id: str = "",
                      now: datetime | None = None) -> FollowupPref:
        """Record ``ns``'s ``/memory followups on|off``; turning them off also
        skips every follow-up of ``ns`` not sent yet (claimed ones excepted: they
        are on their way). Returns the choice as stored."""
        now = now or utcnow()
        with self._write() as s:
            row = s.get(_FollowupPrefRow, str(ns))
            if row is None:
                row = _FollowupPrefRow(namespace=str(ns), tenant=ns.tenant, updated_at=now)
            row.enabled, row.lang, row.bot_id, row.updated_at = enabled, lang[:16], bot_id[:128], now
            s.add(row)
            if not enabled:
                s.execute(update(_F).where(_F.c.namespace == str(ns), _F.c.state == "due")
                          .values(state="skipped", last_error="opted out"))
        return FollowupPref(ns, enabled, lang[:16], bot_id[:128], now)

    def followup_pref(self, ns: Namespace) -> FollowupPref | None:
        """``ns``'s choice, or None when they never made one (off)."""
        with self.engine.connect() as conn:
            r = conn.execute(select(_P).where(_P.c.namespace == str(ns))).first()
        return None if r is None else FollowupPref(ns, bool(r.enabled), r.lang, r.bot_id, _aware(r.updated_at))

    def followup_optins(self, tenant: str) -> list[FollowupPref]:
        """Every person of ``tenant`` who turned follow-ups on, by namespace."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(_P).where(_P.c.tenant == tenant, _P.c.enabled.is_(True))
                                .order_by(_P.c.namespace)).all()
        return [FollowupPref(Namespace.parse(r.namespace), True, r.lang, r.bot_id, _aware(r.updated_at)) for r in rows]

    def dated_memories(self, ns: Namespace, since: datetime, until: datetime) -> list[Memory]:
        """Live memories of ``ns`` whose event day or period starts in ``[since, until)``
        (aware UTC) and that have no follow-up row yet (in any state): the plans
        a follow-up may still be scheduled for. One query."""
        M = _MemoryRow
        asked = select(_F.c.memory_id).where(_F.c.namespace == str(ns))
        with self._read() as s:
            rows = s.exec(orm_select(M).where(M.namespace == str(ns), M.event_time.is_not(None),  # type: ignore
                                              M.event_time >= since, M.event_time < until,  # type: ignore
                                              M.id.not_in(asked))).all()  # type: ignore
        return [_to_memory(r) for r in rows]

    # -- the schedule ------------------------------------------------------------

    def schedule_followup(self, ns: Namespace, memory_id: str, chat: str, due_at: datetime) -> bool:
        """Owe one follow-up about ``memory_id`` of ``ns`` in chat ``chat`` (a chat
        key) from ``due_at``. True when scheduled now; False when this plan already
        has one (in any state: a plan is asked about once)."""
        try:
            with self._write_conn() as conn:
                conn.execute(_F.insert().values(tenant=ns.tenant, namespace=str(ns), memory_id=memory_id,
                                                chat=chat[:300], state="due", due_at=due_at, attempts=0,
                                                last_error=""))
            return True
        except IntegrityError:
            return False

    def due_followups(self, tenant: str, now: datetime, limit: int = 100) -> list[Followup]:
        """Follow-ups of ``tenant`` due at ``now`` (state ``due``, ``due_at`` passed),
        earliest first, at most ``limit``. Reading claims nothing."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(_F).where(_F.c.tenant == tenant, _F.c.state == "due", _F.c.due_at <= now)
                                .order_by(_F.c.due_at, _F.c.id).limit(max(1, int(limit)))).all()
        return [_followup(r) for r in rows]

    def followups_of(self, ns: Namespace) -> list[Followup]:
        """Every follow-up row of ``ns`` (any state), oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(_F).where(_F.c.namespace == str(ns)).order_by(_F.c.id)).all()
        return [_followup(r) for r in rows]

    def followup(self, followup_id: int) -> Followup | None:
        """The follow-up ``followup_id``, or None."""
        with self.engine.connect() as conn:
            r = conn.execute(select(_F).where(_F.c.id == int(followup_id))).first()
        return None if r is None else _followup(r)

    def claim_followup(self, followup_id: int, holder: str, day_key: str, now: datetime | None = None) -> bool:
        """Claim a due follow-up for sending: True for the one caller (of any
        replica) that moved it from ``due`` to ``sending``; False when another has
        it, it is no longer due, or the person already has one claimed or sent on
        that day (``day_key``, ``<namespace>|<local day>``: unique)."""
        now = now or utcnow()
        try:
            with self._write_conn() as conn:
                got = conn.execute(update(_F).where(_F.c.id == int(followup_id), _F.c.state == "due")
                                   .values(state="sending", holder=holder[:128], claimed_at=now,
                                           day_key=day_key[:300]))
            return got.rowcount == 1
        except IntegrityError:
            return False

    def followup_sent(self, followup_id: int, now: datetime | None = None) -> bool:
        """Mark a claimed follow-up sent. False when it was not claimed (nothing changed)."""
        with self._write_conn() as conn:
            got = conn.execute(update(_F).where(_F.c.id == int(followup_id), _F.c.state == "sending")
                               .values(state="sent", sent_at=now or utcnow(), holder=None))
        return got.rowcount == 1

    def followup_retry(self, followup_id: int, due_at: datetime, error: str = "") -> bool:
        """A claimed follow-up whose send certainly failed (nothing went out): count
        the attempt, give the day's claim back and make it due again at ``due_at``."""
        with self._write_conn() as conn:
            got = conn.execute(update(_F).where(_F.c.id == int(followup_id), _F.c.state == "sending")
                               .values(state="due", due_at=due_at, holder=None, claimed_at=None, day_key=None,
                                       attempts=_F.c.attempts + 1, last_error=error[:200]))
        return got.rowcount == 1

    def followup_postpone(self, followup_id: int, due_at: datetime) -> None:
        """Move a due (unclaimed) follow-up to ``due_at``: outside waking hours, or
        the person had one today already."""
        with self._write_conn() as conn:
            conn.execute(update(_F).where(_F.c.id == int(followup_id), _F.c.state == "due").values(due_at=due_at))

    def followup_end(self, followup_id: int, state: str, reason: str = "", *, count_attempt: bool = False) -> bool:
        """End a follow-up unsent: ``state`` ``dropped`` (given up, or its send may
        have happened) or ``skipped`` (no longer to be asked), with ``reason``. The
        day's claim is given back (nothing was sent). False when it was already
        sent or ended."""
        if state not in ("dropped", "skipped"):
            raise ValueError(f"a follow-up ends dropped or skipped, not {state!r}")
        values: dict = {"state": state, "holder": None, "day_key": None, "last_error": reason[:200]}
        if count_attempt:
            values["attempts"] = _F.c.attempts + 1
        with self._write_conn() as conn:
            got = conn.execute(update(_F).where(_F.c.id == int(followup_id), _F.c.state.in_(("due", "sending")))
                               .values(**values))
        return got.rowcount == 1

    def drop_stale_claims(self, tenant: str, older_than: datetime) -> list[Followup]:
        """Drop the follow-ups of ``tenant`` claimed before ``older_than`` and never
        reported: their sender died or its due-list caller never acknowledged, so
        whether they went out is unknown — dropped, never sent again. Their day's
        claim is kept (one may have been sent that day). Returns them."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(_F).where(_F.c.tenant == tenant, _F.c.state == "sending",
                                                 _F.c.claimed_at < older_than)).all()
        out = []
        for r in rows:
            with self._write_conn() as conn:
                got = conn.execute(update(_F).where(_F.c.id == r.id, _F.c.state == "sending")
                                   .values(state="dropped", holder=None, last_error="claim never reported"))
            if got.rowcount == 1:
                out.append(_followup(r))
        return out

    def followup_sent_in(self, tenant: str, chat: str, around: datetime, slack: timedelta = timedelta(minutes=2)) -> bool:
        """True when a follow-up of ``tenant`` was sent in chat ``chat`` (a chat key)
        within ``slack`` of ``around``: the companion's line before a person's
        answer was that follow-up (its answer's context may be older than a reply's)."""
        with self.engine.connect() as conn:
            r = conn.execute(select(_F.c.id).where(_F.c.tenant == tenant, _F.c.chat == chat[:300],
                                                   _F.c.state == "sent", _F.c.sent_at >= around - slack,
                                                   _F.c.sent_at <= around + slack).limit(1)).first()
        return r is not None
