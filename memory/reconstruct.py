"""Recollection: what the companion remembers this turn, as text for its prompt.

Two ways to make it:

- ``reconstruct`` asks the tenant's chat model to retell the recalled memories
  in the persona's voice, every factual sentence citing ``[src:ID]``, and
  checks the answer before it reaches the prompt;
- ``template_recollection`` is the deterministic form: a localised list of the
  top hits, each with how long ago it was said. It is always available, never
  empty when hits exist, and is what ``reconstruct`` falls back to.

Gate (otherwise the template, with a log line giving the reason): reconstruction
is enabled for the tenant, a chat model is configured (``complete`` given), and
at least ``min_hits`` memories were recalled (a hit's conflict partner counts).

Conflicts: a hit carrying a conflict partner (``Hit.conflict``, brought along by
``MemoryCore.recall`` only when the chat may see it) is told as a change, in
the person's language, older statement first: the template writes one line
「之前说「…」（…），后来说「…」（…）」 / 'earlier said "…" (…), later said "…" (…)'
(``locales/``), and the model gets both memories plus a ``<changes>`` block
(``memory.model_prompts``) asking for 「你之前说……[src:旧]，后来说……[src:新]」;
both ids are this turn's sources, so the citations validate.

Validator (``validate``), in order:

1. citation check: a sentence citing an id that is not among this turn's hits
   (invented, or another person's memory) is removed; each removal costs 0.2
   confidence;
2. grounding: each remaining sentence must be supported by the memories it
   cites: token coverage (share of the sentence's content tokens, from
   ``memory.text.tokens`` with light English suffix stripping, found in the cited
   memories) >= ``token_threshold``, or, when an embedder is given, cosine
   similarity to a cited memory >= ``embed_threshold``; and no number or
   mid-sentence capitalised word of it is missing from those memories (a
   swapped date or place is the commonest invention that overlap alone
   misses). A sentence without a citation is unsupported. grounding = supported / sentences; below
   ``min_grounding`` (0.6) → fall back. Unsupported sentences never reach the
   prompt even when the whole passes;
3. timeout: model call and validation together are bounded by ``timeout_s``
   (default 3 s); late → fall back.

Fallback reasons (``Recollection.fallback_reason``; None when the
reconstruction was accepted): gate — ``no_hits``, ``disabled``, ``no_model``,
``few_hits`` (or the caller's own reason, e.g. a failed recall); attempt —
``model_error``, ``timeout``, ``malformed`` (empty, or no ``[src:…]`` marker at
all), ``bad_citations`` (nothing left after the citation check),
``ungrounded``, ``error`` (a fault in the validator itself).

``memory/`` knows no gateway: the caller passes ``complete``, an async
``(messages) -> str`` (the pipeline passes ``ChatModel.complete``), and the
tenant's settings as plain arguments.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from locales import translate, translate_plural
from memory.dates import DEFAULT_TZ, days_label, zone
from memory.model_prompts import plan_note, reconstruction_messages
from memory.plans import PlanState, event_when_text, plan_of, plan_state
from memory.text import split_sentences, stem, tokens
from memory.types import Hit, Memory

if TYPE_CHECKING:
    from memory.embed import Embedder

__all__ = [
    "NOTHING_TO_RECALL",
    "SENTENCE_STATUSES",
    "Recollection",
    "Attempt",
    "Validation",
    "SentenceCheck",
    "Complete",
    "TailLine",
    "template_recollection",
    "told",
    "when_text",
    "local_date",
    "reconstruct",
    "validate",
    "split_cited_sentences",
    "parse_citations",
    "without_markers",
    "token_coverage",
    "support",
    "prime",
    "REASONS",
    "GATE_REASONS",
]

log = logging.getLogger(__name__)

Complete = Callable[[list[dict[str, str]]], Awaitable[str]]
"""An async chat completion: OpenAI-format messages → assistant text. Any
exception it raises counts as ``model_error``."""

GATE_REASONS = ("no_hits", "disabled", "no_model", "few_hits")
NOTHING_TO_RECALL = ("no_hits", "few_hits")
"""Gate reasons that say there was nothing (or too little) to retell yet: the
template was not a fallback from a failed retelling, so fallback rates leave them out."""
ATTEMPT_REASONS = ("model_error", "timeout", "malformed", "bad_citations", "ungrounded", "error")
REASONS = GATE_REASONS + ATTEMPT_REASONS
SENTENCE_STATUSES = ("kept", "unsupported", "bad_citation", "filler")
"""What the validation says of one sentence of a retelling (``SentenceCheck.status``)."""

CITATION_PENALTY = 0.2
DEFAULT_TOKEN_THRESHOLD = 0.6
DEFAULT_EMBED_THRESHOLD = 0.7
DEFAULT_MIN_GROUNDING = 0.6


class TailLine(Protocol):
    """A chat line as the reconstruction prompt needs it (``memory.store.ChatLine`` fits)."""

    role: str
    sender_id: str
    sender_name: str
    text: str


@dataclass(frozen=True, slots=True)
class SentenceCheck:
    """The validator's verdict on one sentence of the model's answer.

    text: the sentence without ``[src:…]`` markers; cited: the ids it cites, in
    order; status: ``kept`` (supported), ``unsupported``, ``bad_citation``
    (cites an id outside this turn's hits) or ``filler`` (no content token:
    not counted, not kept); coverage in [0, 1]: token coverage by the cited
    memories; similarity: best cosine to a cited memory (None when not
    computed); via: ``tokens`` or ``embedding`` for a kept sentence; missing:
    numbers and capitalised words of the sentence that no cited memory holds
    (any makes it unsupported, embedding or not).
    """

    text: str
    cited: tuple[str, ...]
    status: str
    coverage: float = 0.0
    similarity: float | None = None
    via: str | None = None
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Validation:
    """Outcome of ``validate``.

    text: the kept sentences without markers, at most ``max_chars`` characters;
    sources: ids cited by kept sentences (first-citation order); grounding in
    [0, 1] (supported / counted sentences; 0.0 when none); confidence in [0, 1]
    (1 − 0.2 per sentence removed by the citation check); reason: None when
    accepted, else ``malformed`` / ``bad_citations`` / ``ungrounded``;
    truncated: kept sentences were dropped to respect ``max_chars``.
    """

    sentences: tuple[SentenceCheck, ...]
    text: str
    sources: tuple[str, ...]
    grounding: float
    confidence: float
    reason: str | None
    truncated: bool = False

    @property
    def bad_citations(self) -> int:
        return sum(1 for s in self.sentences if s.status == "bad_citation")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One reconstruction attempt: the model's raw ``output`` ("" when it gave
    none), ``validation`` (None when it never got that far), ``error`` (the
    fallback reason of a failed attempt, else None), ``model_ms`` and
    ``validate_ms`` in milliseconds."""

    output: str = ""
    validation: Validation | None = None
    error: str | None = None
    model_ms: float = 0.0
    validate_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Recollection:
    """The text injected into the prompt and how it was made.

    text: prompt text without ``[src:…]`` markers ("" when nothing was recalled);
    sources: memory ids it draws on; confidence and grounding in [0, 1] (of the
    injected text: a template is verbatim, so 1.0); fallback_reason: why the
    template was used (None when reconstruction was accepted; see the module
    docstring for the codes); raw_hits: the recalled hits; latency_ms: time
    spent building it; mode: ``reconstructed`` or ``template``; attempt: the
    model attempt behind it (None when the gate kept the model out).
    """

    text: str
    sources: tuple[str, ...] = ()
    confidence: float = 1.0
    grounding: float = 1.0
    fallback_reason: str | None = ""
    raw_hits: tuple[Hit, ...] = field(default_factory=tuple)
    latency_ms: float = 0.0
    mode: str = "template"
    attempt: Attempt | None = None


