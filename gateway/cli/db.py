"""``huiyi db`` — the database schema, owned by Alembic (``memory.store.migrate``).

upgrade   bring the configured database to this version's schema (the gateway
          also does it when it starts; run it first to see what it does)
current   print the revision the database is at, and this version's head

Messages are in the operator's language (gateway.cli.lang); revisions are
Alembic's ids.
"""

from __future__ import annotations

import typer

from gateway.cli.lang import Voice
from gateway.config import load_settings
from gateway.logs import configure_logging


class StoreSession:
    """The settings and the SQL store for one command (no index, no embedder):
    ``with StoreSession() as s: s.store…``; ``voice(tenant)`` speaks the
    operator's language for that tenant (gateway.cli.lang). Logging is set up
    first; the data root is created when missing."""

    def __init__(self) -> None:
        configure_logging()
        self.settings = load_settings()
        self.store = None

    def voice(self, tenant: str | None = None) -> Voice:
        return Voice.of(tenant, self.settings)

    def __enter__(self) -> StoreSession:
        from memory.store import Store

        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.settings.db_url)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()

__all__ = ["db_app", "StoreSession"]

db_app = typer.Typer(no_args_is_help=True, help="the database schema (Alembic migrations)")


def _store():
    from memory.store import Store

    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return Store(settings.db_url, migrate=False)


def _no_database_yet() -> str | None:
    """The path of the configured SQLite file when it does not exist yet (None
    otherwise): ``db current`` says so instead of creating an empty one."""
    settings = load_settings()
    if settings.database_url is None and not (settings.data_dir / "huiyi.db").exists():
        return str(settings.data_dir / "huiyi.db")
    return None


@db_app.command()
def upgrade() -> None:
    """Upgrade the database to this version's schema (one transaction; no row is dropped)."""
    from memory.errors import StoreError

    configure_logging()
    voice = Voice.of()
    try:
        store = _store()
        try:
            empty = store.schema_revision() is None and store.is_new()
            before, after = store.upgrade_schema()
        finally:
            store.close()
    except StoreError as exc:
        voice.fail("database upgrade failed: {detail}", code=1, detail=str(exc))
    if before == after:
        voice.say("database already at revision {revision}", revision=after)
    elif empty:
        voice.say("new database: today's tables created at revision {revision}", revision=after)
    elif before:
        voice.say("database upgraded from {before} to revision {revision}", before=before, revision=after)
    else:
        voice.say("database upgraded from an unversioned schema to revision {revision}", revision=after)


@db_app.command()
def current() -> None:
    """Print the database's revision and this version's head revision."""
    from memory.errors import StoreError
    from memory.store.migrate import head

    configure_logging()
    voice = Voice.of()
    missing = _no_database_yet()
    if missing is not None:
        voice.say("database revision: none (no database yet at {path}; `huiyi db upgrade` or the gateway creates "
                  "it); head: {head}", path=missing, head=head())
        return
    try:
        store = _store()
        try:
            rev = store.schema_revision()
        finally:
            store.close()
    except StoreError as exc:
        voice.fail("database unreachable: {detail}", code=1, detail=str(exc))
    if rev:
        voice.say("database revision: {revision}; head: {head}", revision=rev, head=head())
    else:
        voice.say("database revision: none (empty, or written before migrations: `huiyi db upgrade` brings it to "
                  "the head); head: {head}", head=head())
