"""Freshness and replay checks of signed callbacks (bridges.replay) over the real
store on SQLite and PostgreSQL: a nonce is accepted once per tenant and
platform, stale or future timestamps are refused, and old nonces are pruned."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from bridges.replay import FRESH, RETRY, ReplayedRequest, StaleRequest, check_fresh, guard
from gateway.nonces import nonce_horizon
from gateway.config import TenantSettings, load_settings

NOW = 1_796_000_000.0


@pytest.mark.parametrize("ts", ["1796000000", 1_796_000_000, str(int(NOW) - 300), int(NOW) + 300])
def test_timestamps_inside_the_window_pass(ts):
    """Unix seconds as a string or an int, up to the window either way, are fresh."""
    assert check_fresh(ts, now=NOW, window=300) == int(ts)


@pytest.mark.parametrize("ts", [str(int(NOW) - 365 * 86400), str(int(NOW) - 301), int(NOW) + 301, None, "",
                                "17960000.5", "-1", -1, "１７９６０００００", "1" * 13, True])
def test_stale_future_or_malformed_timestamps_are_refused(ts):
    """A year old, just stale, too far ahead, missing, fractional, negative, full-width digits, too long or a bool: refused."""
    with pytest.raises(StaleRequest):
        check_fresh(ts, now=NOW, window=300)


def test_a_nonce_is_accepted_once_per_tenant_and_platform(core, caplog):
    """First use FRESH; the same nonce again is refused (another body) or, where allowed, a RETRY (same body);
    another tenant or platform has its own nonces."""
    store = core.store
    kw = dict(timestamp=int(NOW), now=NOW, window=300)
    assert guard(store, "default", "wechat", nonce="1796000000.42", body="我的狗叫旺财".encode(), **kw) == FRESH
    with pytest.raises(ReplayedRequest, match="another body"):
        guard(store, "default", "wechat", nonce="1796000000.42", body=b"/memory forget all", **kw)
    with pytest.raises(ReplayedRequest, match="replayed request"):
        guard(store, "default", "wechat", nonce="1796000000.42", body="我的狗叫旺财".encode(), **kw)
    assert guard(store, "default", "wechat", nonce="1796000000.42", body="我的狗叫旺财".encode(),
                 allow_identical=True, **kw) == RETRY
    assert guard(store, "other", "wechat", nonce="1796000000.42", body=b"x", **kw) == FRESH
    assert guard(store, "default", "webhook", nonce="1796000000.42", body=b"x", **kw) == FRESH
    assert "refused a wechat callback for tenant default" in caplog.text


def test_old_nonces_are_pruned_and_recent_ones_kept(core):
    """prune_nonces drops what was seen before the horizon and keeps the rest."""
    store = core.store
    old, recent = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)
    assert store.claim_nonce("default", "onebot", "a", "d1", old) is None
    assert store.claim_nonce("default", "onebot", "b", "d2", recent) is None
    assert store.prune_nonces(datetime(2026, 3, 1, tzinfo=UTC)) == 1
    assert store.claim_nonce("default", "onebot", "a", "d3", recent) is None  # gone: claimable again
    assert store.claim_nonce("default", "onebot", "b", "d4", recent) == "d2"


def test_prune_horizon_is_twice_the_widest_window():
    """A nonce is kept while any request carrying it could still be fresh: 2 × the widest window, plus a minute."""
    s = load_settings(tenants={"default": TenantSettings(), "slow": TenantSettings(wechat={"window": 900})},
                      onebot={"window": 120})
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert nonce_horizon(s, now) == now - timedelta(seconds=2 * 900 + 60)


def test_the_real_clock_is_used_by_default_windows():
    """The default window (300 s) accepts now and refuses a year ago on the real clock."""
    now = time.time()
    assert check_fresh(str(int(now)), now=now, window=300) == int(now)
    with pytest.raises(StaleRequest):
        check_fresh(str(int(now) - 365 * 86400), now=now, window=300)
