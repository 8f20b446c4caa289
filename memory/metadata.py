"""Metadata on a memory: the caller's own tags, and filters on them.

Metadata is a small JSON object of string keys to scalars — a bot's
``{"source": "crm", "topic": "pets", "pinned": true, "score": 3}`` — kept with
a memory across its versions, shown wherever the memory is shown (list, get,
export) and filtered on in listings and recall. It is never searched (neither
BM25 nor the embedder sees it), never told in a recollection and never part of
a prompt. A filter narrows what one namespace holds; it never names another
namespace, so it cannot widen a read past the caller's own (DESIGN rule 1).

Limits (``check_metadata``; ``MetadataError`` otherwise, a 400 at the API):

- at most ``MAX_KEYS`` (16) keys, each matching ``KEY_RE``
  (``[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}``: no spaces, no operators);
- values: ``str`` (at most ``MAX_VALUE_CHARS`` = 200 characters after control
  characters are dropped), ``int`` within ±2**53 (exact in every JSON reader),
  finite ``float``, or ``bool``; no ``null``, list or object;
- the whole object at most ``MAX_JSON_BYTES`` (2,048) bytes of compact JSON.

Filters (``check_filters`` / ``matches``): ``{key: value}`` or ``{key: [v1, v2, …]}``
(any of at most ``MAX_CHOICES``), every key required (AND). Equality is by JSON
type: ``true`` never equals ``1``, ``"1"`` never equals ``1``; ``1`` equals
``1.0``. A memory without the key does not match.

Patches (``merged``): ``{key: value}`` sets, ``{key: None}`` removes; the
result is checked as a whole.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from memory.errors import MetadataError
from memory.types import clean_controls

__all__ = ["MAX_KEYS", "MAX_VALUE_CHARS", "MAX_JSON_BYTES", "MAX_CHOICES", "KEY_RE", "Scalar", "check_metadata",
           "check_filters", "matches", "merged", "dumps", "loads"]

MAX_KEYS = 16
MAX_VALUE_CHARS = 200
MAX_JSON_BYTES = 2048
MAX_CHOICES = 20
KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}")
_INT_LIMIT = 2 ** 53

Scalar = str | int | float | bool


def _scalar(key: str, value: Any) -> Scalar:
    """``value`` checked as a metadata value of ``key`` (strings cleaned of control characters)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > _INT_LIMIT:
            raise MetadataError(f"metadata {key!r}: integers are limited to ±2**53")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MetadataError(f"metadata {key!r}: a number must be finite")
        return value
    if isinstance(value, str):
        value = clean_controls(value)
        if len(value) > MAX_VALUE_CHARS:
            raise MetadataError(f"metadata {key!r}: a string value holds at most {MAX_VALUE_CHARS} characters")
        return value
    raise MetadataError(f"metadata {key!r}: a value is a string, number or boolean, not {type(value).__name__}")


def _key(key: Any) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise MetadataError(f"metadata key {str(key)[:50]!r} must match {KEY_RE.pattern}")
    return key


def check_metadata(value: Any) -> dict[str, Scalar]:
    """``value`` as metadata: a new dict with its keys in sorted order. Raises
    MetadataError when it is not a mapping or breaks a limit (module docstring)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MetadataError("metadata is a JSON object of string keys to scalars")
    if len(value) > MAX_KEYS:
        raise MetadataError(f"metadata holds at most {MAX_KEYS} keys")
    out = {_key(k): _scalar(k, v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if len(dumps(out).encode("utf-8")) > MAX_JSON_BYTES:
        raise MetadataError(f"metadata is at most {MAX_JSON_BYTES} bytes of JSON")
    return out


def merged(current: Mapping[str, Scalar], patch: Mapping[str, Any] | None) -> dict[str, Scalar]:
    """``current`` with ``patch`` applied (a key set to None is removed), checked
    as a whole (``check_metadata``). Raises MetadataError."""
    if patch is None:
        return dict(current)
    if not isinstance(patch, Mapping):
        raise MetadataError("a metadata patch is a JSON object")
    out = dict(current)
    for k, v in patch.items():
        if v is None:
            out.pop(_key(k), None)
        else:
            out[_key(k)] = v
    return check_metadata(out)


def check_filters(value: Any) -> dict[str, tuple[Scalar, ...]]:
    """``value`` as a filter: ``{key: scalar | [scalar, …]}`` → ``{key: (choices…)}``;
    None or ``{}`` → ``{}`` (matches everything). Raises MetadataError when it is
    not such a mapping, has more than MAX_KEYS keys, an empty or longer than
    MAX_CHOICES list, or a key or value outside the limits."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MetadataError("a metadata filter is a JSON object of keys to a value or a list of values")
    if len(value) > MAX_KEYS:
        raise MetadataError(f"a metadata filter names at most {MAX_KEYS} keys")
    out: dict[str, tuple[Scalar, ...]] = {}
    for k, v in value.items():
        key = _key(k)
        choices = list(v) if isinstance(v, (list, tuple)) else [v]
        if not choices or len(choices) > MAX_CHOICES:
            raise MetadataError(f"metadata filter {key!r}: between 1 and {MAX_CHOICES} values")
        out[key] = tuple(_scalar(key, c) for c in choices)
    return out


def _same(a: Scalar, b: Scalar) -> bool:
    """JSON equality: a boolean equals only a boolean, a string only a string, numbers by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


def matches(metadata: Mapping[str, Scalar], filters: Mapping[str, tuple[Scalar, ...]]) -> bool:
    """True when ``metadata`` has every key of ``filters`` (``check_filters``'s
    form) with one of its values; an empty filter matches everything."""
    for key, choices in filters.items():
        if key not in metadata or not any(_same(metadata[key], c) for c in choices):
            return False
    return True


def dumps(metadata: Mapping[str, Scalar]) -> str:
    """Compact, key-sorted JSON: what the store keeps (``{}`` when empty)."""
    return json.dumps(dict(metadata), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def loads(text: str | None) -> dict[str, Scalar]:
    """What the store kept, as a dict; ``{}`` for NULL, empty or unreadable text."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
