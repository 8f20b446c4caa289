"""The console's pages do the chat admin commands' jobs through the core, on
SQLite and PostgreSQL: export (the /memory export document, audited), link and
unlink identities, forget everything after a confirmation, filters (origin,
visibility, fragment / long-term, conflicts), try recall with ranks, stats
charts; and the page language: ?lang=, then Accept-Language, then the tenant's."""

from __future__ import annotations

import re

import json
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_helpers import REMOTE, console_app, login, session_csrf  # noqa: E402

from memory.identity import resolve_subject  # noqa: E402
from memory.types import ChatKind, ChatRef, Namespace, Visibility  # noqa: E402

NS = Namespace("default", "tg:42")
GROUP = ChatRef("tg", ChatKind.GROUP, "-100123")


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


def _remember(core, text: str, ns: Namespace = NS, **fields) -> str:
    return core.add(ns, core.new(ns, text, **fields), actor="test").memory.id


def _ids(html: str) -> set[str]:
    import re

    return set(re.findall(r'<tr data-id="([^"]+)"', html))


def test_filters_search_with_ranks_export_and_try_recall(app, core):
    """Origin, visibility, kind and conflict filters pick the right rows; the search shows ranks; the export
    is /memory export's document (audited); try recall lists hits with their BM25 rank."""
    private = _remember(core, "我养了一只叫煤球的黑猫")
    group = _remember(core, "I love hiking in the Alps", origin=GROUP, visibility=Visibility.GROUP)
    c = login(app, core.store.create_api_key("default", "admin", label="ops")[1])
    assert _ids(c.get("/console/people/tg:42").text) == {private, group}
    assert _ids(c.get("/console/people/tg:42", params={"origin": GROUP.key}).text) == {group}
    assert _ids(c.get("/console/people/tg:42", params={"visibility": "private"}).text) == {private}
    assert _ids(c.get("/console/people/tg:42", params={"kind": "consolidated"}).text) == set()
    assert _ids(c.get("/console/people/tg:42", params={"kind": "fragment"}).text) == {private, group}
    assert _ids(c.get("/console/people/tg:42", params={"conflicts": "1"}).text) == set()
    found = c.get("/console/people/tg:42", params={"q": "hiking"}).text
    assert _ids(found) == {group} and 'class="rank" title="bm25">words #1' in found
    r = c.get("/console/people/tg:42/export")
    doc = json.loads(r.text)
    assert r.headers["content-disposition"].startswith("attachment") and doc["format"] == "huiyi.memories.v1"
    assert {m["id"] for m in doc["memories"]} == {private, group}
    assert any(a["action"] == "export" and a["actor"].startswith("console:") for a in core.store.audit_records(NS))
    tried = c.get("/console/people/tg:42/recall", params={"query": "煤球"}).text
    assert private in _ids(tried) and 'class="num rank-bm25">1<' in tried



#: lang: (memories that say the topic, the companion's line, an answer about something else, the search)
MARATHON = {
    "en": (["I ran my first marathon in Berlin", "Training for the marathon takes my whole weekend"],
           "Mochi: How was the marathon training this week?", "My sister Anna lives in Toronto", "marathon"),
    "zh_CN": (["我跑完了人生第一个马拉松", "马拉松训练占了我整个周末"], "小莫：这周马拉松训练怎么样？",
              "我姐姐安娜住在多伦多", "马拉松"),
}


def _listed(html: str, list_id: str) -> list[str]:
    import re

    found = re.search(rf'<ul id="{list_id}">(.*?)</ul>', html, re.S)
    return re.findall(r'<li data-id="([^"]+)"', found.group(1)) if found else []


@pytest.mark.parametrize("lang", MARATHON)
def test_a_bulk_forget_by_topic_lists_the_memories_found_only_through_what_they_answered_apart(app, core, lang):
    """Searching "marathon" lists 「My sister Anna lives in Toronto」 (it answered "How was the marathon
    training?") marked, its box one "select all" leaves unticked; ticked anyway, the confirmation page lists it
    apart with the reason, in zh and en — it was forgotten with the marathon memories, unmarked, before."""
    import html as html_lib

    from locales import translate

    topic, asked, other, query = MARATHON[lang]
    marathon = [_remember(core, t) for t in topic]
    anna = _remember(core, other, context=asked)
    c = login(app, core.store.create_api_key("default", "admin", label="ops")[1])
    page = c.get("/console/people/tg:42", params={"q": query, "lang": lang}).text
    assert _ids(page) == {*marathon, anna}
    assert f'<tr data-id="{anna}" class="via-context">' in page and page.count('class="pick via-context"') == 1
    assert f'<input type="hidden" name="q" value="{query}">' in page
    shown = html_lib.unescape(page)
    assert translate(lang, "found only through what it answered: {context}", context=asked) in shown
    assert translate(lang, "Rows marked ↩ matched “{query}” only through the companion's line they answered, not "
                           "through their own words: they are probably about something else, and “select all” "
                           "leaves them unticked.", query=query) in shown
    csrf = session_csrf(c)
    ask = c.post("/console/people/tg:42/forget", params={"lang": lang},
                 data={"csrf": csrf, "id": [*marathon, anna], "q": query})
    assert ask.status_code == 200
    assert _listed(ask.text, "to-forget") == marathon and _listed(ask.text, "to-forget-via-context") == [anna]
    assert translate(lang, "These matched “{query}” only through the companion's line they answered (after ↩), not "
                           "through their own words: they are probably about something else. They are forgotten "
                           "too if you confirm; to keep them, go back and untick them.",
                     query=query) in html_lib.unescape(ask.text)
    plain = c.post("/console/people/tg:42/forget", data={"csrf": csrf, "id": [*marathon, anna]}).text
    assert _listed(plain, "to-forget") == [*marathon, anna] and 'id="to-forget-via-context"' not in plain
    done = c.post("/console/people/tg:42/forget", data={"csrf": csrf, "id": marathon, "confirm": "1"},
                  follow_redirects=False)
    assert done.status_code == 303 and set(core.store.get_many(NS, [*marathon, anna])) == {anna}
    # the person page answers with the receipt of what went, in the page's language
    receipt = c.get(done.headers["location"] + f"&lang={lang}").text
    told = re.search(r'<span id="receipt">([^<]*)</span>', receipt).group(1)
    assert told.startswith(translate(lang, "Purged: {items}.", items="")[:3]), told
    assert translate(lang, "memories {n}", n=len(marathon)) in told and ("tombstones" in told or "墓碑" in told), told


