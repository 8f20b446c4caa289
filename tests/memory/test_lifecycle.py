"""The lifecycle rules of the core on real stores: restating, latest-wins with
history, conflicts, stale evidence, forget that leaves no text in SQL, chat log,
index or audit, tombstones, forget_subject, and the audit trail."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text as sql

from memory.admin import Authority, forget_subject
from memory.capture import capture
from memory.errors import NotFoundError
from memory.store import ChatLine
from memory.text import tokens
from memory.types import Category, ChatKind, ChatRef, Namespace

DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
SECRET = "我的秘密暗号是紫罗兰蝴蝶 zxqvplatypus"
SECRET_V2 = "我的秘密暗号改成了向日葵蜻蜓 wombatquokka"


def ago(**kw) -> datetime:
    return datetime.now(timezone.utc) - timedelta(**kw)


def sql_text_hits(core, needles: list[str]) -> list[str]:
    """Every (table.column) of every table whose values contain one of ``needles``."""
    found = []
    insp = sa_inspect(core.store.engine)
    with core.store.engine.connect() as conn:
        for table in insp.get_table_names(schema=core.store.schema):
            for col in insp.get_columns(table, schema=core.store.schema):
                for (value,) in conn.execute(sql(f'SELECT "{col["name"]}" FROM "{table}"')):
                    if isinstance(value, str) and any(n in value for n in needles):
                        found.append(f"{table}.{col['name']}")
    return found


def file_hits(root: Path, needles: list[str]) -> list[str]:
    """Files under ``root`` whose raw bytes contain one of ``needles`` (UTF-8)."""
    raw = [n.encode() for n in needles]
    return [str(p) for p in root.rglob("*") if p.is_file() and any(n in p.read_bytes() for n in raw)]


def test_restating_keeps_and_update_keeps_history(core, namespace):
    """Restating never deletes; an update closes the old version's validity and
    keeps the id at version + 1; history lists every version, live last."""
    m = core.add(namespace, core.new(namespace, "我住在北京", key="home.city"), said_at=ago(days=3)).memory
    assert core.add(namespace, core.new(namespace, "我住在北京", key="home.city"), said_at=ago(days=2)).action == "deduped"
    r = core.add(namespace, core.new(namespace, "我搬到上海了", key="home.city"), said_at=ago(days=1))
    live = core.update(namespace, m.id, "我搬到杭州了")
    assert r.action == "superseded" and live.id == m.id and live.version == 3
    versions = core.history(namespace, m.id)
    assert [(v.version, v.text) for v in versions] == [(1, "我住在北京"), (2, "我搬到上海了"), (3, "我搬到杭州了")]
    assert versions[0].valid_to == versions[1].valid_from and versions[1].valid_to == versions[2].valid_from
    assert versions[-1].valid_to is None and core.store.count(namespace) == 1


def test_same_key_other_category_is_a_recorded_conflict(core, namespace):
    """A slot claimed by another category is recorded as a conflict (audited, no
    text), and nothing is silently stored or overwritten."""
    m = core.add(namespace, core.new(namespace, "我最爱喝美式", key="drink.favorite",
                                     category=Category.PREFERENCE)).memory
    r = core.add(namespace, core.new(namespace, "我每天早上都喝拿铁", key="drink.favorite",
                                     category=Category.ROUTINE))
    assert r.action == "conflict" and r.memory.id == m.id and r.reason == "category"
    assert core.get(namespace, m.id).text == "我最爱喝美式" and core.store.count(namespace) == 1
    rec = core.store.audit_records(namespace)[0]
    assert rec["action"] == "conflict" and rec["memory_id"] == m.id
    assert rec["detail"] == {"category": "routine", "existing_category": "preference"}


def test_older_evidence_never_overrides_newer(core, namespace):
    """A replayed old statement does not supersede a newer one (rejected as stale);
    restating the current one is still a dedupe."""
    m = core.add(namespace, core.new(namespace, "我的猫叫煤球", key="pet.cat.name"), said_at=ago(days=5)).memory
    core.add(namespace, core.new(namespace, "我的猫叫雪球", key="pet.cat.name"), said_at=ago(days=1))
    old = core.add(namespace, core.new(namespace, "我的猫叫煤球", key="pet.cat.name"), said_at=ago(days=5))
    assert (old.action, old.reason) == ("rejected", "stale")
    assert core.get(namespace, m.id).text == "我的猫叫雪球" and len(core.history(namespace, m.id)) == 2


def test_forget_leaves_no_text_in_sql_chat_log_index_or_audit(sqlite_core, namespace, tmp_path):
    """After a forget, no table, no byte of the SQLite files (db and WAL), no LanceDB
    row and no file under the index holds the text of any version."""
    core = sqlite_core
    t0 = ago(days=2)
    core.store.append_chat("default", DM, ChatLine("user", "1001", SECRET, t0, "m1"))
    core.store.append_chat("default", DM, ChatLine("user", "1001", SECRET_V2, t0 + timedelta(hours=1), "m2"))
    core.store.append_chat("default", DM, ChatLine("user", "1001", "我叫阿杰", t0 + timedelta(hours=2), "m3"))
    m = core.add(namespace, core.new(namespace, SECRET, key="secret.code", origin=DM, source_message_id="m1"),
                 said_at=t0, evidence=SECRET).memory
    core.add(namespace, core.new(namespace, SECRET_V2, key="secret.code", origin=DM, source_message_id="m2"),
             said_at=t0 + timedelta(hours=1), evidence=SECRET_V2)
    keep = core.add(namespace, core.new(namespace, "我叫阿杰", key="profile.name", origin=DM, source_message_id="m3"),
                    said_at=t0).memory
    core.index.optimize()  # the secret is now also in the FTS index and a compacted fragment
    needles = [SECRET, SECRET_V2, "zxqvplatypus", "wombatquokka", "紫罗兰", "向日葵", "秘密暗号"]
    db = Path(core.store.engine.url.database)
    assert file_hits(tmp_path / "index", ["zxqvplatypus"]) and file_hits(db.parent, ["zxqvplatypus"])  # the scans see it

    core.forget(namespace, m.id)

    assert sql_text_hits(core, needles) == []
    assert file_hits(db.parent, needles) == [], "SQLite db/WAL bytes keep forgotten text"
    assert file_hits(tmp_path / "index", needles) == []
    rows = core.index._table.to_arrow().to_pylist()
    assert {r["id"] for r in rows} == {keep.id}
    assert not any(t in r["tokens"] for r in rows for t in tokens(SECRET) + tokens(SECRET_V2) if len(t) > 1)
    assert [line.text for line in core.store.chat_tail("default", DM)] == ["我叫阿杰"]
    recs = core.store.audit_records(namespace)
    assert recs[0]["action"] == "forget" and recs[0]["memory_id"] == m.id
    assert not any(n in repr(recs) for n in needles)
    with pytest.raises(NotFoundError):
        core.history(namespace, m.id)
    # the forgotten memory is not recalled; the one left is unrelated to the query, so nothing is (issue 11)
    assert core.recall(namespace, ["秘密暗号 紫罗兰"]) == []
    assert [h.memory.id for h in core.recall(namespace, ["阿杰"])] == [keep.id]


def test_forget_on_every_backend_removes_text_from_all_tables(core, namespace):
    """On SQLite and PostgreSQL alike no table keeps the forgotten text (history,
    chat log and audit included)."""
    t0 = ago(days=1)
    core.store.append_chat("default", DM, ChatLine("user", "1001", SECRET, t0, "m1"))
    r = capture(core, namespace, SECRET, chat=DM, said_at=t0, message_id="m1")
    core.update(namespace, r[0].memory.id, SECRET_V2)
    core.forget(namespace, r[0].memory.id)
    assert sql_text_hits(core, [SECRET, SECRET_V2, "zxqvplatypus", "wombatquokka"]) == []
    assert core.index.ids(namespace) == set()


def test_purge_removes_rows_from_fragments_with_few_deletions(sqlite_core, namespace, tmp_path):
    """Lance keeps a deleted row inside a fragment with under 10 % deletions; the
    forget's purge still rewrites it, so the text leaves the files."""
    core = sqlite_core
    with core.batch():  # one index write for the 31 (optimize below makes one fragment of them either way)
        for i in range(30):
            core.add(namespace, core.new(namespace, f"filler fact number {i} aardvark{i}"))
        m = core.add(namespace, core.new(namespace, SECRET)).memory
    core.index.optimize()  # one fragment of 31 rows: one deletion is ~3 %
    core.forget(namespace, m.id)
    assert file_hits(tmp_path / "index", ["zxqvplatypus"]) == []
    assert len(core.index.ids(namespace)) == 30


