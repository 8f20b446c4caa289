"""Memories brought over from another bot: ``huiyi import --from SOURCE FILE``.

Sources (``SOURCES``), each read by a reader of its own into ``Record``s, one per
line or entry, numbered as in the file:

- ``sillytavern``: a SillyTavern chat file (``.jsonl``): a header line
  (``user_name``, ``character_name``, ``create_date``, ``chat_metadata``) then one
  message a line (``name``, ``is_user``, ``is_system``, ``send_date``, ``mes``).
  The person's lines are messages, read by the capture path (facts inferred as
  from a chat turn); the character's lines and system lines are skipped (the bot's
  words are never facts about a person). ``send_date`` is read in its
  forms ("January 15, 2024 10:31am", "2024-01-15@10h30m25s", ISO, epoch
  milliseconds); a time without a zone is the tenant's.
  A SillyTavern character card — its JSON (``chara_card_v2`` / ``v3``: ``data.character_book``),
  the PNG that carries it (a ``tEXt`` chunk ``ccv3`` or ``chara``, base64 JSON), or a world
  info (lorebook) file (``{"entries": {"0": {...}}}``) — brings its lorebook: each entry's
  ``content`` is a memory stored verbatim (``{{char}}`` read as the card's name,
  ``{{user}}`` as "the user" / 「用户」), its source id ``lorebook:<id or uid>``; an entry
  turned off there (``enabled: false``, ``disable: true``) is skipped (``disabled``).
- ``mem0``: a mem0 ``get_all`` export: ``{"results": [...]}`` or a list, each entry
  ``{id, memory, user_id, created_at, updated_at, metadata, …}``: memories already
  extracted, stored verbatim (``memory.capture.VerbatimExtractor``).
- ``livingmemory``: the JSON export of AstrBot's LivingMemory plugin
  (``{"format": "livingmemory", "memories": [...]}``, or a list): each entry's
  ``content`` is a memory stored verbatim, at ``metadata.create_time`` (epoch
  seconds), its owner the AstrBot ``session_id`` (``aiocqhttp:FriendMessage:123``);
  an entry without ``content`` brings its ``source_messages``, whose ``user``
  lines are messages; an entry whose ``metadata.status`` is ``deleted`` is skipped
  (``forgotten``: what the source forgot stays forgotten).
- ``maibot``: MaiBot's SQLite database (``MaiBot.db``): each ``person_info`` row's
  ``points`` (a JSON list of ``[text, weight, "YYYY-MM-DD HH:MM:SS"]``) are
  memories stored verbatim at their time, the owner ``<platform>:<user_id>``; its
  ``forgotten_points`` are what MaiBot let go and are not brought back. The
  line number is the row's ``rowid``. Read-only.
- ``jsonl``: one JSON object a line: ``text`` (required), ``subject`` / ``user_id``
  (the source's id of the person), ``at`` / ``time`` / ``timestamp`` (ISO, or epoch
  seconds), ``speaker`` / ``name``, ``role`` (``user``; ``assistant`` and
  ``system`` lines are skipped), ``kind`` (``message``, the default: facts
  inferred; ``memory``: verbatim) and ``id``.

People are never guessed: every record goes to ``person`` (one subject for the
whole file) or to the subject ``mapping`` gives for the record's owner id
(``mapping_of``: a JSON object or ``source_id<TAB or => subject`` lines); one whose
owner has no subject is skipped (``unmapped``). ``person`` is for one person's file:
a file whose records name more than one owner id (a mem0 export of alice and bob,
a MaiBot database of several people, jsonl lines of several ``subject``s) is
refused whole for it (``ManyOwners``), nothing written.

Writing (``import_records``): every record through ``memory.capture.capture`` in
the tenant's zone, as a message said in the private chat
``import:private:<source>`` at its own time — tombstones are compared with that
time, and a record without one is evidence from the epoch, so nothing forgotten
comes back — with its provenance as metadata (``imported_from``, ``source_id``,
``speaker``; never searched nor told). Each record is claimed first as a
delivery (``record_key``): a second run, or a replica importing the same file at
the same time, skips it (``already``), whatever became of its memory since
(forgotten, revised by a later line). A malformed line is reported with its line
number and skipped before anything of it is written.

Skip reasons (``Summary.skipped``): ``malformed``, ``empty``, ``disabled``, ``not_the_person``
(the character's or an assistant's line), ``system``, ``unmapped``,
``forgotten`` (a tombstone refused it, or the source deleted it), ``already``
(imported before, or every fact of it already stored), ``no_fact``
(a message that states nothing about the person), ``refused`` (any other refusal
of the store: a secret, a damaged text, a weaker or stale reading), ``error``
(the write failed; logged).

Errors: ``SourceError`` (a ValueError) for a file that cannot be read as its
source at all (not UTF-8, a mem0 export that is no JSON document, an unknown
source, a mapping file that is no mapping, a MaiBot ``person_info`` that is no
plain table or whose reading outlasts ``MAIBOT_SECONDS``); ``ManyOwners`` (a
SourceError) for several people's file imported for one ``person``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from memory.capture import VerbatimExtractor, capture
from memory.types import SUBJECT_RE, ChatKind, ChatRef, Namespace, load_json

__all__ = ["SOURCES", "ManyOwners", "Problem", "Record", "SourceError", "Summary", "import_records", "mapping_of", "read_records",
           "record_key", "records_of"]

log = logging.getLogger(__name__)

SOURCES = ("sillytavern", "mem0", "livingmemory", "maibot", "jsonl")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""The evidence time of a record whose source kept none: older than any forget."""


