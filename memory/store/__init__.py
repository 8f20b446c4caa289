"""The SQL store: source of truth for memories, history, tombstones, deliveries,
the recent chat log, the index outbox, the audit log, identity links and the
state behind the slash commands, and the conflict and association links
between memories.

``Store`` is the one class callers use; it is assembled from one part per
concern, each in a module named after it::

    memory/store/
      __init__.py    Store and the public names (this docstring)
      tables.py      the SQLModel tables (private), row → Memory, engine set-up
      base.py        StoreBase: engine, schema, the one transaction boundary
                     (_write, _write_conn, _write_one, _read, _read_rows,
                     _read_many), close, scrub, ping, schema
                     revision and upgrade; utcnow, new_memory_id
      migrate.py     the schema by Alembic: create-and-stamp an empty database,
                     upgrade any other (revisions in migrations/versions/)
      memories.py    MemoryRows: memories, history, tombstones, touch, retract,
                     group-scoped listings; MemoryText, Candidate (recall's lean
                     read of its candidates)
      chatlog.py     ChatLog: chat log, redactions, deliveries, captures still
                     due, edits, chat migration; ChatLine, PendingCapture, ChatMigration
      outbox.py      IndexOutbox: the index outbox; IndexOp
      audit.py       AuditLog: the audit log
      identities.py  Identities: identity links, move_namespace
      commands.py    CommandState: last-recall traces, pending confirmations,
                     tenant counts; TenantCounts
      traces.py      each namespace's last recall in its namespace_state row,
                     and the traces held until a capture's write carries them
      nonces.py      SeenNonces: nonces of signed callbacks already accepted; NonceClaim
      conflicts.py   Conflicts: conflict links between two live memories of a
                     namespace (said differently, no clear change); Conflict
      links.py       Links: association links between two live memories of a
                     namespace (recalled together, clustered, sharing an
                     entity), weighted, decaying (rule in ``memory.links``)
      consolidated.py ConsolidatedRows: consolidated memories (type, confidence,
                     hits, sources, dormancy), "which consolidated memories cite
                     fragment X", the dormancy sweep, each namespace's
                     consolidation state (issue 17); Consolidated,
                     ConsolidationState
      followups.py   Followups: who opted in to follow-ups about their plans,
                     and the follow-ups owed (claimed once, at most one a
                     person a day, on every replica); Followup, FollowupPref
      pauses.py      Pauses: a person's "off the record" per chat (/memory
                     pause), in force on every replica; Pause
      apikeys.py     ApiKeys: API keys of the HTTP API (hashed); ApiKey, KeyScope
      console_sessions.py ConsoleSessions: the admin console's open sessions
                     (hashed ids; a logout deletes its row on every replica)
      versions.py    NamespaceVersions: each namespace's write version and live
                     count (bumped inside every memory write's transaction)
      ledger.py      TokenLedger: tokens the chat models spent per tenant,
                     day, person, purpose and model; TokenUsage
      events.py      ChangeEvents: change events owed to the tenants' webhooks,
                     written inside every memory write's transaction, kept as
                     dead letters when given up; ChangeEvent, EventStats

Every part subclasses ``StoreBase`` and opens transactions only through it;
the parts import ``tables`` and ``base`` (and ``memories`` imports
``chatlog``'s line redaction; ``memories`` and ``identities`` import
``conflicts``' and ``links``' unlinking, ``memories`` ``consolidated``'s row drop), never each other in a circle.

SQLModel tables are private to this package; callers get core dataclasses
(``memory.types``) or the frozen values re-exported here. Every memory read and
write takes a ``Namespace`` first and filters on it in SQL; there is no
unscoped memory query here (tenant-wide operations live in ``memory.admin``).

Backends: SQLite (WAL, busy timeout 10 s, one writer at a time through a
process lock) under the data root by default, or PostgreSQL when the URL says
so (``postgresql://`` URLs are driven by psycopg 3). ``schema`` puts every
table of a PostgreSQL store in its own schema (tests use one per run).

SQLite never answers "database is locked" to the gateway's own concurrency:
every write transaction starts with ``BEGIN IMMEDIATE`` (the write lock is
taken up front, so the busy timeout applies and no read-to-write upgrade can
deadlock — also between two processes on one file, e.g. the gateway and the
operator CLI); reads run in deferred transactions that WAL never blocks.

What a forget leaves in SQL: nothing readable. ``delete`` removes the live row,
its history rows and the chat-log lines the memory was learned from, in one
transaction; SQLite runs with ``secure_delete`` (freed cells and pages are
zeroed) and ``scrub()`` truncates the WAL, so not even free pages keep the
text. PostgreSQL keeps dead tuples until (auto)vacuum and WAL segments until
they are recycled; run ``VACUUM`` on ``memories``, ``memory_history`` and
``chat_log`` where that matters.

Index outbox: each memory write adds an ``IndexOp`` row in the same
transaction. The index applies it and clears it; a crash between SQL and index
leaves the row, which ``SearchIndex`` maintenance re-applies. Nothing is lost.
"""