def test_tombstones_refuse_old_evidence_and_move_forward(core, namespace):
    """Every version's text and the evidence it came from are tombstoned: old
    messages are refused, the same words said later are a new memory, and a second
    forget refuses what was said between the two forgets."""
    t0 = ago(days=10)
    m = core.add(namespace, core.new(namespace, "我怕黑（引述）", key="fear.dark"), said_at=t0,
                 evidence="原话：我怕黑").memory
    core.add(namespace, core.new(namespace, "我很怕黑", key="fear.dark"), said_at=t0 + timedelta(days=1))
    core.forget(namespace, m.id, purge=False)
    for text, evidence in [("我怕黑（引述）", None), ("我很怕黑", None), ("改写过的说法", "原话：我怕黑")]:
        r = core.add(namespace, core.new(namespace, text), said_at=t0 + timedelta(days=2), evidence=evidence)
        assert (r.action, r.reason) == ("rejected", "tombstone"), text
    again = core.add(namespace, core.new(namespace, "我很怕黑"), said_at=datetime.now(timezone.utc))
    assert again.action == "stored"
    between = datetime.now(timezone.utc)
    core.forget(namespace, again.memory.id, purge=False)
    r = core.add(namespace, core.new(namespace, "我很怕黑"), said_at=between)
    assert r.action == "rejected"
    assert core.maintain() == 0 and core.store.pending_ops() == []  # the queued purges ran


