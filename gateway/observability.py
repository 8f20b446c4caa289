"""Per-turn audit records and their daily summary.

One JSON line per answered turn in ``<data_dir>/audit/turns-YYYY-MM-DD.jsonl``
(UTC day of the turn, append-only). A record holds::

    at, tenant, namespace, chat, message_id
    turn              the turn's id ("" before turns had one): ``?turn=`` of /v1's why route
    query             [{"message_id", "at"}]  the chat-log lines recall searched with, oldest
                      first, the turn's own message last (their text: ``query_text``, below)
    recalled          [{"id", "score", "ranks", "parts"}]  recall order, best first; ranks: each
                      channel's 1-based rank ({"bm25": 1, "vector": 3, …}), parts: the
                      score's components (rrf, retention, activation, emotion, importance)
    mode              "reconstructed" | "template"
    attempted         a reconstruction was asked of the model this turn
    sources           ids the injected recollection draws on
    grounding         of the model's attempt, in [0, 1] (None: no validated attempt)
    confidence        of the model's attempt, in [0, 1] (None: no validated attempt)
    fallback_reason   None when the reconstruction was accepted, else its code
    sentences         [{"cited", "status", "coverage", "similarity", "via", "missing"}]
    recollection_chars, replied
    latency_ms        {"recall", "recollection", "reconstruct_model",
                       "reconstruct_validate", "reply", "capture", "total"} (present stages)
    k                 how many of recall's ranked candidates were used (the tenant's recall_k)
    recall_at         the time recall ran as of (the message's; what it captured is dated so)
    ranked            [[id, score]] every candidate recall ranked, best first (up to
                      ``memory.explain.TRACE_DEPTH``: the recalled and the runners-up)
    floors            {"bm25", "vector", "standout"}: the relevance floors of that recall
    misses            [[id, channel, score, floor]]: the best few each floor dropped
                      (``memory.explain.Miss``); with ``ranked``, what ``trace_of_record``
                      rebuilds to say why a memory was not recalled in this turn

With ``Settings.audit_fragments`` on, also ``fragments`` ({id: memory text}),
``query_text`` (the text of each ``query`` line),
``reconstruction`` (the model's answer with its ``[src:…]`` markers),
``recollection`` (the injected text), ``prompt`` (the chat messages sent to the
model) and ``reply``. Off (the default) the file holds ids and
numbers only, never a person's words.

``summarise`` turns one day's records into turns, reconstruction success rate
(accepted / attempted), fallback reasons and p50/p95 latency per stage;
``huiyi stats`` prints it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridges.contract import TurnResult
    from memory.explain import RecallTrace
    from memory.reconstruct import Recollection
    from memory.store.chatlog import ChatLine

__all__ = ["audit_file", "turn_record", "write_turn", "read_turns", "summarise", "DaySummary", "percentile", "STAGES",
           "find_turn", "trace_of_record", "TURN_ID_RE"]

log = logging.getLogger(__name__)

STAGES = ("recall", "recollection", "reconstruct_model", "reconstruct_validate", "reply", "capture", "total")
_write_lock = threading.Lock()


def audit_file(data_dir: Path, day: date) -> Path:
    """``<data_dir>/audit/turns-YYYY-MM-DD.jsonl`` for a UTC ``day``."""
    return Path(data_dir) / "audit" / f"turns-{day.isoformat()}.jsonl"


def turn_record(res: TurnResult, rec: Recollection, *, fragments: bool = False,
                at: datetime | None = None, query: Sequence[ChatLine] = (), trace: RecallTrace | None = None) -> dict:
    """The audit record of one turn (module docstring). ``fragments`` adds the
    memory texts, the model's answer and the injected text; ``at`` defaults to
    now (UTC); ``query``: the lines recall searched with, oldest first;
    ``trace``: the recall's (``memory.explain.RecallTrace``), for ``k``,
    ``ranked``, ``floors`` and ``misses``."""
    at = at or datetime.now(timezone.utc)
    attempt = rec.attempt
    v = attempt.validation if attempt is not None else None
    latency = {k: res.latency_ms[k] for k in STAGES if k in res.latency_ms}
    if attempt is not None:
        latency["reconstruct_model"] = attempt.model_ms
        if v is not None:
            latency["reconstruct_validate"] = attempt.validate_ms
    out: dict = {
        "at": at.isoformat(),
        "tenant": res.tenant,
        "namespace": res.namespace,
        "chat": res.chat,
        "message_id": res.message_id,
        "query": [{"message_id": line.message_id, "at": line.at.isoformat()} for line in query],
        "recalled": [{"id": h.memory.id, "score": round(h.score, 6), "ranks": dict(h.ranks),
                      "parts": _parts(h.parts)} for h in rec.raw_hits],
        "mode": rec.mode,
        "attempted": attempt is not None,
        "sources": list(rec.sources),
        "grounding": v.grounding if v is not None else None,
        "confidence": v.confidence if v is not None else None,
        "fallback_reason": rec.fallback_reason,
        "sentences": [{"cited": list(s.cited), "status": s.status, "coverage": s.coverage,
                       "similarity": s.similarity, "via": s.via, "missing": list(s.missing)}
                      for s in (v.sentences if v is not None else ())],
        "recollection_chars": len(rec.text),
        "replied": res.reply is not None,
        "latency_ms": latency,
        "paused": res.paused,
        "turn": res.turn,
    }
    if trace is not None:
        out["k"] = trace.k
        out["recall_at"] = trace.at.isoformat()
        out["ranked"] = [[e.memory_id, round(e.score, 6)] for e in trace.entries]
        out["floors"] = dict(trace.floors)
        out["misses"] = [[m.memory_id, m.channel, round(m.score, 6), round(m.floor, 6)] for m in trace.misses]
    if fragments and not res.paused:  # off the record: no words of the turn are kept, whatever the switch
        out["fragments"] = {h.memory.id: h.memory.text for h in rec.raw_hits}
        out["query_text"] = [line.text for line in query]
        out["reconstruction"] = attempt.output if attempt is not None else ""
        out["recollection"] = rec.text
        out["prompt"] = list(res.prompt)
        out["reply"] = res.reply
    return out


def _parts(parts) -> dict[str, float] | None:
    """A hit's ``ScoreParts`` as numbers (rounded to 6 places), None when absent."""
    if parts is None:
        return None
    return {name: round(float(getattr(parts, name)), 6)
            for name in ("rrf", "retention", "activation", "emotion", "importance")}