class SourceError(ValueError):
    """A file that cannot be read as the named source at all (nothing is written)."""


class ManyOwners(SourceError):
    """A file holding the records of several people (``owners``: their ids in the source,
    in file order) imported for one ``person``: refused whole, nothing written — each
    owner is mapped to a person of their own (``mapping``) instead."""

    def __init__(self, owners: list[str]) -> None:
        self.owners = owners
        shown = ", ".join(o[:40] for o in owners[:_SHOWN]) + (f" and {len(owners) - _SHOWN} more" if len(owners) > _SHOWN else "")
        super().__init__(f"the file holds the records of {len(owners)} people ({shown}), not one person's: "
                         "map each id to a person (mapping / --map) instead of naming one person")


_SHOWN = 10  # owner ids named in a ManyOwners message


@dataclass(frozen=True, slots=True)
class Record:
    """One memory or message of a source file: ``line`` (1-based line, or entry
    number of a JSON document), ``source_id`` (its id in the source, else
    ``line:N``), ``owner`` (the source's id of the person, "" when the file is one
    person's), ``speaker`` (as the source names them), ``text``, ``said_at`` (aware,
    None when the source kept no time) and ``verbatim`` (a memory kept as it is,
    not a message to read facts from)."""

    line: int
    source_id: str
    owner: str
    speaker: str
    text: str
    said_at: datetime | None
    verbatim: bool


@dataclass(frozen=True, slots=True)
class Problem:
    """A line or entry not imported: ``line`` (1-based), ``reason`` (a skip reason of
    the module docstring) and ``detail`` (what was wrong, without the text)."""

    line: int
    reason: str
    detail: str = ""


@dataclass(slots=True)
class Summary:
    """What an import did: ``read`` (records and problems seen), ``imported``
    (records that stored at least one memory), ``memories`` (memories stored),
    ``skipped`` (reason → count) and ``problems`` (each malformed or failed line,
    with its number)."""

    read: int = 0
    imported: int = 0
    memories: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)

    def skip(self, problem: Problem) -> None:
        self.skipped[problem.reason] += 1
        if problem.reason in ("malformed", "error"):
            self.problems.append(problem)


