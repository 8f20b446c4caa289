"""A client generated from the app's own /openapi.json by openapi-python-client (offline, into tmp_path)
imports whole — every model and every operation module, the edit and batch-edit ones included — and
calls every /v1 operation of a real gateway on a loopback socket, each answered 200 with its declared
model: capture, list and search with metadata filters (a range, ``$or``) and a threshold, get, edit,
history, why (not) recalled, batch edit and forget, forget with its receipt, forget the last minutes, export, import, recollection, reply, pause and resume,
turn, withdrawal, people,
the scoped forget and forgetting a person; zh and en text."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import subprocess
import sys

import pytest

from fake_openai import served as serve_app
from gateway.config import TenantSettings, load_settings
from gateway.http.app import create_app

pytest.importorskip("openapi_python_client")

ZH, EN = "我养了一只叫煤球的黑猫", "I love hiking in the Alps every summer"
PACKAGE = "huiyi_generated_api"


def _generate(doc: dict, where) -> object:
    """The package openapi-python-client makes of ``doc`` under ``where`` (no formatter hooks: nothing but the
    generator runs), imported with every module in it."""
    (where / "openapi.json").write_text(json.dumps(doc), encoding="utf-8")
    (where / "config.yaml").write_text("post_hooks: []\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "openapi_python_client", "generate", "--path",
                           str(where / "openapi.json"), "--meta", "none", "--output-path", str(where / PACKAGE),
                           "--config", str(where / "config.yaml")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # a schema the generator cannot read is dropped with a warning, and the modules using it fail to import
    assert "Unable to" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(where))
    try:
        package = importlib.import_module(PACKAGE)
        failed = []
        for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - collected: every module that does not import is named
                failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
        assert not failed, failed
        return package
    finally:
        sys.path.remove(str(where))


@pytest.fixture
def generated(tmp_path):
    yield
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def test_a_generated_client_imports_whole_and_calls_every_v1_operation(tmp_path, generated):
    """openapi-python-client generates a client of /openapi.json offline; each of its modules imports; each /v1
    operation called through it (bearer key) answers 200 with its response model."""
    app = create_app(load_settings(tenants={"default": TenantSettings(language="en", followups={
        "waking_hours": "00:00-24:00"})}))  # a follow-up may be due whenever the test runs
    doc = app.openapi()
    pkg = _generate(doc, tmp_path)
    ops = {op["operationId"]: path for path, item in doc["paths"].items() if path.startswith("/v1")
           for op in item.values() if isinstance(op, dict) and "operationId" in op}
    models = importlib.import_module(PACKAGE + ".models")
    called: set[str] = set()

    with serve_app(app) as url:
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        client = pkg.AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)

        def call(op_id: str, answer: str, **kwargs):
            module = importlib.import_module(f"{PACKAGE}.api.default.{re.sub('_+', '_', op_id)}")
            r = module.sync_detailed(client=client, **kwargs)
            assert r.status_code == 200, (op_id, r.status_code, r.content[:500])
            assert type(r.parsed).__name__ == answer, (op_id, type(r.parsed).__name__)
            called.add(op_id)
            return r.parsed

        def op(prefix: str) -> str:
            (found,) = [o for o in ops if o.startswith(prefix + "_v1")]
            return found

        stored = call(op("capture_messages"), "CaptureOut", subject="tg:42", body=models.CaptureIn.from_dict({
            "messages": [{"text": ZH}], "infer": False, "metadata": {"topic": "pets", "score": 3}}))
        cat = stored.results[0].memory.id
        alps = call(op("capture_messages"), "CaptureOut", subject="tg:42", body=models.CaptureIn.from_dict({
            "messages": [{"text": EN}], "infer": False, "metadata": {"topic": "travel", "score": 8}})).results[0].memory.id
        page = call(op("list_memories"), "MemoryPage", subject="tg:42", filters=json.dumps({"score": {"$gte": 5}}))
        assert [m.id for m in page.items] == [alps]
        found = call(op("search"), "SearchOut", subject="tg:42", body=models.SearchIn.from_dict({
            "query": "猫 Alps", "threshold": 0.01,
            "filters": {"$or": [{"topic": "pets"}, {"score": {"$gt": 7, "$lte": 8}}]}}))
        assert {h.memory.id for h in found.hits} == {cat, alps}
        assert call(op("get_memory"), "MemoryOut", subject="tg:42", memory_id=cat).text == ZH
        edited = call(op("update_memory"), "MemoryOut", subject="tg:42", memory_id=cat,
                      body=models.UpdateIn.from_dict({"text": "我养了一只叫煤球的黑猫，它三岁了"}))
        assert edited.version == 2
        assert len(call(op("memory_history"), "HistoryOut", subject="tg:42", memory_id=cat).versions) == 2
        why = call(op("why_memory"), "WhyOut", subject="tg:42", memory_id=cat)
        assert why.id == cat and why.verdict.startswith(("no_trace", "newer", "recalled"))
        batch = call(op("batch_update"), "BatchOut", subject="tg:42", body=models.BatchUpdateIn.from_dict({
            "items": [{"id": alps, "metadata": {"pinned": True}}, {"id": "nobody0000", "text": "x"}]}))
        assert [r.status.value for r in batch.results] == ["updated", "not_found"]
        exported = call(op("export"), "ExportDoc", subject="tg:42")
        imported = call(op("import_memories"), "ImportOut", subject="tg:43", body=exported)
        assert len(imported.results) == 2 and all(r.memory_id for r in imported.results)
        jsonl = '{"text": "I grow tomatoes on my balcony", "time": "2026-03-01T09:00:00Z"}\n{"broken"\n'
        brought = call(op("import_source"), "SourceImportOut", body=models.SourceImportIn.from_dict(
            {"source": "jsonl", "content": jsonl, "person": "tg:44"}))
        assert (brought.read, brought.imported) == (2, 1) and [p.line for p in brought.problems] == [2]
        rec = call(op("recollection"), "RecollectOut", subject="tg:42",
                   body=models.RecollectIn.from_dict({"query": "我的猫叫什么？"}))
        assert cat in [h.memory.id for h in rec.hits]
        assert call(op("record_reply"), "ReplyOut", subject="tg:42",
                    body=models.ReplyIn.from_dict({"text": "煤球真可爱！"})).chat == "tg:private:42"
        paused = call(op("put_pause"), "PauseOut", subject="tg:42",
                      body=models.PauseIn.from_dict({"chat": "tg:private:42", "duration": "30分钟"}))
        assert paused.paused and paused.until
        assert call(op("get_pause"), "PauseOut", subject="tg:42", chat="tg:private:42").paused
        assert not call(op("delete_pause"), "PauseOut", subject="tg:42", chat="tg:private:42").paused
        message = {"platform": "tg", "message_id": "m1", "sender_id": "42", "chat_kind": "private", "chat_id": "42"}
        turn = call(op("turns"), "TurnOut", body=models.TurnRequest.from_dict(
            {"message": {**message, "text": "My sister Lily lives in Toronto"}}))
        assert turn.captured
        gone = call(op("withdrawals"), "WithdrawalOut", body=models.WithdrawalRequest.from_dict({"withdrawal": message}))
        assert gone.retracted == turn.captured
        assert "tg:42" in {p.subject for p in call(op("list_people"), "PeopleOut").items}
        taken = call(op("forget_last"), "ForgetLastOut", subject="tg:42",
                     body=models.ForgetLastIn.from_dict({"chat": "tg:private:42", "duration": "10分钟"}))
        assert taken.ids == turn.captured or taken.ids == []  # the turn's memory was withdrawn just before
        forgot = call(op("forget_memory"), "ForgetOut", subject="tg:42", memory_id=cat)
        assert forgot.forgotten and forgot.receipt.memories == 1 and forgot.receipt.tombstones >= 1
        batch = call(op("batch_forget"), "BatchOut", subject="tg:42",
                     body=models.BatchForgetIn.from_dict({"ids": [alps]}))
        assert [r.status.value for r in batch.results] == ["forgotten"]
        assert call(op("forget_scope"), "ForgetScopeOut", subject="tg:43", confirm="tg:43").forgotten == 2
        assert call(op("forget_subject"), "ForgetSubjectOut", subject="tg:42").subject == "tg:42"
        # a follow-up owed in a chat of a platform the gateway has no bot for: the /v1 due-list's
        from datetime import UTC, datetime, timedelta

        from memory.types import ChatKind, ChatRef, Memory, Namespace

        store, now = app.state.pipeline.core.store, datetime.now(UTC)
        carol, web = Namespace("default", "web:carol"), ChatRef("web", ChatKind.PRIVATE, "carol")
        store.set_followups(carol, True, lang="en")
        store.add(carol, Memory(id="f1", namespace=carol, text="I have an exam on Monday", key="event.f1", origin=web,
                                created_at=now - timedelta(days=5), updated_at=now - timedelta(days=5),
                                event_time=now - timedelta(days=2)))
        (item,) = call(op("followups_due"), "FollowupsDueOut").items
        assert item.text == "How did the exam go?"
        assert call(op("followup_ack"), "FollowupAckOut", followup_id=item.id,
                    body=models.FollowupAckIn.from_dict({"sent": True})).state == "sent"
    assert called == set(ops), set(ops) - called
    assert len(called) >= 13
