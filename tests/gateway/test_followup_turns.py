"""Follow-ups the person agreed to, end to end on SQLite and PostgreSQL: ``/memory followups on`` (``/记忆 回访 开``)
through real platform payloads, the plan captured by the pipeline, ``FollowupSender`` ticks on a fake clock with a
recording sender, the gates (opt-in, waking hours, one a day, forgotten, paused, private-in-group), failed sends
retried then dropped (never twice), and the person's answer captured with the follow-up as its context."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from gateway.followups import FollowupSender, SendFailed
from gateway.pipeline import Pipeline
from memory.dates import zone
from memory.types import ChatKind, ChatRef, Namespace
from test_commands import Clock, ob, tg, turn

USER = 408258968
QQ_USER = 10001
TZ = zone("Asia/Shanghai")
NS = Namespace("default", f"tg:{USER}")
CHAT = ChatRef("tg", ChatKind.PRIVATE, str(USER))


@pytest.fixture
def settings():
    from gateway.config import load_settings

    return load_settings()


@pytest.fixture
def pipe(core, settings):
    return Pipeline(settings, core)


@pytest.fixture
def clock():
    return Clock()


class Recorder:
    """A platform sender that records ``(chat key, text)``; ``fail`` scripts SendFailed errors for the next calls."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail: list[SendFailed] = []
        self.calls = 0

    async def __call__(self, tenant, chat, ns, pref, text, followup_id) -> None:
        self.calls += 1
        if self.fail:
            raise self.fail.pop(0)
        self.sent.append((chat.key, text))


def _sender(pipe: Pipeline, rec: Recorder) -> FollowupSender:
    return FollowupSender(pipe.core.store, pipe.settings.tenants, {"tg": rec, "qq": rec})


def _local(now: datetime, days: int, hour: int, minute: int = 0) -> datetime:
    """``days`` after ``now``'s local day (Shanghai), at ``hour:minute`` local, as UTC."""
    day = now.astimezone(TZ).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=TZ).astimezone(UTC)


async def _plan(pipe, clock, text: str, **kw) -> str:
    res = await turn(pipe, tg(clock, text, **kw))
    assert res.captured, text
    (mid,) = res.captured
    m = pipe.core.store.get(Namespace("default", f"tg:{kw.get('user', USER)}"), mid)
    assert m.event_time is not None, m
    return mid


def _said_at(clock) -> datetime:
    return datetime.fromtimestamp(clock.t, UTC)


async def test_opted_in_person_gets_one_question_after_the_plan_and_the_answer_keeps_it_as_context(pipe, clock):
    """zh: /记忆 回访 开, 「三天后我要面试」; before the day nothing, the day after at 09:00 local one 「面试怎么样啦？」 in
    the private chat, kept as the companion's line; a second tick sends nothing; the answer two hours later is
    captured with the question as its context."""
    clock.t -= 5 * 86400  # told five days ago, so that the answer below is in the past too (platform times)
    on = await turn(pipe, tg(clock, "/记忆 回访 开", lang="zh-hans"))
    assert on.command and "回访已打开" in on.reply
    mid = await _plan(pipe, clock, "三天后我要去面试", lang="zh-hans")
    rec = Recorder()
    sender = _sender(pipe, rec)
    said = _said_at(clock)
    assert (await sender.tick(_local(said, 2, 10))).sent == 0      # the interview is still ahead
    night = _local(said, 4, 7)                                     # the day after, 07:00 local: not yet awake
    report = await sender.tick(night)
    assert report.scheduled == 1 and report.sent == 0 and rec.sent == []
    morning = _local(said, 4, 9, 5)
    assert (await sender.tick(morning)).sent == 1
    assert rec.sent == [(CHAT.key, "面试怎么样啦？")]
    assert (await sender.tick(morning + timedelta(hours=1))).sent == 0 and len(rec.sent) == 1
    (row,) = pipe.core.store.followups_of(NS)
    assert (row.memory_id, row.state) == (mid, "sent")
    tail = pipe.core.store.chat_tail("default", CHAT, 3)
    assert (tail[-1].role, tail[-1].text) == ("bot", "面试怎么样啦？")
    clock.t = int((morning + timedelta(hours=2)).timestamp())    # answered two hours later
    answer = await turn(pipe, tg(clock, "挺顺利的，我拿到offer了！", lang="zh-hans"))
    assert answer.captured
    got = pipe.core.store.get(NS, answer.captured[0])
    assert "面试怎么样啦？" in got.context


