"""``huiyi events``: the outbox's status, a tenant's dead letters and their replay
(audited, with the original webhook-id), in the operator's language; a replay that
names nothing or finds nothing says so and exits non-zero."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gateway.cli import app

runner = CliRunner()


@pytest.fixture
def dead():
    """Two dead letters and one waiting event of tenant default, in the test's data root's store."""
    from gateway.config import load_settings
    from memory.store import Store
    from memory.store.events import ADDED, _emit
    from memory.types import Namespace

    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db_url)
    ns = Namespace("default", "tg:42")
    with store._write_conn() as conn:
        _emit(conn, frozenset({"default"}), ns, ADDED, [("a1b2c3d4e5f6", 1), ("0123456789ab", 1), ("c0ffee000001", 1)])
    a, b, _ = store.due_events(limit=10)
    store.events_dead(a.id, "HTTP 500")
    store.events_dead(b.id, "ConnectError")
    store.close()
    return a, b


def test_dead_letters_are_listed_and_replayed_with_their_webhook_id_and_audited(dead):
    """dead lists both with their last errors; replay of one sends it again (waiting, not dead), keeps
    its webhook-id and leaves an event_replay audit record; status counts what is left."""
    a, b = dead
    listed = runner.invoke(app, ["events", "dead", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [(r["webhook_id"], r["last_error"]) for r in json.loads(listed.output)] == [
        (a.webhook_id, "HTTP 500"), (b.webhook_id, "ConnectError")]
    done = runner.invoke(app, ["events", "replay", a.webhook_id])
    assert done.exit_code == 0 and "Replayed 1 dead letter" in done.output
    status = runner.invoke(app, ["events", "status", "--json"])
    assert [(r["tenant"], r["pending"], r["dead"]) for r in json.loads(status.output)] == [("default", 2, 1)]
    from gateway.config import load_settings
    from memory.store import Store

    store = Store(load_settings().db_url)
    try:
        (rec,) = [r for r in store.audit_records(a.namespace) if r["action"] == "event_replay"]
        assert (rec["actor"], rec["memory_id"], rec["detail"]["webhook_id"]) == ("operator", a.memory_id, a.webhook_id)
        assert [e.webhook_id for e in store.due_events(limit=10)][0] == a.webhook_id
    finally:
        store.close()


def test_a_replay_that_names_nothing_or_finds_nothing_says_so_in_the_shells_language(dead, monkeypatch):
    """No id and no --all: exit 2 with what to do; an id that is not a dead letter: exit 1; in a
    Chinese shell the same in Chinese; --all replays every one."""
    bare = runner.invoke(app, ["events", "replay"])
    assert bare.exit_code == 2 and "--all" in bare.output
    missing = runner.invoke(app, ["events", "replay", "evt_nope"])
    assert missing.exit_code == 1 and "huiyi events dead --tenant default" in missing.output
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    zh = runner.invoke(app, ["events", "replay", "evt_nope"])
    assert zh.exit_code == 1 and "没有死信被重放" in zh.output
    every = runner.invoke(app, ["events", "replay", "--all"])
    assert every.exit_code == 0 and "已重放 2 个死信" in every.output
    assert "没有死信" in runner.invoke(app, ["events", "dead"]).output


def test_replay_with_all_beside_named_ids_is_refused_and_replays_nothing(dead):
    """``replay --all evt_…`` (an operator adding --all by habit) resent every dead letter, the named
    id ignored even when it did not exist: now exit 2, and both letters are still dead."""
    a, _ = dead
    both = runner.invoke(app, ["events", "replay", "--all", "evt_" + "0" * 32])
    assert both.exit_code == 2 and "not both" in both.output
    status = runner.invoke(app, ["events", "status", "--json"])
    assert [(r["pending"], r["dead"]) for r in json.loads(status.output)] == [(1, 2)]


def test_a_webhook_id_in_upper_case_as_a_receiver_logged_it_is_replayed(dead):
    """A webhook-id copied from a receiver's log in upper case (``EVT_…``) names the same dead letter."""
    a, _ = dead
    done = runner.invoke(app, ["events", "replay", a.webhook_id.upper()])
    assert done.exit_code == 0 and "Replayed 1 dead letter" in done.output


def test_status_counts_one_dead_letter_in_the_singular(dead):
    """``status`` said "1 dead letters": the count takes its plural form (en), and zh reads 个死信."""
    runner.invoke(app, ["events", "replay", dead[0].webhook_id])
    out = runner.invoke(app, ["events", "status"])
    assert out.exit_code == 0 and "2 waiting, 1 dead letter," in out.output
