"""The admin console: a tenant's people, memories, turns, stats and keys in the
browser, under ``/console`` of the gateway's own app (``ConsoleSettings``;
off with ``HUIYI_CONSOLE__ENABLED=false``).

Pages (``gateway.console.views``; Jinja2 templates in ``templates/``, autoescape
on; one stylesheet and a few lines of script in ``static/``, nothing fetched
from elsewhere)::

    GET  /console/login                      the login form (an admin API key)       no session
    POST /console/login                      log in (rate-limited per address)      no session
    POST /console/logout                     end this session (its row in SQL)
    GET  /console/people                     the tenant's people (memory.admin.people), ?q= &page=
    POST /console/people/link                two identities as one person (memory.admin.link)
    GET  /console/people/{subject}           their memories: filters, search with ranks, bulk actions
    GET  /console/people/{subject}/export    the huiyi.memories.v1 document
    GET  /console/people/{subject}/recall    "try recall": a recall now, with ranks and score parts
    POST /console/people/{subject}/forget    forget the ticked memories (a confirmation page first)
    POST /console/people/{subject}/forget_all   forget everything of the person (confirmed)
    POST /console/people/{subject}/unlink    one identity is its own subject again
    POST /console/people/{subject}/consolidate  one consolidation now
    GET  /console/people/{subject}/memories/{id}   the full record, versions, links, why
    POST /console/people/{subject}/memories/{id}/edit   a new version
    GET  /console/keys · POST /console/keys · POST /console/keys/{key_id}/revoke
    POST /console/keys/{key_id}/logout       "log out everywhere": end every session of an admin key
    GET  /console/turns · GET /console/turns/{day}/{index}   the turn inspector (<data_dir>/audit)
    GET  /console/stats                      per-day charts (server-rendered SVG)
    GET  /console/events · POST /console/events/replay   change events: waiting, dead letters, replay
                                             (gateway.console.events)
    GET  /console/static/…                   the stylesheet and script              no session

Security (``gateway.console.session``): a signed, HttpOnly, SameSite=Strict
session cookie per tenant naming a session row in SQL, checked on every
request against the store (a logout, "log out everywhere" or a revoked key
ends it on every replica); a CSRF token in every form, the login form's
signed by the server and refused when the browser says it came from another
site; login attempts limited per address; every person and memory is resolved inside the
session's tenant through the same functions as ``/v1``, so another tenant's ids
answer 404; every change is audited with the actor ``console:<key_id>(<label>)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.config import Settings
from gateway.console.session import LoginLimiter, Sessions, fingerprint_of, secret_of

__all__ = ["mount", "ConsoleState", "STATIC"]

STATIC = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True, slots=True)
class ConsoleState:
    """What the console's routes share (``app.state.console``); ``fingerprint``:
    of the signing secret (``fingerprint_of``), compared with the other gateways'
    on the same database by ``/readyz``."""

    sessions: Sessions
    limiter: LoginLimiter
    fingerprint: str


def mount(app, settings: Settings) -> None:
    """Add the console's routes and static files to ``app`` (a FastAPI app whose
    ``state.pipeline`` is set by its lifespan). Creates the signing secret under
    the data root when none is configured (OSError when it cannot)."""
    from fastapi.staticfiles import StaticFiles

    from gateway.console import events  # noqa: F401 - the Events page's routes join the router
    from gateway.console.views import router

    cfg = settings.console
    secret = secret_of(cfg.secret, settings.data_dir)
    app.state.console = ConsoleState(Sessions(secret, cfg.session_hours * 3600), LoginLimiter(cfg.login_rate),
                                     fingerprint_of(secret))
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
