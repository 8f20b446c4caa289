"""What a tester met after the first round of off-the-record and why-not (issue 38), through real Telegram and
OneBot payloads → parser → Pipeline.handle on SQLite and PostgreSQL, zh and en: a duration past the maximum is
told as too long (with the maximum), not as unreadable; 「/记忆 为什么没有…」 written without spaces is the why-not
command; a pause's end is shown with its zone; a pause outlives an identity link; ``huiyi config check`` shows
``ids`` in never_store, which is always in force."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from gateway.durations import DurationTooLong, parse_duration
from gateway.pipeline import Pipeline
from memory.types import Namespace
from test_commands import ADMIN_TG, Clock, ob, tg, turn

USER = 408258968
QQ_USER = 10001


@pytest.fixture
def settings():
    from gateway.config import load_settings

    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"admins": [f"tg:{ADMIN_TG}"]})
    return s


@pytest.fixture
def pipe(core, settings):
    return Pipeline(settings, core)


@pytest.fixture
def clock():
    return Clock()


@pytest.mark.parametrize("text", ["31d", "45d", "99999h", "99999999999999999999h", "三百天", "99天"])
def test_a_duration_past_the_maximum_is_read_and_refused_as_too_long(text):
    """gateway.durations tells a length past 30 days (however far: 10**20 hours) from one it cannot read."""
    with pytest.raises(DurationTooLong):
        parse_duration(text)
    assert parse_duration("forever") is None and parse_duration("好久") is None


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("/memory pause 99999h", "en", "“99999h” is too long; nothing changed. At most 30 days."),
    ("/memory forget last 45d", "en", "“45d” is too long; nothing changed. At most 30 days."),
    ("/记忆 暂停 99天", "zh-hans", "「99天」太长了，什么都没有改变。最长30天。"),
    ("/记忆 忘记 最近 三百天", "zh-hans", "「三百天」太长了，什么都没有改变。最长30天。"),
])
async def test_a_too_long_duration_is_called_too_long_with_the_maximum_and_changes_nothing(
        pipe, clock, text, lang, expected):
    """/memory pause 99999h is answered "too long, at most 30 days" (not "can't read"); no pause starts and
    nothing is forgotten."""
    said = await turn(pipe, tg(clock, "I love green tea."))
    reply = await turn(pipe, tg(clock, text, lang=lang))
    assert expected in reply.reply and "can't read" not in reply.reply and "看不懂" not in reply.reply, reply.reply
    ns = Namespace.parse(said.namespace)
    assert pipe.core.store.paused(ns, f"tg:private:{USER}", datetime.now(UTC)) is None
    assert pipe.core.store.count(ns) == 1


def test_v1_pause_too_long_is_a_400_saying_too_long(core, settings):
    """PUT /v1/…/pause with 99999h: 400 naming "too long" and the 30 days; no pause starts."""
    from fastapi.testclient import TestClient

    from gateway.http.app import create_app

    app = create_app(settings, pipeline=Pipeline(settings, core))
    key = core.store.create_api_key("default", "admin")[1]
    with TestClient(app, headers={"X-API-Key": key}) as c:
        r = c.put("/v1/subjects/tg:42/pause", json={"chat": "tg:private:42", "duration": "99999h"})
        assert r.status_code == 400 and "too long" in r.text and "30 days" in r.text, r.text
        r = c.put("/v1/subjects/tg:42/pause", json={"chat": "tg:private:42", "duration": "一会儿"})
        assert r.status_code == 400 and "names no length of time" in r.text, r.text
        assert c.get("/v1/subjects/tg:42/pause", params={"chat": "tg:private:42"}).json()["paused"] is False


@pytest.mark.parametrize(("why", "words", "lang"), [
    ("/记忆 为什么没有", "煤球", "zh-hans"),       # no space between 为什么 and 没有
    ("/记忆 为什么没有", " 煤球", "zh-hans"),      # …nor after 没有 (the words follow at once)
    ("/記憶 為什麼沒有", " 煤球", "zh-hant"),
    ("/记忆 为什么没", " 煤球", "zh-hans"),
])
async def test_why_not_written_without_spaces_is_the_why_not_command(pipe, clock, why, words, lang):
    """「/记忆 为什么没有煤球」 (Chinese is written without spaces) answers why-not about the memory named, as
    「/记忆 为什么 没有 煤球」 does; it is not "unknown command"."""
    said = await turn(pipe, ob(clock, "我养了一只叫煤球的黑猫。", user=QQ_USER))
    (cat,) = said.captured
    spaced = await turn(pipe, ob(clock, f"/记忆 为什么 没有 {words.strip()}", user=QQ_USER))
    joined = await turn(pipe, ob(clock, why + words, user=QQ_USER))
    assert cat in spaced.reply and joined.reply == spaced.reply, (spaced.reply, joined.reply)


async def test_why_not_in_english_still_needs_its_words_and_an_unknown_word_stays_unknown(pipe, clock):
    """"/memory why not tea" answers about the tea memory; 「/记忆 为什么呀」 (no 没) is why, not why-not, and
    「/记忆 乱七八糟」 is still an unknown command (nothing is guessed)."""
    said = await turn(pipe, tg(clock, "I love green tea."))
    (tea,) = said.captured
    assert tea in (await turn(pipe, tg(clock, "/memory why not green tea"))).reply
    unknown = await turn(pipe, ob(clock, "/记忆 乱七八糟", user=QQ_USER))
    assert unknown.reply.startswith("没有这个指令"), unknown.reply


@pytest.mark.parametrize(("text", "lang", "zone"), [
    ("/memory pause 2h", "en", "(Asia/Shanghai, UTC+08:00)"),
    ("/记忆 暂停 30分钟", "zh-hans", "(Asia/Shanghai, UTC+08:00)"),
])
async def test_a_pause_reply_names_the_zone_of_its_end(pipe, clock, text, lang, zone):
    """The end of a pause is shown in the tenant's zone, and the zone is named (a person in another zone
    would otherwise read it as their own time); /memory help shows the same."""
    reply = await turn(pipe, tg(clock, text, lang=lang))
    assert zone in reply.reply, reply.reply
    helped = await turn(pipe, tg(clock, "/memory help", lang=lang))
    assert zone in helped.reply, helped.reply


async def test_a_pause_reply_in_utc_says_utc(core, settings, clock):
    """A tenant in UTC is told "(UTC)"."""
    settings.tenants["default"] = settings.tenants["default"].model_copy(update={"tz": "UTC"})
    reply = await turn(Pipeline(settings, core), tg(clock, "/memory pause 2h"))
    assert "(UTC)" in reply.reply, reply.reply


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
async def test_a_linked_persons_pause_still_holds(pipe, clock, lang):
    """A person paused in their Telegram chat; an admin then links their Telegram and QQ ids as one person
    (their namespace becomes person:…): the pause holds in that chat, their line there is not learned; their
    QQ chat was never paused and still learns; resume ends it."""
    said = "My sister lives in Lisbon." if lang == "en" else "我妹妹在里斯本读书。"
    await turn(pipe, tg(clock, "/memory pause" if lang == "en" else "/记忆 暂停", lang=lang))
    linked = await turn(pipe, tg(clock, f"/memory link tg:{USER} qq:{QQ_USER}", user=ADMIN_TG))
    assert "person:" in linked.reply, linked.reply
    line = await turn(pipe, tg(clock, said, lang=lang))
    assert line.namespace.startswith("default/person:") and line.paused and line.captured == [], line
    qq = await turn(pipe, ob(clock, "我对花生过敏。", user=QQ_USER))
    assert qq.namespace == line.namespace and not qq.paused and len(qq.captured) == 1
    await turn(pipe, tg(clock, "/memory resume" if lang == "en" else "/记忆 继续", lang=lang))
    again = await turn(pipe, tg(clock, said, lang=lang))
    assert not again.paused and len(again.captured) == 1


def test_a_pause_merged_into_one_of_the_person_keeps_the_longer(core):
    """Two linked identities both paused in one chat: the merged pause lasts as long as the longer (until
    resumed beats any end)."""
    from datetime import timedelta

    now = datetime.now(UTC)
    a, b, dst = (Namespace("default", s) for s in ("tg:1", "tg:2", "person:p1"))
    core.store.pause(a, "qq:group:5", now, now + timedelta(hours=1))
    core.store.pause(dst, "qq:group:5", now, now + timedelta(hours=3))
    core.store.pause(b, "qq:group:6", now, None)
    core.store.move_namespace(a, dst)
    core.store.move_namespace(b, dst)
    assert core.store.paused(dst, "qq:group:5", now + timedelta(hours=2)) is not None
    assert core.store.paused(dst, "qq:group:6", now + timedelta(days=9)) is not None
    assert core.store.pauses(a, now) == [] and core.store.pauses(b, now) == []


@pytest.mark.parametrize(("value", "shown"), [("[]", ["ids"]), ('["health"]', ["health", "ids"]),
                                              ('["ids","religion"]', ["ids", "religion"])])
def test_config_check_shows_ids_in_never_store_as_it_is_always_on(monkeypatch, value, shown):
    """`huiyi config check` prints never_store with ids, which is in force whatever is listed (an empty list
    printed [] while ID numbers were still dropped)."""
    from gateway.cli.main import app

    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__NEVER_STORE", value)
    result = CliRunner().invoke(app, ["config", "check"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tenants"]["default"]["never_store"] == shown
