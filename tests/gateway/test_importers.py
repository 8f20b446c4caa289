"""Memories brought over from another bot (SillyTavern, mem0, plain JSONL): mapped
to people explicitly, each with its time, speaker and origin, through the capture
path; a malformed line reported by its number and never half-written; nothing
forgotten comes back; a second run adds nothing."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.importers import (
    EPOCH,
    Problem,
    SourceError,
    import_records,
    mapping_of,
    read_records,
)
from memory.admin import Authority, forget_subject
from memory.types import Namespace

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
TZ = "Asia/Shanghai"


def _records(source: str, name: str):
    return read_records(source, DATA / name, TZ)


def _texts(core, subject: str) -> dict[str, object]:
    return {m.text: m for m in core.list(Namespace("t1", subject), limit=100)}


def test_a_sillytavern_chat_keeps_the_persons_lines_with_their_times(core):
    """The person's lines are captured at their send_date (three date forms, zh, en,
    traditional, emoji) into the one person named; the character's lines, the system
    line and laughter are skipped with their reasons; the malformed line is reported
    by its number and nothing of it is stored; a second run stores nothing."""
    records = _records("sillytavern", "sillytavern_chat.jsonl")
    first = import_records(core, "t1", records, source="sillytavern", person="tg:1001", tz=TZ)
    assert (first.read, first.imported, first.memories) == (9, 4, 4)
    assert first.skipped == {"not_the_person": 2, "system": 1, "malformed": 1, "no_fact": 1}
    assert [(p.line, p.reason) for p in first.problems] == [(8, "malformed")]
    stored = _texts(core, "tg:1001")
    assert set(stored) == {"我养了一只叫煤球的黑猫", "I work as a nurse at the city hospital", "我对花生过敏😣",
                           "我最喜歡喝烏龍茶"}
    assert not any("面试" in t for t in stored)  # the malformed line: nothing half-written
    cat = stored["我养了一只叫煤球的黑猫"]
    assert cat.created_at == datetime(2026, 11, 28, 12, 16, tzinfo=timezone.utc)  # 8:16pm in Shanghai
    assert stored["我对花生过敏😣"].created_at == datetime(2026, 11, 29, 1, 2, 11, tzinfo=timezone.utc)
    assert cat.origin is not None and cat.origin.key == "import:private:sillytavern"
    assert cat.metadata == {"imported_from": "sillytavern", "source_id": "line:3", "speaker": "阿杰"}
    again = import_records(core, "t1", records, source="sillytavern", person="tg:1001", tz=TZ)
    assert (again.imported, again.memories, again.skipped["already"]) == (0, 0, 5)  # the laughter line too
    assert len(_texts(core, "tg:1001")) == 4


def test_a_mem0_export_is_stored_verbatim_for_the_mapped_people_only(core):
    """Each mem0 memory goes, word for word and at its created_at, to the subject its
    user_id maps to; a user without a mapping is skipped (never guessed), an entry
    without a memory is reported by its number."""
    records = _records("mem0", "mem0_get_all.json")
    summary = import_records(core, "t1", records, source="mem0", mapping={"alex": "tg:2001", "xiaomei": "qq:3001"},
                             tz=TZ)
    assert (summary.imported, summary.memories) == (5, 5)
    assert summary.skipped == {"unmapped": 1, "malformed": 1}
    assert [(p.line, p.reason) for p in summary.problems] == [(7, "malformed")]
    alex, mei = _texts(core, "tg:2001"), _texts(core, "qq:3001")
    assert set(alex) == {"Name is Alex", "Is allergic to peanuts", "Plans to visit Kyoto next spring"}
    assert set(mei) == {"喜欢在周末去爬山", "女儿今年六岁，叫朵朵"}
    assert alex["Name is Alex"].created_at == datetime(2026, 10, 2, 16, 15, 0, 123456, tzinfo=timezone.utc)
    assert mei["喜欢在周末去爬山"].event_time is None  # a habit, no weekend of its own
    assert "Likes jazz" not in {t for s in ("tg:2001", "qq:3001") for t in _texts(core, s)}
    assert import_records(core, "t1", records, source="mem0", mapping={"alex": "tg:2001", "xiaomei": "qq:3001"},
                          tz=TZ).memories == 0


def test_nothing_forgotten_comes_back(core, tmp_path):
    """A memory forgotten after an import does not come back on the next run (its
    record was imported once), nor from another file that holds its text said
    before the forget — timed or untimed (evidence from the epoch): the tombstone
    refuses it; after a person is forgotten whole nothing of the file comes back."""
    records = _records("jsonl", "plain.jsonl")
    mapping = {"u42": "tg:4001"}
    import_records(core, "t1", records, source="jsonl", mapping=mapping, tz=TZ)
    ns = Namespace("t1", "tg:4001")
    stored = _texts(core, "tg:4001")
    assert "我住在成都" in stored and "最怕打雷" in stored
    core.forget(ns, stored["我住在成都"].id, actor="admin")
    core.forget(ns, stored["最怕打雷"].id, actor="admin")  # its record has no time
    again = import_records(core, "t1", records, source="jsonl", mapping=mapping, tz=TZ)
    assert again.memories == 0 and again.skipped["already"] == 4
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "x1", "subject": "u42", "kind": "memory", "text": "我住在成都", "at": "2026-09-20T09:00:00Z"}\n'
                     '{"id": "x2", "subject": "u42", "kind": "memory", "text": "最怕打雷"}\n', encoding="utf-8")
    refused = import_records(core, "t1", read_records("jsonl", other, TZ), source="jsonl", mapping=mapping, tz=TZ)
    assert refused.skipped == {"forgotten": 2} and refused.memories == 0
    assert "我住在成都" not in _texts(core, "tg:4001") and "最怕打雷" not in _texts(core, "tg:4001")
    forget_subject(core, ns, Authority(actor="admin:test", tenant="t1"))
    later = tmp_path / "later.jsonl"  # new lines, said before the person was forgotten
    later.write_text('{"id": "y1", "subject": "u42", "kind": "memory", "text": "I love the sea", '
                     '"at": "2026-09-25T09:00:00Z"}\n', encoding="utf-8")
    third = import_records(core, "t1", read_records("jsonl", later, TZ), source="jsonl", mapping=mapping, tz=TZ)
    assert third.memories == 0 and third.skipped == {"forgotten": 1} and _texts(core, "tg:4001") == {}
    fresh = import_records(core, "t1", records, source="jsonl", mapping={"u42": "tg:4003"}, tz=TZ)
    assert fresh.memories == 4  # the same file for another person: claims of its own


def test_plain_jsonl_reports_each_malformed_line_by_number(core):
    """An unreadable time, a line that is no object and an unknown kind are each
    reported with their line number; the assistant's line and a blank text are
    skipped; memories are kept verbatim, messages read for facts (with the date
    they name: 「上个月」 of the message's own time)."""
    summary = import_records(core, "t1", _records("jsonl", "plain.jsonl"), source="jsonl", person="tg:4002", tz=TZ)
    assert [(p.line, p.reason) for p in summary.problems] == [(6, "malformed"), (7, "malformed"), (8, "malformed")]
    assert summary.skipped["not_the_person"] == 1 and summary.skipped["empty"] == 1
    stored = _texts(core, "tg:4002")
    assert "I play the ukulele on weekends" in stored
    job = next(m for t, m in stored.items() if "书店" in t)
    assert "2026-08" in job.text and job.created_at == datetime(2026, 9, 3, 12, 0, tzinfo=timezone.utc)
    assert not any("golden retriever" in t for t in stored)


def test_a_mapping_file_and_bad_input_are_read_or_refused_whole(tmp_path):
    """A mapping is a JSON object or id=subject / id<TAB>subject lines; a subject
    outside its pattern, a file that is not UTF-8 or a mem0 file that is no JSON is
    refused before anything is written."""
    assert mapping_of(b'{"alex": "tg:2001"}') == {"alex": "tg:2001"}
    assert mapping_of(b"# people\nalex=tg:2001\nxiaomei\tqq:3001\n") == {"alex": "tg:2001",
                                                                                  "xiaomei": "qq:3001"}
    for bad in (b'{"alex": "Alex"}', b"alex tg:2001", b"\xff\xfe"):
        with pytest.raises(SourceError):
            mapping_of(bad)
    for data in (b"{not json", "一\n".encode("gbk")):
        bad = tmp_path / "bad.json"
        bad.write_bytes(data)
        with pytest.raises(SourceError):
            read_records("mem0", bad, TZ)
    with pytest.raises(SourceError):
        read_records("livejournal", bad, TZ)
    with pytest.raises(SourceError):
        read_records("maibot", bad, TZ)  # no SQLite database
    assert EPOCH.year == 1970


@pytest.mark.parametrize("lang, summary_word", [("en", "Imported 5 memories"), ("zh_CN", "导入了 5 条记忆")])
def test_the_command_imports_with_a_summary(tmp_path, monkeypatch, lang, summary_word):
    """``huiyi import --from mem0 FILE --map MAP`` prints the summary in the operator's
    language and each malformed line's number; without a person it exits 2."""
    from gateway.cli.main import app

    monkeypatch.setenv("LANG", "zh_CN.UTF-8" if lang == "zh_CN" else "en_US.UTF-8")
    mapping = tmp_path / "people.json"
    mapping.write_text(json.dumps({"alex": "tg:2001", "xiaomei": "qq:3001"}), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["import", "--from", "mem0", str(DATA / "mem0_get_all.json"), "--map", str(mapping),
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    assert summary_word in result.output
    assert ("line 7:" if lang == "en" else "第 7 行") in result.output  # the malformed entry's number
    again = runner.invoke(app, ["import", "--from", "mem0", str(DATA / "mem0_get_all.json"), "--map", str(mapping),
                                "--no-progress"])
    assert again.exit_code == 0 and ("already imported" in again.output or "已经导入过" in again.output)
    nobody = runner.invoke(app, ["import", "--from", "mem0", str(DATA / "mem0_get_all.json")])
    assert nobody.exit_code == 2


@pytest.mark.parametrize("lang, said", [("en", "No line was skipped."), ("zh_CN", "没有跳过任何一行。")])
def test_a_file_with_nothing_skipped_says_so_instead_of_an_empty_list(tmp_path, monkeypatch, lang, said):
    """Every line imported: the summary's last line says nothing was skipped, never "Skipped 0 lines:"
    with nothing after its colon."""
    from gateway.cli.main import app

    monkeypatch.setenv("LANG", "zh_CN.UTF-8" if lang == "zh_CN" else "en_US.UTF-8")
    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join((DATA / "plain.jsonl").read_text(encoding="utf-8").splitlines()[:2]) + "\n",
                     encoding="utf-8")
    result = CliRunner().invoke(app, ["import", "--from", "jsonl", str(clean), "--person", "tg:4002", "--no-progress"])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last == said and not last.endswith((":", "："))


def test_a_livingmemory_export_keeps_content_times_and_leaves_deleted_ones_out(core):
    """LivingMemory entries are stored verbatim at metadata.create_time for the mapped
    session; an entry deleted in the source stays out (forgotten), one holding only
    its source messages is read from the person's lines (not the assistant's), a
    content that is no text is reported by its number, another session is unmapped."""
    mapping = {"aiocqhttp:FriendMessage:10086": "qq:10086"}
    summary = import_records(core, "t1", _records("livingmemory", "livingmemory_export.json"), source="livingmemory",
                             mapping=mapping, tz=TZ)
    assert summary.skipped == {"forgotten": 1, "malformed": 1, "unmapped": 1}
    assert [(p.line, p.reason) for p in summary.problems] == [(5, "malformed")]
    stored = _texts(core, "qq:10086")
    assert "用户说他在杭州读研究生，专业是计算机" in stored and "The user is learning to bake sourdough bread" in stored
    assert stored["The user is learning to bake sourdough bread"].created_at == datetime(2025, 11, 8, 8, 0,
                                                                                          tzinfo=timezone.utc)
    assert not any("前任" in t for t in stored) and not any("火锅" in t for t in stored)
    trip = next(m for t, m in stored.items() if "成都出差" in t)
    assert trip.metadata["source_id"] == "14#1" and trip.event_time is not None  # 「下个月」 of its own time
    again = import_records(core, "t1", _records("livingmemory", "livingmemory_export.json"), source="livingmemory",
                           mapping=mapping, tz=TZ)
    assert again.memories == 0


def test_maibot_points_come_over_and_its_forgotten_points_do_not(core, tmp_path):
    """MaiBot's person_info points are stored verbatim at their time for the mapped
    person; forgotten_points stay behind; an unreadable time or points that are no
    JSON are reported by the row's number; an empty point is skipped."""
    import sqlite3

    db = tmp_path / "MaiBot.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((DATA / "maibot_person_info.sql").read_text(encoding="utf-8"))
    conn.close()
    mapping = {"qq:20001": "qq:20001", "qq:20002": "qq:20002"}
    summary = import_records(core, "t1", read_records("maibot", db, TZ), source="maibot", mapping=mapping, tz=TZ)
    assert summary.memories == 4
    assert sorted((p.line, p.reason) for p in summary.problems) == [(2, "malformed"), (3, "malformed")]
    lin = _texts(core, "qq:20001")
    assert set(lin) == {"小林养了一只叫豆豆的柯基", "小林最近在准备考研，压力很大", "小林喜欢吃辣"}
    assert lin["小林养了一只叫豆豆的柯基"].created_at == datetime(2026, 10, 1, 13, 30, tzinfo=timezone.utc)
    assert set(_texts(core, "qq:20002")) == {"Sam works night shifts at a bakery"}


def test_long_ids_and_names_fit_the_metadata(sqlite_core, tmp_path):
    """A source id and a speaker's name of 300 Chinese characters are cut to the
    metadata's 200 characters a value, never failing the record."""
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"id": "编" * 300, "speaker": "名" * 300, "kind": "memory", "text": "我喜欢下雨天",
                             "at": "2026-09-01T00:00:00Z"}, ensure_ascii=False) + "\n", encoding="utf-8")
    summary = import_records(sqlite_core, "t1", read_records("jsonl", f, TZ), source="jsonl", person="tg:5001", tz=TZ)
    assert summary.memories == 1 and not summary.problems
    [m] = _texts(sqlite_core, "tg:5001").values()
    assert m.metadata["speaker"] == "名" * 200 and len(m.metadata["source_id"]) == 200