# -- reading ----------------------------------------------------------------------------------------

_ST_HUMAN = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})@(\d{1,2})h(\d{1,2})m(\d{1,2})s(?:\d+ms)?")
_ST_FORMS = ("%B %d, %Y %I:%M%p", "%B %d, %Y %I:%M %p", "%b %d, %Y %I:%M%p", "%B %d, %Y %H:%M", "%Y-%m-%d %H:%M:%S",
             "%Y-%m-%d %H:%M")


def _when(value: object, tz: ZoneInfo, *, millis: bool = False) -> datetime | None:
    """A source's time as an aware datetime: ISO (a naive one in ``tz``), SillyTavern's
    forms, or a number (epoch seconds; milliseconds when ``millis`` or too large for
    seconds). None for no value; ValueError for one that is no time, or one that is
    no UTC time of years 1–9999 (``1e30``, ``Infinity``, ``NaN``,
    ``0001-01-01T00:00:00+14:00``): every way Python fails a time out of range
    (OverflowError, ValueError, OSError) is caught here, so a reader skips the line
    as malformed before anything of it is written."""
    try:
        at = _time_of(value, tz, millis=millis)
        if at is not None:
            at.astimezone(timezone.utc)  # the store keeps UTC: a time that has none is out of range
        return at
    except (OverflowError, ValueError, OSError) as exc:
        raise ValueError(f"{exc} ({str(value)[:40]!r})" if str(value)[:40] not in str(exc) else str(exc)) from None


