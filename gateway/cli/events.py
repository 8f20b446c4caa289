"""``huiyi events`` — the change events owed to the tenants' webhooks (``gateway.webhooks``).

status  per tenant: events waiting, dead letters, the oldest undelivered one's age
dead    the tenant's dead letters (given up after ``max_attempts``), oldest first:
        webhook-id, type, memory, version, when it happened, when it was given up,
        attempts and the last error
replay  send dead letters again — the webhook-ids named, or ``--all`` — with their
        original id and timestamp, before the tenant's events still waiting; each
        replay is audited (actor ``operator``)

Opens only the SQL store (no index, no embedder); a running gateway sends what
was replayed at its next look (within a second). Messages are in the
operator's language (gateway.cli.lang); JSON output keeps its keys. Exit code 1
when nothing named could be replayed, 2 for an unknown tenant or a replay that
names nothing.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Annotated

import typer

from gateway.cli.db import StoreSession

__all__ = ["events_app"]

events_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="change events of the tenants' webhooks: status, dead letters, replay")

TenantOpt = Annotated[str, typer.Option(help="the tenant whose events these are")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def _record(e) -> dict:
    return {"webhook_id": e.webhook_id, "type": e.event, "namespace": str(e.namespace), "memory_id": e.memory_id,
            "version": e.version, "created_at": e.created_at.isoformat(),
            "dead_at": e.dead_at.isoformat() if e.dead_at else None, "attempts": e.attempts,
            "last_error": e.last_error}


def _known(s: StoreSession, tenant: str) -> None:
    if tenant not in s.settings.tenants:
        s.voice(tenant).fail("Unknown tenant {tenant}: configure it first (HUIYI_CONFIG).", code=2, tenant=tenant)


@events_app.command()
def status(as_json: JsonOpt = False) -> None:
    """Per tenant: change events waiting, dead letters, and the oldest one's age in seconds."""
    with StoreSession() as s:
        stats = s.store.event_stats()
    now = datetime.now(timezone.utc)
    rows = [{"tenant": x.tenant, "pending": x.pending, "dead": x.dead,
             "oldest_age_s": round((now - x.oldest).total_seconds(), 1) if x.oldest else None} for x in stats]
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False) + "\n")
        return
    v = s.voice()
    if not rows:
        v.say("No change event is waiting: every one was delivered.")
    for r in rows:
        v.say_n("{tenant}: {pending} waiting, {n} dead letter, the oldest {age} s old",
                "{tenant}: {pending} waiting, {n} dead letters, the oldest {age} s old", r["dead"],
                tenant=r["tenant"], pending=r["pending"], age=r["oldest_age_s"])


@events_app.command()
def dead(tenant: TenantOpt = "default",
         limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many")] = 100,
         as_json: JsonOpt = False) -> None:
    """The tenant's dead letters, oldest first."""
    with StoreSession() as s:
        _known(s, tenant)
        letters = s.store.dead_events(tenant, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([_record(e) for e in letters], ensure_ascii=False) + "\n")
        return
    if not letters:
        s.voice(tenant).say("Tenant {tenant} has no dead letter.", tenant=tenant)
    for e in letters:
        typer.echo(f"{e.webhook_id}  {e.event:<16}  {e.namespace}  {e.memory_id}  v{e.version}  "
                   f"{e.created_at:%Y-%m-%d %H:%M:%S}  {e.dead_at:%Y-%m-%d %H:%M:%S}  {e.attempts}  {e.last_error}")


@events_app.command()
def replay(ids: Annotated[list[str] | None, typer.Argument(help="webhook-ids (evt_…) of dead letters")] = None,
           tenant: TenantOpt = "default",
           every: Annotated[bool, typer.Option("--all", help="every dead letter of the tenant")] = False,
           as_json: JsonOpt = False) -> None:
    """Send dead letters again, with their original ids and timestamps."""
    from gateway.webhooks import replay_dead_letters
    from memory.admin import OPERATOR

    with StoreSession() as s:
        _known(s, tenant)
        v = s.voice(tenant)
        if not ids and not every:
            v.fail("Name the dead letters to replay (their webhook-ids, from `huiyi events dead`) or use --all.",
                   code=2)
        if ids and every:  # --all beside named ids would resend every dead letter the operator did not name
            v.fail("Name dead letters or use --all, not both.", code=2)
        done = replay_dead_letters(s.store, tenant, OPERATOR.actor, None if every else ids)
    if as_json:
        sys.stdout.write(json.dumps([_record(e) for e in done], ensure_ascii=False) + "\n")
    elif done:
        v.say_n("Replayed {n} dead letter: it is sent again before the tenant's waiting events.",
                "Replayed {n} dead letters: they are sent again before the tenant's waiting events.", len(done))
    if not done:
        v.fail("No dead letter of tenant {tenant} was replayed: `huiyi events dead --tenant {tenant}` lists them.",
               code=1, tenant=tenant)
