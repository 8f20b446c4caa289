"""What /memory tells people and admins in chat reads right (issue 26 item 18), in
zh_CN and en: counts of one in the singular, stats without a model, why in a
person's words (terms for admins), the name an admin typed after a link, an edit
re-read from its new text, and a search hit found through the line it answered."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from bridges.contract import InboundMessage
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.store import ChatLine
from memory.types import Category, ChatKind, ChatRef, Namespace

ADMIN = "9001"
ID = re.compile(r"\b[0-9a-f]{12}\b")
PERSON_RE = re.compile(r"person:[0-9a-f]+")


class Chat:
    """Private (or group) messages of Telegram/OneBot people, each a minute after the last."""

    def __init__(self, pipe: Pipeline, lang: str = "zh") -> None:
        self.pipe = pipe
        self.lang = lang  # the platform's language hint (Telegram language_code)
        self.at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
        self.mid = 0

    async def say(self, text: str, *, sender: str = "111", platform: str = "tg", group: str | None = None,
                  role: str | None = None):
        self.at += timedelta(minutes=1)
        self.mid += 1
        msg = InboundMessage(platform=platform, message_id=str(self.mid), sender_id=sender, sender_name="阿杰",
                             chat_kind=ChatKind.GROUP if group else ChatKind.PRIVATE, chat_id=group or sender,
                             text=text, timestamp=self.at, is_command=text.startswith("/"), sender_role=role,
                             mentions_bot=bool(group), language=self.lang)
        return await self.pipe.handle("default", msg)


def _pipeline(core, **tenant) -> Pipeline:
    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"admins": [f"tg:{ADMIN}"], **tenant})
    return Pipeline(s, core)


@pytest.fixture
def chat(sqlite_core, lang):
    return Chat(_pipeline(sqlite_core), lang)


# -- counts of one: ngettext ------------------------------------------------------------------


@pytest.mark.parametrize("lang,fact,expected", [
    ("en", "I like hiking.", "default: 1 memory, 1 person, 1 chat, 2 turns"),
    ("zh", "我喜欢爬山", "default：1 条记忆，1 个人，1 个聊天，2 轮对话"),
])
async def test_stats_of_one_person_says_1_person_not_1_people(chat, lang, fact, expected):
    """One memory of one person in one chat: "1 memory, 1 person, 1 chat" (ngettext), not "1 memories, 1 people"."""
    await chat.say(fact, sender=ADMIN)
    stats = await chat.say("/memory stats" if lang == "en" else "/记忆 统计", sender=ADMIN)
    assert stats.reply.startswith(expected), stats.reply


@pytest.mark.parametrize("lang,fact,forget,ask,sure,gone,export", [
    ("en", "I like hiking.", "/memory forget all", "This forgets 1 memory of you for good. "
     "To go ahead, send within 2 minutes: /memory forget all confirm", "/memory forget all confirm",
     "Forgotten 1 memory of you.", "Here is the 1 memory I keep about you"),
    ("zh", "我喜欢爬山", "/记忆 忘记 all", "这将永久忘记关于你的 1 条记忆。如果确定，请在 2 分钟内发送：/记忆 忘记 全部 确认",
     "/记忆 忘记 all 确认", "已忘记关于你的 1 条记忆。", "这是我记得的关于你的 1 条记忆"),
])
async def test_one_memory_is_told_in_the_singular(chat, lang, fact, forget, ask, sure, gone, export):
    """export, forget all and its confirmation of one memory: "1 memory", never "1 memories"."""
    await chat.say(fact)
    assert (await chat.say("/memory export" if lang == "en" else "/记忆 导出")).reply.startswith(export)
    assert (await chat.say(forget)).reply == ask
    done = (await chat.say(sure)).reply
    assert done.startswith(gone) and ("Purged: memories 1" if lang == "en" else "已清除：记忆 1 条") in done, done


@pytest.mark.parametrize("lang,texts,expected", [
    ("en", ["I worked late again until ten tonight", "My boss changed the requirements again, so I worked late",
            "Worked late every day this week, my boss keeps changing things"],
     "Sorted 3 recent memories of you into 1 group and kept them as links"),
    ("zh", ["今天又加班到十点，工作压力好大", "老板又改需求了，今晚又要加班", "这周天天加班，工作压力好大"],
     "把你最近的 3 条记忆整理成 1 组，只记下了关联"),
])
async def test_consolidation_into_one_cluster_says_1_group(sqlite_core, monkeypatch, lang, texts, expected):
    """/memory consolidate without a model that finds one cluster says "into 1 group", not "1 groups"."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__MIN_NEW", "3")
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__MIN_INTERVAL_S", "0")
    chat = Chat(_pipeline(sqlite_core), lang)
    ns = Namespace("default", "tg:111")
    for text in texts:
        sqlite_core.add(ns, sqlite_core.new(ns, text))
    done = await chat.say("/memory consolidate" if lang == "en" else "/记忆 整理")
    assert done.reply.startswith(expected), done.reply


