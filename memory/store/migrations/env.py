"""Alembic environment of the store. Run by ``memory.store.migrate`` on a
connection it already holds in a transaction (``config.attributes``:
``connection``, ``schema``), or by the ``alembic`` command line with ``-x
url=…`` (and optionally ``-x schema=…``) for writing a revision.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import memory.store.tables  # noqa: F401 - registers the tables on SQLModel.metadata
from memory.store.tables import _normalise_url

config = context.config


def _run(connection, schema: str | None) -> None:
    context.configure(connection=connection, target_metadata=SQLModel.metadata, version_table_schema=schema,
                      compare_type=True, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection, config.attributes.get("schema"))
else:  # the alembic command line
    args = context.get_x_argument(as_dictionary=True)
    engine = create_engine(_normalise_url(args["url"]))
    with engine.begin() as conn:
        if args.get("schema"):
            conn.exec_driver_sql(f'SET search_path TO "{args["schema"]}"')
        _run(conn, args.get("schema"))
