"""The token ledger: what the tenants' chat models spent, in SQL.

Every model call (fact extraction, recollection, reply, consolidation) adds
its input and output tokens, as the answer's ``usage`` reported them, to one
row per tenant, UTC day, person (the namespace's subject), purpose and model
(``record_tokens``: one ``INSERT … ON CONFLICT DO UPDATE``, so a day holds a
row per combination, never a row per call) and reads, in the same
transaction, the tenant's total of that day, which the gateway holds against
the tenant's daily cap (``gateway.ledger``). Readers: ``tokens_spent`` (a
tenant's day) and ``token_usage`` (the rows of a span of days, for
``huiyi stats`` and the console). Tenant-scoped, not namespaced: a row holds
counts, never a word anyone said.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from sqlalchemy import bindparam, func, select

from memory.store.base import StoreBase
from memory.store.tables import _TokenLedgerRow

__all__ = ["TokenLedger", "TokenUsage", "PURPOSES"]

_T = _TokenLedgerRow.__table__  # type: ignore[attr-defined]
_DAY_TOTAL = select(func.coalesce(func.sum(_T.c.input_tokens + _T.c.output_tokens), 0)).where(
    _T.c.tenant == bindparam("tenant"), _T.c.day == bindparam("day"))

PURPOSES = ("extract", "reconstruct", "reply", "consolidate", "followup")
"""What a model call was for: fact extraction (capture), the recollection
(reconstruction), the character's reply, consolidation."""


@dataclass(frozen=True)
class TokenUsage:
    """One ledger row: ``tenant``'s model ``model`` spent ``input_tokens`` and
    ``output_tokens`` in ``calls`` calls on ``day`` (UTC) for ``purpose``
    (``PURPOSES``) of person ``subject`` ("" for none)."""

    tenant: str
    day: date
    subject: str
    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    calls: int

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


_UPSERTS: dict = {}


def _upsert(dialect: str):
    """The ledger upsert for ``dialect``, built once (bound parameters tenant,
    day, subject, purpose, model, inp, out)."""
    stmt = _UPSERTS.get(dialect)
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(_T).values(tenant=bindparam("tenant"), day=bindparam("day"), subject=bindparam("subject"),
                                 purpose=bindparam("purpose"), model=bindparam("model"),
                                 input_tokens=bindparam("inp"), output_tokens=bindparam("out"), calls=1)
        _UPSERTS[dialect] = stmt = stmt.on_conflict_do_update(
            index_elements=[_T.c.tenant, _T.c.day, _T.c.subject, _T.c.purpose, _T.c.model],
            set_={"input_tokens": _T.c.input_tokens + bindparam("inp"),
                  "output_tokens": _T.c.output_tokens + bindparam("out"), "calls": _T.c.calls + 1})
    return stmt


class TokenLedger(StoreBase):
    """Recording and reading the token ledger (module docstring)."""

    def record_tokens(self, tenant: str, subject: str, purpose: str, model: str, input_tokens: int,
                      output_tokens: int, day: date) -> int:
        """Add one call's ``input_tokens`` and ``output_tokens`` (≥ 0; a negative
        count is taken as 0) to the row of (``tenant``, ``day``, ``subject``,
        ``purpose``, ``model``), creating it; returns the tenant's total tokens
        of ``day`` after it (every person, purpose and model). One write
        transaction. Raises ValueError for a purpose not in ``PURPOSES``."""
        if purpose not in PURPOSES:
            raise ValueError(f"unknown model call purpose {purpose!r} (one of {', '.join(PURPOSES)})")
        params = {"tenant": tenant[:64], "day": day, "subject": subject[:160], "purpose": purpose,
                  "model": (model or "")[:128], "inp": max(int(input_tokens), 0), "out": max(int(output_tokens), 0)}
        with self._write_conn() as conn:
            conn.execute(_upsert(conn.dialect.name), params)
            return int(conn.execute(_DAY_TOTAL, {"tenant": params["tenant"], "day": day}).scalar_one())

    def tokens_spent(self, tenant: str, day: date) -> int:
        """The tenant's total tokens (input + output) of UTC ``day``; 0 when none."""
        with self._read() as s:
            return int(s.execute(_DAY_TOTAL, {"tenant": tenant[:64], "day": day}).scalar_one())

    def token_usage(self, tenant: str, since: date, until: date | None = None) -> list[TokenUsage]:
        """The ledger rows of ``tenant`` from ``since`` to ``until`` (UTC days,
        both included; None: no end), by day, then person, purpose and model."""
        q = select(_T).where(_T.c.tenant == tenant[:64], _T.c.day >= since)
        if until is not None:
            q = q.where(_T.c.day <= until)
        with self._read() as s:
            rows = s.execute(q.order_by(_T.c.day, _T.c.subject, _T.c.purpose, _T.c.model)).all()
        return [TokenUsage(r.tenant, r.day, r.subject, r.purpose, r.model, int(r.input_tokens),
                           int(r.output_tokens), int(r.calls)) for r in rows]
