"""Tenant-wide operations: the only code in memory/ that spans namespaces.

Each function takes an explicit ``Authority`` (who acts, over which tenant)
and writes an audit record per namespace it touches. Nothing else in the core
can enumerate namespaces.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.errors import NotFoundError
from memory.types import ForgetReceipt, Namespace

__all__ = ["Authority", "OPERATOR", "pause_learning", "resume_learning", "reindex", "forget_subject", "forget_scope", "namespaces", "link", "LinkResult",
           "unlink", "stats", "TenantStats", "people", "Person", "PeoplePage", "PEOPLE_PAGE_MAX"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Authority:
    """Who performs a tenant-wide operation. ``tenant`` None means the operator of
    the whole deployment (CLI, start-up repair); otherwise one tenant's admin."""

    actor: str
    tenant: str | None


OPERATOR = Authority(actor="operator", tenant=None)


def namespaces(core, authority: Authority) -> list[Namespace]:
    """Namespaces with live memories within the authority's reach."""
    return core.store.admin_namespaces(authority.tenant)


def reindex(core, authority: Authority, *, batch: int = 256, progress: bool | None = None) -> int:
    """Rebuild the search index from SQL (drop, re-embed, re-add); returns rows indexed.

    Safe while the gateway serves and writes (the background rebuild of a
    missing or unreadable index, ``MemoryCore.rebuild_index``): the namespaces
    are listed after the table is reset, so a write before the reset is read
    back from SQL and one after it is applied to the new table by its own
    outbox; each chunk of a namespace is re-read from SQL and written under
    that namespace's write lock, so a concurrent update or forget is never
    overwritten by an older read; rows are walked by id (no offset paging that
    a concurrent delete would shift). Outbox upserts and deletes pending when
    the rebuild began are cleared (it supersedes them); later ones and queued
    purges of forgotten rows stay for the next ``maintain()``.

    Shows a progress bar on a terminal (tqdm) unless ``progress`` is False.
    Raises SearchIndexError (the index cannot be written) or StoreError.
    """
    from tqdm import tqdm

    superseded = [o for o in core.store.pending_ops(100_000) if o.op != "purge"
                  and (authority.tenant is None or o.namespace.tenant == authority.tenant)]
    if authority.tenant is None:
        core.index.reset()
    else:
        for ns in namespaces(core, authority):
            core.index.delete_namespace(ns)
    ns_list = namespaces(core, authority)
    total = 0
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=None, unit="mem", desc="re-embedding", disable=not show)
    for ns in ns_list:
        ids = core.store.iter_ids(ns)
        for start in range(0, len(ids), batch):
            chunk = ids[start:start + batch]
            # embed outside the lock (the vectors are cached by text), write under it
            core.index.vectors(list(core.store.get_many(ns, chunk).values()), fetch=False)
            with core.namespace_lock(ns):
                live = list(core.store.get_many(ns, chunk).values())
                core.index.upsert(live)
            total += len(live)
            bar.update(len(live))
        core.audit.record(ns, "reindex", authority.actor)
    bar.close()
    core.store.clear_ops([o.id for o in superseded if authority.tenant is None or o.namespace in set(ns_list)])
    if authority.tenant is None:
        core.index.optimize()  # a tenant's rebuild leaves compaction to the maintenance task
    log.info("reindex: %d memories in %d namespaces", total, len(ns_list))
    return total


def forget_subject(core, ns: Namespace, authority: Authority) -> ForgetReceipt:
    """Forget everything of one person: a subject-wide tombstone (nothing they said
    before now is stored again, ``MemoryCore.forget_everything_said_before_now``),
    every memory of ``ns`` (each leaving its tombstones), every chat-log line they said in the
    tenant, and then one index purge. Returns the receipt of it all
    (``ForgetReceipt``: ``memories`` forgotten, the subject-wide tombstone among
    ``tombstones``, the person's chat-log lines among ``chat_lines``). Audited
    per memory (``forget``) and once as ``forget_subject``. Raises
    PermissionError when ``ns`` is outside the authority's tenant."""
    if authority.tenant is not None and authority.tenant != ns.tenant:
        raise PermissionError(f"{authority.actor} may not act on tenant {ns.tenant}")
    core.forget_everything_said_before_now(ns)  # first: captures queued or running now must not bring anything back
    receipt = ForgetReceipt(tombstones=1)
    while True:
        batch = core.store.list(ns, limit=200)
        if not batch:
            break
        for m in batch:
            try:
                receipt += core.forget(ns, m.id, actor=authority.actor, purge=False)
            except NotFoundError:  # an abstraction that went with one of its sources
                continue
    lines = core.store.redact_speaker(ns)
    core.store.clear_consolidation(ns)
    core.store.scrub()
    core.purge()
    core.audit.record(ns, "forget_subject", authority.actor, count=receipt.memories, chat_lines=lines)
    return receipt + ForgetReceipt(chat_lines=lines)


