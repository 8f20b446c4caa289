"""Settings of nonebot_plugin_huiyi, read from the bot's ``.env`` (``get_plugin_config``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["Config"]


class Config(BaseModel):
    """``.env`` keys (case-insensitive, as NoneBot reads them)."""

    #: The gateway's root URL, e.g. ``HUIYI_URL=http://127.0.0.1:8080``.
    huiyi_url: str = "http://127.0.0.1:8080"
    #: An API key of the gateway (``huiyi keys create --tenant T``; an admin key, the bot relays everyone):
    #: ``HUIYI_API_KEY=hy_…``. Unset only for a keyless gateway on the bot's own machine.
    huiyi_api_key: str | None = None
    #: The tenant (default: the key's), ``HUIYI_TENANT=mochi``.
    huiyi_tenant: str | None = None
    #: Seconds per gateway call (the turn includes the model's reply), ``HUIYI_TIMEOUT=30``.
    huiyi_timeout: float = Field(default=30.0, gt=0)
    #: Send the gateway's reply (``false``: capture and commands only, another plugin answers), ``HUIYI_REPLY=true``.
    huiyi_reply: bool = True
