"""Embedded mode: the gateway in this process, called through the same client.

::

    from huiyi_client.embedded import embedded

    async with embedded(data_dir="bot-data/huiyi") as hy:    # an AsyncHuiyi
        dp.message.middleware(HuiyiMiddleware(hy))           # huiyi_client.aiogram, unchanged
        await dp.start_polling(bot)

``embedded`` builds the gateway's own app (``gateway.http.app.create_app``) and
runs its lifespan around the block: the core is opened in a thread (database,
index, embedder), pending captures are resumed and the maintenance loop runs
(failed index writes re-applied, fragments compacted, nonces pruned); at the
end running captures get 30 s and the core is closed. Calls travel through
``httpx.ASGITransport`` — no socket, no port — into the same ``/v1`` routes a
remote gateway answers, so both modes behave alike (validation, keys, errors).
The caller counts as loopback: keyless use works for a tenant that never had an
API key (``api_key`` otherwise).

It needs the gateway installed (the huiyi repository, ``pip install .``): it is
imported only when ``embedded`` is called, so importing this module stays
light. The gateway's code is the top-level packages ``memory``, ``gateway``,
``bridges`` and ``locales``; a program with a module of one of those names
first on ``sys.path`` (a bot's own ``memory.py``) cannot embed it:
``check_packages`` finds this before importing anything and raises
``EmbeddingBlocked`` naming the file. Use a gateway of its own and the remote
client then.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from huiyi_client import AsyncHuiyi

__all__ = ["embedded", "EmbeddedHuiyi", "check_packages", "EmbeddingBlocked", "PACKAGES"]

#: The gateway's top-level packages and a file each must contain (how the gateway's is told from another module).
PACKAGES = {"memory": "core.py", "gateway": "pipeline.py", "bridges": "contract.py", "locales": "__init__.py"}

#: The address the embedded gateway sees its caller at (loopback: see gateway.http.auth).
CALLER = ("127.0.0.1", 0)


class EmbeddingBlocked(RuntimeError):
    """The gateway cannot run in this process: it is not installed, or a module of
    the program shadows one of its top-level packages (``str()`` says which and
    what to do)."""


def check_packages() -> None:
    """Raise EmbeddingBlocked unless ``memory``, ``gateway``, ``bridges`` and
    ``locales`` resolve to the gateway's packages. Imports nothing (``find_spec`` of
    a top-level name reads ``sys.path``, or ``sys.modules`` when already imported)."""
    for name, marker in PACKAGES.items():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise EmbeddingBlocked(f"huiyi embedded mode: cannot look up package {name!r}: {exc}") from exc
        if spec is None:
            raise EmbeddingBlocked("huiyi embedded mode needs the gateway installed (the huiyi repository: "
                                   "pip install .); or run a gateway and use remote mode")
        if not any((Path(p) / marker).is_file() for p in spec.submodule_search_locations or ()):
            raise EmbeddingBlocked(
                f"huiyi embedded mode: {spec.origin or name!s} shadows huiyi's top-level package {name!r} "
                f"(the gateway's code is the packages memory, gateway, bridges and locales); rename the bot's "
                f"module, or run the gateway on its own and set HUIYI_MODE=remote")


class EmbeddedHuiyi(AsyncHuiyi):
    """An AsyncHuiyi whose gateway runs in this process: ``app`` is that gateway's
    FastAPI app (``app.state.pipeline`` its pipeline, for what the API does not cover)."""

    def __init__(self, app: Any, http: httpx.AsyncClient, *, api_key: str | None, tenant: str | None) -> None:
        super().__init__(api_key=api_key, tenant=tenant, http=http)
        self.app = app


@contextlib.asynccontextmanager
async def embedded(settings: Any = None, *, api_key: str | None = None, tenant: str | None = None,
                   timeout: float = 60.0, **overrides: Any) -> AsyncIterator[EmbeddedHuiyi]:
    """An ``AsyncHuiyi`` (``EmbeddedHuiyi``) bound to a gateway running in this process for the
    duration of the block. ``settings``: a ``gateway.config.Settings``; without it
    they are loaded as the gateway loads them (``HUIYI_*`` variables, the
    ``HUIYI_CONFIG`` file) with ``overrides`` on top (``data_dir=…``,
    ``config=…``). ``timeout`` seconds per call (a turn includes the model's reply).

    Raises EmbeddingBlocked (see ``check_packages``), ``gateway.config.ConfigError``
    on a bad configuration, and the store's errors when a part cannot open."""
    check_packages()
    from gateway.http.app import create_app
    from gateway.config import load_settings

    app = create_app(settings if settings is not None else load_settings(**overrides))
    async with app.router.lifespan_context(app):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=CALLER), base_url="http://huiyi",
                                 timeout=timeout)
        async with http, EmbeddedHuiyi(app, http, api_key=api_key, tenant=tenant) as client:
            yield client