# -- stats without a model ----------------------------------------------------------------------


@pytest.mark.parametrize("lang,cmd,no_model,rate", [
    ("en", "/memory stats", "no chat model is configured", "recollection fallback rate"),
    ("zh", "/记忆 统计", "没有配置对话模型", "回忆降级率"),
])
async def test_stats_without_a_model_says_so_instead_of_a_fallback_rate(sqlite_core, llm, lang, cmd, no_model,
                                                                        rate):
    """A gateway without a chat model retells nothing, so every recollection is the template: stats says
    there is no model, not "fallback rate 100.0%"; with a model the rate is shown."""
    chat = Chat(_pipeline(sqlite_core), lang)
    await chat.say("我养了一只叫煤球的黑猫")
    await chat.say("你还记得煤球吗？")  # a recall: its recollection falls back (no model)
    bare = await chat.say(cmd, sender=ADMIN)
    assert no_model in bare.reply and "100.0%" not in bare.reply and rate not in bare.reply, bare.reply

    t = chat.pipe.settings.tenants["default"]
    chat.pipe.settings.tenants["default"] = t.model_copy(update={"llm": t.llm.model_copy(
        update={"base_url": llm.base_url, "model": "fake-chat"})})
    modelled = await chat.say(cmd, sender=ADMIN)
    assert rate in modelled.reply and no_model not in modelled.reply, modelled.reply


# -- why in a person's words ------------------------------------------------------------------------


TERMS_EN = ("retention", "activation", "association", "BM25", "vector")
TERMS_ZH = ("保持度", "激活度", "联想排名", "关键词排名", "语义排名")
#: how an admin's `why` names the terms: in parentheses after the plain words
ADMIN_EN = ("(retention)", "(activation)", "(BM25 rank)", "(vector rank)", "(association rank)")
ADMIN_ZH = ("保持度）", "（激活度）", "（关键词排名）", "（语义排名）", "（联想排名）")


@pytest.mark.parametrize("lang,fact,question,plain,terms,named", [
    ("en", "My cat is called Mochi.", "Do you remember Mochi?",
     ("still kept", "came up lately", "by its words #1", "through related memories"), TERMS_EN, ADMIN_EN),
    ("zh", "我养了一只叫煤球的黑猫", "你还记得煤球吗？",
     ("记得多牢", "最近提起得多不多", "按字词：第 1 名", "经由相关记忆"), TERMS_ZH, ADMIN_ZH),
])
async def test_why_speaks_plainly_to_a_person_and_adds_the_terms_for_admins(chat, lang, fact, question, plain, terms,
                                                                           named):
    """A person's `why` says how well the memory is kept, how much it came up and where each search found it
    in plain words, without "retention / activation / rank by association"; an admin's adds those terms in
    parentheses."""
    mid = (await chat.say(fact)).captured[0]
    assert mid in (await chat.say(question)).recalled
    cmd = "/memory why" if lang == "en" else "/记忆 为什么"
    mine = (await chat.say(f"{cmd} {mid}")).reply
    assert all(p in mine for p in plain), mine
    assert not any(t in mine for t in terms), mine
    admins = (await chat.say(f"{cmd} tg:111 {mid}", sender=ADMIN)).reply
    assert all(p in admins for p in plain), admins
    assert all(t in admins for t in named), admins


# -- after link: the name the admin typed ------------------------------------------------------------


@pytest.mark.parametrize("lang,cmd,named", [
    ("en", "/memory list tg:111", "What I remember about tg:111 (linked as {person}) (2), page 1/1:"),
    ("zh", "/记忆 列表 tg:111", "我记得的关于tg:111（已关联为 {person}）的事（共 2 条），第 1/1 页："),
])
async def test_after_a_link_replies_name_what_the_admin_typed_and_the_person(chat, lang, cmd, named):
    """An admin who names tg:111 after linking it sees tg:111 beside the person:… it now is, not person:… alone."""
    await chat.say("我养了一只叫煤球的黑猫")
    await chat.say("我最喜欢吃重庆火锅", platform="qq", sender="20002")
    linked = await chat.say("/memory link tg:111 qq:20002", sender=ADMIN)
    person = PERSON_RE.search(linked.reply).group(0)
    listing = (await chat.say(cmd, sender=ADMIN)).reply
    assert listing.startswith(named.format(person=person)), listing
    mid = ID.findall(listing)[0]
    show_cmd = "/memory history" if lang == "en" else "/记忆 历史"
    viewed = (await chat.say(f"{show_cmd} tg:111 {mid}", sender=ADMIN)).reply
    assert mid in viewed
    gone = (await chat.say("/memory forget tg:111 all" if lang == "en" else "/记忆 忘记 tg:111 all",
                           sender=ADMIN)).reply
    assert f"tg:111 (linked as {person})" in gone or f"tg:111（已关联为 {person}）" in gone, gone


