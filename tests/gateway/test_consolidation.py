"""Consolidation in the gateway (issue 17): the maintenance pass runs only for idle
people with enough new fragments, ``/memory consolidate`` and ``/memory list``
(type, confidence, hits; dormant ones with ``--all``) in zh and en, the admin
rule, and ``huiyi consolidate`` — with the fake model server on loopback. The
maintenance pass and the real maintenance task run on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from bridges.contract import InboundMessage
from fake_openai import consolidation_responder
from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.store import utcnow
from memory.types import ChatKind, ChatRef, Namespace, Visibility

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
    assert await busy.consolidation.consolidate_idle() == []
    idle = _pipeline(core, llm, monkeypatch, idle_s=0)
    assert idle.consolidation.start() and not idle.consolidation.start()  # one pass at a time
    await idle.consolidation._pass
    (report,) = idle.consolidation._pass.result()
    assert report.namespace == NS and len(report.abstractions) == 1
    assert core.store.consolidated(Namespace("default", "tg:1002")) == {}
    assert await idle.consolidation.consolidate_idle() == []  # nothing new since


def test_the_last_turn_map_forgets_people_idle_longer_than_every_tenant_waits(sqlite_core, llm, monkeypatch):
    """The per-namespace last-turn times are kept only while they can still keep a pass away (idle_s 600): an
    older entry goes when the next turn is recorded, so the map holds the recently active, not everyone who
    ever wrote; a person still inside idle_s keeps theirs and stays busy."""
    p = _pipeline(sqlite_core, llm, monkeypatch, idle_s=600).consolidation
    people = [Namespace("default", f"tg:{2000 + i}") for i in range(50)]
    for i, ns in enumerate(people):
        p.turned(ns, now=1000.0 + i)
    assert len(p._last_turn) == 50 and not p.idle(people[0], 600, now=1100.0)
    p.turned(NS, now=1000.0 + 49 + 601)  # every earlier entry is now older than 600 s
    assert list(p._last_turn) == [str(NS)]
    assert p.idle(people[0], 600, now=1700.0) and not p.idle(NS, 600, now=1700.0)


async def test_maintenance_pass_without_a_model_links_only(core, monkeypatch):
    """No chat model configured: the pass records its clusters and writes no abstraction."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__MIN_NEW", "3")
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__CONSOLIDATION__IDLE_S", "0")
    pipeline = Pipeline(load_settings(), core)
    _add(core, NS, WORK_ZH)
    (report,) = await pipeline.consolidation.consolidate_idle()
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
    """gateway.maintenance starts the pass for an idle person; cancelling it ends a pass still running."""
    import asyncio

    from gateway import maintenance as maintenance_module

    monkeypatch.setattr(maintenance_module, "MAINTAIN_EVERY_S", 0.01)
    p = _pipeline(core, llm, monkeypatch, idle_s=0)
    _add(core, NS, WORK_ZH)
    task = asyncio.create_task(maintenance_module.maintenance(p))
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if core.store.consolidated(NS):
            break
    assert len(core.store.consolidated(NS)) == 1
    _add(core, Namespace("default", "tg:1003"), WORK_EN)
    llm.responder = None
    llm.enqueue("pattern: x", delay=5.0)  # a slow model: the next pass is still running when the app stops
    p.consolidation._pass_started = None
    await asyncio.sleep(0.3)
    running = p.consolidation._pass
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert running is not None and running.done() and p.consolidation._pass is None


# -- newcomer faults (issue 17 follow-up): paging, group counts, language, reasons, targets, --limit ------------

GROUP = "-100111"
PETS = ["我养了一只叫煤球的黑猫", "周末去爬香山了", "最喜欢喝冰美式", "在学弹吉他", "打算明年跳槽", "Tom likes hiking in the Alps 🏔️",
        "妹妹在杭州读大学", "每天早上跑步五公里", "對貓毛過敏但還是養貓", "喜欢看科幻小说，尤其是《三体》", "周五晚上常去打羽毛球"]


def group_msg(text, *, sender="1001", mid="g", role="member") -> InboundMessage:
    """A message in the supergroup GROUP, a minute after the last."""
    return InboundMessage(platform="tg", message_id=mid, sender_id=sender, sender_name="阿杰", chat_kind=ChatKind.GROUP,
                          chat_id=GROUP, text=text, timestamp=T0 + timedelta(minutes=next(_TICK)),
                          is_command=text.startswith("/"), sender_role=role)


