"""Reading request bodies at the HTTP edge: bounded in size and in time, and
every string repaired (``memory.types.repair``) before anything parses it.

Shared by the platform routes (``gateway.http.app``) and the ``/v1`` API
(``gateway.http.api_v1``).
"""

from __future__ import annotations

import asyncio

from fastapi import Request
from pydantic import ValidationError

from gateway.errors import BadPayload, BodyTimeout, PayloadTooLarge
from memory.types import load_json

__all__ = ["MAX_BODY_BYTES", "BODY_TIMEOUT_S", "read_body", "json_object", "validation_errors"]

MAX_BODY_BYTES = 1 << 20  # 1 MiB: far above any message (InboundMessage caps text at 20,000 chars)
BODY_TIMEOUT_S = 15.0  # the default of Settings.body_timeout_s


async def read_body(request: Request) -> bytes:
    """The request body, refused (413) above MAX_BODY_BYTES before it is read
    when Content-Length says so, else as soon as the stream passes the limit: an
    unauthenticated caller cannot make the gateway buffer 200 MB. A body that has
    not fully arrived within ``app.state.body_timeout_s`` seconds is refused with
    408, so a client sending half a body cannot hold a connection for ever.
    Cached on the request: a second call (or Starlette's ``request.body()``)
    gets the same bytes."""
    if hasattr(request, "_body"):
        return request._body
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"body of {declared} bytes is above the limit of {MAX_BODY_BYTES}")
    chunks, size = [], 0
    limit = getattr(request.app.state, "body_timeout_s", BODY_TIMEOUT_S)
    try:
        async with asyncio.timeout(limit):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise PayloadTooLarge(f"body above the limit of {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyTimeout(f"body not received within {limit:g} s ({size} bytes arrived)") from exc
    request._body = b"".join(chunks)  # Starlette's cache: later reads of this request get it again
    return request._body


def validation_errors(exc: ValidationError) -> str:
    """What was wrong, field by field, as one readable line — ``"timestamp:
    Value error, timestamp must lie between 1970 and 2100; text: Field
    required"`` — without the rejected input (it may be megabytes long) or
    pydantic's internals (a Python repr of the exception)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors(include_url=False))


async def json_object(request: Request) -> dict:
    """The body as a JSON object (``memory.types.load_json``), every string repaired
    (``memory.types.repair``: a lone surrogate escape such as ``"\\ud83c"`` becomes
    U+FFFD). BadPayload (400) when it is not JSON, nests deeper than
    ``memory.types.JSON_MAX_DEPTH`` or is not an object; PayloadTooLarge /
    BodyTimeout as ``read_body``."""
    raw = await read_body(request)
    try:
        body = load_json(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
        raise BadPayload(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadPayload("body must be a JSON object")
    return body