@pytest.mark.parametrize("source, deep", [("jsonl", "[" * 10_000 + "]" * 10_000),
                                          ("mem0", '{"a": ' * 10_000 + "1" + "}" * 10_000)])
def test_json_nested_ten_thousand_deep_is_a_malformed_line_not_a_crash(tmp_path, source, deep):
    """A line (jsonl) or a file (mem0) nesting 10,000 levels is refused as malformed — its line
    reported, the good lines around it read (猫 and "jazz 🎷") — never a RecursionError."""
    path = tmp_path / f"deep.{source}"
    if source == "jsonl":
        good = ['{"id": "a", "kind": "memory", "text": "我养了一只猫"}',
                '{"id": "b", "kind": "memory", "text": "I love jazz 🎷"}']
        path.write_text("\n".join([good[0], deep, good[1]]) + "\n", encoding="utf-8")
        got = read_records(source, path, "Asia/Shanghai")
        assert [(p.line, p.reason) for p in got if isinstance(p, Problem)] == [(2, "malformed")]
        assert [r.text for r in got if not isinstance(r, Problem)] == ["我养了一只猫", "I love jazz 🎷"]
    else:
        path.write_text(deep, encoding="utf-8")
        with pytest.raises(SourceError):
            read_records(source, path, "Asia/Shanghai")


