"""``huiyi db`` — the database schema, owned by Alembic (``memory.store.migrate``).

upgrade   bring the configured database to this version's schema (the gateway
          also does it when it starts; run it first to see what it does)
current   print the revision the database is at, and this version's head
"""

from __future__ import annotations

import typer

from gateway.config import load_settings
from gateway.logs import configure_logging

__all__ = ["db_app"]

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
    try:
        store = _store()
        try:
            empty = store.schema_revision() is None and store.is_new()
            before, after = store.upgrade_schema()
        finally:
            store.close()
    except StoreError as exc:
        typer.echo(f"database upgrade failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    if before == after:
        typer.echo(f"database already at revision {after}")
    elif empty:
        typer.echo(f"new database: today's tables created at revision {after}")
    else:
        typer.echo(f"database upgraded from {before or 'an unversioned schema'} to revision {after}")


@db_app.command()
def current() -> None:
    """Print the database's revision and this version's head revision."""
    from memory.errors import StoreError
    from memory.store.migrate import head

    configure_logging()
    missing = _no_database_yet()
    if missing is not None:
        typer.echo(f"database revision: none (no database yet at {missing}; `huiyi db upgrade` or the gateway "
                   f"creates it); head: {head()}")
        return
    try:
        store = _store()
        try:
            rev = store.schema_revision()
        finally:
            store.close()
    except StoreError as exc:
        typer.echo(f"database unreachable: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"database revision: {rev or 'none (empty, or written before migrations)'}; head: {head()}")