# -- an edit is read again -------------------------------------------------------------------------------


@pytest.mark.parametrize("lang,tea,home,category", [
    ("en", "I love green tea.", "I live in Lisbon.", "profile"),
    ("zh", "我喜欢绿茶", "我住在杭州", "个人资料"),
])
async def test_an_edit_takes_the_category_and_slot_of_its_new_text(chat, lang, tea, home, category):
    """Editing "I love green tea." into "I live in Lisbon." makes it a neutral profile memory in the home slot:
    saying the tea again is a new memory, and does not overwrite the edit (as it did while the edit kept the
    tea's key)."""
    ns = Namespace("default", "tg:111")
    mid = (await chat.say(tea)).captured[0]
    cmd = "/memory" if lang == "en" else "/记忆"
    edited = await chat.say(f"{cmd} edit {mid} {home}")
    assert mid in edited.reply and "2" in edited.reply
    live = chat.pipe.core.get(ns, mid)
    assert (live.text, live.category, live.key, live.emotion) == (home, Category.PROFILE, "home.city", "neutral")
    listing = (await chat.say(f"{cmd} list")).reply
    assert f"{mid} [{category}" in listing, listing
    again = (await chat.say(tea)).captured
    assert again and again[0] != mid
    assert chat.pipe.core.get(ns, mid).text == home


@pytest.mark.parametrize("lang,first,second,expected", [
    ("en", "I live in Porto.", "I love green tea.", "Memory {holder} already says that; edit or forget {holder} "
     "instead. {id} is unchanged."),
    ("zh", "我住在北京", "我喜欢绿茶", "记忆 {holder} 已经记着这件事了；请改或忘记 {holder}。{id} 没有改动。"),
])
async def test_an_edit_into_what_another_memory_holds_is_refused_and_changes_nothing(chat, lang, first, second,
                                                                                     expected):
    """An edit whose new text fills the slot another memory holds (where one lives) is refused, naming that
    memory; the edited one keeps its text and version."""
    ns = Namespace("default", "tg:111")
    holder = (await chat.say(first)).captured[0]
    mid = (await chat.say(second)).captured[0]
    moved = "I live in Lisbon." if lang == "en" else "我住在杭州"
    refused = await chat.say(f"/memory edit {mid} {moved}")
    assert refused.reply == expected.format(holder=holder, id=mid)
    kept = chat.pipe.core.get(ns, mid)
    assert (kept.text, kept.version) == (second, 1) and chat.pipe.core.get(ns, holder).text == first


@pytest.mark.parametrize("lang,home,tea,moved,expected", [
    ("en", "I live in Porto.", "I love green tea.", "I live in Lisbon.",
     "Another memory already says that, one not shown here; {id} is unchanged."),
    ("zh", "我住在北京", "我喜欢绿茶", "我住在杭州", "已经有另一条记忆记着这件事了（这里不显示）；{id} 没有改动。"),
])
async def test_a_refused_edit_in_a_group_does_not_name_a_private_memory(chat, lang, home, tea, moved, expected):
    """The memory that holds the slot was said in private: the refusal in the group does not give its id."""
    holder = (await chat.say(home)).captured[0]
    mid = (await chat.say(tea, group="-100777")).captured[0]
    refused = await chat.say(f"/memory edit {mid} {moved}", group="-100777")
    assert refused.reply == expected.format(id=mid) and holder not in refused.reply


# -- search: found through the line it answered ----------------------------------------------------------


@pytest.mark.parametrize("lang,asked,answer,query", [
    ("en", "What's your cat called?", "Mochi, she is three.", "cat"),
    ("zh", "你家的猫叫什么名字？", "叫煤球，三岁了", "猫"),
])
async def test_a_search_hit_found_through_the_line_it_answered_says_so(chat, lang, asked, answer, query):
    """Searching 猫 lists 「叫煤球，三岁了」 only because it answered the companion's 「你家的猫叫什么名字？」: the hit
    says "(in reply to …)"; a hit whose own text has the word does not."""
    store = chat.pipe.core.store
    store.append_chat("default", ChatRef("tg", ChatKind.PRIVATE, "111"),
                      ChatLine("bot", "bot", asked, chat.at + timedelta(seconds=30), "", "小莫"))
    mid = (await chat.say(answer)).captured[0]
    own = (await chat.say("I have a cat at home." if lang == "en" else "我家里有一只猫")).captured[0]
    found = (await chat.say(f"/memory search {query}" if lang == "en" else f"/记忆 搜索 {query}")).reply
    lines = {next(i for i in ID.findall(line)): line for line in found.splitlines()[1:] if ID.search(line)}
    mark = "(in reply to 小莫: " if lang == "en" else "（回应：小莫: "
    assert mid in lines and mark + asked in lines[mid], found
    assert own in lines and mark not in lines[own], found
