"""The one OpenAI-compatible chat client (DeepSeek, Qwen, Ollama, vLLM, OpenAI…),
through the ``openai`` package: ``ChatModel``, one client per tenant model
settings; ``ChatModels``, the tenants' models as the turn and the background
work call them, their failures counted by purpose."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.config import LLMSettings, Settings
from gateway.errors import EmptyAnswer, LLMError
from memory.types import repair

if TYPE_CHECKING:
    from gateway.ledger import TokenMeter
    from gateway.metrics import Metrics
    from memory.capture import LLMExtractor

__all__ = ["ChatModel", "ChatModels"]

log = logging.getLogger(__name__)


class ChatModel:
    """Async chat completions against ``settings.base_url`` with ``settings.model``.

    Timeouts (seconds) and bounded retries come from the settings. Raises
    LLMError on any failure, EmptyAnswer (an LLMError) on an empty or
    whitespace answer. The text returned is stripped and repaired
    (``memory.types.repair``: a lone surrogate becomes U+FFFD), so no encoder
    downstream — SQL, jieba, the embedder, a platform API — sees one.
    """

    def __init__(self, settings: LLMSettings) -> None:
        from openai import AsyncOpenAI

        if not settings.configured:
            raise ValueError("chat model is not configured (base_url and model are required)")
        self.settings = settings
        self._client = AsyncOpenAI(base_url=settings.base_url, api_key=settings.api_key or "none",
                                   timeout=settings.timeout, max_retries=settings.max_retries)

    async def complete(self, messages: list[dict[str, str]], *, temperature: float | None = None,
                       max_tokens: int | None = None, timeout: float | None = None,
                       usage: Callable[[int, int], None] | None = None) -> str:
        """The assistant text for ``messages`` (OpenAI chat format), stripped and repaired.
        ``usage``: called with the answer's (prompt tokens, completion tokens) when
        the answer reports them — before its text is checked, so an empty answer's
        tokens are counted too."""
        kwargs: dict = {}
        if max_tokens:
            kwargs["max_tokens"] = max_tokens
        if timeout:
            kwargs["timeout"] = timeout
        try:
            resp = await self._client.chat.completions.create(
                model=self.settings.model, messages=messages,  # type: ignore[arg-type]
                temperature=self.settings.temperature if temperature is None else temperature, **kwargs)
        except Exception as exc:
            raise LLMError(f"chat model failed: {type(exc).__name__}: {exc}") from exc
        if usage is not None:
            _report_usage(resp, usage)
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError("chat model returned no choices") from exc
        if not isinstance(text, str) or not text.strip():
            raise EmptyAnswer("chat model returned an empty answer")
        return repair(text.strip())

    def warm(self) -> None:
        """Load what the first ``complete`` would: the openai client imports its
        resource modules (~500, every API it wraps) on the first use of
        ``client.chat``, jiter parses the first answer, and the answer's pydantic
        models (``ChatCompletion`` and what it holds) are built on their first
        use (~0.25 s on 2 loaded cores). Blocking; for start-up
        (``gateway.warmup``), never on the event loop."""
        import jiter  # noqa: F401
        from openai.types.chat import ChatCompletion

        self._client.chat.completions  # noqa: B018 - the attribute access is the import
        ChatCompletion.model_validate({
            "id": "warm-up", "object": "chat.completion", "created": 0, "model": self.settings.model or "",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


def _report_usage(resp: object, usage: Callable[[int, int], None]) -> None:
    """Hand ``usage`` the answer's prompt and completion tokens, when it says them
    as integers (a server that sends none, or garbage, is counted as nothing)."""
    u = getattr(resp, "usage", None)
    inp, out = getattr(u, "prompt_tokens", None), getattr(u, "completion_tokens", None)
    if isinstance(inp, int) or isinstance(out, int):
        usage(inp if isinstance(inp, int) else 0, out if isinstance(out, int) else 0)


class ChatModels:
    """The tenants' chat models: one ``ChatModel`` per tenant with a configured
    model, made on first use and shared by the turn and the background work;
    ``metered`` gives a tenant's model as one purpose calls it for one person:
    its tokens recorded by ``meter`` (``gateway.ledger.TokenMeter``), its
    failures counted in ``metrics`` (``huiyi_model_errors_total{purpose,
    error}``), and None once the tenant's daily token cap is reached."""

    def __init__(self, settings: Settings, metrics: Metrics, meter: TokenMeter | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.meter = meter
        self._models: dict[str, ChatModel] = {}

    def of(self, tenant: str) -> ChatModel | None:
        """The tenant's chat model, or None when none is configured. Raises UnknownTenant."""
        cfg = self.settings.tenant(tenant).llm
        if not cfg.configured:
            return None
        if tenant not in self._models:
            self._models[tenant] = ChatModel(cfg)
        return self._models[tenant]

    async def metered(self, tenant: str, subject: str, purpose: str, *, capped: bool = True,
                      count_errors: bool = True, **params) -> Callable | None:
        """``tenant``'s model as ``purpose`` (extract, reconstruct, reply,
        consolidate) calls it for person ``subject`` ("" for none): an async
        ``(messages, **kwargs) -> str`` with ``params`` (temperature,
        max_tokens, timeout) bound, whose answer's tokens go to the ledger and
        whose failures are counted unless ``count_errors`` is False (the caller
        counts them). None when the tenant has no model, or when ``capped`` and
        the tenant's daily token cap is reached (``TokenMeter.over_cap``): the
        caller's path without a model. Raises UnknownTenant."""
        model = self.of(tenant)
        if model is None:
            return None
        meter = self.meter
        if capped and meter is not None and await meter.over_cap(tenant, purpose):
            return None
        errors = self.metrics.model_errors
        name = model.settings.model or ""

        async def call(messages, **kwargs):
            spent: list[tuple[int, int]] = []
            try:
                return await model.complete(messages, usage=lambda i, o: spent.append((i, o)), **{**params, **kwargs})
            except Exception as exc:
                if count_errors:
                    errors.labels(purpose, type(exc).__name__).inc()
                raise
            finally:
                if spent and meter is not None:  # written beside the caller, never in its time
                    meter.record_soon(tenant, subject, purpose, name, *spent[0])

        return call

    async def extractor(self, tenant: str, subject: str) -> LLMExtractor | None:
        """The tenant's LLM fact extractor for person ``subject`` when it has a
        chat model and its daily token cap is not reached (None: the heuristic
        one). Call it on the event loop: the model call is scheduled back onto
        this loop from capture's worker thread. Temperature 0; the model's own
        timeout bounds it, and any failure falls back to the heuristic."""
        from memory.capture import LLMExtractor

        complete = await self.metered(tenant, subject, "extract", temperature=0.0, max_tokens=800)
        if complete is None:
            return None
        model = self.of(tenant)
        assert model is not None
        return LLMExtractor(complete, loop=asyncio.get_running_loop(),
                            timeout=model.settings.timeout * (model.settings.max_retries + 1) + 1)
