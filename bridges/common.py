"""Small helpers shared by the pure platform parsers."""

from __future__ import annotations

import logging
import unicodedata
from datetime import UTC, datetime, timedelta

from bridges.contract import MAX_TEXT_CHARS

__all__ = ["epoch_utc", "clip_text", "FUTURE_SLACK", "is_blank", "said_text", "ignored_kind"]

#: How far ahead of the gateway's clock a platform time may be (clock skew);
#: anything later is taken as the time of receipt.
FUTURE_SLACK = timedelta(days=1)


def epoch_utc(value: object, log: logging.Logger, what: str, *, now: datetime | None = None) -> datetime | None:
    """Epoch seconds (int or float, not bool) as an aware UTC datetime.

    None with a WARNING on ``log`` naming ``what`` when the value is missing or
    not a number (the payload is not a message). A number out of range — before
    1970 (``-1``), more than FUTURE_SLACK after ``now`` (``4102444800``, year
    2100), or beyond what a datetime holds — is clamped to ``now`` (default: the
    current time, UTC) with a WARNING: the message is real, only its clock is
    not, and refusing it would make the platform redeliver it forever."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        log.warning("%s without numeric time, ignored", what)
        return None
    now = now or datetime.now(UTC)
    try:
        at = datetime.fromtimestamp(value, tz=UTC) if value >= 0 else None
    except (OverflowError, OSError, ValueError):
        at = None
    if at is None or at > now + FUTURE_SLACK:
        log.warning("%s has an out-of-range time (%r); the time of receipt is used", what, value)
        return now
    return at


def clip_text(text: str, log: logging.Logger, what: str) -> str:
    """``text`` cut to MAX_TEXT_CHARS characters (with a WARNING on ``log`` naming
    ``what`` and both lengths) when a platform delivers more than the gateway
    takes; unchanged otherwise. A platform's message is never refused for length:
    it would be redelivered forever."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    log.warning("%s has %d characters; cut to %d", what, len(text), MAX_TEXT_CHARS)
    return text[:MAX_TEXT_CHARS]


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing a person could read: whitespace (full-width
    too), control characters and invisible format characters (Unicode category Cf:
    zero-width space and joiner, word joiner, the BOM) only. A line like that is no
    turn: ``/v1/turns`` and ``/webhook`` answer 400 for it (``said_text``). Stops at the
    first visible character, so a line costs next to nothing on the event loop
    (``memory.text.normalise`` would say the same of a whole line, converting all of it)."""
    return not any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf") for ch in text)


def said_text(text: str) -> str:
    """``text`` unchanged, for a request model's ``AfterValidator`` on the line a person
    said. Raises ValueError (a 400 with the reason) when it ``is_blank``: an empty line had
    answered 200 and stayed in the chat's history of later prompts."""
    if is_blank(text):
        raise ValueError("text is empty or only whitespace or invisible characters")
    return text


def ignored_kind(log: logging.Logger, what: str, kind: object, known: frozenset[str]) -> None:
    """Log that an event, update or message of type ``kind`` was ignored (``what``
    names it: "telegram: update 5"): at DEBUG when the platform documents the type
    (``known``), which a bot receives routinely, else at INFO, so that a type nobody
    expected shows at the default level. ``kind`` may be anything a payload holds."""
    if isinstance(kind, str) and kind in known:
        log.debug("%s of type %r ignored", what, kind)
    else:
        log.info("%s of unknown type %.40r ignored", what, kind)
