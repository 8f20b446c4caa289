"""Follow-ups the person agreed to: when one may be asked, and what it says.

After a plan's time has passed (``memory.plans.plan_state`` is PAST), a person
who turned follow-ups on (``/memory followups on``) may be asked one short
question about it — 「面试怎么样啦？」, "How did the interview go?" — in the
chat where the plan was told. This module is the pure part (no IO):

- ``WakingHours``: the tenant's waking window (``"09:00-21:30"``, local time;
  a window past midnight such as ``"22:00-02:00"`` is allowed): ``contains``
  and ``next_start`` in a zone;
- ``followup_due_at``: when a plan's follow-up becomes due — the first waking
  moment after its last day has ended (the day after, in the zone);
- ``day_key``: the per-person, per-local-day claim key (at most one a day);
- ``in_send_window``: whether a platform that lets the bot write only for a
  while after the person's last message (WeChat's customer-service API: 48
  hours, ``SEND_WINDOWS``) lets it write now;
- ``blocked``: why a memory may not be followed up in a chat (forgotten ones
  never get here: the store holds live rows only) — a group chat for a private
  memory, a never-store clause (``memory.never_store``), not a past dated plan;
- ``template_text``: the question without a model, in the person's language
  (``zh_CN`` or ``en``, locales/): the plan's own word when it names one
  (面试, 考试, 聚会, interview, trip…) — 「面试怎么样啦？」 — else a question
  that quotes the plan: 「你说过“……”，上周三怎么样啦？」.

- ``written_question``: the question written by the tenant's chat model from
  the memory (``memory.model_prompts.followup_messages``), kept only when
  ``check_question`` finds it grounded — one short question in the person's
  language that speaks only of the plan: its content words (less a question's
  own: 怎么样, 顺利, how did … go) covered by the memory's
  (``memory.reconstruct.support``, the recollection's rule, threshold
  ``memory.reconstruct.DEFAULT_TOKEN_THRESHOLD``), and no number or name the
  memory lacks; anything else, a model failure or a timeout falls back to
  ``template_text``, with the reason.
"""

from __future__ import annotations

import re
import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo

from locales import translate
from memory.dates import zone
from memory.never_store import DEFAULT_NEVER_STORE, without_never_store
from memory.plans import PlanState, event_when_text, plan_of, plan_state
from memory.text import to_simplified
from memory.types import ChatRef, Memory, Namespace, Visibility

__all__ = ["WakingHours", "LOOKBACK_DAYS", "followup_due_at", "day_key", "blocked", "template_text", "topic_word",
           "SNIPPET_CHARS", "SEND_WINDOWS", "SEND_WINDOW_MARGIN",
           "RECHECK_AFTER", "in_send_window", "QUESTION_CHARS", "Question", "check_question", "written_question",
           "QUESTION_REASONS"]

log = logging.getLogger(__name__)

LOOKBACK_DAYS = 3
"""A plan whose last day ended more than this many days ago is not asked about
(a gateway that was down for a week does not ask about last week's exam)."""
SNIPPET_CHARS = 40
"""The most characters of the plan's text quoted by the fallback question."""
SEND_WINDOWS = {"wx": timedelta(hours=48)}
"""Platforms on which the bot may write to a person only for a while after the
person's last message in that chat: a WeChat Official Account's
customer-service message API answers 45015 ("response out of time limit")
beyond 48 hours. WeCom app messages have no such window."""
SEND_WINDOW_MARGIN = timedelta(minutes=10)
"""Kept short of a send window's end, so that a send in flight does not cross it."""
RECHECK_AFTER = timedelta(minutes=30)
"""How long a follow-up left for a send window waits before it is checked again
(the person may have written meanwhile)."""

_HHMM = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*[-–~]\s*([01]?\d|2[0-4]):([0-5]\d)\s*$")