def test_forget_subject_removes_everything_of_one_person(core):
    """forget_subject forgets every memory of the person and their chat lines;
    another person in the same group keeps theirs; replays are refused."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    group = ChatRef("tg", ChatKind.GROUP, "-100300")
    t0 = ago(days=1)
    for ns, uid, words in [(a, "1", "我喜欢猫。我叫阿杰。"), (b, "2", "我喜欢狗")]:
        core.store.append_chat("default", group, ChatLine("user", uid, words, t0, f"g{uid}"))
        capture(core, ns, words, chat=group, said_at=t0, message_id=f"g{uid}")
    assert forget_subject(core, a, Authority("admin:test", "default")).memories == 2
    assert core.store.count(a) == 0 and core.store.count(b) == 1
    assert [line.sender_id for line in core.store.chat_tail("default", group)] == ["2"]
    assert capture(core, a, "我喜欢猫。我叫阿杰。", chat=group, said_at=t0, message_id="g1")[0].action == "rejected"
    with pytest.raises(PermissionError):
        forget_subject(core, b, Authority("admin:other", "other"))


def test_audit_failure_is_logged_loudly_and_counted(sqlite_core, namespace, caplog):
    """When the audit table is gone the write still stands, an ERROR is logged and
    the failure is counted."""
    core = sqlite_core
    with core.store.engine.begin() as conn:
        conn.execute(sql("DROP TABLE audit_log"))
    with caplog.at_level(logging.ERROR, logger="memory.audit"):
        r = core.add(namespace, core.new(namespace, "我叫阿杰"))
    assert r.action == "stored" and core.get(namespace, r.memory.id).text == "我叫阿杰"
    assert core.audit_failures == 1
    assert any("AUDIT FAILED" in rec.message and str(namespace) in rec.message for rec in caplog.records)


def test_a_new_memory_and_its_audit_record_commit_together(sqlite_core, namespace):
    """A stored memory's ``store`` record is written in the insert's own transaction: one commit per add
    (the index write at the end of a batch aside), zh and en, each record naming its memory and category."""
    from sqlalchemy import event

    core = sqlite_core
    core.add(namespace, core.new(namespace, "warm-up"))  # the pool's connection exists before counting
    commits = []

    def trace(sql_text: str) -> None:
        if sql_text.lstrip().upper().startswith("COMMIT"):
            commits.append(sql_text)

    def hook(dbapi_conn, _record, _proxy) -> None:
        dbapi_conn.set_trace_callback(trace)

    event.listen(core.store.engine, "checkout", hook)
    try:
        with core.batch():  # the index write after the adds left out of the count
            zh = core.add(namespace, core.new(namespace, "我养了一只叫煤球的猫", category=Category.RELATIONSHIP))
            en = core.add(namespace, core.new(namespace, "I work as a nurse in Leeds", category=Category.PROFILE))
            adds = len(commits)
    finally:
        event.remove(core.store.engine, "checkout", hook)
    assert zh.action == en.action == "stored" and adds == 2
    recs = {r["memory_id"]: r for r in core.store.audit_records(namespace) if r["action"] == "store"}
    assert recs[zh.memory.id]["detail"] == {"category": "relationship"}
    assert recs[en.memory.id]["detail"] == {"category": "profile"}


def test_audit_details_cannot_carry_text(sqlite_core, namespace):
    """The audit API refuses free-text details and unknown actions."""
    with pytest.raises(ValueError):
        sqlite_core.audit.record(namespace, "forget", "admin", "abc", text="我的秘密")
    with pytest.raises(ValueError):
        sqlite_core.audit.record(namespace, "shred", "admin", "abc")
    assert sqlite_core.audit.record(namespace, "forget", "admin", "abc", versions=2)
