"""huiyi inside an existing NoneBot2 bot (OneBot v11 adapter)::

    nonebot.load_plugin("gateway.huiyi_nonebot")

Loads the bridge's plugin (``bridges.qq.huiyi_plugin``: matcher, parsing,
replies) and gives it a factory that builds the whole gateway pipeline from
huiyi's settings (``HUIYI_*`` keys of the bot's ``.env`` as NoneBot read them,
the process environment over them, and ``HUIYI_CONFIG``) on the first
message, with the gateway's maintenance task beside it (pending captures
resumed, index repaired). It lives in the gateway because building a pipeline
is the gateway's job; the bridge plugin itself never imports the gateway.
"""

from __future__ import annotations

import dataclasses

from nonebot import get_plugin_config, require
from pydantic import BaseModel, ConfigDict

__all__ = ["build_pipeline_from_settings", "maintain"]

_bridge = require("bridges.qq.huiyi_plugin")

#: The bridge plugin's metadata, named as the standalone entry point.
__plugin_meta__ = dataclasses.replace(_bridge.__plugin_meta__, name="huiyi (standalone)")


class _BotConfig(BaseModel):
    """Every key of the bot's NoneBot config (``get_plugin_config`` keeps them all as extras)."""

    model_config = ConfigDict(extra="allow")


def build_pipeline_from_settings():
    """A ``gateway.pipeline.Pipeline`` over the configured stores (blocking: opens the
    database and the index, loads the embedder); the ``HUIYI_*`` keys of the bot's
    ``.env`` are read through NoneBot's config (``gateway.config.nonebot_environ``)."""
    from gateway.config import load_settings, nonebot_environ
    from gateway.service import build_pipeline

    environ = nonebot_environ(get_plugin_config(_BotConfig).model_extra or {})
    return build_pipeline(load_settings(environ=environ))


async def maintain(pipeline) -> None:
    """The gateway's maintenance task (``gateway.maintenance``) beside the
    plugin's pipeline: queued captures a crash left are resumed, the index is
    repaired and rebuilt when it must be."""
    from gateway.maintenance import maintenance

    await maintenance(pipeline)


_bridge.build_with(build_pipeline_from_settings, maintain)
