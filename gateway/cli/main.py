"""``huiyi`` — the command line (typer).

serve     run the HTTP gateway (uvicorn) on HUIYI_HOST:HUIYI_PORT (127.0.0.1:8080)
replay    run platform payload files through the pipeline, one JSON line per person-message
recall    print the hits of a query for one subject, with scores and channel ranks
reindex   rebuild the search index from SQL
consolidate  sleep consolidation now: one tenant's people (or --subject), one JSON line each
stats     one day of turns: reconstruction success, fallback reasons, latencies (gateway.cli.evaluate)
eval      offline evaluations, e.g. ``eval grounding`` (gateway.cli.evaluate)
telegram  set-webhook / delete-webhook for a tenant's Telegram bot
memories  list | show | history | forget | forget-subject of one person (gateway/cli/memories.py)
config    check: validate the configuration and print it, secrets masked
db        upgrade | current: the database schema, by Alembic (gateway/cli/db.py)
keys      create | list | revoke API keys of the /v1 HTTP API (gateway/cli/keys.py)
events    status | dead | replay: change events of the tenants' webhooks (gateway/cli/events.py)
import    --from sillytavern|mem0|livingmemory|maibot|jsonl FILE: memories brought over from another bot (gateway/cli/importing.py)

``huiyi --version`` prints the installed version; ``-h`` is ``--help``. A
configuration error (``gateway.config.ConfigError``) or a user's input error
(``InputError``: a payload file that is missing, unreadable or not UTF-8, a query
that is not UTF-8 text; ``memory.errors.NamespaceError``: a tenant or subject
outside its pattern) from any command prints one line on stderr, ``huiyi: <what
is wrong>``, and exits 2, without a traceback.

Messages are in the operator's language: the shell's locale (``LC_ALL``, then
``LC_MESSAGES``, then ``LANG``), else the tenant's, else the default
(gateway.cli.lang); one that finds nothing — a replayed turn without a reply, a
recall without hits — says why and what to do. JSON output keeps its keys; its
``note`` fields are such messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from gateway.cli.evaluate import eval_app, stats
from gateway.cli.lang import Voice, no_memories, no_model, sentences, subject_hint
from gateway.config import ConfigError, load_settings, masked
from gateway.logs import configure_logging
from locales import translate, translate_plural

__all__ = ["app", "version", "InputError"]

#: exit status of a command stopped by its configuration or its input
CONFIG_EXIT = 2


class InputError(Exception):
    """What the user gave a command cannot be used (a missing or undecodable
    file, text that is not UTF-8): one line on stderr and exit 2."""


class _Group(TyperGroup):
    """The root command group: every subcommand runs inside it, so a
    ConfigError, InputError or NamespaceError from any of them becomes one line
    on stderr and exit 2."""

    def invoke(self, ctx):
        from memory.errors import NamespaceError

        try:
            return super().invoke(ctx)
        except (ConfigError, InputError, NamespaceError) as exc:
            typer.echo(f"huiyi: {exc}", err=True)
            raise typer.Exit(CONFIG_EXIT) from None


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, rich_markup_mode="markdown",
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="huiyi (回忆): a memory gateway for companion bots")
log = logging.getLogger("huiyi")


def version() -> str:
    """The installed distribution's version (``importlib.metadata``); from a
    source checkout that is not installed, ``pyproject.toml``'s; else ``unknown``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("huiyi")
    except PackageNotFoundError:
        import tomllib

        try:
            meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
            return str(meta["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"huiyi {version()}")
        raise typer.Exit()


@app.callback()
def _root(show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                     help="print the version and exit")] = False) -> None:
    """huiyi (回忆): a memory gateway for companion bots."""


config_app = typer.Typer(no_args_is_help=True, help="the configuration: check")


@config_app.command("check")
def config_check() -> None:
    """Validate the configuration (environment over HUIYI_CONFIG's TOML) and print
    the effective settings as JSON, every secret shown as ***. Exit 2 when invalid."""
    settings = load_settings()
    typer.echo(json.dumps(masked(settings), ensure_ascii=False, indent=2))
    Voice.of(None, settings).say_n("configuration OK: {n} tenant: {names}", "configuration OK: {n} tenants: {names}",
                                   len(settings.tenants), err=True, names=", ".join(sorted(settings.tenants)))


