"""Running the generic JSON webhook: verify, parse, turn, answer or call back.

See ``bridges.webhook.protocol`` for the wire format. ``WebhookRuntime``
holds the callback deliveries in flight (awaited on ``close()``); callback
POSTs are tried three times (after 0, 0.5 and 2 s) and then logged as lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping

import httpx

from bridges.webhook.protocol import (SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookMessage, WebhookReply, sign,
                                      verify)
from bridges.contract import InboundMessage, TurnHandler, TurnResult
from memory.types import repair_tree


__all__ = ["WebhookRuntime"]

log = logging.getLogger(__name__)

_RETRY_DELAYS_S = (0.0, 0.5, 2.0)


class WebhookRuntime:
    """The generic webhook of the tenants of ``pipeline``; ``client`` posts callbacks."""

    def __init__(self, pipeline: TurnHandler, client: httpx.AsyncClient) -> None:
        self.pipeline = pipeline
        self.client = client
        self._tasks: set[asyncio.Task] = set()

    async def receive(self, tenant: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, dict]:
        """``(status, body)`` for one request. Raises UnknownTenant; SignatureError
        (nothing processed); pydantic ValidationError or NamespaceError for a body
        that is not a ``WebhookMessage``."""
        cfg = self.pipeline.tenant(tenant).webhook
        verify(cfg.secret, headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER), raw,
               now=time.time(), window=cfg.window)
        msg = _message(raw).to_inbound(cfg.platform)
        if cfg.callback_url:
            task = asyncio.create_task(self._turn_and_call_back(tenant, msg, cfg.callback_url, cfg.secret))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return 202, {"ok": True, "accepted": True}
        # the reply travels in this answer: capture after it (durably, see Pipeline.handle)
        result = await self.pipeline.handle(tenant, msg, background_capture=True)
        return 200, self.reply_of(tenant, msg, result).model_dump()

    @staticmethod
    def reply_of(tenant: str, msg: InboundMessage, result: TurnResult) -> WebhookReply:
        """The answer for ``msg``: in groups the reply quotes the person's message."""
        return WebhookReply(tenant=tenant, chat_id=msg.chat_id, chat_type=msg.chat_kind.value, thread_id=msg.thread_id,
                            message_id=msg.message_id,
                            reply_to_message_id=msg.message_id if msg.chat.is_group else None,
                            reply=None if result.duplicate else result.reply, addressed=result.addressed,
                            duplicate=result.duplicate)

    async def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for callbacks in flight."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def _turn_and_call_back(self, tenant: str, msg: InboundMessage, url: str, secret: str) -> None:
        try:
            result = await self.pipeline.handle(tenant, msg)
        except Exception:  # noqa: BLE001 - a background turn has nobody else to tell
            log.exception("webhook: turn for tenant %s message %s failed", tenant, msg.message_id)
            return
        reply = self.reply_of(tenant, msg, result)
        if reply.reply is None:
            return
        body = reply.model_dump_json().encode("utf-8")
        for attempt, delay in enumerate(_RETRY_DELAYS_S, 1):
            await asyncio.sleep(delay)
            ts = str(int(time.time()))
            try:
                resp = await self.client.post(url, content=body, headers={
                    "Content-Type": "application/json", TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(secret, ts, body)})
                if resp.status_code < 300:
                    return
                log.warning("webhook: callback for tenant %s answered %d (attempt %d)", tenant, resp.status_code,
                            attempt)
            except httpx.HTTPError as exc:
                log.warning("webhook: callback for tenant %s failed (attempt %d): %s", tenant, attempt, exc)
        log.error("webhook: reply to message %s of tenant %s lost after %d attempts", msg.message_id, tenant,
                  len(_RETRY_DELAYS_S))


def _message(raw: bytes) -> WebhookMessage:
    """The body as a WebhookMessage, its strings repaired (``memory.types.repair``: a
    lone surrogate escape becomes U+FFFD instead of a refusal). Raises pydantic
    ValidationError for a body that is not JSON or not a WebhookMessage."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return WebhookMessage.model_validate_json(raw)  # raises, saying why
    return WebhookMessage.model_validate(repair_tree(data))
