"""Container health check of the huiyi image (Dockerfile HEALTHCHECK, compose).

Exit 0 when the gateway on 127.0.0.1:$HUIYI_PORT answers 200 on ``/readyz``
(database, index, model reachable), or — on a gateway older than ``/readyz``,
which answers it 404 — on ``/healthz``; exit 1 otherwise (refused, timeout, 503).
Standard library only: it runs in the image's Python with nothing else.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def status(path: str, port: str, timeout: float = 4.0) -> int:
    """HTTP status of GET ``path`` on the local gateway; 0 when unreachable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def main() -> int:
    port = os.environ.get("HUIYI_PORT", "8080")
    code = status("/readyz", port)
    if code == 404:
        code = status("/healthz", port)
    return 0 if code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
