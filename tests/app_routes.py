"""The routes an app serves, for the tests that check every route of a surface
(``/v1``, ``/console``): FastAPI keeps an included router as one entry."""

from __future__ import annotations


def flat_routes(routes):
    """``routes`` with included routers opened, recursively."""
    for r in routes:
        if hasattr(r, "original_router"):
            yield from flat_routes(r.original_router.routes)
        else:
            yield r
