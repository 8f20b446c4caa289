"""The huiyi CLI: replay over every shared Telegram/OneBot payload, and recall; a user's input
error (missing or non-UTF-8 file, undecodable query, bad subject) is one line and exit 2; the
CLI speaks the shell's language (else the tenant's), and every "nothing" says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import TEST_DATA
from gateway.cli import app

runner = CliRunner()


def test_replay_all_shared_payloads_prints_one_line_per_person_message():
    """Replaying every file under im/telegram and im/onebot raises nothing and prints
    a JSON line with the required keys for each person-message only."""
    expected = json.loads((Path(__file__).resolve().parents[2] / "data" / "im_expected.json").read_text())["files"]
    want = sum(1 for entries in expected.values() for e in entries.values() if isinstance(e, dict) and "message" in e)
    result = runner.invoke(app, ["replay", "--tenant", "default", str(TEST_DATA / "im/telegram"),
                                 str(TEST_DATA / "im/onebot")])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == want
    for line in lines:
        assert {"namespace", "chat", "addressed", "recalled", "recollection", "prompt", "reply", "captured"} <= set(line)
        assert line["reply"] is None


def test_recall_command_prints_hits_with_ranks(tmp_path):
    """huiyi recall prints hits of one subject with scores and channel ranks."""
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.types import Namespace

    core = build_core(load_settings())
    ns = Namespace("default", "tg:77")
    core.add(ns, core.new(ns, "我养了一只叫煤球的黑猫"))
    core.close()
    result = runner.invoke(app, ["recall", "--subject", "tg:77", "--explain", "煤球"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout[result.stdout.index("{"):])
    assert out["namespace"] == "default/tg:77"
    assert out["hits"][0]["text"] == "我养了一只叫煤球的黑猫"
    assert set(out["hits"][0]["ranks"]) == {"bm25", "vector"}
    assert "retention" in out["hits"][0]["parts"]


def test_recall_explain_shows_the_association_channel_rank(tmp_path):
    """A memory linked to the hit (recalled together before) comes up with its own ``assoc`` rank."""
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.types import Namespace

    core = build_core(load_settings())
    ns = Namespace("default", "tg:78")
    cat = core.add(ns, core.new(ns, "我养了一只叫煤球的黑猫")).memory.id
    vet = core.add(ns, core.new(ns, "昨天带它去宠物医院看兽医了，打了疫苗💉")).memory.id
    core.mark_recalled(ns, [cat, vet])
    core.close()
    result = runner.invoke(app, ["recall", "--subject", "tg:78", "--explain", "兽医怎么说？"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout[result.stdout.index("{"):])["hits"]
    assert [h["text"] for h in hits][:2] == ["昨天带它去宠物医院看兽医了，打了疫苗💉", "我养了一只叫煤球的黑猫"]
    assert hits[1]["ranks"]["assoc"] == 1


def test_replay_progress_bar_goes_to_stderr_and_leaves_stdout_json():
    """replay --progress counts payloads on stderr (all of them, 100%) while stdout stays one JSON line per message."""
    files = [str(TEST_DATA / "im/telegram"), str(TEST_DATA / "im/onebot")]
    quiet = runner.invoke(app, ["replay", "--no-progress", *files])
    shown = runner.invoke(app, ["replay", "--progress", *files])
    assert quiet.exit_code == 0 and shown.exit_code == 0, shown.output
    assert "replaying" not in quiet.stderr
    bar = shown.stderr.replace("\r", "\n").strip().splitlines()[-1]
    done, total = (int(x) for x in bar.split("|")[2].split()[0].split("/"))
    assert bar.startswith("replaying: 100%") and done == total > 0
    lines = [json.loads(x) for x in shown.stdout.splitlines()]
    assert len(lines) == len(quiet.stdout.splitlines()) > 0
    assert len(lines) <= total  # some payloads carry no person-message


def test_reindex_progress_option():
    """reindex --progress draws tqdm's bar on stderr; --no-progress prints only the count."""
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.types import Namespace

    core = build_core(load_settings())
    ns = Namespace("default", "tg:88")
    core.add(ns, core.new(ns, "我喜欢喝乌龙茶 and green tea 🍵"))
    core.close()
    shown = runner.invoke(app, ["reindex", "--progress"])
    quiet = runner.invoke(app, ["reindex", "--no-progress"])
    assert shown.exit_code == 0 and quiet.exit_code == 0, shown.output
    assert "re-embedding" in shown.stderr and "re-embedding" not in quiet.stderr
    assert shown.stdout.strip() == quiet.stdout.strip() == "reindexed 1 memory"


# -- newcomer faults: user errors are one line, exit 2, no traceback -------------------------