from __future__ import annotations

from memory.store.apikeys import ApiKey, ApiKeys, KeyScope
from memory.store.audit import AuditLog
from memory.store.base import new_memory_id, utcnow
from memory.store.chatlog import ChatLine, ChatLog, ChatMigration, PendingCapture
from memory.store.commands import CommandState, TenantCounts
from memory.store.console_sessions import ConsoleSessions
from memory.store.conflicts import Conflict, Conflicts
from memory.store.consolidated import Consolidated, ConsolidatedRows, ConsolidationState
from memory.store.events import ChangeEvent, ChangeEvents, EventStats
from memory.store.followups import Followup, FollowupPref, Followups
from memory.store.identities import Identities
from memory.store.ledger import TokenLedger, TokenUsage
from memory.store.links import MAX_LINKED_IDS, Links
from memory.store.memories import Candidate, MemoryRows, MemoryText
from memory.store.nonces import NonceClaim, SeenNonces
from memory.store.outbox import IndexOp, IndexOutbox
from memory.store.pauses import Pause, Pauses
from memory.store.pending import NO_MARKS, PendingMarks
from memory.store.versions import NamespaceStats, NamespaceVersions

__all__ = ["Store", "ChatLine", "IndexOp", "TenantCounts", "new_memory_id", "utcnow", "ChatMigration", "PendingCapture",
           "MemoryText", "Candidate", "Conflict", "ApiKey", "KeyScope", "MAX_LINKED_IDS", "Consolidated",
           "ConsolidationState", "ChangeEvent", "EventStats", "NamespaceStats", "NonceClaim", "Pause", "TokenUsage",
           "Followup", "FollowupPref", "PendingMarks", "NO_MARKS"]


class Store(MemoryRows, ChatLog, IndexOutbox, AuditLog, Identities, CommandState, SeenNonces, Conflicts, Links,
            ApiKeys, ConsoleSessions, NamespaceVersions, ConsolidatedRows, ChangeEvents, Pauses, TokenLedger,
            Followups):
    """SQL source of truth. Thread-safe; methods are synchronous (call them in a
    thread from async code).

    ``url``: SQLAlchemy URL (``sqlite:///path`` or ``postgresql://…``);
    ``schema``: PostgreSQL schema to create and use (None: the default).
    Raises StoreError when the database cannot be reached.

    The methods live with their concern (see the package docstring): memories,
    history and tombstones in ``MemoryRows`` (with recall's marks waiting in
    their namespace's row: ``memory.store.pending``); chat log, deliveries and
    redactions in ``ChatLog``; the index outbox in ``IndexOutbox``; audit in
    ``AuditLog``; identity links and ``move_namespace`` in ``Identities``;
    last-recall traces, confirmations and tenant counts in ``CommandState``;
    conflict links in ``Conflicts``; association links in ``Links``; write
    versions and live counts in ``NamespaceVersions``; consolidated memories and
    consolidation state in ``ConsolidatedRows``; the console's sessions in
    ``ConsoleSessions``. All share ``StoreBase``'s engine
    and transactions.
    """
