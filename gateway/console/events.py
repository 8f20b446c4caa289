"""The console's Events page: the tenant's change events owed to its webhook
(``gateway.webhooks``) — how many wait, the oldest one's age, and the dead
letters (given up after ``max_attempts``), each with a Replay button and one
that replays them all.

Its routes join ``gateway.console.views.router`` (``mount`` imports this
module), so they get the same session, CSRF and error handling as every other
page; a replay goes through ``gateway.webhooks.replay_dead_letters``, the CLI's
own, audited in each event's namespace with the session's actor.

    GET  /console/events                  waiting, dead letters (?page=), what was just replayed (?done=)
    POST /console/events/replay           form ``id`` (a webhook-id) or ``all=1``; back to the page (303)
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timezone

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.views import ROWS, _count_param, _field, _page_no, _render, _see_other, _session, router
from gateway.webhooks import replay_dead_letters

__all__ = ["events", "replay"]


@router.get("/events")
async def events(request: Request) -> HTMLResponse:
    """The session's tenant: events waiting, dead letters (a page of ``ROWS``, oldest first) and whether
    the tenant has a webhook at all."""
    s = _session(request)
    pipeline = request.app.state.pipeline
    store = pipeline.core.store
    page = _page_no(request)

    def load():
        stats = next((x for x in store.event_stats() if x.tenant == s.tenant), None)
        return stats, store.dead_events(s.tenant, limit=ROWS, offset=(page - 1) * ROWS)

    stats, letters = await asyncio.to_thread(load)
    age = None
    if stats is not None and stats.oldest is not None:
        age = int((datetime.now(timezone.utc) - stats.oldest).total_seconds())
    return _render(request, s, "events.html", webhook=bool(pipeline.settings.tenants[s.tenant].change_events.url),
                   pending=stats.pending if stats else 0, dead=stats.dead if stats else 0, oldest_age=age,
                   letters=letters, page=page, pages=max(1, math.ceil((stats.dead if stats else 0) / ROWS)),
                   done=request.query_params.get("done", ""), n=_count_param(request))


@router.post("/events/replay")
async def replay(request: Request) -> Response:
    """Replay the dead letter ``id`` (a webhook-id of the session's tenant), or every one with ``all``;
    an id of another tenant or one not dead is skipped (404 when nothing was replayed)."""
    from memory.errors import NotFoundError

    s = _session(request)
    form = await request.form()
    every = _field(form, "all") == "1"
    wanted = None if every else [_field(form, "id")[:40]]
    done = await asyncio.to_thread(replay_dead_letters, request.app.state.pipeline.core.store, s.tenant, s.actor,
                                   wanted)
    if not done and not every:
        raise NotFoundError("no such dead letter in this tenant")
    return _see_other(f"/console/events?done=replayed&n={len(done)}")
