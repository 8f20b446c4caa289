"""Chat migration: a group chat got a new id (Telegram group → supergroup), and
what was learned there follows it.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.capture_queue import CaptureQueue
from gateway.config import Settings
from memory.core import MemoryCore
from memory.types import ChatRef

__all__ = ["ChatMigration", "MIGRATE_DRAIN_S"]

log = logging.getLogger(__name__)

MIGRATE_DRAIN_S = 30.0
"""Seconds a chat migration waits for the captures queued before it (``ChatMigration.migrate``)."""


class ChatMigration:
    """Chat migrations of every tenant over one core (``TurnHandler.migrate_chat``)."""

    def __init__(self, settings: Settings, core: MemoryCore, captures: CaptureQueue) -> None:
        self.settings = settings
        self.core = core
        self.captures = captures

    async def migrate(self, tenant: str, old: ChatRef, new: ChatRef) -> int:
        """The chat log of ``old`` and the origin (hence disclosure) of its memories
        move to ``new``; returns the number of memories moved. Audited per namespace
        (``Store.migrate_chat``); the index catches up through the outbox. Captures
        queued after their turns (which still name the old chat) land first, so
        that they move too. Raises UnknownTenant."""
        self.settings.tenant(tenant)
        if not await self.captures.drain(timeout=MIGRATE_DRAIN_S):
            log.warning("chat migration of %s: captures still running after %.0f s; they keep the old chat id",
                        old.key, MIGRATE_DRAIN_S)
        moved = await asyncio.to_thread(self.core.store.migrate_chat, tenant, old, new, f"bridge:{old.platform}")
        if moved.memories:
            try:
                await asyncio.to_thread(self.core.maintain)
            except Exception as exc:  # noqa: BLE001 - the outbox keeps what failed; maintenance retries
                log.warning("index update after chat migration deferred: %s", exc)
        log.info("chat %s migrated to %s for tenant %s: %d lines, %d memories", old.key, new.key, tenant,
                 moved.chat_lines, moved.memories)
        return moved.memories
