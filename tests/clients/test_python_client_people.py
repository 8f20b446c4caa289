"""GET /v1/people (issue 26.17): an admin key lists its tenant's people, paged
and searched, through memory.admin.people and the python client; a member key
is refused; another tenant's people never appear. SQLite and PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
from huiyi_client import ForbiddenError, Huiyi  # noqa: E402
from memory.types import Namespace  # noqa: E402

REMOTE = ("203.0.113.7", 40000)


@pytest.fixture
def app(core):
    s = load_settings(tenants={"default": TenantSettings(language="en"), "other": TenantSettings()})
    application = create_app(s, pipeline=Pipeline(s, core))
    with TestClient(application, client=REMOTE):
        yield application


def _remember(core, subject: str, text: str, tenant: str = "default") -> None:
    ns = Namespace(tenant, subject)
    core.add(ns, core.new(ns, text), actor="test")


def test_an_admin_key_lists_people_paged_and_searched_through_the_client(app, core):
    """Three people of default (zh and en memories), none of other; q by id; limit/offset page; member key 403."""
    _remember(core, "tg:1", "我养了一只叫煤球的黑猫")
    _remember(core, "tg:2", "I love hiking in the Alps")
    _remember(core, "qq:3", "我住在杭州")
    _remember(core, "tg:9", "another tenant's person", tenant="other")
    store = core.store
    key = store.create_api_key("default", "admin")[1]
    with Huiyi(api_key=key, http=TestClient(app, client=REMOTE)) as hy:
        page = hy.people()
        assert page.total == 3 and {p.subject for p in page.items} == {"tg:1", "tg:2", "qq:3"}
        assert all(p.memories == 1 for p in page.items)
        assert [p.subject for p in hy.people("QQ:").items] == ["qq:3"]
        first, second = hy.people(limit=2), hy.people(limit=2, offset=2)
        assert len(first.items) == 2 and len(second.items) == 1
        assert {p.subject for p in first.items + second.items} == {"tg:1", "tg:2", "qq:3"}
    member = store.create_api_key("default", "member", "tg:1")[1]
    with Huiyi(api_key=member, http=TestClient(app, client=REMOTE)) as hy, pytest.raises(ForbiddenError):
        hy.people()
    r = TestClient(app, client=REMOTE, headers={"X-API-Key": key}).get("/v1/people", params={"limit": 0})
    assert r.status_code == 400
