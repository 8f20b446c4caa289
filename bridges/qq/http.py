"""The OneBot v11 HTTP POST route's turns: a quick operation when the reply is
quick, the bot's HTTP API when it is not.

A OneBot implementation (NapCat, Lagrange, go-cqhttp) that posts an event
waits for the HTTP answer — a few seconds at most, then it gives up (and
some retry). ``OneBotHTTP.answer`` therefore runs the turn through
``bridges.ack`` and waits for it at most ``OneBotSettings.reply_within``
seconds from its start (the message is always claimed first):

- the turn ended in time → its reply is the quick operation ``{"reply": …}``
  (in groups as segments that quote the person's message), or ``{}``;
- it did not → the answer is ``{}`` at once and the reply is sent when the
  turn ends with ``send_msg`` to the bot's API root (``api_roots[self_id]``,
  with the access token), retried on transient failures (network errors,
  timeouts, HTTP 5xx, 429: tenacity, at most CALL_ATTEMPTS attempts,
  exponential backoff with jitter); anything else is logged with the chat
  and the reason.

A bot without an API root can only answer by quick operation: for it the
route waits for the whole turn, as before (a WARNING says so at the first
such event, per bot).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from bridges.ack import AckedTurns
from bridges.contract import CallbackNonce, InboundMessage, TurnHandler, TurnResult
from memory.types import ChatRef

__all__ = ["OneBotHTTP", "OneBotAPIError", "quick_operation", "CALL_ATTEMPTS"]

log = logging.getLogger(__name__)

CALL_ATTEMPTS = 3
"""Attempts of one ``send_msg`` call when it fails transiently."""
BACKOFF_INITIAL_S = 0.5
"""First backoff after a transient failure (seconds; doubles, with up to 0.5 s jitter, at most 5 s)."""


class OneBotAPIError(Exception):
    """The OneBot HTTP API refused or failed the call; ``transient`` when a retry may succeed,
    ``maybe_sent`` when the call may have been carried out all the same."""

    def __init__(self, message: str, *, transient: bool = False, maybe_sent: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        #: the request may have reached the implementation (a read timeout): a follow-up is not sent again
        self.maybe_sent = maybe_sent


def _segments(msg: InboundMessage, text: str) -> list[dict]:
    """The reply as message segments: in groups a ``reply`` segment quoting the person's message first."""
    text_seg = {"type": "text", "data": {"text": text}}
    if msg.chat.is_group:
        return [{"type": "reply", "data": {"id": msg.message_id}}, text_seg]
    return [text_seg]


def _num(value: str) -> int | str:
    """A QQ id as OneBot sends it: a number (a non-numeric id stays a string)."""
    return int(value) if value.isdigit() else value


def quick_operation(msg: InboundMessage, result: TurnResult) -> dict:
    """The HTTP answer of an ended turn: OneBot v11's quick operation with the
    reply (the implementation sends it itself), or ``{}`` when there is none."""
    if not result.reply or result.duplicate:
        return {}
    if msg.chat.is_group:
        return {"reply": _segments(msg, result.reply), "at_sender": False}
    return {"reply": result.reply, "auto_escape": True, "at_sender": False}


