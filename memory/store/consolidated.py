"""Consolidated memories and each namespace's consolidation progress (issue 17).

A consolidated memory is an ordinary live memory (a ``memories`` row, searched,
disclosed, edited, forgotten like any other) plus a ``consolidated`` row of the
same namespace saying what makes it one: its type (``fact``, ``pattern``,
``preference``, ``relationship``, ``mood``), confidence in [0, 1], recall hits,
the fragments it cites (``sources``) and since when it is dormant.

Every read and write takes the ``Namespace`` first and filters on it in SQL; a
row is written only when its memory and every source are live memories of that
namespace, read in the same transaction, so no consolidated memory ever rests
on another namespace's fragment. The row is deleted in the transaction that
deletes its memory (``memory.store.memories``: ``_drop_consolidated``);
``move_namespace`` carries it (``memory.store.identities``); the core removes
every consolidated memory citing a forgotten fragment (``MemoryCore.forget``).

``consolidation_state`` holds per namespace the last run (``run_at``), the
watermark (the newest fragment creation time considered: fragments created
after it are "new") and what the run made.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, update
from sqlmodel import Session, select

from memory.errors import NotFoundError
from memory.store.base import StoreBase, utcnow
from memory.store.tables import _aware, _ConsolidatedRow, _ConsolidationStateRow, _MemoryRow, _to_memory
from memory.store.versions import _count
from memory.types import Memory, Namespace

__all__ = ["Consolidated", "ConsolidationState", "CTYPES", "ConsolidatedRows"]

CTYPES = ("fact", "pattern", "preference", "relationship", "mood")
"""The types of a consolidated memory: a stable fact, a pattern of behaviour, a
preference, a relationship, a mood that lasts."""

_C = _ConsolidatedRow.__table__  # type: ignore[attr-defined]
# recall reads this every turn: built once, an index lookup per namespace


def _count_hits(conn, ns: Namespace, memory_ids: Sequence[str], at: datetime, n: int = 1) -> None:
    """On connection ``conn`` (inside the caller's write transaction): ``n`` recall
    hits for each consolidated memory of ``ns`` among ``memory_ids`` — ``hits`` + n,
    ``last_hit_at`` = ``at``, awake again (``dormant_since`` None); ids that are
    not consolidated memories of ``ns`` are ignored. Called by ``touch``
    (``memory.store.memories``), so a turn's recall marks take one transaction."""
    conn.execute(update(_C).where(_C.c.namespace == str(ns), _C.c.memory_id.in_(list(memory_ids)))
                 .values(hits=_C.c.hits + n, last_hit_at=at, dormant_since=None))


@dataclass(frozen=True, slots=True)
class Consolidated:
    """The consolidated side of a memory of ``namespace``: ``ctype`` (one of
    CTYPES), ``confidence`` in [0, 1], ``hits`` (recalls into a prompt),
    ``last_hit_at`` (aware UTC, None before the first), ``dormant_since`` (None
    while awake), ``sources`` (the fragment ids it cites, in citation order) and
    ``created_at``."""

    memory_id: str
    namespace: Namespace
    ctype: str
    confidence: float
    hits: int
    last_hit_at: datetime | None
    dormant_since: datetime | None
    sources: tuple[str, ...]
    created_at: datetime

    @property
    def dormant(self) -> bool:
        return self.dormant_since is not None


@dataclass(frozen=True, slots=True)
class ConsolidationState:
    """A namespace's consolidation progress: ``run_at`` (end of the last run, None
    before any), ``watermark`` (newest fragment ``created_at`` considered, None
    before any), ``clusters`` and ``abstractions`` made by the last run."""

    run_at: datetime | None = None
    watermark: datetime | None = None
    clusters: int = 0
    abstractions: int = 0


def _value(row, ns: Namespace) -> Consolidated:
    return Consolidated(row.memory_id, ns, row.ctype, float(row.confidence), int(row.hits), _aware(row.last_hit_at),
                        _aware(row.dormant_since), tuple(json.loads(row.sources or "[]")), _aware(row.created_at))


def _awake(ns: Namespace, memory_id_column):
    """SQL filter: the memory in ``memory_id_column`` (of ``ns``) is not a dormant
    consolidated one, so that listings page over what they show (``/memory list``)."""
    from sqlalchemy import exists

    return ~exists().where(_C.c.namespace == str(ns), _C.c.memory_id == memory_id_column,
                           _C.c.dormant_since.is_not(None))


def _drop_consolidated(s: Session, ns: Namespace, memory_ids: Sequence[str]) -> None:
    """In session ``s``: delete the consolidated rows of ``memory_ids`` in ``ns``
    (the memories themselves are being deleted in the same transaction)."""
    if memory_ids:
        s.connection().execute(delete(_C).where(_C.c.namespace == str(ns), _C.c.memory_id.in_(list(memory_ids))))


def _cite_pattern(memory_id: str) -> str:
    """A LIKE pattern matching ``memory_id`` as one element of a JSON id list
    (ids are ``[0-9a-z]`` only: ``memory.types.ID_RE``, nothing to escape)."""
    return f'%"{memory_id}"%'


class ConsolidatedRows(StoreBase):
    """Consolidated memories and consolidation state, one namespace per call."""

    def put_consolidated(self, ns: Namespace, memory_id: str, ctype: str, confidence: float,
                         sources: Sequence[str], at: datetime | None = None) -> Consolidated:
        """Make the live memory ``memory_id`` of ``ns`` a consolidated one citing
        ``sources`` (ids of live memories of ``ns``, none of them consolidated
        itself), or, when it is one already, add ``sources`` to its own and keep
        the higher confidence. ``ctype`` one of CTYPES (ValueError otherwise),
        ``confidence`` clipped to [0, 1]. Raises NotFoundError when the memory or
        any source is not a live memory of ``ns`` (checked in this transaction: a
        source forgotten meanwhile refuses the row)."""
        if ctype not in CTYPES:
            raise ValueError(f"unknown consolidated type {ctype!r}")
        cited = list(dict.fromkeys(sources))
        if not cited or memory_id in cited:
            raise ValueError("a consolidated memory cites at least one fragment other than itself")
        at = at or utcnow()
        conf = min(1.0, max(0.0, float(confidence)))
        with self._write() as s:
            wanted = [memory_id, *cited]
            live = set(s.exec(select(_MemoryRow.id).where(_MemoryRow.namespace == str(ns),
                                                          _MemoryRow.id.in_(wanted))).all())  # type: ignore[attr-defined]
            if set(wanted) - live:
                raise NotFoundError(f"memories {sorted(set(wanted) - live)} are not live in {ns}")
            row = s.exec(select(_ConsolidatedRow).where(_ConsolidatedRow.namespace == str(ns),
                                                        _ConsolidatedRow.memory_id == memory_id)).first()
            if row is None:
                row = _ConsolidatedRow(memory_id=memory_id, namespace=str(ns), ctype=ctype, confidence=conf,
                                       sources=json.dumps(cited), created_at=at)
            else:
                row.sources = json.dumps(list(dict.fromkeys([*json.loads(row.sources or "[]"), *cited])))
                row.confidence = max(float(row.confidence), conf)
            s.add(row)
            s.flush()
            return _value(row, ns)

    def consolidated(self, ns: Namespace, memory_ids: Sequence[str] | None = None, *,
                     dormant: bool | None = None) -> dict[str, Consolidated]:
        """Consolidated rows of ``ns`` by memory id: of ``memory_ids`` (None: all),
        only dormant ones (``dormant`` True), only awake ones (False) or both (None)."""
        if memory_ids is not None and not memory_ids:
            return {}
        q = select(_ConsolidatedRow).where(_ConsolidatedRow.namespace == str(ns))
        if memory_ids is not None:
            q = q.where(_ConsolidatedRow.memory_id.in_(list(memory_ids)))  # type: ignore[attr-defined]
        if dormant is True:
            q = q.where(_ConsolidatedRow.dormant_since.is_not(None))  # type: ignore[union-attr]
        elif dormant is False:
            q = q.where(_ConsolidatedRow.dormant_since.is_(None))  # type: ignore[union-attr]
        with self._read() as s:
            return {r.memory_id: _value(r, ns) for r in s.exec(q).all()}

    def list_consolidated(self, ns: Namespace, *, include_dormant: bool = False, limit: int = 50,
                          offset: int = 0) -> list[tuple[Memory, Consolidated]]:
        """Consolidated memories of ``ns`` with their rows, newest first; dormant
        ones only with ``include_dormant``."""
        q = (select(_MemoryRow, _ConsolidatedRow)
             .join(_ConsolidatedRow, (_ConsolidatedRow.memory_id == _MemoryRow.id)
                   & (_ConsolidatedRow.namespace == _MemoryRow.namespace))
             .where(_MemoryRow.namespace == str(ns)))
        if not include_dormant:
            q = q.where(_ConsolidatedRow.dormant_since.is_(None))  # type: ignore[union-attr]
        q = q.order_by(_ConsolidatedRow.created_at.desc(), _MemoryRow.id).offset(offset).limit(limit)  # type: ignore[attr-defined]
        with self._read() as s:
            return [(_to_memory(m), _value(c, ns)) for m, c in s.exec(q).all()]

    def count_consolidated(self, ns: Namespace, *, include_dormant: bool = False) -> int:
        """How many consolidated memories ``list_consolidated`` can return."""
        q = select(func.count()).select_from(_ConsolidatedRow).where(_ConsolidatedRow.namespace == str(ns))
        if not include_dormant:
            q = q.where(_ConsolidatedRow.dormant_since.is_(None))  # type: ignore[union-attr]
        with self._read() as s:
            return int(s.exec(q).one())

    def citing(self, ns: Namespace, memory_id: str) -> list[str]:
        """Ids of the consolidated memories of ``ns`` that cite ``memory_id`` as a source."""
        with self._read() as s:
            rows = s.exec(select(_ConsolidatedRow.memory_id, _ConsolidatedRow.sources).where(
                _ConsolidatedRow.namespace == str(ns),
                _ConsolidatedRow.sources.like(_cite_pattern(memory_id)))).all()  # type: ignore[attr-defined]
        return sorted(mid for mid, src in rows if memory_id in json.loads(src or "[]"))

    def dormant_among(self, ns: Namespace, memory_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``memory_ids`` are dormant consolidated memories of ``ns`` (recall's
        down-weighting; once per recall, through the DBAPI cursor). Raises StoreError."""
        if not memory_ids:
            return frozenset()
        ids = list(memory_ids)
        rows = self._read_rows(f"SELECT memory_id FROM consolidated WHERE namespace = {self.mark} AND dormant_since "
                               f"IS NOT NULL AND memory_id IN ({', '.join([self.mark] * len(ids))})", (str(ns), *ids))
        return frozenset(r[0] for r in rows)

    def sweep_dormant(self, ns: Namespace, *, unused_since: datetime, below: float,
                      at: datetime | None = None) -> list[str]:
        """Make dormant the awake consolidated memories of ``ns`` with confidence
        below ``below`` (in [0, 1]) and no hit since ``unused_since`` (their last
        hit, or their creation when never hit, is older). Returns their ids. Never
        deletes anything: a dormant memory is only down-weighted in recall."""
        at = at or utcnow()
        last_use = func.coalesce(_C.c.last_hit_at, _C.c.created_at)
        cond = (_C.c.namespace == str(ns), _C.c.dormant_since.is_(None), _C.c.confidence < below,
                last_use < unused_since)
        with self.engine.connect() as conn:  # a read first: most sweeps change nothing and take no write lock
            if conn.execute(select(_C.c.memory_id).where(*cond).limit(1)).first() is None:
                return []
        with self._write_conn() as conn:
            ids = sorted(r[0] for r in conn.execute(select(_C.c.memory_id).where(*cond)))
            if ids:
                conn.execute(update(_C).where(_C.c.namespace == str(ns), _C.c.memory_id.in_(ids))
                             .values(dormant_since=at))
                _count(conn, ns, dormant=len(ids))  # recall reads dormant marks only where some were made
        return ids

    def consolidated_namespaces(self, tenant: str) -> list[Namespace]:
        """Namespaces of ``tenant`` holding consolidated memories (the dormancy
        sweep's list; a number of names, no row of any namespace is read)."""
        with self._read() as s:
            names = s.exec(select(_ConsolidatedRow.namespace).distinct().where(
                _ConsolidatedRow.namespace.startswith(tenant + "/", autoescape=True))).all()  # type: ignore[attr-defined]
        return [Namespace.parse(n) for n in names]

    # -- fragments and progress ---------------------------------------------

    def fragments_since(self, ns: Namespace, after: datetime | None, limit: int) -> list[Memory]:
        """Live memories of ``ns`` that are not consolidated ones, created after
        ``after`` (None: all), oldest first, at most ``limit``: what a
        consolidation run considers."""
        q = (select(_MemoryRow)
             .outerjoin(_ConsolidatedRow, (_ConsolidatedRow.memory_id == _MemoryRow.id)
                        & (_ConsolidatedRow.namespace == _MemoryRow.namespace))
             .where(_MemoryRow.namespace == str(ns), _ConsolidatedRow.memory_id.is_(None)))  # type: ignore[union-attr]
        if after is not None:
            q = q.where(_MemoryRow.created_at > after)
        q = q.order_by(_MemoryRow.created_at, _MemoryRow.id).limit(limit)  # type: ignore[arg-type]
        with self._read() as s:
            return [_to_memory(r) for r in s.exec(q).all()]

    def count_fragments_since(self, ns: Namespace, after: datetime | None) -> int:
        """How many fragments ``fragments_since`` would give without a limit."""
        q = (select(func.count()).select_from(_MemoryRow)
             .outerjoin(_ConsolidatedRow, (_ConsolidatedRow.memory_id == _MemoryRow.id)
                        & (_ConsolidatedRow.namespace == _MemoryRow.namespace))
             .where(_MemoryRow.namespace == str(ns), _ConsolidatedRow.memory_id.is_(None)))  # type: ignore[union-attr]
        if after is not None:
            q = q.where(_MemoryRow.created_at > after)
        with self._read() as s:
            return int(s.exec(q).one())

    def consolidation_candidates(self, tenant: str, min_new: int, limit: int = 50) -> list[Namespace]:
        """Namespaces of ``tenant`` with at least ``min_new`` fragments created after
        their watermark (``fragments_since``), most new fragments first, at most
        ``limit``: the maintenance task's list. Each namespace is counted on its
        own rows only (the joins are on equal namespaces)."""
        m, st = _MemoryRow.__table__, _ConsolidationStateRow.__table__  # type: ignore[attr-defined]
        n = func.count().label("n")
        q = (select(m.c.namespace, n)
             .select_from(m.outerjoin(st, st.c.namespace == m.c.namespace)
                          .outerjoin(_C, (_C.c.memory_id == m.c.id) & (_C.c.namespace == m.c.namespace)))
             .where(m.c.tenant == tenant, _C.c.memory_id.is_(None),
                    st.c.watermark.is_(None) | (m.c.created_at > st.c.watermark))
             .group_by(m.c.namespace).having(func.count() >= min_new)
             .order_by(n.desc(), m.c.namespace).limit(limit))
        with self.engine.connect() as conn:
            return [Namespace.parse(r.namespace) for r in conn.execute(q)]

    def consolidation_state(self, ns: Namespace) -> ConsolidationState:
        """The progress of ``ns`` (all None/0 before its first run)."""
        with self._read() as s:
            row = s.get(_ConsolidationStateRow, str(ns))
        if row is None:
            return ConsolidationState()
        return ConsolidationState(_aware(row.run_at), _aware(row.watermark), row.clusters, row.abstractions)

    def put_consolidation_state(self, ns: Namespace, state: ConsolidationState) -> None:
        """Record the progress of ``ns`` (replacing the previous one)."""
        with self._write() as s:
            row = s.get(_ConsolidationStateRow, str(ns)) or _ConsolidationStateRow(namespace=str(ns))
            row.run_at, row.watermark = state.run_at, state.watermark
            row.clusters, row.abstractions = state.clusters, state.abstractions
            s.add(row)

    def clear_consolidation(self, ns: Namespace) -> None:
        """Forget the progress of ``ns`` (``forget all``: the next run starts from
        scratch). Consolidated rows go with their memories, which the caller
        forgets one by one (each forget deletes its row)."""
        with self._write() as s:
            s.exec(delete(_ConsolidationStateRow).where(_ConsolidationStateRow.namespace == str(ns)))  # type: ignore[call-overload]
