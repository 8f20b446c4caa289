""""Why not recalled" from chat and /v1, and the forget receipt where a person and
an admin meet it: `/memory why not <id or words>` (the person for their own,
admins for anyone) answers with the stage that dropped the memory in plain
words, the recall's terms in parentheses for admins; `/memory forget` and the
/v1 forget routes answer with the receipt. zh_CN and en, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from bridges.contract import InboundMessage
from gateway.config import load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline
from memory.types import ChatKind, Namespace

ADMIN = "9001"
NS = Namespace("default", "tg:111")

#: lang: (why-not command, forget command, a fact, an unrelated fact, a question recalling the first,
#: words of the plain "unrelated" answer, the admin's term, words naming the unrelated fact, receipt words)
CASES = {
    "en": ("/memory why not", "/memory forget", "My cat is called Mochi.", "I work as a nurse in Toronto.",
           "Do you remember Mochi?", "others fit better and only the first 1 are used", "(cut at rank k: rank 2",
           "nurse Toronto", ("Purged: memories 1", "tombstones")),
    "zh": ("/记忆 为什么 没", "/记忆 忘记", "我养了一只叫煤球的黑猫", "我在多伦多当护士，经常上夜班",
           "你还记得煤球吗？", "还有更相关的，只用了前 1 条", "（排名截断：第 2 名", "多伦多 护士", ("已清除：记忆 1 条", "墓碑")),
}


class Chat:
    """Private messages of Telegram people, each a minute after the last."""

    def __init__(self, pipe: Pipeline, lang: str) -> None:
        self.pipe, self.lang = pipe, lang
        self.at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
        self.mid = 0

    async def say(self, text: str, *, sender: str = "111"):
        self.at += timedelta(minutes=1)
        self.mid += 1
        return await self.pipe.handle("default", InboundMessage(
            platform="tg", message_id=str(self.mid), sender_id=sender, sender_name="阿杰",
            chat_kind=ChatKind.PRIVATE, chat_id=sender, text=text, timestamp=self.at,
            is_command=text.startswith("/"), language=self.lang))


def _pipeline(core, **tenant) -> Pipeline:
    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"admins": [f"tg:{ADMIN}"], **tenant})
    return Pipeline(s, core)


@pytest.mark.parametrize("lang", CASES)
async def test_why_not_names_the_stage_in_plain_words_and_the_term_for_admins(core, lang):
    """One memory recalled per turn (recall_k 1): the other, named by its words, was cut at rank k — the person
    hears that others fit better, an admin also gets the term with its rank; the recalled one says recalled."""
    why, _, fact, other, question, plain, term, words, _ = CASES[lang]
    chat = Chat(_pipeline(core, recall_k=1), lang)
    (cat,) = (await chat.say(fact)).captured
    (job,) = (await chat.say(other)).captured
    assert (await chat.say(question)).recalled == [cat]
    mine = (await chat.say(f"{why} {words}")).reply
    assert job in mine and plain in mine and term not in mine, mine
    admins = (await chat.say(f"{why} tg:111 {job}", sender=ADMIN)).reply
    assert plain in admins and term in admins, admins
    recalled = (await chat.say(f"{why} {cat}")).reply
    assert cat in recalled and ("recalled" in recalled or "想起来" in recalled), recalled


@pytest.mark.parametrize("lang", CASES)
async def test_why_not_of_a_forgotten_memory_says_forgotten(core, lang):
    """Forget answers with its receipt; asked why it was not recalled, the id is told as forgotten (its
    tombstone), not as unknown."""
    why, forget, fact, *_, receipt = CASES[lang]
    chat = Chat(_pipeline(core), lang)
    (cat,) = (await chat.say(fact)).captured
    done = (await chat.say(f"{forget} {cat}")).reply
    assert all(w in done for w in receipt), done
    told = (await chat.say(f"{why} {cat}")).reply
    assert cat in told and ("forgotten" in told or "已被遗忘" in told), told


@pytest.mark.parametrize("lang", CASES)
async def test_why_not_of_another_person_is_refused_and_words_matching_nothing_say_so(core, lang):
    """A person asking about someone else is refused (nothing shown); words that match none of their memories
    get a clear answer."""
    why, _, fact, *_ = CASES[lang]
    chat = Chat(_pipeline(core), lang)
    await chat.say(fact, sender="222")
    other = (await chat.say(f"{why} tg:222 {fact[:4]}")).reply
    assert "only manage your own" in other or "只能管理自己" in other, other
    nothing = (await chat.say(f"{why} 🦄🦄 zzzqqq")).reply
    assert "matches that" in nothing or "没有与之相符" in nothing, nothing


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_v1_why_and_forget_receipt(core, lang):
    """GET …/memories/{id}/why gives the verdict with its numbers and the text in the language asked;
    DELETE answers with the receipt; afterwards /why says forgotten; another person's id is 404; an unknown
    turn is refused with 400."""
    s = load_settings()
    app = create_app(s, pipeline=Pipeline(s, core))
    fact, question = (("My cat is called Mochi.", "Do you remember Mochi?") if lang == "en"
                      else ("我养了一只叫煤球的黑猫", "你还记得煤球吗？"))
    key = core.store.create_api_key("default", "admin")[1]
    with TestClient(app, headers={"X-API-Key": key}) as c:
        mid = c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": fact}], "infer": False}
                     ).json()["results"][0]["memory"]["id"]
        c.post("/v1/subjects/tg:42/recollection", json={"query": question, "chat": "tg:private:42"})
        why = c.get(f"/v1/subjects/tg:42/memories/{mid}/why", params={"lang": lang}).json()
        assert why["verdict"] == "recalled" and why["rank"] == 1 and why["k"] >= 1, why
        assert ("recalled" in why["text"]) if lang == "en" else ("想起来" in why["text"]), why
        assert c.get(f"/v1/subjects/tg:43/memories/{mid}/why").status_code == 404
        assert c.get(f"/v1/subjects/tg:42/memories/{mid}/why", params={"turn": "yesterday"}).status_code == 400
        gone = c.delete(f"/v1/subjects/tg:42/memories/{mid}").json()
        assert gone["forgotten"] and gone["receipt"]["memories"] == 1 and gone["receipt"]["tombstones"] >= 1
        after = c.get(f"/v1/subjects/tg:42/memories/{mid}/why", params={"lang": lang}).json()
        assert after["verdict"] == "forgotten", after
        subject = c.delete("/v1/subjects/tg:42").json()
        assert subject["forgotten"] == 0 and subject["receipt"]["tombstones"] == 1


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_each_stage_of_explain_has_plain_words_and_a_term(lang):
    """The one decision (memory.explain.explain) tells dormant, decayed and below-the-floor apart for a memory
    that was no candidate; each verdict reads in plain words, the admin's adds the term in parentheses."""
    from gateway.commands import why_not_text
    from memory.explain import RecallTrace, explain
    from memory.types import ChatKind, ChatRef, Memory

    at = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    trace = RecallTrace(NS, ChatRef("tg", ChatKind.PRIVATE, "111").key, at, 6)
    fresh = Memory(id="aaaaaaaaaaaa", namespace=NS, text="我喜欢龙井茶", created_at=at - timedelta(days=1))
    old = Memory(id="bbbbbbbbbbbb", namespace=NS, text="I had a cold", created_at=at - timedelta(days=3000),
                 importance=0.1)
    seen = {explain(trace, fresh).verdict, explain(trace, fresh, dormant=True).verdict, explain(trace, old).verdict}
    assert seen == {"not_ranked", "dormant", "decayed"}
    for m, dormant in ((fresh, False), (fresh, True), (old, False)):
        why = explain(trace, m, dormant=dormant)
        plain = why_not_text(lang, why, m.id, admin=False, when="2026-12-01 20:00")
        admin = why_not_text(lang, why, m.id, admin=True, when="2026-12-01 20:00")
        term = admin[len(plain):].strip()
        assert m.id in plain and admin.startswith(plain) and term[0] in "(（" and term[1:-1] not in plain