def _dormant(core, ns, text, source_id):
    """A consolidated memory of ``ns`` citing ``source_id``, put to rest at once (the real sweep)."""
    (m,) = _add(core, ns, [text])
    core.store.put_consolidated(ns, m.id, "fact", 0.9, [source_id])
    core.store.sweep_dormant(ns, unused_since=utcnow() + timedelta(days=1), below=1.0)
    assert core.store.consolidated(ns, dormant=True).keys() == {m.id}
    return m


async def test_list_pages_each_awake_memory_once_when_one_is_dormant(core, monkeypatch):
    """Fault: paging counted the hidden dormant rows, so a memory was shown twice and the oldest on no page.
    Dormant ones are left out in SQL; --all pages over them too."""
    p = Pipeline(load_settings(), core)
    awake = _add(core, NS, PETS)
    rest = _dormant(core, NS, "长期来看，你很爱你的猫煤球", awake[0].id)  # the newest
    pages = [(await p.handle("default", msg(f"/记忆 列表 {n}", mid=f"p{n}"))).reply for n in (1, 2)]
    seen = [mid for page in pages for mid in re.findall(r"\b[0-9a-f]{12}\b", page)]
    assert sorted(seen) == sorted(m.id for m in awake) and "共 11 条" in pages[0]
    every = [(await p.handle("default", msg(f"/记忆 列表 {n} --all", mid=f"a{n}"))).reply for n in (1, 2)]
    seen = [mid for page in every for mid in re.findall(r"\b[0-9a-f]{12}\b", page)]
    assert sorted(seen) == sorted([rest.id] + [m.id for m in awake]) and "共 12 条" in every[0] and "💤" in every[0]


async def test_group_list_counts_only_what_the_group_may_see(sqlite_core, monkeypatch):
    """Fault: the group count subtracted the person's private dormant memories ("共 -1 条")."""
    p = Pipeline(load_settings(), sqlite_core)
    (private,) = _add(sqlite_core, NS, ["我养了一只叫煤球的黑猫"])
    _dormant(sqlite_core, NS, "你很爱你的猫煤球", private.id)
    empty = (await p.handle("default", group_msg("/记忆 列表", mid="g1"))).reply
    assert "-1" not in empty and "这个群" in empty
    origin = ChatRef("tg", ChatKind.GROUP, GROUP)
    said = sqlite_core.add(NS, sqlite_core.new(NS, "I play badminton on Fridays 🏸", origin=origin,
                                               visibility=Visibility.GROUP)).memory
    listing = (await p.handle("default", group_msg("/记忆 列表", mid="g2"))).reply
    assert "共 1 条" in listing and said.id in listing and private.id not in listing


@pytest.mark.parametrize("tenant_lang,text,expected", [
    ("zh_CN", "/记忆 列表 --all", "zh_CN"), ("zh_CN", "/memory list -a", "en"),
    ("en", "/memory list --all", "en"), ("en", "/记忆 列表 -A", "zh_CN")])
async def test_list_all_flag_is_no_language(sqlite_core, monkeypatch, tenant_lang, text, expected):
    """Fault: --all / -a were read as English words, so a Chinese speaker got an English list. With no other
    words the command word decides (/memory en, /记忆 zh), before the tenant default."""
    from locales import written_language

    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", tenant_lang)
    p = Pipeline(load_settings(), sqlite_core)
    reply = (await p.handle("default", msg(text, sender="45", mid="lang"))).reply
    assert written_language(reply) == expected, reply


@pytest.mark.parametrize("lang,cmd,reason", [("zh_CN", "/记忆 整理", "没有配置对话模型"),
                                             ("en", "/memory consolidate", "no chat model is configured")])
