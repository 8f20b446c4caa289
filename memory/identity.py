"""Identity: which subject a sender is, as one tenant knows them.

A platform identity is ``<platform>:<user id>`` (``tg:123``, ``qq:10001``).
Unlinked, it is its own subject. Once a tenant admin links several platform
identities (``memory.admin.link``), each of them resolves to one subject
``person:<id>`` and all of its memories live in that namespace, so recall from
any of the linked platform ids finds them all.

The links live in the SQL store (``identities`` table); resolution is one
indexed read per turn.
"""

from __future__ import annotations

from memory.errors import NamespaceError
from memory.types import PLACEHOLDER_IDS, SUBJECT_RE, Namespace, is_placeholder_id, not_a_person

__all__ = ["PERSON", "PLACEHOLDER_IDS", "is_placeholder_id", "platform_subject", "resolve", "resolve_subject",
           "is_platform_subject", "resolve_with_pause"]

#: Subject kind of a linked person.
PERSON = "person"

def platform_subject(platform: str, user_id: str) -> str:
    """``"<platform>:<user_id>"``, validated. Raises NamespaceError when outside the
    patterns, or when ``user_id`` is a placeholder (``is_placeholder_id``): such an
    identity fails closed instead of becoming one person shared by every caller."""
    if is_placeholder_id(user_id):
        raise NamespaceError(f"sender id {user_id!r} is a placeholder, not a person's id")
    subject = f"{platform}:{user_id}"
    if not isinstance(platform, str) or not isinstance(user_id, str) or SUBJECT_RE.fullmatch(subject) is None:
        raise NamespaceError(f"invalid platform identity: {subject!r}")
    return subject


def is_platform_subject(subject: str) -> bool:
    """True for a well-formed subject that names a platform identity (not ``person:…``)."""
    return isinstance(subject, str) and SUBJECT_RE.fullmatch(subject) is not None \
        and not subject.startswith(PERSON + ":")


def resolve_subject(store, tenant: str, subject: str) -> Namespace:
    """The namespace of ``subject`` in ``tenant``: a linked platform identity
    resolves to its ``person:…`` subject, anything else to itself. Raises
    NamespaceError for a tenant or subject outside its pattern, or one that names
    nobody in particular (``memory.types.not_a_person``: ``tg:None``, ``tg:0``,
    ``person:null``, ``tg:1087968824``…)."""
    ns = Namespace(tenant, subject)
    reason = not_a_person(*subject.split(":", 1))
    if reason:
        raise NamespaceError(f"subject {subject}: {reason}")
    if not is_platform_subject(subject):
        return ns
    linked = store.resolve_identity(tenant, subject)
    return Namespace(tenant, linked) if linked else ns


def resolve_with_pause(store, tenant: str, platform: str, user_id: str, chat: str, now) -> tuple[Namespace, bool]:
    """``resolve`` and whether the sender has ``chat`` (a pause key) off the record
    at ``now`` (``Store.paused`` of the namespace resolved), in one read
    (``Store.identity_and_pause``). Raises NamespaceError as ``resolve``."""
    subject = platform_subject(platform, user_id)
    ns = Namespace(tenant, subject)
    reason = not_a_person(*subject.split(":", 1))
    if reason:
        raise NamespaceError(f"subject {subject}: {reason}")
    if not is_platform_subject(subject):
        return ns, store.paused(ns, chat, now) is not None
    linked, pause = store.identity_and_pause(tenant, subject, chat, now)
    return (Namespace(tenant, linked) if linked else ns), pause is not None


def resolve(store, tenant: str, platform: str, user_id: str) -> Namespace:
    """The namespace of a sender: ``Namespace(tenant, "tg:123")``, or the linked
    ``person:…`` subject. Raises NamespaceError for ids outside their patterns."""
    return resolve_subject(store, tenant, platform_subject(platform, user_id))
