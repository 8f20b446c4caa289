"""``huiyi memories``: list, show, history, forget and forget-subject over the
same core the gateway uses, with --json, in the operator's language (the shell's
locale, else the tenant's), and every "nothing" says why."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()


@pytest.fixture
def seeded():
    """Two memories of tg:77 (one with two versions) and one of tg:78, in the test's data root."""
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.types import Namespace

    core = build_core(load_settings())
    ns = Namespace("default", "tg:77")
    cat = core.add(ns, core.new(ns, "我的猫叫煤球", key="pet.cat.name")).memory
    core.update(ns, cat.id, "我的猫叫雪球")
    name = core.add(ns, core.new(ns, "我叫阿杰", key="profile.name")).memory
    other = Namespace("default", "tg:78")
    core.add(other, core.new(other, "我叫小美", key="profile.name"))
    core.close()
    return {"cat": cat.id, "name": name.id}


def run(*args: str):
    result = runner.invoke(app, ["memories", *args])
    return result


def test_list_show_history_as_json(seeded):
    """list, show and history print one subject's memories and versions as JSON."""
    r = run("list", "--subject", "tg:77", "--json")
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert listed["namespace"] == "default/tg:77" and listed["count"] == 2
    assert {m["text"] for m in listed["memories"]} == {"我的猫叫雪球", "我叫阿杰"}
    r = run("show", seeded["cat"], "--subject", "tg:77", "--json")
    shown = json.loads(r.stdout)
    assert shown["version"] == 2 and shown["key"] == "pet.cat.name"
    from dataclasses import fields

    from memory.types import Memory

    # "every field": a field added to Memory (as context was) must show here too
    assert set(shown) == {f.name for f in fields(Memory)} and shown["context"] == ""
    r = run("history", seeded["cat"], "--subject", "tg:77", "--json")
    versions = json.loads(r.stdout)["versions"]
    assert [v["text"] for v in versions] == ["我的猫叫煤球", "我的猫叫雪球"]
    assert versions[0]["valid_to"] == versions[1]["valid_from"] and versions[1]["valid_to"] is None


def test_plain_output_and_unknown_ids(seeded):
    """Plain output is one line per memory; another subject's id is 'no memory' (exit 1)."""
    r = run("list", "--subject", "tg:77")
    assert r.exit_code == 0 and len(r.stdout.strip().splitlines()) == 2 and seeded["cat"] in r.stdout
    r = run("show", seeded["cat"], "--subject", "tg:78")
    assert r.exit_code == 1 and f"No memory {seeded['cat']} in default/tg:78" in r.stderr
    assert "huiyi memories list --tenant default --subject tg:78" in r.stderr  # how to find the person's ids
    r = run("list", "--subject", "not a subject")
    assert r.exit_code == 2