def test_link_unlink_and_forget_everything_after_a_confirmation(app, core):
    """Link tg:42 and qq:7 into one person, unlink qq:7 again; forget everything asks first, then leaves nothing."""
    _remember(core, "我住在杭州")
    c = login(app, core.store.create_api_key("default", "admin")[1])
    csrf = session_csrf(c)
    r = c.post("/console/people/link", data={"a": "tg:42", "b": "qq:7", "csrf": csrf})
    person = resolve_subject(core.store, "default", "tg:42")
    assert r.status_code == 200 and person.subject.startswith("person:") and person.subject in str(r.url)
    assert "qq:7" in r.text and "tg:42" in r.text
    r = c.post(f"/console/people/{person.subject}/unlink", data={"identity": "qq:7", "csrf": csrf})
    assert r.status_code == 200 and resolve_subject(core.store, "default", "qq:7") == Namespace("default", "qq:7")
    assert c.post(f"/console/people/{person.subject}/unlink", data={"identity": "wx:nobody",
                                                                    "csrf": csrf}).status_code == 404
    ask = c.post(f"/console/people/{person.subject}/forget_all", data={"csrf": csrf})
    assert ask.status_code == 200 and 'id="confirm-forget-all"' in ask.text and core.store.count(person) == 1
    done = c.post(f"/console/people/{person.subject}/forget_all", data={"csrf": csrf, "confirm": "1"})
    assert done.status_code == 200 and core.store.count(person) == 0
    assert any(a["action"] == "forget_subject" for a in core.store.audit_records(person))


def test_the_language_follows_the_link_then_the_browser_then_the_tenant(app, core):
    """default's tenant language is en; Accept-Language zh-CN gives Chinese; ?lang=en switches and is kept."""
    c = login(app, core.store.create_api_key("default", "admin")[1])
    assert ">People<" in c.get("/console/people").text
    zh = c.get("/console/people", headers={"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}).text
    assert ">用户<" in zh and 'lang="zh-CN"' in zh
    c.get("/console/people", params={"lang": "en"})
    assert ">People<" in c.get("/console/people", headers={"Accept-Language": "zh-CN"}).text
    stats = c.get("/console/stats").text
    assert stats.count('<svg class="chart"') == 6


def test_every_text_of_the_console_is_in_both_catalogues():
    """Each literal _("…") of the templates, each message the views show (error pages, the login form) and
    each id a template translates at run time (why verdicts, visibilities, consolidated types) is in zh_CN
    and en with the same placeholders."""
    import re

    from gateway.console.views import TEMPLATES
    from locales import LANGUAGES, catalogue_ids, placeholders, plural_entries
    from memory.links import REASONS as LINK_REASONS
    from memory.reconstruct import REASONS, SENTENCE_STATUSES
    from memory.store import KeyScope
    from memory.store.consolidated import CTYPES
    from memory.store.ledger import PURPOSES

    used, plurals = set(), set()
    for page in TEMPLATES.glob("*.html"):
        text = page.read_text("utf-8")
        used |= {a if a else b for a, b in re.findall(r'''_\(\s*(?:"([^"]+)"|'([^']+)')''', text)}
        plurals |= set(re.findall(r'''_n\(\s*"([^"]+)",\s*"([^"]+)"''', text))
    views = (TEMPLATES.parent / "views.py").read_text("utf-8")
    used |= set(re.findall(r'''(?:_error\([^"\n]*|_login_page\(request, )"([^"]+)"''', views))
    used |= {f"why: {v}" for v in ("recalled", "below_cutoff", "hidden_in_chat", "not_ranked", "newer", "no_trace",
                                   "dormant", "decayed", "forgotten")}
    used |= {f"purpose: {p}" for p in PURPOSES} | {"fallback: token_cap"}
    used |= {v.value for v in Visibility} | set(CTYPES)
    used |= {f"fallback: {r}" for r in REASONS} | {f"link: {r}" for r in LINK_REASONS}
    used |= {f"channel: {c}" for c in ("bm25", "vector", "time", "assoc")} | {f"scope: {s.value}" for s in KeyScope}
    used |= {"mode: reconstructed", "mode: template"} | {f"sentence: {st}" for st in SENTENCE_STATUSES}
    assert len(used) > 180 and len(plurals) >= 6
    for lang in LANGUAGES:
        assert sorted(p for p in plurals if p not in plural_entries(lang)) == [], lang
        ids = catalogue_ids(lang)
        assert sorted(m for m in used if m not in ids) == [], lang
        assert {m: ids[m] for m in used if placeholders(ids[m]) != placeholders(m)} == {}, lang
