"""``python -m bench imports``: each importer's round trip (``gateway.importers``).

The 288 chat lines of ``tests/data/capture_set.jsonl`` (zh and en, every speech
act) are written out in each source's own format, one person's, a minute apart
from 2026-10-01 20:00 Shanghai — as the person's lines of a SillyTavern chat (each
after a line of the character's), and as memories of a mem0 ``get_all`` export, a
LivingMemory export and MaiBot's ``person_info.points``
(the memories being the lines' texts) — and imported into a fresh store with the
offline extractor. Per importer:

- ``kept``: of the memories the source holds about the person, how many came out
  of huiyi's export (``gateway.commands.export_document``) with their text and
  time (``created_at`` equal to the source's) — for the chat (messages): of what
  live capture (``memory.capture.capture``) keeps from the same lines said at the
  same times, in a namespace of its own — the round trip;
- ``again``: memories a second run of the same file stored (0 is idempotent);
- ``back``: of 20 imported memories then forgotten, how many a third run, and a
  run of the same lines under other source ids (only the tombstones stand in the
  way), brought back (0: nothing forgotten comes back);
- ``jsonl``: the person's export written as ``kind: memory`` JSONL lines and
  imported into another person: texts and times equal.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINES = ROOT / "tests" / "data" / "capture_set.jsonl"
TZ = "Asia/Shanghai"
START = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)  # 20:00 in Shanghai


def _lines() -> list[str]:
    return [json.loads(row)["text"] for row in LINES.read_text(encoding="utf-8").splitlines() if row.strip()]


def _files(lines: list[str], work: Path) -> dict[str, Path]:
    """The lines in each source's format under ``work``."""
    at = [START + timedelta(minutes=i) for i in range(len(lines))]
    out = {}
    st = [json.dumps({"user_name": "P", "character_name": "Mochi", "create_date": "2026-10-01@20h00m00s",
                      "chat_metadata": {}})]
    for text, when in zip(lines, at):
        local = when.astimezone(timezone(timedelta(hours=8)))
        st.append(json.dumps({"name": "Mochi", "is_user": False, "is_system": False, "mes": "嗯嗯，然后呢？",
                              "send_date": local.strftime("%B %d, %Y %I:%M%p").lower().capitalize()},
                             ensure_ascii=False))
        st.append(json.dumps({"name": "P", "is_user": True, "is_system": False, "mes": text,
                              "send_date": int(when.timestamp() * 1000)}, ensure_ascii=False))
    out["sillytavern"] = work / "chat.jsonl"
    out["sillytavern"].write_text("\n".join(st) + "\n", encoding="utf-8")
    out["mem0"] = work / "mem0.json"
    out["mem0"].write_text(json.dumps({"results": [
        {"id": f"m{i}", "memory": t, "user_id": "p", "created_at": w.isoformat()} for i, (t, w) in
        enumerate(zip(lines, at))]}, ensure_ascii=False), encoding="utf-8")
    out["livingmemory"] = work / "livingmemory.json"
    out["livingmemory"].write_text(json.dumps({"format": "livingmemory", "memories": [
        {"original_id": i, "content": t, "session_id": "p", "metadata": {"create_time": w.timestamp()}}
        for i, (t, w) in enumerate(zip(lines, at))]}, ensure_ascii=False), encoding="utf-8")
    out["maibot"] = work / "MaiBot.db"
    with sqlite3.connect(out["maibot"]) as db:
        db.execute("CREATE TABLE person_info (id INTEGER PRIMARY KEY, platform TEXT, user_id TEXT, nickname TEXT, "
                   "points TEXT, forgotten_points TEXT)")
        points = [[t, 5.0, w.astimezone(timezone(timedelta(hours=8))).strftime("%Y-%m-%d %H:%M:%S")]
                  for t, w in zip(lines, at)]
        db.execute("INSERT INTO person_info VALUES (1, 'p', 'x', 'P', ?, NULL)",
                   (json.dumps(points, ensure_ascii=False),))
    db.close()
    return out


