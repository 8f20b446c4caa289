"""The huiyi CLI: replay over every shared Telegram/OneBot payload, and recall."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from conftest import TEST_DATA
from gateway.cli import app

runner = CliRunner()


def test_replay_all_shared_payloads_prints_one_line_per_person_message():
    """Replaying every file under im/telegram and im/onebot raises nothing and prints
    a JSON line with the required keys for each person-message only."""
    expected = json.loads((Path(__file__).resolve().parents[1] / "data" / "im_expected.json").read_text())["files"]
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