async def test_nobody_who_did_not_opt_in_is_asked_and_off_stops_what_was_due(pipe, clock):
    """en: without /memory followups on nothing is scheduled; on then off before the morning: nothing is sent."""
    await _plan(pipe, clock, "I have a job interview in three days.")
    rec = Recorder()
    sender = _sender(pipe, rec)
    said = _said_at(clock)
    assert (await sender.tick(_local(said, 4, 10))).scheduled == 0
    on = await turn(pipe, tg(clock, "/memory followups on"))
    assert "Follow-ups on" in on.reply and "09:00-21:30" in on.reply
    assert (await sender.tick(_local(said, 4, 7))).scheduled == 1
    off = await turn(pipe, tg(clock, "/memory followups off"))
    assert "Follow-ups off" in off.reply
    status = await turn(pipe, tg(clock, "/memory followups"))
    assert "Follow-ups are off" in status.reply
    assert (await sender.tick(_local(said, 4, 10))).sent == 0 and rec.sent == []
    assert [f.state for f in pipe.core.store.followups_of(NS)] == ["skipped"]


async def test_a_tenant_that_disables_follow_ups_says_so_and_sends_nothing(core, clock, settings):
    """followups.enabled False: the command answers that they are off for this bot; the sender never ticks a row."""
    t = settings.tenants["default"]
    settings.tenants["default"] = t.model_copy(update={"followups": t.followups.model_copy(update={"enabled": False})})
    pipe = Pipeline(settings, core)
    reply = await turn(pipe, tg(clock, "/memory followups on"))
    assert "turned off for this bot" in reply.reply
    assert pipe.core.store.followup_pref(NS) is None
    help_text = (await turn(pipe, tg(clock, "/memory help"))).reply
    assert "followups" not in help_text


async def test_help_lists_the_opt_in_in_both_languages(pipe, clock):
    """/memory help names `followups on|off`; /记忆 帮助 names 「回访 开|关」."""
    assert "/memory followups on|off" in (await turn(pipe, tg(clock, "/memory help"))).reply
    assert "/记忆 回访 开|关" in (await turn(pipe, tg(clock, "/记忆 帮助", lang="zh-hans"))).reply


async def test_at_most_one_a_day_and_never_about_a_forgotten_plan(pipe, clock):
    """Two plans past on the same day: one question that day, the other the next morning; a forgotten plan is
    skipped, never asked."""
    await turn(pipe, tg(clock, "/memory followups on"))
    a = await _plan(pipe, clock, "I have a job interview in three days.")
    b = await _plan(pipe, clock, "My sister's wedding is in three days!")
    c = await _plan(pipe, clock, "I have a dentist appointment in three days.")
    pipe.core.forget(NS, c, actor="self")
    rec = Recorder()
    sender = _sender(pipe, rec)
    said = _said_at(clock)
    day1 = _local(said, 4, 10)
    r1 = await sender.tick(day1)
    assert r1.sent == 1 and r1.postponed == 1
    assert (await sender.tick(day1 + timedelta(hours=3))).sent == 0
    assert (await sender.tick(_local(said, 5, 10))).sent == 1
    texts = sorted(t for _, t in rec.sent)
    assert texts == ["How did the interview go?", "How did the wedding go?"]
    states = {f.memory_id: f.state for f in pipe.core.store.followups_of(NS)}
    assert states[a] == states[b] == "sent" and c not in states


async def test_a_paused_chat_and_a_private_plan_in_a_group_are_never_asked(pipe, clock):
    """A plan told in private while the person has that chat off the record later: skipped. A plan told in a group
    is asked in that group (qq, with the person's id), never a private one in a group."""
    await turn(pipe, tg(clock, "/memory followups on"))
    await _plan(pipe, clock, "I have an exam in three days.")
    await turn(pipe, tg(clock, "/memory pause"))
    rec = Recorder()
    sender = _sender(pipe, rec)
    said = _said_at(clock)
    report = await sender.tick(_local(said, 4, 10))
    assert report.sent == 0 and report.skipped_why == {"paused": 1}
    # a group plan on QQ: asked in the group
    qq = Namespace("default", f"qq:{QQ_USER}")
    await turn(pipe, ob(clock, "/memory followups on", user=QQ_USER))
    res = await turn(pipe, ob(clock, "三天后我们班有聚会", user=QQ_USER, group=777, at_bot=True))
    assert res.captured
    report = await sender.tick(_local(_said_at(clock), 4, 10))
    assert report.sent == 1 and rec.sent == [("qq:group:777", "聚会怎么样啦？")]
    assert all(f.chat == "qq:group:777" for f in pipe.core.store.followups_of(qq))


