"""Authenticating OneBot v11 HTTP POST events on the quick-operation route.

OneBot implementations sign HTTP POST bodies with ``secret``
(``X-Signature: sha1=<hex HMAC-SHA1 of the body>``) and may send the
``access_token`` as ``Authorization: Bearer <token>``. Both compared in
constant time. Pure; no nonebot import.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["onebot_request_ok"]


def onebot_request_ok(*, secret: str | None, access_token: str | None, body: bytes, signature: str | None,
                      authorization: str | None) -> bool:
    """True when the request proves it comes from the configured implementation:
    with a ``secret``, ``signature`` must be ``sha1=`` + HMAC-SHA1(secret, body);
    else with an ``access_token``, ``authorization`` must be ``Bearer <token>``
    (or ``Token <token>``). Nothing configured → False (the route refuses)."""
    if secret:
        expected = "sha1=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha1).hexdigest()
        return signature is not None and hmac.compare_digest(expected.encode("ascii"),
                                                             signature.encode("utf-8", "replace"))
    if access_token:
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() in ("bearer", "token") and hmac.compare_digest(
            access_token.encode("utf-8"), token.strip().encode("utf-8"))
    return False
