"""The reply API for replies that miss the 5-second window: the OA
customer-service message API or the WeCom app message API (httpx).

Official Account: access token from ``POST /cgi-bin/stable_token`` (the
stable token does not invalidate tokens other replicas hold), text through
``POST /cgi-bin/message/custom/send``. WeCom: ``GET /cgi-bin/gettoken`` with
CorpID + app secret, text through ``POST /cgi-bin/message/send`` with the
AgentID. Tokens are cached until 5 minutes before ``expires_in`` and fetched
again once when WeChat says a token is invalid or expired (40001, 40014,
42001). Long texts are split at ``TEXT_LIMIT_BYTES`` of UTF-8 (WeChat counts
bytes) on line or sentence boundaries where possible.

Transient failures — a network error or timeout, an HTTP 5xx, errcode -1
("system busy") — are retried (tenacity: at most CALL_ATTEMPTS attempts,
exponential backoff with jitter); a retried send whose first answer was lost
may reach the person twice, which beats never. Raises ``WeChatAPIError`` (HTTP
failure, or a non-zero ``errcode``) once retries are spent or at once for
anything else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

__all__ = ["WeChatAPI", "WeChatAPIError", "split_bytes", "TEXT_LIMIT_BYTES"]

log = logging.getLogger(__name__)

TEXT_LIMIT_BYTES = 2000
CALL_ATTEMPTS = 3
"""Attempts of one API call when it fails transiently."""
BACKOFF_INITIAL_S = 0.5
"""First backoff after a transient failure (seconds; doubles, with up to 0.5 s jitter, at most 5 s)."""
_TOKEN_ERRORS = frozenset({40001, 40014, 42001})
_BASES = {"oa": "https://api.weixin.qq.com", "wecom": "https://qyapi.weixin.qq.com"}


class WeChatAPIError(Exception):
    """The WeChat API refused or failed; ``errcode`` is WeChat's code when it gave one."""

    def __init__(self, message: str, errcode: int | None = None, *, transient: bool = False,
                 maybe_sent: bool = False) -> None:
        super().__init__(message)
        self.errcode = errcode
        #: a retry may succeed: network error, timeout, HTTP 5xx or errcode -1 (system busy)
        self.transient = transient or errcode == -1
        #: the request may have reached WeChat (the connection was made, the answer was lost)
        self.maybe_sent = maybe_sent


def split_bytes(text: str, limit: int = TEXT_LIMIT_BYTES) -> list[str]:
    """Chunks of ``text`` of at most ``limit`` UTF-8 bytes, cut after a newline or
    sentence end (。！？.!?) in the last quarter of a chunk when there is one."""
    chunks: list[str] = []
    rest = text
    while len(rest.encode("utf-8")) > limit:
        size, cut = 0, 0
        for i, ch in enumerate(rest):
            size += len(ch.encode("utf-8"))
            if size > limit:
                cut = i
                break
        floor = cut - cut // 4
        best = max(rest.rfind(m, 0, cut) for m in ("\n", "。", "！", "？", ". ", "!", "?"))
        if best >= floor:
            cut = best + 1
        chunks.append(rest[:cut])
        rest = rest[cut:]
    if rest.strip():
        chunks.append(rest)
    return chunks


class WeChatAPI:
    """Reply API of one tenant's ``WeChatSettings`` over a shared httpx client."""

    def __init__(self, cfg: Any, client: httpx.AsyncClient) -> None:
        self.cfg = cfg
        self.client = client
        self.base = (cfg.api_base or _BASES.get(cfg.kind, _BASES["oa"])).rstrip("/")
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def access_token(self, *, refresh: bool = False) -> str:
        """A valid access token (cached). Raises WeChatAPIError."""
        async with self._lock:
            if self._token and not refresh and time.monotonic() < self._expires:
                return self._token
            if not self.cfg.app_id or not self.cfg.app_secret:
                raise WeChatAPIError("app_id and app_secret are needed for the reply API")
            if self.cfg.kind == "wecom":
                body = await self._call("GET", "/cgi-bin/gettoken",
                                        params={"corpid": self.cfg.app_id, "corpsecret": self.cfg.app_secret})
            else:
                body = await self._call("POST", "/cgi-bin/stable_token",
                                        json={"grant_type": "client_credential", "appid": self.cfg.app_id,
                                              "secret": self.cfg.app_secret, "force_refresh": False})
            token = body.get("access_token")
            if not isinstance(token, str) or not token:
                raise WeChatAPIError("token response without access_token")
            self._token = token
            self._expires = time.monotonic() + max(60, int(body.get("expires_in", 7200)) - 300)
            return token

    async def send_text(self, user: str, text: str, *, retry: bool = True) -> int:
        """Send ``text`` to ``user`` (openid or WeCom user id); returns the number
        of messages sent. ``retry`` False: a send is tried once (a follow-up is
        never sent twice: a lost answer raises with ``maybe_sent``); the token
        fetch is retried all the same. Raises WeChatAPIError."""
        n = 0
        call = self._call if retry else self._call_once
        for chunk in split_bytes(text):
            if self.cfg.kind == "wecom":
                payload: dict = {"touser": user, "msgtype": "text", "agentid": int(self.cfg.agent_id or 0),
                                 "text": {"content": chunk}}
                path = "/cgi-bin/message/send"
            else:
                payload = {"touser": user, "msgtype": "text", "text": {"content": chunk}}
                path = "/cgi-bin/message/custom/send"
            try:
                await call("POST", path, params={"access_token": await self.access_token()}, json=payload)
            except WeChatAPIError as exc:
                if exc.errcode not in _TOKEN_ERRORS:
                    raise
                token = await self.access_token(refresh=True)
                await call("POST", path, params={"access_token": token}, json=payload)
            n += 1
        return n

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict:
        """One API call, retried while it fails transiently (module docstring)."""
        async for attempt in AsyncRetrying(retry=retry_if_exception(lambda e: getattr(e, "transient", False)),
                                           wait=wait_exponential_jitter(multiplier=BACKOFF_INITIAL_S, max=5.0, jitter=0.5),
                                           stop=stop_after_attempt(CALL_ATTEMPTS), reraise=True):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    log.info("wechat: retrying %s %s (attempt %d)", method, path, attempt.retry_state.attempt_number)
                return await self._call_once(method, path, **kwargs)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _call_once(self, method: str, path: str, **kwargs: Any) -> dict:
        try:
            resp = await self.client.request(method, self.base + path, **kwargs)
            body = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise WeChatAPIError(f"{method} {path}: {type(exc).__name__}: {exc}",
                                 transient=isinstance(exc, httpx.TransportError),
                                 maybe_sent=not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout,
                                                                 httpx.UnsupportedProtocol))) from exc
        if resp.status_code != 200 or not isinstance(body, dict):
            raise WeChatAPIError(f"{method} {path}: HTTP {resp.status_code}", transient=resp.status_code >= 500)
        code = body.get("errcode", 0)
        if code:
            raise WeChatAPIError(f"{method} {path}: errcode {code} {body.get('errmsg', '')}", errcode=int(code))
        return body
