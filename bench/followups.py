"""``python -m bench followups``: a simulated month of follow-ups on a fake clock.

50 people (seeded) of one tenant (zone Asia/Shanghai, waking hours 09:00–21:30)
tell plans through the month in zh and en (「3天后我要面试」, "I have a job
interview in 3 days"; each dated by ``memory.plans.read_plan`` as capture would,
stored in the real SQL store at the moment they are said). 30 of them turn
follow-ups on (one turns them off mid-month), 20 never do; some plans are
forgotten before their day, one person puts a chat off the record, some plans
hold a never-store clause (health, the tenant has ``health`` on), a few are
told in a group (shared there, asked there).

Two replicas — two ``FollowupSender`` objects, each with its own ``Store`` on
the same database — tick at the same fake moments every hour for 30 days;
on day 15 replica B "crashes" in the middle of a send (its claim is never
reported) and is replaced by a fresh one. The platform sender records every
question and refuses 5 % of sends (retried) and times out on 1 % (maybe sent:
dropped, never again).

Printed: follow-ups **due** (an opted-in person's plan past within the month,
not forgotten, not paused, no never-store clause; its first day to ask inside
the month) vs **sent**, and the reasons for the difference (dropped after
failures, too old after the one-a-day cap pushed it past the lookback); and the
invariants, each of which must be 0: sent to someone not opted in, sent outside
waking hours, sent twice (same plan, or two to one person on one local day),
sent about a forgotten or blocked plan. Exit status 1 when an invariant fails.
``--backend postgres`` runs it on PostgreSQL (``HUIYI_BENCH_PG``, default the
test server's ``postgresql://postgres@127.0.0.1:5432/test``) in a schema of its own.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memory.dates import zone
from memory.followups import WakingHours
from memory.plans import read_plan
from memory.types import ChatKind, ChatRef, Memory, Namespace, Visibility

TENANT = "default"
TZ_NAME = "Asia/Shanghai"
TZ = zone(TZ_NAME)
WAKING = "09:00-21:30"
START = datetime(2027, 3, 1, tzinfo=TZ).astimezone(UTC)
DAYS = 30
TICK = timedelta(minutes=60)
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

_ZH = ["面试", "考试", "体检", "聚会", "婚礼", "演唱会", "答辩", "比赛"]
_EN = ["job interview", "exam", "dentist appointment", "party", "wedding", "concert", "presentation", "match"]
_HEALTH_ZH = "{k}天后我要去医院做化疗"
_HEALTH_EN = "I have chemotherapy at the hospital in {k} days"


@dataclass
class Plan:
    """One plan of the simulation: who, where, what, when said, its days, and what happens to it."""

    ns: Namespace
    chat: ChatRef
    text: str
    said: datetime
    first: object
    last: object
    mid: str
    group: bool = False
    forget_at: datetime | None = None
    never_store: bool = False


@dataclass
class Person:
    ns: Namespace
    chat: ChatRef
    zh: bool
    opt_in_at: datetime | None
    opt_out_at: datetime | None = None
    pause_at: datetime | None = None
    plans: list[Plan] = field(default_factory=list)


def _settings():
    from gateway.config import FollowupSettings, TenantSettings

    return {TENANT: TenantSettings(tz=TZ_NAME, never_store=["ids", "health"],
                                   followups=FollowupSettings(waking_hours=WAKING, attempts=3, retry_after_s=1800,
                                                              lease_s=3600))}


def _people(rng: random.Random) -> list[Person]:
    people = []
    group = ChatRef("tg", ChatKind.GROUP, "-100777")
    for i in range(50):
        uid = str(9000 + i)
        ns = Namespace(TENANT, f"tg:{uid}")
        opt = START + timedelta(hours=rng.randint(0, 24 * 5)) if i < 30 else None
        p = Person(ns, ChatRef("tg", ChatKind.PRIVATE, uid), zh=i % 2 == 0, opt_in_at=opt)
        if i == 3:
            p.opt_out_at = START + timedelta(days=14)
        if i == 5:
            p.pause_at = START + timedelta(days=10)
        n = 0
        for _ in range(rng.randint(3, 6)):
            said = START + timedelta(days=rng.uniform(0, DAYS - 4), hours=0)
            said = said.replace(hour=rng.randint(1, 13), minute=rng.randint(0, 59))  # 09:00–21:59 local
            k = rng.randint(1, 6)
            in_group = rng.random() < 0.15
            health = rng.random() < 0.06
            if p.zh:
                text = _HEALTH_ZH.format(k=k) if health else f"{k}天后我要{rng.choice(['去', ''])}{rng.choice(_ZH)}"
            else:
                text = _HEALTH_EN.format(k=k) if health else f"I have a {rng.choice(_EN)} in {k} days"
            plan = read_plan(text, said, TZ)
            if plan is None or not plan.dated:
                continue
            n += 1
            forget = said + timedelta(hours=rng.uniform(1, 24 * k)) if rng.random() < 0.08 else None
            p.plans.append(Plan(ns, group if in_group else p.chat, text, said, plan.first, plan.last, f"m{i}x{n}",
                                group=in_group, forget_at=forget, never_store=health))
        people.append(p)
    return people


def _first_ask(plan: Plan, waking: WakingHours) -> datetime:
    from memory.followups import followup_due_at

    return followup_due_at(plan.last, waking, TZ)  # type: ignore[arg-type]


def _due(p: Person, plan: Plan, waking: WakingHours, end: datetime) -> bool:
    """Whether this plan's follow-up is owed: see the module docstring."""
    ask = _first_ask(plan, waking)
    if p.opt_in_at is None or ask >= end or plan.never_store:
        return False
    if plan.forget_at is not None and plan.forget_at < ask:
        return False
    if p.opt_out_at is not None and p.opt_out_at <= ask:
        return False
    if p.pause_at is not None and not plan.group and p.pause_at <= ask:
        return False
    return True


