"""Errors of the memory core.

Exception tree::

    CoreError                      base of everything raised by memory/
    ├── NamespaceError             a namespace, subject or chat id outside its strict pattern
    ├── NotFoundError              no such memory in this namespace (never "in another one")
    ├── MetadataError              metadata or a metadata filter outside its limits (memory.metadata)
    ├── KeyTakenError              an edit's text is what another memory of the namespace holds (its key)
    ├── StoreError                 the SQL store failed (connection, integrity)
    ├── SearchIndexError           the LanceDB index failed; SQL still holds the truth
    ├── EmbedderError              the embedder could not embed (model missing, endpoint down)
    ├── DuplicateDelivery          a platform delivery claimed before (the chat-log append wrote nothing)
    └── NonceUsed                  a signed callback's nonce claimed before (the chat-log append wrote nothing)

The gateway maps these to HTTP status codes in exactly one place
(``gateway/errors.py``). No name here shadows a builtin.
"""

from __future__ import annotations

__all__ = [
    "CoreError",
    "NamespaceError",
    "NotFoundError",
    "MetadataError",
    "KeyTakenError",
    "StoreError",
    "SearchIndexError",
    "EmbedderError",
    "DuplicateDelivery",
    "NonceUsed",
]


class CoreError(Exception):
    """Base class of every error raised by the memory core."""


class NamespaceError(CoreError, ValueError):
    """A tenant, subject, namespace string or chat id does not match its strict pattern."""


class NotFoundError(CoreError, LookupError):
    """The memory does not exist in the namespace asked about."""


class MetadataError(CoreError, ValueError):
    """Metadata of a memory, or a filter on it, outside its limits (``memory.metadata``)."""


class KeyTakenError(CoreError):
    """An edit would move a memory to the canonical key (slot) another live memory
    of the same namespace holds — ``holder``, its id: the new text says what that
    one says. Nothing was written."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class StoreError(CoreError):
    """The SQL store failed."""


class SearchIndexError(CoreError):
    """The search index failed; the SQL store remains the source of truth."""


class EmbedderError(CoreError):
    """The embedder could not produce vectors."""


class DuplicateDelivery(CoreError):
    """A platform delivery that was already claimed (``Store.append_chat`` with
    ``claim``): the message was processed before and nothing was written."""


class NonceUsed(CoreError):
    """A signed platform callback's nonce that was claimed before (``Store.append_chat``
    with ``nonce``): nothing was written. ``digest`` is what the first claim
    recorded with it (the first request's body hash, ``""`` when none), so the
    caller can tell a platform's identical retry from a replay with another body."""

    def __init__(self, digest: str) -> None:
        super().__init__("nonce already used")
        self.digest = digest
