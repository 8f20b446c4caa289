"""Freshness and replay checks shared by every signed platform callback.

A signature proves who made a request, not when: a captured request (a WeChat
callback query string, a signed webhook or OneBot body) could be sent again
much later. So every signed callback also

- carries a time (WeChat ``timestamp``, webhook ``X-Huiyi-Timestamp``, OneBot
  event ``time``; unix seconds) that must lie within ``window`` seconds of the
  server's clock, in both directions (``check_fresh``); and
- is accepted once: its nonce (what the platform signs to make a request
  unique: timestamp + nonce, or the signature itself) is claimed in SQL, so a
  second use within the window is refused on every gateway replica. Older
  nonces are pruned by the maintenance task (``Store.prune_nonces``); their
  timestamps are stale anyway.

A callback that carries a person's message hands its nonce to the turn
(``fresh_nonce``, then ``TurnHandler.handle(…, nonce=)``): the pipeline claims
it in the transaction that logs the message, so the turn writes once before
its answer, and a replay is refused there (``verdict``) before anything is
processed. A callback with nothing for a turn (URL verification, an event, a
withdrawal) claims it alone (``claim``; ``guard`` checks and claims at once).

Errors::

    ReplayError          base (→ 401 at the route; never processed)
    ├── StaleRequest     timestamp missing, not unix seconds, or outside the window
    └── ReplayedRequest  this nonce was already used

Every refusal is logged at WARNING with the tenant, platform and reason (no
message text).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Protocol

from bridges.contract import CallbackNonce

__all__ = ["NonceClaimer", "DEFAULT_WINDOW_S", "ReplayError", "StaleRequest", "ReplayedRequest", "check_fresh", "guard",
           "FRESH", "RETRY", "fresh_nonce", "claim", "verdict"]

log = logging.getLogger(__name__)

#: Default freshness window in seconds (either direction).
DEFAULT_WINDOW_S = 300
#: ``guard`` verdicts: first use / the identical request again (only when allowed).
FRESH = "fresh"
RETRY = "retry"


class NonceClaimer(Protocol):
    """Where nonces are claimed (``bridges.contract.TurnHandler``; the gateway's
    pipeline keeps them in SQL so that every replica sees them)."""

    def claim_nonce(self, tenant: str, platform: str, nonce: str, digest: str = "",
                    at: datetime | None = None) -> str | None: ...


class ReplayError(Exception):
    """A signed request that is stale or replayed; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StaleRequest(ReplayError):
    """The request's time is missing, malformed or outside the window."""


class ReplayedRequest(ReplayError):
    """The request's nonce was already used within the window."""


def check_fresh(timestamp: object, *, now: float, window: int) -> int:
    """``timestamp`` (unix seconds: int, or a string of at most 12 ASCII digits)
    as an int when ``|now - timestamp| <= window`` (seconds); raises StaleRequest
    otherwise (also for a bool, a float string or a negative value)."""
    if isinstance(timestamp, bool):
        raise StaleRequest("timestamp is not unix seconds")
    if isinstance(timestamp, int | float):
        ts = int(timestamp)
    elif isinstance(timestamp, str) and timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12:
        ts = int(timestamp)
    elif timestamp is None or timestamp == "":
        raise StaleRequest("timestamp missing")
    else:
        raise StaleRequest("timestamp is not unix seconds")
    if ts < 0 or abs(now - ts) > window:
        raise StaleRequest(f"timestamp outside the {window} s window")
    return ts


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fresh_nonce(tenant: str, platform: str, *, timestamp: object, nonce: str, body: bytes, now: float, window: int,
                allow_identical: bool = False) -> CallbackNonce:
    """Check freshness (``check_fresh``: StaleRequest, logged at WARNING), then the
    nonce to claim: ``nonce`` (what makes the signed request unique) and ``body``
    (the raw body) hashed, ``now`` (unix seconds) as its time. No SQL: the turn
    claims it with the message (``TurnHandler.handle``), else ``claim`` does.
    ``allow_identical``: see ``guard``."""
    try:
        check_fresh(timestamp, now=now, window=window)
    except StaleRequest as exc:
        log.warning("refused a %s callback for tenant %s: %s", platform, tenant, exc.reason)
        raise
    return CallbackNonce(platform, _sha256(nonce.encode("utf-8", "replace")), _sha256(body),
                         datetime.fromtimestamp(now, tz=UTC), allow_identical)


def verdict(tenant: str, nonce: CallbackNonce, first: str | None) -> str:
    """What a claim of ``nonce`` found: ``first`` is None the first time, else the
    digest its first use recorded. FRESH the first time; RETRY for the very same
    body again where ``nonce.allow_identical`` (the caller processes nothing and
    answers as for a duplicate); raises ReplayedRequest otherwise (logged at
    WARNING, no message text)."""
    if first is None:
        return FRESH
    if nonce.allow_identical and first == nonce.digest:
        log.info("%s callback for tenant %s repeated with the same body: not processed again", nonce.platform, tenant)
        return RETRY
    reason = "nonce already used (replayed request)" if first == nonce.digest else \
        "nonce already used with another body (replayed signature)"
    log.warning("refused a %s callback for tenant %s: %s", nonce.platform, tenant, reason)
    raise ReplayedRequest(reason)


def claim(nonces: NonceClaimer, tenant: str, nonce: CallbackNonce) -> str:
    """Claim ``nonce`` alone, in SQL: ``verdict`` of what the claim found. Raises
    ReplayedRequest; StoreError when SQL is unreachable. Blocking."""
    return verdict(tenant, nonce, nonces.claim_nonce(tenant, nonce.platform, nonce.nonce, nonce.digest, nonce.at))


def guard(nonces: NonceClaimer, tenant: str, platform: str, *, timestamp: object, nonce: str, body: bytes, now: float,
          window: int, allow_identical: bool = False) -> str:
    """Check freshness, then claim ``nonce`` for ``tenant``/``platform`` alone
    (``fresh_nonce``, then ``claim``): for a callback with no message to hand to a
    turn.

    ``nonces``: where nonces are claimed (the pipeline, which keeps them in SQL);
    ``timestamp``: see ``check_fresh``; ``nonce``: what makes the signed request
    unique (hashed before it is stored); ``body``: the raw body (its SHA-256 is
    kept with the nonce); ``now`` in unix seconds, ``window`` in seconds.
    Returns FRESH the first time. A second use raises ReplayedRequest, except
    that with ``allow_identical`` (WeChat, which retries a callback it got no
    answer to) the very same body again returns RETRY: the caller processes
    nothing and answers as for a duplicate. Raises StaleRequest /
    ReplayedRequest (logged at WARNING); StoreError when SQL is unreachable."""
    return claim(nonces, tenant, fresh_nonce(tenant, platform, timestamp=timestamp, nonce=nonce, body=body, now=now,
                                             window=window, allow_identical=allow_identical))
