"""``huiyi import --from sillytavern|mem0|livingmemory|maibot|jsonl FILE``: memories brought over from
another bot (``gateway.importers``), mapped to people by ``--person SUBJECT`` (the
whole file is that person's) or ``--map FILE`` (source id → subject), with a
progress bar (tqdm, on stderr when it is a terminal; ``--progress`` /
``--no-progress`` to choose) and a summary of what was imported, skipped and
why; each malformed or failed line is listed with its number. Exit 0 when the
file was read (whatever was skipped), 2 for a file or mapping that cannot be read
at all, or a file of several people's ids given one ``--person`` (nothing written)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gateway.cli.lang import Voice
from gateway.config import load_settings
from locales import translate

__all__ = ["import_memories"]

_REASONS = {
    "malformed": "malformed (not the source's format)",
    "empty": "empty",
    "disabled": "turned off in the source",
    "not_the_person": "the character's or assistant's lines",
    "system": "system lines",
    "unmapped": "no person mapped for the source's id",
    "forgotten": "forgotten before (a tombstone)",
    "already": "already imported",
    "no_fact": "nothing about the person in it",
    "refused": "refused by the store",
    "error": "failed to write",
}


def _read(voice: Voice, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        voice.fail("cannot read {path}: {error}", code=2, path=str(path), error=exc.strerror or type(exc).__name__)


def import_memories(
        file: Annotated[Path, typer.Argument(help="the file to import")],
        source: Annotated[str, typer.Option("--from", help="sillytavern, mem0, livingmemory, maibot or "
                                                                     "jsonl")] = ...,  # type: ignore[assignment]
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
        person: Annotated[str | None, typer.Option(help="the subject every record goes to, e.g. tg:1001")] = None,
        mapping: Annotated[Path | None, typer.Option("--map", help="source id → subject: a JSON object, or "
                                                                   "id=subject lines")] = None,
        progress: Annotated[bool | None, typer.Option(help="a progress bar on stderr (default: when it is a "
                                                           "terminal)")] = None) -> None:
    """Import FILE's memories: each through the capture path, at its own time, with its
    provenance; nothing forgotten comes back; a second run adds nothing."""
    from tqdm import tqdm

    from gateway.importers import (
        ManyOwners,
        SourceError,
        import_records,
        mapping_of,
        read_records,
    )
    from gateway.logs import configure_logging
    from gateway.service import build_core

    voice = Voice.of(tenant)
    if person is None and mapping is None:
        voice.fail("name the person: --person SUBJECT, or map the file's ids: --map FILE", code=2)
    if person is not None and mapping is not None:
        voice.fail("--person or --map, not both", code=2)
    configure_logging()
    settings = load_settings()
    tz = settings.tenant(tenant).tz if tenant in settings.tenants else "Asia/Shanghai"
    try:
        people = mapping_of(_read(voice, mapping)) if mapping is not None else None
        records = read_records(source, file, tz)
    except SourceError as exc:
        voice.fail("Cannot import {file}: {detail}", code=2, file=file.name, detail=str(exc))
    core = build_core(settings)
    try:
        shown = sys.stderr.isatty() if progress is None else progress
        with tqdm(total=len(records), unit="line", disable=not shown, file=sys.stderr, leave=False) as bar:
            summary = import_records(core, tenant, records, source=source, person=person, mapping=people, tz=tz,
                                     progress=lambda: bar.update(1))
    except ManyOwners as exc:  # refused before anything was written
        shown_ids = ", ".join(o[:40] for o in exc.owners[:10]) + (" …" if len(exc.owners) > 10 else "")
        voice.fail("{file} holds the memories of several people ({owners}), not one person's: "
                   "map each id to a person with --map FILE. Nothing was imported.", code=2, file=file.name,
                   owners=shown_ids)
    finally:
        core.close()
    voice.say_n("Read {n} line of {file}.", "Read {n} lines of {file}.", summary.read, file=file.name)
    voice.say_n("Imported {n} memory.", "Imported {n} memories.", summary.memories)
    skipped = sum(summary.skipped.values())
    if skipped:
        voice.say_n("Skipped {n} line:", "Skipped {n} lines:", skipped)
    else:
        voice.say("No line was skipped.")
    for reason, n in sorted(summary.skipped.items()):
        voice.say("  skipped {n}: {why}", n=n, why=translate(voice.lang, _REASONS.get(reason, reason)))
    for p in summary.problems:
        voice.say("  line {line}: {reason} {detail}", line=p.line, reason=translate(voice.lang, _REASONS[p.reason]),
                  detail=p.detail, err=True)
