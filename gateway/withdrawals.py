"""Withdrawals: a person took a message back (a QQ recall, through OneBot or
NoneBot; ``POST /v1/withdrawals`` for a bot of its own), and what it taught
goes with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bridges.contract import Withdrawal
from gateway.config import Settings
from memory.core import MemoryCore
from memory.identity import platform_subject
from memory.identity import resolve as resolve_identity
from memory.errors import NotFoundError
from memory.types import ChatRef, ForgetReceipt, Namespace

__all__ = ["Withdrawals", "retract_from", "Withdrawn", "withdraw_since"]

log = logging.getLogger(__name__)


class Withdrawals:
    """Withdrawn messages of every tenant over one core (``TurnHandler.withdraw``)."""

    def __init__(self, settings: Settings, core: MemoryCore) -> None:
        self.settings = settings
        self.core = core

    async def withdraw(self, tenant: str, w: Withdrawal) -> list[str]:
        """A person withdrew message ``w.message_id``: its chat-log line is redacted
        (and a message that arrives after its withdrawal is neither logged nor
        captured), a capture still due on it never runs, one running now is undone
        (``gateway.capture_queue``), and every memory it taught is retracted, as an
        edit to nothing would (history gone, no tombstone: said again, it is new).
        Idempotent. Returns the ids retracted. Raises UnknownTenant, or
        NamespaceError for ids outside their patterns."""
        self.settings.tenant(tenant)
        chat = w.chat
        if not chat.is_group and w.chat_id != w.sender_id:  # a private chat is keyed by its person
            chat = ChatRef(w.platform, chat.kind, w.sender_id, chat.thread_id)
        ns = await asyncio.to_thread(resolve_identity, self.core.store, tenant, w.platform, w.sender_id)
        # the chat log keys a line by its platform sender, also for a linked person:<id>
        author = Namespace(tenant, platform_subject(w.platform, w.sender_id))

        def work() -> list[str]:
            self.core.store.withdraw_line(author, chat, w.message_id)
            return retract_from(self.core, ns, chat, w.message_id)

        gone = await asyncio.to_thread(work)
        log.info("withdrawal of %s message %s in %s: %d memories retracted", ns, w.message_id, chat.key, len(gone))
        return gone


def retract_from(core: MemoryCore, ns: Namespace, chat: ChatRef, message_id: str) -> list[str]:
    """Retract every live memory of ``ns`` learned from ``message_id`` of ``chat``;
    returns their ids. Blocking (SQL and index): call it in a thread."""
    gone = []
    for memory in core.store.find_by_source(ns, chat, message_id):
        try:
            core.retract(ns, memory.id, actor="withdraw")
        except LookupError:  # retracted meanwhile
            continue
        gone.append(memory.id)
    return gone


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """What ``withdraw_since`` took back: the memory ids retracted, how many of the
    person's lines and of the companion's lines left the chat log, and the
    receipt of what the retractions purged (``memory.types.ForgetReceipt``;
    ``chat_lines`` counts the lines withdrawn too; no tombstones: what was
    withdrawn, said again, is new evidence)."""

    ids: tuple[str, ...]
    lines: int
    bot_lines: int
    receipt: ForgetReceipt


def withdraw_since(core: MemoryCore, ns: Namespace, authors: Sequence[Namespace], where: str, since: datetime, *,
                   actor: str, private: bool, seconds: int | None = None) -> Withdrawn:
    """``/memory forget last <duration>`` and its ``/v1`` route: what ``authors``
    (the platform identities of the person of ``ns``) said in chat ``where`` (a
    ``pause_key``: a group covers its topics) at or after ``since`` is withdrawn —
    each line redacted (a capture still due on it never runs) and every memory of
    ``ns`` learned from it retracted — and so is every other memory of ``ns``
    learned or changed in that chat since then; in a ``private`` chat the
    companion's lines of that time go too (they may retell it). Audited
    ``forget_last`` in ``ns`` with counts only (and ``seconds``, the window asked
    for). Blocking (SQL and index)."""
    gone: list[str] = []
    receipt = ForgetReceipt()
    said = [(author, key, mid) for author in authors for key, mid in core.store.said_since(author, where, since)]
    for author, chat_key, message_id in said:
        chat = ChatRef.parse(chat_key)
        core.store.withdraw_line(author, chat, message_id)
        for memory in core.store.find_by_source(ns, chat, message_id):
            try:
                receipt += core.retract(ns, memory.id, actor="withdraw")
            except LookupError:  # retracted meanwhile
                continue
            gone.append(memory.id)
    offset = 0
    while batch := core.store.list(ns, limit=500, offset=offset):
        offset += len(batch)
        for m in batch:
            key = m.origin.key if m.origin is not None else ""
            if m.id not in gone and (key == where or key.startswith(f"{where}:")) and \
                    max(m.created_at or since, m.updated_at or since) >= since:
                try:
                    receipt += core.retract(ns, m.id, actor=actor)
                except NotFoundError:
                    continue
                gone.append(m.id)
                offset -= 1
        if (batch[-1].updated_at or since) < since:
            break  # newest first: the rest is older than the window
    bot_lines = core.store.drop_bot_lines_since(ns.tenant, where, since) if private else 0
    receipt += ForgetReceipt(chat_lines=len(said) + bot_lines)
    core.store.scrub()
    core.store.audit(ns, "forget_last", actor, count=len(gone), lines=len(said), bot_lines=bot_lines,
                     seconds=seconds, chat=where)
    return Withdrawn(tuple(gone), len(said), bot_lines, receipt)
