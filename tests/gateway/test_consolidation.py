"""Consolidation in the gateway (issue 17): the maintenance pass runs only for idle
people with enough new fragments, ``/memory consolidate`` and ``/memory list``
(type, confidence, hits; dormant ones with ``--all``) in zh and en, the admin
rule, and ``huiyi consolidate`` — with the fake model server on loopback. The
maintenance pass and the real maintenance task run on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from bridges.contract import InboundMessage
from fake_openai import consolidation_responder
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.store import utcnow
from memory.types import ChatKind, Namespace

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
NS = Namespace("default", "tg:1001")
WORK_ZH = ["今天又加班到十点，工作压力好大", "老板又改需求了，今晚又要加班", "这周天天加班，工作压力好大"]
WORK_EN = ["I worked late again until ten tonight", "My boss changed the requirements again, so I worked late",
           "Worked late every day this week, my boss keeps changing things"]


_TICK = iter(range(10**6))


def msg(text, *, sender="1001", mid="1", at=None) -> InboundMessage:
    """A private message; each one a minute after the last (the same text at the same time is a re-push)."""
    at = at or T0 + timedelta(minutes=next(_TICK))
    return InboundMessage(platform="tg", message_id=mid, sender_id=sender, sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id=sender, text=text, timestamp=at,
                          is_command=text.startswith("/"))


def _pipeline(core, llm, monkeypatch, **consolidation) -> Pipeline:
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    for key, value in {"min_new": 3, "min_interval_s": 0, **consolidation}.items():
        monkeypatch.setenv(f"HUIYI_TENANTS__DEFAULT__CONSOLIDATION__{key.upper()}", str(value))
    llm.responder = consolidation_responder()
    return Pipeline(load_settings(), core)


def _add(core, ns, texts):
    return [core.add(ns, core.new(ns, t)).memory for t in texts]


async def test_maintenance_pass_waits_until_the_person_is_idle(core, llm, monkeypatch):
    """A turn moments ago keeps the pass away; once idle (idle_s 0) it consolidates; too few new fragments: nothing."""
    busy = _pipeline(core, llm, monkeypatch, idle_s=3600)
    _add(core, NS, WORK_ZH)
    _add(core, Namespace("default", "tg:1002"), WORK_ZH[:2])  # below min_new
    await busy.handle("default", msg("/memory help"))
    assert await busy.consolidate_idle() == []
    idle = _pipeline(core, llm, monkeypatch, idle_s=0)
    assert idle.start_consolidation() and not idle.start_consolidation()  # one pass at a time
    await idle._consolidating
    (report,) = idle._consolidating.result()
    assert report.namespace == NS and len(report.abstractions) == 1
    assert core.store.consolidated(Namespace("default", "tg:1002")) == {}
    assert await idle.consolidate_idle() == []  # nothing new since


async def test_maintenance_pass_without_a_model_links_only(core, monkeypatch):
    """No chat model configured: the pass records its clusters and writes no abstraction."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__MIN_NEW", "3")
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__IDLE_S", "0")
    pipeline = Pipeline(load_settings(), core)
    _add(core, NS, WORK_ZH)
    (report,) = await pipeline.consolidate_idle()
    assert report.clusters and report.abstractions == () and core.store.count(NS) == 3


@pytest.mark.parametrize("lang,texts,word", [("zh", WORK_ZH, "长期记忆"), ("en", WORK_EN, "long-term")])
async def test_memory_consolidate_and_list(sqlite_core, llm, monkeypatch, lang, texts, word):
    """/memory consolidate runs one now for the speaker; /memory list marks it with type, confidence and hits,
    and hides it once dormant unless --all."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", "zh_CN" if lang == "zh" else "en")
    p = _pipeline(sqlite_core, llm, monkeypatch, idle_s=3600)
    _add(sqlite_core, NS, texts)
    cmd = "/记忆 整理" if lang == "zh" else "/memory consolidate"
    r = await p.handle("default", msg(cmd, mid="c1"))
    (made,) = sqlite_core.store.consolidated(NS).values()
    assert made.memory_id in r.reply and str(3) in r.reply
    listing = (await p.handle("default", msg("/memory list" if lang == "en" else "/记忆 列表", mid="l1"))).reply
    assert made.memory_id in listing and word in listing and f"{made.confidence:.2f}" in listing
    sqlite_core.store.sweep_dormant(NS, unused_since=utcnow() + timedelta(days=1), below=1.0)
    hidden = (await p.handle("default", msg("/memory list", mid="l2"))).reply
    shown = (await p.handle("default", msg("/memory list --all", mid="l3"))).reply
    assert made.memory_id not in hidden and made.memory_id in shown and "💤" in shown
    again = (await p.handle("default", msg("/memory consolidate", mid="c2"))).reply
    assert made.memory_id not in again  # nothing new to sort out


async def test_memory_consolidate_for_someone_else_needs_a_tenant_admin(sqlite_core, llm, monkeypatch):
    """A member naming another person is refused (and audited); a tenant admin may."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__ADMINS", '["tg:9"]')
    p = _pipeline(sqlite_core, llm, monkeypatch)
    other = Namespace("default", "tg:2002")
    _add(sqlite_core, other, WORK_EN)
    denied = await p.handle("default", msg("/memory consolidate tg:2002", mid="d1"))
    assert "own" in denied.reply or "自己" in denied.reply
    assert sqlite_core.store.consolidated(other) == {}
    await p.handle("default", msg("/memory consolidate tg:2002", sender="9", mid="d2"))
    assert len(sqlite_core.store.consolidated(other)) == 1