def test_replay_of_a_missing_file_is_one_line_exit_2(tmp_path):
    """huiyi replay /nonexistent: one line on stderr naming the path, exit 2, no traceback."""
    missing = tmp_path / "不存在" / "payloads.jsonl"
    result = runner.invoke(app, ["replay", "--no-progress", str(missing)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and str(missing) in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_replay_of_a_non_utf8_file_is_one_line_exit_2(tmp_path):
    """A payload file in GBK (not UTF-8) is refused with one line saying so, exit 2."""
    bad = tmp_path / "gbk.json"
    bad.write_bytes('{"text": "我喜欢茶 I like tea"}'.encode("gbk"))
    result = runner.invoke(app, ["replay", "--no-progress", str(bad)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "UTF-8" in result.stderr
    assert "Traceback" not in result.output


def test_recall_with_undecodable_query_bytes_is_one_line_exit_2():
    """huiyi recall --subject tg:42 $'\\xed\\xa0\\xbc' (bytes that are not UTF-8, as a shell passes them)
    prints one line on stderr and exits 2, in a real process."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "recall", "--subject", "tg:42", b"\xed\xa0\xbc"],
                          cwd=root, env=env, capture_output=True, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert err.strip().count("\n") == 0 and "UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize("subject", ["TG:42", "tg:四十二"])
def test_recall_with_a_bad_subject_is_one_line_exit_2(subject):
    """A subject outside its pattern is one line and exit 2, not a NamespaceError traceback."""
    result = runner.invoke(app, ["recall", "--subject", subject, "我喜欢什么 what do I like"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.output


@pytest.mark.parametrize("query", ["", "  \u3000"])
def test_recall_with_an_empty_query_is_one_line_exit_2(query):
    """A new user's `huiyi recall --subject tg:400 ''` exited 0 with 'No memory matches ""': now one line naming
    what to give, and exit 2, before the store opens."""
    result = runner.invoke(app, ["recall", "--subject", "tg:400", query])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "huiyi recall --subject tg:400" in result.stderr


def test_help_lists_each_command_in_a_sentence_without_markup():
    """``huiyi --help`` (what an operator reads first): every command listed on one line of a wide terminal —
    its summary reflowed, not broken where the docstring wraps — and without reStructuredText's double
    backquotes."""
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert out.exit_code == 0
    box = out.stdout.split("Commands")[1].splitlines()[1:]
    rows = [line.strip("│ ") for line in box if line.startswith("│")]
    names = [row.split(" ")[0] for row in rows]
    assert {"serve", "replay", "recall", "reindex", "consolidate", "stats", "eval", "memories", "db", "keys"} <= set(names)
    assert all(name and row[len(name):].startswith("  ") for name, row in zip(names, rows)), rows  # no continuation rows
    assert "``" not in out.stdout


# -- the operator's language, and why there is nothing (issue 27) ------------------------------

ZH = {"LANG": "zh_CN.UTF-8"}
EN = {"LANG": "en_US.UTF-8"}
UNSET = {"LC_ALL": None, "LC_MESSAGES": None, "LANG": None}
NO_MODEL = {"zh_CN": "租户 default 没有配置聊天模型", "en": "Tenant default has no chat model configured"}
HOW = {"zh_CN": "设置方法：HUIYI_LLM_BASE_URL 和 HUIYI_LLM_MODEL", "en": "Set one with HUIYI_LLM_BASE_URL and HUIYI_LLM_MODEL"}


@pytest.mark.parametrize(("env", "lang"), [(ZH, "zh_CN"), (EN, "en"), ({"LANG": "C"}, "en"), ({}, "zh_CN"),
                                           ({"HUIYI_TENANTS__DEFAULT__LANGUAGE": "en"}, "en")])
def test_replay_without_a_model_says_why_each_reply_is_null(env, lang):
    """Without a chat model, replay warns once on stderr that none is configured and how to set one
    (HUIYI_LLM_BASE_URL, HUIYI_LLM_MODEL, the TOML), and each line whose reply is null carries a note
    saying why — no model, a group message not addressed to the bot, an edit, a re-delivery — in the
    shell's language, else the tenant's (no locale set: default's zh_CN, or its configured en)."""
    result = runner.invoke(app, ["replay", "--no-progress", str(TEST_DATA / "im/telegram")], env={**UNSET, **env})
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("huiyi: ")]
    assert len(warning) == 1 and NO_MODEL[lang] in warning[0] and HOW[lang] in warning[0]
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert lines and all(line["reply"] is None and line["note"] for line in lines)
    fresh = [line for line in lines if line["addressed"] and not line["duplicate"]]
    unmodelled = {"zh_CN": "租户 default 没有配置聊天模型：提示词已生成，但没有发给任何模型。",
                  "en": "No chat model is configured for tenant default: the prompt was built but sent to no model."}
    assert any(line["note"].startswith(unmodelled[lang]) and HOW[lang] in line["note"] for line in fresh)
    group = {"zh_CN": "在群里说的，且没有叫机器人", "en": "Said in a group without addressing the bot"}
    assert any(line["note"].startswith(group[lang]) for line in lines if not line["addressed"] and not line["duplicate"])
    again = {"zh_CN": "这条消息此前已在这个数据目录里处理过", "en": "A re-delivery of a message this data root"}
    assert any(line["note"].startswith(again[lang]) for line in lines if line["duplicate"])


def test_replay_of_another_tenant_without_a_model_names_its_own_settings(monkeypatch):
    """HUIYI_LLM_* reach tenant default only: for tenant mochi the hint names [tenants.mochi.llm] and its variables."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__PERSONA_NAME", "小桃")
    result = runner.invoke(app, ["replay", "--no-progress", "--tenant", "mochi", str(TEST_DATA / "im/telegram")],
                           env=EN)
    assert result.exit_code == 0, result.output
    assert "[tenants.mochi.llm]" in result.stderr and "HUIYI_TENANTS__MOCHI__LLM__BASE_URL" in result.stderr
    assert "HUIYI_LLM_BASE_URL" not in result.stderr


@pytest.mark.parametrize(("env", "no_match", "nobody"), [
    (EN, 'No memory of default/tg:77 matches "quarterly tax filing deadline": recall keeps only memories that share',
     "No memories for default/tg:99: nothing this person said has been kept yet"),
    (ZH, "default/tg:77 没有与「quarterly tax filing deadline」相符的记忆：检索只保留",
     "default/tg:99 没有记忆：这个人说过的话还没有被记下"),
])
def test_a_recall_that_finds_nothing_says_so(env, no_match, nobody):
    """huiyi recall with no hit still prints its JSON (hits: []) and says on stderr why: nothing of the person
    matches the query, or the person has no memory at all."""
    from gateway.config import load_settings
    from gateway.service import build_core
    from memory.types import Namespace

    core = build_core(load_settings())
    ns = Namespace("default", "tg:77")
    core.add(ns, core.new(ns, "我养了一只叫煤球的黑猫"))
    core.close()
    for subject, why in (("tg:77", no_match), ("tg:99", nobody)):
        result = runner.invoke(app, ["recall", "--subject", subject, "quarterly tax filing deadline"], env=env)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["hits"] == [] and why in result.stderr


@pytest.mark.parametrize(("env", "subject_hint"), [
    (EN, "Subjects are written <platform>:<id> in lower case, e.g. tg:42"),
    (ZH, "用户标识写作 <平台>:<编号>，全部小写，例如 tg:42"),
])
def test_recall_of_a_bare_id_says_how_a_subject_is_written(env, subject_hint):
    """huiyi recall --subject 42: one line, exit 2, with tg:42 as the example."""
    result = runner.invoke(app, ["recall", "--subject", "42", "猫"], env=env)
    assert result.exit_code == 2 and result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("huiyi: ") and subject_hint in result.stderr


@pytest.mark.parametrize(("env", "reindexed", "nobody", "keys", "db"), [
    (EN, "reindexed 0 memories: the database (", "No one in tenant default has new fragments to consolidate",
     "Tenant default has no API key yet: `huiyi keys create --tenant default` makes one.", "database revision: none"),
    (ZH, "已重建索引：0 条记忆——数据库（", "租户 default 里没有人有待整理的新零散记忆",
     "租户 default 还没有 API 密钥：`huiyi keys create --tenant default` 会创建一个。", "数据库修订版：无"),
])
def test_empty_data_root_says_why_each_command_found_nothing(env, reindexed, nobody, keys, db):
    """On an empty data root: reindex says the database holds no memory and names it, consolidate that nobody has
    new fragments (after the no-model warning, with how to set one), keys list how to make a key, db current that
    there is no database yet — each in the shell's language."""
    lang = "zh_CN" if env is ZH else "en"
    result = runner.invoke(app, ["db", "current"], env=env)
    assert result.exit_code == 0 and result.stdout.startswith(db)
    result = runner.invoke(app, ["reindex", "--no-progress"], env=env)
    assert result.exit_code == 0 and result.stdout.startswith(reindexed) and "huiyi.db" in result.stdout
    result = runner.invoke(app, ["consolidate"], env=env)
    assert result.exit_code == 0 and nobody in result.stderr
    assert NO_MODEL[lang] in result.stderr and HOW[lang] in result.stderr
    result = runner.invoke(app, ["keys", "list"], env=env)
    assert result.exit_code == 0 and result.stdout.startswith(keys)
    result = runner.invoke(app, ["keys", "list", "--tenant", "nope"], env=env)
    assert result.exit_code == 2 and ("Unknown tenant nope" if lang == "en" else "未知的租户 nope") in result.stderr


def test_consolidate_of_a_person_without_new_fragments_notes_why():
    """consolidate --subject for a person with nothing new: the line's note says there is nothing to do."""
    result = runner.invoke(app, ["consolidate", "--subject", "tg:99"], env=EN)
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.splitlines()[0])
    assert line["skipped"] == "few_fragments"
    assert line["note"] == "No new fragments since the last consolidation of default/tg:99: nothing to do."
