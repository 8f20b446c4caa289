"""The console's login session, CSRF tokens and login rate limit.

A session is a cookie (``COOKIE``) holding ``{"t": tenant, "k": key_id, "c":
csrf}``, signed and timestamped with itsdangerous (``URLSafeTimedSerializer``,
HMAC-SHA1 over the secret of ``ConsoleSettings.secret`` or of
``<data_dir>/console/secret``), ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``
and ``Secure`` as ``ConsoleSettings.secure_cookie`` says. It is refused after
``session_hours`` and, on every request, unless its API key is still an
active admin key of that tenant (``Store.list_api_keys``): revoking the key
ends the session at once, in every replica.

CSRF: a session's every POST carries its token (form field ``csrf``),
compared in constant time. The login form, before any session, carries the
value of a short-lived cookie of its own (``LOGIN_COOKIE``, double submit).

Login attempts are limited per client address (``limits``: a moving window in
process memory, ``ConsoleSettings.login_rate``); a replica counts its own.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from limits import parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from memory.store import ApiKey, KeyScope

__all__ = ["COOKIE", "LOGIN_COOKIE", "Session", "Sessions", "LoginLimiter", "secret_of", "same_token"]

log = logging.getLogger(__name__)

COOKIE = "huiyi_console"
LOGIN_COOKIE = "huiyi_console_login"
_SALT = "huiyi-console-session"


def secret_of(configured: str | None, data_dir: Path) -> str:
    """The signing secret: ``configured`` when set, else the one kept in
    ``<data_dir>/console/secret`` (created with 256 random bits, mode 0600, on
    first use). Raises OSError when the data root is not writable."""
    if configured:
        return configured
    path = Path(data_dir) / "console" / "secret"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(value)
    return value


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two tokens; False when either is missing or empty."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in console user: the ``tenant``, the admin ``key`` it logged in
    with (``memory.store.ApiKey``, no secret) and the session's ``csrf`` token."""

    tenant: str
    key: ApiKey
    csrf: str

    @property
    def actor(self) -> str:
        """The audit actor of everything this session changes: ``console:<key_id>``
        and the key's label, ``console:<key_id>(<label>)`` (the label cut to 60
        characters), as the chat commands record ``admin:tg:1``."""
        label = " ".join(self.key.label.split())[:60]
        return f"console:{self.key.key_id}" + (f"({label})" if label else "")


class Sessions:
    """Issues and reads session cookies. ``secret`` signs them; ``max_age_s`` in seconds."""

    def __init__(self, secret: str, max_age_s: float) -> None:
        self._signer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.max_age_s = max_age_s

    def issue(self, tenant: str, key: ApiKey) -> tuple[str, str]:
        """(cookie value, csrf token) of a new session for ``key`` of ``tenant``."""
        csrf = secrets.token_urlsafe(24)
        return self._signer.dumps({"t": tenant, "k": key.key_id, "c": csrf}), csrf

    def read(self, value: str | None, store, tenants) -> Session | None:
        """The session of cookie ``value``, or None when it is missing, forged,
        expired, of a tenant not in ``tenants`` or of a key that is no longer an
        active admin key of its tenant (blocking: reads the store)."""
        if not value:
            return None
        try:
            data = self._signer.loads(value, max_age=self.max_age_s)
        except SignatureExpired:
            return None
        except BadSignature:
            log.info("console: a forged or damaged session cookie was refused")
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(f), str) for f in ("t", "k", "c")):
            return None
        tenant = data["t"]
        if tenant not in tenants:
            return None
        key = next((k for k in store.list_api_keys(tenant) if k.key_id == data["k"]), None)
        if key is None or not key.active or key.scope is not KeyScope.ADMIN:
            return None
        return Session(tenant, key, data["c"])


class LoginLimiter:
    """Login attempts per client address: ``rate`` a ``limits`` string
    (``10/minute``), counted in a moving window in this process's memory."""

    def __init__(self, rate: str) -> None:
        self._item = parse(rate)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def attempt(self, address: str) -> bool:
        """Count one attempt from ``address``; False when it is over the rate (refuse it)."""
        return self._limiter.hit(self._item, "console-login", address or "-")