class FlakyPlatform:
    """The platform: records ``(now, followup chat, ns, text)``; refuses 5 %, times out 1 %."""

    def __init__(self, rng: random.Random, clock) -> None:
        self.rng = rng
        self.clock = clock
        self.sent: list[tuple[datetime, str, Namespace, str]] = []
        self.refused = self.timeouts = 0
        self.crash_next = False

    async def __call__(self, tenant, chat, ns, pref, text, followup_id) -> None:
        from gateway.followups import SendFailed

        if self.crash_next:  # the replica dies here: its claim is never reported
            self.crash_next = False
            raise asyncio.CancelledError
        r = self.rng.random()
        if r < 0.05:
            self.refused += 1
            raise SendFailed("HTTP 502")
        if r < 0.06:
            self.timeouts += 1
            raise SendFailed("ReadTimeout", maybe_sent=True)
        self.sent.append((self.clock(), chat.key, ns, text))


async def _simulate(url: str, schema: str | None, seed: int) -> dict:
    from gateway.followups import FollowupSender
    from memory.store import Store

    rng = random.Random(seed)
    tenants = _settings()
    waking = tenants[TENANT].followups.window()
    people = _people(rng)
    now = START
    platform = FlakyPlatform(random.Random(seed + 1), lambda: now)
    stores = [Store(url, schema=schema), Store(url, schema=schema)]
    a = FollowupSender(stores[0], tenants, {"tg": platform}, holder="replica-a")
    b = FollowupSender(stores[1], tenants, {"tg": platform}, holder="replica-b")
    events = []  # (when, kind, person, plan)
    for p in people:
        if p.opt_in_at:
            events.append((p.opt_in_at, "on", p, None))
        if p.opt_out_at:
            events.append((p.opt_out_at, "off", p, None))
        if p.pause_at:
            events.append((p.pause_at, "pause", p, None))
        for plan in p.plans:
            events.append((plan.said, "say", p, plan))
            if plan.forget_at:
                events.append((plan.forget_at, "forget", p, plan))
    events.sort(key=lambda e: e[0])
    store = stores[0]
    end = START + timedelta(days=DAYS)
    crashed = False
    ticks = 0
    t0 = time.perf_counter()
    while now < end:
        while events and events[0][0] <= now:
            _, kind, p, plan = events.pop(0)
            if kind == "on":
                store.set_followups(p.ns, True, lang="zh_CN" if p.zh else "en", now=now)
            elif kind == "off":
                store.set_followups(p.ns, False, now=now)
            elif kind == "pause":
                store.pause(p.ns, p.chat.key, now, None)
            elif kind == "say":
                store.add(p.ns, Memory(id=plan.mid, namespace=p.ns, text=plan.text, key=f"event.{plan.mid}",
                                       created_at=plan.said, updated_at=plan.said,
                                       event_time=datetime(plan.first.year, plan.first.month, plan.first.day,
                                                           tzinfo=TZ).astimezone(UTC),
                                       origin=plan.chat, visibility=Visibility.GROUP if plan.group else Visibility.PRIVATE))
            elif kind == "forget":
                store.delete(p.ns, plan.mid)
        if not crashed and now >= START + timedelta(days=15) and waking.contains(now, TZ):
            # replica B dies mid-send once something is due: its claim stays unreported; a fresh B replaces it
            if store.due_followups(TENANT, now):
                platform.crash_next = True
                try:
                    await b.tick(now)
                except asyncio.CancelledError:
                    pass
                crashed = not platform.crash_next
                platform.crash_next = False  # nothing reached a send this time: try again at a later tick
                if crashed:
                    stores[1].close()
                    stores[1] = Store(url, schema=schema)
                    b = FollowupSender(stores[1], tenants, {"tg": platform}, holder="replica-b2")
        await asyncio.gather(a.tick(now), b.tick(now))
        ticks += 1
        now += TICK
    wall = time.perf_counter() - t0
    rows = {(f.namespace, f.memory_id): f for p in people for f in store.followups_of(p.ns)}
    for s in stores:
        s.close()
    return {"people": people, "platform": platform, "rows": rows, "ticks": ticks, "wall": wall, "waking": waking,
            "end": end, "crashed": crashed}


