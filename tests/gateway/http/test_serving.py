"""The gateway's HTTP server (``gateway.http.serving``) never closes a pooled keep-alive
connection under a request that arrived while its event loop was stalled, and leaves an idle
loop asleep (one tick a second) without being slower to exit."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest

from email.utils import parsedate_to_datetime

from gateway.http.serving import KEEP_ALIVE_S, TICK_S, gateway_server, server_config
from tests.fake_openai import free_port

KEEP_ALIVE = 0.5  # seconds: the test's own, short keep-alive
STALL_AFTER = 0.2  # the loop stalls this long after an /arm answer, so the keep-alive runs out inside the stall
STALL = 2.0  # seconds the loop stays blocked inside an I/O callback, as it does waiting for the GIL


async def _app(scope, receive, send) -> None:
    """Echoes a POST's JSON body; ``/arm`` also blocks the loop inside an I/O callback
    (the poll phase, where a wait for the GIL lands) from STALL_AFTER to STALL_AFTER + STALL."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = "startup" if message["type"] == "lifespan.startup" else "shutdown"
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/arm":
        loop = asyncio.get_running_loop()
        reader, writer = socket.socketpair()

        def stall() -> None:
            loop.remove_reader(reader)
            time.sleep(STALL)
            reader.close()
            writer.close()

        loop.add_reader(reader, stall)
        loop.call_later(STALL_AFTER, writer.send, b"x")
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server():
    """The server ``huiyi serve`` runs, configured as it is, with a 0.5 s keep-alive."""
    port = free_port()
    srv = gateway_server(server_config(_app, host="127.0.0.1", port=port, log_level="warning",
                                       timeout_keep_alive=KEEP_ALIVE))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        assert thread.is_alive(), "server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def test_a_request_sent_during_a_loop_stall_is_answered_not_reset(server):
    """The keep-alive of a pooled connection runs out while the loop is blocked and a request already waits
    in its socket: the request is read and answered (uvloop closed it first: httpx.ReadError), zh and en."""
    said = {"text": "我刚到 Lisbon 🎉，明天去看海！", "chat": "u7"}

    async def run() -> dict:
        async with httpx.AsyncClient(base_url=server, limits=httpx.Limits(max_connections=1)) as client:
            first = await client.post("/arm", json={"text": "hello 你好"})
            assert first.status_code == 200
            await asyncio.sleep(STALL_AFTER + KEEP_ALIVE / 2)  # inside the stall, before the keep-alive ran out
            answer = await client.post("/echo", json=said)
            return answer.json()

    assert asyncio.run(run()) == said


def test_the_keep_alive_outlasts_the_usual_clients_pool_expiry():
    """An idle connection is closed by the client first: the server keeps it longer than httpx's pool does."""
    assert KEEP_ALIVE_S > httpx.Limits().keepalive_expiry
    config = server_config(_app, host="127.0.0.1", port=1)
    assert (config.timeout_keep_alive, config.loop) == (KEEP_ALIVE_S, "asyncio")


def _started(srv) -> threading.Thread:
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        assert thread.is_alive(), "server did not start"
        time.sleep(0.01)
    return thread


def test_an_idle_gateway_server_ticks_once_a_second_and_keeps_its_date_header_current():
    """Idle for 2.5 s, ``huiyi serve``'s server runs its tick at most 4 times (uvicorn's own: 25, waking the loop
    each time) and its answers still carry the current Date (renewed every tick)."""
    assert TICK_S >= 1.0
    port = free_port()
    srv = gateway_server(server_config(_app, host="127.0.0.1", port=port, log_level="warning"))
    ticks: list[int] = []
    inner = srv.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await inner(counter)

    srv.on_tick = counted
    thread = _started(srv)
    try:
        ticks.clear()
        time.sleep(2.5)
        idle = len(ticks)
        answer = httpx.post(f"http://127.0.0.1:{port}/echo", json={"text": "你好 hello"})
    finally:
        srv.should_exit = True
        thread.join(10)
    assert 1 <= idle <= 4, ticks
    said = parsedate_to_datetime(answer.headers["date"]).timestamp()
    assert abs(said - time.time()) <= TICK_S + 1.5


def test_a_gateway_server_told_to_exit_stops_without_waiting_for_its_tick():
    """``should_exit`` set from another thread ends ``run()`` well within one tick."""
    srv = gateway_server(server_config(_app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = _started(srv)
    time.sleep(0.3)  # inside a tick's sleep
    t0 = time.perf_counter()
    srv.should_exit = True
    thread.join(10)
    assert not thread.is_alive() and time.perf_counter() - t0 < TICK_S / 2
