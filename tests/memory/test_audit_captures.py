"""The audit_captures setting (issue 41): on (the default) every fact capture stores leaves a ``store``
audit row in its own transaction; off, capture's records (store, dedupe, supersede, …) are not written while
a forget and an edit still are — SQLite and PostgreSQL, zh and en."""

from __future__ import annotations

from gateway.config import load_settings
from memory.core import MemoryCore
from memory.types import Namespace

NS = Namespace("default", "tg:4242")


def _actions(core: MemoryCore) -> list[str]:
    return [r["action"] for r in core.store.audit_records(NS)][::-1]


def test_capture_records_only_while_audit_captures_is_on(core):
    """The default core audits the store and the dedupe; one with audit_captures off audits neither, but the
    edit and the forget that follow are recorded either way."""
    first = core.add(NS, core.new(NS, "我养了一只叫煤球的黑猫 🐈")).memory
    core.add(NS, core.new(NS, "我养了一只叫煤球的黑猫 🐈"))
    assert _actions(core) == ["store", "dedupe"]
    quiet = MemoryCore(core.store, core.index, audit_captures=False)
    second = quiet.add(NS, quiet.new(NS, "I work as a nurse in Leeds")).memory
    quiet.add(NS, quiet.new(NS, "I work as a nurse in Leeds"))
    assert _actions(core) == ["store", "dedupe"]  # nothing for the quiet core's capture
    quiet.update(NS, second.id, "I work as a nurse in York")
    quiet.forget(NS, first.id)
    assert _actions(core) == ["store", "dedupe", "edit", "forget"]
    assert quiet.audit_failures == 0


def test_the_setting_is_read_from_the_environment(monkeypatch):
    """HUIYI_AUDIT_CAPTURES=false turns it off; unset it is on."""
    assert load_settings().audit_captures is True
    monkeypatch.setenv("HUIYI_AUDIT_CAPTURES", "false")
    assert load_settings().audit_captures is False
