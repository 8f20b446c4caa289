"""Ending a console session on the server: a copy of the session cookie taken before a
logout opens nothing after it, on this replica or another one over the same database;
"log out everywhere" ends every session of one admin key and is audited; the login
form's token is one the server signed over its cookie, and a login posted from another
site is refused; every answer of the app says ``nosniff``. SQLite and PostgreSQL, the
real app and store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_helpers import REMOTE, console_app, csrf_of, login, session_csrf  # noqa: E402

from gateway.console.session import COOKIE, LOGIN_COOKIE  # noqa: E402
from memory.types import Namespace  # noqa: E402

SECRET = "a console secret shared by both replicas"


@pytest.fixture
def app(core):
    application = console_app(core, console={"secret": SECRET})
    with TestClient(application, client=REMOTE):
        yield application


def _key(core, label="ops") -> str:
    return core.store.create_api_key("default", "admin", None, label)[1]


def _copy(c: TestClient) -> TestClient:
    """Another client holding a copy of ``c``'s session cookie (what a thief or a shared computer keeps)."""
    return TestClient(c.app, client=REMOTE, cookies={COOKIE: c.cookies[COOKIE]})


def _opens_nothing(c: TestClient, csrf: str, core) -> None:
    """``c``'s cookie opens no page and creates no key, even with the session's CSRF token."""
    before = len(core.store.list_api_keys("default"))
    for page in ("/console/people", "/console/keys", "/console/stats", "/console/turns"):
        r = c.get(page, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login", page
    r = c.post("/console/keys", data={"scope": "admin", "label": "stolen", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 401 and "hy_" not in r.text
    assert len(core.store.list_api_keys("default")) == before


def test_a_session_cookie_copied_before_logout_opens_nothing_after_it(app, core):
    """The fault: logout only dropped the browser's cookie, so a copy kept opening every page and making
    admin keys for 12 h. Now the copy is refused at once; the key still logs in afresh."""
    key = _key(core)
    c = login(app, key)
    csrf = session_csrf(c)
    thief = _copy(c)
    assert thief.get("/console/people").status_code == 200  # the copy works while the session is open
    r = c.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"
    _opens_nothing(thief, csrf, core)
    assert c.get("/console/people", follow_redirects=False).status_code == 303
    actions = [(r["action"], r["actor"]) for r in core.store.audit_records(Namespace("default", f"apikey:{key.split('_')[1]}"))]
    assert ("console_logout", f"console:{key.split('_')[1]}(ops)") in actions
    assert login(app, key).get("/console/people").status_code == 200


def test_a_logout_on_one_replica_ends_the_session_on_another(app, core):
    """Two apps (replicas) over one database with one console secret: a session opened on A and
    ended on B is refused by A — the ending lives in SQL, not in a process."""
    other = console_app(core, console={"secret": SECRET})
    with TestClient(other, client=REMOTE):
        c = login(app, _key(core))
        csrf = session_csrf(c)
        on_b = TestClient(other, client=REMOTE, cookies={COOKIE: c.cookies[COOKIE]})
        assert on_b.get("/console/people").status_code == 200
        assert on_b.post("/console/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
        _opens_nothing(_copy(c), csrf, core)


def test_log_out_everywhere_ends_every_session_of_the_key_and_is_audited(app, core):
    """Two browsers on key A and one on key B: A's "log out everywhere" (the header's button) ends both of
    A's, leaves B's, lands on the login form, and is audited with how many it ended; from the keys page an
    admin ends another admin key's sessions."""
    a, b = _key(core, "laptop"), _key(core, "desk")
    a_id, b_id = a.split("_")[1], b.split("_")[1]
    first, second, desk = login(app, a), login(app, a), login(app, b)
    csrf = session_csrf(first)
    page = first.get("/console/people").text
    assert f'action="/console/keys/{a_id}/logout"' in page and 'id="logout-everywhere"' in page
    keys_page = desk.get("/console/keys").text
    assert f'action="/console/keys/{a_id}/logout"' in keys_page  # A has sessions: the keys page offers to end them
    r = first.post(f"/console/keys/{a_id}/logout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"
    _opens_nothing(second, session_csrf(desk), core)
    assert first.get("/console/people", follow_redirects=False).status_code == 303
    assert desk.get("/console/people").status_code == 200
    audit = core.store.audit_records(Namespace("default", f"apikey:{a_id}"))
    assert [(r["action"], r["actor"], r["detail"].get("ended")) for r in audit if r["action"] == "console_logout_all"] \
        == [("console_logout_all", f"console:{a_id}(laptop)", 2)]
    # from the keys page: desk ends laptop's new session; desk's own stays
    again = login(app, a)
    r = desk.post(f"/console/keys/{a_id}/logout", data={"csrf": session_csrf(desk)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/keys"
    assert again.get("/console/people", follow_redirects=False).status_code == 303
    assert desk.get("/console/people").status_code == 200 and b_id


def test_log_out_everywhere_reaches_only_an_admin_key_of_the_sessions_tenant(app, core):
    """Another tenant's key and a member key answer 404 and end nothing."""
    theirs = core.store.create_api_key("other", "admin")[1]
    member = core.store.create_api_key("default", "member", "tg:42")[0]
    victim = login(app, theirs)
    c = login(app, _key(core))
    csrf = session_csrf(c)
    for key_id in (theirs.split("_")[1], member.key_id, "0123456789ab"):
        assert c.post(f"/console/keys/{key_id}/logout", data={"csrf": csrf}).status_code == 404
    assert victim.get("/console/people").status_code == 200


def test_a_login_cookie_and_field_that_are_merely_equal_are_refused(app, core):
    """The fault: the login form's token was a plain double submit — any equal cookie and field passed, so
    whoever could set a cookie (a sibling subdomain) could log a browser into their own key. Now the field
    must be the server's signature over the cookie's value."""
    for value in ("x" * 32, "planted"):
        c = TestClient(app, client=REMOTE, cookies={LOGIN_COOKIE: value})
        r = c.post("/console/login", data={"key": _key(core), "csrf": value}, follow_redirects=False)
        assert r.status_code == 403 and COOKIE not in c.cookies
    c = TestClient(app, client=REMOTE)  # a signed token over another cookie value
    token = csrf_of(c.get("/console/login").text)
    c.cookies.set(LOGIN_COOKIE, "something else", path="/console")
    r = c.post("/console/login", data={"key": _key(core), "csrf": token}, follow_redirects=False)
    assert r.status_code == 403 and COOKIE not in c.cookies


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Origin": "https://evil.example"}, {"Origin": "null"},
                                     {"Origin": "http://console.testserver"}])
def test_a_login_posted_from_another_site_is_refused_even_with_a_pair_the_server_issued(app, core, headers):
    """A pair fetched from the server by an attacker and planted in a browser still needs the form to be
    sent from the console itself: Fetch Metadata (same-site is a sibling subdomain: refused) or Origin."""
    c = TestClient(app, client=REMOTE)
    token = csrf_of(c.get("/console/login").text)
    r = c.post("/console/login", data={"key": _key(core), "csrf": token}, headers=headers, follow_redirects=False)
    assert r.status_code == 403 and 'id="login-message"' in r.text and COOKIE not in c.cookies


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                                     {"Origin": "http://testserver"}, {}])
def test_a_login_from_the_console_itself_is_accepted(app, core, headers):
    """The browser's own form (same-origin, or typed: none), a matching Origin, or a client that is no browser."""
    c = TestClient(app, client=REMOTE)
    token = csrf_of(c.get("/console/login").text)
    r = c.post("/console/login", data={"key": _key(core), "csrf": token}, headers=headers, follow_redirects=False)
    assert r.status_code == 303 and COOKIE in c.cookies


def test_every_answer_says_nosniff(app, core):
    """X-Content-Type-Options: nosniff on console pages (logged in or not, errors too), the static files,
    the export, /v1 and its errors, /healthz and an unknown path."""
    c = login(app, _key(core))
    anon = TestClient(app, client=REMOTE)
    answers = [c.get("/console/people"), c.get("/console/keys"), c.get("/console/people/tg:None"),
               c.get("/console/people/tg:42/export"), anon.get("/console/login"),
               anon.get("/console/people", follow_redirects=False), anon.post("/console/logout"),
               anon.get("/console/static/console.css"), anon.get("/healthz"), anon.get("/nowhere"),
               anon.get("/v1/subjects/tg:42/memories"), anon.post("/v1/turns", content=b"{")]
    for r in answers:
        assert r.headers.get("x-content-type-options") == "nosniff", (r.request.method, r.request.url, r.status_code)