def forget_scope(core, ns: Namespace, authority: Authority, group_key: str | None = None) -> ForgetReceipt:
    """Forget a person's memories of one scope (issue 26 item 17): without
    ``group_key`` everything (``forget_subject``); with it (a ``ChatRef.group_key``,
    every topic of the group) what they said in that group, as ``/memory forget
    all`` in a group does — first a tombstone of the group (nothing they said there
    before now is stored again), then every memory learned there and shown there
    (each tombstoned), then their chat-log lines of the group, then one index
    purge. Their other memories stay. Returns the ``ForgetReceipt``; audited
    per memory and once as ``forget_scope``. PermissionError outside the
    authority's tenant."""
    if group_key is None:
        return forget_subject(core, ns, authority)
    _check_tenant(authority, ns.tenant)
    core.forget_everything_said_before_now(ns, group_key)
    receipt = ForgetReceipt(tombstones=1)
    while True:
        batch = core.store.list_in_group(ns, group_key, limit=200)
        if not batch:
            break
        for m in batch:
            try:
                receipt += core.forget(ns, m.id, actor=authority.actor, purge=False)
            except NotFoundError:  # an abstraction that went with one of its sources
                continue
    lines = core.store.redact_speaker(ns, group_key)
    core.store.scrub()
    core.purge()
    core.audit.record(ns, "forget_scope", authority.actor, count=receipt.memories, chat_lines=lines)
    return receipt + ForgetReceipt(chat_lines=lines)


def _check_tenant(authority: Authority, tenant: str) -> None:
    if authority.tenant is not None and authority.tenant != tenant:
        raise PermissionError(f"{authority.actor} may not act on tenant {tenant}")


@dataclass(frozen=True, slots=True)
class LinkResult:
    """Outcome of ``link``: the person namespace every linked identity now
    resolves to, those identities (sorted), and how many memories moved into it."""

    person: Namespace
    identities: tuple[str, ...]
    moved: int


def link(core, authority: Authority, tenant: str, subjects: Sequence[str]) -> LinkResult:
    """Declare platform identities (``tg:123``, ``qq:10001``; at least two) one
    person of ``tenant``.

    They (and every identity already linked to any of them) resolve to one
    subject ``person:<id>`` from now on: an existing person subject is reused
    (the smallest id when several are merged), else a new one is made. Their
    memories, history and tombstones move into that namespace
    (``Store.move_namespace``: same canonical key → merged, latest wins). Audit:
    ``link`` in the person namespace, ``link_out`` in each merged one. Linking
    again is idempotent and moves anything written to an old namespace since.

    Raises PermissionError outside the authority's tenant, ValueError (or
    NamespaceError) for fewer than two identities or one that is not a platform
    identity.
    """
    from memory.identity import PERSON, is_platform_subject
    from memory.store import new_memory_id

    _check_tenant(authority, tenant)
    subs = sorted(set(subjects))
    for s in subs:
        Namespace(tenant, s)  # validates
        if not is_platform_subject(s):
            raise ValueError(f"{s!r} is not a platform identity")
    if len(subs) < 2:
        raise ValueError("link needs two different platform identities")
    store = core.store
    persons = sorted({p for p in (store.resolve_identity(tenant, s) for s in subs) if p})
    person = Namespace(tenant, persons[0] if persons else f"{PERSON}:{new_memory_id()}")
    members = set(subs)
    for p in persons:
        members |= set(store.identities(Namespace(tenant, p)))
    sources = [Namespace(tenant, s) for s in subs] + [Namespace(tenant, p) for p in persons[1:]]
    moved = 0
    with core._locked(*sources, person):  # one order, this process and the others: no deadlock
        store.link_identities(tenant, sorted(members), person.subject, authority.actor)
        for src in sources:
            gone, changed = store.move_namespace(src, person)
            moved += len(gone)
            if gone:
                store.audit(src, "link_out", authority.actor, person=person.subject, count=len(gone))
            for ns, ids in ((src, gone), (person, changed)):
                if ids:
                    try:
                        core.maintain(only=(ns, set(ids)))
                    except Exception as exc:  # noqa: BLE001 - the outbox keeps it for maintenance
                        log.warning("index update after link deferred for %s: %s", ns, exc)
        store.audit(person, "link", authority.actor, identities=sorted(members), moved=moved)
    log.info("link: %d identities -> %s (%d memories moved)", len(members), person, moved)
    return LinkResult(person, tuple(sorted(members)), moved)


@dataclass(frozen=True, slots=True)
class TenantStats:
    """Operator view of one tenant. ``fallback_rate`` in [0, 1]: share of people
    whose latest recollection fell back, among those who had something to recall
    (a ``memory.reconstruct.NOTHING_TO_RECALL`` reason is no fallback; None before
    any such recall)."""

    tenant: str
    memories: int
    people: int
    chats: int
    turns: int
    fallback_rate: float | None


