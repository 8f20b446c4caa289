"""The console's security (issue 28): no page or action without a session; a
session of tenant A neither reads nor changes tenant B (B's ids answer 404);
a CSRF token on every POST; HttpOnly + SameSite=Strict cookies (+ Secure when
asked or over HTTPS); memory and name text escaped everywhere; login attempts
rate-limited; member, revoked and wrong keys refused; a revoked key ends its
session; every change audited with the key's id and label; the console off
when disabled. SQLite and PostgreSQL, the real app and store."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_routes import flat_routes  # noqa: E402
from console_helpers import REMOTE, console_app, csrf_of, login, session_csrf  # noqa: E402

from gateway.observability import write_turn  # noqa: E402
from memory.store import ChatLine  # noqa: E402
from memory.types import ChatKind, ChatRef, Namespace  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


def _remember(core, tenant: str, subject: str, text: str) -> str:
    ns = Namespace(tenant, subject)
    return core.add(ns, core.new(ns, text), actor="test").memory.id


def _key(core, tenant="default", scope="admin", subject=None, label="ops") -> str:
    return core.store.create_api_key(tenant, scope, subject, label)[1]


def _console_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every route under /console but the static files."""
    out = []
    for r in flat_routes(app.routes):
        path = getattr(r, "path", "")
        if path.startswith("/console") and not path.startswith("/console/static") and hasattr(r, "methods"):
            out += [(m, path) for m in sorted(r.methods) if m != "HEAD"]
    return out


def _fill(path: str) -> str:
    return (path.replace("{subject}", "tg:42").replace("{memory_id}", "abc123def456").replace("{key_id}", "0123456789ab")
            .replace("{day}", "2026-01-01").replace("{index}", "0"))


def test_no_console_page_or_action_answers_without_a_session(app, core):
    """Every console route but the login form: a GET goes to the login form, a POST is 401; a forged cookie
    is no session; nothing is shown or changed. The only routes without a session are login and static files."""
    mid = _remember(core, "default", "tg:42", "I love hiking in the Alps")
    routes = _console_routes(app)
    assert len(routes) >= 20
    public = [(m, p) for m, p in routes if p == "/console/login"]
    assert public == [("GET", "/console/login"), ("POST", "/console/login")]
    for cookie in (None, "eyJ0IjoiZGVmYXVsdCJ9.forged.sig"):
        c = TestClient(app, client=REMOTE, cookies={"huiyi_console": cookie} if cookie else None)
        for method, path in routes:
            if path == "/console/login":
                continue
            url = _fill(path).replace("abc123def456", mid)
            r = c.request(method, url, data={"id": mid, "confirm": "1", "text": "changed", "csrf": "x"},
                          follow_redirects=False)
            if method == "GET":
                assert r.status_code == 303 and r.headers["location"] == "/console/login", (method, path)
            else:
                assert r.status_code == 401, (method, path, r.status_code)
            assert "hiking" not in r.text
    assert core.get(Namespace("default", "tg:42"), mid).text == "I love hiking in the Alps"
    assert TestClient(app, client=REMOTE).get("/console/static/console.css").status_code == 200


def test_member_revoked_and_wrong_keys_are_refused_with_the_form_and_an_admin_key_logs_in(app, core):
    """Member key 403, revoked key and made-up key 401, each with the form and a message; an admin key's
    cookie is HttpOnly, SameSite=Strict, Path=/console and not Secure over plain HTTP."""
    c = TestClient(app, client=REMOTE)
    revoked = _key(core)
    core.store.revoke_api_key("default", revoked.split("_")[1])
    for key, status in ((_key(core, scope="member", subject="tg:42"), 403), (revoked, 401),
                        ("hy_0123456789ab_" + "A" * 43, 401), ("", 401)):
        r = c.post("/console/login", data={"key": key, "csrf": csrf_of(c.get("/console/login").text)},
                   follow_redirects=False)
        assert r.status_code == status and 'name="key"' in r.text and 'id="login-message"' in r.text
        assert "huiyi_console=" not in r.headers.get("set-cookie", "").replace("huiyi_console_login=", "")
    r = c.post("/console/login", data={"key": _key(core), "csrf": csrf_of(c.get("/console/login").text)},
               follow_redirects=False)
    cookies = [h for k, h in r.headers.multi_items() if k == "set-cookie"]
    session = next(h for h in cookies if h.startswith("huiyi_console="))
    flags = {f.strip().lower() for f in session.split(";")}
    assert {"httponly", "samesite=strict", "path=/console"} <= flags and "secure" not in flags
    assert all("samesite=strict" in h.lower() and "httponly" in h.lower() for h in cookies)
    assert c.get("/console/people").status_code == 200


