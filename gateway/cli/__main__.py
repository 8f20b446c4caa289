"""``python -m gateway.cli``: the ``huiyi`` command line."""

from gateway.cli.main import app

app()