def write_turn(data_dir: Path, record: dict) -> Path:
    """Append ``record`` as one line to the file of its day (from ``record["at"]``,
    UTC); creates ``<data_dir>/audit``. Returns the file. Raises OSError when
    the data root is not writable (the pipeline logs it and carries on)."""
    day = datetime.fromisoformat(record["at"]).astimezone(timezone.utc).date()
    path = audit_file(data_dir, day)
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    with _write_lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    return path


def read_turns(data_dir: Path, day: date) -> list[dict]:
    """The records of one UTC day ([] when there is no file); lines that are not
    JSON objects are skipped with a warning."""
    path = audit_file(data_dir, day)
    if not path.exists():
        return []
    out: list[dict] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s:%d is not JSON; skipped", path, n)
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (q in [0, 100]) of ``values`` by linear
    interpolation between the closest ranks (numpy's default method, type 7 of
    Hyndman & Fan 1996); None for no values. Raises ValueError for q outside
    [0, 100]."""
    if not values:
        return None
    import numpy as np  # deferred: the CLI's other commands do not need numpy

    return float(np.percentile(values, q))


@dataclass
class DaySummary:
    """One day of turns: ``turns`` answered; ``attempted`` reconstructions and
    ``accepted`` ones; ``success_rate`` = accepted / attempted in [0, 1] (None
    when none was attempted); ``fallback_reasons`` counts per code over all
    turns; ``grounding_mean`` over validated attempts; ``latency_ms``: stage →
    {"n", "p50", "p95"} in milliseconds."""

    day: str
    turns: int = 0
    attempted: int = 0
    accepted: int = 0
    success_rate: float | None = None
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    grounding_mean: float | None = None
    latency_ms: dict[str, dict[str, float | int | None]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Plain text for a terminal (operator output, English)."""
        rate = "-" if self.success_rate is None else f"{self.success_rate:.1%}"
        g = "-" if self.grounding_mean is None else f"{self.grounding_mean:.3f}"
        out = [f"day {self.day}: {self.turns} turns, {self.attempted} reconstructions attempted, "
               f"{self.accepted} accepted (success rate {rate}), mean grounding {g}"]
        if self.fallback_reasons:
            out.append("fallback reasons: " + ", ".join(f"{k} {v}" for k, v in self.fallback_reasons.items()))
        if self.latency_ms:
            out.append(f"{'stage':<22}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}")
            for stage, row in self.latency_ms.items():
                out.append(f"{stage:<22}{row['n']:>6}{_f(row['p50']):>10}{_f(row['p95']):>10}")
        return out