def stats(core, authority: Authority, tenant: str) -> TenantStats:
    """Counts of ``tenant`` (``Store.tenant_counts``); PermissionError outside the
    authority's tenant."""
    _check_tenant(authority, tenant)
    from memory.reconstruct import NOTHING_TO_RECALL

    c = core.store.tenant_counts(tenant, leave_out=NOTHING_TO_RECALL)
    rate = c.fallbacks / c.recalls if c.recalls else None
    return TenantStats(tenant, c.memories, c.people, c.chats, c.turns, rate)


def unlink(core, authority: Authority, tenant: str, subject: str) -> Namespace:
    """Undo one identity of a ``link``: the platform identity ``subject``
    (``tg:123``) of ``tenant`` is its own subject again from now on. The
    memories stay with the person (``Store.unlink_identity``); returns that
    person's namespace. Audited as ``unlink`` there. Raises PermissionError
    outside the authority's tenant, NamespaceError for a subject outside its
    pattern, ValueError for a ``person:`` subject or an identity that is not linked."""
    from memory.identity import is_platform_subject

    _check_tenant(authority, tenant)
    Namespace(tenant, subject)  # validates
    if not is_platform_subject(subject):
        raise ValueError(f"{subject!r} is not a platform identity")
    person = core.store.unlink_identity(tenant, subject)
    if person is None:
        raise ValueError(f"{subject} is not linked to anyone")
    ns = Namespace(tenant, person)
    core.store.audit(ns, "unlink", authority.actor, identity=subject)
    log.info("unlink: %s from %s", subject, ns)
    return ns


#: The largest page ``people`` returns.
PEOPLE_PAGE_MAX = 200


@dataclass(frozen=True, slots=True)
class Person:
    """One person of a tenant: ``subject`` (``tg:42`` or ``person:…``), its linked
    platform ``identities`` (sorted; empty when it is a platform identity of its
    own), live ``memories``, ``last_seen`` (UTC, None when unknown) and ``name``
    (the display name they last sent, "" when none; never an id)."""

    subject: str
    identities: tuple[str, ...]
    memories: int
    last_seen: datetime | None
    name: str


@dataclass(frozen=True, slots=True)
class PeoplePage:
    """A page of ``people``: ``total`` people that match ``query``, this page's
    ``items`` from ``offset`` (at most ``limit``)."""

    tenant: str
    query: str
    total: int
    limit: int
    offset: int
    items: tuple[Person, ...]


def people(core, authority: Authority, tenant: str, *, query: str = "", limit: int = 50,
           offset: int = 0) -> PeoplePage:
    """The people of ``tenant`` (``Store.tenant_people``: everyone with memories,
    every linked person, everyone who spoke in the recent chat log), newest
    seen first, those matching ``query`` — a case-insensitive substring of the
    subject, of a linked identity or of the name; empty matches everyone —
    paged by ``limit`` (1..PEOPLE_PAGE_MAX) and ``offset`` (≥ 0). Raises
    PermissionError outside the authority's tenant, ValueError for a limit or
    offset out of range. The console's People page and ``GET /v1/people`` call it."""
    _check_tenant(authority, tenant)
    if not 1 <= limit <= PEOPLE_PAGE_MAX or offset < 0:
        raise ValueError(f"limit must be in 1..{PEOPLE_PAGE_MAX} and offset >= 0")
    needle = " ".join(query.split()).casefold()
    rows = core.store.tenant_people(tenant)
    if needle:
        rows = [r for r in rows if needle in r.subject.casefold() or needle in r.name.casefold()
                or any(needle in i.casefold() for i in r.identities)]
    items = tuple(Person(r.subject, r.identities, r.memories, r.last_seen, r.name)
                  for r in rows[offset:offset + limit])
    return PeoplePage(tenant, needle, len(rows), limit, offset, items)


def pause_learning(core, ns: Namespace, chat: str, now: datetime, until: datetime | None, actor: str):
    """Off the record: nothing ``ns`` says in chat ``chat`` (a chat key; a
    group's for all its topics) is learned from ``now`` until ``until`` (aware
    datetimes; None: until ``resume_learning``), audited as ``actor``. The one path
    of ``/memory pause``, ``PUT /v1/…/pause`` and the console. Returns the
    ``memory.store.Pause``; raises StoreError."""
    pause = core.store.pause(ns, chat, now, until)
    core.store.audit(ns, "pause", actor, chat=chat, until=until.isoformat() if until else None)
    return pause


def resume_learning(core, ns: Namespace, chat: str, now: datetime, actor: str):
    """Learning from ``ns`` in chat ``chat`` goes on; audited as ``actor`` when a
    pause was in force at ``now``. Returns that ``memory.store.Pause``, or None
    (nothing changed). Raises StoreError."""
    was = core.store.resume(ns, chat, now)
    if was is not None:
        core.store.audit(ns, "resume", actor, chat=chat)
    return was
