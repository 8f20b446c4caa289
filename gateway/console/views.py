"""The console's pages (``gateway.console``): FastAPI routes rendering Jinja2
templates (autoescape on), every one behind ``_ConsoleRoute``'s session and
CSRF checks except the login form.

Each page does its job through the functions ``/v1`` and the ``/memory``
commands use — ``Caller.namespace`` (``gateway.http.auth``) to resolve a person,
``MemoryCore`` (get, list, recall, update, forget, history), ``memory.admin``
(people, link, unlink, forget_subject, stats), ``gateway.commands.export_document``,
the store's API keys, ``gateway.observability`` (the per-turn audit) — with
the session's tenant only and its actor (``Session.actor``) on every change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from gateway.commands import MAX_EDIT_CHARS, PAGE_SIZE, export_document, receipt_text
from gateway.console.charts import TimelinePoint, bar_chart, line_chart, timeline_chart
from gateway.console.session import COOKIE, LOGIN_COOKIE, LOGIN_TOKEN_S, Session, same_token, sent_from_here
from gateway.errors import GatewayError
from gateway.http.auth import Caller, is_loopback
from gateway.http.errors import status_of
from locales import LANGUAGES, resolve_language, translate, translate_plural
from memory import admin
from memory.admin import pause_learning, resume_learning
from memory.errors import CoreError, NotFoundError
from memory.dates import zone
from memory.explain import explain
from memory.store import KeyScope, utcnow
from memory.types import (FORGET_RECEIPT_FIELDS, Category, ChatRef, ForgetReceipt, Memory, Namespace, Visibility,
                          clean_controls)

__all__ = ["router", "TEMPLATES", "LANG_COOKIE"]

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).resolve().parent / "templates"
LANG_COOKIE = "huiyi_console_lang"
#: Rows per page of the people and memory tables.
ROWS = 25
_env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _public(fn):
    """Mark a route that answers without a session (the login form only)."""
    fn._console_public = True
    return fn


class _ConsoleRoute(APIRoute):
    """A console route: without a valid session a GET is sent to the login form
    (303) and anything else refused (401); a POST without the session's CSRF
    token is refused (403); errors become an HTML page with the status
    ``gateway.http.errors.status_of`` gives them (PermissionError 403,
    ValueError 400)."""

    def get_route_handler(self):
        inner = super().get_route_handler()
        public = getattr(self.endpoint, "_console_public", False)

        async def handler(request: Request) -> Response:
            if not public:
                state = request.app.state
                session = await asyncio.to_thread(state.console.sessions.read, request.cookies.get(COOKIE),
                                                  state.pipeline.core.store, state.pipeline.settings.tenants)
                if session is None:
                    if request.method in ("GET", "HEAD"):
                        return RedirectResponse("/console/login", status_code=303)
                    return _error(request, None, 401, "Please log in again.")
                request.state.session = session
                if request.method == "POST":
                    form = await request.form()
                    if not same_token(_field(form, "csrf"), session.csrf):
                        log.info("console: POST %s refused, wrong or missing CSRF token", request.url.path)
                        return _error(request, session, 403, "This form has expired. Reload the page and try again.")
            try:
                return await inner(request)
            except (GatewayError, CoreError, PermissionError, ValueError) as exc:
                session = getattr(request.state, "session", None)
                if isinstance(exc, PermissionError):
                    status = 403
                elif isinstance(exc, (GatewayError, CoreError)):
                    status = status_of(exc)
                else:  # a ValueError of the core's functions: what the form asked cannot be done
                    status = 400
                if status >= 500:
                    log.warning("console: %s %s failed: %s", request.method, request.url.path, exc)
                    return _error(request, session, status, "Memory is not available right now. Please try again later.")
                return _error(request, session, status, "That did not work: {reason}", reason=str(exc)[:300])

        return handler


router = APIRouter(prefix="/console", route_class=_ConsoleRoute, include_in_schema=False)


# -- helpers ------------------------------------------------------------------------


def _field(form, name: str) -> str:
    value = form.get(name)
    return clean_controls(value).strip() if isinstance(value, str) else ""


def _lang(request: Request, tenant_language: str | None = None) -> str:
    """The page's language: ``?lang=``, then the language cookie, then the
    browser's Accept-Language (its first tag that names zh or en), then the
    tenant's language."""
    asked = request.query_params.get("lang")
    if asked in LANGUAGES:
        return asked
    kept = request.cookies.get(LANG_COOKIE)
    if kept in LANGUAGES:
        return kept
    for tag, _q in sorted(_accept(request.headers.get("accept-language", "")), key=lambda t: -t[1]):
        if tag.lower().startswith(("zh", "en")):
            return resolve_language(tag)
    return resolve_language(tenant_language)


def _accept(header: str) -> list[tuple[str, float]]:
    """Accept-Language's tags with their q (RFC 9110 §12.5.4); malformed q reads 0."""
    out = []
    for part in header.split(",")[:20]:
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        if tag:
            out.append((tag.strip(), q))
    return out


def _secure(request: Request) -> bool:
    configured = request.app.state.pipeline.settings.console.secure_cookie
    return request.url.scheme == "https" if configured is None else configured