def _png_with(chunks: list[tuple[bytes, bytes]]) -> bytes:
    """A PNG's bytes: the signature, then each (kind, body) chunk with its length and CRC, then IEND."""
    import struct
    import zlib

    out = b"\x89PNG\r\n\x1a\n"
    for kind, body in [(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)), *chunks, (b"IEND", b"")]:
        out += struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return out


@pytest.mark.parametrize("form", ["card", "png", "world_info"])
def test_a_character_cards_lorebook_comes_over_verbatim(core, tmp_path, form):
    """A SillyTavern character card's lorebook — as the card's JSON, inside its PNG (``chara``
    chunk) or as a world info file — is stored verbatim for the person named, {{char}} read as
    the card's name and {{user}} as the user (zh 「用户」); an entry turned off, a blank one and
    one without content are skipped with their reasons; a second run adds nothing."""
    import base64

    card = json.loads((DATA / "sillytavern_card.json").read_text("utf-8"))
    path = tmp_path / f"card.{'png' if form == 'png' else 'json'}"
    if form == "png":
        path.write_bytes(_png_with([(b"tEXt", b"chara\0" + base64.b64encode(json.dumps(card).encode()))]))
    elif form == "world_info":
        entries = {str(e["id"]): {"uid": e["id"], "key": e["keys"], "content": e.get("content"),
                                  "disable": not e["enabled"]} for e in card["data"]["character_book"]["entries"]}
        for e in entries.values():
            if e["content"] is None:
                del e["content"]
        path.write_text(json.dumps({"entries": entries}, ensure_ascii=False), "utf-8")
    else:
        path.write_text(json.dumps(card, ensure_ascii=False), "utf-8")
    records = read_records("sillytavern", path, TZ)
    first = import_records(core, "t1", records, source="sillytavern", person="tg:1001", tz=TZ)
    assert (first.read, first.imported, first.memories) == (6, 3, 3)
    assert first.skipped == {"disabled": 1, "empty": 1, "malformed": 1}
    assert [(p.line, p.reason) for p in first.problems] == [(6, "malformed")]
    stored = _texts(core, "tg:1001")
    char = "小雨" if form != "world_info" else "the character"
    assert set(stored) == {"用户养了一只叫煤球的黑猫", "the user always orders an oat latte with no sugar ☕",
                           f"用户的妹妹在里斯本读书，{char}给她寄过明信片"}
    cat = stored["用户养了一只叫煤球的黑猫"]
    assert cat.metadata["source_id"] == "lorebook:0" and cat.metadata["imported_from"] == "sillytavern"
    again = import_records(core, "t1", read_records("sillytavern", path, TZ), source="sillytavern",
                           person="tg:1001", tz=TZ)
    assert (again.memories, again.skipped["already"]) == (0, 3)