def _time_of(value: object, tz: ZoneInfo, *, millis: bool) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError("a boolean is no time")
    if isinstance(value, int | float):
        seconds = value / 1000 if millis or value > 10**11 else value
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    if not isinstance(value, str):
        raise ValueError("no time")
    text = value.strip()
    m = _ST_HUMAN.fullmatch(text)
    if m:
        return datetime(*map(int, m.groups()), tzinfo=tz)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        at = None
        for form in _ST_FORMS:
            try:
                at = datetime.strptime(text, form)  # %p and month names read in any case
                break
            except ValueError:
                continue
        if at is None:
            raise ValueError(f"unreadable time {text[:40]!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=tz)


def _loads(raw: str):
    """``raw`` decoded as JSON by ``memory.types.load_json`` (arrays and objects
    nested deeper than 64 levels refused before anything recursive reads them, so
    a hostile line is a malformed line, never a RecursionError). Raises
    json.JSONDecodeError for every refusal, as the readers here expect."""
    try:
        return load_json(raw)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        raise json.JSONDecodeError(str(exc), raw if isinstance(raw, str) else "", 0) from None


def _json_lines(text: str) -> Iterator[tuple[int, object | Problem]]:
    for n, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        try:
            yield n, _loads(row)
        except json.JSONDecodeError as exc:
            yield n, Problem(n, "malformed", f"not JSON: {exc.msg} (column {exc.colno})")


_PNG = b"\x89PNG\r\n\x1a\n"
_MACRO_CHAR = re.compile(r"\{\{\s*char\s*\}\}|<BOT>", re.IGNORECASE)
_MACRO_USER = re.compile(r"\{\{\s*user\s*\}\}|<USER>", re.IGNORECASE)


def _png_card(data: bytes) -> str:
    """The character card JSON a SillyTavern PNG carries: its ``tEXt`` chunk ``ccv3``
    (V3) or else ``chara`` (V2), base64. Raises SourceError when there is none."""
    pos, found = len(_PNG), {}
    while pos + 8 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if len(body) < length or kind == b"IEND":
            break
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            if key in (b"chara", b"ccv3"):
                found[key] = value
        pos += 12 + length
    raw = found.get(b"ccv3") or found.get(b"chara")
    if raw is None:
        raise SourceError("a PNG without a character card (no 'chara' or 'ccv3' text chunk)")
    try:
        return base64.b64decode(raw).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise SourceError("the PNG's character card is not base64 JSON") from None


def _card(text: str) -> dict | None:
    """The character card or world info document ``text`` is, else None (a chat file)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = _loads(text)
    except json.JSONDecodeError:
        return None  # a chat file: one JSON object a line
    if not isinstance(doc, dict) or "mes" in doc or "user_name" in doc or "chat_metadata" in doc:
        return None
    data = doc.get("data") if isinstance(doc.get("data"), dict) else doc
    if "character_book" in data or "entries" in doc or str(doc.get("spec", "")).startswith("chara_card"):
        return doc
    return None


def _lorebook(doc: dict) -> Iterator[Record | Problem]:
    data = doc.get("data") if isinstance(doc.get("data"), dict) else doc
    book = data.get("character_book") if "character_book" in data else doc
    if book is None:
        return  # a card without a lorebook
    if not isinstance(book, dict) or not isinstance(book.get("entries"), dict | list):
        raise SourceError("not a SillyTavern lorebook: no 'entries'")
    char = str(data.get("name") or book.get("name") or "")[:100]
    entries = book["entries"]
    items = list(entries.values()) if isinstance(entries, dict) else entries
    for n, entry in enumerate(items, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            yield Problem(n, "malformed", "an entry needs a text 'content'")
        elif entry.get("enabled") is False or entry.get("disable") is True:
            yield Problem(n, "disabled", "turned off in the lorebook")
        elif not entry["content"].strip():
            yield Problem(n, "empty")
        else:
            content = entry["content"]
            user = "用户" if any("\u4e00" <= c <= "\u9fff" for c in content) else "the user"
            content = _MACRO_USER.sub(user, _MACRO_CHAR.sub(char or "the character", content))
            uid = entry.get("id", entry.get("uid", n))
            yield Record(n, f"lorebook:{uid}", "", char or "lorebook", content, None, verbatim=True)


def _sillytavern(text: str, tz: ZoneInfo) -> Iterator[Record | Problem]:
    card = _card(text)
    if card is not None:
        yield from _lorebook(card)
        return
    for n, obj in _json_lines(text):
        if isinstance(obj, Problem):
            yield obj
            continue
        if not isinstance(obj, dict):
            yield Problem(n, "malformed", "not a JSON object")
            continue
        if "mes" not in obj and ("user_name" in obj or "chat_metadata" in obj):
            continue  # the header line
        mes, name = obj.get("mes"), obj.get("name", "")
        if not isinstance(mes, str) or not isinstance(obj.get("is_user", False), bool) or not isinstance(name, str):
            yield Problem(n, "malformed", "a message needs a text 'mes', a boolean 'is_user' and a string 'name'")
            continue
        try:
            said = _when(obj.get("send_date"), tz)
        except ValueError as exc:
            yield Problem(n, "malformed", f"send_date: {exc}")
            continue
        if obj.get("is_system"):
            yield Problem(n, "system")
        elif not obj.get("is_user"):
            yield Problem(n, "not_the_person", "the character's line")
        elif not mes.strip():
            yield Problem(n, "empty")
        else:
            yield Record(n, f"line:{n}", "", name, mes, said, verbatim=False)


def _mem0(text: str, tz: ZoneInfo) -> Iterator[Record | Problem]:
    try:
        doc = _loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("{") and "\n{" in text:  # one entry a line
            yield from _mem0_lines(text, tz)
            return
        raise SourceError(f"not a mem0 export: line {exc.lineno}: {exc.msg}") from None
    entries = doc.get("results", doc.get("memories")) if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise SourceError("not a mem0 export: no 'results' list")
    for n, entry in enumerate(entries, start=1):
        yield _mem0_entry(n, entry, tz)


def _mem0_lines(text: str, tz: ZoneInfo) -> Iterator[Record | Problem]:
    for n, obj in _json_lines(text):
        yield obj if isinstance(obj, Problem) else _mem0_entry(n, obj, tz)


def _mem0_entry(n: int, entry: object, tz: ZoneInfo) -> Record | Problem:
    if not isinstance(entry, dict) or not isinstance(entry.get("memory"), str):
        return Problem(n, "malformed", "an entry needs a text 'memory'")
    if not entry["memory"].strip():
        return Problem(n, "empty")
    try:
        said = _when(entry.get("created_at"), tz) or _when(entry.get("updated_at"), tz)
    except ValueError as exc:
        return Problem(n, "malformed", f"created_at: {exc}")
    owner = entry.get("user_id") or ""
    return Record(n, str(entry.get("id") or f"entry:{n}"), str(owner), str(entry.get("role") or "user"),
                  entry["memory"], said, verbatim=True)


def _jsonl(text: str, tz: ZoneInfo) -> Iterator[Record | Problem]:
    for n, obj in _json_lines(text):
        if isinstance(obj, Problem):
            yield obj
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            yield Problem(n, "malformed", "a line needs a text 'text'")
            continue
        kind = obj.get("kind", "message")
        role = obj.get("role", "user")
        if kind not in ("message", "memory") or role not in ("user", "assistant", "system"):
            yield Problem(n, "malformed", "'kind' is message or memory; 'role' is user, assistant or system")
            continue
        try:
            said = _when(next((obj[k] for k in ("at", "time", "timestamp") if obj.get(k) not in (None, "")), None), tz)
        except ValueError as exc:
            yield Problem(n, "malformed", f"time: {exc}")
            continue
        if role == "system":
            yield Problem(n, "system")
        elif role == "assistant":
            yield Problem(n, "not_the_person", "an assistant's line")
        elif not obj["text"].strip():
            yield Problem(n, "empty")
        else:
            owner = obj.get("subject") or obj.get("user_id") or obj.get("person") or ""
            yield Record(n, str(obj.get("id") or f"line:{n}"), str(owner), str(obj.get("speaker") or obj.get("name")
                                                                                or "user"),
                         obj["text"], said, verbatim=kind == "memory")


def _livingmemory(text: str, tz: ZoneInfo) -> Iterator[Record | Problem]:
    try:
        doc = _loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"not a LivingMemory export: line {exc.lineno}: {exc.msg}") from None
    entries = doc.get("memories") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise SourceError("not a LivingMemory export: no 'memories' list")
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            yield Problem(n, "malformed", "an entry is an object")
            continue
        meta = entry.get("metadata") or {}
        content, owner = entry.get("content"), entry.get("session_id") or ""
        messages = entry.get("source_messages") or []
        if isinstance(messages, str):
            try:
                messages = _loads(messages)
            except json.JSONDecodeError:
                messages = None
        if not isinstance(meta, dict) or not isinstance(messages, list) or not isinstance(owner, str) \
                or not (content is None or isinstance(content, str)):
            yield Problem(n, "malformed", "'content' text, 'session_id' text, 'metadata' object, "
                                          "'source_messages' list expected")
            continue
        try:
            said = _when(meta.get("create_time"), tz)
        except ValueError as exc:
            yield Problem(n, "malformed", f"metadata.create_time: {exc}")
            continue
        if str(meta.get("status", "active")).lower() == "deleted":
            yield Problem(n, "forgotten", "deleted in the source")
        elif content and content.strip():
            yield Record(n, str(entry.get("original_id") or entry.get("id") or f"entry:{n}"), owner, "user", content,
                         said, verbatim=True)
        else:
            users = [m for m in messages if isinstance(m, dict) and str(m.get("role", "user")).lower() in ("user",
                                                                                                          "human")
                     and isinstance(m.get("content"), str) and m["content"].strip()]
            if not users:
                yield Problem(n, "empty")
            for k, m in enumerate(users, start=1):
                try:
                    at = _when(m.get("timestamp") or None, tz) or said
                except ValueError:
                    at = said
                yield Record(n, f"{entry.get('original_id') or f'entry:{n}'}#{k}", owner,
                             str(m.get("sender_name") or "user"), m["content"], at, verbatim=False)


MAIBOT_SECONDS = {"upload": 5.0, "file": 60.0}
"""The most wall-clock seconds reading a MaiBot database may take (``_maibot``): one sent
to ``/v1/imports`` (1 MiB at most, read in milliseconds), one on the operator's disk."""
_STEPS = 10_000  # SQLite VM instructions between two looks at the clock
_LONGEST = 16 << 20  # bytes: the longest text or blob a query over an uploaded database may make


def _maibot_file(path: Path) -> sqlite3.Connection:
    """MaiBot's database at ``path``, opened read-only."""
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise SourceError(f"not a MaiBot database: {exc}") from None


def _maibot_bytes(data: bytes) -> sqlite3.Connection:
    """MaiBot's database sent as bytes (``/v1/imports``), read in memory: no file is written."""
    if not data.startswith(b"SQLite format 3\x00"):
        raise SourceError("not a MaiBot database (no SQLite header)")
    db = sqlite3.connect(":memory:")
    try:
        db.deserialize(data)
    except sqlite3.Error as exc:
        db.close()
        raise SourceError(f"not a MaiBot database: {exc}") from None
    return db


def _guard(db: sqlite3.Connection, seconds: float) -> None:
    """Bound every query over ``db``, a file someone else made: aborted (``sqlite3.OperationalError``
    "interrupted") once ``seconds`` of wall clock have passed, checked every ``_STEPS`` VM
    instructions (``set_progress_handler``); no text or blob longer than ``_LONGEST`` bytes;
    no function of the schema that is not innocuous (``trusted_schema``); nothing written."""
    deadline = time.monotonic() + seconds
    db.set_progress_handler(lambda: time.monotonic() > deadline, _STEPS)
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _LONGEST)
    db.execute("PRAGMA trusted_schema = OFF")
    db.execute("PRAGMA query_only = ON")


