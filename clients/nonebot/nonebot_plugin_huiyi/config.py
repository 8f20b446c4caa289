"""Settings of nonebot_plugin_huiyi, read from the bot's ``.env`` (``get_plugin_config``).

Besides its own keys, ``Config`` keeps every other key NoneBot read (``extra="allow"``): in embedded mode the
gateway's settings written in the bot's ``.env`` (``HUIYI_LLM_MODEL=…``, ``HUIYI_TENANTS__DEFAULT__…``) reach
the embedded gateway from there (``embedded.settings_environ``), as they would from the process environment."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Config"]


class Config(BaseModel):
    """``.env`` keys (case-insensitive, as NoneBot reads them). Keys that are not fields are kept in
    ``model_extra`` (lower case, values JSON-decoded and ``__`` keys nested, as NoneBot gives them)."""

    model_config = ConfigDict(extra="allow")

    #: ``remote`` (the default): every message goes to a running gateway at ``huiyi_url`` (light install).
    #: ``embedded``: the gateway's core runs inside the bot (``pip install huiyi``), ``HUIYI_MODE=embedded``.
    huiyi_mode: Literal["remote", "embedded"] = "remote"
    #: The gateway's root URL (remote mode), e.g. ``HUIYI_URL=http://127.0.0.1:8080``.
    huiyi_url: str = "http://127.0.0.1:8080"
    #: An API key of the gateway (``huiyi keys create --tenant T``; an admin key, the bot relays everyone):
    #: ``HUIYI_API_KEY=hy_…``. Unset only for a keyless gateway on the bot's own machine.
    huiyi_api_key: str | None = None
    #: The tenant (remote: default the key's; embedded: for a bot no tenant's ``qq.self_ids`` lists, default
    #: ``default``), ``HUIYI_TENANT=mochi``.
    huiyi_tenant: str | None = None
    #: Seconds per gateway call (the turn includes the model's reply), ``HUIYI_TIMEOUT=30``.
    huiyi_timeout: float = Field(default=30.0, gt=0)
    #: Send the gateway's reply (``false``: capture and commands only, another plugin answers), ``HUIYI_REPLY=true``.
    huiyi_reply: bool = True
    #: Embedded mode: the data root (database, index, audit), ``HUIYI_DATA_DIR=/srv/bot/huiyi``; default the
    #: plugin's ``nonebot_plugin_localstore`` data directory.
    huiyi_data_dir: Path | None = None
    #: Embedded mode: huiyi's TOML file or directory (tenants, personas, admins, models),
    #: ``HUIYI_CONFIG=huiyi.toml``; every other setting of the gateway comes from ``HUIYI_*`` variables as usual.
    huiyi_config: Path | None = None
