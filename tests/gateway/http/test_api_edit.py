"""PATCH /v1/subjects/{subject}/memories/{id} re-reads the edited text's category and
key (``memory.capture.edit``), and answers 409 when another memory holds what the
new text says, changing nothing (issue 26 item 18), zh and en."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app

LOOPBACK = ("127.0.0.1", 50000)


@pytest.fixture
def client():
    """The real app (SQLite + LanceDB in tmp) from loopback (no API key yet: loopback only)."""
    application = create_app(load_settings(tenants={"default": TenantSettings(language="en")}))
    with TestClient(application, client=LOOPBACK) as c:
        yield c


def _stored(c, text: str) -> dict:
    r = c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": text}]})
    assert r.status_code == 200, r.text
    return next(x["memory"] for x in r.json()["results"] if x["action"] == "stored")


@pytest.mark.parametrize("home,tea,moved", [("I live in Porto.", "I love green tea.", "I live in Lisbon."),
                                            ("我住在北京", "我喜欢绿茶", "我住在杭州")])
def test_an_edit_takes_its_new_texts_category_or_is_refused_with_409(client, home, tea, moved):
    """An edit of the tea into a cat's name is a relationship memory now; one into where the person lives,
    which another memory holds, is 409 KeyTakenError and leaves the tea at version 1."""
    holder, mine = _stored(client, home), _stored(client, tea)
    r = client.patch(f"/v1/subjects/tg:42/memories/{mine['id']}", json={"text": moved})
    assert r.status_code == 409 and r.json()["error"] == "KeyTakenError", r.text
    kept = client.get(f"/v1/subjects/tg:42/memories/{mine['id']}").json()
    assert (kept["text"], kept["version"], kept["category"]) == (tea, 1, "preference")
    cat = "My cat is called Mochi." if tea.startswith("I") else "我家猫叫煤球"
    edited = client.patch(f"/v1/subjects/tg:42/memories/{mine['id']}", json={"text": cat}).json()
    assert (edited["version"], edited["category"]) == (2, "relationship")
    assert client.get(f"/v1/subjects/tg:42/memories/{holder['id']}").json()["text"] == home