def test_a_png_without_a_card_is_refused_whole(tmp_path):
    """A PNG with no ``chara``/``ccv3`` chunk, or one whose chunk is no base64 JSON, is no source: nothing is read."""
    plain = tmp_path / "plain.png"
    plain.write_bytes(_png_with([(b"tEXt", b"Comment\0hello")]))
    with pytest.raises(SourceError, match="no 'chara'"):
        read_records("sillytavern", plain, TZ)
    broken = tmp_path / "broken.png"
    broken.write_bytes(_png_with([(b"tEXt", b"chara\0" + b"%%%not base64")]))
    with pytest.raises(SourceError):
        read_records("sillytavern", broken, TZ)


_FAR = ('{"text": "我在上海工作", "kind": "memory", "at": 1e30}', '{"text": "x", "at": 1e308}',
        '{"text": "x", "at": 1e400}', '{"text": "x", "at": NaN}', '{"text": "x", "at": -1e20}',
        '{"text": "x", "at": "0001-01-01T00:00:00+14:00"}', '{"text": "x", "at": "9999-12-31T23:59:59-14:00"}')


@pytest.mark.parametrize("source", ["jsonl", "sillytavern", "mem0", "livingmemory", "maibot"])
def test_a_time_out_of_range_is_a_malformed_line_not_a_crash(core, tmp_path, source):
    """A numeric time too large for a timestamp (1e30, 1e308, 1e400 read as infinity, -1e20, NaN)
    or a time with no UTC reading (0001-01-01 at +14:00) is a malformed line with its number —
    never an OverflowError, never a failed write — and the good zh and en lines around it come over."""
    good = [("我养了一只叫煤球的黑猫", "2026-10-01T10:00:00+08:00"), ("I love green tea 🍵", 1790000000)]
    bad = [1e30, 1e400, -1e20, "0001-01-01T00:00:00+14:00"]
    times = [good[0][1], *bad, good[1][1]]
    texts = [good[0][0], "我在上海工作", "I work in Berlin", "我喜歡喝烏龍茶", "Allergic to peanuts", good[1][0]]
    path = tmp_path / f"far.{source}"
    if source == "maibot":
        import sqlite3

        points = json.dumps([[t, 1.0, w] for t, w in zip(texts, times, strict=True)], ensure_ascii=False)
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE person_info (platform TEXT, user_id TEXT, nickname TEXT, points TEXT)")
            conn.execute("INSERT INTO person_info VALUES ('qq', '1', '小林', ?)", (points,))
        conn.close()
    elif source in ("mem0", "livingmemory"):
        key = {"mem0": "created_at", "livingmemory": "create_time"}[source]
        entries = [{"memory": t, key: w} if source == "mem0" else
                   {"content": t, "metadata": {key: w}} for t, w in zip(texts, times, strict=True)]
        doc = {"results": entries} if source == "mem0" else {"memories": entries}
        path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")  # 1e400: Infinity
    else:
        field = "send_date" if source == "sillytavern" else "at"
        rows = [json.dumps({"mes": t, "is_user": True, "name": "阿杰", field: w} if source == "sillytavern" else
                           {"text": t, "kind": "memory", field: w}, ensure_ascii=False).replace("Infinity", "1e400")
                for t, w in zip(texts, times, strict=True)]
        path.write_text("\n".join(rows) + "\n", "utf-8")
    records = read_records(source, path, TZ)
    got = import_records(core, "t1", records, source=source, person="tg:6001", tz=TZ)
    assert got.skipped == {"malformed": 4} and got.memories == 2, got
    lines = [1, 1, 1, 1] if source == "maibot" else [2, 3, 4, 5]
    assert [(p.line, p.reason) for p in got.problems] == [(n, "malformed") for n in lines]
    assert all("range" in p.detail or "time_t" in p.detail or "infinity" in p.detail for p in got.problems)
    assert set(_texts(core, "tg:6001")) == {good[0][0], good[1][0]}


