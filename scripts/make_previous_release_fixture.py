"""Make tests/data/previous_release/: a database written by the release before
Alembic (commit 5cf7836, the last ``memory/store.py`` before the store package),
dumped as SQL for SQLite and for PostgreSQL.

Run once from the repository root (needs git, sqlite3 from Python, pg_dump and a
PostgreSQL at 127.0.0.1:5432, db ``test``, trust auth)::

    python scripts/make_previous_release_fixture.py

It exports commit 5cf7836 into a temporary folder (``git archive``), and runs a
snippet under that tree's own code (``PYTHONPATH`` = the export) that fills one
SQLite file and one PostgreSQL schema through the old ``Store`` API: memories in
Chinese, English, traditional characters and emoji, a superseded version
(history), a forget (tombstone), deliveries, chat-log lines (one capture still
queued), a redaction, index-outbox rows, audit records, an identity link, a
last-recall trace and a pending confirmation. The SQLite file is dumped with
``sqlite3.Connection.iterdump``; the schema with ``pg_dump --inserts`` (its
``\\restrict`` lines and ownership dropped, the schema name replaced by the
placeholder ``__SCHEMA__``, which the tests fill in). The committed SQL files are
what the upgrade tests load; this script only documents how they were made.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

COMMIT = "5cf7836"
PG_URL = "postgresql://root@127.0.0.1:5432/test"
PG_SCHEMA = "huiyi_previous_release"
OUT = Path("tests/data/previous_release")

FILL = r'''
import sys
from datetime import datetime, timedelta, timezone

from memory.explain import RecallTrace, TraceEntry
from memory.store import ChatLine, Store
from memory.types import Category, ChatKind, ChatRef, Memory, Namespace, Visibility

url, schema = sys.argv[1], (sys.argv[2] or None)
store = Store(url, schema=schema)
t0 = datetime(2026, 11, 20, 8, 30, tzinfo=timezone.utc)
zh = Namespace("default", "tg:1001")
en = Namespace("default", "qq:20002")
group = ChatRef("tg", ChatKind.GROUP, "-1009")
dm = ChatRef("tg", ChatKind.PRIVATE, "1001")


def mem(ns, mid, text, key, cat=Category.PREFERENCE, vis=Visibility.PRIVATE, origin=None, at=t0, source=None):
    return Memory(id=mid, namespace=ns, text=text, key=key, category=cat, visibility=vis, origin=origin,
                  created_at=at, updated_at=at, valid_from=at, source_message_id=source or "m-" + mid)


store.add(zh, mem(zh, "a1b2c3d4e5f6", "我养了一只叫煤球的猫🐈", "pet:cat", Category.PROFILE, origin=dm))
store.add(zh, mem(zh, "0123456789ab", "我喜歡喝美式咖啡，不加糖。", "drink", origin=dm))
store.add(zh, mem(zh, "feedfacecafe", "下周三要去杭州出差（出差！）", "event:trip", Category.EVENT,
                  Visibility.GROUP, origin=group))
store.add(en, mem(en, "c0ffee000001", "I run 5 km every morning 🏃", "habit:run", Category.ROUTINE))
store.add(en, mem(en, "deadbeef0002", "My sister's name is Lin 林", "family:sister", Category.RELATIONSHIP))
store.supersede(zh, "0123456789ab", mem(zh, "0123456789ab", "我現在改喝拿铁了", "drink"),
                at=t0 + timedelta(days=2), source_fp="fp-latte")
store.add(en, mem(en, "0badc0de0003", "I hate cilantro", "dislike:cilantro"))
store.delete(en, "0badc0de0003", tombstones=["fp-cilantro"])
store.touch(zh, ["a1b2c3d4e5f6"], at=t0 + timedelta(days=3))

for n, (who, text) in enumerate([("1001", "你还记得我的猫吗？"), ("bot", "当然记得，煤球！"),
                                 ("1001", "Mixed 中英 text with emoji 😀 and ！？")]):
    store.append_chat("default", dm, ChatLine("user" if who != "bot" else "bot", who, text,
                                              t0 + timedelta(minutes=n), f"dm-{n}", "小明" if who != "bot" else "小桃"),
                      claim=f"default|tg|{dm.key}|dm-{n}" if who != "bot" else None)
store.append_chat("default", group, ChatLine("user", "1001", "明天见 see you", t0 + timedelta(hours=1), "g-1", "小明"),
                  capture=zh, claim=f"default|tg|{group.key}|g-1")
store.append_chat("default", group, ChatLine("user", "1001", "这句后来撤回了", t0 + timedelta(hours=2), "g-2", "小明"))
store.add(zh, mem(zh, "5ec0e7000004", "我讨厌下雨天", "dislike:rain", vis=Visibility.GROUP, origin=group, source="g-2"))
store.delete(zh, "5ec0e7000004", tombstones=["fp-rain"], redact_sources=True)  # a chat_redactions row
store.claim_delivery("fp|default|tg|" + group.key + "|0f0f0f")
store.audit(zh, "link", "admin:tg:1", memory_id=None, note="迁移前 before migration")
store.link_identities("default", ["tg:1001", "qq:10001"], "person:xiaoming", "admin:tg:1")
store.save_last_recall(RecallTrace(zh, dm.key, t0 + timedelta(minutes=2), 1, "",
                                   (TraceEntry("a1b2c3d4e5f6", 1, 0.91, {"bm25": 1}),)))
store.put_pending(en, "forget-all|qq:20002", t0 + timedelta(days=4))
store.close()
'''


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", "--format=tar", COMMIT], check=True, capture_output=True).stdout
        tar = Path(tmp) / "tree.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as tf:
            tf.extractall(tree, filter="data")
        db = Path(tmp) / "previous.db"
        env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", FILL, f"sqlite:///{db}", ""], check=True, env=env, cwd=tmp)
        subprocess.run(["psql", PG_URL, "-qc", f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE'], check=True)
        subprocess.run([sys.executable, "-c", FILL, PG_URL, PG_SCHEMA], check=True, env=env, cwd=tmp)
        with sqlite3.connect(db) as con:
            lines = [line for line in con.iterdump() if not line.startswith(("BEGIN", "COMMIT"))]
        head = f"-- huiyi database written by commit {COMMIT} (pre-Alembic); made by scripts/make_previous_release_fixture.py\n"
        (OUT / "sqlite.sql").write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
        dump = subprocess.run(["pg_dump", "--inserts", "--no-owner", "--no-privileges", "--no-comments",
                               f"--schema={PG_SCHEMA}", PG_URL], check=True, capture_output=True, text=True).stdout
        kept = [line for line in dump.splitlines() if not line.startswith("\\")
                and not line.startswith(("CREATE SCHEMA", "SET ", "SELECT pg_catalog.set_config"))]
        sql = re.sub(rf'\b{PG_SCHEMA}\b', "__SCHEMA__", "\n".join(kept))
        (OUT / "postgresql.sql").write_text(head + sql + "\n", encoding="utf-8")
        subprocess.run(["psql", PG_URL, "-qc", f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE'], check=True)
    print(f"wrote {OUT}/sqlite.sql and {OUT}/postgresql.sql")
    return 0


if __name__ == "__main__":
    sys.exit(main())