async def test_consolidate_without_a_model_says_so(sqlite_core, monkeypatch, lang, cmd, reason):
    """Fault: no model gave a dangling "得到 0 条长期记忆：" with no reason."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", lang)
    p = Pipeline(load_settings(), sqlite_core)
    _add(sqlite_core, NS, WORK_ZH if lang == "zh_CN" else WORK_EN)
    reply = (await p.handle("default", msg(cmd, mid="nm"))).reply
    assert reason in reply and not reply.rstrip().endswith((":", "：")), reply


@pytest.mark.parametrize("lang,cmd,reason", [("zh_CN", "/记忆 整理", "稍后会再试"),
                                             ("en", "/memory consolidate", "tried again later")])
async def test_consolidate_when_the_model_fails_says_it_is_retried(sqlite_core, llm, monkeypatch, lang, cmd, reason):
    """Fault: a failed model call gave the same dangling line; now it says it failed and will be retried."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", lang)
    p = _pipeline(sqlite_core, llm, monkeypatch)
    llm.responder = None
    for _ in range(10):  # the client's retries each take one
        llm.enqueue(status=500)
    _add(sqlite_core, NS, WORK_ZH if lang == "zh_CN" else WORK_EN)
    reply = (await p.handle("default", msg(cmd, mid="mf"))).reply
    assert reason in reply and not reply.rstrip().endswith((":", "：")), reply
    assert sqlite_core.store.consolidated(NS) == {}
    llm.queue.clear()
    llm.responder = consolidation_responder()  # the model is back: the same fragments are sorted out now
    await p.handle("default", msg(cmd, mid="mf2"))
    assert len(sqlite_core.store.consolidated(NS)) == 1


@pytest.mark.parametrize("arg", ["😀", "ＴＧ：４３", "tg:" + "4" * 200, "tg:None", "\u200b\u200b", "煤" * 300])
@pytest.mark.parametrize("sub", ["consolidate", "list"])
async def test_an_argument_naming_nobody_is_refused_not_run_for_the_speaker(sqlite_core, monkeypatch, arg, sub):
    """Fault: /memory consolidate|list <not a person> ran for the speaker. Refused, in the speaker's language."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", "zh_CN")
    p = Pipeline(load_settings(), sqlite_core)
    _add(sqlite_core, NS, WORK_ZH)
    zh = await p.handle("default", msg(f"/记忆 {'整理' if sub == 'consolidate' else '列表'} {arg}", mid="bz"))
    en = await p.handle("default", msg(f"/memory {sub} {arg} please", mid="be"))
    english = "认不出" if arg.startswith("煤") else "can't tell who"  # 300 Han characters outweigh "please"
    assert "认不出" in zh.reply and english in en.reply, (zh.reply, en.reply)
    assert sqlite_core.store.consolidation_state(NS).run_at is None
    assert not any(m.id in zh.reply + en.reply for m in sqlite_core.list(NS))


async def test_admin_list_takes_the_target_after_the_flag(sqlite_core, monkeypatch):
    """Fault: `/memory list --all tg:43` listed the admin's own (empty) memories, in English."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__ADMINS", '["tg:9"]')
    p = Pipeline(load_settings(), sqlite_core)
    other = Namespace("default", "tg:43")
    mine = _add(sqlite_core, other, WORK_ZH)
    for n, text in enumerate(("/memory list --all tg:43", "/memory list tg:43 --all", "/记忆 列表 全部 tg:43 1")):
        reply = (await p.handle("default", msg(text, sender="9", mid=f"t{n}"))).reply
        assert all(m.id in reply for m in mine) and "tg:43" in reply, reply


@pytest.mark.parametrize("limit", ["-1", "0"])
def test_huiyi_consolidate_limit_below_one_is_a_usage_error(limit):
    """Fault: --limit -1 printed a traceback on PostgreSQL (LIMIT must not be negative)."""
    from gateway.cli import app

    result = CliRunner().invoke(app, ["consolidate", "--limit", limit])
    assert result.exit_code == 2 and "Traceback" not in result.output and "--limit" in result.output


def test_huiyi_consolidate_without_a_model_warns_and_notes_why():
    """Without a chat model the CLI warns on stderr, and each person's line says no long-term memory was written."""
    from gateway.cli import app
    from gateway.service import build_core

    core = build_core(load_settings())
    _add(core, Namespace("default", "tg:78"), WORK_ZH)
    core.close()
    result = CliRunner().invoke(app, ["consolidate", "--subject", "tg:78"])
    assert result.exit_code == 0, result.output
    assert "no chat model configured" in result.stderr
    (line, _) = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert line["abstractions"] == [] and "no chat model configured" in line["note"]
