"""The audit trail of the memory lifecycle: who did what to which memory, in
which namespace — never what the memory said.

Actions: ``store``, ``dedupe``, ``supersede``, ``conflict``, ``reject``,
``edit``, ``retract``, ``forget``, ``forget_subject``, ``reindex``, ``metadata``
(a memory's tags changed: how many keys, never which values), ``forget_scope``
(an admin forgot a person's memories of one group, ``memory.admin``). Records go
to the store's append-only ``audit_log`` table.

No text by construction: ``detail`` accepts only numbers, booleans, None and
short identifier-like strings (categories, reasons, counts), so neither a
memory's text nor its canonical key (which may contain text) can reach the
log — a forgotten memory leaves nothing readable here.

Failing to audit never fails the operation it records (the memory write has
already committed), and it is never swallowed either: it is logged at ERROR
with the namespace, action and memory id, and counted in ``failures`` (for
the health and metrics endpoints). The record of a new memory (``store``) is
the exception: it goes into the transaction of the insert itself (``entry``,
``memory.store.MemoryRows.add``), so the two commit together or not at all
and a capture pays one commit per fact instead of two.

What capture learns message by message — ``CAPTURE_ACTIONS``: ``store``,
``dedupe``, ``supersede``, ``conflict``, ``reject`` — is recorded only while
``captures`` is on (the default; the gateway's ``audit_captures`` setting):
off, a stored fact costs no audit row (one SQL row of about ten a message).
Every other action — an edit, a removal (``forget``, ``retract``, …), a
person's or an admin's command, a denial — is recorded either way.
"""

from __future__ import annotations

import logging
import re
import threading

from memory.store.audit import AuditEntry
from memory.types import Namespace

__all__ = ["AuditLog", "ACTIONS", "CAPTURE_ACTIONS"]

log = logging.getLogger(__name__)

ACTIONS = frozenset({"store", "dedupe", "supersede", "conflict", "reject", "edit", "retract", "forget",
                     "forget_subject", "reindex", "metadata", "forget_scope"})
CAPTURE_ACTIONS = frozenset({"store", "dedupe", "supersede", "conflict", "reject"})
"""What capture's own writes record: skipped while ``AuditLog.captures`` is off."""
_TOKEN_RE = re.compile(r"[a-z0-9_.:-]{0,40}")


def _check_detail(detail: dict[str, object]) -> None:
    for name, value in detail.items():
        if value is None or isinstance(value, bool | int | float):
            continue
        if isinstance(value, str) and _TOKEN_RE.fullmatch(value):
            continue
        raise ValueError(f"audit detail {name!r} must be a number or a short identifier, not free text")


class AuditLog:
    """Writes audit records through a ``Store``; thread-safe.

    ``failures``: how many records could not be written since start-up.
    ``captures``: record ``CAPTURE_ACTIONS`` (default True; off, ``entry``
    gives None and ``record`` writes nothing for them).
    ``record`` raises ValueError for an unknown action or a free-text detail
    (a programming error, caught by tests); store failures are logged and counted.
    """

    def __init__(self, store, *, captures: bool = True) -> None:
        self.store = store
        self.captures = captures
        self._failures = 0
        self._guard = threading.Lock()

    @property
    def failures(self) -> int:
        """Audit records lost since start-up (each was logged at ERROR)."""
        return self._failures

    def entry(self, action: str, actor: str, **detail: object) -> AuditEntry | None:
        """A record for the store to write in the transaction of the write it
        records (``memory.store.MemoryRows.add(audit=…)``); None for a
        ``CAPTURE_ACTIONS`` record while ``captures`` is off. Raises ValueError
        as ``record`` does."""
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r}")
        _check_detail(detail)
        if not self.captures and action in CAPTURE_ACTIONS:
            return None
        return AuditEntry(action, actor, detail)

    def record(self, ns: Namespace, action: str, actor: str, memory_id: str | None = None, **detail: object) -> bool:
        """Append one record; True when it was written (False also for a
        ``CAPTURE_ACTIONS`` record while ``captures`` is off)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r}")
        _check_detail(detail)
        if not self.captures and action in CAPTURE_ACTIONS:
            return False
        try:
            self.store.audit(ns, action, actor, memory_id, **detail)
            return True
        except Exception as exc:  # noqa: BLE001 - counted and logged loudly below, the write itself stands
            with self._guard:
                self._failures += 1
                n = self._failures
            log.error("AUDIT FAILED (%d so far): action=%s namespace=%s memory=%s actor=%s: %s: %s",
                      n, action, ns, memory_id, actor, type(exc).__name__, exc)
            return False
