"""Hosting NoneBot2 inside the gateway so OneBot v11 implementations connect.

Topology: NoneBot2's FastAPI driver owns its own FastAPI app, where the
OneBot v11 adapter declares its routes (reverse WebSocket ``/onebot/v11/ws``
and ``/onebot/v11/``, HTTP POST ``/onebot/v11/http`` and ``/onebot/v11/``).
The gateway mounts that app at the root *after* its own routes, so
``/healthz``, ``/telegram/…``, ``/onebot/<tenant>`` and the rest answer
first and everything else reaches NoneBot. NoneBot's start-up and shutdown
hooks run inside the gateway's lifespan (a mounted app's own lifespan would
not run). One gateway process hosts one NoneBot2 driver: NoneBot keeps it
in a global.

The adapter checks ``access_token`` (``Authorization: Bearer``) on reverse
WebSocket connections and the ``X-Signature`` HMAC-SHA1 of ``secret`` on HTTP
POST events. The driver is ``~fastapi+~httpx``: the httpx client lets bots
that post events over HTTP receive replies through their API root
(``OneBotSettings.api_roots``). NoneBot also reads its own ``.env`` files
and environment (``DRIVER``, ``HOST``…); huiyi passes everything it needs
explicitly.

When NoneBot was already initialised in this process (an embedding bot, or
the nonebug test harness), its driver and configuration are reused and its
owner runs its lifespan.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["NoneBotHost", "PLUGIN"]

log = logging.getLogger(__name__)

#: The plugin module NoneBot loads.
PLUGIN = "bridges.qq.huiyi_plugin"


class NoneBotHost:
    """NoneBot2 + the OneBot v11 adapter + huiyi's plugin, mounted into ``app``.

    ``cfg`` is the gateway's ``OneBotSettings`` (``access_token``, ``secret``,
    ``api_roots``). Importing nonebot happens here, only when a QQ bridge is
    configured. Call ``mount`` after the gateway's own routes are defined.
    """

    def __init__(self, cfg: Any) -> None:
        import nonebot
        from nonebot.adapters.onebot.v11 import Adapter

        try:
            self.driver = nonebot.get_driver()
            self.owned = False
            log.info("qq: reusing the NoneBot driver of this process (its configuration applies)")
        except ValueError:
            nonebot.init(driver="~fastapi+~httpx", onebot_access_token=cfg.access_token, onebot_secret=cfg.secret,
                         onebot_api_roots=dict(cfg.api_roots), fastapi_openapi_url=None, fastapi_docs_url=None,
                         fastapi_redoc_url=None)
            self.driver = nonebot.get_driver()
            self.owned = True
        try:
            nonebot.get_adapter(Adapter)
        except ValueError:
            self.driver.register_adapter(Adapter)
        if nonebot.get_plugin(PLUGIN.rsplit(".", 1)[1]) is None:
            nonebot.load_plugin(PLUGIN)
        from bridges.qq import huiyi_plugin

        self.plugin = huiyi_plugin

    def mount(self, app: Any) -> None:
        """Mount NoneBot's ASGI app at the root of ``app`` (after its routes)."""
        app.mount("/", self.driver.server_app)

    @contextlib.asynccontextmanager
    async def running(self, pipeline: Any) -> AsyncIterator[None]:
        """Bind ``pipeline`` to the plugin and, when this host initialised
        NoneBot, run NoneBot's start-up/shutdown hooks around the block."""
        self.plugin.bind(pipeline)
        try:
            if self.owned:
                server_app = self.driver.server_app
                async with server_app.router.lifespan_context(server_app):
                    yield
            else:
                yield
        finally:
            self.plugin.unbind(pipeline)
