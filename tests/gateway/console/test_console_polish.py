"""The console's pages say what the codes and ids mean, on SQLite and PostgreSQL,
in zh and en: an edit takes the same path as ``PATCH /v1`` (category and key read
from the new text); a person page is titled with the person's name; a memory's
conflicts and associations show their text; fallback reasons, channels and link
reasons read as words; the stats' fallback rate leaves "nothing to recall yet"
out; the turn page shows the query the turn recalled with."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_helpers import REMOTE, console_app, login, session_csrf  # noqa: E402

from memory.types import Category, Namespace  # noqa: E402

NS = Namespace("default", "tg:42")
#: lang: (a preference, the same memory edited into where the person lives, its key)
EDITS = {"en": ("I love green tea.", "I live in Lisbon.", "home.city"),
         "zh_CN": ("我喜欢绿茶", "我住在杭州", "home.city")}


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


def _remember(core, text: str, ns: Namespace = NS, **fields) -> str:
    return core.add(ns, core.new(ns, text, **fields), actor="test").memory.id


def _admin(app, core, tenant: str = "default"):
    key = core.store.create_api_key(tenant, "admin", label="ops")[1]
    return login(app, key), key


@pytest.mark.parametrize("lang", EDITS)
def test_a_console_edit_keeps_the_old_category_and_key(app, core, lang):
    """An edit in the console re-reads category and key from the new text, exactly as PATCH /v1 does."""
    tea, moved, key = EDITS[lang]
    by_console = _remember(core, tea, category=Category.PREFERENCE)
    by_api = _remember(core, tea, Namespace("default", "tg:43"), category=Category.PREFERENCE)
    c, secret = _admin(app, core)
    r = c.post(f"/console/people/tg:42/memories/{by_console}/edit", data={"text": moved, "csrf": session_csrf(c)},
               follow_redirects=False)
    assert r.status_code == 303, r.text[:300]
    api = TestClient(app, client=REMOTE, headers={"X-API-Key": secret})
    patched = api.patch(f"/v1/subjects/tg:43/memories/{by_api}", json={"text": moved})
    assert patched.status_code == 200, patched.text
    edited = core.get(NS, by_console)
    assert (edited.text, edited.version, edited.category.value, edited.key) == (moved, 2, "profile", key)
    assert (patched.json()["category"], patched.json()["key"]) == (edited.category.value, edited.key)


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_the_fallback_rate_counted_nothing_to_recall_yet_as_a_fallback(app, core, lang):
    """Of four people's last recalls (no_hits, few_hits, timeout, accepted) one fell back of the two that had
    something to retell: 50%, on the stats page and in memory.admin.stats, not 75%."""
    from datetime import datetime, timezone

    from memory import admin
    from memory.explain import record_recall
    from memory.types import ChatKind, ChatRef

    at = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    for uid, reason in (("1", "no_hits"), ("2", "few_hits"), ("3", "timeout"), ("4", "")):
        record_recall(core.store, Namespace("default", f"tg:{uid}"), ChatRef("tg", ChatKind.PRIVATE, uid), [], 8,
                      reason, at)
    assert admin.stats(core, admin.Authority("test", "default"), "default").fallback_rate == 0.5
    c, _ = _admin(app, core)
    page = c.get("/console/stats", params={"lang": lang}).text
    assert "<strong>50.0%</strong>" in page


#: lang: (the name the person sends, a memory, the one it conflicts with, one linked to it, words on the page)
PEOPLE = {"en": ("Anna", "I live in Porto.", "I live in Lisbon.", "My cat Mochi is nine.",
                 ("recalled together", "same name", "Conflicts with", "Associations")),
          "zh_CN": ("安娜", "我住在北京", "我住在杭州", "我家猫煤球九岁了",
                    ("一起被回忆", "提到同一事物", "与之冲突", "关联"))}


def _texts_of(html: str, list_id: str) -> list[str]:
    found = re.search(rf'<ul class="refs" id="{list_id}">(.*?)</ul>', html, re.S)
    return re.findall(r'<a class="ref"[^>]*>([^<]*)</a>', found.group(1)) if found else []


@pytest.mark.parametrize("lang", PEOPLE)
def test_a_person_page_titled_by_id_and_conflicts_and_associations_as_bare_ids(app, core, lang):
    """The person page's title and heading carry the name they last sent; a memory's conflicts and associations
    show the other memories' text (the id in the link's title) and the link's reasons in words, not codes."""
    from datetime import datetime, timezone

    from memory.store.chatlog import ChatLine
    from memory.types import ChatKind, ChatRef

    name, mine, other, linked, words = PEOPLE[lang]
    a, b, cat = _remember(core, mine), _remember(core, other), _remember(core, linked)
    core.store.add_conflict(NS, a, b)
    core.store.strengthen_links(NS, [a, cat], reason="recalled")
    core.store.strengthen_links(NS, [a, cat], reason="entity")
    core.store.append_chat("default", ChatRef("tg", ChatKind.PRIVATE, "42"),
                           ChatLine("user", "42", mine, datetime.now(timezone.utc), "m1", name))
    c, _ = _admin(app, core)
    page = c.get("/console/people/tg:42", params={"lang": lang}).text
    assert f"<title>{name} · huiyi</title>" in page and f'<span id="person-name">{name}</span>' in page
    assert f'title="{b}">⚡' in page and other in page.split(f'<tr data-id="{a}"')[1].split("</tr>")[0]
    shown = c.get(f"/console/people/tg:42/memories/{a}", params={"lang": lang}).text
    assert _texts_of(shown, "conflicts") == [other] and _texts_of(shown, "links") == [linked]
    assert f'title="{b}"' in shown and f'title="{cat}"' in shown
    seen = re.sub(r"<[^>]+>", " ", shown)  # what the page reads, without the codes kept in titles
    assert "recalled,entity" not in seen and " entity" not in seen and all(w in seen for w in words)


