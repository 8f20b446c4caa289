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

And one thing keeps an idle gateway's loop asleep: **the server ticks once a
second** (``TICK_S``, ``gateway_server``), where uvicorn's own ``Server`` wakes
its loop ten times a second to see whether it should exit (and to renew the
Date header once in ten). Each wake of a sleeping loop costs 0.1–0.15 ms of CPU
on 2 shared cores (measured 2026-12-06): at 10 paced chats, 4 turns a second,
the ten ticks were 0.35 ms of every turn's answer path. A request to exit
(``should_exit``, from a signal or another thread) wakes the loop at once, so
shutting down takes no longer than before.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

__all__ = ["EVENT_LOOP", "KEEP_ALIVE_S", "TICK_S", "gateway_server", "server_config"]

EVENT_LOOP = "asyncio"
"""uvicorn's ``loop``: asyncio's, which reads what arrived during a stall before its timers (module docstring)."""

KEEP_ALIVE_S = 20.0
"""Seconds an idle keep-alive connection stays open: above the pool expiry of the
usual clients (httpx 5 s, aiohttp 15 s), so that they close it first."""


TICK_S = 1.0
"""Seconds between the server's own checks of its loop (uvicorn: 0.1): the Date header's
renewal and whether to exit, which a request to exit does not wait for (module docstring)."""


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


def gateway_server(config):
    """The uvicorn server of ``config`` (``server_config``) that ticks every ``TICK_S``
    seconds instead of uvicorn's 0.1 and wakes at once when told to exit (its
    ``should_exit`` set True, from a signal handler or another thread): ``run()``
    it, or ``serve()`` on a running loop, as ``uvicorn.Server``."""
    return _server_class()(config)


@functools.cache
def _server_class():
    import uvicorn

    class GatewayServer(uvicorn.Server):
        """``uvicorn.Server`` with a ``TICK_S`` tick and a prompt exit (``gateway_server``)."""

        _wake = None  # set by main_loop: wakes its sleep from any thread

        @property
        def should_exit(self) -> bool:
            return self.__dict__.get("_exit", False)

        @should_exit.setter
        def should_exit(self, value: bool) -> None:
            self.__dict__["_exit"] = value
            if value and self._wake is not None:
                self._wake()

        async def main_loop(self) -> None:
            loop = asyncio.get_running_loop()
            tick: asyncio.Future | None = None

            def wake() -> None:
                if tick is not None and not tick.done():
                    tick.set_result(None)

            def wake_threadsafe() -> None:
                try:
                    loop.call_soon_threadsafe(wake)
                except RuntimeError:  # the loop is closed: nothing is waiting
                    pass

            self._wake = wake_threadsafe
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                # uvicorn renews the Date header on every tenth tick: every tick is one here
                counter = (counter + 10) % 864000
                tick = loop.create_future()
                timer = loop.call_later(TICK_S, wake)
                if not self.should_exit:  # set between the check and the future: no wake to wait for
                    await tick
                timer.cancel()
                should_exit = await self.on_tick(counter)
            self._wake = None

    return GatewayServer
