"""Logging set-up for the gateway's processes (the CLI and ``huiyi serve``).

Library modules only call ``logging.getLogger(__name__)``; handlers are
configured here, once, by the process entry point.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["configure_logging"]

#: Libraries whose INFO lines drown the gateway's own.
NOISY = ("jieba", "httpx", "urllib3")


def configure_logging(verbose: bool = False) -> None:
    """Log to stderr at INFO (DEBUG with ``verbose``), one line per record."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
