"""The console's login session, CSRF tokens and login rate limit.

A session is a row in SQL (``memory.store.ConsoleSessions``) and a cookie
(``COOKIE``) holding ``{"t": tenant, "k": key_id, "s": session id, "c": csrf}``,
signed and timestamped with itsdangerous (``URLSafeTimedSerializer``,
HMAC-SHA1 over the secret of ``ConsoleSettings.secret`` or of
``<data_dir>/console/secret``), ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``
and ``Secure`` as ``ConsoleSettings.secure_cookie`` says. It is refused after
``session_hours`` and, on every request, unless its row is still open and its
API key is still an active admin key of that tenant (one SELECT,
``Store.console_session``): a logout deletes the row, "log out everywhere"
deletes every row of the key, and revoking the key deletes them too — each
ends the session at once on every replica, and a copy of the cookie taken
before opens nothing after.

CSRF: a session's every POST carries its token (form field ``csrf``),
compared in constant time. The login form, before any session, carries a
token signed with the same secret (``LOGIN_SALT``, an hour at most) over the
random value of a cookie of its own (``LOGIN_COOKIE``): a cookie and a field
that are merely equal are refused, so one planted from elsewhere needs a pair
this server issued. What stops a planted pair is the browser's word on where
the form was sent from (``sent_from_here``: ``Sec-Fetch-Site``, else
``Origin``), which no page can set: a login posted from another site — a
sibling subdomain included — is refused.

Login attempts are limited per client address (``limits``: a moving window in
process memory, ``ConsoleSettings.login_rate``); a replica counts its own.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from urllib.parse import urlsplit

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from limits import parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from memory.store import ApiKey, KeyScope

__all__ = ["COOKIE", "LOGIN_COOKIE", "LOGIN_TOKEN_S", "Session", "Sessions", "LoginLimiter", "secret_of", "fingerprint_of",
           "same_token", "sent_from_here"]

log = logging.getLogger(__name__)

COOKIE = "huiyi_console"
LOGIN_COOKIE = "huiyi_console_login"
_SALT = "huiyi-console-session"
_LOGIN_SALT = "huiyi-console-login"
#: Seconds a login form's token is accepted (and its cookie kept).
LOGIN_TOKEN_S = 3600


def secret_of(configured: str | None, data_dir: Path) -> str:
    """The signing secret: ``configured`` when set, else the one kept in
    ``<data_dir>/console/secret`` (created with 256 random bits, mode 0600, on
    first use). Processes starting together on one data root (test workers,
    replicas on a shared volume) all get the one secret that was linked into
    place first: it is written whole to a file of its own, then hard-linked to
    the name, so no reader ever sees it half-written. Raises OSError when the
    data root is not writable."""
    if configured:
        return configured
    path = Path(data_dir) / "console" / "secret"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd, draft = tempfile.mkstemp(prefix=".secret-", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(value)
        os.link(draft, path)
    except FileExistsError:  # another process linked its secret first: use that one
        return path.read_text(encoding="utf-8").strip()
    finally:
        os.unlink(draft)
    return value


#: the fixed label keyed by the secret in its fingerprint (``fingerprint_of``)
_FINGERPRINT_LABEL = b"huiyi console secret fingerprint v1"


def fingerprint_of(secret: str) -> str:
    """A fingerprint of the console's signing ``secret`` that gateways sharing a
    database can compare (``Store.note_console_secret``): HMAC-SHA256 keyed by
    the secret over a fixed label, 64 hex characters. Equal secrets give equal
    fingerprints; the secret cannot be recovered from one, nor a cookie signed."""
    return hmac.new(secret.encode("utf-8", "surrogatepass"), _FINGERPRINT_LABEL, "sha256").hexdigest()


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two tokens; False when either is missing or empty."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def sent_from_here(headers) -> bool:
    """Did the browser send this request from a page of this same origin?
    ``headers``: the request's (case-insensitive mapping). By Fetch Metadata
    when present (``Sec-Fetch-Site`` ``same-origin``, or ``none``: the person
    typed or bookmarked it); else by ``Origin``, whose host and port must be the
    ``Host`` header's (``null``, what a sandboxed frame sends, is refused); True
    when neither is sent (an older browser, or a client that is no browser and
    so no cross-site form). Neither header can be set by a page, so a form
    posted from another site — a sibling subdomain too, which is "same-site" —
    is told apart from the console's own."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site.strip().lower() in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None:
        return True
    netloc = urlsplit(origin.strip()).netloc.lower()
    return bool(netloc) and netloc == (headers.get("host") or "").strip().lower()


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in console user: the ``tenant``, the admin ``key`` it logged in
    with (``memory.store.ApiKey``, no secret), the session's ``csrf`` token and
    its ``session_id`` (the secret that names its row in SQL; "" for an actor
    that is no session, e.g. the login's own audit line)."""

    tenant: str
    key: ApiKey
    csrf: str
    session_id: str = ""

    @property
    def actor(self) -> str:
        """The audit actor of everything this session changes: ``console:<key_id>``
        and the key's label, ``console:<key_id>(<label>)`` (the label cut to 60
        characters), as the chat commands record ``admin:tg:1``."""
        label = " ".join(self.key.label.split())[:60]
        return f"console:{self.key.key_id}" + (f"({label})" if label else "")


class Sessions:
    """Opens and reads sessions (``secret`` signs the cookies; ``max_age_s``, in
    seconds, is both the cookie's and the row's lifetime) and the login form's
    tokens."""

    def __init__(self, secret: str, max_age_s: float) -> None:
        self._signer = URLSafeTimedSerializer(secret, salt=_SALT)
        self._login_signer = URLSafeTimedSerializer(secret, salt=_LOGIN_SALT)
        self.max_age_s = max_age_s

    def open(self, store, tenant: str, key: ApiKey) -> tuple[str, str]:
        """(cookie value, csrf token) of a new session for admin ``key`` of
        ``tenant``, its row written to ``store`` (``Store.open_console_session``,
        which also deletes the expired ones). Blocking (SQL)."""
        session_id = store.open_console_session(tenant, key.key_id, self.max_age_s)
        csrf = secrets.token_urlsafe(24)
        return self._signer.dumps({"t": tenant, "k": key.key_id, "s": session_id, "c": csrf}), csrf

    def read(self, value: str | None, store, tenants) -> Session | None:
        """The session of cookie ``value``, or None when it is missing, forged,
        expired, of a tenant not in ``tenants``, ended (logout, log out
        everywhere, its key revoked) or of a key that is no longer an active
        admin key of its tenant. Blocking: one read of the store."""
        if not value:
            return None
        try:
            data = self._signer.loads(value, max_age=self.max_age_s)
        except SignatureExpired:
            return None
        except BadSignature:
            log.info("console: a forged or damaged session cookie was refused")
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(f), str) for f in ("t", "k", "s", "c")):
            return None  # a cookie of a release before sessions had rows names none: log in again
        tenant = data["t"]
        if tenant not in tenants:
            return None
        key = store.console_session(tenant, data["k"], data["s"])
        if key is None:
            return None
        return Session(tenant, key, data["c"], data["s"])

    def login_token(self) -> tuple[str, str]:
        """(cookie value, form field value) of a login form: a random value, and
        that value signed and timestamped (``LOGIN_TOKEN_S``)."""
        value = secrets.token_urlsafe(24)
        return value, self._login_signer.dumps(value)

    def login_token_ok(self, cookie: str | None, field: str | None) -> bool:
        """Is ``field`` a login token this server signed, under ``LOGIN_TOKEN_S``
        old, over the value ``cookie`` holds? (constant-time comparison)"""
        if not cookie or not field:
            return False
        try:
            signed = self._login_signer.loads(field, max_age=LOGIN_TOKEN_S)
        except BadSignature:  # SignatureExpired included
            return False
        return isinstance(signed, str) and same_token(cookie, signed)


class LoginLimiter:
    """Login attempts per client address: ``rate`` a ``limits`` string
    (``10/minute``), counted in a moving window in this process's memory."""

    def __init__(self, rate: str) -> None:
        self._item = parse(rate)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def attempt(self, address: str) -> bool:
        """Count one attempt from ``address``; False when it is over the rate (refuse it)."""
        return self._limiter.hit(self._item, "console-login", address or "-")