async def test_a_group_admin_cannot_consolidate_another_person(sqlite_core, llm, monkeypatch):
    """A group admin manages what was said in their group only; a run reads everything of the person: refused."""
    p = _pipeline(sqlite_core, llm, monkeypatch)
    other = Namespace("default", "tg:2002")
    _add(sqlite_core, other, WORK_ZH)
    group = InboundMessage(platform="tg", message_id="g1", sender_id="3003", sender_name="群主",
                           chat_kind=ChatKind.GROUP, chat_id="-100111", text="/memory consolidate tg:2002",
                           timestamp=T0, is_command=True, sender_role="administrator")
    r = await p.handle("default", group)
    assert r.command and sqlite_core.store.consolidated(other) == {}
    assert sqlite_core.store.consolidation_state(other).run_at is None


async def test_edit_forget_history_work_on_a_consolidated_memory(sqlite_core, llm, monkeypatch):
    """A consolidated memory is edited (history kept, still consolidated) and forgotten like any other."""
    p = _pipeline(sqlite_core, llm, monkeypatch)
    _add(sqlite_core, NS, WORK_ZH)
    await p.handle("default", msg("/memory consolidate", mid="c"))
    (mid,) = sqlite_core.store.consolidated(NS)
    await p.handle("default", msg(f"/memory edit {mid} 最近经常加班，压力很大", mid="e"))
    history = (await p.handle("default", msg(f"/memory history {mid}", mid="h"))).reply
    assert "最近经常加班，压力很大" in history and "老板又改需求了" in history
    assert mid in sqlite_core.store.consolidated(NS)
    show = (await p.handle("default", msg(f"/memory show {mid}", mid="s"))).reply
    assert "🧩" in show
    await p.handle("default", msg(f"/memory forget {mid}", mid="f"))
    assert sqlite_core.store.consolidated(NS) == {} and sqlite_core.store.count(NS) == 3


def test_huiyi_consolidate_cli(llm, monkeypatch):
    """huiyi consolidate --tenant default --subject tg:77 prints one JSON line per person and the sweep."""
    from gateway.cli import app
    from gateway.service import build_core

    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    llm.responder = consolidation_responder()
    core = build_core(load_settings())
    ns = Namespace("default", "tg:77")
    _add(core, ns, WORK_ZH + WORK_EN)
    core.close()
    result = CliRunner().invoke(app, ["consolidate", "--tenant", "default", "--subject", "tg:77"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["namespace"] == "default/tg:77" and lines[0]["fragments"] == 6
    assert lines[0]["abstractions"] and lines[0]["removed_sentences"] >= 2
    assert lines[-1] == {"tenant": "default", "went_dormant": 0}
    bad = CliRunner().invoke(app, ["consolidate", "--tenant", "nope"])
    assert bad.exit_code == 2


async def test_the_real_maintenance_task_consolidates_and_stops_with_it(core, llm, monkeypatch):
    """gateway.app.maintenance starts the pass for an idle person; cancelling it ends a pass still running."""
    import asyncio

    from gateway import app as app_module

    monkeypatch.setattr(app_module, "MAINTAIN_EVERY_S", 0.01)
    p = _pipeline(core, llm, monkeypatch, idle_s=0)
    _add(core, NS, WORK_ZH)
    task = asyncio.create_task(app_module.maintenance(p))
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if core.store.consolidated(NS):
            break
    assert len(core.store.consolidated(NS)) == 1
    _add(core, Namespace("default", "tg:1003"), WORK_EN)
    llm.responder = None
    llm.enqueue("pattern: x", delay=5.0)  # a slow model: the next pass is still running when the app stops
    p._consolidation_started = None
    await asyncio.sleep(0.3)
    running = p._consolidating
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert running is not None and running.done() and p._consolidating is None
