"""Message catalogues for everything a person reads.

Catalogues are gettext ``.po`` files under ``locales/<lang>/LC_MESSAGES/huiyi.po``
(msgids are the English source strings). Each is parsed with Babel's
``read_po`` once per process, compiled in memory with Babel's ``write_mo`` and
read by the standard library's ``gettext.GNUTranslations``: ``translate`` is its
``gettext``, ``translate_plural`` its ``ngettext``, whose form follows the
catalogue's ``Plural-Forms`` header (en ``nplurals=2; plural=(n != 1)``, zh_CN
``nplurals=1; plural=0``; the CLDR rules Babel knows when a header lacks it). No
compiled ``.mo`` file is kept in the repository or needed at run time, so the
``.po`` files stay the only source and there is no build step to forget.

Languages: ``zh_CN`` (default) and ``en``. ``resolve_language`` maps platform
codes (``zh-hans``, ``zh-TW``, ``en-US``…) to one of them; ``written_language``
reads it from what a person writes, and ``turn_language`` applies the order a
turn's language is chosen in. ``shell_language`` reads a POSIX shell's locale
(``LC_ALL``, ``LC_MESSAGES``, ``LANG``) and ``operator_language`` applies the
order the command line's language is chosen in.
"""

from __future__ import annotations

import gettext
import io
import re
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

__all__ = ["LANGUAGES", "DEFAULT_LANGUAGE", "LOCALE_VARIABLES", "translate", "translate_plural", "resolve_language",
           "written_language", "turn_language", "shell_language", "operator_language", "catalogue_ids",
           "plural_entries", "plural_count", "placeholders"]

LANGUAGES = ("zh_CN", "en")
DEFAULT_LANGUAGE = "zh_CN"
#: The locale variables that name the language of messages, in the order POSIX
#: reads them (XBD 8.2, "Internationalization Variables"): the first that is set
#: and not empty decides.
LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG")
_DIR = Path(__file__).resolve().parent
_lock = threading.Lock()


@lru_cache(maxsize=None)
def _po(lang: str):
    """The Babel ``Catalog`` of ``lang`` (parsed once)."""
    from babel.messages.pofile import read_po

    with _lock, open(_DIR / lang / "LC_MESSAGES" / "huiyi.po", "rb") as fh:
        return read_po(fh, locale=lang)


@lru_cache(maxsize=None)
def _catalogue(lang: str) -> dict[str, str]:
    return {m.id: (m.string or m.id) for m in _po(lang) if m.id and isinstance(m.id, str)}


@lru_cache(maxsize=None)
def _translations(lang: str) -> gettext.GNUTranslations:
    """``lang``'s catalogue as gettext translations: compiled in memory (Babel's
    ``write_mo``, fuzzy entries left out as msgfmt does) and read back by the
    standard library, which evaluates the ``Plural-Forms`` expression."""
    from babel.messages.mofile import write_mo

    buf = io.BytesIO()
    write_mo(buf, _po(lang))
    buf.seek(0)
    return gettext.GNUTranslations(buf)


def resolve_language(code: str | None, default: str = DEFAULT_LANGUAGE) -> str:
    """Map a platform language code to a catalogue language; ``default`` when unknown
    or None. Any Chinese variant → ``zh_CN`` (traditional text is still matched by
    the core); any English variant → ``en``."""
    if not code:
        return default if default in LANGUAGES else DEFAULT_LANGUAGE
    c = code.lower().replace("_", "-")
    if c.startswith("zh"):
        return "zh_CN"
    if c.startswith("en"):
        return "en"
    return default if default in LANGUAGES else DEFAULT_LANGUAGE


