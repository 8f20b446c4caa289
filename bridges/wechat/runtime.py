"""WeChat runtime: the callback routes' logic and the 5-second rule.

WeChat waits 5 seconds for the answer to a message callback, then retries
the same message up to three times. So a message runs its turn in a task
(``bridges.ack``) and the callback answers once the message is durably
claimed and either the turn has ended or ``WeChatSettings.reply_within``
seconds have passed since it started:

- the turn finished with a reply that fits one message → the reply is the
  HTTP answer (a passive reply, encrypted in safe mode);
- otherwise → the answer is ``success``, and the reply (when there is one)
  goes out through the reply API (``bridges.wechat.api``) as soon as the
  turn ends.

The capture runs after the answer in both cases (durably: it is committed
with the message's chat-log line and resumed after a crash), so a passive
reply never waits for it.

A retry of a message already claimed (same tenant, platform, sender and
MsgId: the pipeline's delivery key) is a duplicate turn: it answers
``success`` and neither replies nor captures, so three retries give one reply
and one capture. Turn tasks are tracked and awaited on ``close()``.

Freshness and replay (``bridges.replay``): after its signature checks, every
callback's ``timestamp`` must lie within ``WeChatSettings.window`` seconds of
the server's clock, and its ``timestamp`` + ``nonce`` is accepted once —
claimed by the turn with the message it carries (one write before the
answer), or alone for a callback with no message. In plaintext mode the
signature does not cover the body, so the same query string with another body
is refused (401); the same query string with the same body (WeChat's own
retry) answers ``success`` and processes nothing. A tenant in plaintext mode
gets a WARNING at start-up: use safe mode.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import httpx

from bridges.ack import AckedTurns
from bridges.replay import claim, fresh_nonce, guard
from bridges.wechat.api import TEXT_LIMIT_BYTES, WeChatAPI
from bridges.wechat.callback import WeChatCallback
from bridges.wechat.parse import parse_message
from bridges.contract import CallbackNonce, TurnHandler, TurnResult


__all__ = ["WeChatRuntime", "SUCCESS"]

log = logging.getLogger(__name__)

#: The body that tells WeChat "received, no passive reply".
SUCCESS = "success"


class WeChatRuntime:
    """WeChat callbacks for the tenants of ``pipeline``; ``client`` is the shared
    httpx client of the reply API. Use inside one event loop."""

    def __init__(self, pipeline: TurnHandler, client: httpx.AsyncClient) -> None:
        self.pipeline = pipeline
        self.client = client
        self._apis: dict[str, WeChatAPI] = {}
        self.turns = AckedTurns(pipeline, "wechat")
        for name, t in pipeline.settings.tenants.items():
            if t.wechat.token and t.wechat.kind == "oa" and not t.wechat.encoding_aes_key:
                log.warning("wechat: tenant %s uses plaintext mode: its callback signature does not cover the "
                            "message body; set encoding_aes_key (safe mode)", name)

    def callback(self, tenant: str) -> WeChatCallback:
        """The tenant's callback handler. Raises UnknownTenant, NotConfigured."""
        return WeChatCallback(self.pipeline.tenant(tenant).wechat)

    def api(self, tenant: str) -> WeChatAPI:
        """The tenant's reply API client (one per tenant, caching its token)."""
        if tenant not in self._apis:
            self._apis[tenant] = WeChatAPI(self.pipeline.tenant(tenant).wechat, self.client)
        return self._apis[tenant]

    def verify(self, tenant: str, query: Mapping[str, str]) -> str:
        """Body of the URL-verification answer. Raises SignatureError, NotConfigured,
        ReplayError (stale timestamp, or the nonce already used with another echo)."""
        echo = self.callback(tenant).verify_url(query)
        self._guard(tenant, query, query.get("echostr", "").encode("utf-8", "replace"))
        return echo

    def _guard(self, tenant: str, query: Mapping[str, str], body: bytes) -> str:
        """``bridges.replay.guard`` for a callback whose signature was checked."""
        return guard(self.pipeline, tenant, "wechat", timestamp=query.get("timestamp"),
                     nonce=self._signed(query), body=body, now=time.time(),
                     window=self.pipeline.tenant(tenant).wechat.window, allow_identical=True)

    def _nonce(self, tenant: str, query: Mapping[str, str], body: bytes) -> CallbackNonce:
        """``bridges.replay.fresh_nonce`` of a callback whose signature was checked
        (StaleRequest): claimed by its turn, or alone when it carries no message."""
        return fresh_nonce(tenant, "wechat", timestamp=query.get("timestamp"), nonce=self._signed(query), body=body,
                           now=time.time(), window=self.pipeline.tenant(tenant).wechat.window, allow_identical=True)

    @staticmethod
    def _signed(query: Mapping[str, str]) -> str:
        """What WeChat signs to make a callback unique: its timestamp and nonce."""
        return f"{query.get('timestamp', '')}.{query.get('nonce', '')}"

    async def receive(self, tenant: str, query: Mapping[str, str], body: bytes) -> str:
        """Handle one message callback; returns the HTTP answer body (a passive
        reply or ``success``). Raises SignatureError / NotConfigured / ReplayError
        before anything is processed. WeChat's own retry of a callback (the same
        query string and body) answers ``success`` and processes nothing."""
        cb = self.callback(tenant)
        fields = cb.open(query, body)
        nonce = self._nonce(tenant, query, body)
        msg = parse_message(fields, platform=cb.platform) if fields is not None else None
        if msg is None:  # nothing for a turn: the nonce is claimed alone
            await asyncio.to_thread(claim, self.pipeline, tenant, nonce)
            return SUCCESS

        async def deliver(result: TurnResult) -> None:
            await self._deliver(tenant, msg.sender_id, result.reply)

        wait = self.pipeline.tenant(tenant).wechat.reply_within
        result = await self.turns.start(tenant, msg, within=max(0.0, wait), deliver=deliver, nonce=nonce)
        if result is None:  # not ended within reply_within: the reply follows through the API
            return SUCCESS
        if not result.reply or result.duplicate:
            return SUCCESS
        if len(result.reply.encode("utf-8")) <= TEXT_LIMIT_BYTES:
            return cb.seal(cb.reply_xml(fields, result.reply), query)
        self.turns.spawn(deliver(result))
        return SUCCESS

    async def send_followup(self, tenant: str, user: str, text: str) -> None:
        """Send follow-up question ``text`` to ``user`` (OA openid or WeCom user id)
        of ``tenant`` through the reply API, once (``WeChatAPI.send_text`` with
        ``retry=False``: never twice). Raises WeChatAPIError (``maybe_sent`` when
        the request may have reached WeChat)."""
        await self.api(tenant).send_text(user, text, retry=False)

    async def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for pending turns and deliveries."""
        await self.turns.idle(timeout)

    # -- internals -------------------------------------------------------------

    async def _deliver(self, tenant: str, user: str, text: str) -> None:
        try:
            n = await self.api(tenant).send_text(user, text)
            log.info("wechat: reply for tenant %s sent through the API in %d message(s)", tenant, n)
        except Exception as exc:  # noqa: BLE001 - the turn is done; only the reply is lost
            log.warning("wechat: reply API for tenant %s failed: %s", tenant, exc)