def test_cookies_are_secure_when_configured_or_over_https(core):
    """secure_cookie=True marks the cookies Secure even over plain HTTP; unset, an HTTPS request's session
    cookie is Secure."""
    application = console_app(core, console={"secure_cookie": True})
    with TestClient(application, client=REMOTE) as c:
        login_cookie = c.get("/console/login").headers["set-cookie"]
        assert "secure" in {f.strip().lower() for f in login_cookie.split(";")}
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        c = TestClient(application, client=REMOTE, base_url="https://testserver")
        r = c.post("/console/login", data={"key": _key(core), "csrf": csrf_of(c.get("/console/login").text)},
                   follow_redirects=False)
        session = next(h for k, h in r.headers.multi_items() if k == "set-cookie" and h.startswith("huiyi_console="))
        assert "secure" in {f.strip().lower() for f in session.split(";")}


def test_login_csrf_is_required(app, core):
    """A login without the form's token (a cross-site form) is refused even with a good key."""
    c = TestClient(app, client=REMOTE)
    r = c.post("/console/login", data={"key": _key(core)}, follow_redirects=False)
    assert r.status_code == 403 and "huiyi_console=" not in r.headers.get("set-cookie", "").replace(
        "huiyi_console_login=", "")


def test_a_session_of_tenant_a_cannot_read_or_change_tenant_b(app, core):
    """B's person, memory, turn and key ids in A's URLs answer 404 and nothing of B changes."""
    b_mid = _remember(core, "other", "tg:7", "我住在杭州")
    b_key = core.store.create_api_key("other", "admin")[0]
    _remember(core, "default", "tg:42", "I love hiking in the Alps")
    write_turn(core_data(app), {"at": datetime.now(timezone.utc).isoformat(), "tenant": "other",
                                "namespace": "other/tg:7", "chat": "tg:private:7", "message_id": "m1",
                                "recalled": [{"id": b_mid, "score": 0.5}], "latency_ms": {"total": 3.0}})
    c = login(app, _key(core))
    csrf = session_csrf(c)
    day = datetime.now(timezone.utc).date().isoformat()
    for url in ("/console/people/tg:7", f"/console/people/tg:7/memories/{b_mid}",
                f"/console/people/tg:42/memories/{b_mid}", "/console/people/tg:7/export", f"/console/turns/{day}/0"):
        r = c.get(url)
        assert r.status_code == 404, url
        assert "杭州" not in r.text
    for url, data in ((f"/console/people/tg:7/forget", {"id": b_mid, "confirm": "1"}),
                      (f"/console/people/tg:42/forget", {"id": b_mid, "confirm": "1"}),
                      (f"/console/people/tg:7/memories/{b_mid}/edit", {"text": "changed"}),
                      (f"/console/people/tg:42/memories/{b_mid}/edit", {"text": "changed"}),
                      (f"/console/keys/{b_key.key_id}/revoke", {})):
        assert c.post(url, data={**data, "csrf": csrf}).status_code == 404, url
    assert core.get(Namespace("other", "tg:7"), b_mid).text == "我住在杭州"
    assert all(k.active for k in core.store.list_api_keys("other"))
    assert "tg:7" not in c.get("/console/people").text and "杭州" not in c.get("/console/turns").text


def core_data(app) -> Path:
    return app.state.pipeline.settings.data_dir


def test_every_post_needs_the_sessions_csrf_token(app, core):
    """Each POST route of the console, logged in: without the token or with another session's, 403, nothing done."""
    mid = _remember(core, "default", "tg:42", "我养了一只叫煤球的黑猫")
    c = login(app, _key(core))
    other = session_csrf(login(app, _key(core)))
    posts = [p for m, p in _console_routes(app) if m == "POST" and p != "/console/login"]
    assert len(posts) >= 9
    for path in posts:
        url = _fill(path).replace("abc123def456", mid)
        for data in ({}, {"csrf": other}, {"csrf": ""}):
            r = c.post(url, data={**data, "id": mid, "confirm": "1", "text": "changed", "a": "tg:1", "b": "qq:1",
                                  "scope": "admin"}, follow_redirects=False)
            assert r.status_code == 403, (path, data, r.status_code)
    assert core.get(Namespace("default", "tg:42"), mid).text == "我养了一只叫煤球的黑猫"
    assert len(core.store.list_api_keys("default")) == 2
    assert c.get("/console/people").status_code == 200  # still logged in: logout needs the token too


def test_text_from_memories_and_names_is_escaped_everywhere(app, core):
    """A memory and a display name `<img src=x onerror=alert(1)>` show as text on every page that shows them."""
    mid = _remember(core, "default", "tg:42", f"{XSS} 我养了一只猫")
    core.store.append_chat("default", ChatRef("tg", ChatKind.PRIVATE, "42"),
                           ChatLine("user", "42", "hi", datetime.now(timezone.utc), "m9", XSS))
    c = login(app, _key(core))
    csrf = session_csrf(c)
    pages = [c.get("/console/people"), c.get("/console/people?q=img"), c.get("/console/people/tg:42"),
             c.get("/console/people/tg:42?q=猫"), c.get(f"/console/people/tg:42/memories/{mid}"),
             c.get("/console/people/tg:42/recall?query=猫"),
             c.post("/console/people/tg:42/forget", data={"id": mid, "csrf": csrf})]
    for r in pages:
        assert r.status_code == 200
        assert "<img" not in r.text and "&lt;img src=x onerror=alert(1)&gt;" in r.text, r.url
    r = c.get("/console/people/tg:42", params={"q": "<script>alert(1)</script>"})
    assert "<script>alert" not in r.text and "&lt;script&gt;" in r.text