#: lang: (an earlier line of the person, the line of the turn)
QUERIES = {"en": ("My cat Mochi is nine years old.", "Do you remember my cat?"),
           "zh_CN": ("我家猫煤球九岁了", "你还记得我的猫吗？")}


@pytest.mark.parametrize("lang", QUERIES)
def test_the_turn_page_cannot_show_the_query_the_turn_used(app, core, lang):
    """The audit keeps the message ids of the lines recall searched with (no text without audit_fragments);
    the turn page lists those lines, oldest first, from the chat log."""
    import asyncio
    from datetime import datetime, timedelta, timezone

    from bridges.contract import InboundMessage
    from gateway.observability import read_turns
    from memory.types import ChatKind

    pipeline = app.state.pipeline
    now = datetime.now(timezone.utc)
    for mid, text, at in (("q1", QUERIES[lang][0], now - timedelta(seconds=30)), ("q2", QUERIES[lang][1], now)):
        asyncio.run(pipeline.handle("default", InboundMessage(
            platform="tg", message_id=mid, sender_id="42", sender_name="Anna", chat_kind=ChatKind.PRIVATE,
            chat_id="42", text=text, timestamp=at)))
    records = read_turns(pipeline.settings.data_dir, now.date())
    assert [q["message_id"] for q in records[-1]["query"]] == ["q1", "q2"]
    assert "query_text" not in records[-1] and QUERIES[lang][0] not in str(records[-1])
    c, _ = _admin(app, core)
    page = c.get(f"/console/turns/{now.date().isoformat()}/{len(records) - 1}", params={"lang": lang}).text
    listed = re.search(r'<ol class="query" id="turn-query">(.*?)</ol>', page, re.S)
    assert listed, page[:2000]
    assert re.findall(r'<li data-message="([^"]+)">', listed.group(1)) == ["q1", "q2"]
    assert all(text in listed.group(1) for text in QUERIES[lang])


#: lang: the words for no_hits, malformed, vector~1 and the template mode
WORDS = {"en": ("nothing to recall yet", "the model's answer was unusable", "meaning of the line −1", "listed verbatim"),
         "zh_CN": ("还没有可回忆的", "模型回答无法使用", "语义（往前第 1 句）", "原文列出")}


@pytest.mark.parametrize("lang", WORDS)
def test_codes_shown_raw_on_the_turn_pages(app, core, lang):
    """The turns list, its filter and a turn say fallback reasons, channels and modes in words; the code stays
    only in the title attribute."""
    from datetime import datetime, timezone

    from gateway.observability import write_turn

    mid = _remember(core, "I love hiking in the Alps")
    now = datetime.now(timezone.utc)
    data = app.state.pipeline.settings.data_dir
    for reason in ("no_hits", "malformed"):
        write_turn(data, {"at": now.isoformat(), "tenant": "default", "namespace": "default/tg:42",
                          "chat": "tg:private:42", "message_id": "m1", "mode": "template", "fallback_reason": reason,
                          "recalled": [{"id": mid, "score": 0.5, "ranks": {"vector~1": 2}}],
                          "latency_ms": {"total": 3.0}})
    c, _ = _admin(app, core)
    no_hits, malformed, _channel, mode = WORDS[lang]
    listed = c.get("/console/turns", params={"lang": lang}).text
    seen = html.unescape(re.sub(r"<[^>]+>", " ", listed))
    assert no_hits in seen and malformed in seen and mode in seen
    assert not re.search(r"\b(no_hits|malformed|template)\b", seen)
    day = now.date().isoformat()
    turn = html.unescape(re.sub(r"<[^>]+>", " ", c.get(f"/console/turns/{day}/1", params={"lang": lang}).text))
    assert malformed in turn and mode in turn and "malformed" not in turn
