"""Recollection: what the companion remembers this turn, as text for its prompt.

``template_recollection`` is the deterministic form: a localised list of the
top hits, each with how long ago it was said. It is always available and never
empty when hits exist; LLM reconstruction with grounded citations falls back
to it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from locales import translate
from memory.types import Hit

__all__ = ["Recollection", "template_recollection", "when_text"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recollection:
    """The text injected into the prompt and how it was made.

    text: prompt text without ``[src:…]`` markers ("" when nothing was recalled);
    sources: memory ids it draws on; confidence and grounding in [0, 1];
    fallback_reason: why the template was used (None when reconstruction was
    accepted, "" for a plain template turn); raw_hits: the recalled hits;
    latency_ms: time spent building it.
    """

    text: str
    sources: tuple[str, ...] = ()
    confidence: float = 1.0
    grounding: float = 1.0
    fallback_reason: str | None = ""
    raw_hits: tuple[Hit, ...] = field(default_factory=tuple)
    latency_ms: float = 0.0
    mode: str = "template"


def when_text(then: datetime | None, now: datetime, lang: str) -> str:
    """'today' / 'yesterday' / 'N days ago' / 'N months ago' / 'N years ago', localised."""
    if then is None:
        return translate(lang, "today")
    days = max(0, (now.date() - then.date()).days)
    if days == 0:
        return translate(lang, "today")
    if days == 1:
        return translate(lang, "yesterday")
    if days < 60:
        return translate(lang, "{n} days ago", n=days)
    if days < 730:
        return translate(lang, "{n} months ago", n=days // 30)
    return translate(lang, "{n} years ago", n=days // 365)


def template_recollection(hits: Sequence[Hit], *, lang: str, name: str | None, now: datetime,
                          limit: int = 6, reason: str = "") -> Recollection:
    """A localised sentence list built from the top ``limit`` hits (empty text for no hits).

    ``name`` is how the person is called (display name); None → "them" localised.
    ``reason`` is recorded as the fallback reason.
    """
    top = list(hits)[:limit]
    if not top:
        return Recollection(text="", fallback_reason=reason)
    who = name or translate(lang, "them")
    lines = [translate(lang, "What you remember about {name}:", name=who)]
    for h in top:
        m = h.memory
        lines.append(translate(lang, '- {when}, {name} said: "{text}"', when=when_text(m.created_at, now, lang),
                               name=who, text=_one_line(m.text)))
    return Recollection(text="\n".join(lines), sources=tuple(h.memory.id for h in top), fallback_reason=reason,
                        raw_hits=tuple(top))


def _one_line(text: str) -> str:
    return " ".join(text.split())
