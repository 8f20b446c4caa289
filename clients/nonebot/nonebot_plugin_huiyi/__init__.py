"""nonebot_plugin_huiyi: a NoneBot2 bot's messages through huiyi, remote or embedded.

Remote mode (``HUIYI_MODE=remote``, the default): every text message event of the OneBot v11 adapter becomes a
turn of the gateway (``POST /v1/turns`` through ``huiyi_client``): the gateway
recalls, builds the recollection and prompt, asks the tenant's model, captures
the message, and its reply is sent back (in a group as a reply to the person's
message). ``/memory`` and ``/记忆`` are answered by the gateway like on every
platform. A withdrawn message (``friend_recall`` / ``group_recall``) is withdrawn in
the gateway too (``POST /v1/withdrawals``): what it taught is forgotten. The memory, its maintenance and its heavy dependencies stay in the
gateway; this plugin imports only NoneBot, the adapter and the client — no
top-level ``memory`` or ``gateway`` package, so it loads in a bot that has a
``memory.py`` of its own.

Embedded mode (``HUIYI_MODE=embedded``): the gateway's core runs in the bot's
process, with the gateway's own bridge plugin answering; see ``.embedded``
(data under ``nonebot_plugin_localstore``, maintenance as a background task,
and why a bot with its own ``memory.py`` cannot embed it). The mode is read
once, when the plugin loads.

Configuration comes from the bot's ``.env`` (``get_plugin_config``; ``Config``).
The matcher does not block: other plugins see every message. A gateway that
cannot be reached is logged and the message gets no reply from here.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from nonebot import get_driver, get_plugin_config, on_message, on_notice
from nonebot.adapters.onebot.v11 import (Bot, FriendRecallNoticeEvent, GroupMessageEvent, GroupRecallNoticeEvent,
                                         MessageEvent, MessageSegment)
from nonebot.plugin import PluginMetadata

from huiyi_client import AsyncHuiyi, HuiyiError

from .config import Config

__all__ = ["Config", "turn_message", "withdrawal", "client", "MODE", "HOMEPAGE"]

log = logging.getLogger(__name__)



def _homepage() -> str | None:
    """The installed distribution's ``Project-URL: Homepage`` (pyproject's ``[project.urls]``), or None: the
    repository has no public address yet, and a made-up one would send people nowhere. Set it there when
    the plugin is published; until then NoneBot shows no homepage."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("nonebot-plugin-huiyi").get_all("Project-URL") or []
    except PackageNotFoundError:  # a source checkout on sys.path, not installed
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "homepage" and url.strip():
            return url.strip()
    return None


#: Where the plugin is documented, from its package metadata (``_homepage``); None until it is published.
HOMEPAGE = _homepage()

__plugin_meta__ = PluginMetadata(
    name="huiyi 回忆",
    description="Long-term memory for a companion bot: recall, reply and capture through a huiyi gateway",
    usage="Talk to the bot in private, or @-mention / reply to it in a group. "
          "/memory (or /记忆) help | list | search | edit | forget | export manages what it remembers.",
    type="application",
    homepage=HOMEPAGE,
    config=Config,
    supported_adapters={"~onebot.v11"},
)

#: The mode this process runs, read once when the plugin loads.
MODE = get_plugin_config(Config).huiyi_mode

if MODE == "embedded":
    from . import embedded

    embedded.setup()  # EmbeddingBlocked stops the plugin from loading, with the reason

_clients: dict[tuple[str, str | None, str | None, float], AsyncHuiyi] = {}


def client() -> AsyncHuiyi:
    """The client for the current configuration (one per URL, key, tenant and timeout)."""
    cfg = get_plugin_config(Config)
    key = (cfg.huiyi_url, cfg.huiyi_api_key, cfg.huiyi_tenant, cfg.huiyi_timeout)
    if key not in _clients:
        _clients[key] = AsyncHuiyi(cfg.huiyi_url, cfg.huiyi_api_key, tenant=cfg.huiyi_tenant,
                                   timeout=cfg.huiyi_timeout)
    return _clients[key]


