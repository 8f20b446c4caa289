"""Association links: weighted pairs of live memories of one namespace (issue 17),
made when memories are recalled together, consolidated together, or share an
entity; read by recall's association channel (``memory.recall``).

One row per pair (``a_id < b_id``) holds the weight as of ``updated_at`` and the
reasons; the weight rule (growth on co-use, exponential decay with a half-life)
is ``memory.links``'. Every read and write takes the ``Namespace`` first and
filters on it in SQL; ``strengthen_links`` keeps only ids that are live memories
of that namespace, read in the same transaction, so no link ever joins two
namespaces or a forgotten memory. A forget, retract or new version of either
side deletes its links in the transaction that makes the change
(``_unlink_links``, called by ``memory.store.memories``); ``move_namespace``
carries them along with the memories (``memory.store.identities``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import combinations

from sqlalchemy import Connection, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, func

from memory.links import (
    DEFAULT_HALF_LIFE_DAYS,
    MAX_LINKED_IDS,
    REASONS,
    decayed,
)
from memory.store.base import StoreBase, raw_datetime, utcnow
from memory.store.pending import PendingMarks, _drop_pending_pairs, _moment, fold_pair
from memory.store.tables import _aware, _LinkRow, _MemoryRow
from memory.store.versions import _count
from memory.types import Namespace

__all__ = ["Links", "MAX_LINKED_IDS"]


_T = _LinkRow.__table__  # type: ignore[attr-defined]
_M = _MemoryRow.__table__  # type: ignore[attr-defined]
# built once: recall reads links on every turn and forget deletes them on every forget
_UNLINK_SQL = delete(_T).where(_T.c.namespace == bindparam("ns"),
                               _T.c.a_id.in_(bindparam("ids", expanding=True))
                               | _T.c.b_id.in_(bindparam("ids", expanding=True)))
_LIVE_SQL = select(_M.c.id).where(_M.c.namespace == bindparam("ns"), _M.c.id.in_(bindparam("ids", expanding=True)))
_PAIRS_SQL = select(_T.c.id, _T.c.a_id, _T.c.b_id, _T.c.weight, _T.c.reasons, _T.c.updated_at).where(
    _T.c.namespace == bindparam("ns"), _T.c.a_id.in_(bindparam("ids", expanding=True)),
    _T.c.b_id.in_(bindparam("ids", expanding=True)))


def _unlink_links(s: Session | Connection, ns: Namespace, memory_ids: Sequence[str], *, forgotten: bool = False) -> int:
    """In session (or connection) ``s``: delete every association link of ``ns``
    with one of ``memory_ids`` on either side; returns how many were deleted. Their
    pending pairs leave the state row too, and their pending times when ``forgotten``."""
    if not memory_ids:
        return 0
    conn = s.connection() if isinstance(s, Session) else s
    # and those waiting in its state row (memory.store.pending); a forgotten memory's pending times go too
    _drop_pending_pairs(conn, ns, list(memory_ids), times=forgotten)
    return int(conn.execute(_UNLINK_SQL, {"ns": str(ns), "ids": list(memory_ids)}).rowcount or 0)


class Links(StoreBase):
    """Association links between the live memories of one namespace."""

    def strengthen_links(self, ns: Namespace, ids: Sequence[str], *, reason: str, at: datetime | None = None,
                         amount: float = 1.0, half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
                         pairs_with: str | None = None) -> int:
        """Link every pair among ``ids`` in ``ns`` once more: each pair's weight
        becomes its decayed weight at ``at`` (aware; default now) plus ``amount``
        (> 0), capped at ``memory.links.W_MAX``, and ``reason`` (one of
        ``memory.links.REASONS``) joins its reasons. ``ids`` are deduplicated in
        order and cut to the first ``MAX_LINKED_IDS``; ids that are not live
        memories of ``ns`` (another namespace's, forgotten, unknown) are dropped,
        checked in the same transaction. Returns the number of pairs written (0
        with fewer than two live ids). ``pairs_with``: only the pairs of that id
        (one of ``ids``) with each of the others (a new memory joining those that
        name the same thing). Raises ValueError for an unknown reason or
        a non-positive ``amount`` or ``half_life_days``; StoreError when the
        database fails."""
        if reason not in REASONS:
            raise ValueError(f"unknown link reason {reason!r} (one of {', '.join(REASONS)})")
        if amount <= 0 or half_life_days <= 0:
            raise ValueError("amount and half_life_days must be > 0")
        wanted = list(dict.fromkeys(i for i in ids if i))[:MAX_LINKED_IDS]
        if pairs_with is not None and pairs_with not in wanted:
            return 0
        if len(wanted) < 2:
            return 0
        at = at or utcnow()
        try:
            return self._strengthen(ns, wanted, reason, at, amount, half_life_days, pairs_with)
        except IntegrityError:
            # PostgreSQL: a concurrent writer inserted one of these pairs first; it is there now
            return self._strengthen(ns, wanted, reason, at, amount, half_life_days, pairs_with)

    def _strengthen(self, ns: Namespace, wanted: list[str], reason: str, at: datetime, amount: float,
                    half_life_days: float, pairs_with: str | None) -> int:
        with self._write_conn() as conn:
            live = set(conn.execute(_LIVE_SQL, {"ns": str(ns), "ids": wanted}).scalars())
            alive = [i for i in wanted if i in live]
            if len(alive) < 2:
                return 0
            pairs = [tuple(sorted(p)) for p in combinations(alive, 2) if pairs_with is None or pairs_with in p]
            if not pairs:
                return 0
            self._write_pairs(conn, ns, alive, {p: (amount, at) for p in pairs}, reason, half_life_days)
        return len(pairs)

    def strengthen_pairs(self, ns: Namespace, grown_by: Mapping[tuple[str, str], tuple[float, datetime]], *,
                         reason: str, half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> int:
        """Several co-uses at once: ``grown_by`` maps a pair of memory ids of ``ns``
        to ``(amount, at)`` — the weight its co-uses added (> 0) and the last of
        them (aware). Each pair of two live memories of ``ns`` (checked in the same
        transaction: another namespace's or a forgotten id links nothing) becomes
        ``min(W_MAX, decayed weight at at + amount)``, one row write each, all in
        one transaction. The same as ``strengthen_links`` once per co-use when the
        co-uses are close together (the decay between them is left out: a
        half-life is days, they are seconds apart). Returns the pairs written.
        Raises ValueError as ``strengthen_links`` does; StoreError."""
        if reason not in REASONS:
            raise ValueError(f"unknown link reason {reason!r} (one of {', '.join(REASONS)})")
        if half_life_days <= 0 or any(v[0] <= 0 for v in grown_by.values()):
            raise ValueError("amount and half_life_days must be > 0")
        pairs = {tuple(sorted(p)): v for p, v in grown_by.items() if p[0] and p[1] and p[0] != p[1]}
        if not pairs:
            return 0
        ids = sorted({i for p in pairs for i in p})
        for attempt in (0, 1):
            try:
                with self._write_conn() as conn:
                    live = set(conn.execute(_LIVE_SQL, {"ns": str(ns), "ids": ids}).scalars())
                    mine = {p: v for p, v in pairs.items() if p[0] in live and p[1] in live}
                    if mine:
                        self._write_pairs(conn, ns, sorted(live), mine, reason, half_life_days)
                return len(mine)
            except IntegrityError:
                if attempt:  # PostgreSQL: a concurrent writer inserted one of these pairs first
                    raise
        return 0

    @staticmethod
    def _write_pairs(conn: Connection, ns: Namespace, alive: list[str],
                     pairs: Mapping[tuple[str, str], tuple[float, datetime] | tuple[float, datetime, int]],
                     reason: str, half_life_days: float) -> None:
        """On ``conn``: grow each pair (``a < b``, both in ``alive``) by its amount at its
        time — a pair already linked only when that changes it meaningfully
        (``memory.links.meaningful``) or adds a reason; a pair given with its
        co-uses (a third field: recall's marks) and not linked yet only from
        ``memory.store.pending.NEW_LINK_USES`` co-uses on (``fold_pair``)."""
        have = {(r.a_id, r.b_id): r for r in conn.execute(_PAIRS_SQL, {"ns": str(ns), "ids": alive})}
        updates, inserts = [], []
        for (a, b), (amount, at, *uses) in pairs.items():
            row = have.get((a, b))
            was = None if row is None else (row.weight, row.reasons, _aware(row.updated_at))
            folded = fold_pair(was, amount, at, reason, half_life_days, uses[0] if uses else None)
            if folded is None:
                continue  # a co-use that barely moves a strong link: no row written (memory.links.MIN_STRENGTH_CHANGE)
            weight, reasons, t = folded
            if row is None:
                inserts.append({"namespace": str(ns), "a_id": a, "b_id": b, "weight": weight, "reasons": reasons,
                                "updated_at": t})
            else:
                updates.append({"rid": row.id, "w": weight, "r": reasons, "t": t})
        if updates:
            conn.execute(update(_T).where(_T.c.id == bindparam("rid"))
                         .values(weight=bindparam("w"), reasons=bindparam("r"), updated_at=bindparam("t")),
                         updates)
        if inserts:
            conn.execute(insert(_T), inserts)
            _count(conn, ns, links=len(inserts))  # recall reads links only where some were made

    def links_of(self, ns: Namespace, ids: Sequence[str], *, at: datetime | None = None, min_weight: float = 0.0,
                 half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
                 pending: PendingMarks | None = None) -> dict[str, list[tuple[str, float, str]]]:
        """The neighbours of each of ``ids`` in ``ns``, in one query: ``{id:
        [(other id, weight decayed to at, reasons), …]}``, strongest first (ties by
        id), leaving out weights below ``min_weight``. Every id asked for has an
        entry (an empty list when unlinked). The co-recall weight still waiting in
        the namespace's row (``memory.store.pending``) counts as folded:
        ``pending`` when the caller read it (``NamespaceStats.marks``, read before
        this), else it is read here first. ``at``: aware time (default now);
        ``half_life_days`` > 0. Raises StoreError."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, list[tuple[str, float, str]]] = {i: [] for i in wanted}
        if not wanted:
            return out
        at = at or utcnow()
        marks = ", ".join([self.mark] * len(wanted))
        # recall's association channel, once per recall: through the DBAPI cursor (``_read_rows``),
        # the pending row first when not given (a fold between the two reads is then seen twice, never missed)
        if pending is None:
            pending = self.pending_marks(ns)  # type: ignore[attr-defined]
        rows = self._read_rows(f"SELECT a_id, b_id, weight, reasons, updated_at FROM memory_links "
                               f"WHERE namespace = {self.mark} AND (a_id IN ({marks}) OR b_id IN ({marks}))",
                               (str(ns), *wanted, *wanted))
        have = {(a_id, b_id): (weight, reasons, _aware(raw_datetime(updated_at)))
                for a_id, b_id, weight, reasons, updated_at in rows}
        if pending.pairs:
            pending.links(wanted, have, half_life_days)
        for (a_id, b_id), (weight, reasons, since) in have.items():
            w = decayed(weight, since, at, half_life_days)
            if w < min_weight:
                continue
            if a_id in out:
                out[a_id].append((b_id, w, reasons))
            if b_id in out:
                out[b_id].append((a_id, w, reasons))
        for neighbours in out.values():
            neighbours.sort(key=lambda n: (-n[1], n[0]))
        return out

    def mentioning(self, ns: Namespace, needles: Sequence[str], *,
                   limit: int) -> dict[str, list[tuple[str, str, str | None]]]:
        """For each of ``needles`` (each normalised: ``memory.text.normalise``), up
        to ``limit`` live memories of ``ns`` whose normalised text contains it as a
        substring: ``{needle: [(id, text, entities), …]}`` (``entities``: the row's
        stored ``memory.links.stored_entities``, None on a row written before that
        column), oldest first; every needle asked
        for has an entry. One query for all needles (a single scan of the
        namespace's rows, read only until every needle has ``limit``), for entity
        linking at add time (``memory.links``); callers check the match. Raises
        StoreError."""
        wanted = list(dict.fromkeys(n for n in needles if n))
        out: dict[str, list[tuple[str, str, str | None]]] = {n: [] for n in wanted}
        if not wanted or limit <= 0:
            return out
        m = self.mark
        like = " OR ".join([f"norm LIKE {m} ESCAPE '\\'"] * len(wanted))
        patterns = ["%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for n in wanted]
        open_ = set(wanted)
        # each capture asks: through the DBAPI cursor (``_read_rows``)
        for i, text, norm, entities in self._read_rows(
                f"SELECT id, text, norm, entities FROM memories WHERE namespace = {m} AND ({like}) "
                f"ORDER BY created_at, id", (str(ns), *patterns)):
            for n in [n for n in open_ if n in (norm or "")]:
                out[n].append((i, text, entities))
                if len(out[n]) >= limit:
                    open_.discard(n)
            if not open_:
                break
        return out

    def count_links(self, ns: Namespace) -> int:
        """How many association links ``ns`` holds (stats, tests, benchmarks): its
        rows and the pairs still waiting in its state row that a fold would link."""
        pending = self.pending_marks(ns)  # type: ignore[attr-defined]
        with self._read() as s:
            conn = s.connection()
            n = int(conn.execute(select(func.count()).select_from(_T).where(_T.c.namespace == str(ns))).scalar_one())
            if pending.pairs:
                have = {(a, b) for a, b in conn.execute(select(_T.c.a_id, _T.c.b_id).where(_T.c.namespace == str(ns)))}
                n += sum(1 for p, (w, last, uses) in pending.pairs.items()  # those a fold would link
                         if p not in have and fold_pair(None, w, _moment(last), "recalled", uses=uses) is not None)
        return n
