"""Message catalogues for everything a person reads.

Catalogues are gettext ``.po`` files under ``locales/<lang>/LC_MESSAGES/huiyi.po``
(msgids are the English source strings). They are parsed with Babel's
``read_po`` once per process and looked up by ``translate``; no compiled
``.mo`` files are needed at run time.

Languages: ``zh_CN`` (default) and ``en``. ``resolve_language`` maps platform
codes (``zh-hans``, ``zh-TW``, ``en-US``…) to one of them.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

__all__ = ["LANGUAGES", "DEFAULT_LANGUAGE", "translate", "resolve_language", "catalogue_ids", "placeholders"]

LANGUAGES = ("zh_CN", "en")
DEFAULT_LANGUAGE = "zh_CN"
_DIR = Path(__file__).resolve().parent
_lock = threading.Lock()


@lru_cache(maxsize=None)
def _catalogue(lang: str) -> dict[str, str]:
    from babel.messages.pofile import read_po

    with _lock, open(_DIR / lang / "LC_MESSAGES" / "huiyi.po", "rb") as fh:
        cat = read_po(fh, locale=lang)
    return {m.id: (m.string or m.id) for m in cat if m.id and isinstance(m.id, str)}


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


def translate(lang: str, msgid: str, **params: object) -> str:
    """The catalogue text of ``msgid`` in ``lang`` with ``{placeholders}`` filled.

    Falls back to the msgid (English) for an unknown id or language. Raises
    KeyError when a placeholder in the text is not given.
    """
    lang = lang if lang in LANGUAGES else resolve_language(lang)
    text = _catalogue(lang).get(msgid, msgid)
    return text.format(**params) if params else text


def catalogue_ids(lang: str) -> dict[str, str]:
    """All (msgid → text) of a catalogue (for the completeness test)."""
    return dict(_catalogue(lang))


def placeholders(text: str) -> set[str]:
    """The ``{name}`` placeholders used in a catalogue text."""
    import string

    return {f for _, f, _, _ in string.Formatter().parse(text) if f}
