"""Plans: statements about the future, and how long they stay in the future.

A person says 「下周三我要面试」 on a Monday; on Thursday the interview is past,
and a companion that still says "you are going to have an interview" has no
sense of time. This module reads which memories are plans and where each one
stands at a given moment:

- ``read_plan(text, said_at, tz)`` reads one statement: a **dated plan** names
  a day or period (``memory.dates.resolve_when``) that starts after the day it
  was said, or one that has not ended yet with a future marker (「今晚要去看电影」,
  "I'm moving this month"); an **undated plan** names no date but a future
  marker (打算/准备/计划/决定/要去…, "going to", "will", "plan to"…), not
  negated (「不打算」, "won't") and not told as done (「…过了」, "already").
  An undated plan gets a **horizon by kind** (``HORIZON_DAYS``: an interview or
  an exam 14 days, a trip 60, a move or job change 90, a goal such as learning
  or saving 180, anything else 30), after which it is only "mentioned".
- ``plan_state(memory, now, tz)`` is where a stored memory stands at ``now``:
  ``AHEAD`` (still to come), ``PAST`` (its day or period has ended: retold as
  past, 「你上周三有个面试」, never as future), ``MENTIONED`` (undated, its
  horizon passed: 「你之前提过……」), or None (not a plan). A memory's plan is
  read from what capture stored — its text, its ``event_time`` / ``event_end``
  (capture's date reading) and ``created_at`` — so nothing extra is stored and
  every memory captured before reads the same way.
- ``event_when_text(first, last, now, lang, tz)`` names a past day or period
  relative to ``now`` in the person's language: 「昨天」, 「这周一」, 「上周三」,
  "last Wednesday", else how many days ago.

Every day is a calendar day in the tenant's zone ``tz`` (IANA name or tzinfo;
``memory.dates.DEFAULT_TZ`` when None). Pure; no IO.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from enum import Enum
from functools import lru_cache

from locales import translate, translate_plural
from memory.dates import DEFAULT_TZ, days_label, habitual, resolve_when, zone
from memory.text import to_simplified

__all__ = ["HORIZON_DAYS", "Plan", "PlanState", "event_when_text", "plan_kind", "plan_of", "plan_state", "read_plan"]


class PlanState(str, Enum):
    """Where a plan stands at a moment: still to come, its time passed, or an
    undated plan past its horizon (only "mentioned")."""

    AHEAD = "ahead"
    PAST = "past"
    MENTIONED = "mentioned"


#: days an undated plan stays a plan, by kind (``plan_kind``); then it is only mentioned
HORIZON_DAYS = {"appointment": 14, "event": 30, "purchase": 30, "trip": 60, "move": 90, "goal": 180, "plan": 30}

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("appointment", re.compile(r"面试|考试|体检|看病|看牙|复查|复诊|约会|见面|开会|会议|答辩|面签|手术|挂号|"
                               r"\b(?:interviews?|exams?|tests?|appointments?|doctor|dentist|meetings?|surgery|"
                               r"check-?up|date with)\b", re.IGNORECASE)),
    ("trip", re.compile(r"旅行|旅游|出差|出国|度假|回老家|回家过|去.{1,6}玩|飞去|"
                        r"\b(?:trips?|travel\w*|vacation|holiday|visit\w*|fly(?:ing)? to|flights?|road ?trip)\b",
                        re.IGNORECASE)),
    ("event", re.compile(r"聚会|婚礼|演唱会|音乐会|生日|派对|比赛|展览|"
                         r"\b(?:party|wedding|concert|birthday|game|match|show|festival|gig)\b", re.IGNORECASE)),
    ("move", re.compile(r"搬家|搬到|换工作|辞职|跳槽|入职|离职|转行|"
                        r"\b(?:mov(?:e|ing)|quit\w*|new job|switch\w* jobs?|resign\w*|relocat\w*)\b", re.IGNORECASE)),
    ("goal", re.compile(r"学|减肥|健身|存钱|攒钱|戒烟|戒酒|考研|考公|练|早睡|跑步|"
                        r"\b(?:learn\w*|lose weight|sav(?:e|ing)|quit smoking|stud(?:y|ying)|practi[cs]\w*|"
                        r"work(?:ing)? out|get fit|run(?:ning)?|read more)\b", re.IGNORECASE)),
    ("purchase", re.compile(r"买|入手|换一?[台部辆个]|\b(?:buy\w*|purchas\w*|get(?:ting)? a new|order\w*)\b", re.IGNORECASE)),
)

# a future marker in a clause without a date: intention, decision, an arrangement
_ZH_FUTURE = re.compile(r"打算|准备|计划|决定|要去|要开始|要学|要搬|要买|要换|会去|将要|将会|想去|"
                        r"过段时间|过几天|改天|以后要|迟早要|等.{1,6}就要|(?<![不没])要.{0,6}(?:了吧|啦)$")
_EN_FUTURE = re.compile(r"\b(?:going to|gonna|plan(?:ning)? (?:to|on)|intend(?:ing)? to|about to|"
                        r"thinking (?:of|about)|hoping to|decided to|will|shall)\b|'ll\b|"
                        r"\b(?:am|'m|are|'re)\s+(?:\w+ing)\s+(?:to|a|an|the|my|in|next|soon|this)\b", re.IGNORECASE)
# a wish to do something that takes arranging (「我想报个瑜伽班」, "I want to sign up for a yoga class"): a plan
# without a date — not a craving of the moment (「我想睡觉」, "I want to sleep") nor a feeling (「我想你」)
_ZH_WISH = re.compile(r"(?<![不没别])(?:想要?|希望|梦想)(?:能|可以|早点|尽快)?(?:去|报|学|买|考|换|搬|养|开始|试试?|"
                      r"参加|申请|办|辞职|跳槽|存|攒|减肥|健身|练|出国|旅|装修|做个|找个|谈个|结婚|生个|领养|创业|开个|"
                      r"入手|备孕|读研|留学)")
_EN_WISH = re.compile(r"\b(?:wants? to|wanna|would like to|'d like to|would love to|'d love to|hope to|hoping to|"
                      r"wish (?:I could|to)|dream(?:ing)? of)\s+(?:\w+\s+)?(?:sign(?:ing)? up|join|enrol|enroll|learn|"
                      r"visit|travel|go (?:to|on|back)(?! (?:bed|sleep))|take (?:a|an|up)|try|start|buy|get a|adopt|"
                      r"move|apply|study|quit|switch|save|climb|open|become|build|finish|lose weight|run a)\b",
                      re.IGNORECASE)
# death and self-harm are never a plan to ask after (「想去死」, "I want to die")
_DARK = re.compile(r"死|自杀|轻生|活不下去|\b(?:die|dying|kill (?:myself|me)|suicid\w*|end it all|end my life)\b",
                   re.IGNORECASE)
# the future marker negated, or the plan told as done or habitual
_ZH_NOT = re.compile(r"不打算|没打算|不准备|不计划|不会去|不想去|不要去|取消|算了|已经|过了|完了|去过|买了|搬了|"
                     r"学了|每天|每周|每次|经常|总是|常常")
_EN_NOT = re.compile(r"\b(?:won't|will not|not going to|never|no longer|cancel\w*|already|used to|"
                     r"every (?:day|week|morning|night)|always|usually|often)\b|n't (?:plan|intend|think)",
                     re.IGNORECASE)
# a dated statement that is still about the future on its own day or in its own period
_ZH_DATED_FUTURE = re.compile(r"(?<![重主只不])要|(?<![开聚约宴晚早舞年例])会(?![议员])|打算|准备|计划|预计|"
                              r"就.{0,4}了|快.{0,4}了|还没|之后|以后|等会|待会")
_EN_DATED_FUTURE = re.compile(r"\b(?:will|shall|gonna|going to|plan(?:ning)? to|about to|can't wait|later|"
                              r"upcoming|soon)\b|'ll\b|\b(?:am|'m|are|'re|is|'s)\s+\w+ing\b", re.IGNORECASE)
# a dated plan called off (「周五的聚会取消了」, "I won't go on Friday")
_CANCELLED = re.compile(r"取消|不去了|不打算|不准备|\b(?:won't|will not|not going to|cancel\w*)\b", re.IGNORECASE)
_DATE_SUFFIX = re.compile(r"[（(]\d{4}(?:-\d{2}){0,2}(?:~\d{4}-\d{2}-\d{2})?[)）]\s*$")
_PARENS = str.maketrans("（）", "()")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Plan:
    """A statement about the future as read from its text.

    ``kind``: ``plan_kind`` of the text (appointment, trip, event, move, goal,
    purchase, plan); ``first`` / ``last``: the first and last calendar day it
    names in the tenant's zone (a day: the same), None for an undated plan;
    ``horizon_days``: how long an undated plan stays a plan (``HORIZON_DAYS``),
    None for a dated one."""

    kind: str
    first: date | None = None
    last: date | None = None
    horizon_days: int | None = None

    @property
    def dated(self) -> bool:
        return self.first is not None


def plan_kind(text: str) -> str:
    """The kind of plan ``text`` tells: the first of appointment, trip, event,
    move, goal, purchase whose words it holds, else ``plan``."""
    plain = to_simplified(text)
    return next((kind for kind, rx in _KINDS if rx.search(plain)), "plan")


def _tzinfo(tz: str | tzinfo | None) -> tzinfo:
    return tz if isinstance(tz, tzinfo) else zone(tz)


def _local(moment: datetime, tz: tzinfo) -> date:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(tz).date()


def _undated(plain: str) -> bool:
    cjk = any("\u4e00" <= c <= "\u9fff" for c in plain)
    if habitual(plain):  # 「周六我都会去游泳」, "I usually …": a rule of the week, no plan
        return False
    if cjk:
        return bool(_ZH_FUTURE.search(plain) or _ZH_WISH.search(plain)) and not _ZH_NOT.search(plain)
    return bool(_EN_FUTURE.search(plain) or _EN_WISH.search(plain)) and not _EN_NOT.search(plain)


def _dated_future(plain: str) -> bool:
    rx = _ZH_DATED_FUTURE if any("\u4e00" <= c <= "\u9fff" for c in plain) else _EN_DATED_FUTURE
    return bool(rx.search(plain))


@lru_cache(maxsize=4096)  # the recalled memories of the active chats, retold turn after turn: 83.8% hits at 4k as at 8k (50-chat soak)
def _read(text: str, said_day: date, said_at: datetime, tz: tzinfo) -> Plan | None:
    plain = to_simplified(text.translate(_PARENS))
    if _DARK.search(plain):
        return None
    try:
        when = resolve_when(plain, said_at, tz)
    except ValueError:
        when = None
    if when is not None:
        last = when.end or when.day
        if last < said_day:
            return None  # a day already behind: told as past
        # the same-day or running period needs a future marker: 「今天面试好紧张」 is the present
        if when.day > said_day or _dated_future(plain):
            return None if _CANCELLED.search(plain) else Plan(plan_kind(plain), when.day, last)
        return None
    if _undated(plain):
        kind = plan_kind(plain)
        return Plan(kind, horizon_days=HORIZON_DAYS[kind])
    return None


def read_plan(text: str, said_at: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> Plan | None:
    """The plan ``text`` states when it was said at ``said_at`` (aware; naive is
    UTC), in zone ``tz``; None when it is not about the future (module docstring).
    Raises ValueError for an unknown zone name."""
    if not text:
        return None
    tzi = _tzinfo(tz)
    return _read(text, _local(said_at, tzi), said_at, tzi)


def plan_of(text: str, created_at: datetime | None, event_time: datetime | None, event_end: datetime | None,
            tz: str | tzinfo | None = DEFAULT_TZ) -> Plan | None:
    """The plan a stored memory holds: its ``event_time`` (capture's reading of the
    day or period it names; ``event_end`` exclusive, None for a day) when it starts
    after the day the memory was said (``created_at``), or has not ended then and
    the text holds a future marker — not called off (「周五的聚会取消了」); without an event time, an undated plan of the
    text (``read_plan`` of the text with its date suffix, 「（2027-01）」, cut). None
    otherwise. Times are aware UTC datetimes; days are read in zone ``tz``."""
    tzi = _tzinfo(tz)
    said = created_at or _EPOCH
    said_day = _local(said, tzi)
    if event_time is None:
        plan = read_plan(_DATE_SUFFIX.sub("", text), said, tzi)
        return plan if plan is not None and not plan.dated else None
    first = _local(event_time, tzi)
    last = _local(event_end - timedelta(microseconds=1), tzi) if event_end is not None and event_end > event_time \
        else first
    if last < said_day:
        return None
    plain = to_simplified(_DATE_SUFFIX.sub("", text))
    if _DARK.search(plain):
        return None
    if (first > said_day or _dated_future(plain)) and not _CANCELLED.search(plain):
        return Plan(plan_kind(plain), first, last)
    return None


def plan_state(memory, now: datetime, tz: str | tzinfo | None = DEFAULT_TZ) -> PlanState | None:
    """Where ``memory`` (a ``memory.types.Memory``, or anything with ``text``,
    ``created_at``, ``event_time`` and ``event_end``) stands at ``now`` as a plan:
    PAST once ``now``'s day (zone ``tz``) is after the last day it names, AHEAD
    before; an undated plan AHEAD for ``horizon_days`` days after it was said,
    MENTIONED after; None when it is not a plan (``plan_of``) or is a birthday
    (key ``profile.birthday``: it comes back every year)."""
    if getattr(memory, "key", "") == "profile.birthday":
        return None  # a birthday comes back every year: no plan that passes
    tzi = _tzinfo(tz)
    plan = plan_of(memory.text, memory.created_at, memory.event_time, getattr(memory, "event_end", None), tzi)
    if plan is None:
        return None
    today = _local(now, tzi)
    if plan.dated:
        assert plan.last is not None
        return PlanState.PAST if today > plan.last else PlanState.AHEAD
    said = _local(memory.created_at or _EPOCH, tzi)
    return PlanState.MENTIONED if (today - said).days > (plan.horizon_days or 0) else PlanState.AHEAD


# message ids (locales/) of a weekday earlier this week and of last week, Monday first
_THIS_WEEK = ("this Monday", "this Tuesday", "this Wednesday", "this Thursday", "this Friday", "this Saturday",
              "this Sunday")
_LAST_WEEK = ("last Monday", "last Tuesday", "last Wednesday", "last Thursday", "last Friday", "last Saturday",
              "last Sunday")


def event_when_text(first: date, last: date, now: datetime, lang: str, tz: str | tzinfo | None = DEFAULT_TZ) -> str:
    """A past day or period named from ``now``'s day in zone ``tz``, in ``lang``
    (locales/): a day as 「昨天」 / "yesterday", 「这周三」 / "this Wednesday" (earlier
    this week), 「上周三」 / "last Wednesday" (last week), else "N days ago"; a
    period as "last week" / "last month" when it is exactly that, else its label
    (``memory.dates.days_label``: 2026-11, 2026-12-12~2026-12-13)."""
    today = _local(now, _tzinfo(tz))
    if first != last:
        monday = today - timedelta(days=today.weekday())
        if first == monday - timedelta(days=7) and last == monday - timedelta(days=1):
            return translate(lang, "last week")
        this_month = today.replace(day=1)
        prev = (this_month - timedelta(days=1)).replace(day=1)
        if first == prev and last == this_month - timedelta(days=1):
            return translate(lang, "last month")
        return days_label(first, last)
    days = (today - first).days
    if days <= 0:
        return translate(lang, "today")
    if days == 1:
        return translate(lang, "yesterday")
    week = (today - timedelta(days=today.weekday()) - (first - timedelta(days=first.weekday()))).days // 7
    if week in (0, 1):
        return translate(lang, (_THIS_WEEK, _LAST_WEEK)[week][first.weekday()])
    return translate_plural(lang, "{n} day ago", "{n} days ago", days)
