"""Running the generic JSON webhook: verify, parse, turn, answer or call back.

See ``bridges.webhook.protocol`` for the wire format. A signed request is
accepted once (``bridges.replay``): its signature is claimed as its nonce by
the turn, in the transaction that logs its message, so a replay is refused
(401) on every replica and the turn writes once before its answer. With a
callback URL the request is answered 202 once the message is claimed
(``bridges.ack``, so a replay is still refused), and the reply is POSTed
when the turn ends. ``WebhookRuntime`` holds those turns and their callback
deliveries (awaited on ``close()``); a callback
POST that fails recoverably (network error or timeout, 429, 5xx) is retried
with tenacity, at most CALLBACK_ATTEMPTS times with exponential backoff (a
429's Retry-After wins), then logged as lost; another 4xx is logged at once
with its status and not retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import httpx
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from bridges.webhook.protocol import (SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookFollowup, WebhookMessage, WebhookReply,
                                      sign,
                                      verify)
from bridges.ack import AckedTurns
from bridges.contract import InboundMessage, TurnHandler, TurnResult
from bridges.replay import fresh_nonce
from memory.types import ChatRef, load_json


__all__ = ["WebhookRuntime", "FollowupCallbackError"]

log = logging.getLogger(__name__)

CALLBACK_ATTEMPTS = 4
"""Attempts to deliver a reply to the callback URL (network errors, 429 and 5xx are retried)."""
BACKOFF_INITIAL_S = 0.5
"""First backoff (seconds; doubles with up to 0.5 s jitter, at most 8 s); a 429's Retry-After (at most 30 s) wins."""


class _Retryable(Exception):
    """The callback answered 429 or 5xx: worth another attempt."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _callback_wait(state) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, _Retryable) and exc.response.status_code == 429:
        after = exc.response.headers.get("retry-after", "")
        if after.isdigit():
            return min(float(after), 30.0)
    return wait_exponential_jitter(multiplier=BACKOFF_INITIAL_S, max=8.0, jitter=0.5)(state)


class FollowupCallbackError(Exception):
    """A follow-up's callback failed; ``maybe_sent``: it may have reached the receiver."""

    def __init__(self, message: str, *, maybe_sent: bool = False) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