@app.command()
def serve(host: Annotated[str | None, typer.Option(help="listen address")] = None,
          port: Annotated[int | None, typer.Option(help="listen port")] = None,
          polling: Annotated[bool, typer.Option(help="long-poll Telegram instead of its webhook (development)")] = False) -> None:
    """Run the gateway (embedded defaults: SQLite + local LanceDB + offline embedder)."""
    # the configuration first: an error exits 2 in the time Python takes to start, before the web
    # stack is imported, so a container's restart policy gives up on it within seconds
    settings = load_settings()
    from gateway.http.app import create_app
    from gateway.http.serving import gateway_server, server_config

    # one JSON object per line; a person's words only when the privacy switch allows (gateway.logs)
    configure_logging(json_logs=True, allow_text=settings.audit_fragments)
    # slow and hostile clients: a bound on connections at once (503 beyond it); the body itself
    # must arrive within settings.body_timeout_s (gateway.http.bodies); the event loop and the
    # keep-alive that never close a connection under a request already sent: gateway.http.serving
    gateway_server(server_config(create_app(settings, telegram_polling=polling, freeze_gc=True),
                                 host=host or settings.host, port=port or settings.port,
                                 limit_concurrency=settings.max_connections)).run()


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _load_payloads(path: Path, lang: str):
    from bridges.detect import iter_payloads

    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(translate(lang, "{path}: not UTF-8 text (byte {byte}); payload files are UTF-8 JSON or JSONL",
                                   path=str(path), byte=exc.start)) from None
    except OSError as exc:  # missing, a directory, no permission
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    try:
        yield from iter_payloads(json.loads(raw))
    except json.JSONDecodeError:
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    yield from iter_payloads(json.loads(line))
                except json.JSONDecodeError:
                    log.warning("%s:%d is not JSON; skipped", path, n)


@app.command()
def replay(paths: Annotated[list[Path], typer.Argument(help="payload files: one payload, a JSON array, or JSONL")],
           tenant: Annotated[str, typer.Option(help="tenant to replay into")] = "default",
           progress: Annotated[bool | None, typer.Option("--progress/--no-progress",
                                                         help="progress bar on stderr (default: when a terminal)")] = None) -> None:
    """Replay Telegram/OneBot payloads through the pipeline; one JSON line per person-message."""
    from tqdm import tqdm

    from bridges.detect import detect_platform
    from bridges.qq.parse import parse_event
    from bridges.telegram.parse import parse_update
    from gateway.service import build_pipeline

    configure_logging()
    settings = load_settings()
    voice = Voice.of(tenant, settings)
    work = []
    for path in paths:
        if not path.exists():
            raise InputError(translate(voice.lang, "{path}: no such file or directory", path=str(path)))
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        work.extend((f, payload) for f in files for payload in _load_payloads(f, voice.lang))
    show = sys.stderr.isatty() if progress is None else progress
    pipeline = build_pipeline(settings)
    t = pipeline.tenant(tenant)
    modelled = pipeline.models.of(tenant) is not None
    if not modelled:
        typer.echo("huiyi: " + sentences(voice.lang, translate(
            voice.lang, "Tenant {tenant} has no chat model configured: every reply is null (recall, the recollection, "
                        "the prompt and capture still run).", tenant=tenant), no_model(voice.lang, tenant)), err=True)

    async def run() -> None:
        with tqdm(total=len(work), unit="payload", desc=translate(voice.lang, "replaying"), disable=not show,
                  file=sys.stderr) as bar:
            for f, payload in work:
                bar.update(1)
                platform = detect_platform(payload)
                if platform == "tg":
                    msg = parse_update(payload, bot_id=t.telegram_bot_id, bot_username=t.telegram_bot_username)
                elif platform == "qq":
                    msg = parse_event(payload)
                else:
                    log.info("%s: not a platform payload; skipped", f)
                    continue
                if msg is None:
                    continue
                result = await pipeline.handle(tenant, msg)
                out = result.to_json()
                out.pop("latency_ms", None)
                if result.reply is None:
                    out["note"] = _no_reply(voice.lang, tenant, msg, result, modelled)
                # through tqdm so that the bar is redrawn below the line, not across it
                bar.write(json.dumps(out, ensure_ascii=False, default=str), file=sys.stdout)
                sys.stdout.flush()

    try:
        asyncio.run(run())
    finally:
        pipeline.core.close()


def _no_reply(lang: str, tenant: str, msg, result, modelled: bool) -> str:
    """Why the replayed turn of ``msg`` has no reply (``TurnResult.reply`` None):
    a re-delivery, an edit, a group message not addressed to the bot, no chat
    model (and how to set one), or the model's silence."""
    if result.duplicate:
        return translate(lang, "A re-delivery of a message this data root has already handled: nothing was done "
                               "(replay into an empty HUIYI_DATA_DIR to run it again).")
    if result.command:
        return translate(lang, "A /memory command that answered nothing.")
    if msg.is_edit:
        return translate(lang, "An edited message: its memories were revised; an edit gets no reply.")
    if not result.addressed:
        return translate(lang, "Said in a group without addressing the bot (no mention, no reply to it, none of "
                               "the tenant's group_keywords): the bot stays silent.")
    if not modelled:
        return sentences(lang, translate(lang, "No chat model is configured for tenant {tenant}: the prompt was "
                                               "built but sent to no model.", tenant=tenant), no_model(lang, tenant))
    return translate(lang, "The chat model answered nothing, or it failed and the tenant's apology is empty: the "
                           "bot stays silent (the log says which).")


