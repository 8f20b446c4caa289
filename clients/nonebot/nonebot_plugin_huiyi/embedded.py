"""Embedded mode of nonebot_plugin_huiyi: the gateway's core inside the bot's process.

``HUIYI_MODE=embedded`` in the bot's ``.env``, with the gateway installed (the
huiyi repository, ``pip install .``: its stores and embedder). Nothing is duplicated here: the OneBot
v11 handling is the gateway's own bridge plugin (``bridges.qq.huiyi_plugin``,
loaded with ``require``: parsing, @-mentions and replies, withdrawals,
duplicates, ``/memory``), the pipeline is built by ``gateway.service`` and
maintenance is the gateway's loop (``gateway.maintenance``: pending
captures resumed, failed index writes re-applied, fragments compacted, nonces
pruned).

Lifecycle (``start`` / ``stop``, registered on the driver's start-up and
shutdown): start builds the pipeline in a thread (opens the database and the
index, loads the embedder), binds it to the bridge plugin and starts the
maintenance task; stop cancels the task, waits up to 30 s for captures still
running (the rest resume at the next start), unbinds and closes the core.

Settings: huiyi's own — ``HUIYI_*`` keys of the bot's ``.env`` (read through
NoneBot's config, ``settings_environ``) and of the process environment (which
wins, as in NoneBot), the TOML file of ``huiyi_config`` — with the data root
``huiyi_data_dir`` or else this plugin's ``nonebot_plugin_localstore`` data
directory — never ``./data`` of wherever the bot runs.

**A bot with its own ``memory.py``** (or ``gateway``, ``bridges``,
``locales``): the gateway's code is the top-level packages of those names, and
Python has one module per name. When the bot's file comes first on
``sys.path`` (the bot's directory, as usual), the gateway cannot be imported
beside it; ``check_packages`` (``huiyi_client.embedded``, shared with the
aiogram embedding) finds this before anything is imported and the
plugin refuses to load with ``EmbeddingBlocked`` naming the file (NoneBot logs
it; the bot's own ``memory`` module is left untouched). Rename the bot's
module, or run the gateway as its own process and use remote mode, which
imports none of these packages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from huiyi_client.embedded import EmbeddingBlocked, check_packages

__all__ = ["EmbeddingBlocked", "check_packages", "settings_overrides", "settings_environ", "start", "stop",
           "running_pipeline"]

log = logging.getLogger(__name__)

_state: dict[str, Any] = {"pipeline": None, "task": None, "bridge": None}
_lock = asyncio.Lock()


def settings_overrides(config: Any, data_dir: Path | None) -> dict[str, Any]:
    """Keyword overrides for ``gateway.config.load_settings`` from the plugin's
    ``Config``: ``data_dir`` (``huiyi_data_dir``, else ``data_dir`` — the
    localstore directory), ``config`` (``huiyi_config``) and the tenant of a bot
    that no tenant's ``qq.self_ids`` lists (``huiyi_tenant`` as
    ``onebot.default_tenant``; the other OneBot settings still come from the
    environment and the file: pydantic-settings merges key by key)."""
    out: dict[str, Any] = {"data_dir": config.huiyi_data_dir or data_dir}
    if config.huiyi_config is not None:
        out["config"] = config.huiyi_config
    if config.huiyi_tenant:
        out["onebot"] = {"default_tenant": config.huiyi_tenant}
    return {k: v for k, v in out.items() if v is not None}


def settings_environ(config: Any) -> dict[str, str]:
    """The gateway's ``HUIYI_*`` variables written in the bot's ``.env``: every key of the plugin's ``Config``
    (``get_plugin_config``) that is no field of its own, as the variable it was (``gateway.config.
    nonebot_environ``), for ``load_settings(environ=…)``. NoneBot reads ``.env`` for its config but does not
    export it to the process environment, so without this ``HUIYI_LLM_MODEL`` in ``.env`` set no model."""
    from gateway.config import nonebot_environ

    return nonebot_environ(config.model_extra or {}, exclude=frozenset(type(config).model_fields))


def setup() -> Any:
    """Load the bridge plugin (``require``) and register ``start``/``stop`` on the
    driver; returns the bridge module. Raises EmbeddingBlocked (see
    ``check_packages``). Idempotent."""
    from nonebot import get_driver, require

    check_packages()
    require("nonebot_plugin_localstore")
    if _state["bridge"] is None:
        _state["bridge"] = require("bridges.qq.huiyi_plugin")
        driver = get_driver()
        driver.on_startup(start)
        driver.on_shutdown(stop)
    return _state["bridge"]


def running_pipeline() -> Any:
    """The pipeline built by ``start`` (a ``gateway.pipeline.Pipeline``), or None."""
    return _state["pipeline"]


async def start() -> Any:
    """Build the pipeline (in a thread), bind it to the bridge plugin and start
    maintenance; returns the pipeline. A second call returns the running one.
    Raises gateway.config.ConfigError on a bad configuration and the store's
    errors when a part cannot open (the bot's start-up then fails, loudly)."""
    from nonebot import get_plugin_config
    from nonebot_plugin_localstore import get_plugin_data_dir

    from .config import Config

    async with _lock:
        if _state["pipeline"] is not None:
            return _state["pipeline"]
        from gateway.maintenance import maintenance
        from gateway.config import load_settings
        from gateway.service import build_pipeline

        config = get_plugin_config(Config)
        settings = load_settings(environ=settings_environ(config), **settings_overrides(config, get_plugin_data_dir()))
        pipeline = await asyncio.to_thread(build_pipeline, settings)
        bridge = _state["bridge"] or setup()
        bridge.bind(pipeline)
        _state["pipeline"] = pipeline
        _state["task"] = asyncio.create_task(maintenance(pipeline), name="huiyi-maintenance")
        log.info("huiyi embedded: data root %s, maintenance running", settings.data_dir)
        return pipeline


async def stop() -> None:
    """Stop maintenance, let running captures finish (30 s at most), unbind and
    close the core. Does nothing when nothing runs."""
    async with _lock:
        pipeline, task = _state["pipeline"], _state["task"]
        _state["pipeline"] = _state["task"] = None
        if pipeline is None:
            return
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if not await pipeline.drain(timeout=30):
            log.warning("huiyi embedded: captures still running at shutdown; they resume at the next start")
        if _state["bridge"] is not None:
            _state["bridge"].unbind(pipeline)
        await asyncio.to_thread(pipeline.core.close)
