"""huiyi inside an existing NoneBot2 bot (OneBot v11 adapter)::

    nonebot.load_plugin("gateway.huiyi_nonebot")

Loads the bridge's plugin (``bridges.qq.huiyi_plugin``: matcher, parsing,
replies) and gives it a factory that builds the whole gateway pipeline from
huiyi's settings (``HUIYI_*`` environment and ``HUIYI_CONFIG``) on the first
message. It lives in the gateway because building a pipeline is the gateway's
job; the bridge plugin itself never imports the gateway.
"""

from __future__ import annotations

from nonebot import require
from nonebot.plugin import PluginMetadata

__all__ = ["build_pipeline_from_settings"]

__plugin_meta__ = PluginMetadata(
    name="huiyi (standalone)",
    description="Long-term memory for a companion bot: recall, reply and capture through the huiyi gateway",
    usage="Talk to the bot in private, or @-mention / reply to it in a group.",
    type="application",
    supported_adapters={"~onebot.v11"},
)


def build_pipeline_from_settings():
    """A ``gateway.pipeline.Pipeline`` over the configured stores (blocking: opens the
    database and the index, loads the embedder)."""
    from gateway.config import load_settings
    from gateway.service import build_pipeline

    return build_pipeline(load_settings())


require("bridges.qq.huiyi_plugin").build_with(build_pipeline_from_settings)
