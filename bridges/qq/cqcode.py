"""CQ codes: the string form of OneBot v11 messages.

A CQ-code string mixes plain text with codes ``[CQ:type,key=value,...]``.
Escapes (OneBot v11 ``message/string.md``; go-cqhttp ``docs/cqcode``):

- in text: ``&amp;`` → ``&``, ``&#91;`` → ``[``, ``&#93;`` → ``]``
- inside a code's parameter values, additionally ``&#44;`` → ``,``

An escaped bracket is text, never the start of a segment. Decoding is
lenient: a ``[`` that does not open a well-formed ``[CQ:...]`` is kept as text,
so any string decodes without raising.

Why not ``nonebot.adapters.onebot.v11.Message``: its parser wants every
parameter value free of bare commas, so go-cqhttp's own documented JSON-card
code (bare ", " inside the value) stays one text run instead of a ``json``
segment, and importing it pulls in nonebot, which installs a loguru handler on
stdout at import time and adds about 0.4 s to ``import bridges.qq.parse``.
"""

from __future__ import annotations

import re

__all__ = ["decode_cq", "unescape_text", "unescape_param"]

_TEXT_ESCAPES = {"&amp;": "&", "&#91;": "[", "&#93;": "]"}
_PARAM_ESCAPES = {**_TEXT_ESCAPES, "&#44;": ","}
_TEXT_ESCAPE_RE = re.compile("|".join(map(re.escape, _TEXT_ESCAPES)))
_PARAM_ESCAPE_RE = re.compile("|".join(map(re.escape, _PARAM_ESCAPES)))
# A code ends at the first "]": inside a code a literal "]" must be escaped.
_CODE_RE = re.compile(r"\[CQ:([^\[\],=\s]+)((?:,[^\[\]]*)?)\]")
_KEY_RE = re.compile(r"([\w.-]+)=")


def unescape_text(s: str) -> str:
    """Undo CQ text escapes (``&amp;``, ``&#91;``, ``&#93;``) in one pass."""
    return _TEXT_ESCAPE_RE.sub(lambda m: _TEXT_ESCAPES[m.group(0)], s)


def unescape_param(s: str) -> str:
    """Undo CQ parameter escapes (text escapes plus ``&#44;``) in one pass."""
    return _PARAM_ESCAPE_RE.sub(lambda m: _PARAM_ESCAPES[m.group(0)], s)


def _params(raw: str) -> dict[str, str]:
    # Senders are supposed to escape "," in values as "&#44;", but some do not
    # (the go-cqhttp docs' own JSON-card example has bare ", "). A part that
    # does not start with "key=" therefore continues the previous value.
    data: dict[str, str] = {}
    last: str | None = None
    for part in raw.split(",")[1:] if raw else ():
        match = _KEY_RE.match(part)
        if match:
            last = match.group(1)
            data[last] = part[match.end() :]
        elif last is not None:
            data[last] += "," + part
    return {key: unescape_param(value) for key, value in data.items()}


def decode_cq(s: str) -> list[dict]:
    """Decode a CQ-code string into OneBot v11 array segments.

    Returns ``[{"type": str, "data": {str: str}}, ...]`` in order; text runs
    become ``{"type": "text", "data": {"text": ...}}`` with escapes undone and
    empty runs dropped. Every parameter value is a string, as in the array
    form. Never raises on a ``str``; a non-string yields ``[]``.

    >>> decode_cq("&#91;hi&#93;[CQ:at,qq=123]")
    [{'type': 'text', 'data': {'text': '[hi]'}}, {'type': 'at', 'data': {'qq': '123'}}]
    """
    if not isinstance(s, str):
        return []
    segments: list[dict] = []
    pos = 0
    for match in _CODE_RE.finditer(s):
        if match.start() > pos:
            segments.append({"type": "text", "data": {"text": unescape_text(s[pos : match.start()])}})
        segments.append({"type": match.group(1), "data": _params(match.group(2))})
        pos = match.end()
    if pos < len(s):
        segments.append({"type": "text", "data": {"text": unescape_text(s[pos:])}})
    return segments
