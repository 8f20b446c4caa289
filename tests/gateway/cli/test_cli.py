"""The huiyi CLI: replay over every shared Telegram/OneBot payload, and recall; a user's input
error (missing or non-UTF-8 file, undecodable query, bad subject) is one line and exit 2."""

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
    assert shown.stdout.strip() == quiet.stdout.strip() == "reindexed 1 memories"


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
