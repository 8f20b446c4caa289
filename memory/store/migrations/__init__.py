"""The store's Alembic environment: ``env.py`` and the revisions in ``versions/``.

Alembic owns the schema. ``memory.store.migrate`` drives it programmatically
(no ``alembic.ini`` at run time): an empty database gets today's tables and is
stamped at the head revision, any other is upgraded to the head; ``huiyi db
upgrade`` does the same on demand. A new revision for a model change in
``memory/store/tables.py``::

    alembic -x url=sqlite:///data/huiyi.db -c memory/store/migrations/alembic.ini \\
        revision --autogenerate -m "what changed"

then edit it until it is right on SQLite *and* PostgreSQL (a NOT NULL column
added to a table with rows needs a server default both accept).
"""
