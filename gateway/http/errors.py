"""Gateway and core errors as HTTP answers — the one place where errors become
HTTP answers (``install_handlers``).

Status codes (``status_of``; the tree is ``gateway.errors``')::

    UnknownTenant                404
    BadPayload                   400 (PayloadTooLarge 413, BodyTimeout 408)
    Unauthorized                 401
    Forbidden                    403
    ChatMismatch                 409
    RateLimited                  429 with Retry-After (seconds)
    LLMError                     502 when surfaced

Core errors (``memory.errors``) map as: NamespaceError → 400, NotFoundError → 404,
KeyTakenError → 409 (an edit's text is what another memory holds),
StoreError / SearchIndexError / EmbedderError → 503 with the generic detail
UNAVAILABLE: their text (an SQL statement, a path, a host) is logged at WARNING
for the operator, never sent (the store hides statement parameters, so no
message text reaches the log either). A pydantic ValidationError
that reaches a route (a platform payload whose message does not validate, e.g.
a placeholder sender id) is a 400 with the field errors, never the input; so is
FastAPI's RequestValidationError (a ``/v1`` body, path or query that does not
validate).

Anything else is a bug: ``KeepAlive`` answers it with a JSON 500 itself and
logs the traceback, so that the client's connection stays usable (Starlette's
own handler re-raises after answering, and uvicorn then closes the connection
without saying so).
"""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError

from gateway.errors import (BadPayload, BodyTimeout, ChatMismatch, Forbidden, LLMError, PayloadTooLarge, RateLimited,
                            Unauthorized, UnknownTenant)
from memory.errors import (CoreError, EmbedderError, KeyTakenError, NamespaceError, NotFoundError, SearchIndexError,
                           StoreError)

__all__ = ["status_of", "UNAVAILABLE", "install_handlers", "KeepAlive"]

log = logging.getLogger(__name__)

#: The ``detail`` of every 503: the reason stays in the gateway log.
UNAVAILABLE = "storage or search temporarily unavailable; try again later"


_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (UnknownTenant, 404),
    (PayloadTooLarge, 413),
    (BodyTimeout, 408),
    (BadPayload, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (ChatMismatch, 409),
    (RateLimited, 429),
    (LLMError, 502),
    (ValidationError, 400),
    (NamespaceError, 400),
    (NotFoundError, 404),
    (KeyTakenError, 409),
    (StoreError, 503),
    (SearchIndexError, 503),
    (EmbedderError, 503),
    (CoreError, 500),
)


_HTTP_NAMES = {404: "NotFound", 405: "MethodNotAllowed"}
"""The ``error`` of the router's own answers (``install_handlers``)."""


def status_of(exc: Exception) -> int:
    """HTTP status for an exception (500 for anything unknown)."""
    from fastapi.exceptions import RequestValidationError

    if isinstance(exc, RequestValidationError):
        return 400
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
        if code == 503:  # the reason (SQL, paths, hosts) is the operator's, never the client's
            log.warning("%s %s -> %d %s: %s", request.method, request.url.path[:200], code, type(exc).__name__, exc)
            return JSONResponse({"error": type(exc).__name__, "detail": UNAVAILABLE}, status_code=code)
        log.warning("%s %s -> %d %s%s", request.method, request.url.path[:200], code, type(exc).__name__,
                    _fields(exc))
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
        return JSONResponse({"error": type(exc).__name__, "detail": _detail(exc)}, status_code=code, headers=headers)

    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # the router's own answers (an unknown path, a wrong method) in the same shape as every other error
        name = _HTTP_NAMES.get(exc.status_code, "HTTPError")
        log.warning("%s %s -> %d %s", request.method, request.url.path[:200], exc.status_code, name)
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request.app, request.scope)
        return JSONResponse({"error": name, "detail": exc.detail}, status_code=exc.status_code, headers=headers or None)

    for cls, _ in _STATUS:
        app.add_exception_handler(cls, handler)
    app.add_exception_handler(RequestValidationError, handler)
    app.add_exception_handler(HTTPException, http_error)
    app.add_middleware(KeepAlive)


def allowed_methods(app, scope) -> str:
    """The ``Allow`` header of a 405 (RFC 9110 §15.5.6): every method some route of
    ``app`` answers at the scope's path, sorted, ``"DELETE, GET, HEAD, PATCH"``.
    Starlette names only the first route that matches the path, and FastAPI makes
    one route per method, so its own header would leave out the path's other
    methods. Included routers (``/v1``) are searched too."""
    from starlette.routing import Match

    def walk(routes):
        for route in routes:
            if hasattr(route, "original_router"):  # FastAPI's entry for an included router
                yield from walk(route.original_router.routes)
            elif getattr(route, "methods", None):  # not a mount (NoneBot's) or a websocket route
                yield route

    methods: set[str] = set()
    for route in walk(app.router.routes):
        match, _ = route.matches(scope)
        if match is not Match.NONE:  # FULL never reaches a 405; PARTIAL: the path, another method
            methods |= set(route.methods)
    return ", ".join(sorted(methods))


def _fields(exc: Exception) -> str:
    """For the log line of a rejected body: which fields were wrong (never their values)."""
    from fastapi.exceptions import RequestValidationError

    if isinstance(exc, (ValidationError, RequestValidationError)):
        return " at " + ", ".join(".".join(str(p) for p in e.get("loc", ())) for e in exc.errors())[:300]
    return ""


def _detail(exc: Exception) -> object:
    from fastapi.exceptions import RequestValidationError

    if isinstance(exc, ValidationError):  # the reasons without the rejected input (it may be megabytes)
        return exc.errors(include_url=False, include_input=False, include_context=False)
    if isinstance(exc, RequestValidationError):
        return [{k: v for k, v in e.items() if k in ("type", "loc", "msg")} for e in exc.errors()]
    return str(exc)


class KeepAlive:
    """ASGI middleware: an exception no handler maps becomes a JSON 500
    (``{"error": "InternalError"}``), logged with its traceback, and is not
    re-raised, so the server keeps the connection open. An exception after the
    response has started is re-raised (the connection cannot be saved then)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            if started:
                raise
            log.exception("%s %s -> 500", scope.get("method"), scope.get("path"))
            body = json.dumps({"error": "InternalError", "detail": "internal error; see the gateway log"}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
