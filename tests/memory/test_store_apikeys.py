"""API keys in the SQL store (SQLite and PostgreSQL): only a digest is kept, a key verifies
while it is not revoked, scopes and subjects are checked, and a tenant that ever had a key
stays keyed."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memory.errors import NamespaceError
from memory.store import KeyScope


def test_a_key_verifies_until_revoked_and_only_its_digest_is_stored(core):
    """create → verify gives the tenant, scope and subject; the stored row holds no copy of the key; revoke ends it."""
    store = core.store
    admin, key = store.create_api_key("default", "admin", label="小桃 bot 🤖")
    member, member_key = store.create_api_key("default", KeyScope.MEMBER, "tg:42")
    assert store.verify_api_key(key) == admin and admin.scope is KeyScope.ADMIN and admin.subject is None
    assert store.verify_api_key(member_key).subject == "tg:42"
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM api_keys")).all()
    secret = key[len("hy_") + 12 + 1:]  # the 43 random characters (they may contain "_" themselves)
    assert len(secret) == 43 and len(rows) == 2 and not any(secret in str(tuple(r)) for r in rows)
    assert store.revoke_api_key("other", admin.key_id) is False  # another tenant's key id
    assert store.revoke_api_key("default", admin.key_id) is True
    assert store.verify_api_key(key) is None and store.verify_api_key(member_key) is not None
    assert [k.active for k in store.list_api_keys("default")] == [False, True]


@pytest.mark.parametrize("presented", ["", "hy_", "hy_0123456789ab_" + "a" * 43, "Bearer x", "hy_zzzzzzzzzzzz_" + "a" * 43,
                                       "密钥", "hy_0123456789ab_" + "a" * 42 + "\ud83c"])
def test_malformed_or_unknown_keys_verify_to_nothing(core, presented):
    """Anything that is not a stored, valid key — malformed, unknown, non-ASCII, a lone surrogate — is None."""
    core.store.create_api_key("default", "admin")
    assert core.store.verify_api_key(presented) is None


def test_a_key_with_one_character_changed_is_refused(core):
    """The digest comparison covers the whole key: the right id with a wrong secret is refused."""
    _, key = core.store.create_api_key("default", "admin")
    wrong = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert core.store.verify_api_key(wrong) is None


def test_scopes_and_subjects_are_checked(core):
    """A member key needs a valid subject, an admin key takes none, the tenant must match its pattern."""
    store = core.store
    with pytest.raises(ValueError):
        store.create_api_key("default", "member")
    with pytest.raises(ValueError):
        store.create_api_key("default", "admin", "tg:42")
    with pytest.raises(NamespaceError):
        store.create_api_key("default", "member", "tg:42' OR 1=1")
    with pytest.raises(NamespaceError):
        store.create_api_key("Default!", "admin")
    with pytest.raises(ValueError):
        store.create_api_key("default", "owner")


def test_a_tenant_stays_keyed_after_its_last_key_is_revoked(core):
    """keyless_tenants drops a tenant at its first key and does not take it back when the key is revoked."""
    store = core.store
    assert store.keyless_tenants(["default", "mochi"]) == ["default", "mochi"]
    k, _ = store.create_api_key("mochi", "admin")
    store.revoke_api_key("mochi", k.key_id)
    assert store.keyless_tenants(["default", "mochi"]) == ["default"]
    assert store.tenant_has_keys("mochi") and not store.tenant_has_keys("default")