def _render(request: Request, session: Session | None, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    tenant_language = None
    if session is not None:
        tenant_language = request.app.state.pipeline.settings.tenants[session.tenant].language
    lang = _lang(request, tenant_language)
    other = "en" if lang == "zh_CN" else "zh_CN"
    query = dict(request.query_params)
    query["lang"] = other
    html = _env.get_template(name).render(
        _=partial(translate, lang), _n=partial(translate_plural, lang), lang=lang, html_lang="zh-CN" if lang == "zh_CN" else "en", session=session,
        csrf=session.csrf if session else "", path=request.url.path, switch_lang=f"{request.url.path}?{urlencode(query)}",
        other_lang=other, fmt_time=_fmt_time, qs=_qs, words=_coder(lang), **ctx)
    response = HTMLResponse(html, status_code=status, headers={
        "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                   "frame-ancestors 'none'; form-action 'self'"})
    if request.query_params.get("lang") in LANGUAGES:
        response.set_cookie(LANG_COOKIE, lang, max_age=365 * 86400, path="/console", httponly=True, samesite="strict",
                            secure=_secure(request))
    return response


#: Where the codes the pages show come from: fallback reasons (``memory.reconstruct.REASONS``),
#: recall channels (``memory.recall``; ``vector~1``: the vector list of the line before the
#: question), association reasons (``memory.links.REASONS``), recollection modes, retelling
#: sentence statuses and key scopes. Each is shown as the catalogue's words for
#: ``"<kind>: <code>"``, the code itself kept in the element's title.
CODE_KINDS = ("fallback", "channel", "link", "mode", "sentence", "scope", "purpose")


def _coder(lang: str):
    """``code(kind, value)``: the words for a code of ``CODE_KINDS`` in ``lang``
    (the code itself when the catalogue has none, as for a future reason). A
    ``channel~n`` is its channel's words with "line −n"; ``link`` values may join
    several reasons with commas; a fallback ``recall failed: X`` keeps ``X``."""
    def one(kind: str, value: str) -> str:
        msgid = f"{kind}: {value}"
        text = translate(lang, msgid)
        return value if text == msgid else text

    def code(kind: str, value: Any) -> str:
        value = "" if value is None else str(value)
        if kind == "channel" and "~" in value:
            base, _, step = value.partition("~")
            return translate(lang, "{channel} of the line −{n}", channel=one(kind, base), n=step)
        if kind == "link":
            return translate(lang, ", ").join(one(kind, r.strip()) for r in value.split(",") if r.strip())
        if kind == "fallback" and value.startswith("recall failed: "):
            return translate(lang, "recall failed ({error})", error=value[len("recall failed: "):])
        return one(kind, value)

    return code


def _error(request: Request, session: Session | None, status: int, msgid: str, **params: Any) -> HTMLResponse:
    return _render(request, session, "error.html", status, code=status, msgid=msgid, params=params)


def _qs(query: dict, **changes: Any) -> str:
    """``query`` with ``changes`` as a URL query string (empty values dropped)."""
    merged = {**query, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


def _fmt_time(dt: datetime | str | None) -> str:
    if dt is None or dt == "":
        return "-"
    if isinstance(dt, str):
        try:
            dt = datetime.fromisoformat(dt)
        except ValueError:
            return "-"
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _session(request: Request) -> Session:
    return request.state.session


def _core(request: Request):
    return request.app.state.pipeline.core


def _authority(s: Session) -> admin.Authority:
    return admin.Authority(actor=s.actor, tenant=s.tenant)


async def _ns(request: Request, subject: str) -> Namespace:
    """The namespace ``subject`` resolves to in the session's tenant, through the
    same check as ``/v1`` (``Caller.namespace``, an admin caller)."""
    s = _session(request)
    caller = Caller(s.tenant, KeyScope.ADMIN, None, s.key.key_id)
    return await asyncio.to_thread(caller.namespace, _core(request).store, s.tenant, subject)


def _known(core, s: Session, ns: Namespace) -> bool:
    """Does the session's tenant know this person (``memory.admin.people``)?"""
    if core.store.count(ns) or core.store.identities(ns):
        return True
    page = admin.people(core, _authority(s), s.tenant, query=ns.subject, limit=admin.PEOPLE_PAGE_MAX)
    return any(p.subject == ns.subject for p in page.items)


def _count_param(request: Request) -> int:
    """``?n=`` of a page that reports a count (0 when absent or not a number)."""
    try:
        return max(0, min(int(request.query_params.get("n", "0")), 1_000_000))
    except ValueError:
        return 0


def _page_no(request: Request) -> int:
    try:
        return max(1, min(int(request.query_params.get("page", "1")), 100_000))
    except ValueError:
        return 1


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _receipt_param(receipt: ForgetReceipt) -> str:
    """A forget's receipt as the ``?receipt=`` of the page it redirects to: its
    counts joined by dots, in ``FORGET_RECEIPT_FIELDS`` order."""
    return ".".join(str(getattr(receipt, f)) for f in FORGET_RECEIPT_FIELDS)


def _receipt_of(request: Request, lang: str) -> str:
    """The receipt text of ``?receipt=`` (``_receipt_param``) in ``lang``; "" when
    absent or malformed. It only repeats to the admin what the redirect said."""
    parts = request.query_params.get("receipt", "").split(".")
    if len(parts) != len(FORGET_RECEIPT_FIELDS) or not all(p.isdigit() and len(p) <= 9 for p in parts):
        return ""
    return receipt_text(lang, ForgetReceipt(**dict(zip(FORGET_RECEIPT_FIELDS, map(int, parts)))))


def _person_url(subject: str, **query: Any) -> str:
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return f"/console/people/{subject}" + (f"?{urlencode(q)}" if q else "")


# -- login ----------------------------------------------------------------------------


@router.get("/login")
@_public
async def login_form(request: Request) -> HTMLResponse:
    """The login form; sets the form's own CSRF cookie."""
    return _login_page(request, None, 200)


def _login_page(request: Request, msgid: str | None, status: int) -> HTMLResponse:
    cookie, token = request.app.state.console.sessions.login_token()
    response = _render(request, None, "login.html", status, login_csrf=token, message=msgid)
    response.set_cookie(LOGIN_COOKIE, cookie, max_age=LOGIN_TOKEN_S, path="/console", httponly=True,
                        samesite="strict", secure=_secure(request))
    return response


@router.post("/login")
@_public
async def login(request: Request) -> Response:
    """Form field ``key``: an active admin API key of a configured tenant. Refused
    with the form and a message otherwise; attempts are rate-limited per address;
    the form's token must be one this server signed over the login cookie's value,
    and the browser must say it sent the form from the console itself
    (``gateway.console.session.sent_from_here``). Opens the session's row in SQL."""
    state = request.app.state
    host = request.client.host if request.client else ""
    if not state.console.limiter.attempt(host):
        log.info("console: login attempts from %s over the rate", host)
        return _login_page(request, "Too many login attempts. Wait a minute and try again.", 429)
    if not sent_from_here(request.headers):
        log.info("console: a login posted from another site was refused (from %s)", host)
        return _login_page(request, "This form has expired. Reload the page and try again.", 403)
    form = await request.form()
    if not state.console.sessions.login_token_ok(request.cookies.get(LOGIN_COOKIE), _field(form, "csrf")):
        return _login_page(request, "This form has expired. Reload the page and try again.", 403)
    store = state.pipeline.core.store
    key = await asyncio.to_thread(store.verify_api_key, _field(form, "key"))
    if key is None or key.tenant not in state.pipeline.settings.tenants:
        log.info("console: login refused from %s (invalid or revoked key)", host)
        return _login_page(request, "That key is not valid, or it was revoked.", 401)
    if key.scope is not KeyScope.ADMIN:
        log.info("console: login with member key %s refused", key.key_id)
        return _login_page(request, "Only an admin key of a tenant opens the console.", 403)
    value, _csrf = await asyncio.to_thread(state.console.sessions.open, store, key.tenant, key)
    response = _see_other("/console/people")
    response.set_cookie(COOKIE, value, max_age=int(state.console.sessions.max_age_s), path="/console",
                        httponly=True, samesite="strict", secure=_secure(request))
    response.delete_cookie(LOGIN_COOKIE, path="/console", httponly=True, samesite="strict", secure=_secure(request))
    await asyncio.to_thread(store.audit, Namespace(key.tenant, f"apikey:{key.key_id}"), "console_login",
                            Session(key.tenant, key, "").actor, local=is_loopback(host))
    return response


def _logged_out(request: Request) -> RedirectResponse:
    """To the login form, the session cookie dropped."""
    response = _see_other("/console/login")
    response.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict", secure=_secure(request))
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Ends this session on the server (its row is deleted: a copy of the cookie
    opens nothing after, on any replica) and drops the cookie; audited."""
    s = _session(request)
    store = _core(request).store

    def run() -> None:
        store.end_console_session(s.tenant, s.session_id)
        store.audit(Namespace(s.tenant, f"apikey:{s.key.key_id}"), "console_logout", s.actor)

    await asyncio.to_thread(run)
    return _logged_out(request)


@router.get("")
async def home(request: Request) -> Response:
    return _see_other("/console/people")


@router.get("/")
async def home_slash(request: Request) -> Response:
    return _see_other("/console/people")


# -- people -----------------------------------------------------------------------------


@router.get("/people")
async def people(request: Request) -> HTMLResponse:
    """Every person of the tenant (``memory.admin.people``), searched and paged."""
    s = _session(request)
    q = clean_controls(request.query_params.get("q", ""))[:200]
    page = _page_no(request)
    result = await asyncio.to_thread(admin.people, _core(request), _authority(s), s.tenant, query=q, limit=ROWS,
                                     offset=(page - 1) * ROWS)
    pages = max(1, math.ceil(result.total / ROWS))
    return _render(request, s, "people.html", result=result, q=q, page=page, pages=pages,
                   done=request.query_params.get("done", ""))


@router.post("/people/link")
async def link(request: Request) -> Response:
    """Two platform identities as one person (``memory.admin.link``, as ``/memory link``)."""
    s = _session(request)
    form = await request.form()
    subjects = [_field(form, "a"), _field(form, "b")]
    result = await asyncio.to_thread(admin.link, _core(request), _authority(s), s.tenant, subjects)
    return _see_other(_person_url(result.person.subject, done="linked"))


@dataclass
class _Filters:
    category: str = ""
    origin: str = ""
    visibility: str = ""
    kind: str = ""
    conflicts: bool = False
    q: str = ""

    @classmethod
    def of(cls, request: Request) -> _Filters:
        p = request.query_params
        f = cls(category=p.get("category", ""), origin=p.get("origin", "")[:300], visibility=p.get("visibility", ""),
                kind=p.get("kind", ""), conflicts=p.get("conflicts") == "1",
                q=clean_controls(p.get("q", "")).strip()[:2000])
        if f.category and f.category not in {c.value for c in Category}:
            raise ValueError(f"unknown category {f.category!r}")
        if f.visibility and f.visibility not in {v.value for v in Visibility}:
            raise ValueError(f"unknown visibility {f.visibility!r}")
        if f.kind not in ("", "consolidated", "fragment", "dormant"):
            raise ValueError(f"unknown kind {f.kind!r}")
        return f

    def query(self) -> dict[str, str]:
        return {k: v for k, v in (("category", self.category), ("origin", self.origin),
                                  ("visibility", self.visibility), ("kind", self.kind),
                                  ("conflicts", "1" if self.conflicts else ""), ("q", self.q)) if v}


@dataclass
class _Row:
    memory: Memory
    consolidated: Any = None
    conflicts: list[str] = field(default_factory=list)
    score: float | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    via_context: bool = False
    #: the live text of each of ``conflicts`` (a forgotten one's id)
    conflict_texts: list[str] = field(default_factory=list)


#: How many hits a text search of the person page lists.
SEARCH_HITS = 50


def _search(core, ns: Namespace, q: str) -> list:
    """The person page's text search, as ``/memory search`` runs it: ``q``'s words,
    or nearly its meaning (the embedder's strict floor), no memory only linked to
    a match; at most SEARCH_HITS ``Hit``s, best first, each with ``via_context``."""
    from memory.recall import RecallParams

    return core.recall(ns, [q], chat=None,
                       params=RecallParams(k=SEARCH_HITS, matched_vector_floor=1.0, assoc_weight=0.0))


def _all_memories(core, ns: Namespace) -> list[Memory]:
    out: list[Memory] = []
    while batch := core.store.list(ns, limit=500, offset=len(out)):
        out += batch
    return out


def _person_rows(core, s: Session, ns: Namespace, f: _Filters) -> tuple[list[_Row], list[str]]:
    """The person's live memories as the filters ask (a text query: the same
    search as ``/memory search``, with each hit's channel ranks and whether it was
    found only through the line it answered), and every origin chat among them
    (for the filter's choices). Audited as ``admin_view``."""
    everything = _all_memories(core, ns)
    origins = sorted({m.origin.key for m in everything if m.origin is not None})
    if f.q:
        rows = [_Row(h.memory, score=h.score, ranks=dict(h.ranks), via_context=h.via_context)
                for h in _search(core, ns, f.q)]
    else:
        rows = [_Row(m) for m in everything]
    ids = [r.memory.id for r in rows]
    consolidated = core.store.consolidated(ns, ids) if ids else {}
    partners: dict[str, list[str]] = {}
    for c in core.store.conflicts(ns, ids) if ids else []:
        for side in (c.older_id, c.newer_id):
            partners.setdefault(side, []).append(c.other(side))
    live = core.store.get_many(ns, sorted({p for ps in partners.values() for p in ps})) if partners else {}
    out = []
    for r in rows:
        m = r.memory
        r.consolidated, r.conflicts = consolidated.get(m.id), sorted(set(partners.get(m.id, [])))
        r.conflict_texts = [live[p].text if p in live else p for p in r.conflicts]
        if f.category and m.category.value != f.category:
            continue
        if f.visibility and m.visibility.value != f.visibility:
            continue
        if f.origin and (m.origin is None or m.origin.key != f.origin):
            continue
        if f.kind == "consolidated" and r.consolidated is None:
            continue
        if f.kind == "fragment" and r.consolidated is not None:
            continue
        if f.kind == "dormant" and (r.consolidated is None or not r.consolidated.dormant):
            continue
        if f.conflicts and not r.conflicts:
            continue
        out.append(r)
    core.store.audit(ns, "admin_view", s.actor, command="search" if f.q else "list", chat="console")
    return out, origins


def _name_of(core, s: Session, ns: Namespace) -> str:
    """The display name ``ns``'s person last sent (``memory.admin.people``), "" when none."""
    found = admin.people(core, _authority(s), s.tenant, query=ns.subject, limit=admin.PEOPLE_PAGE_MAX)
    return next((p.name for p in found.items if p.subject == ns.subject), "")


#: Days the person page's mood timeline spans; the arousal from which a memory is a point on
#: it, and how many points at most (the strongest, by |valence| · arousal)
MOOD_DAYS = 56
MOOD_POINT_AROUSAL = 0.5
MOOD_POINTS = 40


def _mood(core, ns: Namespace, now: datetime, tz, lang: str) -> dict:
    """The person page's mood section: valence and arousal per day of the last
    MOOD_DAYS days in the tenant's zone ``tz`` (``memory.mood.daily`` over the
    person's fragments, ``gateway.commands.mood_fragments``), the memories told with
    at least MOOD_POINT_AROUSAL as points, and what was told on this day in earlier
    years (the words ``/memory mood`` uses)."""
    from gateway.commands import anniversary_line, mood_fragments
    from memory.mood import anniversaries, daily

    memories = mood_fragments(core, ns, None)
    today = now.astimezone(tz).date()
    days = daily(memories, today - timedelta(days=MOOD_DAYS - 1), today, tz)
    index = {d.day: i for i, d in enumerate(days)}
    strong = sorted((m for m in memories if m.created_at is not None and m.arousal >= MOOD_POINT_AROUSAL
                     and m.created_at.astimezone(tz).date() in index),
                    key=lambda m: (-abs(m.valence) * m.arousal, m.id))[:MOOD_POINTS]
    points = []
    for m in strong:
        day = m.created_at.astimezone(tz).date()
        points.append(TimelinePoint(index[day], m.valence, m.arousal, f"{day.isoformat()} · {m.text[:160]}"))
    chart = timeline_chart([d.day.isoformat()[5:] for d in days], [d.valence for d in days],
                           [d.arousal for d in days], points,
                           names=(translate(lang, "valence"), translate(lang, "arousal"),
                                  translate(lang, "strong moments")))
    return dict(mood_chart=chart, mood_felt=sum(d.n for d in days), mood_days=MOOD_DAYS,
                anniversaries=[{"id": a.memory.id, "text": anniversary_line(lang, a.years, a.memory.text)}
                               for a in anniversaries(memories, today, tz)])


@router.get("/people/{subject}")
async def person(request: Request, subject: str) -> HTMLResponse:
    """A person's live memories, filtered and paged, with the actions on them."""
    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    f = _Filters.of(request)

    tenant = request.app.state.pipeline.settings.tenants[s.tenant]
    lang = _lang(request, tenant.language)

    def load():
        if not _known(core, s, ns):
            raise NotFoundError(f"no person {subject} in this tenant")
        rows, origins = _person_rows(core, s, ns, f)
        return (rows, origins, core.store.identities(ns), _name_of(core, s, ns), core.store.pauses(ns, utcnow()),
                _mood(core, ns, utcnow(), zone(tenant.tz), lang))

    rows, origins, identities, name, pauses, mood = await asyncio.to_thread(load)
    page = _page_no(request)
    pages = max(1, math.ceil(len(rows) / ROWS))
    shown = rows[(page - 1) * ROWS: page * ROWS]
    return _render(request, s, "person.html", subject=ns.subject, person_name=name, asked=subject, rows=shown, total=len(rows),
                   page=page, pages=pages, f=f, filter_query=f.query(), origins=origins, identities=identities,
                   categories=[c.value for c in Category], visibilities=[v.value for v in Visibility],
                   done=request.query_params.get("done", ""), n=_count_param(request),
                   pauses=[{"chat": p.chat, "until": _fmt_time(p.until) if p.until else None} for p in pauses],
                   receipt=_receipt_of(request, lang), **mood)


@router.post("/people/{subject}/pause")
async def pause(request: Request, subject: str) -> Response:
    """Off the record in one chat (form fields ``chat``, a chat key, and ``duration``,
    e.g. ``2h`` or ``30分钟``; empty: until resumed), as the person's own
    ``/memory pause`` there; audited with the session's actor. A chat key or a
    duration that is none: 400, nothing changed."""
    from gateway.commands import pause_key
    from gateway.durations import DurationTooLong, parse_duration

    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    form = await request.form()
    chat = pause_key(ChatRef.parse(_field(form, "chat").strip()))
    text = _field(form, "duration").strip()
    try:
        span = parse_duration(text) if text else None
    except DurationTooLong:
        raise ValueError(f"{text[:40]!r} is too long: a pause lasts at most 30 days") from None
    if text and span is None:
        raise ValueError(f"{text[:40]!r} names no length of time up to 30 days (e.g. 2h, 30m, 30分钟)")

    def run() -> None:
        if not _known(core, s, ns):
            raise NotFoundError(f"no person {subject} in this tenant")
        now = utcnow()
        pause_learning(core, ns, chat, now, now + span if span is not None else None, s.actor)

    await asyncio.to_thread(run)
    return _see_other(_person_url(ns.subject, done="paused"))


@router.post("/people/{subject}/resume")
async def resume(request: Request, subject: str) -> Response:
    """Learning from the person in chat ``chat`` goes on (``/memory resume``); audited."""
    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    chat = _field(await request.form(), "chat").strip()
    ChatRef.parse(chat)  # a chat key, or 400

    await asyncio.to_thread(resume_learning, core, ns, chat, utcnow(), s.actor)
    return _see_other(_person_url(ns.subject, done="resumed"))


@router.get("/people/{subject}/export")
async def export(request: Request, subject: str) -> Response:
    """The person's ``huiyi.memories.v1`` document (``/memory export``'s), as a download; audited."""
    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)

    def run() -> dict:
        if not _known(core, s, ns):
            raise NotFoundError(f"no person {subject} in this tenant")
        now = utcnow()
        doc = export_document(core, ns, None, now)
        core.store.audit(ns, "export", s.actor, count=len(doc["memories"]), chat="console")
        return doc

    doc = await asyncio.to_thread(run)
    name = f"huiyi-memories-{ns.subject.replace(':', '-')}-{utcnow():%Y%m%d}.json"
    return Response(json.dumps(doc, ensure_ascii=False, indent=2), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"})


@router.post("/people/{subject}/unlink")
async def unlink(request: Request, subject: str) -> Response:
    """One identity of the person is its own subject again (``memory.admin.unlink``)."""
    s = _session(request)
    ns = await _ns(request, subject)
    identity = _field(await request.form(), "identity")
    if identity not in await asyncio.to_thread(_core(request).store.identities, ns):
        raise NotFoundError(f"{identity} is not linked to {ns.subject}")
    await asyncio.to_thread(admin.unlink, _core(request), _authority(s), s.tenant, identity)
    return _see_other(_person_url(ns.subject, done="unlinked"))


@router.post("/people/{subject}/forget")
async def forget(request: Request, subject: str) -> Response:
    """Forget the memories ticked (form fields ``id``): without ``confirm`` the
    confirmation page listing what goes — with the search ``q`` they were ticked
    from, those it found only through the line they answered (``Hit.via_context``)
    listed apart, as the person page marks them; with it each is forgotten as
    ``/memory forget`` does (tombstoned, purged, audited with the session's actor)."""
    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    form = await request.form()
    ids = list(dict.fromkeys(v for v in form.getlist("id") if isinstance(v, str)))[:500]
    if not ids:
        raise ValueError("tick at least one memory")
    memories = await asyncio.to_thread(core.store.get_many, ns, ids)
    missing = [i for i in ids if i not in memories]
    if missing:
        raise NotFoundError(f"no memory {missing[0]} of {ns.subject}")
    if _field(form, "confirm") != "1":
        q = _field(form, "q")[:2000]
        via = set()
        if q:  # the same search as the page they were ticked on, so the same marks
            via = {h.memory.id for h in await asyncio.to_thread(_search, core, ns, q) if h.via_context}
        return _render(request, s, "confirm_forget.html", subject=ns.subject, q=q,
                       memories=[memories[i] for i in ids if i not in via],
                       via_context=[memories[i] for i in ids if i in via])

    def run() -> ForgetReceipt:
        receipt = ForgetReceipt()
        for mid in ids:
            try:
                receipt += core.forget(ns, mid, actor=s.actor)
            except NotFoundError:
                continue  # forgotten meanwhile
        return receipt

    receipt = await asyncio.to_thread(run)
    return _see_other(_person_url(ns.subject, done="forgotten", n=receipt.memories, receipt=_receipt_param(receipt)))


@router.post("/people/{subject}/forget_all")
async def forget_all(request: Request, subject: str) -> Response:
    """Everything of the person (``memory.admin.forget_subject``, as ``/memory forget all``),
    after a confirmation page."""
    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    form = await request.form()
    if _field(form, "confirm") != "1":
        total = await asyncio.to_thread(core.store.count, ns)
        return _render(request, s, "confirm_forget_all.html", subject=ns.subject, total=total)
    receipt = await asyncio.to_thread(admin.forget_subject, core, ns, _authority(s))
    return _see_other(_person_url(ns.subject, done="forgotten", n=receipt.memories, receipt=_receipt_param(receipt)))


@router.post("/people/{subject}/consolidate")
async def consolidate(request: Request, subject: str) -> Response:
    """One consolidation of the person now (``/memory consolidate``)."""
    s = _session(request)
    ns = await _ns(request, subject)
    pipeline = request.app.state.pipeline
    report = await pipeline.consolidation.consolidate(s.tenant, ns)
    await asyncio.to_thread(pipeline.core.store.audit, ns, "consolidate", s.actor, chat="console")
    n = len(report.abstractions) if report.skipped is None else 0
    return _see_other(_person_url(ns.subject, done="consolidated", n=n))


@router.get("/people/{subject}/recall")
async def try_recall(request: Request, subject: str) -> HTMLResponse:
    """"Try recall": the recall a turn would run now for this person and chat, with
    each hit's channel ranks and score parts (``MemoryCore.recall``, as a turn asks it)."""
    from memory.emotion import analyse
    from memory.recall import RecallParams

    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)
    query = clean_controls(request.query_params.get("query", "")).strip()[:2000]
    chat_key = request.query_params.get("chat", "").strip()[:300]
    chat = ChatRef.parse(chat_key) if chat_key else None
    t = request.app.state.pipeline.tenant(s.tenant)
    hits = []
    if query:
        hits = await asyncio.to_thread(core.recall, ns, [query], chat=chat, params=RecallParams(k=t.recall_k),
                                       query_valence=analyse(query).valence)
        await asyncio.to_thread(core.store.audit, ns, "admin_view", s.actor, command="recall", chat="console")
    return _render(request, s, "recall.html", subject=ns.subject, query=query, chat=chat_key,
                   hit_rows=[_hit_row(ns, h.memory.id, h.memory, h.score, h.ranks, h.parts) for h in hits])


_PARTS = ("rrf", "retention", "activation", "emotion", "importance")


def _hit_row(ns: Namespace, memory_id: str, m: Memory | None, score: float, ranks, parts) -> dict:
    """One row of the recalled-memories table: id, text (None once forgotten),
    score, channel ranks and score parts (a ``ScoreParts`` or the audit's dict)."""
    if parts is not None and not isinstance(parts, dict):
        parts = {name: float(getattr(parts, name)) for name in _PARTS}
    if isinstance(parts, dict) and not all(isinstance(parts.get(n), (int, float)) for n in _PARTS):
        parts = None
    ranks = {str(k): v for k, v in (ranks or {}).items()} if isinstance(ranks, dict) else {}
    return {"id": memory_id, "text": m.text if m is not None else None, "subject": ns.subject,
            "score": float(score or 0.0), "ranks": ranks, "parts": parts}


# -- one memory ---------------------------------------------------------------------------


@router.get("/people/{subject}/memories/{memory_id}")
async def memory(request: Request, subject: str, memory_id: str) -> HTMLResponse:
    """A memory's full record: text, context, emotion, importance, retention now,
    origin, visibility, versions, conflict partners, association links,
    consolidation sources and what cites it, and why it was (not) recalled last."""
    from memory.scoring import score

    s = _session(request)
    ns = await _ns(request, subject)
    core = _core(request)

    def load() -> dict:
        m = core.get(ns, memory_id)  # NotFoundError: 404
        now = utcnow()
        store = core.store
        row = store.consolidated(ns, [m.id]).get(m.id)
        store.audit(ns, "admin_view", s.actor, m.id, command="show", chat="console")
        why = explain(store.last_recall(ns), m, dormant=row is not None and row.dormant)
        conflicts = sorted({c.other(m.id) for c in store.conflicts(ns, [m.id])})
        links = store.links_of(ns, [m.id]).get(m.id, [])
        citing = store.citing(ns, m.id)
        related = [*conflicts, *(other for other, _w, _r in links), *(row.sources if row else ()), *citing]
        texts = {i: other.text for i, other in store.get_many(ns, related).items()}
        return dict(m=m, versions=core.history(ns, m.id), now_parts=score(0.0, m, now, 0.0), conflicts=conflicts,
                    links=links, consolidated=row, citing=citing, texts=texts, why=why,
                    why_msgid=f"why: {why.verdict}")

    data = await asyncio.to_thread(load)
    return _render(request, s, "memory.html", subject=ns.subject, max_edit=MAX_EDIT_CHARS,
                   done=request.query_params.get("done", ""), **data)


@router.post("/people/{subject}/memories/{memory_id}/edit")
async def edit(request: Request, subject: str, memory_id: str) -> Response:
    """A new version with the form's ``text`` through ``memory.capture.edit``, the
    path ``/memory edit`` and ``PATCH /v1/…/memories/{id}`` take: its category and
    key are read from the new text in the tenant's zone (KeyTakenError, 409, when
    another memory already holds what it says; nothing written)."""
    from memory.capture import edit as edit_memory

    s = _session(request)
    ns = await _ns(request, subject)
    text = " ".join(_field(await request.form(), "text").split())
    if not text:
        raise ValueError("the new text is empty")
    if len(text) > MAX_EDIT_CHARS:
        raise ValueError(f"the new text is longer than {MAX_EDIT_CHARS} characters")
    tz = request.app.state.pipeline.tenant(s.tenant).tz
    live = await asyncio.to_thread(edit_memory, _core(request), ns, memory_id, text, actor=s.actor, tz=tz)
    return _see_other(f"/console/people/{ns.subject}/memories/{live.id}?done=edited")


# -- keys -------------------------------------------------------------------------------------


def _key_ns(tenant: str, key) -> Namespace:
    return Namespace(tenant, key.subject) if key.subject else Namespace(tenant, f"apikey:{key.key_id}")


@router.get("/keys")
async def keys(request: Request) -> HTMLResponse:
    """The tenant's API keys (revoked ones too)."""
    s = _session(request)
    store = _core(request).store
    listed, sessions = await asyncio.to_thread(lambda: (store.list_api_keys(s.tenant),
                                                        store.console_session_counts(s.tenant)))
    return _render(request, s, "keys.html", keys=list(reversed(listed)), sessions=sessions, created=None, secret=None)


@router.post("/keys")
async def create_key(request: Request) -> HTMLResponse:
    """A new key: ``scope`` admin, or member with ``subject``; ``label``. The key is shown once."""
    s = _session(request)
    form = await request.form()
    scope = _field(form, "scope")
    if scope not in ("admin", "member"):
        raise ValueError("scope is admin or member")
    subject = _field(form, "subject") if scope == "member" else None
    store = _core(request).store

    def run():
        key, secret = store.create_api_key(s.tenant, scope, subject or None, _field(form, "label")[:200])
        store.audit(_key_ns(s.tenant, key), "key_create", s.actor, key=key.key_id, scope=scope)
        return key, secret, store.list_api_keys(s.tenant), store.console_session_counts(s.tenant)

    key, secret, listed, sessions = await asyncio.to_thread(run)
    return _render(request, s, "keys.html", keys=list(reversed(listed)), sessions=sessions, created=key, secret=secret)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str) -> Response:
    """Revoke a key of the tenant from now on (the sessions opened with it end)."""
    s = _session(request)
    store = _core(request).store

    def run() -> None:
        key = next((k for k in store.list_api_keys(s.tenant) if k.key_id == key_id), None)
        if key is None:
            raise NotFoundError(f"no key {key_id} in this tenant")
        store.revoke_api_key(s.tenant, key_id)
        store.audit(_key_ns(s.tenant, key), "key_revoke", s.actor, key=key_id)

    await asyncio.to_thread(run)
    if key_id == s.key.key_id:
        return _logged_out(request)
    return _see_other("/console/keys")


@router.post("/keys/{key_id}/logout")
async def logout_everywhere(request: Request, key_id: str) -> Response:
    """"Log out everywhere": end every session admin key ``key_id`` of the tenant
    opened, in every browser and on every replica (``Store.end_console_sessions``);
    the key stays valid. Audited as ``console_logout_all`` with how many ended.
    This session's own key: this session ends too (to the login form)."""
    s = _session(request)
    store = _core(request).store

    def run() -> None:
        key = next((k for k in store.list_api_keys(s.tenant) if k.key_id == key_id), None)
        if key is None or key.scope is not KeyScope.ADMIN:
            raise NotFoundError(f"no admin key {key_id} in this tenant")
        ended = store.end_console_sessions(s.tenant, key_id)
        store.audit(_key_ns(s.tenant, key), "console_logout_all", s.actor, key=key_id, ended=ended)

    await asyncio.to_thread(run)
    if key_id == s.key.key_id:
        return _logged_out(request)
    return _see_other("/console/keys")


# -- the turn inspector ------------------------------------------------------------------------


def _days(n: int, today: date | None = None) -> list[date]:
    today = today or utcnow().date()
    return [today - timedelta(days=i) for i in range(n)]


def _tenant_turns(data_dir: Path, tenant: str, days: list[date]) -> list[tuple[str, int, dict]]:
    """(day, index in that day's file, record) of the tenant's audited turns, newest first."""
    from gateway.observability import read_turns

    out = []
    for d in days:
        for i, r in enumerate(read_turns(data_dir, d)):
            if r.get("tenant") == tenant:
                out.append((d.isoformat(), i, r))
    out.sort(key=lambda t: str(t[2].get("at", "")), reverse=True)
    return out


@router.get("/turns")
async def turns(request: Request) -> HTMLResponse:
    """The tenant's recent turns from ``<data_dir>/audit``, filtered by person, chat and fallback reason."""
    s = _session(request)
    settings = request.app.state.pipeline.settings
    p = request.query_params
    person_q, chat_q, reason_q = (p.get("person", "")[:200], p.get("chat", "")[:300], p.get("reason", "")[:64])
    found = await asyncio.to_thread(_tenant_turns, settings.data_dir, s.tenant, _days(settings.console.turn_days))
    reasons = sorted({str(r.get("fallback_reason")) for _, _, r in found if r.get("fallback_reason")})
    rows = [(d, i, r) for d, i, r in found
            if (not person_q or person_q in str(r.get("namespace", "")))
            and (not chat_q or chat_q in str(r.get("chat", "")))
            and (not reason_q or (reason_q == "none" and not r.get("fallback_reason"))
                 or str(r.get("fallback_reason")) == reason_q)]
    page = _page_no(request)
    pages = max(1, math.ceil(len(rows) / ROWS))
    return _render(request, s, "turns.html", rows=rows[(page - 1) * ROWS: page * ROWS], total=len(rows), page=page,
                   pages=pages, person=person_q, chat=chat_q, reason=reason_q, reasons=reasons,
                   query={k: v for k, v in (("person", person_q), ("chat", chat_q), ("reason", reason_q)) if v})


@router.get("/turns/{day}/{index}")
async def turn(request: Request, day: str, index: int) -> HTMLResponse:
    """One audited turn: the message (from the chat log while it is kept), every
    recalled memory with its channel ranks and score parts, the recollection and
    its sentences' grounding, the prompt and the reply (kept with
    ``audit_fragments``), the latency of each stage."""
    from gateway.observability import read_turns

    s = _session(request)
    pipeline = request.app.state.pipeline
    core = pipeline.core
    try:
        d = date.fromisoformat(day)
    except ValueError:
        raise NotFoundError(f"no turn {day}/{index}") from None

    def load() -> dict:
        records = read_turns(pipeline.settings.data_dir, d)
        if not 0 <= index < len(records) or records[index].get("tenant") != s.tenant:
            raise NotFoundError(f"no turn {day}/{index} in this tenant")
        r = records[index]
        ns = Namespace.parse(str(r.get("namespace")))
        if ns.tenant != s.tenant:
            raise NotFoundError(f"no turn {day}/{index} in this tenant")
        ids = [str(x.get("id")) for x in r.get("recalled") or [] if isinstance(x, dict)]
        live = core.store.get_many(ns, ids) if ids else {}
        trace = core.store.last_recall(ns)
        message, logged = None, {}
        try:
            chat = ChatRef.parse(str(r.get("chat")))
            logged = {line.message_id: line for line in core.store.chat_tail(s.tenant, chat, 200)
                      if line.role == "user" and line.message_id}
            message = logged.get(r.get("message_id"))
        except ValueError:
            chat = None
        core.store.audit(ns, "admin_view", s.actor, command="turn", chat="console")
        # a record written before the audit kept ranks: the namespace's last trace, when it is this very recall
        same = trace is not None and trace.chat == r.get("chat") and [e.memory_id for e in trace.entries] == ids
        rows = []
        for x in r.get("recalled") or []:
            if not isinstance(x, dict):
                continue
            mid = str(x.get("id"))
            entry = trace.entry(mid) if same and not x.get("ranks") else None
            rows.append(_hit_row(ns, mid, live.get(mid), x.get("score") or 0.0,
                                 x.get("ranks") or (entry.ranks if entry else {}),
                                 x.get("parts") or (entry.parts if entry else None)))
        retry = _qs({"query": message.text if message else "",
                     "chat": chat.key if chat is not None and chat.is_group else ""})
        return dict(r=r, ns=ns, message=message, day=day, index=index, hit_rows=rows, retry=retry,
                    query=_query_rows(r, logged),
                    sentences=r.get("sentences") or [], latency=r.get("latency_ms") or {})

    data = await asyncio.to_thread(load)
    return _render(request, s, "turn.html", **data)


def _query_rows(record: dict, logged: dict) -> list[dict]:
    """The lines an audited turn's recall searched with, oldest first: ``{"message_id",
    "at", "text"}``, the text from the record (kept with ``audit_fragments``), else
    from the chat log while it holds the line (``logged``: message id → ChatLine),
    else None. Empty for a record written before the audit kept its query."""
    lines = [q for q in record.get("query") or [] if isinstance(q, dict)]
    texts = record.get("query_text") if isinstance(record.get("query_text"), list) else []
    out = []
    for i, q in enumerate(lines):
        mid = str(q.get("message_id") or "")
        text = texts[i] if i < len(texts) and isinstance(texts[i], str) else None
        if text is None and mid in logged:
            text = logged[mid].text
        out.append({"message_id": mid, "at": q.get("at"), "text": text})
    return out


# -- stats ---------------------------------------------------------------------------------------


def _fell_back(record: dict) -> bool:
    """Whether an audited turn's recollection fell back: a reason other than there
    being nothing (or too little) to retell yet (``NOTHING_TO_RECALL``)."""
    from memory.reconstruct import NOTHING_TO_RECALL

    reason = record.get("fallback_reason")
    return bool(reason) and reason not in NOTHING_TO_RECALL


@router.get("/stats")
async def stats(request: Request) -> HTMLResponse:
    """Turns, replies, fallbacks by reason, recall and turn latency percentiles per
    day (from the audit), the capture queue and index outbox now, consolidation
    output per day and the tenant's counts (``memory.admin.stats``), as SVG charts;
    the tokens its chat model spent per day, purpose and person, with their
    estimated cost and the daily cap (``gateway.ledger``)."""
    from gateway.ledger import summarise_usage
    from gateway.observability import percentile

    s = _session(request)
    pipeline = request.app.state.pipeline
    core = pipeline.core
    n_days = pipeline.settings.console.turn_days
    lang = _lang(request, pipeline.settings.tenants[s.tenant].language)

    def load() -> dict:
        days = list(reversed(_days(n_days)))
        found = _tenant_turns(pipeline.settings.data_dir, s.tenant, days)
        by_day: dict[str, list[dict]] = {d.isoformat(): [] for d in days}
        for d, _, r in found:
            by_day.setdefault(d, []).append(r)
        labels = [d[5:] for d in by_day]
        turns_n = [float(len(rs)) for rs in by_day.values()]
        replies = [float(sum(1 for r in rs if r.get("replied"))) for rs in by_day.values()]
        fallbacks = [float(sum(1 for r in rs if _fell_back(r))) for rs in by_day.values()]

        def lat(stage: str, q: float) -> list[float | None]:
            return [percentile([float(r["latency_ms"][stage]) for r in rs
                                if isinstance((r.get("latency_ms") or {}).get(stage), (int, float))], q)
                    for rs in by_day.values()]

        reasons = Counter(str(r.get("fallback_reason")) for _, _, r in found if r.get("fallback_reason"))
        made: Counter[str] = Counter()
        for ns in core.store.consolidated_namespaces(s.tenant):
            for _m, row in core.store.list_consolidated(ns, include_dormant=True, limit=10_000):
                made[row.created_at.date().isoformat()] += 1
        counts = admin.stats(core, _authority(s), s.tenant)
        tokens = summarise_usage(pipeline.settings, s.tenant, core.store.token_usage(s.tenant, days[0], days[-1]))
        return dict(
            tokens=tokens,
            chart_tokens=line_chart({translate(lang, "tokens"): [float(tokens.by_day.get(d, 0)) for d in by_day]},
                                    labels),
            counts=counts, queue=pipeline.captures.queued() + core.store.captures_due(),
            outbox=core.store.outbox_depth(), days=n_days, total_turns=len(found),
            chart_turns=line_chart({translate(lang, "turns"): turns_n, translate(lang, "replies"): replies,
                                    translate(lang, "fallbacks"): fallbacks}, labels),
            chart_recall=line_chart({"p50": lat("recall", 50), "p95": lat("recall", 95)}, labels, unit="ms"),
            chart_total=line_chart({"p50": lat("total", 50), "p95": lat("total", 95)}, labels, unit="ms"),
            chart_reasons=bar_chart({_coder(lang)("fallback", r): n for r, n in reasons.most_common(8)}),
            chart_consolidated=line_chart({translate(lang, "long-term"): [float(made.get(d, 0)) for d in by_day]},
                                          labels))

    data = await asyncio.to_thread(load)
    return _render(request, s, "stats.html", **data)

