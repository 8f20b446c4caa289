"""``huiyi memories`` — the operator's view of one person's memories, over the
same core functions the gateway uses.

list            live memories of a subject, newest first
show ID         one memory with every field
history ID      every version with its validity interval
forget ID       forget one memory (tombstoned, purged from SQL, chat log and index)
forget-subject  forget everything of a subject (needs --yes)

Every command takes ``--tenant`` (default ``default``) and ``--subject``
(``tg:123456``); ``--json`` prints JSON instead of lines. Memory texts are
printed as stored; messages are in the operator's language (the shell's locale,
else the tenant's: gateway.cli.lang), and one that finds nothing says why. Exit
code 1 for an unknown memory, 2 for an invalid tenant/subject or a refused
forget-subject.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Annotated, NoReturn

import typer

from gateway.cli.lang import Voice, no_memories, sentences, subject_hint
from gateway.config import load_settings
from locales import translate

__all__ = ["memories_app"]

memories_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="list, show, history and forget one person's memories")

TenantOpt = Annotated[str, typer.Option(help="tenant")]
SubjectOpt = Annotated[str, typer.Option(help="subject, e.g. tg:123456")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
IdArg = Annotated[str, typer.Argument(help="memory id")]


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def _record(m) -> dict:
    """A memory as a JSON-able record (every field of ``memory.types.Memory``)."""
    return {
        "id": m.id, "namespace": str(m.namespace), "text": m.text, "context": m.context,
        "category": m.category.value, "key": m.key,
        "importance": m.importance, "valence": m.valence, "arousal": m.arousal, "emotion": m.emotion,
        "origin": m.origin.key if m.origin else None, "visibility": m.visibility.value,
        "source_message_id": m.source_message_id, "created_at": _iso(m.created_at), "updated_at": _iso(m.updated_at),
        "valid_from": _iso(m.valid_from), "valid_to": _iso(m.valid_to), "event_time": _iso(m.event_time),
        "event_end": _iso(m.event_end),
        "version": m.version, "access_times": [_iso(t) for t in m.access_times], "metadata": dict(m.metadata),
    }


def _line(m) -> str:
    return f"{m.id}  {m.category.value:<12} v{m.version}  {m.emotion:<12} {' '.join(m.text.split())}"


class _Session:
    """Settings, the operator's voice and a core for one command; closes the core on exit."""

    def __init__(self, tenant: str, subject: str) -> None:
        from gateway.logs import configure_logging
        from memory.errors import NamespaceError
        from memory.types import Namespace

        configure_logging()
        self.settings = load_settings()
        self.voice = Voice.of(tenant, self.settings)
        try:
            self.ns = Namespace(tenant, subject)
        except NamespaceError as exc:
            hint = subject_hint(self.voice.lang, subject) or ""
            self.fail("Invalid tenant or subject: {detail}", code=2, detail=f"{exc} {hint}".strip())
        self.core = None

    def __enter__(self) -> _Session:
        from gateway.service import build_core

        self.core = build_core(self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.core is not None:
            self.core.close()

    def say(self, msgid: str, **params: object) -> None:
        self.voice.say(msgid, **params)

    def say_n(self, singular: str, plural: str, n: int, **params: object) -> None:
        self.voice.say_n(singular, plural, n, **params)

    def fail(self, msgid: str, *, code: int, **params: object) -> NoReturn:
        self.voice.fail(msgid, code=code, **params)

    def nothing(self) -> str:
        """Why this person has no memory to show (gateway.cli.lang.no_memories)."""
        return no_memories(self.voice.lang, self.ns, self.settings)

    def of(self, verb, memory_id: str, **kwargs):
        """``verb(ns, memory_id, **kwargs)`` on this session's namespace (a
        ``MemoryCore`` method); exits 1 with "No memory …", and how to find the
        person's ids, when it is not there."""
        from memory.errors import NotFoundError

        try:
            return verb(self.ns, memory_id, **kwargs)
        except NotFoundError:
            self.fail("No memory {id} in {namespace}: it is another person's, was forgotten, or the id is mistyped; "
                      "`huiyi memories list --tenant {tenant} --subject {subject}` lists this person's ids.", code=1,
                      id=memory_id, namespace=str(self.ns), tenant=self.ns.tenant, subject=self.ns.subject)


def _dump(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


@memories_app.command("list")
def list_(tenant: TenantOpt = "default", subject: SubjectOpt = ...,  # type: ignore[assignment]
          limit: Annotated[int, typer.Option(help="at most this many")] = 50,
          offset: Annotated[int, typer.Option(help="skip this many")] = 0, as_json: JsonOpt = False) -> None:
    """Live memories of a subject, newest first."""
    with _Session(tenant, subject) as s:
        items = s.core.list(s.ns, limit=limit, offset=offset)
        if as_json:
            _dump({"namespace": str(s.ns), "count": s.core.store.count(s.ns), "memories": [_record(m) for m in items]})
        elif not items:
            count = s.core.store.count(s.ns) if offset else 0
            if count:
                s.say("No memories past the first {offset}: {namespace} has {count}.", offset=offset,
                      namespace=str(s.ns), count=count)
            else:
                typer.echo(s.nothing())
        else:
            for m in items:
                typer.echo(_line(m))


@memories_app.command()
def show(memory_id: IdArg, tenant: TenantOpt = "default", subject: SubjectOpt = ...,  # type: ignore[assignment]
         as_json: JsonOpt = False) -> None:
    """One live memory with every field."""
    with _Session(tenant, subject) as s:
        rec = _record(s.of(s.core.get, memory_id))
        if as_json:
            _dump(rec)
        else:
            for name, value in rec.items():
                typer.echo(f"{name}: {value}")


@memories_app.command()
def history(memory_id: IdArg, tenant: TenantOpt = "default", subject: SubjectOpt = ...,  # type: ignore[assignment]
            as_json: JsonOpt = False) -> None:
    """Every version of a memory, oldest first, with its validity interval."""
    with _Session(tenant, subject) as s:
        versions = s.of(s.core.history, memory_id)
        if as_json:
            _dump({"id": memory_id, "namespace": str(s.ns), "versions": [
                {"version": v.version, "text": v.text, "category": v.category.value,
                 "valid_from": _iso(v.valid_from), "valid_to": _iso(v.valid_to)} for v in versions]})
        else:
            for v in versions:
                typer.echo(f"v{v.version}  {_iso(v.valid_from)} → {_iso(v.valid_to) or '…'}  {' '.join(v.text.split())}")


@memories_app.command()
def forget(memory_id: IdArg, tenant: TenantOpt = "default", subject: SubjectOpt = ...,  # type: ignore[assignment]
           as_json: JsonOpt = False) -> None:
    """Forget one memory: no copy of its text stays in SQL, the chat log, the
    index or the audit log, and a tombstone refuses it from older messages."""
    with _Session(tenant, subject) as s:
        s.of(s.core.forget, memory_id, actor="operator:cli")
        if as_json:
            _dump({"id": memory_id, "namespace": str(s.ns), "forgotten": True})
        else:
            s.say("Forgot memory {id}.", id=memory_id)


@memories_app.command("forget-subject")
def forget_subject(tenant: TenantOpt = "default", subject: SubjectOpt = ...,  # type: ignore[assignment]
                   yes: Annotated[bool, typer.Option("--yes", help="confirm: forget everything of this person")] = False,
                   as_json: JsonOpt = False) -> None:
    """Forget everything of a subject: all memories (tombstoned) and their chat-log lines."""
    from memory.admin import Authority
    from memory.admin import forget_subject as do_forget_subject

    s = _Session(tenant, subject)
    if not yes:
        s.fail("Refusing to forget everything of {namespace} without --yes.", code=2, namespace=str(s.ns))
    with s:
        n = do_forget_subject(s.core, s.ns, Authority(actor="operator:cli", tenant=tenant)).memories
        if as_json:
            _dump({"namespace": str(s.ns), "forgotten": n})
        elif n:
            s.say_n("Forgot {n} memory of {namespace}.", "Forgot {n} memories of {namespace}.", n, namespace=str(s.ns))
        else:
            typer.echo(sentences(s.voice.lang, s.nothing(), translate(s.voice.lang, "Nothing was forgotten.")))
