"""Logging set-up for the gateway's processes (the CLI and ``huiyi serve``):
structlog over the standard library.

Library modules only call ``logging.getLogger(__name__)`` (fields go in
``extra=``); handlers are configured here, once, by the process entry point.
Every record passes the same structlog processors — context variables (the
``turn_id`` the pipeline binds per turn, ``bind_turn``), level, logger name,
ISO 8601 UTC timestamp, the ``extra`` fields, exception text — and is rendered
as one JSON object per line (``huiyi serve``) or as ``key=value`` console text
(the other commands).

Privacy: the fields in ``TEXT_FIELDS`` (a person's words, the model's reply,
the recollection, the prompt) are dropped from every record unless
``allow_text`` is set, which ``huiyi serve`` takes from the one privacy switch,
``Settings.audit_fragments`` (off by default: logs and the turn audit hold ids
and numbers, never what someone said).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid
from collections.abc import Iterator
from typing import IO

import structlog

__all__ = ["configure_logging", "bind_turn", "new_turn_id", "current_turn_id", "TEXT_FIELDS"]

#: Libraries whose INFO lines drown the gateway's own.
NOISY = ("jieba", "httpx", "urllib3", "alembic")
#: Fields that carry what someone said or was told: logged only with ``allow_text``.
TEXT_FIELDS = frozenset({"text", "message_text", "reply", "recollection", "prompt", "fragments", "reconstruction"})
_HANDLER_NAME = "huiyi"


def new_turn_id() -> str:
    """A fresh turn id: 16 hex characters."""
    return uuid.uuid4().hex[:16]


def current_turn_id() -> str:
    """The turn id bound by ``bind_turn`` in this context, "" outside a turn."""
    return str(structlog.contextvars.get_contextvars().get("turn_id", ""))


@contextlib.contextmanager
def bind_turn(turn_id: str, **fields: object) -> Iterator[str]:
    """Bind ``turn_id`` (and ``fields``: ids only) to every log record written
    in this context — in this task, the threads it hands work to
    (``asyncio.to_thread`` copies the context) and the tasks it creates —
    until the block ends. Yields the turn id."""
    with structlog.contextvars.bound_contextvars(turn_id=turn_id, **fields):
        yield turn_id


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the moment of the record (a test
    runner or a CLI harness may swap it, and close the one it swapped in)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _drop_text(allow: bool):
    def processor(_logger, _name, event: dict) -> dict:
        event.pop("color_message", None)  # uvicorn's terminal-coloured copy of the message
        if not allow:
            for key in TEXT_FIELDS & event.keys():
                del event[key]
        return event

    return processor


def configure_logging(verbose: bool = False, *, json_logs: bool = False, allow_text: bool = False,
                      stream: IO[str] | None = None) -> logging.Handler:
    """Log to ``stream`` (stderr) at INFO (DEBUG with ``verbose``): one JSON
    object per line with ``json_logs``, else console text. ``allow_text`` keeps
    ``TEXT_FIELDS`` (module docstring). Calling it again replaces the handler it
    installed before. Returns the handler."""
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = structlog.processors.JSONRenderer(ensure_ascii=False) if json_logs else \
        structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _drop_text(allow_text),
                    structlog.processors.format_exc_info, renderer])
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # structlog's own loggers (structlog.get_logger) go through the same handler
    structlog.configure(processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
                        logger_factory=structlog.stdlib.LoggerFactory(),
                        wrapper_class=structlog.stdlib.BoundLogger, cache_logger_on_first_use=False)
    return handler
