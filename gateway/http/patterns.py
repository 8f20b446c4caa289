"""What ``/openapi.json`` says about the strings ``/v1`` accepts, so that a request the
schema allows is one the routes answer (schemathesis' positive-data check) and one
it forbids is one they refuse.

Each pattern is an ECMA-262 regular expression (JSON Schema's dialect), built from
the core's own definitions in ``memory.types`` so the two cannot drift apart.
Some hold a negative lookahead, which pydantic's Rust regex engine cannot run:
those are published in the schema only (``Field(json_schema_extra=...)``) while
the routes refuse the same strings through the core's checks, with their own,
clearer message (``memory.identity.resolve_subject``,
``memory.identity.platform_subject``). ``tests/gateway/http/test_openapi.py``
checks every pattern against the core's functions on samples.
"""

from __future__ import annotations

from memory.metadata import KEY_RE, MAX_CHOICES, MAX_KEYS, MAX_VALUE_CHARS, OR, RANGE_OPS
from memory.types import ID_RE, PLACEHOLDER_IDS, SHARED_SENDERS, SUBJECT_KIND_RE

__all__ = ["PERSON_ID", "SUBJECT", "CHAT_KEY", "PLATFORM", "PLAIN_ID", "SAID", "ERA_TIME", "METADATA_KEY",
           "not_shared_sender", "metadata_schema", "filters_schema"]


def _anycase(word: str) -> str:
    """``word`` matched in any case, in a regex without flags (``none`` → ``[nN][oO][nN][eE]``)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_ID = ID_RE.pattern  # [A-Za-z0-9_.@-]{1,128}
_KIND = SUBJECT_KIND_RE.pattern
#: an id that names nobody (``memory.types.is_placeholder_id``): a placeholder word in any case, or all zeros
_PLACEHOLDER = "(?:0+|" + "|".join(sorted(_anycase(w) for w in PLACEHOLDER_IDS if w)) + ")"

#: A person's platform id (``sender_id``): ID_RE but not a placeholder.
PERSON_ID = f"^(?!{_PLACEHOLDER}$){_ID}$"
#: A ``{subject}``: ``platform:id`` or ``person:id`` (memory.types.SUBJECT_RE) naming one person — no
#: placeholder id (``tg:None``, ``qq:0``) and none of the shared anonymous senders (``tg:1087968824``).
SUBJECT = (f"^(?!(?:{'|'.join(sorted(SHARED_SENDERS))})$)(?!{_KIND}:{_PLACEHOLDER}$)"
           f"{_KIND}:{_ID}$")
#: A chat key (``memory.types.ChatRef.key``): ``platform:private|group:chat_id[:thread_id]``.
CHAT_KEY = f"^{_KIND}:(?:private|group):{_ID}(?::{_ID})?$"
#: A platform code (``tg``, ``qq``, ``wx``…: memory.types.PLATFORM_RE).
PLATFORM = f"^{_KIND}$"
#: A message id (``bridges.contract._plain_id``): 1-128 characters, none of them a control character.
PLAIN_ID = "^[^\\u0000-\\u001f\\u007f-\\u009f]{1,128}$"
#: Text a person said (``memory.types.clean_controls``): at least one character that cleaning keeps.
SAID = "[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u200b\\u2060\\ufeff\\u202a-\\u202e\\u2066-\\u2069\\ufdd0-\\ufdef\\ufffe\\uffff]"


#: A time the core takes (``memory.types.in_era``): RFC 3339 in the years 1970-2099, spelled out in full so
#: that a generator makes times from it instead of filtering random ones (RFC 3339 §5.6: an offset is required).
ERA_TIME = ("^(?:19[7-9][0-9]|20[0-9][0-9])-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
            "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$")


def not_shared_sender(platform: str = "platform", sender: str = "sender_id") -> dict:
    """The JSON Schema of an object whose ``platform`` and ``sender`` fields do not
    name one of SHARED_SENDERS (``{"not": {"anyOf": [...]}}``), for a model's
    ``json_schema_extra``."""
    by_platform: dict[str, list[str]] = {}
    for identity in SHARED_SENDERS:
        p, uid = identity.split(":", 1)
        by_platform.setdefault(p, []).append(uid)
    return {"not": {"anyOf": [{"required": [platform, sender],
                               "properties": {platform: {"const": p}, sender: {"enum": sorted(ids)}}}
                              for p, ids in sorted(by_platform.items())]}}


#: A metadata key (``memory.metadata.KEY_RE``): no spaces, no operators, no ``$``.
METADATA_KEY = f"^{KEY_RE.pattern}$"

_STRING = {"type": "string", "maxLength": MAX_VALUE_CHARS}
_SCALARS = [_STRING, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}]


def metadata_schema(patch: bool = False) -> dict:
    """The JSON Schema of a memory's metadata (``memory.metadata.check_metadata``): at
    most MAX_KEYS keys matching METADATA_KEY to a scalar; with ``patch`` a value may be
    null (the key is removed). The 2 KiB bound on the whole object is the route's to say."""
    values = _SCALARS + ([{"type": "null"}] if patch else [])
    return {"type": "object", "maxProperties": MAX_KEYS, "propertyNames": {"pattern": METADATA_KEY},
            "additionalProperties": {"anyOf": values}}


def filters_schema() -> dict:
    """The JSON Schema of a metadata filter (``memory.metadata.check_filters``): keys
    matching METADATA_KEY to a scalar, a list of 1 to MAX_CHOICES scalars (any of) or a
    range (``$gt``/``$gte``/``$lt``/``$lte``, a number or a string each), and ``$or``,
    a list of 1 to MAX_CHOICES such filters (without ``$or``); at most MAX_KEYS keys."""
    bound = {"anyOf": [{"type": "number"}, _STRING]}
    condition = {"anyOf": [*_SCALARS,
                           {"type": "array", "minItems": 1, "maxItems": MAX_CHOICES, "items": {"anyOf": _SCALARS}},
                           {"type": "object", "minProperties": 1, "additionalProperties": False,
                            "properties": {op: bound for op in RANGE_OPS}}]}
    clause = {"type": "object", "maxProperties": MAX_KEYS, "propertyNames": {"pattern": METADATA_KEY},
              "additionalProperties": condition}
    return {"type": "object", "maxProperties": MAX_KEYS,
            "propertyNames": {"pattern": f"^(?:\\{OR}|{KEY_RE.pattern})$"},
            "properties": {OR: {"type": "array", "minItems": 1, "maxItems": MAX_CHOICES, "items": clause}},
            "additionalProperties": condition}