def test_login_attempts_are_rate_limited_per_address(core):
    """With login_rate 3/minute the fourth attempt from one address is refused (429), even with a good key;
    another address still logs in."""
    application = console_app(core, console={"login_rate": "3/minute"})
    with TestClient(application, client=REMOTE):
        c = TestClient(application, client=REMOTE)
        token = csrf_of(c.get("/console/login").text)
        for _ in range(3):
            r = c.post("/console/login", data={"key": "wrong", "csrf": token})
            assert r.status_code == 401
            token = csrf_of(r.text)  # each answer is a fresh form
        r = c.post("/console/login", data={"key": _key(core), "csrf": token}, follow_redirects=False)
        assert r.status_code == 429 and 'name="key"' in r.text
        login(application, _key(core), host=("198.51.100.9", 1234))


def test_a_revoked_key_ends_its_session_and_changes_are_audited_with_key_id_and_label(app, core):
    """Edit and forget through the console are audited as console:<key_id>(<label>); revoking the key from
    the keys page ends the session at the next request."""
    ns = Namespace("default", "tg:42")
    a = _remember(core, "default", "tg:42", "I love hiking in the Alps")
    b = _remember(core, "default", "tg:42", "我住在杭州")
    key = _key(core, label="night shift")
    key_id = key.split("_")[1]
    c = login(app, key)
    csrf = session_csrf(c)
    assert c.post(f"/console/people/tg:42/memories/{a}/edit", data={"text": "I love hiking in the Dolomites",
                                                                    "csrf": csrf}).status_code == 200
    assert c.post("/console/people/tg:42/forget", data={"id": b, "confirm": "1", "csrf": csrf}).status_code == 200
    actor = f"console:{key_id}(night shift)"
    actions = {(r["action"], r["actor"]) for r in core.store.audit_records(ns)}
    assert ("edit", actor) in actions and ("forget", actor) in actions
    r = c.post(f"/console/keys/{key_id}/revoke", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert c.get("/console/people", follow_redirects=False).status_code == 303


def test_the_console_is_off_when_disabled(core):
    """console.enabled false: no /console route at all."""
    application = console_app(core, console={"enabled": False})
    with TestClient(application, client=REMOTE) as c:
        assert c.get("/console/login").status_code == 404
        assert not [r for r in flat_routes(application.routes) if getattr(r, "path", "").startswith("/console")]


def test_bad_input_is_a_clear_4xx_and_loses_nothing(app, core):
    """An unknown filter, an empty or too long edit, no ticked memory, a bad subject: 400 pages; the memory stays."""
    mid = _remember(core, "default", "tg:42", "I love hiking in the Alps")
    c = login(app, _key(core))
    csrf = session_csrf(c)
    assert c.get("/console/people/tg:42?category=nonsense").status_code == 400
    assert c.get("/console/people/tg:None").status_code == 400
    for text in ("", " ", "x" * 501):
        r = c.post(f"/console/people/tg:42/memories/{mid}/edit", data={"text": text, "csrf": csrf})
        assert r.status_code == 400 and 'id="error"' in r.text
    assert c.post("/console/people/tg:42/forget", data={"csrf": csrf}).status_code == 400
    assert c.post("/console/keys", data={"scope": "member", "subject": "tg:None", "csrf": csrf}).status_code == 400
    assert core.get(Namespace("default", "tg:42"), mid).text == "I love hiking in the Alps"
    assert re.search(r"huiyi", c.get("/console/people").text)


def _secret_in_a_process(data_dir: str, start: float) -> str:
    from gateway.console.session import secret_of

    while time.time() < start:  # every process reaches the empty data root at once
        pass
    return secret_of(None, Path(data_dir))


def test_processes_starting_together_on_one_data_root_share_one_whole_secret(tmp_path):
    """Eight processes create the console secret at the same moment (test workers collecting, replicas on a
    shared volume): none fails with FileExistsError or reads a half-written file; all get one 0600 secret
    and no draft is left beside it. A fresh clone's CI once failed collecting on this race."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(8) as pool:
        start = time.time() + 1.0
        got = list(pool.map(_secret_in_a_process, [str(tmp_path)] * 8, [start] * 8))
    kept = tmp_path / "console" / "secret"
    assert len(set(got)) == 1 and got[0] == kept.read_text() and len(got[0]) >= 43
    assert kept.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in kept.parent.iterdir()] == ["secret"]