@dataclass(frozen=True, slots=True)
class WakingHours:
    """A daily local window ``[start, end)``; ``end`` before ``start`` crosses
    midnight. Build with ``WakingHours.parse("09:00-21:30")``."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> WakingHours:
        """``"HH:MM-HH:MM"`` (24 h; ``24:00`` is the end of the day). Raises
        ValueError for another shape or an empty window."""
        m = _HHMM.match(text or "")
        if not m:
            raise ValueError(f"waking hours must read HH:MM-HH:MM, e.g. 09:00-21:30, not {text!r}")
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        if h2 == 24 and m2:
            raise ValueError(f"waking hours end at 24:00 at the latest, not {text!r}")
        start = time(h1, m1)
        end = time(23, 59, 59, 999999) if h2 == 24 else time(h2, m2)
        if start == end:
            raise ValueError(f"waking hours {text!r} are empty")
        return cls(start, end)

    def contains(self, moment: datetime, tz: str | tzinfo | None) -> bool:
        """True when ``moment`` (aware) falls in the window in zone ``tz``."""
        local = _local(moment, tz).time()
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end

    def next_start(self, moment: datetime, tz: str | tzinfo | None) -> datetime:
        """``moment`` itself when it is inside the window, else the window's next
        start after it, as an aware UTC datetime."""
        if self.contains(moment, tz):
            return moment
        tzi = _zone(tz)
        local = _local(moment, tzi)
        start = datetime.combine(local.date(), self.start, tzinfo=tzi)
        if start <= local:
            start = datetime.combine(local.date() + timedelta(days=1), self.start, tzinfo=tzi)
        return start.astimezone(timezone.utc)


def _zone(tz: str | tzinfo | None) -> tzinfo:
    return tz if isinstance(tz, tzinfo) else zone(tz)


def _local(moment: datetime, tz: str | tzinfo | None) -> datetime:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(_zone(tz))


def followup_due_at(last_day: date, waking: WakingHours, tz: str | tzinfo | None) -> datetime:
    """When the follow-up of a plan whose last day is ``last_day`` (local, zone
    ``tz``) becomes due: the first waking moment of the day after (aware UTC)."""
    tzi = _zone(tz)
    after = datetime.combine(last_day + timedelta(days=1), time(0, 0), tzinfo=tzi)
    return waking.next_start(after, tzi)


def day_key(ns: Namespace, moment: datetime, tz: str | tzinfo | None) -> str:
    """``"<namespace>|<local day>"``: what a claim of one follow-up takes for
    the person's day in zone ``tz`` (unique in SQL: at most one a day)."""
    return f"{ns}|{_local(moment, tz).date().isoformat()}"


def in_send_window(platform: str, last_heard: datetime | None, now: datetime) -> bool:
    """True when a follow-up may be sent on ``platform`` at ``now`` given when the
    person last wrote in that chat (``last_heard``, aware; None: unknown): always
    on a platform without a window (SEND_WINDOWS), else only while ``now`` lies
    within its window less SEND_WINDOW_MARGIN of ``last_heard``."""
    window = SEND_WINDOWS.get(platform)
    if window is None:
        return True
    return last_heard is not None and now - last_heard < window - SEND_WINDOW_MARGIN


def blocked(memory: Memory, chat: ChatRef, now: datetime, tz: str | tzinfo | None,
            never_store: tuple[str, ...] | list[str] = DEFAULT_NEVER_STORE) -> str | None:
    """Why ``memory`` may not be followed up in ``chat`` at ``now`` (a short
    reason for the log), or None when it may: ``private in group`` (a private
    memory is never asked about in a group), ``never-store`` (its text holds a
    clause of the tenant's never-store categories), ``not a past plan`` (not a
    dated plan, or its day not over), ``too old`` (over LOOKBACK_DAYS past)."""
    if chat.is_group and memory.visibility is Visibility.PRIVATE:
        return "private in group"
    if without_never_store(memory.text, never_store)[1]:
        return "never-store"
    if plan_state(memory, now, tz) is not PlanState.PAST:
        return "not a past plan"
    plan = plan_of(memory.text, memory.created_at, memory.event_time, memory.event_end, tz)
    if plan is None or plan.last is None:
        return "not a past plan"
    if (_local(now, tz).date() - plan.last).days > LOOKBACK_DAYS + 1:
        return "too old"
    return None


# the plan's own word, asked about by name: zh → itself, en → itself (a noun)
_ZH_TOPICS = ("面试", "考试", "体检", "复查", "复诊", "约会", "答辩", "面签", "手术", "聚会", "婚礼", "演唱会",
              "音乐会", "派对", "比赛", "展览", "旅行", "旅游", "出差", "搬家", "会议")
