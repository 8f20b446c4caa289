"""Answering a platform's webhook before the chat model: acknowledge once the
message is durably claimed, reply through the platform API afterwards.

A platform that pushes messages over HTTP (Telegram's webhook, a OneBot v11
implementation's HTTP POST, a WeChat callback) waits for the answer and, when
it is late, times out and redelivers; while it waits, the chat's next
updates wait too. The model behind a reply may take many seconds. So a
webhook route runs the turn in a task (``AckedTurns.start``) and answers as
soon as the pipeline says the message is claimed (``Pipeline.handle``'s
``claimed``: the person's chat-log line, its delivery claim, the signed
callback's nonce and its pending capture commit in one transaction — a crash
after that loses nothing: a redelivery is a duplicate and the capture is
resumed by the maintenance task; a replay is refused before the claim, and
raised to the route).

Where a platform can carry the reply in its HTTP answer (OneBot's quick
operation, WeChat's passive reply), the route may wait a bounded time
``within`` seconds, counted from the start of the turn, for the reply; a turn
that ends by then answers in the HTTP response as before. One that does not is
acknowledged at that moment and its reply goes out through the platform API
(``deliver``) when the turn ends. The capture runs after the answer either
way (``background_capture``), durably.

A turn that fails before it is claimed raises to the route as before (the
platform may redeliver: nothing was recorded). One that fails after the
acknowledgement is logged; its capture stays on its chat-log line.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from bridges.contract import CallbackNonce, InboundMessage, TurnHandler, TurnResult

__all__ = ["AckedTurns", "Deliver"]

log = logging.getLogger(__name__)

Deliver = Callable[[TurnResult], Awaitable[None]]
"""Sends a finished turn's reply through the platform API (called only when the
turn has a reply and is not a duplicate). Its errors are logged, never raised."""


class AckedTurns:
    """The turns one bridge runtime acknowledged before they ended, and their
    deliveries (awaited by ``idle`` and on shutdown). Use inside one event loop."""

    def __init__(self, pipeline: TurnHandler, platform: str) -> None:
        self.pipeline = pipeline
        self.platform = platform
        self._tasks: set[asyncio.Task] = set()

    async def start(self, tenant: str, msg: InboundMessage, *, within: float, deliver: Deliver,
                    nonce: CallbackNonce | None = None) -> TurnResult | None:
        """Run the turn of ``msg``; return once it is claimed and either ended
        (its TurnResult: the caller answers with it) or ``within`` seconds have
        passed since the start (None: ``deliver`` gets the result when the turn
        ends). ``within`` 0 answers at the claim; ``math.inf`` waits for the
        whole turn. ``nonce``: the signed callback's, claimed with the message
        (``TurnHandler.handle``). Raises what the turn raised if it ended by then
        (before its claim: UnknownTenant, NamespaceError, a store error,
        ``bridges.replay.ReplayedRequest``). If the caller is cancelled meanwhile
        (the platform hung up), the reply is delivered through the API instead."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within if math.isfinite(within) else None
        claimed = asyncio.Event()
        turn = self.spawn(self.pipeline.handle(tenant, msg, background_capture=True, claimed=claimed, nonce=nonce))
        waiter = asyncio.ensure_future(claimed.wait())
        try:
            try:
                await asyncio.wait({turn, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if not turn.done():
                left = None if deadline is None else deadline - loop.time()
                if left is None or left > 0:
                    await asyncio.wait({turn}, timeout=left)
        except asyncio.CancelledError:
            self.spawn(self._deliver_when_done(tenant, msg, turn, deliver))
            raise
        if turn.done():
            return turn.result()
        # Telegram (within 0) always answers first: only a missed bounded wait is worth an INFO line
        log.log(logging.INFO if within > 0 else logging.DEBUG,
                "%s: turn of tenant %s message %s acknowledged before its reply; it goes through the API",
                self.platform, tenant, msg.message_id)
        self.spawn(self._deliver_when_done(tenant, msg, turn, deliver))
        return None

    def spawn(self, coro: Awaitable) -> asyncio.Task:
        """Run ``coro`` as a task tracked by ``idle``."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def idle(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until no turn or delivery is left;
        True when none is."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._tasks:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    async def _deliver_when_done(self, tenant: str, msg: InboundMessage, turn: asyncio.Task,
                                 deliver: Deliver) -> None:
        await asyncio.wait({turn})
        if turn.cancelled():
            return
        exc = turn.exception()
        if exc is not None:
            log.error("%s: turn of tenant %s message %s failed after it was acknowledged: %s: %s (its capture "
                      "stays queued)", self.platform, tenant, msg.message_id, type(exc).__name__, exc)
            return
        result = turn.result()
        if not result.reply or result.duplicate:
            return
        try:
            await deliver(result)
        except Exception:  # noqa: BLE001 - the turn is done; only the reply is lost, and said so
            log.exception("%s: reply of tenant %s to message %s in chat %s not delivered", self.platform, tenant,
                          msg.message_id, msg.chat_id)