class OneBotHTTP:
    """Turns of ``POST /onebot/<tenant>`` for the tenants of ``pipeline``;
    ``client`` calls the bots' HTTP APIs. Use inside one event loop."""

    def __init__(self, pipeline: TurnHandler, client: httpx.AsyncClient) -> None:
        self.pipeline = pipeline
        self.client = client
        self.turns = AckedTurns(pipeline, "onebot")
        self._warned: set[str] = set()

    def api_root(self, bot_id: str | None) -> str | None:
        """The HTTP API root of the bot ``bot_id`` (``OneBotSettings.api_roots``), or None."""
        root = self.pipeline.settings.onebot.api_roots.get(str(bot_id)) if bot_id else None
        return root.rstrip("/") if root else None

    async def answer(self, tenant: str, msg: InboundMessage, nonce: CallbackNonce | None = None) -> dict:
        """Run the turn of ``msg``; the HTTP answer (module docstring). ``nonce``: the
        signed event's (``bridges.replay.fresh_nonce``), claimed by the turn with the
        message. Raises what the turn raised before it was claimed (UnknownTenant,
        NamespaceError, a store error, ``bridges.replay.ReplayedRequest``)."""
        cfg = self.pipeline.settings.onebot
        within = max(0.0, cfg.reply_within)
        if self.api_root(msg.bot_id) is None:
            within = math.inf
            if str(msg.bot_id) not in self._warned:
                self._warned.add(str(msg.bot_id))
                log.warning("onebot: bot %s has no API root (onebot.api_roots); its replies wait for the model in "
                            "the HTTP answer, which the implementation may time out", msg.bot_id)

        async def deliver(result: TurnResult) -> None:
            await self.send(msg, result.reply or "")

        result = await self.turns.start(tenant, msg, within=within, deliver=deliver, nonce=nonce)
        return {} if result is None else quick_operation(msg, result)

    async def send(self, msg: InboundMessage, text: str) -> None:
        """Send ``text`` as the reply to ``msg`` through ``send_msg`` of its bot's
        API root. Raises OneBotAPIError once retries are spent, or at once for a
        refusal (HTTP 4xx other than 429, or a ``status`` other than ``ok``)."""
        root = self.api_root(msg.bot_id)
        if root is None:
            raise OneBotAPIError(f"bot {msg.bot_id} has no API root")
        body: dict[str, Any] = {"message": _segments(msg, text), "auto_escape": False}
        if msg.chat.is_group:
            body.update(message_type="group", group_id=_num(msg.chat_id))
        else:
            body.update(message_type="private", user_id=_num(msg.sender_id))
        await self._send_msg(root, body)
        log.info("onebot: reply to %s sent through the API of bot %s", msg.chat.key, msg.bot_id)

    async def send_followup(self, bot_id: str | None, chat: ChatRef, user_id: str, text: str) -> None:
        """Send a follow-up question (``gateway.followups``) through ``send_msg`` of
        bot ``bot_id``'s API root (the only root when ``bot_id`` is None or unknown
        and one is configured): to ``user_id`` in a private chat, or to the group
        with an @-mention of ``user_id``. Retried as ``send``; raises
        OneBotAPIError (``maybe_sent`` when the request may have reached the
        implementation: a timeout after it was written)."""
        roots = self.pipeline.settings.onebot.api_roots
        root = self.api_root(bot_id) or (next(iter(roots.values())).rstrip("/") if len(roots) == 1 else None)
        if root is None:
            raise OneBotAPIError(f"bot {bot_id} has no API root")
        text_seg = {"type": "text", "data": {"text": text}}
        body: dict[str, Any]
        if chat.is_group:
            body = {"message_type": "group", "group_id": _num(chat.chat_id),
                    "message": [{"type": "at", "data": {"qq": user_id}}, {"type": "text", "data": {"text": " "}},
                                text_seg]}
        else:
            body = {"message_type": "private", "user_id": _num(user_id), "message": [text_seg]}
        body["auto_escape"] = False
        await self._send_msg(root, body)

    async def _send_msg(self, root: str, body: dict[str, Any]) -> None:
        """POST ``body`` to ``root``/send_msg with the access token, retried on a
        transient failure (``CALL_ATTEMPTS``, jittered backoff from
        ``BACKOFF_INITIAL_S``, at most 5 s apart); raises OneBotAPIError."""
        token = self.pipeline.settings.onebot.access_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async for attempt in AsyncRetrying(retry=retry_if_exception(lambda e: getattr(e, "transient", False)),
                                           wait=wait_exponential_jitter(multiplier=BACKOFF_INITIAL_S, max=5.0, jitter=0.5),
                                           stop=stop_after_attempt(CALL_ATTEMPTS), reraise=True):
            with attempt:
                await self._call(root + "/send_msg", body, headers)

    async def _call(self, url: str, body: dict, headers: dict) -> None:
        try:
            resp = await self.client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            # a connection never made sent nothing; a read that timed out may follow a send that happened
            maybe = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
            raise OneBotAPIError(f"send_msg: {type(exc).__name__}: {exc}",
                                 transient=isinstance(exc, httpx.TransportError), maybe_sent=maybe) from exc
        if resp.status_code != 200:
            raise OneBotAPIError(f"send_msg: HTTP {resp.status_code}",
                                 transient=resp.status_code >= 500 or resp.status_code == 429)
        try:
            data = resp.json()
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("status") not in (None, "ok", "async"):
            raise OneBotAPIError(f"send_msg: status {data.get('status')} retcode {data.get('retcode')} "
                                 f"{data.get('wording') or data.get('msg') or ''}".strip())

    async def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for turns and replies in flight."""
        await self.turns.idle(timeout)
