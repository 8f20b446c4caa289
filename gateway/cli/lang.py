"""The language the ``huiyi`` command line speaks to its operator, and the
messages every command shares.

Chosen per command (``locales.operator_language``), first that decides:

1. the shell's locale: ``LC_ALL``, then ``LC_MESSAGES``, then ``LANG``, as POSIX
   reads them (an empty one counts as unset) — a Chinese locale (``zh_CN.UTF-8``,
   ``zh_TW``) → zh_CN, any other that is set (``en_US.UTF-8``, ``de_DE``, ``C``,
   ``POSIX``) → en;
2. the tenant's ``language`` (``TenantSettings.language``; tenant ``default``
   for a command that names none);
3. ``locales.DEFAULT_LANGUAGE``.

The shell's locale belongs to the process, not to huiyi's settings: this module
is the one place besides ``gateway.config`` that reads ``os.environ``, and only
those three variables. What a command prints as data — JSON keys, memory texts,
ids, an error's technical detail from the core — is never translated.
"""

from __future__ import annotations

import os
from typing import NoReturn

import typer

from locales import LOCALE_VARIABLES, operator_language, translate, translate_plural

__all__ = ["Voice", "language", "sentences", "SUBJECT_KINDS", "subject_hint", "no_model", "no_memories"]

#: Subject kinds the bridges write (``tg:<id>``, ``qq:<id>``, ``wx:<openid>``,
#: ``wecom:<userid>``, the generic webhook's default ``web:<id>``) and linked
#: identities (``person:<id>``); a tenant's own ``webhook.platform`` counts too.
#: A subject of another kind is possible (``/v1/turns`` takes any platform) but
#: more often a typo, so the "no memories" messages add the format to it.
SUBJECT_KINDS = frozenset({"tg", "qq", "wx", "wecom", "web", "person"})


def language(tenant: str | None = None, settings=None) -> str:
    """The operator's language for a command about ``tenant`` (None: tenant
    ``default``), in the module docstring's order. ``settings``: the command's
    ``Settings`` (loaded here when None; a configuration that does not load
    leaves the shell and the default to decide)."""
    if settings is None:
        from gateway.config import ConfigError, load_settings

        try:
            settings = load_settings()
        except ConfigError:
            settings = None
    t = settings.tenants.get(tenant or "default") if settings is not None else None
    shell = {var: os.environ[var] for var in LOCALE_VARIABLES if var in os.environ}
    return operator_language(shell, t.language if t is not None else None)


def sentences(lang: str, *parts: str | None) -> str:
    """Translated sentences as one line: a space between them in English, none
    in Chinese (full-width punctuation ends each); empty parts left out."""
    return ("" if lang == "zh_CN" else " ").join(p for p in parts if p)


class Voice:
    """What the command line tells its operator, in ``lang`` (``zh_CN`` or ``en``)."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    @classmethod
    def of(cls, tenant: str | None = None, settings=None) -> Voice:
        """The voice for a command about ``tenant`` (see ``language``)."""
        return cls(language(tenant, settings))

    def say(self, msgid: str, *, err: bool = False, **params: object) -> None:
        """``msgid`` in this voice's language on stdout (stderr with ``err``)."""
        typer.echo(translate(self.lang, msgid, **params), err=err)

    def say_n(self, singular: str, plural: str, n: int, *, err: bool = False, **params: object) -> None:
        """The plural entry for the count ``n`` (``locales.translate_plural``) like ``say``."""
        typer.echo(translate_plural(self.lang, singular, plural, n, **params), err=err)

    def fail(self, msgid: str, *, code: int, **params: object) -> NoReturn:
        """``msgid`` on stderr, then exit with ``code``."""
        typer.echo(translate(self.lang, msgid, **params), err=True)
        raise typer.Exit(code)


def subject_hint(lang: str, subject: str, tenant_kinds: frozenset[str] | set[str] = frozenset()) -> str | None:
    """How a subject is written, for a ``subject`` that looks wrong — no
    ``platform:`` part (``42``), a kind no bridge writes (``telegram:42``,
    ``TG:42``), or one outside the pattern; None for one that looks right
    (``tg:42``; a kind in ``tenant_kinds``, such as the tenant's webhook
    platform, counts as right). The example reuses the subject's own id."""
    kind, sep, uid = subject.partition(":")
    if sep and kind in SUBJECT_KINDS | set(tenant_kinds) and uid:
        return None
    from memory.types import ID_RE

    ident = uid if sep else subject
    example = f"tg:{ident}" if ID_RE.fullmatch(ident or "") else "tg:42"
    return translate(lang, "Subjects are written <platform>:<id> in lower case, e.g. {example} (Telegram), "
                           "qq:<id> (QQ), wx:<openid> (WeChat), web:<sender_id> (the webhook) or person:<id> "
                           "(linked identities).",
                     example=example)


def no_memories(lang: str, namespace, settings=None) -> str:
    """Why a person has nothing to show: no memory kept for ``namespace`` (a
    ``memory.types.Namespace``), with the subject's format when it looks wrong
    and a word when its tenant is not configured."""
    tenant = settings.tenants.get(namespace.tenant) if settings is not None else None
    text = translate(lang, "No memories for {namespace}: nothing this person said has been kept yet, "
                           "or it was forgotten.", namespace=str(namespace))
    unknown = None
    if settings is not None and tenant is None:
        unknown = translate(lang, "Tenant {tenant} is not configured (HUIYI_CONFIG): is it the right one?",
                            tenant=namespace.tenant)
    kinds = {tenant.webhook.platform} if tenant is not None else set()
    return sentences(lang, text, unknown, subject_hint(lang, namespace.subject, kinds))


def no_model(lang: str, tenant: str) -> str:
    """How to give ``tenant`` a chat model: ``HUIYI_LLM_*`` reach tenant
    ``default`` only (gateway.config); every tenant has its ``llm`` section."""
    if tenant == "default":
        return translate(lang, "Set one with HUIYI_LLM_BASE_URL and HUIYI_LLM_MODEL (plus HUIYI_LLM_API_KEY when the "
                               "server needs a key), or base_url and model under [tenants.default.llm] in the TOML "
                               "file named by HUIYI_CONFIG.")
    return translate(lang, "Set one with base_url and model (plus api_key when the server needs a key) under "
                           "[tenants.{tenant}.llm] in the TOML file named by HUIYI_CONFIG, or with "
                           "HUIYI_TENANTS__{env}__LLM__BASE_URL and HUIYI_TENANTS__{env}__LLM__MODEL.",
                     tenant=tenant, env=tenant.upper())
