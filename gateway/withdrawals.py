"""Withdrawals: a person took a message back (a QQ recall, through OneBot or
NoneBot; ``POST /v1/withdrawals`` for a bot of its own), and what it taught
goes with it.
"""

from __future__ import annotations

import asyncio
import logging

from bridges.contract import Withdrawal
from gateway.config import Settings
from memory.core import MemoryCore
from memory.identity import platform_subject
from memory.identity import resolve as resolve_identity
from memory.types import ChatRef, Namespace

__all__ = ["Withdrawals", "retract_from"]

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