def _f(v: object) -> str:
    return "-" if v is None else f"{v:.1f}"


def summarise(records: Iterable[dict], day: date) -> DaySummary:
    """Summarise one day's audit records (see DaySummary)."""
    s = DaySummary(day=day.isoformat())
    reasons: Counter[str] = Counter()
    groundings: list[float] = []
    stages: dict[str, list[float]] = {}
    for r in records:
        s.turns += 1
        if r.get("attempted"):
            s.attempted += 1
            if r.get("fallback_reason") is None:
                s.accepted += 1
        reason = r.get("fallback_reason")
        if reason:
            reasons[str(reason)] += 1
        if isinstance(r.get("grounding"), (int, float)):
            groundings.append(float(r["grounding"]))
        for k, v in (r.get("latency_ms") or {}).items():
            if isinstance(v, (int, float)):
                stages.setdefault(k, []).append(float(v))
    s.success_rate = round(s.accepted / s.attempted, 4) if s.attempted else None
    s.fallback_reasons = dict(reasons.most_common())
    s.grounding_mean = round(sum(groundings) / len(groundings), 4) if groundings else None
    order = [k for k in STAGES if k in stages] + sorted(k for k in stages if k not in STAGES)
    s.latency_ms = {k: {"n": len(stages[k]), "p50": _r(percentile(stages[k], 50)),
                        "p95": _r(percentile(stages[k], 95))} for k in order}
    return s


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


TURN_ID_RE = re.compile(r"^[0-9a-f]{16}$")
"""A turn id (``gateway.logs.new_turn_id``): 16 lowercase hex characters."""


def find_turn(data_dir: Path, tenant: str, turn: str, days: Iterable[date]) -> dict | None:
    """The audit record of turn ``turn`` of ``tenant`` among the UTC ``days``
    given (newest first is fastest), or None. Reads one day's file at a time."""
    for day in days:
        for record in read_turns(data_dir, day):
            if record.get("turn") == turn and record.get("tenant") == tenant:
                return record
    return None


def trace_of_record(record: dict) -> RecallTrace:
    """The ``memory.explain.RecallTrace`` an audit record keeps: its namespace,
    chat and time, ``k`` and the ranked candidates (a record without ``ranked``:
    its recalled ones, ``k`` their count), the floors and what they dropped.
    Raises ValueError (NamespaceError) for a record whose namespace does not parse."""
    from memory.explain import Miss, RecallTrace, TraceEntry
    from memory.types import Namespace

    ns = Namespace.parse(str(record.get("namespace")))
    ranked = record.get("ranked")
    if not isinstance(ranked, list):
        ranked = [[h.get("id"), h.get("score") or 0.0] for h in record.get("recalled") or [] if isinstance(h, dict)]
    recalled = {h.get("id"): h for h in record.get("recalled") or [] if isinstance(h, dict)}
    entries = tuple(TraceEntry(str(mid), i, float(score), dict((recalled.get(mid) or {}).get("ranks") or {}))
                    for i, (mid, score) in enumerate(ranked, start=1))
    k = int(record.get("k") if isinstance(record.get("k"), int) else len(recalled))
    misses = tuple(Miss(str(m), str(ch), float(sc), float(fl)) for m, ch, sc, fl in record.get("misses") or ())
    at = datetime.fromisoformat(str(record.get("recall_at") or record.get("at")))
    return RecallTrace(ns, str(record.get("chat")), at, k, str(record.get("fallback_reason") or ""), entries,
                       dict(record.get("floors") or {}), misses)
