"""huiyi as a NoneBot2 plugin: OneBot v11 messages → the pipeline → replies.

Loaded by the gateway's own NoneBot2 host (``bridges.qq.host``), which binds
its pipeline (``bind``), or — in an existing NoneBot2 bot with the OneBot v11
adapter — through ``gateway.huiyi_nonebot``, which registers a factory
(``build_with``) that builds a pipeline from huiyi's settings on the first
message; a pipeline built that way is closed at driver shutdown. This module
knows the pipeline only through ``bridges.contract.TurnHandler``: it never
imports the gateway.

Each message event is turned back into the OneBot v11 JSON the
implementation sent (with the message as it arrived, before NoneBot strips
the @-mention and reply segments) and parsed by ``bridges.qq.parse``, so
hosted, standalone and HTTP quick-operation paths see the same
``InboundMessage``. NoneBot's ``to_me`` (@-mention, reply to the bot, or the
bot's nickname) also counts as addressing the bot. Anonymous group messages,
the bot's own messages and non-text events are ignored by the parser. A
re-delivered event (same message id in the same chat) is a duplicate turn:
no second reply, no second capture. In groups the reply carries a ``reply``
segment pointing at the person's message. The matcher does not block:
other plugins still see every message.

Withdrawals: ``friend_recall`` / ``group_recall`` notices (``parse_recall``)
go to the pipeline's ``withdraw``: the message's chat-log line is redacted and
what it taught retracted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nonebot import get_driver, on_message, on_notice
from nonebot.adapters.onebot.v11 import (Bot, FriendRecallNoticeEvent, GroupMessageEvent, GroupRecallNoticeEvent,
                                         Message, MessageEvent, MessageSegment)
from nonebot.plugin import PluginMetadata
from pydantic import ValidationError

from bridges.qq.parse import parse_event, parse_recall

__all__ = ["bind", "unbind", "build_with", "handle_event", "handle_recall", "event_payload", "tenant_for"]

log = logging.getLogger(__name__)

__plugin_meta__ = PluginMetadata(
    name="huiyi",
    description="Long-term memory for a companion bot: recall, reply and capture through the huiyi gateway",
    usage="Talk to the bot in private, or @-mention / reply to it in a group.",
    type="application",
    supported_adapters={"~onebot.v11"},
)

_state: dict[str, Any] = {"pipeline": None, "owned": False, "factory": None, "alongside": None, "task": None}
_build_lock = asyncio.Lock()


def bind(pipeline: Any) -> None:
    """Use ``pipeline`` (a ``gateway.pipeline.Pipeline``) for every message."""
    _state["pipeline"], _state["owned"] = pipeline, False


def unbind(pipeline: Any) -> None:
    """Forget ``pipeline`` if it is the bound one (stopping what runs alongside a built one)."""
    if _state["pipeline"] is pipeline:
        _state["pipeline"], _state["owned"] = None, False
        task, _state["task"] = _state["task"], None
        if task is not None:
            task.cancel()


def build_with(factory: Callable[[], Any], alongside: Callable[[Any], Awaitable[None]] | None = None) -> None:
    """Standalone use: build the pipeline with ``factory()`` (a blocking call, run
    in a thread) on the first message, unless one was bound first, and then run
    ``alongside(pipeline)`` as a task until shutdown (the gateway's maintenance:
    resuming queued captures, index repair)."""
    _state["factory"], _state["alongside"] = factory, alongside


async def _pipeline() -> Any:
    if _state["pipeline"] is not None:
        return _state["pipeline"]
    async with _build_lock:
        if _state["pipeline"] is None and _state["factory"] is not None:  # standalone: the plugin runs huiyi itself
            _state["pipeline"] = await asyncio.to_thread(_state["factory"])
            _state["owned"] = True
            if _state["alongside"] is not None:
                _state["task"] = asyncio.create_task(_state["alongside"](_state["pipeline"]))
    return _state["pipeline"]


@get_driver().on_shutdown
async def _close_owned() -> None:
    if _state["owned"] and _state["pipeline"] is not None:
        pipeline = _state["pipeline"]
        unbind(pipeline)
        if not await pipeline.drain(timeout=30):
            log.warning("qq: captures still running at shutdown; they resume at the next start of a gateway")
        await asyncio.to_thread(pipeline.core.close)


def tenant_for(pipeline: Any, self_id: str) -> str:
    """The tenant whose ``qq.self_ids`` lists the bot, else ``onebot.default_tenant``."""
    for name, tenant in pipeline.settings.tenants.items():
        if str(self_id) in tenant.qq.self_ids:
            return name
    return pipeline.settings.onebot.default_tenant


def event_payload(event: MessageEvent) -> dict:
    """The OneBot v11 JSON of ``event`` with the message as it arrived (array form)."""
    payload = event.model_dump(exclude={"message", "original_message", "to_me", "reply"})
    payload["message"] = [{"type": seg.type, "data": dict(seg.data)} for seg in event.original_message]
    return payload


async def handle_event(bot: Bot, event: MessageEvent) -> Any:
    """Run one turn for ``event`` and send its reply; returns the TurnResult, or
    None when the event is not a person's text message. The capture runs after
    the reply (``Pipeline.drain`` awaits it). Send failures are logged (the
    turn is already done and its capture queued)."""
    pipeline = await _pipeline()
    if pipeline is None:
        log.warning("qq: no huiyi pipeline bound (load gateway.huiyi_nonebot in a bot of your own); event ignored")
        return None
    try:
        msg = parse_event(event_payload(event))
    except ValidationError as exc:  # a placeholder sender id: fails closed, nobody to answer
        log.warning("qq: event refused: %s", exc.errors(include_url=False, include_input=False))
        return None
    if msg is None:
        return None
    updates: dict[str, Any] = {}
    if msg.chat.is_group and event.to_me and not msg.mentions_bot:
        updates["mentions_bot"] = True
    reply = event.reply
    if msg.reply_to is not None and reply is not None and reply.sender.user_id is not None:
        updates["reply_to"] = msg.reply_to.model_copy(update={
            "sender_id": str(reply.sender.user_id), "sender_is_bot": str(reply.sender.user_id) == str(bot.self_id)})
    if updates:
        msg = msg.model_copy(update=updates)
    # the capture runs after the reply (durably: it is committed with the message's chat-log line)
    result = await pipeline.handle(tenant_for(pipeline, bot.self_id), msg, background_capture=True)
    if result.reply and not result.duplicate:
        out = Message(MessageSegment.text(result.reply))
        if isinstance(event, GroupMessageEvent):
            out = MessageSegment.reply(event.message_id) + out
        try:
            await bot.send(event, out)
        except Exception as exc:  # noqa: BLE001 - network/API failures of the OneBot implementation
            log.warning("qq: reply to %s failed: %s: %s", msg.chat.key, type(exc).__name__, exc)
    return result


_matcher = on_message(priority=50, block=False)


@_matcher.handle()
async def _on_message(bot: Bot, event: MessageEvent) -> None:
    await handle_event(bot, event)


async def handle_recall(bot: Bot, event: FriendRecallNoticeEvent | GroupRecallNoticeEvent) -> list[str] | None:
    """Withdraw the recalled message from the pipeline; returns the memory ids
    retracted, or None when no pipeline is bound or the notice is malformed."""
    pipeline = await _pipeline()
    if pipeline is None:
        log.warning("qq: no huiyi pipeline bound; recall notice ignored")
        return None
    withdrawal = parse_recall(event.model_dump())
    if withdrawal is None:
        return None
    return await pipeline.withdraw(tenant_for(pipeline, bot.self_id), withdrawal)


_recalls = on_notice(priority=50, block=False)


@_recalls.handle()
async def _on_recall(bot: Bot, event: FriendRecallNoticeEvent | GroupRecallNoticeEvent) -> None:
    await handle_recall(bot, event)
