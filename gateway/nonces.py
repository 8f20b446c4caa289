"""The nonces of signed platform callbacks (``bridges.replay``): claimed in SQL,
so that every replica refuses a replay, and pruned by the maintenance task
(``gateway.maintenance``) once no replay window reaches them. A callback that
carries a message has its nonce claimed by the turn, with the message's
chat-log line (``Pipeline.handle``); ``Nonces.claim`` serves the others.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gateway.config import Settings
from memory.store import Store

__all__ = ["Nonces", "nonce_horizon"]


class Nonces:
    """The callback nonces of every tenant in one store."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def claim(self, tenant: str, platform: str, nonce: str, digest: str = "",
              at: datetime | None = None) -> str | None:
        """``bridges.contract.TurnHandler.claim_nonce``: None the first time ``nonce``
        reaches ``tenant`` on ``platform``, else the ``digest`` recorded then
        (``Store.claim_nonce``). Blocking (SQL)."""
        return self.store.claim_nonce(tenant, platform, nonce, digest, at)

    def prune(self, now: datetime | None = None) -> int:
        """Drop the nonces no replay window reaches any more (``nonce_horizon``);
        returns how many. Blocking (SQL)."""
        return self.store.prune_nonces(nonce_horizon(self.settings, now))


def nonce_horizon(settings: Settings, now: datetime | None = None) -> datetime:
    """Nonces of signed callbacks recorded before this time may be pruned: a
    request whose nonce was seen at ``t`` carries a timestamp of at least
    ``t - window``, refused as stale from ``t + 2 × window`` on (the widest
    window of any tenant or bridge; a minute of slack)."""
    windows = [settings.onebot.window] + [w for t in settings.tenants.values()
                                          for w in (t.wechat.window, t.webhook.window)]
    return (now or datetime.now(timezone.utc)) - timedelta(seconds=2 * max(windows) + 60)