def run(verbose: bool = False) -> int:
    """Print the round-trip table (``verbose``: what was not kept, on stderr); 0."""
    from gateway.commands import export_document
    from gateway.config import load_settings
    from gateway.importers import Record, import_records, read_records
    from gateway.service import build_core
    from memory.capture import capture
    from memory.types import ChatKind, ChatRef, Namespace

    lines = _lines()
    work = Path(tempfile.mkdtemp(prefix="huiyi-imports-"))
    try:
        files = _files(lines, work)
        core = build_core(load_settings(data_dir=work / "data"))
        if hasattr(core, "wait_index"):
            core.wait_index(120)
        # what live capture keeps from the same lines at the same times: the inferred importer's target
        live_ns = Namespace("bench", "tg:live")
        chat = ChatRef("tg", ChatKind.PRIVATE, "live")
        for i, text in enumerate(lines):
            capture(core, live_ns, text, chat=chat, said_at=START + timedelta(minutes=i), tz=TZ, addressed=True)
        expected_inferred = {(m["text"], datetime.fromisoformat(m["created_at"])) for m in
                             export_document(core, live_ns, None, datetime.now(timezone.utc))["memories"]}
        print(f"importers' round trip: {len(lines)} lines of {LINES.relative_to(ROOT)}, one person, a minute apart")
        print("| importer | records | imported | kept (text and time) | again | back | s |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for n, (source, path) in enumerate(files.items()):
            subject = f"tg:{n + 1}"
            ns = Namespace("bench", subject)
            t0 = time.perf_counter()
            records = read_records(source, path, TZ)
            who = {"person": subject} if source == "sillytavern" else {"mapping": {"p": subject, "p:x": subject}}
            first = import_records(core, "bench", records, source=source, tz=TZ, **who)
            took = time.perf_counter() - t0
            doc = export_document(core, ns, None, datetime.now(timezone.utc))
            got = {(m["text"], datetime.fromisoformat(m["created_at"])) for m in doc["memories"]}
            if source == "sillytavern":
                want = expected_inferred
            else:
                want = {(" ".join(t.split()), START + timedelta(minutes=i)) for i, t in enumerate(lines)}
            kept = len(want & got)
            if verbose:
                for text, when in sorted(want - got, key=lambda x: x[1])[:40]:
                    print(f"    not kept [{source}] {when:%m-%d %H:%M} {text[:60]!r}", file=sys.stderr)
            again = import_records(core, "bench", records, source=source, tz=TZ, **who).memories
            live = core.list(ns, limit=20)
            for m in live:
                core.forget(ns, m.id, actor="bench")
            gone = {m.text for m in live}
            import_records(core, "bench", records, source=source, tz=TZ, **who)
            # the same lines under other ids (another export of them): only the tombstones stand in the way
            copies = [replace(r, source_id=f"copy:{r.source_id}") if isinstance(r, Record) else r for r in records]
            import_records(core, "bench", copies, source=source, tz=TZ, **who)
            back = len(gone & {m.text for m in core.list(ns, limit=1000)})
            print(f"| {source} | {len(want)} | {first.imported} ({first.memories} memories) | {kept}/{len(want)} | "
                  f"{again} | {back} of {len(live)} | {took:.1f} |")
            if source == "sillytavern":
                jsonl = work / "export.jsonl"
                jsonl.write_text("\n".join(json.dumps({"kind": "memory", "text": m["text"], "at": m["created_at"],
                                                       "id": m["id"]}, ensure_ascii=False)
                                           for m in doc["memories"]) + "\n", encoding="utf-8")
                jns = Namespace("bench", "tg:99")
                import_records(core, "bench", read_records("jsonl", jsonl, TZ), source="jsonl", person="tg:99", tz=TZ)
                back_doc = export_document(core, jns, None, datetime.now(timezone.utc))
                got_j = {(m["text"], m["created_at"]) for m in back_doc["memories"]}
                sent = {(m["text"], m["created_at"]) for m in doc["memories"]}
                print(f"| jsonl (huiyi's export of the SillyTavern person, as memories) | {len(sent)} | "
                      f"{len(got_j)} | {len(sent & got_j)}/{len(sent)} | | | |")
        core.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
