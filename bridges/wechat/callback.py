"""The WeChat callback protocol for one tenant: signatures, AES, passive replies.

Official Account (``kind = "oa"``):

- URL verification ``GET ?signature&timestamp&nonce&echostr``: ``signature`` is
  SHA1 of the sorted ``[token, timestamp, nonce]``; answer ``echostr`` as is.
- Messages ``POST``: plaintext mode is signed with ``signature`` as above; safe
  mode (``encrypt_type=aes``) adds ``msg_signature`` = SHA1 of the sorted
  ``[token, timestamp, nonce, Encrypt]`` and the body carries ``Encrypt``
  (AES-256-CBC with the EncodingAESKey, PKCS#7, app id appended).

WeCom (``kind = "wecom"``) always uses safe mode: ``msg_signature`` on the GET
(its ``echostr`` is encrypted and the answer is the decrypted text) and on
every POST; the receive id is the CorpID.

Crypto is wechatpy's (``wechatpy.crypto`` / ``wechatpy.enterprise.crypto``);
signatures are compared in constant time here before wechatpy decrypts.
Passive replies are built here (not with wechatpy's ``TextReply``, which puts
text into CDATA without splitting ``]]>``) and encrypted in safe mode.

Errors::

    CallbackError            base
    ├── SignatureError       a signature is missing or wrong (→ 401)
    └── NotConfigured        the tenant has no callback token (→ 401)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any

from bridges.wechat.parse import PLATFORM_OA, PLATFORM_WECOM, parse_xml

__all__ = ["WeChatCallback", "CallbackError", "SignatureError", "NotConfigured", "sha1_signature", "cdata",
           "text_reply_xml"]


class CallbackError(Exception):
    """Base class of WeChat callback errors."""


class SignatureError(CallbackError):
    """A signature is missing or does not match."""


class NotConfigured(CallbackError):
    """The tenant has no WeChat callback token."""


def sha1_signature(*parts: str) -> str:
    """WeChat's signature: hex SHA1 of the sorted parts, concatenated."""
    return hashlib.sha1("".join(sorted(parts)).encode("utf-8")).hexdigest()


def _same(expected: str, got: str | None) -> bool:
    return got is not None and hmac.compare_digest(expected.encode("ascii"), got.encode("utf-8", "replace"))


def cdata(text: str) -> str:
    """``text`` as CDATA; a ``]]>`` inside is split across two sections."""
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def text_reply_xml(*, to_user: str, from_user: str, text: str, agent_id: str | None = None,
                   now: int | None = None) -> str:
    """A passive text reply (plaintext XML)."""
    parts = [f"<ToUserName>{cdata(to_user)}</ToUserName>", f"<FromUserName>{cdata(from_user)}</FromUserName>",
             f"<CreateTime>{int(now if now is not None else time.time())}</CreateTime>",
             f"<MsgType>{cdata('text')}</MsgType>", f"<Content>{cdata(text)}</Content>"]
    if agent_id:
        parts.append(f"<AgentID>{int(agent_id)}</AgentID>")
    return "<xml>" + "".join(parts) + "</xml>"


