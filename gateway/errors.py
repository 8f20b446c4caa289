"""Errors of the gateway, one tree (``gateway.http.errors`` maps them to HTTP
status codes: the one place where errors become HTTP answers).

Exception tree::

    GatewayError                 base of gateway errors
    ├── UnknownTenant            no such tenant configured
    ├── BadPayload               malformed body or unparsable platform payload
    │   ├── PayloadTooLarge      body above the size limit
    │   └── BodyTimeout          the body did not arrive within the time limit
    ├── Unauthorized             missing or wrong signature / secret / token / API key
    ├── Forbidden                a valid API key asking beyond its reach (another
    │                            tenant, another person for a member key, admin commands)
    ├── ChatMismatch             the chat named is not one the subject speaks in (409)
    ├── RateLimited              over a /v1 rate limit (per address or key); ``retry_after`` s
    └── LLMError                 the chat model failed (the pipeline normally degrades
        │                        instead of surfacing it)
        └── EmptyAnswer          the model answered nothing (the reply path stays silent)

The core's errors are ``memory.errors``' tree.
"""

from __future__ import annotations

__all__ = ["GatewayError", "UnknownTenant", "BadPayload", "PayloadTooLarge", "BodyTimeout", "Unauthorized", "Forbidden",
           "ChatMismatch", "RateLimited", "LLMError", "EmptyAnswer"]


class GatewayError(Exception):
    """Base class of gateway errors."""


class UnknownTenant(GatewayError, LookupError):
    """No tenant of that name is configured."""


class BadPayload(GatewayError, ValueError):
    """The request body is malformed or is not a platform payload."""


class PayloadTooLarge(BadPayload):
    """The request body is larger than the gateway accepts."""


class BodyTimeout(BadPayload):
    """The client did not send the whole request body in time."""


class Unauthorized(GatewayError):
    """Signature, secret token or access token missing or wrong."""


class Forbidden(GatewayError):
    """The caller is authenticated but may not do this: another tenant, another
    person's memories with a member key, an admin command without an admin key."""


class ChatMismatch(GatewayError):
    """A well-formed request whose chat is not one its subject speaks in: another
    platform's, someone else's private chat, or any chat for a linked ``person:…``
    (who has no platform id of their own). Not a malformed body (400): the
    schema cannot tie a chat to the path's subject, so this is a conflict (409)."""


class RateLimited(GatewayError):
    """Too many calls from one client address or with one API key
    (``gateway.http.ratelimit``); ``retry_after``: whole seconds, at least 1,
    until the limit has room again (the answer's ``Retry-After``)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMError(GatewayError):
    """The chat model failed (HTTP error, timeout, malformed answer)."""


class EmptyAnswer(LLMError):
    """The chat model answered with nothing but whitespace."""
