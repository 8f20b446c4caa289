"""The person page's mood timeline (issue 39 item 3), on SQLite and PostgreSQL: valence
and arousal per day as a server-rendered SVG, the strongest memories as points with
their text escaped, and what was told on this day a year ago as a list; consolidated
abstractions and plain facts stay out of it."""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_helpers import REMOTE, console_app, login  # noqa: E402

from memory.store import utcnow  # noqa: E402
from memory.types import Namespace  # noqa: E402

NS = Namespace("default", "tg:42")


@pytest.fixture
def app(core):
    application = console_app(core)
    with TestClient(application, client=REMOTE):
        yield application


def _told(core, text: str, days_ago: float, valence: float, arousal: float, emotion: str) -> str:
    m = core.new(NS, text, valence=valence, arousal=arousal, emotion=emotion)
    return core.add(NS, m, said_at=utcnow() - timedelta(days=days_ago), actor="test").memory.id


@pytest.mark.parametrize("lang, words", [("en", ("Mood timeline", "A year ago today you told me: “", "valence")),
                                         ("zh_CN", ("心情时间线", "一年前的今天你跟我说过：「", "效价"))])
def test_the_person_page_draws_the_mood_timeline_and_lists_anniversaries(app, core, lang, words):
    """Two felt days draw lines and the intense memory a point whose title holds its (escaped) text; a
    neutral fact is no point; a memory told 365 days ago is listed as told a year ago today."""
    sad = _told(core, "My cat died <b>today</b> 😢", 3, -0.8, 0.7, "sadness")
    _told(core, "我升职了，好开心！", 1, 0.7, 0.6, "joy")
    _told(core, "I live in Chengdu", 1, 0.0, 0.0, "neutral")
    old = _told(core, "我第一次跑完了半马！", 365, 0.8, 0.8, "joy")
    c = login(app, core.store.create_api_key("default", "admin", label="ops")[1])
    html = c.get("/console/people/tg:42", params={"lang": lang}).text
    title, anniversary, legend = words
    assert title in html and legend in html
    svg = re.search(r'<svg class="chart timeline".*?</svg>', html, re.S).group(0)
    assert svg.count("<polyline") >= 1 and "&lt;b&gt;today&lt;/b&gt;" in svg and "<b>" not in svg
    points = re.findall(r'<circle class="moment"[^>]*><title>([^<]*)</title>', svg)
    assert any("My cat died" in p for p in points) and any("升职" in p for p in points)
    assert not any("Chengdu" in p for p in points)
    items = re.findall(r'<li class="anniversary"><a href="([^"]+)">([^<]+)</a>', html)
    assert items == [(f"/console/people/tg:42/memories/{old}", f"{anniversary}我第一次跑完了半马！" +
                      ("”" if lang == "en" else "」"))]
    assert sad in html


def test_a_person_who_told_nothing_with_feeling_gets_no_chart(app, core):
    """Only plain facts: no timeline is drawn, the page says so, and no anniversary is made up."""
    _told(core, "I live in Chengdu", 2, 0.0, 0.0, "neutral")
    c = login(app, core.store.create_api_key("default", "admin", label="ops")[1])
    html = c.get("/console/people/tg:42", params={"lang": "en"}).text
    assert 'id="no-mood"' in html and 'class="chart timeline"' not in html and 'id="no-anniversaries"' in html
