"""The console's sessions in the SQL store (SQLite and PostgreSQL): a session is open
until it is ended, expires or its key is revoked; only a digest of its id is kept;
"log out everywhere" ends one key's sessions and no other's; logins prune the expired."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from memory.store import utcnow


def _rows(store) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT * FROM console_sessions")).all()]


def test_an_ended_session_is_refused_and_only_its_digest_is_stored(core):
    """open → the key; the row holds no copy of the id; after end_console_session the same id reads None."""
    store = core.store
    key = store.create_api_key("default", "admin", label="ops")[0]
    sid = store.open_console_session("default", key.key_id, 3600)
    assert len(sid) == 43 and store.console_session("default", key.key_id, sid) == key
    assert len(_rows(store)) == 1 and not any(sid in str(r) for r in _rows(store))
    assert store.console_session("other", key.key_id, sid) is None  # another tenant
    assert store.console_session("default", "0123456789ab", sid) is None  # another key id in the cookie
    assert store.console_session("default", key.key_id, sid[:-1] + ("A" if sid[-1] != "A" else "B")) is None
    assert store.end_console_session("default", sid) is True
    assert store.console_session("default", key.key_id, sid) is None
    assert store.end_console_session("default", sid) is False and _rows(store) == []


def test_log_out_everywhere_ends_every_session_of_one_key_and_no_other(core):
    """Two sessions of key A and one of key B: end_console_sessions(A) ends both of A's, B's stays open."""
    store = core.store
    a = store.create_api_key("default", "admin")[0]
    b = store.create_api_key("default", "admin")[0]
    a1, a2 = (store.open_console_session("default", a.key_id, 3600) for _ in range(2))
    b1 = store.open_console_session("default", b.key_id, 3600)
    assert store.console_session_counts("default") == {a.key_id: 2, b.key_id: 1}
    assert store.end_console_sessions("other", a.key_id) == 0
    assert store.end_console_sessions("default", a.key_id) == 2
    assert store.console_session("default", a.key_id, a1) is None and store.console_session("default", a.key_id, a2) is None
    assert store.console_session("default", b.key_id, b1) == b
    assert store.console_session_counts("default") == {b.key_id: 1}
    # the key itself stays valid: a new login opens a new session
    a3 = store.open_console_session("default", a.key_id, 3600)
    assert store.console_session("default", a.key_id, a3) == a


def test_revoking_the_key_ends_its_sessions_in_the_same_transaction(core):
    """revoke_api_key deletes the key's session rows; a member key's id never reads as a session."""
    store = core.store
    key = store.create_api_key("default", "admin")[0]
    member = store.create_api_key("default", "member", "tg:42")[0]
    sid = store.open_console_session("default", key.key_id, 3600)
    msid = store.open_console_session("default", member.key_id, 3600)  # the store does not check: the login does
    assert store.console_session("default", member.key_id, msid) is None
    store.revoke_api_key("default", key.key_id)
    assert store.console_session("default", key.key_id, sid) is None
    assert [r for r in _rows(store) if r[2] == key.key_id] == []


def test_an_expired_session_is_refused_and_the_next_login_deletes_it(core):
    """A session read after its lifetime is None; the next open_console_session prunes every expired row."""
    store = core.store
    key = store.create_api_key("default", "admin")[0]
    then = utcnow() - timedelta(hours=13)
    old = store.open_console_session("default", key.key_id, 12 * 3600, now=then)
    live = store.open_console_session("default", key.key_id, 12 * 3600, now=then + timedelta(hours=2))
    assert store.console_session("default", key.key_id, old) is None
    assert store.console_session("default", key.key_id, live) == key
    assert store.console_session("default", key.key_id, old, now=then + timedelta(hours=1)) == key
    assert len(_rows(store)) == 2 and store.console_session_counts("default") == {key.key_id: 1}
    new = store.open_console_session("default", key.key_id, 12 * 3600)
    assert len(_rows(store)) == 2 and store.console_session("default", key.key_id, new) == key
    with pytest.raises(ValueError):
        store.open_console_session("default", key.key_id, 0)


def test_gateways_with_different_console_secrets_see_each_other_and_a_stopped_one_drops_out(core):
    """Two gateways on one database: the same fingerprint reads nothing different; a different one is
    returned to both; a gateway that stopped (drop) or went quiet past the window no longer counts."""
    store = core.store
    now = utcnow()
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    assert store.note_console_secret(a, "1" * 64, 120, now=now) == set()
    assert store.note_console_secret(b, "1" * 64, 120, now=now) == set()  # the same secret: agreed
    assert store.note_console_secret(c, "2" * 64, 120, now=now) == {"1" * 64}
    assert store.note_console_secret(a, "1" * 64, 120, now=now) == {"2" * 64}
    store.drop_console_secret(c)
    assert store.note_console_secret(a, "1" * 64, 120, now=now) == set()
    assert store.note_console_secret(c, "2" * 64, 120, now=now) == {"1" * 64}
    later = now + timedelta(seconds=121)  # a and b crashed without dropping: aged out
    assert store.note_console_secret(c, "2" * 64, 120, now=later) == set()
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM console_secrets")).scalar() == 1
    with pytest.raises(ValueError):
        store.note_console_secret(a, "1" * 64, 0)
