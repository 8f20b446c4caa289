"""The message catalogues: zh_CN and en hold the same message ids with the same
placeholders, and every message the code asks for is in both."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from locales import LANGUAGES, catalogue_ids, placeholders, translate

ROOT = Path(__file__).resolve().parents[2]
#: Functions whose string argument is a message id: translate(lang, msgid, …),
#: the commands' caller.say(msgid, …) and the CLI's Voice.say / Voice.fail(msgid, …).
KEYWORDS = {"translate": (2,), "say": (1,), "fail": (1,)}


def code_msgids() -> dict[str, str]:
    """msgid → where, for every literal message id in gateway/, memory/ and bridges/ (Babel's extractor)."""
    from babel.messages.extract import extract

    found: dict[str, str] = {}
    for package in ("gateway", "memory", "bridges"):
        for path in sorted((ROOT / package).rglob("*.py")):
            with open(path, "rb") as fh, contextlib.redirect_stderr(io.StringIO()):
                for lineno, msgid, _, _ in extract("python", fh, keywords=KEYWORDS):
                    if isinstance(msgid, str):
                        found.setdefault(msgid, f"{path.relative_to(ROOT)}:{lineno}")
    return found


def dynamic_msgids() -> set[str]:
    """Message ids built at run time: category and emotion names, the pipeline's apology."""
    from gateway.pipeline import APOLOGY
    from memory.emotion import LABELS
    from memory.types import Category

    return {c.value for c in Category} | set(LABELS) | {APOLOGY}


def test_both_catalogues_hold_the_same_message_ids():
    """A msgid missing from either catalogue fails, naming it."""
    zh, en = set(catalogue_ids("zh_CN")), set(catalogue_ids("en"))
    assert sorted(zh - en) == [] and sorted(en - zh) == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_placeholders_match_the_message_id(lang):
    """Every translation uses exactly the placeholders of its msgid, so formatting never raises or drops a value."""
    wrong = {msgid: text for msgid, text in catalogue_ids(lang).items() if placeholders(text) != placeholders(msgid)}
    assert wrong == {}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_message_the_code_uses_is_translated(lang):
    """Each literal msgid passed to translate()/say() and each run-time one is in the catalogue."""
    ids = catalogue_ids(lang)
    used = code_msgids()
    assert len(used) > 50  # the extractor really read the commands
    missing = {m: where for m, where in used.items() if m not in ids}
    missing.update({m: "dynamic" for m in dynamic_msgids() if m not in ids})
    assert missing == {}


def test_chinese_catalogue_is_really_translated():
    """zh_CN texts differ from the English source except for a few placeholder-only lines."""
    same = [m for m, text in catalogue_ids("zh_CN").items() if text == m and placeholders(m) != {m.strip("{}")}]
    assert same == []
    assert translate("zh_CN", "You can only manage your own memories.") == "你只能管理自己的记忆哦。"
