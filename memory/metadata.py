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

Filters (``check_filters`` / ``matches``), a JSON object whose every key must
match (AND):

- ``{key: value}`` — equal; ``{key: [v1, v2, …]}`` — any of (at most ``MAX_CHOICES``);
- ``{key: {"$gte": 3, "$lt": 10}}`` — a range, any of ``$gt``, ``$gte``, ``$lt``,
  ``$lte`` (every bound given must hold); a bound compares with a value of its
  own kind only: numbers by value, strings by code point (ISO 8601 dates sort
  as dates), so ``{"$gte": "2026-01"}`` never matches a number; a boolean is
  not a bound;
- ``{"$or": [filter, filter, …]}`` — at least one of 1 to ``MAX_CHOICES`` filters of the
  forms above matches (no ``$or`` inside), beside the other keys, which must still match;
  ``$or`` counts as one of a filter's at most ``MAX_KEYS`` keys.

Equality is by JSON type: ``true`` never equals ``1``, ``"1"`` never equals
``1``; ``1`` equals ``1.0``. A memory without the key matches no condition on
it. ``$`` is not a key character (``KEY_RE``), so an operator never names a key.
A filter only narrows what one namespace holds (the caller reads the candidate
rows from that namespace first).

Patches (``merged``): ``{key: value}`` sets, ``{key: None}`` removes; the
result is checked as a whole.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memory.errors import MetadataError
from memory.types import clean_controls

__all__ = ["MAX_KEYS", "MAX_VALUE_CHARS", "MAX_JSON_BYTES", "MAX_CHOICES", "KEY_RE", "OR", "RANGE_OPS", "Scalar",
           "Range", "Condition", "check_metadata", "check_filters", "matches", "merged", "dumps", "loads"]

MAX_KEYS = 16
MAX_VALUE_CHARS = 200
MAX_JSON_BYTES = 2048
MAX_CHOICES = 20
KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}")
_INT_LIMIT = 2 ** 53
#: The key of a filter's alternatives: ``{"$or": [filter, …]}``.
OR = "$or"
#: A range's bounds, each with the comparison a value must pass against it.
RANGE_OPS = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Range:
    """A range condition: ``bounds`` ``((op, bound), …)``, ``op`` one of RANGE_OPS,
    ``bound`` a number or a string; a value matches when it passes every bound."""

    bounds: tuple[tuple[str, int | float | str], ...]


#: One key's condition: any of these scalars, or a range.
Condition = tuple[Scalar, ...] | Range


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


def _condition(key: str, v: Any) -> Condition:
    """One key's condition of a filter: a scalar, a list of them or a range object
    (or a ``Range`` already checked: ``check_filters`` of its own result is that result)."""
    if isinstance(v, Range):
        return v
    if isinstance(v, Mapping):
        if not v or set(v) - set(RANGE_OPS):
            raise MetadataError(f"metadata filter {key!r}: a range is an object of {', '.join(RANGE_OPS)}")
        bounds = []
        for op, bound in sorted(v.items()):
            if isinstance(bound, bool) or not isinstance(bound, (int, float, str)):
                raise MetadataError(f"metadata filter {key!r}: {op} takes a number or a string")
            bounds.append((op, _scalar(key, bound)))
        return Range(tuple(bounds))
    choices = list(v) if isinstance(v, (list, tuple)) else [v]
    if not choices or len(choices) > MAX_CHOICES:
        raise MetadataError(f"metadata filter {key!r}: between 1 and {MAX_CHOICES} values")
    return tuple(_scalar(key, c) for c in choices)


def _clause(value: Any, nested: bool) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise MetadataError("a metadata filter is a JSON object of keys to a value, a list of values or a range")
    if len(value) > MAX_KEYS:  # $or counts as one
        raise MetadataError(f"a metadata filter names at most {MAX_KEYS} keys")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == OR and not nested:
            if not isinstance(v, (list, tuple)) or not 1 <= len(v) <= MAX_CHOICES:
                raise MetadataError(f"{OR} takes a list of 1 to {MAX_CHOICES} filters")
            out[OR] = tuple(_clause(alt, nested=True) for alt in v)
        else:
            out[_key(k)] = _condition(k, v)
    return out


def check_filters(value: Any) -> dict[str, Any]:
    """``value`` as a filter (module docstring) in the form ``matches`` reads:
    ``{key: Condition}`` (a tuple of choices, or a ``Range``), and under ``OR``
    a tuple of such dicts; None or ``{}`` → ``{}`` (matches everything). Raises
    MetadataError when it is not such a mapping, has more than MAX_KEYS keys, an
    empty or longer than MAX_CHOICES list, an unknown range operator, a boolean
    bound, an ``$or`` that is not a list of 1 to MAX_CHOICES filters or holds
    one, or a key or value outside the limits."""
    if value is None:
        return {}
    return _clause(value, nested=False)


def _same(a: Scalar, b: Scalar) -> bool:
    """JSON equality: a boolean equals only a boolean, a string only a string, numbers by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


def _within(value: Scalar, r: Range) -> bool:
    """``value`` passes every bound of ``r``; a bound of another kind (number / string) fails it."""
    if isinstance(value, bool):
        return False
    for op, bound in r.bounds:
        if isinstance(value, str) != isinstance(bound, str) or not RANGE_OPS[op](value, bound):
            return False
    return True


def _holds(metadata: Mapping[str, Scalar], key: str, cond: Condition) -> bool:
    if key not in metadata:
        return False
    if isinstance(cond, Range):
        return _within(metadata[key], cond)
    return any(_same(metadata[key], c) for c in cond)


def matches(metadata: Mapping[str, Scalar], filters: Mapping[str, Any]) -> bool:
    """True when ``metadata`` passes ``filters`` (``check_filters``'s form): every
    key's condition, and one alternative of ``OR`` when there is one; an empty
    filter matches everything."""
    for key, cond in filters.items():
        if key == OR:
            if not any(matches(metadata, alt) for alt in cond):
                return False
        elif not _holds(metadata, key, cond):
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