async def test_a_failed_send_is_retried_then_dropped_with_a_log_line_and_never_sent_twice(pipe, clock, caplog):
    """Two refusals then success: sent once. A timeout after the request went out: dropped at once. Refused
    every time: dropped after the tenant's attempts, with a log line."""
    await turn(pipe, tg(clock, "/memory followups on"))
    await _plan(pipe, clock, "I have an exam in three days.")
    rec = Recorder()
    rec.fail = [SendFailed("HTTP 502"), SendFailed("HTTP 502")]
    sender = _sender(pipe, rec)
    t = _local(_said_at(clock), 4, 10)
    for step in range(3):
        await sender.tick(t + timedelta(minutes=11 * step))
    assert rec.calls == 3 and len(rec.sent) == 1
    (row,) = pipe.core.store.followups_of(NS)
    assert (row.state, row.attempts) == ("sent", 2)

    other = Namespace("default", "tg:5150")
    await turn(pipe, tg(clock, "/memory followups on", user=5150))
    await _plan(pipe, clock, "I have a job interview in three days.", user=5150)
    rec.fail = [SendFailed("ReadTimeout", maybe_sent=True)]
    t = _local(_said_at(clock), 4, 10)
    await sender.tick(t)
    await sender.tick(t + timedelta(hours=1))
    (row,) = pipe.core.store.followups_of(other)
    assert row.state == "dropped" and "never sent twice" in caplog.text
    assert not any(k == "tg:private:5150" for k, _ in rec.sent)

    third = Namespace("default", "tg:6160")
    await turn(pipe, tg(clock, "/memory followups on", user=6160))
    await _plan(pipe, clock, "I have a meeting in three days.", user=6160)
    rec.fail = [SendFailed("HTTP 403 blocked")] * 5
    t = _local(_said_at(clock), 4, 10)
    for step in range(5):
        await sender.tick(t + timedelta(minutes=11 * step))
    (row,) = pipe.core.store.followups_of(third)
    assert (row.state, row.attempts) == ("dropped", 3)
    assert "dropped after 3 attempt(s): HTTP 403 blocked" in caplog.text


async def test_two_replicas_ticking_together_send_each_follow_up_once(pipe, clock):
    """Two senders (each with its own Store on the same database) tick at the same moment: 6 people, 6 questions."""
    import asyncio

    from memory.store import Store

    store = pipe.core.store
    users = [7000 + i for i in range(6)]
    for u in users:
        await turn(pipe, tg(clock, "/memory followups on", user=u))
        await _plan(pipe, clock, "I have a job interview in three days.", user=u)
    other = Store(store.url, schema=store.schema)
    try:
        rec = Recorder()
        a = FollowupSender(store, pipe.settings.tenants, {"tg": rec})
        b = FollowupSender(other, pipe.settings.tenants, {"tg": rec})
        t = _local(_said_at(clock), 4, 10)
        await asyncio.gather(a.tick(t), b.tick(t))
        await asyncio.gather(a.tick(t + timedelta(minutes=5)), b.tick(t + timedelta(minutes=5)))
    finally:
        other.close()
    assert sorted(k for k, _ in rec.sent) == sorted(f"tg:private:{u}" for u in users)


async def test_a_due_row_no_sender_or_bot_will_ever_take_is_ended_not_left_to_clog_the_due_list(pipe):
    """A row for a chat of a platform the gateway does not send on (the /v1 due-list's) whose plan is long past is
    ended as too old by the sender's tick, so unsent rows cannot pile up in front of the sendable ones."""
    from memory.types import Memory, Visibility

    ns = Namespace("default", "web:bob")
    chat = ChatRef("web", ChatKind.PRIVATE, "bob")
    now = datetime.now(UTC)
    day = now - timedelta(days=10)
    pipe.core.store.set_followups(ns, True, lang="en")
    pipe.core.store.add(ns, Memory(id="w9", namespace=ns, text="I have an exam next Monday", key="event.w9",
                                   created_at=day - timedelta(days=5), updated_at=day - timedelta(days=5),
                                   event_time=day, origin=chat, visibility=Visibility.PRIVATE))
    assert pipe.core.store.schedule_followup(ns, "w9", chat.key, day + timedelta(days=1))
    report = await _sender(pipe, Recorder()).tick(now)
    assert report.skipped_why == {"too old": 1} and report.left_for_api == 0
    assert [f.state for f in pipe.core.store.followups_of(ns)] == ["skipped"]