def local_date(moment: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> date:
    """The calendar day of ``moment`` in zone ``tz`` (IANA name or tzinfo; an
    unknown name → UTC, logged); a naive ``moment`` is taken as UTC."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    if not isinstance(tz, tzinfo):
        try:
            tz = zone(tz)
        except ValueError:
            log.warning("unknown time zone %r; dates shown in UTC", tz)
            tz = timezone.utc
    return aware.astimezone(tz).date()


def when_text(then: datetime | None, now: datetime, lang: str, tz: str | tzinfo | None = DEFAULT_TZ) -> str:
    """'today' / 'yesterday' / 'N days ago' / 'N months ago' / 'N years ago', localised,
    counted in calendar days of the tenant's zone ``tz`` (said at 00:30 local time
    and asked that evening is "today", whatever the UTC dates)."""
    if then is None:
        return translate(lang, "today")
    days = max(0, (local_date(now, tz) - local_date(then, tz)).days)
    if days == 0:
        return translate(lang, "today")
    if days == 1:
        return translate(lang, "yesterday")
    if days < 60:
        return translate_plural(lang, "{n} day ago", "{n} days ago", days)
    if days < 730:
        return translate_plural(lang, "{n} month ago", "{n} months ago", days // 30)
    return translate_plural(lang, "{n} year ago", "{n} years ago", days // 365)


def template_recollection(hits: Sequence[Hit], *, lang: str, name: str | None, now: datetime,
                          limit: int = 6, reason: str = "", tz: str | tzinfo | None = DEFAULT_TZ) -> Recollection:
    """A localised sentence list built from the top ``limit`` hits (empty text for no hits).

    ``name`` is how the person is called (display name); None → "them" localised.
    ``reason`` is recorded as the fallback reason; ``tz`` is the tenant's zone in
    which "today"/"N days ago" are counted.
    """
    top = list(hits)[:limit]
    if not top:
        return Recollection(text="", fallback_reason=reason)
    who = name or translate(lang, "them")
    lines = [translate(lang, "What you remember about {name}:", name=who)]
    sources: list[str] = []
    for said in _told(top):
        if len(said) == 2:  # a conflict: one line telling the change, older first
            older, newer = said
            lines.append(translate(
                lang, '- {name} earlier said "{older}" ({older_when}), later said "{newer}" ({newer_when})',
                name=who, older=_one_line(older.text),
                older_when=when_text(older.created_at, now, lang, tz),
                newer=_one_line(newer.text), newer_when=when_text(newer.created_at, now, lang, tz)))
        else:
            m = said[0]
            when = when_text(m.created_at, now, lang, tz)
            state = plan_state(m, now, tz)
            if state is PlanState.PAST:  # its day has passed: told as past, never as still to come
                first, last = _plan_days(m, tz)
                lines.append(translate(lang, '- {name} had a plan for {event_when} ({day}), now past; said {when}: '
                                             '"{text}"', name=who, event_when=event_when_text(first, last, now, lang, tz),
                                       day=days_label(first, last), when=when, text=_one_line(m.text)))
            elif state is PlanState.MENTIONED:
                lines.append(translate(lang, '- {when}, {name} mentioned a plan (no date; not known whether it '
                                             'happened): "{text}"', when=when, name=who, text=_one_line(m.text)))
            elif m.context:  # what it answered: "Yes, so much fun!" says nothing without the question
                lines.append(translate(lang, '- {when}, {name} said: "{text}" (replying to {context})', when=when,
                                       name=who, text=_one_line(m.text), context=_one_line(m.context)))
            else:
                lines.append(translate(lang, '- {when}, {name} said: "{text}"', when=when, name=who,
                                       text=_one_line(m.text)))
        sources += [m.id for m in said if m.id not in sources]
    return Recollection(text="\n".join(lines), sources=tuple(sources), fallback_reason=reason, raw_hits=tuple(top))


def _plan_days(memory: Memory, tz: str | tzinfo | None) -> tuple[date, date]:
    """First and last day of a dated plan (``memory.plans.plan_of``) in zone ``tz``."""
    plan = plan_of(memory.text, memory.created_at, memory.event_time, memory.event_end, tz or DEFAULT_TZ)
    assert plan is not None and plan.first is not None and plan.last is not None
    return plan.first, plan.last


def plan_mark(memory: Memory, now: datetime, lang: str, tz: str | tzinfo | None) -> str:
    """How a model prompt marks ``memory``'s plan at ``now`` (zone ``tz``): its
    standing (``memory.model_prompts.plan_note``: 「计划，日子已过：上周三」, "plan
    mentioned long ago, no date") when it is a plan whose day has passed or an
    undated one past its horizon; "" for a plan still ahead or no plan. Read by the
    reconstruction and the consolidation prompts."""
    state = plan_state(memory, now, tz or DEFAULT_TZ)
    if state is None or state is PlanState.AHEAD:  # a plan still ahead reads as its text and date say
        return ""
    when = event_when_text(*_plan_days(memory, tz), now, lang, tz) if state is PlanState.PAST else ""
    return plan_note(state.value, lang, when)


def _prompt_date(memory: Memory, now: datetime, lang: str, tz: str | tzinfo | None) -> str:
    """``_date`` of ``memory`` as the reconstruction prompt shows it, with its plan's
    standing after it (``plan_mark``): 「2026-12-09, 计划，日子已过：上周三」."""
    mark = plan_mark(memory, now, lang, tz)
    return f"{_date(memory, tz)}, {mark}" if mark else _date(memory, tz)


def told(hit: Hit) -> tuple[Memory, ...]:
    """The memories ``hit`` brings into a recollection, in the order they are told:
    its memory alone, or — with a conflict partner — both, older first (by when
    each was said: ``created_at``, else ``valid_from``; ties by id)."""
    if hit.conflict is None:
        return (hit.memory,)
    floor = datetime.min.replace(tzinfo=timezone.utc)
    pair = sorted((hit.memory, hit.conflict), key=lambda m: (m.created_at or m.valid_from or floor, m.id))
    return tuple(pair)


def _told(hits: Sequence[Hit]) -> list[tuple[Memory, ...]]:
    """``told`` of each hit in order, leaving out a hit (or a partner) already told:
    when both sides of a conflict were recalled, the pair is told once, where the
    better-ranked side stands."""
    seen: set[str] = set()
    out = []
    for h in hits:
        if h.memory.id in seen:
            continue
        said = tuple(m for m in told(h) if m.id not in seen)
        seen.update(m.id for m in said)
        out.append(said)
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- sentences and citations ---------------------------------------------------

_MARKER = r"[\[［【]\s*src\s*[:：][^\]］】\n]*[\]］】]"
_MARKER_RE = re.compile(_MARKER, re.IGNORECASE)
_ANY_MARKER_RE = re.compile(r"[\[［【]\s*src\s*[:：]", re.IGNORECASE)
_MARKER_IDS_RE = re.compile(r"[\[［【]\s*src\s*[:：]([^\]］】\n]*)[\]］】]", re.IGNORECASE)
_ID_SPLIT_RE = re.compile(r"[\s,，;；、]+")
_BROKEN_MARKER_RE = re.compile(r"[\[［【]\s*src\s*[:：][^\]］】]*$", re.IGNORECASE)
# Markers written after the sentence's final punctuation belong to that sentence.
_TRAILING_MARKERS_RE = re.compile(rf"([。！？!?.]+[”’」』\"')）]*)([ \t]*)((?:{_MARKER}[ \t]*)+)", re.IGNORECASE)


def _attach_trailing_markers(text: str) -> str:
    def move(m: re.Match[str]) -> str:
        return " " + m.group(3).strip() + m.group(1) + (" " if m.group(2) or m.end() < len(text) else "")

    return _TRAILING_MARKERS_RE.sub(move, text)


def split_cited_sentences(text: str) -> list[str]:
    """Sentences of a model's answer (``memory.text.split_sentences``), with
    ``[src:…]`` markers written after the final punctuation moved before it so
    they stay with the sentence they cite. Empty parts are dropped."""
    return split_sentences(_attach_trailing_markers(text or ""))


def parse_citations(sentence: str) -> tuple[str, tuple[str, ...]]:
    """``(sentence without markers, cited ids in order without repeats)``.

    Accepts ``[src:ID]``, ``[src: A, B]``, full-width brackets and colons; an
    empty marker yields the id ``""`` (which no hit has). A marker left
    unclosed at the end is dropped from the text and cites nothing.
    """
    cited: list[str] = []
    for m in _MARKER_IDS_RE.finditer(sentence):
        parts = [p for p in _ID_SPLIT_RE.split(m.group(1).strip()) if p] or [""]
        for p in parts:
            p = re.sub(r"(?i)^src[:：]", "", p)
            if p not in cited:
                cited.append(p)
    clean = _MARKER_RE.sub("", sentence)
    clean = _BROKEN_MARKER_RE.sub("", clean)
    clean = re.sub(r"[ \t]+([,.!?;:，。！？；：])", r"\1", clean)
    return " ".join(clean.split()), tuple(cited)


# The prompt's block tags (memory.model_prompts), in ASCII or full-width brackets.
_BLOCK_TAG_ANYWHERE_RE = re.compile(
    r"[<＜]\s*/?\s*(?:recollection|memories|changes|conversation|message)\s*[>＞]", re.IGNORECASE)
# A memory id in brackets ("[a1b2c3d4e5f6]", as the model's memory lines show it): never for a person.
_BARE_ID_RE = re.compile(r"[\[［【]\s*[0-9a-f]{12}\s*[\]］】]")
_BROKEN_MARKER_LINE_RE = re.compile(r"[\[［【]\s*src\s*[:：][^\]］】\n]*$", re.IGNORECASE | re.MULTILINE)


def without_markers(text: str) -> str:
    """``text`` as it may reach a person: every ``[src:…]`` citation (closed, or
    left open at a line's end), every bracketed memory id and every tag of the
    prompt's blocks (``<recollection>``, ``</memories>``, ``<changes>``…, also
    full-width) removed wherever they stand, with the spaces they leave before
    punctuation and at line ends. Lines and the rest of the text are kept as they
    were; ``""`` when nothing else was there."""
    if not text:
        return ""
    out = _MARKER_RE.sub("", text)
    out = _BROKEN_MARKER_LINE_RE.sub("", out)
    out = _BLOCK_TAG_ANYWHERE_RE.sub("", _BARE_ID_RE.sub("", out))
    if out == text:
        return text
    out = re.sub(r"[ \t]+([,.!?;:，。！？；：、])", r"\1", out)
    lines = [re.sub(r"[ \t]{2,}", " ", line).rstrip() for line in out.split("\n")]
    return "\n".join(lines).strip()


# -- grounding -----------------------------------------------------------------

# Words that carry no fact of their own in a recollection: the act of
# remembering, relative time (the prompt gives each memory's date) and
# interjections. Chinese ones are cut out of the sentence before it is
# tokenised (so their characters do not count as unigrams either); English
# ones are dropped as tokens.
_NEUTRAL_ZH = (
    "还记得 记得 你说过 说过 跟我说 你说 提到过 提到 提过 告诉过我 告诉过 告诉我 曾经 之前 以前 当时 那时候 那时 时候 "
    "好像 今天 昨天 前天 最近 刚刚 上周 上个月 去年 前年 后来 一直 个月前 年前 天前 周前 嗯 哦 呀 哇"
).split()
_NEUTRAL_EN = (
    "remember remembered recall recalled said say says told tell mention mentioned once earlier before ago "
    "back then later still recently today yesterday week weeks month months year years day days time last src"
).split()
_NEUTRAL_ZH_RE = re.compile("|".join(sorted(map(re.escape, _NEUTRAL_ZH), key=len, reverse=True)))
# "3 天前", "2 months ago": how long ago, derived from the date the prompt shows.
_RELATIVE_RE = re.compile(r"(?i)\d+\s*(?:天|周|个星期|个月|年)(?:前|以前|之前)|\d+\s*(?:days?|weeks?|months?|years?)\s+ago\b")
_PROPER_RE = re.compile(r"(?<=[A-Za-z0-9,;:]\s)[A-Z][A-Za-z'-]+")
_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = "一二三四五六日"
_MONTHS = ("january february march april may june july august september october november december").split()


@lru_cache(maxsize=1)
def _neutral_en() -> frozenset[str]:
    return frozenset(stem(w) for w in _NEUTRAL_EN)


@lru_cache(maxsize=16_384)  # keyed by token, as memory.text.stem: the words of the active chats
def _unit(tok: str) -> str | None:
    """The comparable form of a token (``tokens`` already stems English words), or
    None for one without a letter or digit (emoji)."""
    if not any(unicodedata.category(c)[0] in "LN" for c in tok):
        return None
    return tok


def _names_re(names: Sequence[str]) -> re.Pattern[str] | None:
    names = [n for n in names if n and n.strip()]
    if not names:
        return None
    return re.compile("|".join(sorted(map(re.escape, names), key=len, reverse=True)), re.IGNORECASE)


def _sentence_tokens(sentence: str, names: re.Pattern[str] | None) -> set[str]:
    text = _NEUTRAL_ZH_RE.sub(" ", _RELATIVE_RE.sub(" ", sentence))
    if names is not None:
        text = names.sub(" ", text)
    out = {_unit(t) for t in tokens(text)} - _neutral_en()
    out.discard(None)
    return out  # type: ignore[return-value]


@lru_cache(maxsize=4096)
def _memory_tokens(text: str, when: date | None = None) -> frozenset[str]:
    # cached: the same memories come back turn after turn
    out = {_unit(t) for t in tokens(text)}
    out.discard(None)
    if when is not None:  # the prompt shows each memory's date: its parts may be said
        out |= {str(when.year), str(when.month), str(when.day), f"{when.month:02d}", f"{when.day:02d}",
                stem(_MONTHS[when.month - 1]), f"{when.month}月", f"{when.day}日", f"{when.day}号"}
        # and its weekday (a past plan is told by it: 「你上周三有个面试」, "last Wednesday")
        wd = when.weekday()
        out |= {stem(_WEEKDAYS_EN[wd]), "周" + _WEEKDAYS_ZH[wd], "星期" + _WEEKDAYS_ZH[wd], _WEEKDAYS_ZH[wd]}
    return frozenset(out)  # type: ignore[arg-type]


def _salient(sentence: str, sent_tokens: set[str], names: re.Pattern[str] | None) -> set[str]:
    """Tokens with a digit and mid-sentence capitalised words: facts that must come from a source."""
    text = names.sub(" ", sentence) if names is not None else sentence
    return {t for t in sent_tokens if any(c.isdigit() for c in t)} | {stem(w.casefold())
                                                                       for w in _PROPER_RE.findall(text)}


def prime(sources: Mapping[str, str], dates: Mapping[str, date | None] | None = None) -> None:
    """Tokenise the memories ahead of ``validate`` (cached per text and date).
    Never raises: a failure here only means ``validate`` does the work itself."""
    try:
        for mid, text in sources.items():
            _memory_tokens(text, (dates or {}).get(mid))
    except Exception:  # noqa: BLE001
        log.debug("priming memory tokens failed", exc_info=True)


def token_coverage(sentence: str, sources: Sequence[str], *, names: Sequence[str] = ()) -> float:
    """Share in [0, 1] of the sentence's content tokens found in the ``sources``
    texts (0.0 for a sentence without content tokens). Tokens are
    ``memory.text.tokens`` (jieba words plus CJK unigrams, stopwords dropped),
    stemmed lightly for English; remembering/relative-time words and ``names``
    (the person's, the persona's) are not counted."""
    sent = _sentence_tokens(sentence, _names_re(names))
    if not sent:
        return 0.0
    mem: set[str] = set()
    for src in sources:
        mem |= _memory_tokens(src)
    return len(sent & mem) / len(sent)


def support(sentence: str, source: str, *, when: date | None = None, names: Sequence[str] = (),
            neutral: re.Pattern[str] | None = None) -> tuple[float, tuple[str, ...], int]:
    """How far one ``sentence`` is supported by one memory text ``source``, by
    the rules ``validate`` applies to a cited sentence: ``(coverage, missing,
    counted)`` — the share in [0, 1] of its content tokens found in ``source``
    (its day ``when`` may be said too), the numbers and mid-sentence capitalised
    words it names that ``source`` lacks (sorted), and how many content tokens
    it has (0: nothing of substance; coverage 0.0). ``names``: the person's and
    the persona's (not content); ``neutral``: a pattern of further words cut out
    before tokenising (e.g. a question's 「怎么样」, "how did it go"). Pure; CPU
    (jieba)."""
    names_re = _names_re(names)
    text = neutral.sub(" ", sentence) if neutral is not None else sentence
    sent = _sentence_tokens(text, names_re)
    if not sent:
        return 0.0, (), 0
    covered = _memory_tokens(source, when)
    missing = tuple(sorted(_salient(text, sent, names_re) - covered))
    return len(sent & covered) / len(sent), missing, len(sent)


def validate(output: str, sources: Mapping[str, str], *, dates: Mapping[str, date | None] | None = None,
             names: Sequence[str] = (), max_chars: int = 600, min_grounding: float = DEFAULT_MIN_GROUNDING,
             token_threshold: float = DEFAULT_TOKEN_THRESHOLD, embedder: Embedder | None = None,
             embed_threshold: float = DEFAULT_EMBED_THRESHOLD) -> Validation:
    """Check a model's cited recollection against this turn's memories.

    ``sources``: memory id → text of every hit of this turn (nothing else may
    be cited); ``dates``: memory id → the date the prompt showed for it (its
    year/month/day may be said); ``names``: the person's and the persona's
    names (not counted as content). Steps: citation check, then grounding
    (module docstring); a sentence is also unsupported when it names a number
    or a capitalised word that none of its cited memories contains. The
    embedder, when given, is a second chance for sentences whose token
    coverage falls short; its failure is logged and leaves them unsupported.
    Pure apart from the embedder call; CPU-bound (jieba): run it in a thread on
    an event loop. Never raises on odd model output.
    """
    if not output or not output.strip() or not _ANY_MARKER_RE.search(output):
        return Validation((), "", (), 0.0, 1.0, "malformed")
    names_re = _names_re(names)
    dates = dates or {}
    mem_tokens = {mid: _memory_tokens(text, dates.get(mid)) for mid, text in sources.items()}
    checks: list[SentenceCheck] = []
    for raw in split_cited_sentences(output):
        clean, cited = parse_citations(raw)
        if any(c not in sources for c in cited):
            checks.append(SentenceCheck(clean, cited, "bad_citation"))
            continue
        sent = _sentence_tokens(clean, names_re)
        if not sent:
            checks.append(SentenceCheck(clean, cited, "filler"))
            continue
        if not cited:
            checks.append(SentenceCheck(clean, cited, "unsupported"))
            continue
        covered: set[str] = set()
        for c in cited:
            covered |= mem_tokens[c]
        cov = len(sent & covered) / len(sent)
        missing = tuple(sorted(_salient(clean, sent, names_re) - covered))
        ok = cov >= token_threshold and not missing
        checks.append(SentenceCheck(clean, cited, "kept" if ok else "unsupported", round(cov, 4), None,
                                    "tokens" if ok else None, missing))
    if embedder is not None:
        checks = _embedding_second_chance(checks, sources, embedder, embed_threshold)
    bad = sum(1 for c in checks if c.status == "bad_citation")
    confidence = round(max(0.0, 1.0 - CITATION_PENALTY * bad), 4)
    counted = [c for c in checks if c.status in ("kept", "unsupported")]
    if not counted:
        return Validation(tuple(checks), "", (), 0.0, confidence, "bad_citations" if bad else "malformed")
    kept = [c for c in counted if c.status == "kept"]
    grounding = round(len(kept) / len(counted), 4)
    text, used, truncated = _join(kept, max_chars)
    reason = None if grounding >= min_grounding and text else "ungrounded"
    return Validation(tuple(checks), text, used, grounding, confidence, reason, truncated)


def _embedding_second_chance(checks: list[SentenceCheck], sources: Mapping[str, str], embedder: Embedder,
                             threshold: float) -> list[SentenceCheck]:
    todo = [i for i, c in enumerate(checks) if c.status == "unsupported" and c.cited and not c.missing]
    if not todo:
        return checks
    mem_ids = list(dict.fromkeys(m for i in todo for m in checks[i].cited))
    texts = [checks[i].text for i in todo] + [sources[m] for m in mem_ids]
    try:
        vecs = embedder.embed_documents(texts)
    except Exception as exc:  # noqa: BLE001 - the embedding check is a second chance, never a failure
        log.warning("grounding: embedding check skipped (%s: %s)", type(exc).__name__, exc)
        return checks
    mem_vec = {m: vecs[len(todo) + j] for j, m in enumerate(mem_ids)}
    out = list(checks)
    for k, i in enumerate(todo):
        c = checks[i]
        sim = max(float(vecs[k] @ mem_vec[m]) for m in c.cited)
        ok = sim >= threshold
        out[i] = replace(c, status="kept" if ok else "unsupported", similarity=round(sim, 4),
                         via="embedding" if ok else None)
    return out


def _join(kept: Sequence[SentenceCheck], max_chars: int) -> tuple[str, tuple[str, ...], bool]:
    text = ""
    used: list[str] = []
    for c in kept:
        sep = "" if not text or _is_wide(text[-1]) or _is_wide(c.text[0]) else " "
        candidate = text + sep + c.text
        if len(candidate) > max_chars:
            if not text:  # one sentence longer than the limit: cut it rather than lose everything
                text = c.text[: max(0, max_chars - 1)] + "…"
                used += [m for m in c.cited if m not in used]
            return text, tuple(used), True
        text = candidate
        used += [m for m in c.cited if m not in used]
    return text, tuple(used), False


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


# -- the reconstruction --------------------------------------------------------

def _when(memory: Memory, tz: str | tzinfo | None = DEFAULT_TZ) -> date | None:
    """The memory's day (event day, else the day it was said) in the tenant's zone."""
    when = memory.event_time or memory.created_at
    return local_date(when, tz) if when else None


def _date(memory: Memory, tz: str | tzinfo | None = DEFAULT_TZ) -> str:
    """The memory's day as the prompt shows it; an event's period as that period
    (2027-01, 2027, 2026-12-14~2026-12-20: ``memory.dates.days_label``)."""
    when = _when(memory, tz)
    if when is None:
        return "?"
    if memory.event_time is not None and memory.event_end is not None and memory.event_end > memory.event_time:
        return days_label(when, local_date(memory.event_end - timedelta(microseconds=1), tz))
    return when.isoformat()


def _gate(hits: Sequence[Hit], enabled: bool, complete: Complete | None, min_hits: int) -> str | None:
    if not hits:
        return "no_hits"
    if not enabled:
        return "disabled"
    if complete is None:
        return "no_model"
    if sum(len(said) for said in _told(hits)) < min_hits:
        return "few_hits"
    return None


async def reconstruct(hits: Sequence[Hit], *, tail: Sequence[TailLine], complete: Complete | None, lang: str,
                      now: datetime, persona_name: str, persona_voice: str, person_name: str | None = None,
                      enabled: bool = True, min_hits: int = 2, max_chars: int = 600, timeout_s: float = 3.0,
                      min_grounding: float = DEFAULT_MIN_GROUNDING, embedder: Embedder | None = None,
                      limit: int = 6, reason: str = "", tz: str | tzinfo | None = DEFAULT_TZ) -> Recollection:
    """The recollection of this turn: a validated reconstruction, or the template.

    ``hits``: this turn's recalled memories (the only ones that may be cited);
    ``tail``: recent chat lines, oldest first; ``complete``: the tenant's chat
    model (None → no model); ``lang``: zh_CN or en; ``person_name``: how the
    person is called; ``max_chars``: length limit of the injected text;
    ``timeout_s``: bound in seconds on model call plus validation; ``embedder``:
    optional second-chance similarity for grounding; ``limit``: hits in the
    template; ``reason``: the caller's own reason when ``hits`` is empty (e.g. a
    failed recall); ``tz``: the tenant's zone, in which every date the model or
    the template shows is a calendar day. Never raises: every failure is the template with its reason
    (module docstring) and a log line.
    """
    started = time.perf_counter()
    hits = list(hits)

    def fallback(why: str, attempt: Attempt | None = None) -> Recollection:
        rec = template_recollection(hits, lang=lang, name=person_name, now=now, limit=limit, reason=why, tz=tz)
        return replace(rec, raw_hits=tuple(hits), latency_ms=_ms(started), attempt=attempt)

    gate = _gate(hits, enabled, complete, min_hits)
    if gate is not None:
        why = (reason or gate) if gate == "no_hits" else gate
        if hits:
            log.info("reconstruction skipped for %s: %s (%d hits)", hits[0].memory.namespace, why, len(hits))
        return fallback(why)
    assert complete is not None
    ns = hits[0].memory.namespace
    names = [n for n in (person_name, persona_name) if n]
    progress: dict[str, float] = {}
    try:
        attempt = await asyncio.wait_for(
            _attempt(hits, tail, complete, lang, persona_name, persona_voice, person_name, max_chars,
                     min_grounding, embedder, names, progress, tz, now), timeout_s)
    except TimeoutError:
        log.warning("reconstruction for %s timed out after %.1f s; template used", ns, timeout_s)
        return fallback("timeout", Attempt(error="timeout", model_ms=progress.get("model_ms", _ms(started))))
    except Exception:  # noqa: BLE001 - a fault here must cost the reconstruction, never the reply
        log.exception("reconstruction for %s failed; template used", ns)
        return fallback("error", Attempt(error="error"))
    if attempt.error is not None:
        log.warning("reconstruction for %s fell back: %s", ns, attempt.error)
        return fallback(attempt.error, attempt)
    v = attempt.validation
    assert v is not None
    if v.reason is not None:
        log.info("reconstruction for %s rejected: %s (grounding %.2f, %d bad citations)", ns, v.reason,
                 v.grounding, v.bad_citations)
        return fallback(v.reason, attempt)
    log.info("reconstruction for %s accepted: grounding %.2f, confidence %.2f, %d sources", ns, v.grounding,
             v.confidence, len(v.sources))
    return Recollection(text=v.text, sources=v.sources, confidence=v.confidence, grounding=v.grounding,
                        fallback_reason=None, raw_hits=tuple(hits), latency_ms=_ms(started), mode="reconstructed",
                        attempt=attempt)


async def _attempt(hits: list[Hit], tail: Sequence[TailLine], complete: Complete, lang: str, persona_name: str,
                   persona_voice: str, person_name: str | None, max_chars: int, min_grounding: float,
                   embedder: Embedder | None, names: list[str], progress: dict[str, float],
                   tz: str | tzinfo | None = DEFAULT_TZ, now: datetime | None = None) -> Attempt:
    groups = _told(hits)
    said = [m for group in groups for m in group]
    changes = [(group[0].id, group[1].id) for group in groups if len(group) == 2]
    now = now or datetime.now(timezone.utc)
    # a plan's standing beside its date: one whose day has passed is told as past (prompt rule 8)
    memories = [(m.id, m.text, _prompt_date(m, now, lang, tz), m.emotion or "neutral", m.context) for m in said]
    lines = [(persona_name if line.role == "bot" else (line.sender_name or line.sender_id), line.text) for line in tail]
    messages = reconstruction_messages(persona_name=persona_name, persona_voice=persona_voice,
                                       person_name=person_name, memories=memories, tail=lines, lang=lang,
                                       max_chars=max_chars, changes=changes)
    # grounded in the person's own words only: the line a memory answered (its context)
    # may ask what they denied ("Did you go?" — "No, I stayed home.")
    sources = {m.id: m.text for m in said}
    dates = {m.id: _when(m, tz) for m in said}
    # tokenise the memories while the model writes: the validator then only tokenises the answer
    primed = asyncio.ensure_future(asyncio.to_thread(prime, sources, dates))
    t0 = time.perf_counter()
    try:
        output = await complete(messages)
    except Exception as exc:  # noqa: BLE001 - any model failure degrades to the template
        log.warning("reconstruction model call failed: %s", type(exc).__name__)
        return Attempt(error="model_error", model_ms=_ms(t0))
    model_ms = progress["model_ms"] = _ms(t0)
    if not isinstance(output, str):
        return Attempt(error="malformed", model_ms=model_ms)
    await primed  # prime() never raises; usually done long before the model
    t1 = time.perf_counter()
    v = await asyncio.to_thread(validate, output, sources, dates=dates, names=names, max_chars=max_chars,
                                min_grounding=min_grounding, embedder=embedder)
    return Attempt(output=output, validation=v, model_ms=model_ms, validate_ms=_ms(t1))


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 2)
