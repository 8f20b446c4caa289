"""Why not recalled, told with its numbers and for any audited turn, and taking back the last minutes on /v1
(issue 38 items 1, 3, 4): below the relevance floor the answer gives the memory's score and the floor it missed
(kept in the namespace's one last-recall row, no row per turn); ``?turn=<id>`` explains an audited turn of the
person (404 for an unknown one or another person's, 400 for a malformed id); ``POST …/memories/forget-last``
answers with the receipt. Real app, real stores, SQLite and PostgreSQL, zh and en."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from gateway.config import load_settings
from gateway.http.app import create_app
from gateway.pipeline import Pipeline
from memory.types import Namespace

#: lang: (a fact, an unrelated fact, a question about the first, a question about the second)
FACTS = {
    "en": ("My cat is called Mochi.", "I bought a blue bicycle yesterday.", "Do you remember Mochi?",
           "What colour is my new bicycle?"),
    "zh_CN": ("我养了一只叫煤球的黑猫", "我昨天买了一辆蓝色的自行车", "你还记得煤球吗？", "我新买的自行车是什么颜色？"),
}


def _message(text: str, sender: str = "42", at: datetime | None = None, mid: str | None = None) -> dict:
    at = at or datetime.now(timezone.utc)
    return {"platform": "tg", "message_id": mid or str(int(at.timestamp() * 1000)), "sender_id": sender,
            "chat_kind": "private", "chat_id": sender, "text": text, "timestamp": at.isoformat()}


@pytest.fixture
def app(core):
    s = load_settings()
    return create_app(s, pipeline=Pipeline(s, core))


def _keys(core) -> tuple[str, str]:
    """An admin key and a member key of tg:43."""
    return core.store.create_api_key("default", "admin")[1], core.store.create_api_key("default", "member", "tg:43")[1]


@pytest.mark.parametrize("lang", FACTS)
def test_below_the_floor_gives_the_score_and_the_floor_and_any_audited_turn_is_explained(app, core, lang):
    """Two facts captured outside the chat; a turn asks about the first. The second was no candidate: its why
    says below the relevance floor with the floors of that recall (and its own score and floor where it was among
    the best the floor dropped), the admin's text with those numbers; a later turn recalls it, and ?turn= of the
    first turn still tells why it was not recalled then, while ?turn=last says recalled."""
    fact, other, question, about_other = FACTS[lang]
    admin, member = _keys(core)
    with TestClient(app, headers={"X-API-Key": admin}) as c:
        ids = [c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": t}], "infer": False}
                      ).json()["results"][0]["memory"]["id"] for t in (fact, other)]
        first = c.post("/v1/turns", json={"message": _message(question)}).json()
        assert first["turn"] and first["recalled"][:1] == ids[:1], first
        why = c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why", params={"lang": lang}).json()
        assert why["verdict"] == "not_ranked", why
        assert set(why["floors"]) >= {"bm25", "vector"} and why["floors"]["vector"] > 0, why
        if why["channel"] is not None:  # among the best the floor dropped: its own score beside the floor
            assert why["channel"] in ("vector", "bm25", "standout") and why["score"] is not None, why
            assert why["score"] < why["floor"], why
            assert f"{why['floor']:.4f}" in why["text"], why
        else:
            assert f"{why['floors']['vector']:.4f}" in why["text"], why
        assert ("below the relevance floor" in why["text"]) if lang == "en" else ("低于相关性下限" in why["text"]), why
        # one row per namespace: the floors ride in the last-recall row, no row per turn
        assert core.store.last_recall(Namespace("default", "tg:42")).floors == why["floors"]

        later = c.post("/v1/turns", json={"message": _message(about_other, at=datetime.now(timezone.utc)
                                                              + timedelta(seconds=2))}).json()
        assert ids[1] in later["recalled"], later
        last = c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why").json()
        assert last["verdict"] == "recalled" and last["turn"] is None, last
        then = c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why",
                     params={"turn": first["turn"], "lang": lang}).json()
        assert then["verdict"] == "not_ranked" and then["turn"] == first["turn"] and then["floors"], then
        cat_then = c.get(f"/v1/subjects/tg:42/memories/{ids[0]}/why", params={"turn": first["turn"]}).json()
        assert cat_then["verdict"] == "recalled" and cat_then["rank"] == 1, cat_then

        unknown = c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why", params={"turn": "0123456789abcdef"})
        assert unknown.status_code == 404 and "no turn 0123456789abcdef of tg:42" in unknown.text, unknown.text
        assert c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why", params={"turn": "yesterday"}).status_code == 400
        mine = c.post("/v1/subjects/tg:43/memories", json={"messages": [{"text": fact}], "infer": False}
                      ).json()["results"][0]["memory"]["id"]
    with TestClient(app, headers={"X-API-Key": member}) as c:  # tg:43 asks about tg:42's turn: no turn of theirs
        other_turn = c.get(f"/v1/subjects/tg:43/memories/{mine}/why", params={"turn": first["turn"]})
        assert other_turn.status_code == 404 and "no turn" in other_turn.text, other_turn.text
        assert c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why",
                     params={"turn": first["turn"]}).status_code == 403


@pytest.mark.parametrize("lang", FACTS)
async def test_why_not_in_chat_gives_the_floor_to_an_admin(core, lang):
    """Through the pipeline (a Telegram person, private chat): the person hears plain words for a memory below
    the relevance floor; an admin asking about them also gets the floor in parentheses, from why-not and why."""
    from bridges.contract import InboundMessage
    from memory.types import ChatKind

    fact, other, question, _ = FACTS[lang]
    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"admins": ["tg:9001"]})
    pipe = Pipeline(s, core)
    ns = Namespace("default", "tg:111")
    at = datetime.now(timezone.utc) - timedelta(hours=1)
    kept = [core.add(ns, core.new(ns, t, created_at=at - timedelta(days=1))).memory.id for t in (fact, other)]

    async def say(text: str, sender: str = "111", n: list = [0]):  # noqa: B006 - a counter of this test
        n[0] += 1
        return await pipe.handle("default", InboundMessage(
            platform="tg", message_id=f"{lang}{n[0]}", sender_id=sender, sender_name="阿杰",
            chat_kind=ChatKind.PRIVATE, chat_id=sender, text=text, timestamp=at + timedelta(minutes=n[0]),
            is_command=text.startswith("/"), language="en" if lang == "en" else "zh-hans"))

    assert (await say(question)).recalled[:1] == kept[:1]
    why = "/memory why not" if lang == "en" else "/记忆 为什么没有"
    plain = (await say(f"{why} {kept[1]}")).reply
    admins = (await say(f"{why} tg:111 {kept[1]}", sender="9001")).reply
    floor = "floor" if lang == "en" else "下限"
    assert kept[1] in plain and floor not in plain, plain
    assert admins.startswith(plain.split("(")[0].split("（")[0].strip()[:8]) and floor in admins, admins
    detail = (await say(f"{'/memory why' if lang == 'en' else '/记忆 为什么'} tg:111 {kept[1]}", sender="9001")).reply
    assert floor in detail, detail  # /memory why <id> too tells an admin the floor it missed


@pytest.mark.parametrize("lang", FACTS)
def test_forget_last_on_v1_takes_back_the_last_minutes_with_a_receipt(app, core, lang):
    """POST …/memories/forget-last {chat, duration}: what tg:42 said in that chat in the last 10 minutes goes
    with what it taught, answered with the receipt (no tombstones: said again later, it is new); an hour-old
    memory stays. A duration too long or unreadable (400), a chat that is not theirs (409), another person's
    subject with a member key (403): nothing changes."""
    old_fact, recent_fact, *_ = FACTS[lang]
    admin, member = _keys(core)
    ns = Namespace("default", "tg:42")
    now = datetime.now(timezone.utc)
    with TestClient(app, headers={"X-API-Key": admin}) as c:
        old = c.post("/v1/turns", json={"message": _message(old_fact, at=now - timedelta(hours=1))}).json()
        recent = c.post("/v1/turns", json={"message": _message(recent_fact, at=now - timedelta(minutes=2))}).json()
        assert len(old["captured"]) == 1 and len(recent["captured"]) == 1, (old, recent)
        for body, status, words in [({"chat": "tg:private:42", "duration": "99999h"}, 400, "too long"),
                                    ({"chat": "tg:private:42", "duration": "一会儿"}, 400, "names no length"),
                                    ({"chat": "tg:private:43", "duration": "10m"}, 409, "not the subject's own")]:
            r = c.post("/v1/subjects/tg:42/memories/forget-last", json=body)
            assert r.status_code == status and words in r.text, (body, r.status_code, r.text)
        assert core.store.count(ns) == 2
        with TestClient(app, headers={"X-API-Key": member}) as m:
            r = m.post("/v1/subjects/tg:42/memories/forget-last", json={"chat": "tg:private:42", "duration": "10m"})
            assert r.status_code == 403 and core.store.count(ns) == 2
        done = c.post("/v1/subjects/tg:42/memories/forget-last",
                      json={"chat": "tg:private:42", "duration": "10m" if lang == "en" else "10分钟"})
        assert done.status_code == 200, done.text
        out = done.json()
        assert out["ids"] == recent["captured"] and out["lines"] == 1 and out["chat"] == "tg:private:42", out
        assert out["receipt"]["memories"] == 1 and out["receipt"]["tombstones"] == 0, out
        assert out["receipt"]["chat_lines"] >= 1 and out["receipt"]["index_rows"] >= 1, out
        assert [m.id for m in core.list(ns)] == old["captured"]
        assert [a["action"] for a in core.store.audit_records(ns)][0] == "forget_last"


@pytest.mark.parametrize("lang", FACTS)
def test_why_of_an_older_turn_says_that_turn_at_its_local_time_and_a_foreign_chat_is_409(core, lang):
    """?turn=<an older turn> says "that turn"/「那一轮」 (not "the last turn"/「上一轮」) with the turn's time in the
    tenant's zone (Asia/Shanghai, not ISO UTC); ?turn=last says "the last turn" the same way. ?chat= naming a chat
    that is not the subject's (another person's private chat, another platform) is 409, as forget-last and pause."""
    s = load_settings()
    s.tenants["default"] = s.tenants["default"].model_copy(update={"tz": "Asia/Shanghai"})
    app = create_app(s, pipeline=Pipeline(s, core))
    fact, other, question, about_other = FACTS[lang]
    admin, _ = _keys(core)
    that, last = ("that turn", "the last turn") if lang == "en" else ("那一轮", "上一轮")
    with TestClient(app, headers={"X-API-Key": admin}) as c:
        ids = [c.post("/v1/subjects/tg:42/memories", json={"messages": [{"text": t}], "infer": False}
                      ).json()["results"][0]["memory"]["id"] for t in (fact, other)]
        first = c.post("/v1/turns", json={"message": _message(question)}).json()
        c.post("/v1/turns", json={"message": _message(about_other, at=datetime.now(timezone.utc)
                                                       + timedelta(seconds=2))})
        then = c.get(f"/v1/subjects/tg:42/memories/{ids[0]}/why",
                     params={"turn": first["turn"], "lang": lang}).json()
        local = datetime.fromisoformat(then["at"]).astimezone(timezone(timedelta(hours=8)))
        assert then["verdict"] == "recalled", then
        assert that in then["text"] and last not in then["text"], then
        assert f"{local:%Y-%m-%d %H:%M} (Asia/Shanghai, UTC+08:00)" in then["text"], then
        now = c.get(f"/v1/subjects/tg:42/memories/{ids[1]}/why", params={"lang": lang}).json()
        assert now["verdict"] == "recalled" and last in now["text"] and "(Asia/Shanghai, UTC+08:00)" in now["text"]
        for chat in ("tg:private:43", "qq:private:42"):
            r = c.get(f"/v1/subjects/tg:42/memories/{ids[0]}/why", params={"chat": chat})
            assert r.status_code == 409, (chat, r.status_code, r.text)
        assert c.get(f"/v1/subjects/tg:42/memories/{ids[0]}/why", params={"chat": "tg:private:42"}).status_code == 200