class WebhookRuntime:
    """The generic webhook of the tenants of ``pipeline``; ``client`` posts callbacks."""

    def __init__(self, pipeline: TurnHandler, client: httpx.AsyncClient) -> None:
        self.pipeline = pipeline
        self.client = client
        self.turns = AckedTurns(pipeline, "webhook")

    async def receive(self, tenant: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, dict]:
        """``(status, body)`` for one request. Raises UnknownTenant; SignatureError
        or ReplayError (a stale or already used signature; nothing processed); pydantic ValidationError or
        NamespaceError for a body that is not a ``WebhookMessage``; with a callback URL, what the turn raised
        before its message was claimed."""
        cfg = self.pipeline.tenant(tenant).webhook
        now = time.time()
        verify(cfg.secret, headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER), raw, now=now, window=cfg.window)
        # a signed request is accepted once, on any replica (a retry signs again): the turn claims it
        nonce = fresh_nonce(tenant, "webhook", timestamp=headers.get(TIMESTAMP_HEADER),
                            nonce=headers.get(SIGNATURE_HEADER) or "", body=raw, now=now, window=cfg.window)
        msg = _message(raw).to_inbound(cfg.platform)
        if cfg.callback_url:
            url, secret = cfg.callback_url, cfg.secret

            async def deliver(result: TurnResult) -> None:
                await self._call_back(tenant, msg, url, secret, result)

            result = await self.turns.start(tenant, msg, within=0.0, deliver=deliver, nonce=nonce)
            if result is not None and result.reply and not result.duplicate:  # ended at its claim (a command)
                self.turns.spawn(deliver(result))
            return 202, {"ok": True, "accepted": True}
        # the reply travels in this answer: capture after it (durably, see Pipeline.handle)
        result = await self.pipeline.handle(tenant, msg, background_capture=True, nonce=nonce)
        return 200, self.reply_of(tenant, msg, result).model_dump()

    @staticmethod
    def reply_of(tenant: str, msg: InboundMessage, result: TurnResult) -> WebhookReply:
        """The answer for ``msg``: in groups the reply quotes the person's message."""
        return WebhookReply(tenant=tenant, chat_id=msg.chat_id, chat_kind=msg.chat_kind.value, chat_type=msg.chat_kind.value, thread_id=msg.thread_id,
                            message_id=msg.message_id,
                            reply_to_message_id=msg.message_id if msg.chat.is_group else None,
                            reply=None if result.duplicate else result.reply, addressed=result.addressed,
                            duplicate=result.duplicate)

    async def send_followup(self, tenant: str, chat: ChatRef, person_id: str, followup_id: int, text: str) -> None:
        """POST follow-up question ``text`` for ``person_id`` in ``chat`` to
        ``tenant``'s ``webhook.callback_url`` as a signed ``WebhookFollowup``,
        once (never twice). Raises LookupError without a callback URL,
        ``FollowupCallbackError`` for a refusal or a failed call (``maybe_sent``:
        the request may have reached the receiver)."""
        cfg = self.pipeline.tenant(tenant).webhook
        if not cfg.callback_url:
            raise LookupError(f"tenant {tenant} has no webhook.callback_url")
        body = WebhookFollowup(tenant=tenant, chat_id=chat.chat_id, chat_kind=chat.kind.value, thread_id=chat.thread_id,
                               person_id=person_id, followup_id=followup_id, reply=text).model_dump_json().encode()
        ts = str(int(time.time()))
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: ts,
                   SIGNATURE_HEADER: sign(cfg.secret or "", ts, body)}
        try:
            resp = await self.client.post(cfg.callback_url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise FollowupCallbackError(f"{type(exc).__name__}: {exc}", maybe_sent=not isinstance(
                exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol))) from exc
        if resp.status_code >= 300:
            raise FollowupCallbackError(f"HTTP {resp.status_code}")

    async def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for the turns and callbacks in flight."""
        await self.turns.idle(timeout)

    async def _call_back(self, tenant: str, msg: InboundMessage, url: str, secret: str, result: TurnResult) -> None:
        """POST the reply of ``msg`` to ``url``, signed with ``secret``, retried (module docstring)."""
        reply = self.reply_of(tenant, msg, result)
        if reply.reply is None:
            return
        body = reply.model_dump_json().encode("utf-8")

        async def post() -> httpx.Response:
            ts = str(int(time.time()))  # signed afresh on every attempt: the receiver checks freshness
            resp = await self.client.post(url, content=body, headers={
                "Content-Type": "application/json", TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(secret, ts, body)})
            if resp.status_code == 429 or resp.status_code >= 500:
                raise _Retryable(resp)
            return resp

        try:
            async for attempt in AsyncRetrying(retry=retry_if_exception_type((_Retryable, httpx.TransportError)),
                                               wait=_callback_wait, stop=stop_after_attempt(CALLBACK_ATTEMPTS),
                                               reraise=True):
                with attempt:
                    resp = await post()
        except (_Retryable, httpx.TransportError) as exc:
            reason = f"HTTP {exc.response.status_code}" if isinstance(exc, _Retryable) else type(exc).__name__
            log.error("webhook: reply to message %s of tenant %s lost after %d attempts (%s)", msg.message_id,
                      tenant, CALLBACK_ATTEMPTS, reason)
            return
        except httpx.HTTPError as exc:
            log.error("webhook: reply to message %s of tenant %s not delivered: %s", msg.message_id, tenant, exc)
            return
        if resp.status_code >= 300:
            log.error("webhook: callback for tenant %s refused the reply to message %s: HTTP %d (not retried)",
                      tenant, msg.message_id, resp.status_code)


def _message(raw: bytes) -> WebhookMessage:
    """The body as a WebhookMessage, its strings repaired (``memory.types.repair``: a
    lone surrogate escape becomes U+FFFD instead of a refusal). Raises pydantic
    ValidationError for a body that is not JSON, nests deeper than
    ``memory.types.JSON_MAX_DEPTH`` (``load_json``) or is not a WebhookMessage."""
    try:
        data = load_json(raw)
    except ValueError as exc:  # not JSON, or too deep: the same 400 as a body of the wrong shape
        raise ValidationError.from_exception_data(WebhookMessage.__name__, [
            {"type": "value_error", "loc": (), "input": None, "ctx": {"error": exc}}]) from None
    return WebhookMessage.model_validate(data)