# Han ideographs (basic, extension A, compatibility, extensions B+) and the CJK
# punctuation block count as Chinese; runs of Latin letters (accented included)
# count as English words (a token with digits, like a memory id, is no word). A
# leading /command, @mentions, links and subjects (tg:123) say nothing about the
# person's language.
_HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
_LATIN_WORD_RE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z\u00c0-\u024f]+(?:['’][A-Za-z]+)?(?![A-Za-z0-9])")
_NOISE_RE = re.compile(r"^\s*/\S*|@\S+|https?://\S+|www\.\S+|\b[a-z][a-z0-9]{0,15}:[A-Za-z0-9_.@-]+",
                       re.IGNORECASE)


def written_language(text: str) -> str | None:
    """The catalogue language ``text`` is written in, by majority script:
    ``zh_CN`` when its Han characters outnumber its Latin words, ``en`` when the
    Latin words outnumber the Han characters, None when neither (a tie, or only
    emoji, digits and punctuation). One Han character is weighed against one
    Latin *word* (both carry about a word of meaning): 「我喜欢Taylor Swift」 is
    zh_CN (3 : 2), "I went to 星巴克 today" is en (4 : 3). Full-width Latin
    counts as Latin (NFKC). A leading ``/command``, ``@mentions`` and links are
    left out."""
    import unicodedata

    if not isinstance(text, str) or not text:
        return None
    body = _NOISE_RE.sub(" ", unicodedata.normalize("NFKC", text))
    han = len(_HAN_RE.findall(body))
    latin = len(_LATIN_WORD_RE.findall(body))
    if han > latin:
        return "zh_CN"
    if latin > han:
        return "en"
    return None


def turn_language(text: str, previous: Iterable[str] = (), hint: str | None = None,
                  default: str = DEFAULT_LANGUAGE) -> str:
    """The language of a turn, first that decides: what the person writes now
    (``written_language``), then their previous messages (``previous``, newest
    first, each read the same way), then the platform's hint (``hint``, e.g. a
    Telegram ``language_code``, through ``resolve_language``), then the tenant's
    ``default``. A Chinese speaker whose Telegram app is set to English gets Chinese."""
    lang = written_language(text)
    if lang is not None:
        return lang
    for line in previous:
        lang = written_language(line)
        if lang is not None:
            return lang
    return resolve_language(hint, default)


@lru_cache(maxsize=64)
def _locale_language(name: str) -> str:
    """``zh_CN`` for a Chinese locale name, ``en`` for any other (Babel's
    ``Locale.parse``: encoding and modifier dropped, ``C``/``POSIX`` → en_US_POSIX)."""
    from babel import Locale, UnknownLocaleError

    try:
        language = Locale.parse(name).language
    except (UnknownLocaleError, ValueError, TypeError):  # zh-CN, a path, a typo: its first letters decide
        language = name[:2].lower()
    return "zh_CN" if language == "zh" else "en"


def shell_language(environ: Mapping[str, str]) -> str | None:
    """The catalogue language of a shell's locale (``environ``: its variables):
    the first of ``LOCALE_VARIABLES`` that is set and not empty (POSIX counts an
    empty one as unset), parsed by Babel — ``zh_CN.UTF-8``, ``zh_TW``,
    ``zh_HK.Big5HKSCS`` → ``zh_CN``; ``en_US.UTF-8``, ``C``, ``POSIX``,
    ``C.UTF-8``, ``de_DE``, a name Babel does not know → ``en`` (the source
    language of every message id). None when none of them is set."""
    for var in LOCALE_VARIABLES:
        value = (environ.get(var) or "").strip()
        if value:
            return _locale_language(value)
    return None


def operator_language(environ: Mapping[str, str], configured: str | None = None,
                      default: str = DEFAULT_LANGUAGE) -> str:
    """The language of what the command line tells its operator, first that
    decides: the shell's locale (``shell_language(environ)``), then the
    ``configured`` language (a tenant's ``language``, through
    ``resolve_language``), then ``default``. An English shell gets English from
    a Chinese tenant; a shell with no locale at all gets the tenant's."""
    return shell_language(environ) or resolve_language(configured, default)


def translate(lang: str, msgid: str, **params: object) -> str:
    """The catalogue text of ``msgid`` in ``lang`` with ``{placeholders}`` filled.

    Falls back to the msgid (English) for an unknown id or language. Raises
    KeyError when a placeholder in the text is not given.
    """
    if not msgid:  # gettext's "" is the catalogue's header, never a message
        return msgid
    lang = lang if lang in LANGUAGES else resolve_language(lang)
    text = _translations(lang).gettext(msgid)
    return text.format(**params) if params else text


def translate_plural(lang: str, singular: str, plural: str, n: int, **params: object) -> str:
    """The catalogue text of the plural entry ``singular``/``plural`` in ``lang``,
    in the form for the count ``n`` (gettext ``ngettext``: the form index is the
    catalogue's ``Plural-Forms`` expression of ``n``), with ``{placeholders}``
    filled from ``params`` and ``n`` (``{n}`` is always available).

    Falls back to the English ``singular`` (n == 1) or ``plural`` for an unknown
    entry or language. Raises KeyError when a placeholder in the text is not
    given; TypeError when ``n`` is not an int (a count is whole).
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"a plural count is an int, not {type(n).__name__}")
    lang = lang if lang in LANGUAGES else resolve_language(lang)
    text = _translations(lang).ngettext(singular, plural, n)
    return text.format(**{"n": n, **params})


def catalogue_ids(lang: str) -> dict[str, str]:
    """All (msgid → text) of a catalogue's singular entries (for the completeness test)."""
    return dict(_catalogue(lang))


def plural_entries(lang: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """All plural entries of a catalogue: (msgid, msgid_plural) → its forms
    (``msgstr[0]``, ``msgstr[1]``, …), for the completeness tests."""
    return {tuple(m.id): tuple(m.string) for m in _po(lang)
            if m.id and not isinstance(m.id, str)}  # type: ignore[misc]


def plural_count(lang: str) -> int:
    """How many plural forms ``lang``'s catalogue declares (its ``Plural-Forms`` nplurals)."""
    return _po(lang).num_plurals


def placeholders(text: str) -> set[str]:
    """The ``{name}`` placeholders used in a catalogue text."""
    import string

    return {f for _, f, _, _ in string.Formatter().parse(text) if f}
