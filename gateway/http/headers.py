"""Headers every answer of the gateway carries, whatever route, error handler or
mount produced it (``SecurityHeaders``, the outermost middleware)."""

from __future__ import annotations

__all__ = ["SecurityHeaders", "ALWAYS"]

#: ``(name, value)`` set on every HTTP answer unless the route set the header
#: itself. ``nosniff``: a browser renders an answer only as its declared
#: Content-Type (a JSON error or an exported document is never sniffed into
#: HTML or script).
ALWAYS: tuple[tuple[bytes, bytes], ...] = ((b"x-content-type-options", b"nosniff"),)


class SecurityHeaders:
    """ASGI middleware: adds ``ALWAYS`` to the start of every HTTP response
    (the console's pages, ``/v1``, the platform webhooks, static files, the
    errors ``KeepAlive`` answers itself, NoneBot's mount). Add it last, so that
    it wraps every other middleware."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in ALWAYS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
