"""Small helpers shared by the pure platform parsers."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

__all__ = ["epoch_utc"]


def epoch_utc(value: object, log: logging.Logger, what: str) -> datetime | None:
    """Epoch seconds (int or float, not bool) as an aware UTC datetime; None with a
    WARNING on ``log`` naming ``what`` when it is missing, not a number or out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        log.warning("%s without numeric time, ignored", what)
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        log.warning("%s has an out-of-range time, ignored", what)
        return None
