"""aiogram 3 hooks over the client: a middleware that puts the turn's memory into
handler data, and a Router with the ``/memory`` commands (remote mode: the
memory lives in a running huiyi gateway; needs ``aiogram`` besides httpx).

::

    from aiogram import Dispatcher, Router
    from huiyi_client import AsyncHuiyi
    from huiyi_client.aiogram import HuiyiMiddleware, memory_router

    hy = AsyncHuiyi("http://127.0.0.1:8080", api_key="hy_…")   # an admin key: the bot speaks for everyone
    dp, chats = Dispatcher(), Router()
    # /memory and /记忆 first: aiogram tries a router's own handlers, then its routers in order
    dp.include_routers(memory_router(hy), chats)
    dp.message.middleware(HuiyiMiddleware(hy))

    @chats.message()
    async def chat(message, huiyi: Recollection, huiyi_record_reply):
        answer = await my_model(huiyi.prompt)                   # the persona + recollection block + tail
        await message.answer(answer)
        await huiyi_record_reply(answer)                         # the tail now holds the bot's answer

Handler data set by ``HuiyiMiddleware`` for a text message from a person:
``huiyi`` (``Recollection``: ``text``, ``sources``, ``prompt``…, or None when
the gateway could not be reached — the chat never waits on the memory),
``huiyi_subject`` (``tg:<user id>``), ``huiyi_chat`` (the chat key) and
``huiyi_record_reply`` (a coroutine function recording the bot's answer in
that chat's tail). The message joins the chat's stored tail before the
handler (as a gateway turn logs it) and is captured after it (``capture``),
unless it is a command. Other updates pass through untouched.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware, Router
from aiogram.filters import Command
from aiogram.types import BufferedInputFile, Message, TelegramObject

from huiyi_client import AsyncHuiyi, HuiyiError
from huiyi_client import Message as Line

__all__ = ["HuiyiMiddleware", "memory_router", "chat_key", "subject_of"]

log = logging.getLogger(__name__)

#: Group roles that may manage others' memories in their group (as the gateway names them).
_ADMIN_STATUSES = {"creator", "administrator"}


def subject_of(message: Message) -> str | None:
    """``tg:<user id>`` of the sender, None for messages without a person (channel posts)."""
    return f"tg:{message.from_user.id}" if message.from_user is not None else None


def chat_key(message: Message) -> str:
    """The gateway's chat key: ``tg:private:<id>`` or ``tg:group:<id>[:<topic>]``."""
    if message.chat.type == "private":
        return f"tg:private:{message.chat.id}"
    thread = f":{message.message_thread_id}" if message.is_topic_message and message.message_thread_id else ""
    return f"tg:group:{message.chat.id}{thread}"


def _line(message: Message) -> Line:
    user = message.from_user
    return Line(message.text or message.caption or "", message_id=str(message.message_id),
                sender_name=user.full_name if user else None, timestamp=message.date)


class HuiyiMiddleware(BaseMiddleware):
    """Message middleware (register with ``dp.message.middleware(...)``): recollection
    before the handler, capture after it (``capture=False`` leaves capture to you).
    Gateway failures are logged and leave ``huiyi`` None; they never stop the handler."""

    def __init__(self, client: AsyncHuiyi, *, capture: bool = True) -> None:
        self.client = client
        self.capture = capture

    async def __call__(self, handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
                       event: TelegramObject, data: dict[str, Any]) -> Any:
        if not isinstance(event, Message) or not (event.text or event.caption) or subject_of(event) is None:
            return await handler(event, data)
        subject, chat, line = subject_of(event), chat_key(event), _line(event)
        command = line.text.startswith("/")
        rec = None
        if not command:
            try:
                rec = await self.client.recollect(subject, [line], chat=chat, person_name=line.sender_name,
                                                  record=True)
            except (HuiyiError, OSError, ValueError) as exc:  # a down gateway: Unreachable; log, go on
                log.warning("huiyi recollection for %s failed: %s", subject, exc)
            except Exception as exc:  # noqa: BLE001 - the chat never waits on the memory
                log.warning("huiyi recollection for %s failed: %s", subject, exc)

        async def record_reply(text: str, message_id: str | None = None) -> None:
            await self.client.record_reply(subject, text, chat=chat, message_id=message_id)

        data.update(huiyi=rec, huiyi_subject=subject, huiyi_chat=chat, huiyi_record_reply=record_reply)
        result = await handler(event, data)
        if self.capture and not command:
            try:
                # the line joined the tail with the recollection; unrecorded (gateway was down) it joins now
                await self.client.capture(subject, [line], chat=chat, to_tail=rec is None)
            except Exception as exc:  # noqa: BLE001 - a failed capture never breaks the chat
                log.warning("huiyi capture for %s failed: %s", subject, exc)
        return result


def memory_router(client: AsyncHuiyi, *, name: str = "huiyi") -> Router:
    """A Router answering ``/memory`` and ``/记忆`` (help, list, search, edit, forget, export…):
    each command goes to the gateway as a turn (``POST /v1/turns``), which runs it for
    the sender with the gateway's rules (others' memories only for its admins, with an
    admin key); the reply is sent back, an export as a document."""
    router = Router(name=name)

    @router.message(Command("memory", "记忆", ignore_case=True))
    async def memory_command(message: Message) -> None:
        if message.from_user is None:
            return
        status = None
        if message.chat.type != "private" and message.bot is not None:
            try:
                status = (await message.bot.get_chat_member(message.chat.id, message.from_user.id)).status
            except Exception as exc:  # noqa: BLE001 - without the role the sender is an ordinary member
                log.info("chat member status unavailable: %s", exc)
        turn = await client.turn({
            "platform": "tg", "message_id": str(message.message_id), "sender_id": str(message.from_user.id),
            "sender_name": message.from_user.full_name, "chat_kind": "private" if message.chat.type == "private"
            else "group", "chat_id": str(message.chat.id), "thread_id": str(message.message_thread_id)
            if message.is_topic_message and message.message_thread_id else None,
            "text": message.text or "", "is_command": True, "timestamp": message.date.isoformat(),
            "sender_role": status if status in _ADMIN_STATUSES else None,
            "language": message.from_user.language_code})
        if turn.reply:
            await message.answer(turn.reply)
        attachment = turn.raw.get("attachment")
        if attachment:
            await message.answer_document(BufferedInputFile(base64.b64decode(attachment["data_base64"]),
                                                            filename=attachment["filename"]))

    return router
