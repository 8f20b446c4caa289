"""/memory mood (/记忆 心情): the last weeks' mood in plain words, the moments that
moved it most and what was told on this day a year ago — through real Telegram and
OneBot payloads, the parsers and Pipeline.handle, on SQLite and PostgreSQL; in a
group only what that group may see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.config import load_settings
from gateway.pipeline import Pipeline
from test_commands import ADMIN_TG, Clock, ob, tg, turn

DAY = 86400


@pytest.fixture
def pipe(core):
    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"admins": [f"tg:{ADMIN_TG}"], "tz": "UTC"})
    return Pipeline(s, core)


def _clock(days_ago: int) -> Clock:
    clock = Clock()
    clock.t = int((datetime.now(UTC) - timedelta(days=days_ago)).timestamp())
    return clock


async def test_mood_tells_the_weeks_in_words_and_the_moments_that_moved_them_en(pipe):
    """A sad week, a happy one and a plain fact: the reply names each week's mood in words
    ("very low", "very good"), the trend, the two moments by |valence|·arousal (never the
    fact), and the anniversary of what was told a year ago today."""
    clock = _clock(365)
    await turn(pipe, tg(clock, "I was so happy today, my sister came to visit!"))
    clock.t += 355 * DAY
    cat = await turn(pipe, tg(clock, "My cat died, I am heartbroken 😢"))
    await turn(pipe, tg(clock, "I live in Chengdu"))
    clock.t += 7 * DAY
    await turn(pipe, tg(clock, "I'm so happy and excited about my new puppy!!"))
    assert cat.captured
    clock.t += 3 * DAY - 600  # a year to the day after the first line
    reply = (await turn(pipe, tg(clock, "/memory mood"))).reply
    assert reply.startswith("How the last 4 weeks felt, from what you told me:")
    assert "very low (1 moment)" in reply and "very good (1 moment)" in reply
    assert "nothing told with feeling" in reply and "Better lately." in reply
    moved = reply.split("What moved you most:")[1]
    assert "puppy" in moved and "heartbroken" in moved and "Chengdu" not in moved
    assert "A year ago today you told me: “I was so happy today, my sister came to visit!" in reply
    six = (await turn(pipe, tg(clock, "/memory mood 1")))
    assert six.command and six.captured == [] and "How the last 1 week felt" in six.reply


async def test_mood_in_chinese_on_qq_and_traditional(pipe):
    """「/记忆 心情」 on QQ answers in Chinese words (很低落, 很开心, 最牵动你心情的几件事); 「/記憶 情緒」 too;
    a person who told nothing with feeling is told so."""
    clock = _clock(10)
    await turn(pipe, ob(clock, "我的猫走了，好难过😭", user=10001))
    clock.t += 8 * DAY
    await turn(pipe, ob(clock, "今天好开心啊！！升职了", user=10001))
    reply = (await turn(pipe, ob(clock, "/记忆 心情", user=10001))).reply
    assert reply.startswith("从你跟我说过的事里看，最近 4 周的心情：")
    assert "很低落（1 件事）" in reply and "很开心（2 件事）" in reply and "最近好一些了" in reply
    assert "最牵动你心情的几件事：" in reply and "「我的猫走了，好难过" in reply and "（难过）" in reply
    traditional = (await turn(pipe, ob(clock, "/記憶 情緒 2", user=10001))).reply
    assert traditional.startswith("从你跟我说过的事里看，最近 2 周的心情：")
    nothing = (await turn(pipe, ob(clock, "/记忆 心情", user=10002))).reply
    assert nothing == "最近 4 周你还没跟我说过带着心情的事。"


async def test_mood_in_a_group_tells_only_what_that_group_may_see(pipe):
    """What was said in private never reaches a group's mood reply, nor what was said in
    another group; in private the person hears both (OneBot group events addressed to the bot)."""
    clock = _clock(3)
    await turn(pipe, ob(clock, "外婆走了，我好难过😢", user=10001))
    await turn(pipe, ob(clock, "我们队夺冠了，太开心了！！", user=10001, group=5551, at_bot=True))
    await turn(pipe, ob(clock, "演唱会取消了，气死我了！", user=10001, group=5552, at_bot=True))
    clock.t += DAY
    in_group = (await turn(pipe, ob(clock, "/记忆 心情", user=10001, group=5551, at_bot=True))).reply
    assert "夺冠" in in_group and "外婆" not in in_group and "演唱会" not in in_group
    assert "这里只列出在本群说过的内容" in in_group
    private = (await turn(pipe, ob(clock, "/记忆 心情", user=10001))).reply
    assert "外婆" in private and "夺冠" in private and "演唱会" in private


async def test_mood_of_another_person_needs_an_admin_and_help_lists_it(pipe):
    """Another person's mood is an admin's view (audited); anyone else is refused; help lists mood."""
    clock = _clock(2)
    await turn(pipe, tg(clock, "I'm so anxious about tomorrow's exam", user=555))
    clock.t += DAY
    refused = (await turn(pipe, tg(clock, "/memory mood tg:555"))).reply
    assert refused == "You can only manage your own memories."
    seen = (await turn(pipe, tg(clock, "/memory mood tg:555", user=ADMIN_TG))).reply
    assert "How the last 4 weeks felt for tg:555, from what they told me:" in seen and "exam" in seen
    assert "/memory mood [weeks] — how the last weeks felt" in (await turn(pipe, tg(clock, "/memory help"))).reply
    assert "/记忆 心情 [周数]" in (await turn(pipe, tg(clock, "/记忆 帮助", lang="zh-hans"))).reply
    bad = (await turn(pipe, tg(clock, "/memory mood lately"))).reply
    assert bad.startswith("I can't read “lately” as a number of weeks") and "can't tell who" not in bad


@pytest.mark.parametrize("weeks,n", [("3 weeks", 3), ("3w", 3), ("２", 2), ("12", 12), ("3 WEEKS", 3)])
async def test_mood_reads_the_weeks_as_the_durations_are_en(pipe, weeks, n):
    """English and full-width forms: "3 weeks" (two words), "3w", "２"."""
    clock = _clock(1)
    reply = (await turn(pipe, tg(clock, f"/memory mood {weeks}", user=6101))).reply
    assert reply == f"You haven't told me anything with feeling in the last {n} weeks."


@pytest.mark.parametrize("weeks,n", [("三", 3), ("十二", 12), ("3周", 3), ("三个星期", 3), ("３ 周", 3), ("两週", 2)])
async def test_mood_reads_the_weeks_as_the_durations_are_zh(pipe, weeks, n):
    """Chinese numerals and units: 「三」「十二」「3周」「三个星期」「３ 周」「两週」."""
    clock = _clock(1)
    reply = (await turn(pipe, ob(clock, f"/记忆 心情 {weeks}", user=6102))).reply
    assert reply == f"最近 {n} 周你还没跟我说过带着心情的事。"


@pytest.mark.parametrize("weeks", ["0", "-1", "53", "99999", "1e9", "2.5"])
async def test_mood_out_of_range_is_told_the_range(pipe, weeks):
    """A number outside 1…12 is refused with the range (never silently 4 or 12), zh and en alike."""
    clock = _clock(1)
    en = await turn(pipe, tg(clock, f"/memory mood {weeks}", user=6103))
    assert en.command and en.reply == (f"The mood covers 1 to 12 weeks; “{weeks}” is outside that. "
                                       "Try e.g. /memory mood 8.")
    zh = (await turn(pipe, ob(clock, f"/记忆 心情 {weeks}", user=6104))).reply
    assert zh == f"心情能看 1 到 12 周，「{weeks}」不在这个范围里。可以这样发：/记忆 心情 8。"


async def test_mood_unreadable_weeks_get_a_usage_line_not_who(pipe):
    """"abc", "last month", 「上个月」 are no number of weeks: a usage line, never "can't tell who"; an
    @-mention nobody resolves is still a person refused as such."""
    clock = _clock(1)
    for words in ("abc", "last month"):
        reply = (await turn(pipe, tg(clock, f"/memory mood {words}", user=6105))).reply
        assert reply == (f"I can't read “{words}” as a number of weeks; nothing shown. Try e.g. /memory mood 8 "
                         "(1 to 12 weeks).")
    zh = (await turn(pipe, ob(clock, "/记忆 心情 上个月", user=6106))).reply
    assert zh == "我看不懂「上个月」是几周，什么也没显示。可以这样发：/记忆 心情 8（1 到 12 周）。"
    who = (await turn(pipe, tg(clock, "/memory mood @nobody_here", user=6105))).reply
    assert who.startswith("I can't tell who @nobody_here is.")