def _person_info(db: sqlite3.Connection) -> list[tuple]:
    """The rows of ``person_info``, a plain table (never a view: its query is the file
    maker's code; never a virtual table or one with generated columns). Raises SourceError."""
    kind = db.execute("SELECT type, sql FROM sqlite_master WHERE name = 'person_info'").fetchone()
    if kind is None:
        raise SourceError("not a MaiBot database (no person_info table)")
    if kind[0] != "table" or re.match(r"\s*CREATE\s+VIRTUAL\b", kind[1] or "", re.IGNORECASE):
        raise SourceError("not a MaiBot database: person_info is not a table")
    if any(col[6] for col in db.execute("PRAGMA table_xinfo(person_info)")):  # hidden: 2, 3 generated
        raise SourceError("not a MaiBot database: person_info has generated columns")
    return db.execute("SELECT rowid, platform, user_id, nickname, points FROM person_info ORDER BY rowid").fetchall()


def _maibot(db: sqlite3.Connection, tz: ZoneInfo, seconds: float) -> Iterator[Record | Problem]:
    """The points of MaiBot's ``db`` (module docstring); every query bounded by ``_guard``
    (``seconds`` in all). Raises SourceError for a database that is not MaiBot's, or
    whose reading took longer than ``seconds``; ``db`` is closed."""
    try:
        try:
            _guard(db, seconds)
            rows = _person_info(db)
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SourceError(f"not a MaiBot database: reading it took over {seconds:g} s") from None
            raise SourceError(f"not a MaiBot database (no person_info table): {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise SourceError(f"not a MaiBot database (no person_info table): {exc}") from None
    finally:
        db.close()
    for rowid, platform, user_id, nickname, points in rows:
        if not points:
            continue
        try:
            items = _loads(points)
        except (json.JSONDecodeError, TypeError):
            yield Problem(rowid, "malformed", "points is not a JSON list")
            continue
        if not isinstance(items, list):
            yield Problem(rowid, "malformed", "points is not a JSON list")
            continue
        for k, item in enumerate(items, start=1):
            if not isinstance(item, list | tuple) or not item or not isinstance(item[0], str):
                yield Problem(rowid, "malformed", f"point {k}: [text, weight, time] expected")
                continue
            try:
                said = _when(item[2] if len(item) > 2 else None, tz)
            except ValueError as exc:
                yield Problem(rowid, "malformed", f"point {k}: {exc}")
                continue
            if not item[0].strip():
                yield Problem(rowid, "empty")
                continue
            yield Record(rowid, f"{platform}:{user_id}#{k}", f"{platform}:{user_id}", str(nickname or user_id),
                         item[0], said, verbatim=True)


_READERS: dict[str, Callable[[str, ZoneInfo], Iterator[Record | Problem]]] = {
    "sillytavern": _sillytavern, "mem0": _mem0, "livingmemory": _livingmemory, "jsonl": _jsonl}


def read_records(source: str, path: Path, tz: str) -> list[Record | Problem]:
    """The records of the ``source`` file at ``path`` (``SOURCES``), in file order,
    each malformed line as a ``Problem`` with its number; times without a zone in
    IANA zone ``tz``. Raises SourceError for an unknown source, a file that cannot
    be read or is not UTF-8, or one that is not that source at all."""
    if source not in SOURCES:
        raise SourceError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    if source == "maibot":
        if not path.is_file():
            raise SourceError(f"no such file: {path}")
        return list(_maibot(_maibot_file(path), ZoneInfo(tz), MAIBOT_SECONDS["file"]))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    return records_of(source, data, tz)


def records_of(source: str, data: bytes, tz: str) -> list[Record | Problem]:
    """``read_records`` of a file's bytes (``/v1/imports``): a MaiBot database is read
    in memory. Raises SourceError as ``read_records`` does."""
    if source not in SOURCES:
        raise SourceError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    if source == "maibot":
        return list(_maibot(_maibot_bytes(data), ZoneInfo(tz), MAIBOT_SECONDS["upload"]))
    if source == "sillytavern" and data.startswith(_PNG):
        return list(_lorebook(_loads_card(_png_card(data))))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"not UTF-8 (byte {exc.start})") from None
    return list(_READERS[source](text, ZoneInfo(tz)))