def turn_message(event: MessageEvent) -> dict | None:
    """The gateway's platform-neutral message (``InboundMessage`` JSON) for a
    OneBot v11 message event; None for what is not a person's text (anonymous
    group messages, empty text)."""
    text = event.get_plaintext().strip()
    group = isinstance(event, GroupMessageEvent)
    if not text or (group and event.anonymous is not None):
        return None
    sender = event.sender
    me = str(event.self_id)
    # NoneBot's to_me, and the message as it arrived (before the adapter strips a leading @bot or a reply):
    # an @-mention of this bot anywhere, or a reply to one of its messages, addresses it too
    ats = {str(seg.data.get("qq")) for seg in event.original_message if seg.type == "at"}
    replied = event.reply is not None and str(event.reply.sender.user_id or "") == me
    return {
        "platform": "qq", "message_id": str(event.message_id), "sender_id": str(event.user_id),
        "sender_name": (sender.card or sender.nickname or "") if sender else "",
        "chat_kind": "group" if group else "private",
        "chat_id": str(event.group_id if group else event.user_id),
        "text": text, "timestamp": datetime.fromtimestamp(event.time, timezone.utc).isoformat(),
        "mentions_bot": event.is_tome() or me in ats or replied, "is_command": text.startswith("/"),
        "sender_role": sender.role if sender and group else None, "bot_id": str(event.self_id),
    }


def withdrawal(event: FriendRecallNoticeEvent | GroupRecallNoticeEvent) -> dict:
    """The gateway's ``Withdrawal`` JSON for a OneBot v11 withdrawal notice: ``user_id``
    wrote ``message_id`` (in ``group_id`` for a group_recall, withdrawn by ``operator_id``)."""
    group = isinstance(event, GroupRecallNoticeEvent)
    return {"platform": "qq", "message_id": str(event.message_id), "sender_id": str(event.user_id),
            "chat_kind": "group" if group else "private", "chat_id": str(event.group_id if group else event.user_id),
            "operator_id": str(event.operator_id if group else event.user_id)}


turns = on_message(priority=50, block=False)
recalls = on_notice(priority=50, block=False)


@recalls.handle()
async def _on_recall(event: FriendRecallNoticeEvent | GroupRecallNoticeEvent) -> None:
    """A withdrawn message is withdrawn in the gateway too: what it taught is forgotten there."""
    if MODE != "remote":  # embedded: the gateway's bridge plugin handles the notice
        return
    try:
        await client().withdraw(withdrawal(event))
    except Exception as exc:  # noqa: BLE001 - HuiyiError or a transport error; the bot goes on
        log.warning("huiyi withdrawal of qq:%s message %s failed: %s", event.user_id, event.message_id, exc)


@turns.handle()
async def _on_message(bot: Bot, event: MessageEvent) -> None:
    if MODE != "remote":  # embedded: the gateway's bridge plugin answers
        return
    msg = turn_message(event)
    if msg is None:
        return
    try:
        result = await client().turn(msg)
    except (HuiyiError, OSError) as exc:
        log.warning("huiyi turn for qq:%s failed: %s", event.user_id, exc)
        return
    except Exception as exc:  # noqa: BLE001 - httpx transport errors; the bot goes on
        log.warning("huiyi turn for qq:%s failed: %s", event.user_id, exc)
        return
    if not result.reply or result.duplicate or not get_plugin_config(Config).huiyi_reply:
        return
    if isinstance(event, GroupMessageEvent):
        await bot.send(event, MessageSegment.reply(event.message_id) + MessageSegment.text(result.reply))
    else:
        await bot.send(event, result.reply)


@get_driver().on_shutdown
async def _close() -> None:
    for c in list(_clients.values()):
        await c.aclose()
    _clients.clear()
