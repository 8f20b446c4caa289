"""Recognise and expand IM payloads (pure; no parser imports).

``iter_payloads`` flattens the containers that recorded payloads come in;
``detect_platform`` says which bridge parser a single payload belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["detect_platform", "iter_payloads", "iter_labelled_payloads"]


def detect_platform(payload: dict) -> str | None:
    """Platform code of one payload: ``"qq"``, ``"tg"`` or None.

    ``"qq"`` for a OneBot v11 event (has ``post_type``); ``"tg"`` for a
    Telegram Update (has ``update_id``) or a bare Message (``message_id``
    plus a ``chat`` object); None for anything else, including non-dicts and
    containers such as a getUpdates response. Never raises.
    """
    if not isinstance(payload, dict):
        return None
    if "post_type" in payload:
        return "qq"
    if "update_id" in payload:
        return "tg"
    if "message_id" in payload and isinstance(payload.get("chat"), dict):
        return "tg"
    return None


def iter_labelled_payloads(obj: Any) -> Iterator[tuple[str, dict]]:
    """Yield ``(label, payload)`` for each object in a recorded container.

    Shapes, checked in this order:

    - a getUpdates response ``{"ok": ..., "result": [...]}`` → each dict in
      ``result``, labelled ``"result[i]"``;
    - a JSON array → each dict item, labelled ``"[i]"``;
    - a dict that ``detect_platform`` recognises → itself, labelled ``""``;
    - any other dict (e.g. aiogram's test dataset of named objects) → each
      dict value, labelled with its key; keys starting with ``_`` are
      metadata and skipped.

    Nothing is validated beyond that: a yielded dict may still be something
    ``detect_platform`` rejects (a User, a Chat). Never raises.
    """
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, dict):
                yield f"[{i}]", item
    elif isinstance(obj, dict):
        if "ok" in obj and isinstance(obj.get("result"), list):
            for i, item in enumerate(obj["result"]):
                if isinstance(item, dict):
                    yield f"result[{i}]", item
        elif detect_platform(obj) is not None:
            yield "", obj
        else:
            for key, value in obj.items():
                if isinstance(value, dict) and not str(key).startswith("_"):
                    yield str(key), value


def iter_payloads(obj: Any) -> Iterator[dict]:
    """Yield each payload in ``obj``; see ``iter_labelled_payloads`` for the shapes."""
    for _, payload in iter_labelled_payloads(obj):
        yield payload