class WeChatCallback:
    """Callback handling for one tenant's ``WeChatSettings`` (``kind``, ``token``,
    ``encoding_aes_key``, ``app_id``, ``agent_id``). Safe mode is on when an
    EncodingAESKey is configured (always required for WeCom)."""

    def __init__(self, cfg: Any) -> None:
        if not cfg.token:
            raise NotConfigured("no WeChat callback token configured")
        if cfg.kind not in ("oa", "wecom"):
            raise NotConfigured(f"unknown WeChat kind {cfg.kind!r} (oa or wecom)")
        self.cfg = cfg
        self.platform = PLATFORM_WECOM if cfg.kind == "wecom" else PLATFORM_OA
        self._crypto = None
        if cfg.encoding_aes_key:
            if not cfg.app_id:
                raise NotConfigured("safe mode needs app_id (OA AppID or WeCom CorpID)")
            if cfg.kind == "wecom":
                from wechatpy.enterprise.crypto import WeChatCrypto
            else:
                from wechatpy.crypto import WeChatCrypto
            self._crypto = WeChatCrypto(cfg.token, cfg.encoding_aes_key, cfg.app_id)
        elif cfg.kind == "wecom":
            raise NotConfigured("WeCom callbacks are always encrypted: set encoding_aes_key")

    @property
    def encrypted(self) -> bool:
        """Safe (AES) mode."""
        return self._crypto is not None

    def verify_url(self, query: Mapping[str, str]) -> str:
        """The answer to the URL-verification GET (the echo). Raises SignatureError."""
        timestamp, nonce, echostr = query.get("timestamp", ""), query.get("nonce", ""), query.get("echostr", "")
        if self.cfg.kind == "wecom":
            self._check_msg_signature(query, echostr)
            return self._decrypt(echostr)
        if not _same(sha1_signature(self.cfg.token, timestamp, nonce), query.get("signature")):
            raise SignatureError("wrong or missing signature")
        return echostr

    def open(self, query: Mapping[str, str], body: bytes) -> dict[str, str] | None:
        """Check a POSTed callback and return its plaintext fields (``parse_xml``),
        or None when the (decrypted) body is not callback XML. Raises
        SignatureError for a wrong or missing signature, or a body that does not
        decrypt for this account."""
        if self.cfg.kind == "oa" and not _same(
                sha1_signature(self.cfg.token, query.get("timestamp", ""), query.get("nonce", "")),
                query.get("signature")):
            raise SignatureError("wrong or missing signature")
        if not self.encrypted:
            return parse_xml(body)
        outer = parse_xml(body)
        if outer is None or not outer.get("Encrypt"):
            raise SignatureError("safe mode: body has no Encrypt element")
        self._check_msg_signature(query, outer["Encrypt"])
        return parse_xml(self._decrypt(outer["Encrypt"]))

    def seal(self, reply_xml: str, query: Mapping[str, str]) -> str:
        """The HTTP body for a passive reply: ``reply_xml`` as is in plaintext mode,
        else encrypted and signed (``Encrypt``/``MsgSignature``/``TimeStamp``/``Nonce``)."""
        if not self.encrypted:
            return reply_xml
        timestamp = query.get("timestamp") or str(int(time.time()))
        return self._crypto.encrypt_message(reply_xml, query.get("nonce", ""), timestamp)  # type: ignore[union-attr]

    def reply_xml(self, fields: Mapping[str, str], text: str) -> str:
        """A passive text reply to the message ``fields``."""
        return text_reply_xml(to_user=fields.get("FromUserName", ""), from_user=fields.get("ToUserName", ""),
                              text=text, agent_id=fields.get("AgentID") or None)

    # -- safe mode ----------------------------------------------------------

    def _check_msg_signature(self, query: Mapping[str, str], encrypted: str) -> None:
        if self._crypto is None:
            raise SignatureError("encrypted callback but no encoding_aes_key configured")
        expected = sha1_signature(self.cfg.token, query.get("timestamp", ""), query.get("nonce", ""), encrypted)
        if not _same(expected, query.get("msg_signature")):
            raise SignatureError("wrong or missing msg_signature")

    def _decrypt(self, encrypted: str) -> str:
        if self.cfg.kind == "wecom":
            from wechatpy.enterprise.crypto import PrpCrypto
        else:
            from wechatpy.crypto import PrpCrypto
        try:
            return PrpCrypto(self._crypto.key).decrypt(encrypted, self.cfg.app_id)  # type: ignore[union-attr]
        except Exception as exc:  # wrong key, padding or receive id: not for this account
            raise SignatureError(f"payload does not decrypt for this account: {type(exc).__name__}") from exc