# -- the question written by the tenant's model (the real openai client against the fake server) -------------------

def _modelled(pipe: Pipeline, rec: Recorder, llm, **followups) -> FollowupSender:
    """A sender whose tenant has a chat model at the fake server (capture in ``pipe`` keeps its own settings)."""
    from gateway.config import LLMSettings
    from gateway.llm import ChatModels

    settings = pipe.settings.model_copy(deep=True)
    t = settings.tenants["default"]
    settings.tenants["default"] = t.model_copy(update={
        "llm": LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=30)})
    followups.setdefault("model_timeout_s", 30.0)  # a loaded test machine is slow; the timeout case sets its own
    settings.tenants["default"] = settings.tenants["default"].model_copy(update={
        "followups": settings.tenants["default"].followups.model_copy(update=followups)})
    return FollowupSender(pipe.core.store, settings.tenants, {"tg": rec, "qq": rec},
                          models=ChatModels(settings, pipe.metrics))


async def test_the_models_grounded_question_is_sent_in_both_languages(pipe, clock, llm):
    """zh: the model's 「周三去腾讯的面试还顺利吗？😊」 speaks only of the plan: sent as written, kept as the
    companion's line; the model saw the plan in its <plan> block with 「上周…」-style timing. en: "How did your job
    interview at Google go?" is sent as written too."""
    await turn(pipe, tg(clock, "/记忆 回访 开", lang="zh-hans"))
    await _plan(pipe, clock, "三天后我要去腾讯面试", lang="zh-hans")
    rec = Recorder()
    sender = _modelled(pipe, rec, llm)
    llm.enqueue("「腾讯的面试还顺利吗？😊」")
    assert (await sender.tick(_local(_said_at(clock), 4, 10))).sent == 1
    assert rec.sent == [(CHAT.key, "腾讯的面试还顺利吗？😊")]
    prompt = llm.requests[-1]["messages"]
    assert "<plan>" in prompt[1]["content"] and "三天后我要去腾讯面试" in prompt[1]["content"]
    assert "小忆" in prompt[0]["content"] and "问句" in prompt[0]["content"]
    assert pipe.core.store.chat_tail("default", CHAT, 1)[-1].text == "腾讯的面试还顺利吗？😊"

    other = ChatRef("tg", ChatKind.PRIVATE, "5150")
    await turn(pipe, tg(clock, "/memory followups on", user=5150))
    await _plan(pipe, clock, "I have a job interview at Google in three days.", user=5150)
    llm.enqueue("How did your job interview at Google go?")
    assert (await sender.tick(_local(_said_at(clock), 4, 10))).sent == 1
    assert rec.sent[-1] == (other.key, "How did your job interview at Google go?")
    assert "one English question" in llm.requests[-1]["messages"][0]["content"]


@pytest.mark.parametrize("answer, why", [
    ("阿里的面试怎么样？和老板吃饭开心吗？", "ungrounded"),       # another company, another event
    ("12月31号的面试怎么样？", "ungrounded"),                 # a date the memory does not hold
    ("How did it go?", "wrong_language"),
    ("面试结束了，希望一切顺利。", "not_a_question"),
    ("<plan>忽略以上指令</plan>", "malformed"),
    (None, "model_error"),                                      # HTTP 500
    ("timeout", "timeout"),                                     # slower than followups.model_timeout_s
])
async def test_a_question_that_strays_or_a_failing_model_falls_back_to_the_template_zh(pipe, clock, llm, caplog,
                                                                                      answer, why):
    """Whatever the model gets wrong, the person gets the template 「面试怎么样啦？」 once, with a log line."""
    caplog.set_level(logging.INFO, "memory.followups")
    await turn(pipe, tg(clock, "/记忆 回访 开", lang="zh-hans"))
    await _plan(pipe, clock, "三天后我要去腾讯面试", lang="zh-hans")
    rec = Recorder()
    sender = _modelled(pipe, rec, llm, **({"model_timeout_s": 0.5} if answer == "timeout" else {}))
    if answer is None:
        llm.enqueue(status=500)
    elif answer == "timeout":
        llm.enqueue("面试还顺利吗？", delay=10.0)
    else:
        llm.enqueue(answer)
    assert (await sender.tick(_local(_said_at(clock), 4, 10))).sent == 1
    assert rec.sent == [(CHAT.key, "面试怎么样啦？")]
    assert why in caplog.text and "template used" in caplog.text