_EN_TOPICS = re.compile(r"\b(interview|exam|test|appointment|meeting|surgery|check-?up|party|wedding|concert|"
                        r"birthday party|game|match|show|festival|gig|trip|vacation|holiday|flight|move|date|"
                        r"presentation|defen[cs]e|audition|race|marathon)s?\b", re.IGNORECASE)
_SUFFIX = re.compile(r"[（(]\d{4}(?:-\d{2}){0,2}(?:~\d{4}-\d{2}-\d{2})?[)）]\s*$")


def topic_word(text: str, lang: str) -> str | None:
    """The plan's own word in ``lang`` (``zh_CN``: 面试, 旅行…; ``en``: interview,
    trip…) when ``text`` names one, else None."""
    if lang.startswith("zh"):
        plain = to_simplified(text)
        return next((w for w in _ZH_TOPICS if w in plain), None)
    m = _EN_TOPICS.search(text)
    return m.group(1).lower() if m else None


def _snippet(text: str) -> str:
    one = " ".join(_SUFFIX.sub("", text).split())
    return one if len(one) <= SNIPPET_CHARS else one[: SNIPPET_CHARS - 1] + "…"


def template_text(memory: Memory, lang: str, now: datetime, tz: str | tzinfo | None) -> str:
    """The follow-up question about ``memory`` without a model, in ``lang``
    (module docstring): 「面试怎么样啦？」 / "How did the interview go?", else
    「你说过“……”，上周三怎么样啦？」 / "You told me “…” — how did it go last Wednesday?"."""
    lang = "zh_CN" if lang.startswith("zh") else "en"
    word = topic_word(memory.text, lang)
    if word:
        return translate(lang, "How did the {thing} go?", thing=word)
    plan = plan_of(memory.text, memory.created_at, memory.event_time, memory.event_end, tz)
    when = event_when_text(plan.first, plan.last, now, lang, tz) if plan is not None and plan.first else ""
    if when:
        return translate(lang, "You told me “{plan}” — how did it go {when}?", when=when, plan=_snippet(memory.text))
    return translate(lang, "You said “{plan}” — how did it go?", plan=_snippet(memory.text))


# -- the question written by the tenant's model -----------------------------------

QUESTION_CHARS = {"zh_CN": 40, "en": 120}
"""The longest model-written question kept, in characters, per language."""
QUESTION_REASONS = ("no_model", "model_error", "timeout", "malformed", "too_long", "not_a_question",
                    "wrong_language", "ungrounded")
"""Why a model-written question was not used (``Question.fallback_reason``)."""

# a question's own words, which speak of no fact: cut out before the grounding check
_QUESTION_ZH = sorted(("怎么样 怎样 如何 顺利 顺不顺利 还好 好不好 好玩 开心 感觉 结果 进行 最后 那天 那次 上次 之前 "
                       "你的 你 我 吗 呢 啦 呀 吧 了 的 得 还 都 有没有 一切 想问问 问问 想知道 记得 说过 过得").split(),
                      key=len, reverse=True)
_QUESTION_EN = ("how did it go went was were is are the your you yours did does do go goes going well okay ok fun "
                "good great all right alright hope hoped wonder wondering tell me about any so how's it's that this "
                "there a an to of in on for at with remember mentioned said told last").split()
_QUESTION_NEUTRAL = re.compile("|".join([*map(re.escape, _QUESTION_ZH),
                                         *(rf"\b{re.escape(w)}\b" for w in sorted(_QUESTION_EN, key=len,
                                                                                  reverse=True))]), re.IGNORECASE)
_CJK = re.compile(r"[\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")
_QUOTES = "\"'“”‘’「」『』《》 \n\t"


@dataclass(frozen=True, slots=True)
class Question:
    """A follow-up's question: ``text`` (what is sent), ``mode`` (``written``
    by the model or ``template``), ``fallback_reason`` (one of
    QUESTION_REASONS when the template replaced the model's; None otherwise),
    ``coverage`` (the model's question's share of content words found in the
    memory, 0.0 when not checked)."""

    text: str
    mode: str
    fallback_reason: str | None = None
    coverage: float = 0.0


