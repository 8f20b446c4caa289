"""Alembic revisions of the store, oldest first by ``down_revision``."""
