"""The one OpenAI-compatible chat client (DeepSeek, Qwen, Ollama, vLLM, OpenAI…),
through the ``openai`` package. One client per tenant model settings."""

from __future__ import annotations

import logging

from gateway.config import LLMSettings
from gateway.errors import EmptyAnswer, LLMError
from memory.types import repair

__all__ = ["ChatModel"]

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
                       max_tokens: int | None = None, timeout: float | None = None) -> str:
        """The assistant text for ``messages`` (OpenAI chat format), stripped and repaired."""
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
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError("chat model returned no choices") from exc
        if not isinstance(text, str) or not text.strip():
            raise EmptyAnswer("chat model returned an empty answer")
        return repair(text.strip())

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