@app.command()
def recall(query: Annotated[str, typer.Argument(help="query text")],
           tenant: Annotated[str, typer.Option(help="tenant")] = "default",
           subject: Annotated[str, typer.Option(help="subject, e.g. tg:123456")] = ...,  # type: ignore[assignment]
           k: Annotated[int, typer.Option(help="hits to return")] = 8,
           explain: Annotated[bool, typer.Option(help="print every score component")] = False) -> None:
    """Print the hits of QUERY for one subject as JSON (none: stderr says why)."""
    from memory.recall import RecallParams
    from gateway.service import build_core

    voice = Voice.of(tenant)
    if not _is_utf8(query) or not _is_utf8(subject):  # bytes the terminal could not decode (surrogateescape)
        raise InputError(translate(voice.lang, "the query or subject is not UTF-8 text; check the terminal's encoding"))
    if not query.strip():
        raise InputError(translate(voice.lang, "the query is empty: give the words to search for, e.g. "
                                               "huiyi recall --subject {subject} 猫", subject=subject))
    ns = _namespace(voice, tenant, subject)  # one line, exit 2, before the store opens
    configure_logging()
    settings = load_settings()
    core = build_core(settings)
    try:
        from memory.emotion import analyse

        valence = analyse(query).valence
        hits = core.recall(ns, [query], params=RecallParams(k=k), query_valence=valence)
        out = []
        for h in hits:
            row = {"id": h.memory.id, "text": h.memory.text, "score": round(h.score, 6), "ranks": h.ranks,
                   "category": h.memory.category.value}
            if explain and h.parts is not None:
                row["parts"] = {f: round(getattr(h.parts, f), 6) for f in h.parts.__dataclass_fields__}
            out.append(row)
        sys.stdout.write(json.dumps({"namespace": str(ns), "query_valence": valence, "hits": out},
                                    ensure_ascii=False, indent=2) + "\n")
        if not hits:
            count = core.store.count(ns)
            typer.echo(translate(voice.lang, "No memory of {namespace} matches \"{query}\": recall keeps only "
                                             "memories that share a word with the query or are close to it in "
                                             "meaning, and never widens a search that found nothing (memories "
                                             "searched: {count}).", namespace=str(ns), query=query, count=count)
                       if count else no_memories(voice.lang, ns, settings), err=True)
    finally:
        core.close()


def _namespace(voice: Voice, tenant: str, subject: str):
    """``Namespace(tenant, subject)``, or InputError (one line, exit 2) naming
    what is wrong and, for a subject, how one is written."""
    from memory.errors import NamespaceError
    from memory.types import Namespace

    try:
        return Namespace(tenant, subject)
    except NamespaceError as exc:
        hint = subject_hint(voice.lang, subject) or ""
        raise InputError(translate(voice.lang, "Invalid tenant or subject: {detail}",
                                   detail=f"{exc} {hint}".strip())) from None


@app.command()
def reindex(progress: Annotated[bool | None, typer.Option("--progress/--no-progress",
                                                          help="progress bar on stderr (default: when a terminal)")] = None) -> None:
    """Rebuild the LanceDB index from SQL (progress bar on a terminal), however
    corrupt the old one is."""
    from memory.admin import OPERATOR
    from memory.admin import reindex as do_reindex
    from gateway.service import build_core

    configure_logging()
    settings = load_settings()
    voice = Voice.of(None, settings)
    core = build_core(settings, rebuild="none")  # an unreadable index is replaced, then rebuilt here
    try:
        n = do_reindex(core, OPERATOR, progress=progress)
        if n:
            voice.say_n("reindexed {n} memory", "reindexed {n} memories", n)
        else:
            voice.say("reindexed 0 memories: the database ({database}) holds none; is it the gateway's "
                      "(HUIYI_DATA_DIR, DATABASE_URL)?", database=masked(settings)["database_url"]
                      or str(settings.data_dir / "huiyi.db"))
    finally:
        core.close()