def test_forget_and_forget_subject(seeded):
    """forget removes one memory; forget-subject refuses without --yes and then
    removes every memory of the subject only."""
    r = run("forget", seeded["cat"], "--subject", "tg:77", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["forgotten"] is True
    assert json.loads(run("list", "--subject", "tg:77", "--json").stdout)["count"] == 1
    r = run("forget-subject", "--subject", "tg:77")
    assert r.exit_code == 2 and "--yes" in r.output
    r = run("forget-subject", "--subject", "tg:77", "--yes")
    assert r.exit_code == 0 and "1" in r.stdout
    assert json.loads(run("list", "--subject", "tg:77", "--json").stdout)["count"] == 0
    assert json.loads(run("list", "--subject", "tg:78", "--json").stdout)["count"] == 1


def test_recall_explain_prints_every_score_component(seeded):
    """huiyi recall --explain prints rrf, retention, activation, emotion and importance
    per hit, and the query's valence."""
    r = runner.invoke(app, ["recall", "--subject", "tg:77", "--explain", "我好想我的猫雪球，好难过"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["query_valence"] < 0
    assert set(out["hits"][0]["parts"]) == {"rrf", "retention", "activation", "emotion", "importance"}


# -- the operator's language (issue 27) ---------------------------------------------------------

NO_SUCH = {"zh_CN": "中没有记忆", "en": "No memory "}
UNSET = {"LC_ALL": None, "LC_MESSAGES": None, "LANG": None}


@pytest.mark.parametrize(("env", "lang"), [
    ({"LANG": "zh_CN.UTF-8"}, "zh_CN"),
    ({"LANG": "en_US.UTF-8"}, "en"),
    ({"LANG": "C"}, "en"),
    ({"LANG": "zh_TW.UTF-8"}, "zh_CN"),
    ({"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh_CN"),
    ({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"LC_MESSAGES": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
    ({}, "zh_CN"),  # no locale at all: tenant default's language, zh_CN
    ({"HUIYI_TENANTS__DEFAULT__LANGUAGE": "en"}, "en"),
    ({"HUIYI_TENANTS__DEFAULT__LANGUAGE": "en", "LANG": "zh_CN.UTF-8"}, "zh_CN"),  # the shell before the tenant
])
def test_memories_speaks_the_shell_language_then_the_tenants(seeded, env, lang):
    """LC_ALL, then LC_MESSAGES, then LANG decide (zh_* Chinese, anything else set English, C included);
    with none set, the tenant's language does."""
    r = runner.invoke(app, ["memories", "show", seeded["cat"], "--subject", "tg:78"], env={**UNSET, **env})
    assert r.exit_code == 1
    assert NO_SUCH[lang] in r.stderr and NO_SUCH["en" if lang == "zh_CN" else "zh_CN"] not in r.stderr


@pytest.mark.parametrize(("lang", "env", "empty", "offset", "forgot"), [
    ("en", {"LANG": "en_US.UTF-8"}, "No memories for default/tg:99: nothing this person said has been kept yet",
     "No memories past the first 5: default/tg:77 has 2.", "Nothing was forgotten."),
    ("zh_CN", {"LANG": "zh_CN.UTF-8"}, "default/tg:99 没有记忆：这个人说过的话还没有被记下",
     "跳过前 5 条后没有记忆了：default/tg:77 共有 2 条。", "什么也没有遗忘。"),
])
def test_an_empty_listing_says_why(seeded, lang, env, empty, offset, forgot):
    """An empty list says the person has no memories (not a bare 'No memories.'); a page past the end says how
    many there are; forget-subject of nobody says nothing was forgotten — in the shell's language."""
    r = runner.invoke(app, ["memories", "list", "--subject", "tg:99"], env=env)
    assert r.exit_code == 0 and empty in r.stdout
    assert "tg:42" not in r.stdout  # a well-formed subject gets no format lecture
    r = runner.invoke(app, ["memories", "list", "--subject", "tg:77", "--offset", "5"], env=env)
    assert r.exit_code == 0 and offset in r.stdout
    r = runner.invoke(app, ["memories", "forget-subject", "--subject", "tg:99", "--yes"], env=env)
    assert r.exit_code == 0 and empty in r.stdout and forgot in r.stdout


@pytest.mark.parametrize(("env", "format_hint", "tenant_hint", "invalid"), [
    ({"LANG": "en_US.UTF-8"}, "Subjects are written <platform>:<id> in lower case, e.g. tg:42 (Telegram)",
     "Tenant nope is not configured", "Invalid tenant or subject"),
    ({"LANG": "zh_CN.UTF-8"}, "用户标识写作 <平台>:<编号>，全部小写，例如 tg:42（Telegram）",
     "租户 nope 没有配置", "租户或用户标识无效"),
])
def test_a_subject_that_looks_wrong_gets_the_format(seeded, env, format_hint, tenant_hint, invalid):
    """42 instead of tg:42 is refused with the format and tg:42 as the example; telegram:42 (a kind no bridge
    writes) lists nothing and says how subjects are written; an unknown tenant is named."""
    r = runner.invoke(app, ["memories", "list", "--subject", "42"], env=env)
    assert r.exit_code == 2 and invalid in r.stderr and format_hint in r.stderr
    assert r.stderr.strip().count("\n") == 0
    r = runner.invoke(app, ["memories", "list", "--subject", "telegram:42"], env=env)
    assert r.exit_code == 0 and format_hint in r.stdout
    r = runner.invoke(app, ["memories", "list", "--tenant", "nope", "--subject", "tg:42"], env=env)
    assert r.exit_code == 0 and tenant_hint in r.stdout and format_hint not in r.stdout
