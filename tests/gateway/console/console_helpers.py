"""Helpers of the console tests: the real app over a real core, a browser-like
client that logs in through the form, and the CSRF token of a page."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline

REMOTE = ("203.0.113.7", 40000)
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def console_app(core, **overrides):
    """The gateway's app over ``core`` with tenants ``default`` (en) and ``other`` (zh_CN)."""
    s = load_settings(tenants={"default": TenantSettings(language="en"), "other": TenantSettings(language="zh_CN")},
                      **overrides)
    return create_app(s, pipeline=Pipeline(s, core))


def csrf_of(html: str) -> str:
    m = CSRF_RE.search(html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def login(app, key: str, host=REMOTE, **kw) -> TestClient:
    """A client of ``app`` from ``host`` logged in with ``key`` (asserts the login worked)."""
    c = TestClient(app, client=host, **kw)
    r = c.post("/console/login", data={"key": key, "csrf": csrf_of(c.get("/console/login").text)},
               follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/people", r.text[:500]
    return c


def session_csrf(c: TestClient) -> str:
    """The session's CSRF token (from the people page's forms)."""
    return csrf_of(c.get("/console/people").text)
