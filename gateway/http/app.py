"""The HTTP gateway (FastAPI).

Routes: ``GET /healthz`` (the process answers), ``GET /readyz`` (database,
index and configured chat models answer: 200, else 503; ``gateway.http.health``),
``GET /metrics`` (Prometheus text, ``gateway.metrics``); ``/v1``
(``gateway.http.api_v1``: ``POST /v1/turns``, a platform-neutral message →
recollection, prompt, reply, and the memory API; keyed, ``gateway.http.auth``;
rate limited per address and per key, ``gateway.http.ratelimit``);
``POST /telegram/{tenant}`` (a Bot API Update,
``X-Telegram-Bot-Api-Secret-Token`` required; the reply is sent through the
Bot API); ``POST /onebot/{tenant}`` (a OneBot v11 HTTP POST event, signed or
with the access token; the reply goes back as a quick operation when it is
ready within ``onebot.reply_within`` seconds, else through the bot's API);
``GET``/``POST /wechat/{tenant}`` (Official Account / WeCom callbacks);
``POST /webhook/{tenant}`` (the generic signed JSON webhook);
``/console`` (the admin console in the browser, ``gateway.console``). With
``onebot.enabled`` NoneBot2 is mounted at the root after these routes
(``/onebot/v11/ws``, ``/onebot/v11/http``; see ``bridges.qq.host``). All of
them call the same pipeline. Malformed bodies answer 4xx with a reason;
wrong or missing signatures 401 with nothing processed; payloads that are not
a person's message answer 200 so platforms do not redeliver them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError

from bridges.replay import ReplayError, check_fresh, claim, fresh_nonce
from gateway.config import Settings, load_settings
from gateway.http import api_v1
from gateway.http.api_v1 import TurnRequest
from gateway.http.bodies import json_object as _json_body
from gateway.http.bodies import read_body as _body
from gateway.http.bodies import validation_errors as _errors
from gateway.errors import BadPayload, Unauthorized
from gateway.http.errors import install_handlers
from gateway.http.headers import SecurityHeaders
from gateway.maintenance import maintenance
from gateway.pipeline import Pipeline

__all__ = ["create_app", "TurnRequest", "API_TITLE"]

#: The OpenAPI document's title (``/openapi.json``, ``/docs``).
API_TITLE = "huiyi gateway API"

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, pipeline: Pipeline | None = None, *,
               telegram_polling: bool = False, freeze_gc: bool = False, warm: bool = True) -> FastAPI:
    """The FastAPI app. Builds the core on start-up (lifespan) unless a pipeline
    is given; runs the maintenance task (``gateway.maintenance``) beside it, and
    at shutdown lets the captures still queued finish. ``telegram_polling``
    long-polls Telegram for every tenant with a bot token (development;
    ``huiyi serve --polling``). With ``onebot.enabled`` the NoneBot2 host is
    mounted (nonebot is imported only then). ``freeze_gc`` (``huiyi serve``):
    once everything is loaded, move the start-up objects (models, jieba, the
    app: ~145k tracked objects) out of the cyclic collector's reach
    (``gc.freeze``), so a full collection no longer walks them in the middle of
    a turn (25–60 ms each, measured on 2 cores); a process that builds many
    apps (the tests) leaves it off. ``warm``: before the app says ready, load
    in worker threads what a first turn would load (``gateway.warmup``: the
    chat clients, the text tables, the search paths, FastAPI's route tables;
    aiogram, ``TelegramRuntime.prepare``, while ``/readyz`` says 503), so that no
    turn imports or builds them — on the event loop least of all."""
    cfg = settings or (pipeline.settings if pipeline is not None else load_settings())
    qq_host = None
    if cfg.onebot.enabled:
        from bridges.qq.host import NoneBotHost

        qq_host = NoneBotHost(cfg.onebot)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal pipeline
        import httpx

        from bridges.qq.http import OneBotHTTP
        from bridges.telegram.runtime import TelegramRuntime
        from bridges.webhook.runtime import WebhookRuntime
        from bridges.wechat.runtime import WeChatRuntime

        if pipeline is None:
            from gateway.service import build_pipeline

            pipeline = await asyncio.to_thread(build_pipeline, cfg)
        if warm:  # what the first turn would load, loaded now, off the loop (gateway.warmup)
            from gateway.warmup import warm_up

            await asyncio.to_thread(warm_up, pipeline)
        app.state.pipeline = pipeline
        await api_v1.announce(pipeline)
        http = httpx.AsyncClient(timeout=httpx.Timeout(10.0))
        app.state.telegram = TelegramRuntime(pipeline)
        if warm:
            app.state.telegram.prepare()  # aiogram loads in a worker thread; /readyz waits for it, sends too
        app.state.wechat = WeChatRuntime(pipeline, http)
        app.state.webhook = WebhookRuntime(pipeline, http)
        app.state.onebot = OneBotHTTP(pipeline, http)
        from gateway.http.health import Readiness

        console = getattr(app.state, "console", None)
        app.state.readiness = Readiness(pipeline, http, {"telegram": lambda: app.state.telegram.ready},
                                        console_fingerprint=console.fingerprint if console is not None else None)
        from gateway.http.ratelimit import ApiLimits

        app.state.api_limits = ApiLimits(pipeline.settings)  # read by api_v1._Guarded before the key and the body
        tasks = [asyncio.create_task(maintenance(pipeline)),
                 # which console secret this gateway signs with, for the others' /readyz (gateway.http.health)
                 await app.state.readiness.start_console_secret()]
        from gateway.webhooks import ChangeEventSender  # change events out (issue 26 item 17)

        app.state.change_events = ChangeEventSender(
            pipeline.core.store, {name: t.change_events for name, t in pipeline.settings.tenants.items()}, http,
            metrics=pipeline.metrics)
        pipeline.metrics.watch_events(pipeline.core.store.event_stats, sorted(app.state.change_events.tenants))
        app.state.change_events.start()
        from gateway.followups import FollowupSender, platform_senders  # issue 39 item 2

        senders, can_send = platform_senders(pipeline.settings, app.state.telegram, app.state.onebot,
                                             app.state.wechat, app.state.webhook)
        app.state.followups = FollowupSender(pipeline.core.store, pipeline.settings.tenants, senders,
                                             can_send=can_send, models=pipeline.models)
        app.state.followups.start()
        watch = None
        if cfg.loop_stall_warn_s > 0:  # a stall of the loop is logged with the frames that block it
            from gateway.loopwatch import LoopWatch

            watch = LoopWatch(cfg.loop_stall_warn_s)
            watch.start()
        if telegram_polling:
            tasks += [asyncio.create_task(app.state.telegram.poll(t)) for t in app.state.telegram.tenants_with_bots()]
        if warm:
            from gateway.warmup import warm_cache

            await _warm_routes(app)  # FastAPI builds its route tables on the first request: this one
            if cfg.cache_warm_namespaces:  # recall's cache, in the background: never delays readiness
                warm_cache(pipeline, cfg.cache_warm_namespaces)
        if freeze_gc:
            gc.collect()
            gc.freeze()
        try:
            async with qq_host.running(pipeline) if qq_host else contextlib.nullcontext():
                yield
        finally:
            await app.state.change_events.stop()
            await app.state.followups.stop()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            # the turns answered before their reply first (they queue captures), then the captures
            await asyncio.gather(app.state.wechat.close(), app.state.webhook.close(), app.state.telegram.close(),
                                 app.state.onebot.close())
            if not await pipeline.captures.drain(timeout=30):
                log.warning("shutdown: captures still running; they resume at the next start")
            try:  # the index writes still lingering (MemoryCore's index_linger_s)
                await asyncio.to_thread(pipeline.core.flush_index)
            except Exception as exc:  # noqa: BLE001 - the outbox keeps them for the next start's repair
                log.warning("shutdown: lingering index writes left to the outbox: %s", exc)
            try:  # the recall marks held in memory (memory.marks)
                await asyncio.to_thread(pipeline.core.flush_marks)
            except Exception as exc:  # noqa: BLE001 - shutting down; they are a ranking aid
                log.warning("shutdown: recall marks not written: %s", exc)
            await http.aclose()
            await app.state.api_limits.aclose()
            if watch is not None:
                await asyncio.to_thread(watch.stop)

    # the schema's title names what a generator makes of it (openapi-python-client: "<title>-client"): not
    # "huiyi", whose client would take the name of ours (huiyi-client, import huiyi_client)
    app = FastAPI(title=API_TITLE, version="0.1.0", lifespan=lifespan)
    app.state.body_timeout_s = cfg.body_timeout_s
    app.state.api_require_key = cfg.api_require_key  # read by gateway.http.auth before the body
    install_handlers(app)
    app.add_middleware(SecurityHeaders)  # after install_handlers' KeepAlive: outermost, so its 500s get them too

    def pl(request: Request) -> Pipeline:
        return request.app.state.pipeline

    @app.get("/healthz")
    async def healthz() -> dict:
        """Liveness: the process answers (no dependency is checked)."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: Request) -> JSONResponse:
        """Readiness: 200 when database, index and configured models answer, else 503 (``gateway.http.health``)."""
        readiness = getattr(request.app.state, "readiness", None)
        if readiness is None:
            return JSONResponse({"status": "not ready", "checks": {"startup": "pending"}}, status_code=503)
        verdict = await readiness.verdict()
        return JSONResponse(verdict.to_json(), status_code=200 if verdict.ready else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this app's pipeline (``gateway.metrics``)."""
        from gateway.metrics import CONTENT_TYPE

        body = await asyncio.to_thread(pl(request).metrics.render)  # the queue gauges read the database
        return Response(body, media_type=CONTENT_TYPE)

    @app.post("/telegram/{tenant}")
    async def telegram(tenant: str, request: Request) -> dict:
        from bridges.telegram.runtime import secret_ok

        t = pl(request).tenant(tenant)
        if not secret_ok(t.telegram.webhook_secret, request.headers.get("X-Telegram-Bot-Api-Secret-Token")):
            raise Unauthorized("wrong or missing X-Telegram-Bot-Api-Secret-Token")
        body = await _json_body(request)
        accepted = await request.app.state.telegram.handle_update(tenant, body)
        # answered once the message is claimed; the reply goes through the Bot API
        # (nothing about the turn goes back: Telegram would only read a method call here)
        return {"ok": True, "ignored": not accepted}

    @app.post("/onebot/{tenant}")
    async def onebot(tenant: str, request: Request) -> dict:
        from bridges.qq.auth import onebot_request_ok
        from bridges.qq.parse import parse_event, parse_recall

        p = pl(request)
        p.tenant(tenant)
        raw = await _body(request)
        ob = p.settings.onebot
        signature = request.headers.get("X-Signature")
        if not onebot_request_ok(secret=ob.secret, access_token=ob.access_token, body=raw,
                                 signature=signature, authorization=request.headers.get("Authorization")):
            raise Unauthorized("wrong or missing X-Signature / access token")
        body = await _json_body(request)
        nonce = None
        try:  # OneBot signs no time: the event's own time, and the signed body used once
            if ob.secret:  # claimed by the turn with its message (one write), or alone below
                nonce = fresh_nonce(tenant, "onebot", timestamp=body.get("time"), nonce=signature or "", body=raw,
                                    now=time.time(), window=ob.window)
            else:
                check_fresh(body.get("time"), now=time.time(), window=ob.window)
            msg = parse_event(body)
            if msg is None:
                if nonce is not None:
                    await asyncio.to_thread(claim, p, tenant, nonce)
                withdrawal = parse_recall(body)
                if withdrawal is not None:  # friend_recall / group_recall, as on the NoneBot endpoints
                    await p.withdraw(tenant, withdrawal)
                return {}
            # a quick operation when the reply comes within onebot.reply_within, else
            # {} once the message is claimed and the reply through the bot's API
            return await request.app.state.onebot.answer(tenant, msg, nonce)
        except ReplayError as exc:
            if not ob.secret:
                log.warning("refused a onebot callback for tenant %s: %s", tenant, exc.reason)
            raise Unauthorized(exc.reason) from exc

    @app.get("/wechat/{tenant}")
    async def wechat_verify(tenant: str, request: Request) -> PlainTextResponse:
        from bridges.wechat.callback import CallbackError

        pl(request).tenant(tenant)
        try:
            echo = request.app.state.wechat.verify(tenant, request.query_params)
        except (CallbackError, ReplayError) as exc:
            raise Unauthorized(str(exc)) from exc
        return PlainTextResponse(echo)

    @app.post("/wechat/{tenant}")
    async def wechat_receive(tenant: str, request: Request) -> PlainTextResponse:
        from bridges.wechat.callback import CallbackError

        pl(request).tenant(tenant)
        try:
            answer = await request.app.state.wechat.receive(tenant, request.query_params, await _body(request))
        except (CallbackError, ReplayError) as exc:
            raise Unauthorized(str(exc)) from exc
        return PlainTextResponse(answer, media_type="application/xml" if answer.startswith("<") else "text/plain")

    @app.post("/webhook/{tenant}")
    async def webhook(tenant: str, request: Request) -> JSONResponse:
        from bridges.webhook.protocol import SignatureError

        pl(request).tenant(tenant)
        try:
            status, body = await request.app.state.webhook.receive(tenant, request.headers, await _body(request))
        except (SignatureError, ReplayError) as exc:
            raise Unauthorized(str(exc)) from exc
        except ValidationError as exc:
            raise BadPayload(f"invalid webhook message: {_errors(exc)}") from exc
        return JSONResponse(body, status_code=status)

    # /v1 after the platforms' routes: a route is found by trying each in turn, and a webhook
    # behind /v1's 26 cost 0.05 ms a request; /v1 before NoneBot's catch-all mount
    app.include_router(api_v1.router)  # keyed (gateway.http.auth)
    app.openapi = lambda: api_v1.openapi_of(app)  # validation errors are 400 ErrorOut, not FastAPI's 422

    # -- the admin console (issue 28): its own package, off with HUIYI_CONSOLE__ENABLED=false --
    if cfg.console.enabled:
        from gateway.console import mount as mount_console

        mount_console(app, cfg)

    if qq_host is not None:
        qq_host.mount(app)  # last: NoneBot's routes answer what ours do not

    return app


WARM_PATH = "/.well-known/huiyi-warm-up"
"""The path of the request ``_warm_routes`` sends through the app: one no route answers (404)."""


async def _warm_routes(app) -> int:
    """Send one GET for ``WARM_PATH`` through the ASGI ``app`` itself, from
    loopback, and return its status (404): FastAPI builds each router's route
    table — a pydantic adapter per parameter of every route, ~1 s on 2 loaded
    cores — on the first request that walks it, and a path no route answers
    walks them all. Starlette builds its middleware stack on that request too.
    Call it on the event loop at start-up, before the app says ready."""
    status = 0
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": WARM_PATH, "raw_path": WARM_PATH.encode(), "root_path": "",
             "query_string": b"", "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 0),
             "server": ("127.0.0.1", 0), "state": {}}
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    def not_the_warm_up(record: logging.LogRecord) -> bool:  # its 404 is expected: no WARNING for it
        return WARM_PATH not in record.getMessage()

    errors = logging.getLogger("gateway.http.errors")
    t0 = time.perf_counter()
    errors.addFilter(not_the_warm_up)
    try:
        await app(scope, receive, send)
    finally:
        errors.removeFilter(not_the_warm_up)
    log.info("warm-up: routes built in %.2f s", time.perf_counter() - t0)
    return status
