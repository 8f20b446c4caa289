"""The recent chat log and what hangs off it: redactions, deliveries, captures
still due, edits and chat migration.

Chat-log lines are keyed by tenant and chat key (``ChatRef.key``), not by
namespace: a chat holds several speakers and the bot. What is said by the
subject of a namespace is found through ``_speaker_lines``. A forget deletes
lines and leaves a ``chat_redactions`` row (ids only) so that a replayed
message cannot bring the text back. Processed platform deliveries
(``deliveries``) are claimed here, alone or together with the line they
carry — and with it the nonce of the signed callback that brought it
(``memory.store.nonces``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, delete, select

from memory.errors import DuplicateDelivery, NonceUsed
from memory.store.base import StoreBase, raw_datetime, utcnow
from memory.store.nonces import NonceClaim, claim_in
from memory.store.traces import upsert_params, upsert_sql
from memory.store.tables import _aware, _AuditRow, _ChatLogRow, _DeliveryRow, _IndexOpRow, _MemoryRow, _RedactionRow
from memory.store.versions import _bump
from memory.types import ChatRef, Namespace


TRIM_SLACK = 8
"""``append_chat`` trims a chat's log back to ``keep`` lines on about one append in
``keep // TRIM_SLACK`` (every append for ``keep`` under 16): between trims a chat
holds about ``keep / TRIM_SLACK`` lines more."""


@dataclass(frozen=True, slots=True)
class ChatLine:
    """One line of a chat's recent log. role is ``user`` or ``bot``. Read back by
    ``chat_tail``, a line also carries its ``id`` and the embedding a turn kept
    for it (``vector``: float32 bytes, ``vector_key``: what made it, "" when none;
    ``keep_line_vector``); neither counts in comparisons."""

    role: str
    sender_id: str
    text: str
    at: datetime
    message_id: str = ""
    sender_name: str = ""
    id: int | None = field(default=None, compare=False, repr=False)
    vector: bytes | None = field(default=None, compare=False, repr=False)
    vector_key: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PendingCapture:
    """A person's chat-log line whose capture into ``namespace`` is still due:
    ``line_id`` (for ``Store.capture_done``), where and when it was said, its text;
    ``addressed``: said to the bot (None when not known, as for a line read back
    from the store: the pipeline then decides from the chat and the tenant)."""

    line_id: int
    tenant: str
    namespace: Namespace
    chat: ChatRef
    message_id: str
    text: str
    at: datetime
    addressed: bool | None = None
    #: when this process queued it (the moment its append returned, this process's
    #: clock): the capture is taken with ``Store.take_captures`` before it runs.
    #: None for a line claimed with ``claim_captures`` (taken already).
    queued: datetime | None = None


@dataclass(frozen=True, slots=True)
class ChatMigration:
    """What ``Store.migrate_chat`` moved: chat log lines, memories, and the
    namespaces those memories belong to."""

    chat_lines: int
    memories: int
    namespaces: tuple[Namespace, ...] = ()


def _redact_line(s: Session, ns: Namespace, origin: str, message_id: str | None) -> int:
    """Delete the subject's own chat-log line ``message_id`` of chat ``origin``
    (and mark it redacted); returns how many lines were deleted."""
    if not origin or not message_id:
        return 0
    platform, _, user_id = ns.subject.partition(":")
    if origin.split(":", 1)[0] != platform:  # a linked person:<id> subject has no platform line
        return 0
    gone = s.exec(delete(_ChatLogRow).where(_ChatLogRow.tenant == ns.tenant, _ChatLogRow.chat == origin,  # type: ignore[call-overload]
                                     _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                                     _ChatLogRow.message_id == message_id))
    if not s.exec(select(_RedactionRow.id).where(
            _RedactionRow.tenant == ns.tenant, _RedactionRow.chat == origin, _RedactionRow.message_id == message_id,
            _RedactionRow.sender_id == user_id)).first():
        s.add(_RedactionRow(tenant=ns.tenant, chat=origin, message_id=message_id[:128], sender_id=user_id[:128],
                            at=utcnow()))
    return int(gone.rowcount or 0)


class ChatLog(StoreBase):
    """Chat log, redactions, deliveries, pending captures, edits and chat migration."""

    # -- deliveries -------------------------------------------------------

    def claim_delivery(self, key: str) -> bool:
        """Mark a platform delivery as processed. True the first time, False for a
        re-delivery of the same key (unique constraint; safe under concurrency)."""
        try:
            with self._write() as s:
                s.add(_DeliveryRow(key=key[:600], processed_at=utcnow()))
            return True
        except IntegrityError:
            return False

    def claim_fingerprint(self, key: str, window: timedelta, now: datetime | None = None) -> bool:
        """Claim a delivery's content fingerprint (``key``, at most 600 characters):
        True when it is new, or when its earlier claim is older than ``window``
        (then it is claimed again, from ``now``); False when the same content was
        claimed within ``window`` — a re-push of one message under a new platform id.
        Safe under concurrency (unique constraint: of two racing claims one wins)."""
        now = now or utcnow()
        with self._read() as s:  # a plain message's claim of it, in its delivery's row
            shared = s.exec(select(_DeliveryRow.key).where(_DeliveryRow.fingerprint == key[:600],
                                                           _DeliveryRow.processed_at > now - window)).first()
        if shared is not None:
            return False
        if self.claim_delivery(key):
            return True
        with self._write() as s:  # one conditional UPDATE: of two racing re-claims one wins
            done = s.execute(update(_DeliveryRow).where(_DeliveryRow.key == key[:600],  # type: ignore[arg-type]
                                                         _DeliveryRow.processed_at <= now - window)
                             .values(processed_at=now))
        return done.rowcount == 1

    def release_delivery(self, key: str) -> None:
        """Forget that a delivery (or a content fingerprint) was claimed (its turn
        failed before finishing), so the platform's retry is processed instead of
        dropped as a duplicate: the row claimed under ``key``, and the row whose
        fingerprint it is (a plain message claims both in one row)."""
        with self._write() as s:
            s.exec(delete(_DeliveryRow).where((_DeliveryRow.key == key[:600])  # type: ignore[call-overload]
                                              | (_DeliveryRow.fingerprint == key[:600])))

    # -- chat log and captures still due ------------------------------------

    def append_chat(self, tenant: str, chat: ChatRef, line: ChatLine, keep: int = 200, *,
                    capture: Namespace | None = None, claim: str | None = None,
                    fingerprint: tuple[str, timedelta] | None = None, nonce: NonceClaim | None = None) -> int | None:
        """Append a line to the chat's recent log, keeping about ``keep`` lines (trimmed
        back to ``keep`` on about one append in ``keep // TRIM_SLACK``); returns the line's id. A person's line that a forget redacted (same chat,
        message id and sender) is not appended again — a replay cannot bring it
        back; returns None then.

        ``capture``: the line still has to be captured into this namespace (the
        durable half of a capture that runs after the reply: ``pending_captures``
        finds it until ``capture_done``). A line with a capture due is not pruned.
        ``claim``: claim this delivery key (``claim_delivery``) in the same
        transaction, so that a crash cannot leave a claimed delivery without its
        line; raises DuplicateDelivery (and writes nothing) when it was claimed before.
        ``fingerprint``: ``(key, window)`` — also claim the delivery's content
        fingerprint in the same transaction, in the row of ``claim`` (one row for
        both; ``claim_fingerprint``: a claim older than ``window`` no longer
        counts); DuplicateDelivery when it was claimed within ``window``.
        ``nonce``: the nonce of the signed callback that brought the line, claimed
        first in the same transaction (``SeenNonces.claim_nonce``); raises NonceUsed
        (with the digest its first claim recorded; nothing written) when it was
        claimed before — so a replay is refused on every replica, and a crash
        leaves neither the nonce nor the delivery claimed without the line.
        A redacted line (None) still claims what it was given."""
        table = _ChatLogRow.__table__  # type: ignore[attr-defined]
        try:
            if not self.is_sqlite:
                return self._append_chat_pg(tenant, chat, line, keep, capture, claim, fingerprint, nonce)
            return self._append_chat(table, tenant, chat, line, keep, capture, claim, fingerprint, nonce)
        except IntegrityError:
            if claim is None and fingerprint is None:
                raise
            raise DuplicateDelivery(claim or fingerprint[0]) from None  # type: ignore[index]

    def _append_chat(self, table, tenant: str, chat: ChatRef, line: ChatLine, keep: int, capture: Namespace | None,
                     claim: str | None, fingerprint: tuple[str, timedelta] | None = None,
                     nonce: NonceClaim | None = None) -> int | None:
        """``append_chat``'s transaction; IntegrityError when ``claim`` or ``fingerprint`` was claimed before,
        NonceUsed when ``nonce`` was (raised inside the transaction: it rolls back).
        Statements as the driver takes them (``exec_driver_sql``), three in the
        common case (the fingerprint's claims read, the delivery, the line with its
        redaction check): it runs in every turn, and building SQLAlchemy statements
        cost more than the SQL."""
        m, at = self.mark, self.db_time
        with self._write_conn() as conn:
            run = conn.exec_driver_sql  # statements as the driver takes them: nothing to build or compile per turn
            # the nonce first: a replay is told apart from a duplicate delivery (its
            # delivery key was claimed by the request it replays) before either is tried
            if nonce is not None and (first := claim_in(conn, nonce)) is not None:
                raise NonceUsed(first)
            fp = None
            if fingerprint is not None:
                fp, window = fingerprint[0][:600], fingerprint[1]
                stale = at(utcnow() - window)
                # the claims of this content — its own row (a command's, or written before fingerprints
                # shared the delivery's row) or a shared one — as (own row?, older than the window?),
                # decided in SQL as the writes below decide: one read, nearly always of nothing
                held = [(bool(own), bool(old)) for own, old in run(
                    f"SELECT key = {m}, processed_at <= {m} FROM deliveries WHERE key = {m} OR fingerprint = {m}",
                    (fp, stale, fp, fp)).all()]
                # a claim older than the window no longer counts: its own row goes, a shared one lets go
                if (True, True) in held:
                    run(f"DELETE FROM deliveries WHERE key = {m} AND processed_at <= {m}", (fp, stale))
                if (False, True) in held:
                    run(f"UPDATE deliveries SET fingerprint = NULL WHERE fingerprint = {m} AND processed_at <= {m}",
                        (fp, stale))
                if claim is None:
                    run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", (fp, at(utcnow())))
                elif (True, False) in held:
                    raise DuplicateDelivery(fp)  # claimed on its own row within the window
                # a shared claim within the window: the insert below meets the unique fingerprint
            if claim is not None:  # with the fingerprint in the same row: one row per message
                run(f"INSERT INTO deliveries (key, processed_at, fingerprint) VALUES ({m}, {m}, {m})",
                    (claim[:600], at(utcnow()), fp))
            values = (tenant, chat.key, line.role, line.sender_id, line.sender_name, line.message_id, line.text,
                      at(line.at), str(capture) if capture else "", at(utcnow()) if capture else None, "")
            columns = ("INSERT INTO chat_log (tenant, chat, role, sender_id, sender_name, message_id, text, at, "
                       "capture_ns, capture_queued, vector_key)")
            if line.role == "user" and line.message_id:
                # not a line a forget redacted (same chat, message id and sender): checked by the insert itself
                row = run(f"{columns} SELECT {', '.join([m] * 11)} WHERE NOT EXISTS (SELECT 1 FROM chat_redactions "
                          f"WHERE tenant = {m} AND chat = {m} AND message_id = {m} AND sender_id = {m}) RETURNING id",
                          (*values, tenant, chat.key, line.message_id, line.sender_id)).first()
                if row is None:
                    return None
                line_id = row[0]
            else:
                line_id = run(f"{columns} VALUES ({', '.join([m] * 11)}) RETURNING id", values).scalar_one()
            # trimmed on one append in keep // TRIM_SLACK (line ids are the table's): the cutoff's read is
            # saved on the others, and the lines over ``keep`` are deleted together
            cutoff = None if int(line_id) % max(1, keep // TRIM_SLACK) else run(
                f"SELECT id FROM chat_log WHERE tenant = {m} AND chat = {m} ORDER BY id DESC LIMIT 1 OFFSET {m}",
                (tenant, chat.key, int(keep))).scalar()
            if cutoff is not None:
                run(f"DELETE FROM chat_log WHERE tenant = {m} AND chat = {m} AND id <= {m} AND capture_ns = ''",
                    (tenant, chat.key, int(cutoff)))
        return int(line_id)

    def _append_chat_pg(self, tenant: str, chat: ChatRef, line: ChatLine, keep: int, capture: Namespace | None,
                        claim: str | None, fingerprint: tuple[str, timedelta] | None,
                        nonce: NonceClaim | None) -> int | None:
        """``append_chat`` on PostgreSQL in one round trip: the statements of
        ``_append_chat`` made independent of each other's results and pipelined
        in autocommit (``StoreBase._write_batch``), so the server runs them as
        one implicit transaction — all of them, or none when one fails. What
        ``_append_chat`` decides in the client is decided by the statements
        themselves: a nonce or a delivery claimed before fails its insert on
        the unique constraint (and everything with it); the stale claims of the
        fingerprint are let go unconditionally (a claim older than the window no
        longer counts: their writes change nothing that counts); a claim of the
        fingerprint on its own row within the window is told by a guard insert
        that meets its primary key. The trim, on about one append in
        ``keep // TRIM_SLACK``, is a statement of its own afterwards. Raises
        NonceUsed (with the first claim's digest, read after the failed
        transaction), IntegrityError for a delivery or fingerprint claimed before."""
        m, now = self.mark, utcnow()
        try:
            return self._append_chat_batch(tenant, chat, line, keep, capture, claim, fingerprint, nonce, now)
        except IntegrityError as exc:
            if nonce is None or getattr(getattr(exc.orig, "diag", None), "table_name", None) != "seen_nonces":
                raise
        first = self._read_rows(f"SELECT digest FROM seen_nonces WHERE tenant = {m} AND platform = {m} AND nonce = {m}",
                                (nonce.tenant[:64], nonce.platform[:32], nonce.nonce[:128]))
        raise NonceUsed((first[0][0] or "") if first else "")

    def _append_chat_batch(self, tenant: str, chat: ChatRef, line: ChatLine, keep: int, capture: Namespace | None,
                           claim: str | None, fingerprint: tuple[str, timedelta] | None, nonce: NonceClaim | None,
                           now: datetime) -> int | None:
        """``_append_chat_pg``'s pipelined transaction and the trim after it."""
        m = self.mark
        with self._write_batch() as cur:
            if nonce is not None:  # first: a replay is told apart from a duplicate delivery by the table it meets
                cur.run(f"INSERT INTO seen_nonces (tenant, platform, nonce, digest, seen_at) VALUES ({m}, {m}, {m}, "
                        f"{m}, {m})", (nonce.tenant[:64], nonce.platform[:32], nonce.nonce[:128],
                                       nonce.digest[:128], nonce.at or now))
            fp = None
            if fingerprint is not None:
                fp, stale = fingerprint[0][:600], now - fingerprint[1]
                # a claim older than the window no longer counts: its own row goes, a shared one lets go
                cur.run(f"DELETE FROM deliveries WHERE key = {m} AND processed_at <= {m}", (fp, stale))
                cur.run(f"UPDATE deliveries SET fingerprint = NULL WHERE fingerprint = {m} AND processed_at <= {m}",
                        (fp, stale))
                if claim is None:
                    cur.run(f"INSERT INTO deliveries (key, processed_at) VALUES ({m}, {m})", (fp, now))
                else:  # its own row, within the window (the stale one is gone): this insert meets its key
                    cur.run(f"INSERT INTO deliveries (key, processed_at) SELECT {m}, {m} WHERE EXISTS "
                            f"(SELECT 1 FROM deliveries WHERE key = {m})", (fp, now, fp))
                # a shared claim within the window: the insert below meets the unique fingerprint
            if claim is not None:  # with the fingerprint in the same row: one row per message
                cur.run(f"INSERT INTO deliveries (key, processed_at, fingerprint) VALUES ({m}, {m}, {m})",
                        (claim[:600], now, fp))
            values = (tenant, chat.key, line.role, line.sender_id, line.sender_name, line.message_id, line.text,
                      line.at, str(capture) if capture else "", now if capture else None, "")
            columns = ("INSERT INTO chat_log (tenant, chat, role, sender_id, sender_name, message_id, text, at, "
                       "capture_ns, capture_queued, vector_key)")
            if line.role == "user" and line.message_id:
                # not a line a forget redacted (same chat, message id and sender): checked by the insert itself
                rows = cur.rows(f"{columns} SELECT {', '.join([m] * 11)} WHERE NOT EXISTS (SELECT 1 FROM "
                                f"chat_redactions WHERE tenant = {m} AND chat = {m} AND message_id = {m} AND "
                                f"sender_id = {m}) RETURNING id",
                                (*values, tenant, chat.key, line.message_id, line.sender_id))
            else:
                rows = cur.rows(f"{columns} VALUES ({', '.join([m] * 11)}) RETURNING id", values)
        got = rows.value()
        if not got:
            return None
        line_id = int(got[0][0])
        if line_id % max(1, keep // TRIM_SLACK) == 0:  # the lines over ``keep`` deleted together
            self._write_one(f"DELETE FROM chat_log WHERE tenant = {m} AND chat = {m} AND capture_ns = '' AND id <= "
                            f"(SELECT id FROM chat_log WHERE tenant = {m} AND chat = {m} ORDER BY id DESC LIMIT 1 "
                            f"OFFSET {m})", (tenant, chat.key, tenant, chat.key, int(keep)))
        return line_id

    def pending_captures(self, older_than: datetime, limit: int = 100) -> list[PendingCapture]:
        """Chat-log lines whose capture was queued before ``older_than`` and has not
        been marked done (a crash or a failure after the reply), oldest first."""
        with self._read() as s:
            rows = s.exec(select(_ChatLogRow).where(_ChatLogRow.capture_queued < older_than,  # type: ignore[operator]
                                                    _ChatLogRow.capture_ns != "")
                          .order_by(_ChatLogRow.id).limit(limit)).all()  # type: ignore[arg-type]
        return [PendingCapture(r.id, r.tenant, Namespace.parse(r.capture_ns), ChatRef.parse(r.chat), r.message_id,  # type: ignore[arg-type]
                               r.text, _aware(r.at)) for r in rows]  # type: ignore[arg-type]

    def claim_captures(self, older_than: datetime, limit: int = 100, *,
                       now: datetime | None = None) -> list[PendingCapture]:
        """Claim the chat-log lines whose capture was queued (or last claimed)
        before ``older_than`` and is not done, oldest first, at most ``limit``: in
        one write transaction their ``capture_queued`` moves to ``now`` (default
        the current UTC time) and they are returned. A claimed line is therefore
        not claimed again — by this process or another replica on the same
        database — until it is ``older_than``'s distance old once more (a lease: if
        the claimer dies, the line is resumed later). Two claimers never get the
        same line: PostgreSQL skips rows another claimer has locked (``FOR UPDATE
        SKIP LOCKED``) and the ``UPDATE … RETURNING`` re-checks the age; SQLite
        runs the transaction alone (``BEGIN IMMEDIATE``)."""
        now = now or utcnow()
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        due = (t.c.capture_queued < older_than, t.c.capture_ns != "")
        pick = select(t.c.id).where(*due).order_by(t.c.id).limit(limit)
        if not self.is_sqlite:
            pick = pick.with_for_update(skip_locked=True)
        with self._write_conn() as conn:
            ids = list(conn.execute(pick).scalars())
            if not ids:
                return []
            rows = conn.execute(update(t).where(t.c.id.in_(ids), *due).values(capture_queued=now)
                                .returning(t.c.id, t.c.tenant, t.c.capture_ns, t.c.chat, t.c.message_id, t.c.text,
                                           t.c.at)).all()
        return [PendingCapture(r.id, r.tenant, Namespace.parse(r.capture_ns), ChatRef.parse(r.chat), r.message_id,
                               r.text, _aware(r.at)) for r in sorted(rows, key=lambda r: r.id)]

    def take_captures(self, lines: Mapping[int, datetime], *, now: datetime | None = None,
                      renew_after: timedelta | None = None) -> dict[int, str]:
        """Take the captures this process queued itself before running them:
        ``lines`` maps a chat-log line id to when its append returned here
        (``PendingCapture.queued``). In one transaction each line whose capture is
        still due and whose ``capture_queued`` is not later than that moment gets a
        new lease from ``now`` and is returned with its text as it is now — an edit
        that arrived while the capture waited changed it, and the capture learns
        what the person finally said: ``{line id: text}``; a line another replica
        claimed meanwhile (``claim_captures`` sets the claimer's now, at least the
        resume age after the queueing) or that is done or gone is not. So a capture
        held up longer than the resume age runs in one replica only.

        ``renew_after``: a line queued less than this before ``now`` keeps the lease
        its append gave it — it is checked and read, not written (no replica can
        claim it before the resume age, so the capture still has at least the resume
        age minus ``renew_after`` to finish: a row write saved on nearly every
        message); None renews every line."""
        if not lines:
            return {}
        now = now or utcnow()
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        fresh = {i: at for i, at in lines.items() if renew_after is not None and now - at < renew_after}
        stale = {i: at for i, at in lines.items() if i not in fresh}

        def mine(which: Mapping[int, datetime]):
            return or_(*[and_(t.c.id == line_id, t.c.capture_queued <= at) for line_id, at in which.items()])

        out: dict[int, str] = {}
        if fresh:  # one read per capture: through the DBAPI cursor
            out.update(self._read_rows(*self._held_sql(fresh)))
        if stale:
            with self._write_conn() as conn:
                out.update((r.id, r.text) for r in conn.execute(update(t).where(mine(stale), t.c.capture_ns != "")
                                                                .values(capture_queued=now).returning(t.c.id, t.c.text)))
        return out

    def _held_sql(self, fresh: Mapping[int, datetime]) -> tuple[str, tuple]:
        """``take_captures``' read of the lines that keep their lease: ``(id, text)``
        of each of ``fresh`` still due and queued no later than its moment."""
        m = self.mark
        which = " OR ".join([f"(id = {m} AND capture_queued <= {m})"] * len(fresh))
        return (f"SELECT id, text FROM chat_log WHERE ({which}) AND capture_ns != ''",
                tuple(x for i, q in fresh.items() for x in (int(i), self.db_time(q))))

    def take_captures_with(self, lines: Mapping[int, datetime], among: Sequence[tuple[str, ChatRef, str]],
                           before: Sequence[int], *, now: datetime | None = None,
                           renew_after: timedelta | None = None
                           ) -> tuple[dict[int, str], set[tuple[str, str, str]], dict[int, ChatLine]]:
        """What a capture batch reads before it runs, in one call: ``take_captures(lines,
        now=now, renew_after=renew_after)``, ``redacted_among(among)`` and
        ``lines_before(before)``, as a tuple of their three results. When every
        line keeps its lease (``renew_after``: the common case) the three are
        reads and run together (``StoreBase._read_many``: one round trip on
        PostgreSQL, one connection on SQLite), in that order; a lease to renew
        is written first, in its own transaction. Raises StoreError."""
        now = now or utcnow()
        fresh = {i: at for i, at in lines.items() if renew_after is not None and now - at < renew_after}
        taken: dict[int, str] = {}
        if len(fresh) < len(lines):  # a lease to renew: a write, as take_captures does it
            taken = self.take_captures(lines, now=now, renew_after=renew_after)
            fresh = {}
        reads = [self._held_sql(fresh)] if fresh else []
        wanted, redacted_read = self._redacted_sql(among)
        _, before_read = self._before_sql(before)
        reads += [r for r in (redacted_read, before_read) if r is not None]
        rows = self._read_many(reads) if reads else []
        if fresh:
            taken.update(rows.pop(0))
        gone = {tuple(r) for r in rows.pop(0)} & wanted if redacted_read is not None else set()
        return taken, gone, self._before_rows(rows.pop(0)) if before_read is not None else {}  # type: ignore[return-value]

    def captures_due(self) -> int:
        """How many chat-log lines still have their capture due, in every tenant
        (queued, running, or left by a crash; the metrics gauge)."""
        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_ChatLogRow).where(
                _ChatLogRow.capture_queued.is_not(None), _ChatLogRow.capture_ns != "")).one())  # type: ignore[union-attr]

    def capture_done(self, *line_ids: int, vectors: Mapping[int, tuple[str, bytes]] | None = None,
                     recalls: Iterable[Namespace] = ()) -> None:
        """Mark the captures of these chat-log lines done, in one transaction (a
        line pruned or redacted meanwhile is simply gone). ``vectors``: ``{line id:
        (key, float32 bytes)}`` of some of them, kept with the line in the same row
        write (what ``keep_line_vector`` keeps: one row write per line, not two).
        ``recalls``: namespaces whose last recall this process holds for these
        captures (``memory.store.traces``): each held trace still unwritten (its
        capture stored nothing) is written in the same transaction, one statement
        more (on PostgreSQL in the same round trip). Raises StoreError; held
        traces stay held then."""
        if not line_ids:
            return
        vectors = {i: v for i, v in (vectors or {}).items() if i in set(line_ids)}
        traces = [t for t in {str(ns): self.held_traces.get(ns) for ns in recalls}.values() if t is not None]
        plain = [int(i) for i in line_ids if i not in vectors]
        m = self.mark
        done = f"UPDATE chat_log SET capture_ns = '', capture_queued = NULL WHERE id IN ({', '.join([m] * len(plain))})"
        if not vectors and not traces:  # one statement: a transaction of its own (``_write_one``)
            self._write_one(done, tuple(plain))
            return
        # once per capture: statements as the driver takes them, each on its own rows (the plain lines, then
        # one per vector, then one per trace): one statement on PostgreSQL (``_write_chain``)
        with self._write_chain() as cur:
            if plain:
                cur.run(done, tuple(plain))
            for i, (k, v) in vectors.items():
                cur.run(f"UPDATE chat_log SET capture_ns = '', capture_queued = NULL, vector = {m}, "
                        f"vector_key = {m} WHERE id = {m}", (v, k, int(i)))
            for t in traces:
                cur.run(upsert_sql(m), upsert_params(t, self.db_time))
        for t in traces:
            self.held_traces.written(t)

    def chat_tail(self, tenant: str, chat: ChatRef, n: int = 8, *, max_age: timedelta | None = None,
                  now: datetime | None = None) -> list[ChatLine]:
        """The last ``n`` lines of the chat (of its topic when ``chat`` has a
        thread), oldest first; with ``max_age`` only lines said after
        ``now - max_age`` (``now`` defaults to the current UTC time)."""
        m = self.mark
        sql = ("SELECT id, role, sender_id, text, at, message_id, sender_name, vector, vector_key FROM chat_log "
               f"WHERE tenant = {m} AND chat = {m}")
        params: list = [tenant, chat.key]
        if max_age is not None:
            sql += f" AND at >= {m}"
            params.append(self.db_time((now or utcnow()) - max_age))
        # every turn reads it: through the DBAPI cursor (``_read_rows``)
        rows = self._read_rows(f"{sql} ORDER BY id DESC LIMIT {m}", (*params, int(n)))
        return [ChatLine(role, sender, text, _aware(raw_datetime(at)), mid, name, i,  # type: ignore[arg-type]
                         bytes(vector) if vector is not None else None, key or "")
                for i, role, sender, text, at, mid, name, vector, key in reversed(rows)]

    def last_heard(self, tenant: str, chat: ChatRef) -> datetime | None:
        """When the person last wrote in ``chat`` of ``tenant`` (its newest line of
        role ``user``, aware UTC), None when the log holds none (never, or pruned).
        WeChat's customer-service window is counted from it (``gateway.followups``)."""
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        with self._read() as s:
            at = s.exec(select(func.max(t.c.at)).where(t.c.tenant == tenant, t.c.chat == chat.key,
                                                      t.c.role == "user")).one()
        value = at[0] if isinstance(at, tuple) or hasattr(at, "_mapping") else at
        return _aware(value) if value is not None else None

    def keep_line_vector(self, line_id: int, key: str, vector: bytes) -> None:
        """Keep with chat-log line ``line_id`` the embedding a turn computed for it
        (``vector``: float32 bytes) under ``key`` (``<embedder>/<dim>/<text hash>``:
        a reader uses it only for that text and model). A line pruned or redacted
        meanwhile is simply gone; the vector goes with its line."""
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        with self._write_conn() as conn:
            conn.execute(update(t).where(t.c.id == line_id).values(vector=vector, vector_key=key))

    def drop_retelling_lines(self, tenant: str, chats: Sequence[str], texts: Sequence[str]) -> int:
        """Delete the companion's lines (role ``bot``) of the chats ``chats`` (``ChatRef``
        keys) of ``tenant`` that retell one of ``texts`` (``memory.text.retells``): a
        forgotten statement said back by the companion must not come back through
        the tail or as the next message's context. Returns how many were deleted."""
        from memory.text import retells

        if not chats or not texts:
            return 0
        t = _ChatLogRow.__table__  # type: ignore[attr-defined]
        with self._write_conn() as conn:
            rows = conn.execute(select(t.c.id, t.c.text).where(t.c.tenant == tenant, t.c.chat.in_(list(chats)),
                                                               t.c.role == "bot")).all()
            gone = [r.id for r in rows if any(retells(r.text, x) for x in texts)]
            if gone:
                conn.execute(delete(t).where(t.c.id.in_(gone)))
        return len(gone)

    def line_before(self, tenant: str, chat: ChatRef, line_id: int) -> ChatLine | None:
        """The line of ``chat`` (of its topic when it has a thread) logged just
        before line ``line_id``, None when there is none (the first line, or one
        pruned or redacted since)."""
        with self._read() as s:
            r = s.exec(select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key,
                                                 _ChatLogRow.id < line_id)  # type: ignore[operator]
                       .order_by(_ChatLogRow.id.desc()).limit(1)).first()  # type: ignore[union-attr]
        return None if r is None else ChatLine(r.role, r.sender_id, r.text, _aware(r.at), r.message_id,  # type: ignore[arg-type]
                                               r.sender_name)

    # -- redaction of what a person said ------------------------------------

    def _speaker_lines(self, ns: Namespace, group_key: str | None) -> list:
        """Filter on the chat-log lines the subject of ``ns`` said in its tenant (in
        group ``group_key`` and its topics only, when given)."""
        platform, _, user_id = ns.subject.partition(":")
        where = [_ChatLogRow.tenant == ns.tenant, _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                 _ChatLogRow.chat.startswith(f"{platform}:")]  # type: ignore[attr-defined]
        if group_key is not None:
            where.append(or_(_ChatLogRow.chat == group_key, _ChatLogRow.chat.startswith(f"{group_key}:")))  # type: ignore[attr-defined]
        return where

    def redact_speaker(self, ns: Namespace, group_key: str | None = None) -> int:
        """Delete every chat-log line the subject of ``ns`` said in its tenant, or in
        group ``group_key`` (any topic) only — captures still due on them included
        (``forget_subject``, ``/memory forget all``); returns the number of lines.
        A subject that is not a platform identity (``person:…``) has none."""
        where = self._speaker_lines(ns, group_key)
        with self._write() as s:
            rows = s.exec(select(_ChatLogRow.chat, _ChatLogRow.message_id).where(*where)).all()
            for chat, message_id in set(rows):
                _redact_line(s, ns, chat, message_id)
            s.exec(delete(_ChatLogRow).where(*where))  # type: ignore[call-overload]
        return len(rows)

    def said_since(self, ns: Namespace, chat_key: str, since: datetime) -> list[tuple[str, str]]:
        """``(chat key, message id)`` of every chat-log line the subject of ``ns``
        said in chat ``chat_key`` (a group's key: any of its topics too) at or
        after ``since`` (``/memory forget last``), oldest first."""
        platform, _, user_id = ns.subject.partition(":")
        if not chat_key.startswith(f"{platform}:"):  # a linked person:<id> subject has no platform line
            return []
        with self._read() as s:
            rows = s.exec(select(_ChatLogRow.chat, _ChatLogRow.message_id).where(
                _ChatLogRow.tenant == ns.tenant, _ChatLogRow.role == "user", _ChatLogRow.sender_id == user_id,
                or_(_ChatLogRow.chat == chat_key, _ChatLogRow.chat.startswith(f"{chat_key}:")),  # type: ignore[attr-defined]
                _ChatLogRow.at >= since).order_by(_ChatLogRow.at, _ChatLogRow.id)).all()  # type: ignore[arg-type]
        return [(chat, mid) for chat, mid in rows if mid]

    def drop_bot_lines_since(self, tenant: str, chat_key: str, since: datetime) -> int:
        """Delete the companion's lines of chat ``chat_key`` said at or after
        ``since`` (they may retell what is being withdrawn); returns how many."""
        where = [_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat_key, _ChatLogRow.role == "bot",
                 _ChatLogRow.at >= since]
        with self._write() as s:
            return s.exec(delete(_ChatLogRow).where(*where)).rowcount  # type: ignore[call-overload]

    def pending_capture_count(self, ns: Namespace, group_key: str | None = None) -> int:
        """How many of the lines the subject of ``ns`` said (in group ``group_key``
        only, when given) still have their capture into ``ns`` due."""
        with self._read() as s:
            return int(s.exec(select(func.count()).select_from(_ChatLogRow).where(
                *self._speaker_lines(ns, group_key), _ChatLogRow.capture_queued.is_not(None),  # type: ignore[union-attr]
                _ChatLogRow.capture_ns == str(ns))).one())

    def withdraw_line(self, ns: Namespace, chat: ChatRef, message_id: str) -> None:
        """Redact the subject's chat-log line ``message_id`` of ``chat`` (a withdrawn
        message): the line goes, with any capture still due on it, and a redaction
        record keeps the message from being appended later (a withdrawal that
        arrives before its message). Idempotent."""
        with self._write() as s:
            _redact_line(s, ns, chat.key, message_id)

    def is_redacted(self, tenant: str, chat: ChatRef, message_id: str) -> bool:
        """Was the person's line ``message_id`` of ``chat`` redacted (withdrawn or forgotten)?"""
        if not message_id:
            return False
        with self._read() as s:
            return s.exec(select(_RedactionRow.id).where(
                _RedactionRow.tenant == tenant, _RedactionRow.chat == chat.key,
                _RedactionRow.message_id == message_id)).first() is not None

    def redacted_among(self, lines: Sequence[tuple[str, ChatRef, str]]) -> set[tuple[str, str, str]]:
        """``is_redacted`` for many lines in one query: of ``lines`` (``(tenant,
        chat, message id)``), the ``(tenant, chat key, message id)`` of those
        redacted (a capture batch asks once for all of its messages)."""
        wanted, read = self._redacted_sql(lines)
        if read is None:
            return set()
        return {tuple(r) for r in self._read_rows(*read)} & wanted  # type: ignore[misc]

    def _redacted_sql(self, lines: Sequence[tuple[str, ChatRef, str]]
                      ) -> tuple[set[tuple[str, str, str]], tuple[str, tuple] | None]:
        """``redacted_among``'s ``(tenant, chat key, message id)`` asked for, and its read
        (None when nothing is asked)."""
        wanted = {(tenant, chat.key, mid) for tenant, chat, mid in lines if mid}
        if not wanted:
            return wanted, None
        mids = sorted({m for _, _, m in wanted})
        sql = (f"SELECT tenant, chat, message_id FROM chat_redactions "
               f"WHERE message_id IN ({', '.join([self.mark] * len(mids))})")
        return wanted, (sql, tuple(mids))

    def lines_before(self, line_ids: Sequence[int]) -> dict[int, ChatLine]:
        """``line_before`` for many lines in one query: ``{line id: the line of its
        chat (its topic) logged just before it}``, a line without one (the first,
        or one pruned or redacted since) left out."""
        _, read = self._before_sql(line_ids)
        # each capture batch asks: through the DBAPI cursor (``_read_rows``)
        return {} if read is None else self._before_rows(self._read_rows(*read))

    def _before_sql(self, line_ids: Sequence[int]) -> tuple[list[int], tuple[str, tuple] | None]:
        """``lines_before``'s ids and its read (None when there are none)."""
        ids = sorted({int(i) for i in line_ids if i})
        if not ids:
            return ids, None
        return ids, (("SELECT c.id, b.role, b.sender_id, b.text, b.at, b.message_id, b.sender_name FROM chat_log c "
                      "JOIN chat_log b ON b.id = (SELECT max(p.id) FROM chat_log p WHERE p.tenant = c.tenant "
                      f"AND p.chat = c.chat AND p.id < c.id) WHERE c.id IN ({', '.join([self.mark] * len(ids))})"),
                     tuple(ids))

    @staticmethod
    def _before_rows(rows: list[tuple]) -> dict[int, ChatLine]:
        """``lines_before``'s answer from its read's rows."""
        return {i: ChatLine(role, sender, text, _aware(raw_datetime(at)), mid, name)  # type: ignore[arg-type]
                for i, role, sender, text, at, mid, name in rows}

    # -- edits and chat migration (Telegram) ------------------------------

    def edit_chat_line(self, tenant: str, chat: ChatRef, message_id: str, text: str) -> list[int]:
        """Replace the text of the person's line ``message_id`` in the chat log (an
        edited message); the ids of the lines changed, empty when the line is no
        longer in the log."""
        with self._write() as s:
            rows = s.exec(select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, _ChatLogRow.chat == chat.key,
                                                    _ChatLogRow.role == "user", _ChatLogRow.message_id == message_id)).all()
            for row in rows:
                row.text = text
                s.add(row)
            return [row.id for row in rows]

    def migrate_chat(self, tenant: str, old: ChatRef, new: ChatRef, actor: str) -> ChatMigration:
        """Move one tenant's chat to a new id (Telegram group → supergroup): its chat
        log lines (every topic) and the origin of its memories follow, in one
        transaction; each moved memory gets an index upsert in the outbox (the
        index derives disclosure from the origin) and each namespace touched an
        audit record ``migrate_chat`` by ``actor``. Rows of other tenants are
        never read or written.

        ``old`` and ``new`` must be group chats of the same platform, without a
        thread (ValueError otherwise). Calling it again moves nothing.
        """
        if old.platform != new.platform or not (old.is_group and new.is_group) or old.thread_id or new.thread_id:
            raise ValueError("a chat migrates between group chats of one platform, without a topic")
        from sqlalchemy import or_

        now = utcnow()
        base, target = old.group_key, new.group_key
        touched: dict[str, int] = {}
        with self._write() as s:
            lines = s.exec(select(_ChatLogRow).where(_ChatLogRow.tenant == tenant, or_(
                _ChatLogRow.chat == base, _ChatLogRow.chat.startswith(base + ":", autoescape=True)))).all()  # type: ignore[attr-defined]
            for line in lines:
                line.chat = target + line.chat[len(base):]
                s.add(line)
            mems = s.exec(select(_MemoryRow).where(_MemoryRow.tenant == tenant, or_(
                _MemoryRow.origin == base, _MemoryRow.origin.startswith(base + ":", autoescape=True)))).all()  # type: ignore[attr-defined]
            for mem in mems:
                mem.origin = target + mem.origin[len(base):]
                s.add(mem)
                s.add(_IndexOpRow(namespace=mem.namespace, memory_id=mem.id, op="upsert", created_at=now))
                touched[mem.namespace] = touched.get(mem.namespace, 0) + 1
            for ns, n in touched.items():
                _bump(s, ns)  # the memories' origin decides their disclosure in group chats
                s.add(_AuditRow(at=now, actor=actor, action="migrate_chat", namespace=ns, memory_id=None,
                                detail=json.dumps({"from": base, "to": target, "memories": n})))
        return ChatMigration(chat_lines=len(lines), memories=len(mems),
                             namespaces=tuple(Namespace.parse(n) for n in sorted(touched)))
