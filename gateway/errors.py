"""Errors of the gateway and their HTTP status codes — the one place where
errors become HTTP answers.

Exception tree::

    GatewayError                 base of gateway errors
    ├── UnknownTenant            404: no such tenant configured
    ├── BadPayload               400/422: malformed body or unparsable platform payload
    │   └── PayloadTooLarge      413: body above the size limit
    ├── Unauthorized             401: missing or wrong signature / secret / token
    └── LLMError                 502 when surfaced: the chat model failed (the pipeline
                                 normally degrades instead of surfacing it)

Core errors (``memory.errors``) map as: NamespaceError → 400, NotFoundError → 404,
StoreError / SearchIndexError / EmbedderError → 503.
"""

from __future__ import annotations

import logging

from memory.errors import CoreError, EmbedderError, NamespaceError, NotFoundError, SearchIndexError, StoreError

__all__ = ["GatewayError", "UnknownTenant", "BadPayload", "PayloadTooLarge", "Unauthorized", "LLMError", "status_of", "install_handlers"]

log = logging.getLogger(__name__)


class GatewayError(Exception):
    """Base class of gateway errors."""


class UnknownTenant(GatewayError, LookupError):
    """No tenant of that name is configured."""


class BadPayload(GatewayError, ValueError):
    """The request body is malformed or is not a platform payload."""


class PayloadTooLarge(BadPayload):
    """The request body is larger than the gateway accepts."""


class Unauthorized(GatewayError):
    """Signature, secret token or access token missing or wrong."""


class LLMError(GatewayError):
    """The chat model failed (HTTP error, timeout, malformed answer)."""


_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (UnknownTenant, 404),
    (PayloadTooLarge, 413),
    (BadPayload, 400),
    (Unauthorized, 401),
    (LLMError, 502),
    (NamespaceError, 400),
    (NotFoundError, 404),
    (StoreError, 503),
    (SearchIndexError, 503),
    (EmbedderError, 503),
    (CoreError, 500),
)


def status_of(exc: Exception) -> int:
    """HTTP status for an exception (500 for anything unknown)."""
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return 500


def install_handlers(app) -> None:
    """Register one JSON error handler per mapped exception class on a FastAPI app."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        code = status_of(exc)
        log.warning("%s %s -> %d %s", request.method, request.url.path, code, type(exc).__name__)
        return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=code)

    for cls, _ in _STATUS:
        app.add_exception_handler(cls, handler)
