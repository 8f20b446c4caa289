"""The message catalogues: zh_CN and en hold the same message ids with the same
placeholders, and every message the code asks for is in both."""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path

import pytest

from locales import LANGUAGES, catalogue_ids, placeholders, plural_count, plural_entries, translate, translate_plural

ROOT = Path(__file__).resolve().parents[2]
#: Functions whose string argument is a message id: translate(lang, msgid, …),
#: the commands' caller.say(msgid, …) and the CLI's Voice.say / Voice.fail(msgid, …);
#: and the plural ones, whose two arguments are (msgid, msgid_plural): translate_plural(lang,
#: singular, plural, n, …) and the commands' and the CLI's say_n(singular, plural, n, …).
KEYWORDS = {"translate": (2,), "say": (1,), "fail": (1,), "translate_plural": (2, 3), "say_n": (1, 2)}


@functools.lru_cache(maxsize=1)
def _extracted() -> tuple[tuple[object, str], ...]:
    """(msgid, where) of every literal message id in gateway/, memory/ and bridges/, read once per session."""
    from babel.messages.extract import extract

    found = []
    for package in ("gateway", "memory", "bridges"):
        for path in sorted((ROOT / package).rglob("*.py")):
            with open(path, "rb") as fh, contextlib.redirect_stderr(io.StringIO()):
                for lineno, msgid, _, _ in extract("python", fh, keywords=KEYWORDS):
                    found.append((msgid, f"{path.relative_to(ROOT)}:{lineno}"))
    return tuple(found)


def code_msgids() -> dict[str, str]:
    """msgid → where, for every literal message id in gateway/, memory/ and bridges/ (Babel's extractor)."""
    found: dict[str, str] = {}
    for msgid, where in _extracted():
        if isinstance(msgid, str):
            found.setdefault(msgid, where)
    return found


def code_plural_msgids() -> dict[tuple[str, str], str]:
    """(msgid, msgid_plural) → where, for every literal plural entry the code asks for."""
    found: dict[tuple[str, str], str] = {}
    for msgid, where in _extracted():
        if isinstance(msgid, tuple) and len(msgid) == 2 and all(isinstance(m, str) for m in msgid):
            found.setdefault(msgid, where)
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


def test_both_catalogues_hold_the_same_plural_entries():
    """A plural entry (msgid + msgid_plural) missing from either catalogue fails, naming it."""
    zh, en = set(plural_entries("zh_CN")), set(plural_entries("en"))
    assert sorted(zh - en) == [] and sorted(en - zh) == []
    assert len(en) >= 20


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_plural_entry_has_each_form_of_its_language(lang):
    """Plural-Forms is declared (en 2 forms, zh_CN 1: a Chinese noun has no plural), every entry fills each
    form, and each form uses exactly the placeholders of its msgid_plural (the same as the msgid's, ``{n}`` included)."""
    assert plural_count(lang) == {"en": 2, "zh_CN": 1}[lang]
    bad = {}
    for (one, many), forms in plural_entries(lang).items():
        wanted = placeholders(many)
        if placeholders(one) != wanted or "n" not in wanted or len(forms) != plural_count(lang) \
                or any(not f or placeholders(f) != wanted for f in forms):
            bad[one] = forms
    assert bad == {}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_plural_message_the_code_uses_is_in_the_catalogue(lang):
    """Each literal (singular, plural) passed to translate_plural()/say_n() is a plural entry of the catalogue."""
    used = code_plural_msgids()
    assert len(used) >= 20  # the extractor really read the plural calls
    entries = plural_entries(lang)
    assert {pair: where for pair, where in used.items() if pair not in entries} == {}


def test_a_count_of_one_takes_the_singular_in_english_and_the_one_form_in_chinese():
    """ngettext by the catalogue's Plural-Forms: en "1 person" / "2 people", zh_CN 「1 个人」 / 「2 个人」, 0 is plural in en."""
    said = {(lang, n): translate_plural(lang, "{n} person", "{n} people", n) for lang in LANGUAGES for n in (0, 1, 2)}
    assert said == {("en", 0): "0 people", ("en", 1): "1 person", ("en", 2): "2 people",
                    ("zh_CN", 0): "0 个人", ("zh_CN", 1): "1 个人", ("zh_CN", 2): "2 个人"}
    assert translate_plural("en", "no such {n} thing", "no such {n} things", 1) == "no such 1 thing"  # falls back
    assert translate("zh_CN", "") == ""  # not gettext's header entry
    with pytest.raises(TypeError):
        translate_plural("en", "{n} person", "{n} people", 1.0)


#: English words that follow a count only in the plural (the nouns of the catalogues' counts).
_COUNTED = r"(?:memories|people|persons|chats|turns|groups|hits|minutes|days|months|years|clusters|fragments|" \
           r"tenants|tenant\(s\)|identities|versions|keys|messages|lines)"


def test_no_singular_entry_puts_a_count_before_a_plural_noun():
    """A text like "{n} memories" or "{people} people" as a plain msgid reads "1 memories" / "1 people" for
    a count of one: such a count must be a plural entry (ngettext). Only a placeholder that is not a count
    (a name, an id) may stand there."""
    import re

    counted = re.compile(r"\{(\w+)\} (?:new |recent |long-term )?" + _COUNTED + r"\b")
    bad = sorted(m for m in catalogue_ids("en") if counted.search(m))
    assert bad == []