def check_question(output: str, memory: Memory, lang: str, tz: str | tzinfo | None, *,
                   names: tuple[str, ...] | list[str] = ()) -> tuple[str, str | None, float]:
    """Check a model's follow-up question about ``memory``: ``(text, reason,
    coverage)`` — the cleaned question (surrounding quotes and ``[src:…]``
    markers removed) and None when it may be sent, else ``""`` and why
    (``malformed``: empty or holding a tag; ``too_long``: over QUESTION_CHARS
    or more than one line; ``not_a_question``: no ``?``/``？``;
    ``wrong_language``: zh_CN without a Chinese character, en with one;
    ``ungrounded``: no content word of the plan, a content-word coverage below
    ``DEFAULT_TOKEN_THRESHOLD``, or a number or name the memory lacks).
    ``names``: the person's and the persona's. Pure; CPU (jieba)."""
    from memory.reconstruct import DEFAULT_TOKEN_THRESHOLD, support, without_markers

    key = "zh_CN" if lang.startswith("zh") else "en"
    text = without_markers(output or "").strip().strip(_QUOTES).strip()
    if not text or "<" in text or ">" in text or "＜" in text:
        return "", "malformed", 0.0
    if "\n" in text or len(text) > QUESTION_CHARS[key]:
        return "", "too_long", 0.0
    if "?" not in text and "？" not in text:
        return "", "not_a_question", 0.0
    if (key == "zh_CN") != bool(_CJK.search(text)) or (key == "en" and not _LATIN.search(text)):
        return "", "wrong_language", 0.0
    plan = plan_of(memory.text, memory.created_at, memory.event_time, memory.event_end, tz)
    when = plan.first if plan is not None and plan.first else None
    coverage, missing, counted = support(to_simplified(text), memory.text, when=when, names=names,
                                         neutral=_QUESTION_NEUTRAL)
    if not counted or coverage < DEFAULT_TOKEN_THRESHOLD or missing:
        return "", "ungrounded", round(coverage, 4)
    return text, None, round(coverage, 4)


async def written_question(memory: Memory, lang: str, now: datetime, tz: str | tzinfo | None, *,
                           complete: Callable[[list[dict[str, str]]], Awaitable[str]] | None,
                           persona_name: str, persona_voice: str, person_name: str | None = None,
                           timeout_s: float = 5.0) -> Question:
    """The follow-up question about ``memory`` in ``lang`` at ``now`` (zone
    ``tz``): the tenant's model's (``complete``: an async OpenAI-format
    ``(messages) -> str``; None: no model) when ``check_question`` keeps it,
    else ``template_text`` with the reason (QUESTION_REASONS) and a log line.
    ``timeout_s``: bound in seconds on the model call. Never raises."""
    key = "zh_CN" if lang.startswith("zh") else "en"

    def fallback(why: str, coverage: float = 0.0) -> Question:
        return Question(template_text(memory, key, now, tz), "template", why, coverage)

    if complete is None:
        return fallback("no_model")
    from memory.model_prompts import followup_messages

    plan = plan_of(memory.text, memory.created_at, memory.event_time, memory.event_end, tz)
    when = event_when_text(plan.first, plan.last, now, key, tz) if plan is not None and plan.first else ""
    messages = followup_messages(persona_name=persona_name, persona_voice=persona_voice, plan_text=memory.text,
                                 when=when, lang=key, max_chars=QUESTION_CHARS[key])
    try:
        output = await asyncio.wait_for(complete(messages), timeout_s)
    except TimeoutError:
        log.warning("followups: question for %s fell back: timeout (%.1f s); template used", memory.namespace,
                    timeout_s)
        return fallback("timeout")
    except Exception as exc:  # noqa: BLE001 - any model failure costs the written question only
        log.warning("followups: question for %s fell back: model_error (%s: %s); template used", memory.namespace,
                    type(exc).__name__, exc)
        return fallback("model_error")
    names = tuple(n for n in (person_name, persona_name) if n)
    try:
        text, why, coverage = await asyncio.to_thread(check_question, str(output), memory, key, tz, names=names)
    except Exception:  # noqa: BLE001 - a fault in the check costs the written question only
        log.exception("followups: checking the question for %s failed; template used", memory.namespace)
        return fallback("malformed")
    if why is not None:
        log.info("followups: question for %s fell back: %s (coverage %.2f); template used", memory.namespace, why,
                 coverage)
        return fallback(why, coverage)
    return Question(text, "written", None, coverage)
