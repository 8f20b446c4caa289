"""A small OpenAI-compatible server on 127.0.0.1 for tests: the real ``openai``
client talks to it over loopback HTTP.

Tests enqueue scripted answers (``FakeLLM.enqueue``): a text, an HTTP status,
or a delay; with nothing queued, ``responder`` (a function of the request body)
answers when set — e.g. ``consolidation_responder``, which abstracts the
fragments it is shown and adds a phantom and a foreign citation on purpose. ``/v1/embeddings`` answers with deterministic hashed vectors, or
with the vector a test scripted for a text in ``vectors``; ``embed_status``
other than 200 makes it fail. Every request body is recorded in ``requests``, except fact-extraction calls
(memory.capture's LLM extractor), which have their own ``extraction_queue``
and ``extraction_requests`` so that they never shift a test's scripted replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response


@dataclass
class Scripted:
    """One scripted answer: ``text`` (None → use ``default``), ``status`` (non-200 →
    an error body), ``delay`` seconds before answering, ``raw`` replaces the whole
    JSON body (malformed-answer tests)."""

    text: str | None = None
    status: int = 200
    delay: float = 0.0
    raw: object | None = None


class LoopbackServer:
    """A FastAPI app served by uvicorn in a daemon thread on a free 127.0.0.1 port.
    Subclasses build ``self.app`` (``_make_app``); ``base_url`` is the server root."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.app = self._make_app()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _make_app(self) -> FastAPI:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self):
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.time() + 10
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)


class FakeLLM(LoopbackServer):
    """The fake server. ``base_url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(self, default: str = "好的，我记得。", dim: int = 16) -> None:
        self.default = default
        self.dim = dim
        self.queue: deque[Scripted] = deque()
        self.extraction_queue: deque[Scripted] = deque()
        self.requests: list[dict] = []
        self.extraction_requests: list[dict] = []
        self.vectors: dict[str, list[float]] = {}
        self.embed_status = 200
        #: (prompt tokens, completion tokens) every chat answer reports in its ``usage``;
        #: None sends an answer without ``usage``
        self.usage: tuple[int, int] | None = (1, 1)
        #: answers a chat completion when nothing is queued (before ``default``):
        #: ``responder(request body) -> text``, or None for ``default``
        self.responder = None
        super().__init__()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def enqueue_extraction(self, text: str | None = None, *, status: int = 200, delay: float = 0.0,
                           raw: object | None = None) -> None:
        """Queue the answer of the next fact-extraction call (memory.capture's LLM
        extractor). Extraction calls never consume ``enqueue``'d answers; without a
        scripted one they get ``default``, which the extractor rejects (heuristic)."""
        self.extraction_queue.append(Scripted(text, status, delay, raw))

    def enqueue(self, text: str | None = None, *, status: int = 200, delay: float = 0.0, raw: object | None = None) -> None:
        """Queue the answer of the next chat completion."""
        self.queue.append(Scripted(text, status, delay, raw))

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            msgs = body.get("messages") or [{}]
            extraction = str(msgs[0].get("content", "")).startswith("You extract durable facts")
            (self.extraction_requests if extraction else self.requests).append(body)
            queue = self.extraction_queue if extraction else self.queue
            if queue:
                s = queue.popleft()
            elif not extraction and self.responder is not None:
                s = Scripted(self.responder(body))
            else:
                s = Scripted()
            if s.delay:
                await asyncio.sleep(s.delay)
            if s.status != 200:
                return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}}, status_code=s.status)
            if s.raw is not None:
                return _ascii_json(s.raw)
            # ASCII-escaped like many real servers: a lone surrogate travels as "\ud83c"
            answer = {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": s.text if s.text is not None else self.default}}],
            }
            if self.usage is not None:
                inp, out = self.usage
                answer["usage"] = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
            return _ascii_json(answer)

        @app.get("/v1/models")
        async def models():
            """The models list, as OpenAI-compatible servers answer it."""
            return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"}
                                               for m in ("fake-chat", "fake-embed")]}

        @app.post("/v1/embeddings")
        async def embeddings(request: Request):
            body = await request.json()
            self.requests.append(body)
            if self.embed_status != 200:
                return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}},
                                    status_code=self.embed_status)
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"object": "embedding", "index": i, "embedding": self.vector(t)} for i, t in enumerate(inputs)]
            return {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": 1, "total_tokens": 1}}

        return app

    def vector(self, text: str) -> list[float]:
        """The scripted vector of ``text``, else a deterministic pseudo-embedding
        (character-bigram hashing)."""
        if text in self.vectors:
            return list(self.vectors[text])
        v = [0.0] * self.dim
        for i in range(max(1, len(text) - 1)):
            h = int(hashlib.md5(text[i:i + 2].encode()).hexdigest(), 16)
            v[h % self.dim] += 1.0
        return v


def _ascii_json(payload: object) -> Response:
    """A JSON response with non-ASCII escaped (``json.dumps`` default), so that text
    holding a lone surrogate can be sent the way a broken model server sends it."""
    return Response(json.dumps(payload), media_type="application/json")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(application, timeout: float = 60.0):
    """Serve an ASGI ``application`` under uvicorn (lifespan on) on a free
    127.0.0.1 port in a thread; yields its base URL and stops it on exit."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=free_port(), log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "the app did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


_FRAGMENT_RE = None


def consolidation_responder(foreign_id: str = "f0f0f0f0f0f0", phantom_id: str = "deadbeef0000"):
    """A ``FakeLLM.responder`` for consolidation prompts (``memory.model_prompts.
    consolidation_messages``): it answers one grounded ``pattern`` line joining
    the first sentence of the first two fragments and citing both, plus one sentence citing
    ``phantom_id`` (an id nobody has) and one citing ``foreign_id`` (meant to be
    another person's memory) — the validator must keep only the first. Other
    requests get None (the server's default answer)."""
    import re

    global _FRAGMENT_RE
    _FRAGMENT_RE = _FRAGMENT_RE or re.compile(r"^\[([0-9a-z]+)\] (.*) \([^()]*\)$", re.MULTILINE)

    def respond(body: dict) -> str | None:
        msgs = body.get("messages") or []
        if len(msgs) < 2 or "<memories>" not in str(msgs[-1].get("content", "")) \
                or "[src:" not in str(msgs[0].get("content", "")) or "pattern" not in str(msgs[0].get("content", "")):
            return None
        found = _FRAGMENT_RE.findall(str(msgs[-1]["content"]))[:2]
        if len(found) < 2:
            return "none"
        (a, ta), (b, tb) = ((i, re.split(r"(?<=[.!?。！？])\s*", t)[0].rstrip("。.!！?？")) for i, t in found)
        return (f"pattern: {ta}，{tb}[src:{a}][src:{b}]。\n"
                f"fact: 住在火星上的秘密基地[src:{phantom_id}]。\n"
                f"preference: Secretly loves the moon base on Mars [src:{foreign_id}].")

    return respond