def run(backend: str = "sqlite", seed: int = 39, verbose: bool = False) -> int:
    """Run the month (module docstring) on ``backend``; print the table; 1 when an invariant fails."""
    import os

    schema = None
    tmp = None
    if backend == "postgres":
        url = os.environ.get("HUIYI_BENCH_PG", PG_URL)
        schema = f"bench_followups_{uuid.uuid4().hex[:8]}"
    else:
        tmp = tempfile.TemporaryDirectory(prefix="huiyi-followups-")
        url = f"sqlite:///{Path(tmp.name) / 'huiyi.db'}"
    try:
        out = asyncio.run(_simulate(url, schema, seed))
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if tmp is not None:
            tmp.cleanup()
    people, platform, rows, waking, end = out["people"], out["platform"], out["rows"], out["waking"], out["end"]
    by_ns = {p.ns: p for p in people}
    plans = {(p.ns, plan.mid): (p, plan) for p in people for plan in p.plans}
    due = {key for key, (p, plan) in plans.items() if _due(p, plan, waking, end)}
    sent_keys: Counter = Counter()
    per_day: Counter = Counter()
    bad_optin = bad_hours = bad_plan = 0
    for at, chat, ns, text in platform.sent:
        p = by_ns[ns]
        if p.opt_in_at is None or p.opt_in_at > at or (p.opt_out_at is not None and p.opt_out_at <= at):
            bad_optin += 1
        if not waking.contains(at, TZ):
            bad_hours += 1
        per_day[(ns, at.astimezone(TZ).date())] += 1
        row_hits = [k for k, f in rows.items() if k[0] == ns and f.state == "sent" and f.sent_at == at]
        for k in row_hits:
            sent_keys[k] += 1
            pl = plans[k][1]
            if pl.never_store or (pl.forget_at is not None and pl.forget_at <= at) or pl.chat.key != chat:
                bad_plan += 1
        if not row_hits:
            bad_plan += 1  # a send no sent row accounts for
    doubled = sum(n - 1 for n in sent_keys.values() if n > 1) + sum(n - 1 for n in per_day.values() if n > 1)
    sent_rows = {k for k, f in rows.items() if f.state == "sent"}
    states = Counter(f.state for f in rows.values())
    reasons = Counter(f.last_error for f in rows.values() if f.state in ("skipped", "dropped"))
    sent_due = len(sent_rows & due)
    print(f"## followups ({backend}, seed {seed}): 50 people, {DAYS} days, ticks every {int(TICK.total_seconds() // 60)} min "
          f"× 2 replicas ({out['ticks']} each; replica B crashed mid-send and was replaced: {out['crashed']}); "
          f"{out['wall']:.1f} s")
    print(f"plans told: {len(plans)}; people opted in: {sum(p.opt_in_at is not None for p in people)} of 50")
    print(f"follow-ups due: {len(due)}; sent: {len(platform.sent)} ({sent_due} of the due: "
          f"{sent_due / max(1, len(due)):.1%}); platform refusals {platform.refused} (retried), "
          f"timeouts {platform.timeouts} (dropped, maybe sent)")
    print(f"rows by state: {dict(sorted(states.items()))}")
    print(f"skipped / dropped, by reason: {dict(reasons.most_common())}")
    print(f"invariants (all must be 0): sent to someone not opted in {bad_optin}; outside waking hours {bad_hours}; "
          f"doubled (same plan, or two a person a day) {doubled}; about a forgotten / never-store plan {bad_plan}; "
          f"sent but not due {len(sent_rows - due)}")
    if verbose:
        for k in sorted(due - sent_rows, key=str):
            f = rows.get(k)
            print("  due, not sent:", k, plans[k][1].text, f.state if f else "never scheduled", f.last_error if f else "")
    return 1 if bad_optin or bad_hours or doubled or bad_plan or (sent_rows - due) else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1] if len(sys.argv) > 1 else "sqlite"))
