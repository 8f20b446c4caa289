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
