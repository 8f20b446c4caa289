"""How the gateway's HTTP server runs: the one uvicorn configuration that
``huiyi serve`` and the benchmarks start (``server_config``).

Two settings keep a pooled client connection from being closed under a request
it has already sent (the client sees a reset: ``httpx.ReadError``):

- **The event loop is asyncio's, not uvloop's** (``EVENT_LOOP``). When the loop
  thread waits — for the GIL while worker threads embed, tokenise and write SQL,
  or for a CPU on a loaded machine — the wait falls mostly right after the poll
  for I/O has returned, inside an I/O callback. libuv (uvloop) then begins its
  next iteration with the timers: an idle connection whose keep-alive ran out
  during the wait is closed before the request waiting in its socket is read.
  asyncio's loop runs the I/O callbacks of one poll before the timers that fell
  due meanwhile, so the request is read, which cancels its keep-alive timer
  (``tests/gateway/http/test_serving.py`` pins both orders).
- **The keep-alive outlasts the clients' pool expiry** (``KEEP_ALIVE_S``): the
  side that closes an idle connection should be the client, which never sends
  on a connection it closed. A server that closes at the same age as the client
  (uvicorn's default 5 s against httpx's 5 s) closes first whenever the client
  read its previous answer a moment late, racing the client's next request.
  Slow and idle clients stay bounded by the connection limit
  (``Settings.max_connections``, 503 beyond it) and the body's deadline
  (``Settings.body_timeout_s``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["EVENT_LOOP", "KEEP_ALIVE_S", "server_config"]

EVENT_LOOP = "asyncio"
"""uvicorn's ``loop``: asyncio's, which reads what arrived during a stall before its timers (module docstring)."""

KEEP_ALIVE_S = 20.0
"""Seconds an idle keep-alive connection stays open: above the pool expiry of the
usual clients (httpx 5 s, aiohttp 15 s), so that they close it first."""


def server_config(app: Any, *, host: str, port: int, limit_concurrency: int | None = None, **overrides: Any):
    """The ``uvicorn.Config`` of the gateway serving ``app`` (an ASGI app) on
    ``host``:``port``: asyncio's event loop, ``KEEP_ALIVE_S`` keep-alive, at most
    ``limit_concurrency`` connections and tasks at once (503 beyond; None:
    unbounded), uvicorn's own logging configuration left alone. ``overrides``:
    further ``uvicorn.Config`` arguments (``log_level``, ``access_log``; a test's
    shorter ``timeout_keep_alive``)."""
    import uvicorn

    options: dict[str, Any] = {"loop": EVENT_LOOP, "timeout_keep_alive": KEEP_ALIVE_S, "log_config": None,
                               "limit_concurrency": limit_concurrency}
    options.update(overrides)
    return uvicorn.Config(app, host=host, port=port, **options)