def _loads_card(text: str) -> dict:
    try:
        doc = _loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"the PNG's character card is no JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise SourceError("the PNG's character card is no JSON object")
    return doc


def mapping_of(data: bytes) -> dict[str, str]:
    """Source person id → huiyi subject, from a JSON object or from lines
    ``source_id<TAB>subject`` / ``source_id=subject`` (``#`` starts a comment).
    Raises SourceError for anything else, or a subject outside its pattern."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"mapping: not UTF-8 (byte {exc.start})") from None
    try:
        doc = _loads(text)
    except json.JSONDecodeError:
        doc = None
        out = {}
        for n, row in enumerate(text.splitlines(), start=1):
            if not row.strip() or row.lstrip().startswith("#"):
                continue
            parts = re.split(r"\t|=", row, maxsplit=1)
            if len(parts) != 2:
                raise SourceError(f"mapping line {n}: 'source_id<TAB>subject' or 'source_id=subject' expected")
            out[parts[0].strip()] = parts[1].strip()
    else:
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise SourceError("mapping: a JSON object of strings expected")
        out = {str(k): v for k, v in doc.items()}
    for source_id, subject in out.items():
        if not SUBJECT_RE.fullmatch(subject):
            raise SourceError(f"mapping: {subject!r} (for {source_id!r}) is no subject (e.g. tg:1001)")
    return out


# -- writing ----------------------------------------------------------------------------------------

_STORED = frozenset({"stored", "superseded", "revised"})


def record_key(ns: Namespace, source: str, rec: Record) -> str:
    """The delivery key a record is claimed under (``Store.claim_delivery``):
    ``import:`` and a SHA-256 of the namespace, the source, the record's owner,
    source id, time and text — the same line of the same file is the same key, a
    line of another file (another chat's ``line:3``) another."""
    said = rec.said_at.isoformat() if rec.said_at else ""
    digest = hashlib.sha256("\x1f".join((str(ns), source, rec.owner, rec.source_id, said, rec.text))
                            .encode("utf-8")).hexdigest()
    return f"import:{digest}"


def import_records(core, tenant: str, records: Iterable[Record | Problem], *, source: str, person: str | None = None,
                   mapping: dict[str, str] | None = None, tz: str = "Asia/Shanghai",
                   progress: Callable[[], None] | None = None) -> Summary:
    """Write ``records`` (``read_records``) into ``tenant``: each to ``person``, else
    to ``mapping[record.owner]``, through ``memory.capture.capture`` (module
    docstring); ``progress`` is called once per record. Returns the ``Summary``.
    Raises NamespaceError for a tenant or ``person`` outside its pattern, and
    ManyOwners when ``person`` is named for records of more than one owner id
    (someone else's facts are never stored as the person's), both before anything
    is written."""
    if person is not None:
        Namespace(tenant, person)  # NamespaceError before any write
        records = list(records)
        owners = list(dict.fromkeys(r.owner for r in records if isinstance(r, Record) and r.owner))
        if len(owners) > 1:
            raise ManyOwners(owners)
    chat = ChatRef("import", ChatKind.PRIVATE, source)
    summary = Summary()
    for rec in records:
        summary.read += 1
        try:
            if isinstance(rec, Problem):
                summary.skip(rec)
                continue
            subject = person or (mapping or {}).get(rec.owner)
            if subject is None:
                summary.skip(Problem(rec.line, "unmapped", f"no person mapped for {rec.owner or '(no id)'!r}"))
                continue
            ns = Namespace(tenant, subject)
            said = rec.said_at or datetime.now(timezone.utc)
            # cut to memory.metadata's limit of a value (200 characters)
            meta = {"imported_from": source, "source_id": rec.source_id[:200], "speaker": rec.speaker[:200]}
            # claimed like a platform delivery: a record imported once is never read again — not on a
            # second run, nor on a replica importing the same file at once, nor after its memory was
            # forgotten or revised by a later line
            claim = record_key(ns, source, rec)
            if not core.store.claim_delivery(claim):
                summary.skip(Problem(rec.line, "already"))
                continue
            try:
                results = capture(core, ns, rec.text, chat=chat, said_at=said, tz=tz, addressed=True,
                                  message_id=f"import:{source}:{rec.source_id}"[:200],
                                  extractor=VerbatimExtractor() if rec.verbatim else None,
                                  evidence_at=rec.said_at or EPOCH, metadata=meta)
            except Exception as exc:  # noqa: BLE001 - one record's failure is reported, the rest go on
                core.store.release_delivery(claim)  # tried again on the next run
                log.warning("import %s line %d failed: %s", source, rec.line, type(exc).__name__)
                summary.skip(Problem(rec.line, "error", type(exc).__name__))
                continue
            stored = sum(1 for r in results if r.action in _STORED)
            if stored:
                summary.imported += 1
                summary.memories += stored
            elif not results:
                summary.skip(Problem(rec.line, "no_fact"))
            elif any(r.action == "rejected" and r.reason == "tombstone" for r in results):
                summary.skip(Problem(rec.line, "forgotten"))
            elif all(r.action == "deduped" for r in results):
                summary.skip(Problem(rec.line, "already"))
            else:
                summary.skip(Problem(rec.line, "refused", ",".join(sorted({r.reason or r.action for r in results}))))
        finally:
            if progress is not None:
                progress()
    return summary
