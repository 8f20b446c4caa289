"""The HTTP gateway (FastAPI).

Routes: ``GET /healthz``; ``POST /v1/turns`` (a platform-neutral message →
recollection, prompt, reply); ``POST /telegram/{tenant}`` (a Bot API Update);
``POST /onebot/{tenant}`` (a OneBot v11 HTTP POST event; the reply goes back as
a quick operation). All of them call the same pipeline. Malformed bodies
answer 4xx with a reason; payloads that are not a person's message answer 200
with ``{"ok": true, "ignored": true}`` so platforms do not redeliver them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timezone

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError

from gateway.config import Settings, load_settings
from gateway.errors import BadPayload, install_handlers
from gateway.messages import InboundMessage
from gateway.pipeline import Pipeline

__all__ = ["create_app", "TurnRequest"]

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 15.0
OPTIMIZE_EVERY_S = 600.0


class TurnRequest(BaseModel):
    """Body of ``POST /v1/turns``: the tenant and one platform-neutral message.
    ``timestamp`` defaults to now (UTC)."""

    tenant: str = "default"
    message: dict


async def _json_body(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadPayload(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadPayload("body must be a JSON object")
    return body


async def _maintenance(pipeline: Pipeline) -> None:
    """Off the hot path: apply pending index writes, optimize now and then."""
    last_opt = asyncio.get_running_loop().time()
    while True:
        await asyncio.sleep(MAINTAIN_EVERY_S)
        try:
            await asyncio.to_thread(pipeline.core.maintain)
            now = asyncio.get_running_loop().time()
            if now - last_opt >= OPTIMIZE_EVERY_S:
                await asyncio.to_thread(pipeline.core.index.optimize)
                last_opt = now
        except Exception as exc:  # noqa: BLE001 - keep maintaining
            log.warning("index maintenance: %s", exc)


def create_app(settings: Settings | None = None, pipeline: Pipeline | None = None) -> FastAPI:
    """The FastAPI app. Builds the core on start-up (lifespan) unless a pipeline
    is given; runs index maintenance in the background."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal pipeline
        if pipeline is None:
            from gateway.service import build_pipeline

            pipeline = await asyncio.to_thread(build_pipeline, settings or load_settings())
        app.state.pipeline = pipeline
        task = asyncio.create_task(_maintenance(pipeline))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(title="huiyi", version="0.1.0", lifespan=lifespan)
    install_handlers(app)

    def pl(request: Request) -> Pipeline:
        return request.app.state.pipeline

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/v1/turns")
    async def turns(request: Request) -> dict:
        body = await _json_body(request)
        try:
            req = TurnRequest.model_validate(body)
            msg_body = dict(req.message)
            msg_body.setdefault("timestamp", datetime.now(timezone.utc).isoformat())
            msg = InboundMessage.model_validate(msg_body)
            msg.chat  # validates ids against their patterns
        except ValidationError as exc:
            raise BadPayload(f"invalid turn: {exc.errors(include_url=False)}") from exc
        result = await pl(request).handle(req.tenant, msg)
        return result.to_json()

    @app.post("/telegram/{tenant}")
    async def telegram(tenant: str, request: Request) -> dict:
        from bridges.telegram.parse import parse_update

        p = pl(request)
        t = p.tenant(tenant)
        body = await _json_body(request)
        msg = parse_update(body, bot_id=t.telegram_bot_id, bot_username=t.telegram_bot_username)
        if msg is None:
            return {"ok": True, "ignored": True}
        result = await p.handle(tenant, msg)
        return {"ok": True, "turn": result.to_json()}

    @app.post("/onebot/{tenant}")
    async def onebot(tenant: str, request: Request) -> dict:
        from bridges.qq.parse import parse_event

        p = pl(request)
        p.tenant(tenant)
        body = await _json_body(request)
        msg = parse_event(body)
        if msg is None:
            return {}
        result = await p.handle(tenant, msg)
        if result.reply:
            # OneBot v11 quick operation: the implementation sends the reply itself
            return {"reply": result.reply, "auto_escape": True, "at_sender": False}
        return {}

    return app
