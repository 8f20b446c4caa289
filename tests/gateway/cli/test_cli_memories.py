"""``huiyi memories``: list, show, history, forget and forget-subject over the
same core the gateway uses, with --json, in the tenant's language."""

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
    assert r.exit_code == 1 and "没有记忆" in r.output
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