def test_every_far_time_form_is_refused_by_the_one_reader(tmp_path):
    """jsonl lines with 1e30, 1e308, 1e400, NaN, -1e20 and the two times that have no UTC reading:
    each a malformed line (its number), the zh line before them read."""
    path = tmp_path / "far.jsonl"
    path.write_text("\n".join(('{"text": "我在成都", "kind": "memory"}', *_FAR)) + "\n", "utf-8")
    got = read_records("jsonl", path, TZ)
    assert [(p.line, p.reason) for p in got if isinstance(p, Problem)] == [(n, "malformed") for n in range(2, 9)]
    assert [r.text for r in got if not isinstance(r, Problem)] == ["我在成都"]


def _maibot_db(path: Path, script: str) -> bytes:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    conn.close()
    return path.read_bytes()


_VIEW = """CREATE TABLE t (x);
CREATE VIEW person_info AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c)
SELECT n AS rowid, 'qq' AS platform, n AS user_id, 'x' AS nickname, NULL AS points FROM c;"""


def test_a_maibot_file_whose_person_info_is_a_view_is_refused_unread(tmp_path):
    """A 4 KB database whose ``person_info`` is a VIEW over an unbounded recursive CTE (the file
    maker's code) is refused as no MaiBot database, sent as bytes or read from disk; so is a
    ``person_info`` with generated columns; a real fixture still reads."""
    from gateway.importers import records_of

    data = _maibot_db(tmp_path / "view.db", _VIEW)
    assert len(data) <= 8192
    with pytest.raises(SourceError, match="person_info is not a table"):
        records_of("maibot", data, TZ)
    with pytest.raises(SourceError, match="person_info is not a table"):
        read_records("maibot", tmp_path / "view.db", TZ)
    gen = _maibot_db(tmp_path / "gen.db", "CREATE TABLE person_info (platform TEXT, user_id TEXT, nickname TEXT, "
                                          "p TEXT, points TEXT GENERATED ALWAYS AS (upper(p)));")
    with pytest.raises(SourceError, match="generated"):
        records_of("maibot", gen, TZ)
    real = _maibot_db(tmp_path / "real.db", (DATA / "maibot_person_info.sql").read_text("utf-8"))
    texts = [r.text for r in records_of("maibot", real, TZ) if not isinstance(r, Problem)]
    assert "小林喜欢吃辣" in texts and "Sam works night shifts at a bakery" in texts