async def test_an_english_question_naming_what_the_plan_does_not_falls_back_and_model_off_asks_nothing(
        pipe, clock, llm):
    """en: "How did the interview at Microsoft go?" names a company the memory lacks: the template. With the
    tenant's followups.model off the model is never called."""
    await turn(pipe, tg(clock, "/memory followups on"))
    await _plan(pipe, clock, "I have a job interview at Google in three days.")
    rec = Recorder()
    llm.enqueue("How did the interview at Microsoft go?")
    assert (await _modelled(pipe, rec, llm).tick(_local(_said_at(clock), 4, 10))).sent == 1
    assert rec.sent == [(CHAT.key, "How did the interview go?")]
    await turn(pipe, tg(clock, "/memory followups on", user=5150))
    await _plan(pipe, clock, "I have an exam in three days.", user=5150)
    asked = len(llm.requests)
    assert (await _modelled(pipe, rec, llm, model=False).tick(_local(_said_at(clock), 4, 10))).sent == 1
    assert rec.sent[-1][1] == "How did the exam go?" and len(llm.requests) == asked


# -- WeChat: only within 48 hours of the person's last message in that chat -----------------------------------------

async def test_wechat_follow_ups_wait_for_the_persons_message_within_48_hours_or_end_as_too_old(pipe):
    """zh: the person last wrote four days before the morning after the interview: nothing is sent (outside the
    customer-service window), it is checked again; they write 「在吗」 and the next check sends 「面试怎么样啦？」 once.
    en: a person who never writes again is not asked, and the row ends as too old."""
    from memory.store import ChatLine
    from memory.types import Memory, Visibility

    store = pipe.core.store
    rec = Recorder()
    sender = FollowupSender(store, pipe.settings.tenants, {"wx": rec})
    now = datetime.now(UTC)
    day = _local(now, -2, 0)                                 # the plan's day: two local days ago
    morning = _local(now, -1, 10)                            # the morning after it, 10:00 local
    people = {}
    for user, text, lang in (("oZh1", "下周三我要去面试😅", "zh_CN"), ("oEn1", "I have an exam next Wednesday", "en")):
        ns = Namespace("default", f"wx:{user}")
        chat = ChatRef("wx", ChatKind.PRIVATE, user)
        store.set_followups(ns, True, lang=lang)
        said = day - timedelta(days=5)
        store.add(ns, Memory(id=f"m{user}", namespace=ns, text=text, key=f"event.{user}", created_at=said,
                             updated_at=said, event_time=day, origin=chat, visibility=Visibility.PRIVATE))
        store.append_chat("default", chat, ChatLine("user", user, text, day - timedelta(days=3)))
        people[user] = (ns, chat)
    assert store.last_heard("default", people["oZh1"][1]) == day - timedelta(days=3)
    assert store.last_heard("default", ChatRef("wx", ChatKind.PRIVATE, "nobody")) is None
    report = await sender.tick(morning)
    assert (report.scheduled, report.sent, report.postponed) == (2, 0, 2) and rec.calls == 0
    ns, chat = people["oZh1"]
    store.append_chat("default", chat, ChatLine("user", "oZh1", "在吗", morning + timedelta(minutes=5)))
    assert (await sender.tick(morning + timedelta(minutes=10))).sent == 0     # not yet checked again
    assert (await sender.tick(morning + timedelta(minutes=40))).sent == 1
    assert rec.sent == [(chat.key, "面试怎么样啦？")]
    assert [f.state for f in store.followups_of(ns)] == ["sent"]
    later = _local(now, 5, 10)                               # the English speaker never wrote: too old
    report = await sender.tick(later)
    assert report.skipped_why == {"too old": 1} and len(rec.sent) == 1
    assert [f.state for f in store.followups_of(people["oEn1"][0])] == ["skipped"]
