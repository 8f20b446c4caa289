"""``huiyi``, the command line (typer): the root app and its core commands in
``main``; one module per command group (``db``, ``keys``, ``memories``,
``telegram``, ``evaluate``); ``lang``, the operator's language of them all.
``gateway.cli.app`` stays the root app's name."""

from gateway.cli.main import InputError, app, version

__all__ = ["app", "version", "InputError"]