def test_a_maibot_read_past_its_time_budget_is_aborted(tmp_path):
    """Every query over a MaiBot file is bounded (``set_progress_handler``): with no time left, a
    person_info of 3,000 rows (over the handler's step interval) is refused, not read."""
    from zoneinfo import ZoneInfo

    from gateway.importers import _maibot, _maibot_bytes

    rows = ",".join(f"('qq', '{n}', '小{n}', '[[\"喜欢猫 🐱\", 1.0, \"2026-10-01 10:00:00\"]]')" for n in range(3000))
    data = _maibot_db(tmp_path / "big.db", "CREATE TABLE person_info (platform TEXT, user_id TEXT, nickname TEXT, "
                                          f"points TEXT); INSERT INTO person_info VALUES {rows};")
    with pytest.raises(SourceError, match="took over"):
        list(_maibot(_maibot_bytes(data), ZoneInfo(TZ), 0.0))
    assert len(list(_maibot(_maibot_bytes(data), ZoneInfo(TZ), 60.0))) == 3000


def test_one_person_named_for_a_file_of_several_people_is_refused_whole(core, tmp_path):
    """``person`` names one person's file: a mem0 export of alex and xiaomei, a MaiBot database of
    qq:20001 and qq:20002, jsonl lines of two ``subject``s are each refused (ManyOwners, naming the
    ids), nothing written; a file of one owner id (or none) still goes to the person."""
    from gateway.importers import ManyOwners

    with pytest.raises(ManyOwners, match="alex") as exc:
        import_records(core, "t1", _records("mem0", "mem0_get_all.json"), source="mem0", person="tg:45", tz=TZ)
    assert exc.value.owners[:2] == ["alex", "xiaomei"] or "xiaomei" in exc.value.owners
    _maibot_db(tmp_path / "MaiBot.db", (DATA / "maibot_person_info.sql").read_text("utf-8"))
    with pytest.raises(ManyOwners, match="qq:20001"):
        import_records(core, "t1", read_records("maibot", tmp_path / "MaiBot.db", TZ), source="maibot",
                       person="tg:43", tz=TZ)
    two = tmp_path / "two.jsonl"
    two.write_text('{"subject": "tg:42", "kind": "memory", "text": "我对花生过敏"}\n'
                   '{"subject": "tg:43", "kind": "memory", "text": "I love the sea 🌊"}\n', "utf-8")
    with pytest.raises(ManyOwners, match="tg:42"):
        import_records(core, "t1", read_records("jsonl", two, TZ), source="jsonl", person="tg:44", tz=TZ)
    assert all(_texts(core, s) == {} for s in ("tg:45", "tg:43", "tg:44"))
    one = tmp_path / "one.jsonl"
    one.write_text('{"subject": "tg:42", "kind": "memory", "text": "我对花生过敏"}\n'
                   '{"kind": "memory", "text": "I love the sea 🌊"}\n', "utf-8")
    got = import_records(core, "t1", read_records("jsonl", one, TZ), source="jsonl", person="tg:44", tz=TZ)
    assert got.memories == 2 and set(_texts(core, "tg:44")) == {"我对花生过敏", "I love the sea 🌊"}


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_the_command_refuses_several_peoples_file_for_one_person(tmp_path, monkeypatch, lang):
    """``huiyi import --from mem0 FILE --person tg:45`` of alex's and xiaomei's export exits 2, naming
    the ids and ``--map``, in the operator's language; no person, or both, says which."""
    from gateway.cli.main import app

    monkeypatch.setenv("LANG", "zh_CN.UTF-8" if lang == "zh_CN" else "en_US.UTF-8")
    runner = CliRunner()
    mem0 = str(DATA / "mem0_get_all.json")
    many = runner.invoke(app, ["import", "--from", "mem0", mem0, "--person", "tg:45", "--no-progress"])
    assert many.exit_code == 2 and "alex" in many.output and "--map" in many.output
    assert ("Nothing was imported" if lang == "en" else "什么都没有导入") in many.output
    nobody = runner.invoke(app, ["import", "--from", "mem0", mem0])
    assert nobody.exit_code == 2 and "not both" not in nobody.output and "二选一" not in nobody.output
    mapping = tmp_path / "m.json"
    mapping.write_text('{"alex": "tg:1"}', "utf-8")
    both = runner.invoke(app, ["import", "--from", "mem0", mem0, "--person", "tg:45", "--map", str(mapping)])
    assert both.exit_code == 2 and ("not both" if lang == "en" else "只能选一个") in both.output
