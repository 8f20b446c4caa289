"""Tenant-wide operations: the only code in memory/ that spans namespaces.

Each function takes an explicit ``Authority`` (who acts, over which tenant)
and writes an audit record per namespace it touches. Nothing else in the core
can enumerate namespaces.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from memory.types import Namespace

__all__ = ["Authority", "OPERATOR", "reindex", "forget_subject", "namespaces"]

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

    Shows a progress bar on a terminal (tqdm) unless ``progress`` is False.
    Pending outbox upserts and deletes are cleared (the rebuild supersedes them);
    queued purges of forgotten rows stay queued for the next ``maintain()``.
    """
    from tqdm import tqdm

    ns_list = namespaces(core, authority)
    if authority.tenant is None:
        core.index.reset()
    else:
        for ns in ns_list:
            core.index.delete_namespace(ns)
    total = 0
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=None, unit="mem", desc="re-embedding", disable=not show)
    for ns in ns_list:
        offset = 0
        while True:
            chunk = core.store.list(ns, limit=batch, offset=offset)
            if not chunk:
                break
            core.index.upsert(chunk)
            total += len(chunk)
            bar.update(len(chunk))
            offset += len(chunk)
        core.audit.record(ns, "reindex", authority.actor)
    bar.close()
    ops = core.store.pending_ops(100_000)
    core.store.clear_ops([o.id for o in ops if o.op != "purge"
                          and (authority.tenant is None or o.namespace.tenant == authority.tenant)])
    core.index.optimize()
    log.info("reindex: %d memories in %d namespaces", total, len(ns_list))
    return total


def forget_subject(core, ns: Namespace, authority: Authority) -> int:
    """Forget everything of one person: every memory of ``ns`` (each leaving its
    tombstones, so no replay re-creates them), every chat-log line they said in the
    tenant, and then one index purge. Returns the number of memories forgotten.
    Audited per memory (``forget``) and once as ``forget_subject``. Raises
    PermissionError when ``ns`` is outside the authority's tenant."""
    if authority.tenant is not None and authority.tenant != ns.tenant:
        raise PermissionError(f"{authority.actor} may not act on tenant {ns.tenant}")
    n = 0
    while True:
        batch = core.store.list(ns, limit=200)
        if not batch:
            break
        for m in batch:
            core.forget(ns, m.id, actor=authority.actor, purge=False)
            n += 1
    lines = core.store.redact_speaker(ns)
    core.store.scrub()
    core.purge()
    core.audit.record(ns, "forget_subject", authority.actor, count=n, chat_lines=lines)
    return n