@app.command()
def consolidate(tenant: Annotated[str, typer.Option(help="tenant")] = "default",
                subject: Annotated[str | None, typer.Option(
                    help="one subject, e.g. tg:123456 (default: everyone of the tenant with new fragments)")] = None,
                limit: Annotated[int, typer.Option(min=1, help="most people consolidated in one call")] = 1000) -> None:
    """Consolidate now: each person's new fragments become long-term memories.

    ``memory.consolidate``: cluster each person's new fragments,
    abstract the clusters with the tenant's chat model (links only without one:
    a warning on stderr first), then run the dormancy sweep; one JSON line per
    person, whose ``note`` says why no long-term memory was written (``no chat
    model configured``, or the model failed and the run is tried again later).
    Ignores the idle, interval and minimum-fragment thresholds of the maintenance
    task. ``--limit`` below 1 is a usage error (exit 2)."""
    from gateway.errors import UnknownTenant
    from gateway.service import build_pipeline
    from memory.types import Namespace

    settings = load_settings()
    voice = Voice.of(tenant, settings)
    if subject is not None:
        _namespace(voice, tenant, subject)  # one line, exit 2, before the store opens
    configure_logging()
    pipeline = build_pipeline(settings)
    try:
        pipeline.tenant(tenant)
    except UnknownTenant as exc:
        pipeline.core.close()
        raise InputError(translate(voice.lang, "Unknown tenant {tenant}: configure it first (HUIYI_CONFIG).",
                                   tenant=tenant)) from exc
    if pipeline.models.of(tenant) is None:
        typer.echo("huiyi: " + sentences(voice.lang, translate(
            voice.lang, "Tenant {tenant} has no chat model configured: clusters are kept as links only and no "
                        "long-term memory is written.", tenant=tenant), no_model(voice.lang, tenant)), err=True)

    async def run() -> None:
        names = ([Namespace(tenant, subject)] if subject is not None else
                 await asyncio.to_thread(pipeline.core.store.consolidation_candidates, tenant, 1, limit))
        if not names:
            voice.say("No one in tenant {tenant} has new fragments to consolidate: everything captured since the "
                      "last run is consolidated already, or nothing was captured yet.", err=True, tenant=tenant)
        for ns in names:
            r = await pipeline.consolidation.consolidate(tenant, ns, force=True)
            sys.stdout.write(json.dumps({
                "namespace": str(ns), "skipped": r.skipped, "fragments": r.fragments, "clusters": len(r.clusters),
                "abstractions": [{"id": a.memory_id, "type": a.ctype, "confidence": a.confidence,
                                  "sources": list(a.sources)} for a in r.abstractions],
                "model_calls": r.model_calls, "model_errors": r.model_errors,
                "removed_sentences": r.removed_sentences, "dropped": r.dropped, "seconds": r.seconds,
                "note": _consolidation_note(voice.lang, r)}, ensure_ascii=False) + "\n")
        dormant = await pipeline.consolidation.consolidator(tenant).sweep(tenant)
        sys.stdout.write(json.dumps({"tenant": tenant, "went_dormant": dormant}) + "\n")

    try:
        asyncio.run(run())
    finally:
        pipeline.core.close()


def _consolidation_note(lang: str, r) -> str | None:
    """Why a run wrote no long-term memory, in ``lang`` (None when it wrote
    some): no new fragment since the last run, no two fragments alike, no chat
    model (clusters, no model call), or the model failed (retried by a later run)."""
    if r.skipped == "few_fragments":
        return translate(lang, "No new fragments since the last consolidation of {namespace}: nothing to do.",
                         namespace=str(r.namespace))
    if r.skipped is not None:  # too_soon: not with --force, which the command uses
        return None
    if not r.clusters:
        return translate_plural(lang, "The {n} new fragment has nothing close enough to form a cluster: nothing to "
                                      "abstract yet.", "None of the {n} new fragments is close enough to another to "
                                      "form a cluster: nothing to abstract yet.", r.fragments)
    if r.model_errors:
        return translate_plural(lang, "the chat model failed for {errors} of {n} cluster: no long-term memory from "
                                      "it; it is tried again later", "the chat model failed for {errors} of {n} "
                                      "clusters: no long-term memory from those; they are tried again later",
                                      r.model_calls, errors=r.model_errors)
    if r.model_calls == 0:
        return translate_plural(lang, "kept {n} cluster as links, no long-term memory written (no chat model "
                                      "configured)", "kept {n} clusters as links, no long-term memory written (no "
                                      "chat model configured)", len(r.clusters))
    return None


app.command()(stats)
app.add_typer(eval_app, name="eval")
from gateway.cli.telegram import telegram_app  # noqa: E402 - command groups register after the core commands

app.add_typer(telegram_app, name="telegram")

from gateway.cli.memories import memories_app  # noqa: E402 - registered after the commands above

app.add_typer(memories_app, name="memories")
app.add_typer(config_app, name="config")

from gateway.cli.db import db_app  # noqa: E402 - registered after the commands above

app.add_typer(db_app, name="db")

from gateway.cli.keys import keys_app  # noqa: E402 - registered after the commands above

app.add_typer(keys_app, name="keys")

from gateway.cli.events import events_app  # noqa: E402 - registered after the commands above

app.add_typer(events_app, name="events")

from gateway.cli.importing import import_memories  # noqa: E402 - registered after the commands above

app.command(name="import")(import_memories)
