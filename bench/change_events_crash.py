"""How long a change-event backlog waits after its sender is killed (kill -9).

A child process runs a ``ChangeEventSender`` whose receiver never answers, so
it holds claims on the whole backlog (``N`` events of one tenant) when it is
killed with SIGKILL; then a sender in this process, with a receiver that
answers 204, starts at once. Printed: seconds from the kill until the last
event of the backlog reached the new receiver (one JSON line).

    .venv/bin/python -m bench.change_events_crash [--backend sqlite|postgres] [--events 20]

Runs against whatever ``gateway.webhooks`` and ``memory.store`` are importable
(PYTHONPATH), so the same script measures an older tree: run it from that tree.
PostgreSQL: ``HUIYI_TEST_PG_URL`` (default ``postgresql://root@127.0.0.1:5432/test``),
in a schema of its own, dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHILD = r"""
import asyncio, sys
import httpx
from gateway.config import ChangeEventSettings
from gateway.webhooks import ChangeEventSender
from memory.store import Store

url, schema, hook, secret = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4]
store = Store(url, schema=schema)

async def main():
    async with httpx.AsyncClient() as http:
        ChangeEventSender(store, {"default": ChangeEventSettings(url=hook, secret=secret, timeout_s=60)}, http,
                          poll_s=0.1).start()
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def _server(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def measure(backend: str, n: int) -> dict:
    """Seconds from the kill to the whole backlog delivered by the next sender (module docstring)."""
    import httpx

    from gateway.config import ChangeEventSettings
    from gateway.webhooks import ChangeEventSender
    from memory.store import Store
    from memory.store.events import ADDED, _emit
    from memory.types import Namespace

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    tmp = tempfile.TemporaryDirectory()
    if backend == "sqlite":
        url, schema = f"sqlite:///{Path(tmp.name) / 'huiyi.db'}", None
    else:
        url, schema = os.environ.get("HUIYI_TEST_PG_URL", "postgresql://root@127.0.0.1:5432/test"), f"crash_{uuid.uuid4().hex[:8]}"
    store = Store(url, schema=schema)
    ns = Namespace("default", "tg:42")
    with store._write_conn() as conn:
        _emit(conn, frozenset({"default"}), ns, ADDED, [(uuid.uuid4().hex[:12], 1) for _ in range(n)])
    claimed, gate, got = threading.Event(), threading.Event(), set()
    lock = threading.Lock()

    class Hang(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            claimed.set()
            gate.wait(120)

        def log_message(self, *args):
            pass

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with lock:
                got.add(self.headers["webhook-id"])
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    hang, ok = _server(Hang), _server(Ok)
    root = Path.cwd()
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, schema or "", f"http://127.0.0.1:{hang.server_port}/h",
                              secret], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        if not claimed.wait(120):
            raise RuntimeError("the child sender never claimed the backlog")
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        killed = time.monotonic()

        async def drain() -> float:
            async with httpx.AsyncClient() as http:
                sender = ChangeEventSender(store, {"default": ChangeEventSettings(
                    url=f"http://127.0.0.1:{ok.server_port}/h", secret=secret)}, http)
                sender.start()
                try:
                    while True:
                        with lock:
                            if len(got) >= n:
                                return time.monotonic() - killed
                        if time.monotonic() - killed > 600:
                            raise RuntimeError("backlog not delivered within 600 s")
                        await asyncio.sleep(0.05)
                finally:
                    await sender.stop()

        wait_s = asyncio.run(drain())
    finally:
        if child.poll() is None:
            child.kill()
        gate.set()
        hang.shutdown()
        ok.shutdown()
        store.close()
        if schema:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        tmp.cleanup()
    return {"backend": backend, "events": n, "backlog_wait_s": round(wait_s, 2),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--events", type=int, default=20)
    args = ap.parse_args()
    print(json.dumps(measure(args.backend, args.events)))


if __name__ == "__main__":
    main()
