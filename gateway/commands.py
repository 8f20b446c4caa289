"""Slash commands: ``/memory`` (alias ``/记忆``), the same on every bridge.

Grammar (the subcommand follows the command; Chinese aliases in ``SUBCOMMANDS``)::

    /memory help
    /memory list    [target] [page] [--all]
    /memory show    [target] <id>
    /memory search  [target] <query>
    /memory edit    [target] <id> <new text>
    /memory forget  [target] <id>
    /memory forget  [target] all [confirm]
    /memory forget  [target] last <duration>           e.g. ``last 10m``, ``最近 30分钟``
    /memory pause   [<duration>]                       e.g. ``2h``, ``30分钟``; none: until resumed
    /memory resume
    /memory followups [on|off]                         (/记忆 回访 开|关) follow-ups about past plans
    /memory history [target] <id>
    /memory why     [target] <id>
    /memory export  [target]
    /memory consolidate [target]
    /memory mood    [target] [weeks]                   the last weeks' mood in plain words (default 4, 1…12;
                                                       ``8``, ``3 weeks``, ``３``, 「三个星期」; else refused)
    /memory link    <platform:id> [<platform:id>]      tenant admins only
    /memory stats                                      tenant admins only

``target`` names another person: ``platform:id`` (``tg:123``, ``qq:10001``,
``person:…``) or an @-mention the platform resolves to a user id. Without it
the command is about the speaker (their linked subject when an admin linked
identities, ``memory.identity``). A target that names nobody (``tg:None``, an
unknown @-mention) is refused, and so is any argument ``list`` (whose words
come in any order) or ``consolidate`` cannot read: it never falls back to the
speaker.

Who may do what:

- everyone manages their own memories, in any chat with the bot;
- tenant admins (``TenantSettings.admins``, platform identities) may address
  anyone, and alone may ``link`` and see ``stats``;
- group admins (``InboundMessage.sender_role`` in ``GROUP_ADMIN_ROLES``) may
  address others in their group, and see and change only what was learned in
  that group;
- anyone else addressing another person gets a localised refusal, and the
  attempt is audited (``command_denied`` in the target's namespace).

In a group, every listing shows only the memories that may be disclosed there
(learned in that group, DESIGN rule 6); a memory that may not is refused with a
hint to use a private chat, and ``export`` is refused there. The rule holds per
version: ``history`` in a group shows only the versions whose own text was said
in that group, and ``show``/``why`` give the details of the last recall only
when that turn was in that group. Actions on
another person's memories and their views are audited with the acting
identity (``admin:tg:1``, ``group_admin:qq:5``).

Consolidated memories (``memory.consolidate``) are memories like any other
for show/edit/forget/history/why; ``list`` marks them with their type,
confidence and hits and leaves dormant ones out unless ``--all`` (or ``all`` /
``全部``) is given; ``consolidate`` runs one consolidation now for the speaker
(tenant admins: for anyone named; group admins may not, since a run reads
everything of the person) through the ``consolidate`` callable the pipeline
passes (None: answered as unavailable).

A command a reply names is spelled in the words of the command word used
(``_Caller.spell``: ``/记忆 继续``, ``/记忆 忘记 全部 确认``; ``/memory resume``).
Every string a person reads comes from ``locales``; replies fit in
``MAX_REPLY_UTF16`` UTF-16 code units (Telegram's limit is 4096). The pending
``forget all`` confirmation is kept in SQL, so any gateway replica can take
the confirming message. Commands and replies are never captured as memories.

Off the record (``pause``/``resume``) is the speaker's own, per chat: a
private chat's key, or a group's (every topic of it). It is kept in SQL
(``memory.store.pauses``), so every replica's pipeline honours it at the next
line; recall of what was learned before goes on. ``forget last <duration>``
withdraws what the speaker said in this chat within that time and every
memory learned or changed from it there (``gateway.withdrawals`` semantics:
retracted, no tombstone); in a private chat the companion's lines of that
time go too. Durations: ``gateway.durations`` (zh and en; at most 30 days).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.config import TenantSettings
from gateway.durations import MAX_DURATION, DurationTooLong, parse_duration
from gateway.withdrawals import withdraw_since
from bridges.contract import Attachment, InboundMessage, Outbound
from locales import translate, translate_plural
from memory import admin
from memory.admin import pause_learning, resume_learning
from memory.capture import edit
from memory.errors import CoreError, KeyTakenError, NamespaceError, NotFoundError
from memory.explain import Why, explain, trace_visible_in, visible_in
from memory.identity import PERSON, is_platform_subject, platform_subject, resolve_subject
from memory.reconstruct import when_text
from memory.types import ID_RE, SUBJECT_RE, ChatRef, ForgetReceipt, Memory, Namespace, ScoreParts, Visibility

__all__ = ["COMMAND_NAMES", "CommandReply", "run_command", "execute", "is_memory_command", "SUBCOMMANDS", "export_document",
           "pause_key", "LAST_WORDS", "NOT_WORDS", "SPOKEN_ZH", "why_not_text", "zoned_time",
           "GROUP_ADMIN_ROLES", "PAGE_SIZE", "MAX_REPLY_UTF16", "CONFIRM_WINDOW", "anniversary_line",
           "mood_fragments"]

log = logging.getLogger(__name__)

COMMAND_NAMES = ("/memory", "/记忆", "/記憶")
"""The command and its aliases: simplified and traditional Chinese (``/記憶``)."""
#: Memories per ``list`` page; at SNIPPET_CHARS per line a page stays far below MAX_REPLY_UTF16.
PAGE_SIZE = 10
#: Longest reply, in UTF-16 code units (Telegram counts those; its limit is 4096).
MAX_REPLY_UTF16 = 4000
SNIPPET_CHARS = 60
HISTORY_SHOWN = 20
#: How long ``/memory forget all confirm`` may follow ``/memory forget all`` (platform message times).
CONFIRM_WINDOW = timedelta(minutes=2)
#: Group roles as platforms name them: OneBot owner/admin, Telegram creator/administrator.
GROUP_ADMIN_ROLES = frozenset({"owner", "admin", "creator", "administrator"})
MAX_EDIT_CHARS = 500

SUBCOMMANDS: dict[str, str] = {
    "help": "help", "帮助": "help", "?": "help",
    "list": "list", "ls": "list", "列表": "list", "列出": "list",
    "show": "show", "查看": "show", "详情": "show",
    "search": "search", "搜索": "search", "查找": "search",
    "edit": "edit", "修改": "edit", "编辑": "edit",
    "forget": "forget", "delete": "forget", "忘记": "forget", "删除": "forget",
    "history": "history", "历史": "history",
    "why": "why", "为什么": "why",
    "export": "export", "导出": "export",
    "link": "link", "关联": "link",
    "stats": "stats", "统计": "stats",
    "consolidate": "consolidate", "整理": "consolidate", "归纳": "consolidate",
    "pause": "pause", "暂停": "pause", "resume": "resume", "继续": "resume", "恢复": "resume",
    "mood": "mood", "心情": "mood", "情绪": "mood", "情緒": "mood",
    "followups": "followups", "followup": "followups", "回访": "followups", "回訪": "followups",
    # traditional Chinese spellings (列表, 列出, 查看, 搜索, 查找, 修改, 整理 are the same in both)
    "幫助": "help", "詳情": "show", "編輯": "edit", "忘記": "forget", "刪除": "forget",
    "歷史": "history", "為什麼": "why", "導出": "export", "關聯": "link", "統計": "stats", "歸納": "consolidate",
    "暫停": "pause", "繼續": "resume", "恢復": "resume",
}
LIST_ALL_WORDS = frozenset({"--all", "-a", "all", "全部"})
ALL_WORDS = frozenset({"all", "全部"})
CONFIRM_WORDS = frozenset({"confirm", "确认", "確認"})
#: ``/memory forget last 10m``: the word before a duration
LAST_WORDS = frozenset({"last", "recent", "最近", "最后", "最後"})
#: ``/memory followups on|off`` (``/记忆 回访 开|关``)
ON_WORDS = frozenset({"on", "yes", "开", "開", "打开", "打開", "开启", "開啟"})
OFF_WORDS = frozenset({"off", "no", "关", "關", "关闭", "關閉"})


#: how a reply names a subcommand or keyword after a Chinese command word (``/记忆 继续``, ``/記憶 繼續``):
#: ``(simplified, traditional)``; every one of them is read back by ``execute`` (a test checks)
SPOKEN_ZH: dict[str, tuple[str, str]] = {
    "help": ("帮助", "幫助"), "list": ("列表", "列表"), "show": ("查看", "查看"), "search": ("搜索", "搜索"),
    "edit": ("修改", "編輯"), "forget": ("忘记", "忘記"), "history": ("历史", "歷史"), "why": ("为什么", "為什麼"),
    "export": ("导出", "導出"), "link": ("关联", "關聯"), "stats": ("统计", "統計"),
    "consolidate": ("整理", "整理"), "pause": ("暂停", "暫停"), "resume": ("继续", "繼續"), "mood": ("心情", "情緒"),
    "followups": ("回访", "回訪"), "all": ("全部", "全部"), "--all": ("全部", "全部"), "confirm": ("确认", "確認"),
    "last": ("最近", "最近"), "not": ("没有", "沒有"), "on": ("开", "開"), "off": ("关", "關"),
}


def is_memory_command(text: str) -> bool:
    """True when ``text`` starts with ``/memory``, ``/记忆`` or ``/記憶`` (``/memory@bot`` too)."""
    words = text.split(maxsplit=1)
    return bool(words) and words[0].split("@")[0] in COMMAND_NAMES


@dataclass(frozen=True, slots=True)
class CommandReply:
    """What a command answers: ``text`` for the person (localised, at most
    MAX_REPLY_UTF16 UTF-16 units), ``action`` what happened (the subcommand, or
    ``denied``/``usage``/``unknown``/``private``/``error``), and an optional file
    (``export``; only ever produced in a private chat)."""

    text: str
    action: str
    attachment: Attachment | None = None

    def outbound(self, msg: InboundMessage) -> Outbound:
        """The reply as an Outbound to the chat the command came from."""
        return Outbound(platform=msg.platform, chat_kind=msg.chat_kind, chat_id=msg.chat_id, thread_id=msg.thread_id,
                        text=self.text, reply_to_message_id=msg.message_id, attachment=self.attachment)


class _Stop(Exception):
    """Ends a command early with a reply (refusal, usage, not shown here)."""

    def __init__(self, text: str, action: str) -> None:
        super().__init__(action)
        self.text = text
        self.action = action


@dataclass(frozen=True, slots=True)
class _Caller:
    tenant: str
    t: TenantSettings
    msg: InboundMessage
    own: Namespace
    subject: str
    lang: str
    cmd: str
    #: False when the caller's channel may not act for others (a member API key):
    #: no tenant-admin and no group-admin powers, whatever the sender's ids say
    privileged: bool = True
    #: ``/memory consolidate``'s runner, ``(Namespace) -> ConsolidationReport`` (None: unavailable)
    consolidate: object = None

    def say(self, msgid: str, **params: object) -> str:
        return translate(self.lang, msgid, **params)

    def spell(self, *words: str) -> str:
        """A command for a reply to name, in the words of the command word used:
        ``spell("forget", "all", "confirm")`` is ``/memory forget all confirm``
        after ``/memory`` and ``/记忆 忘记 全部 确认`` after ``/记忆`` (``SPOKEN_ZH``;
        ``/記憶``: traditional). Ids, targets and numbers stay as given."""
        if self.cmd == "/记忆":
            words = tuple(SPOKEN_ZH.get(w, (w,))[0] for w in words)
        elif self.cmd == "/記憶":
            words = tuple(SPOKEN_ZH[w][1] if w in SPOKEN_ZH else w for w in words)
        return " ".join((self.cmd, *words))

    def say_n(self, singular: str, plural: str, n: int, **params: object) -> str:
        """The plural entry for the count ``n`` (``locales.translate_plural``; ``{n}`` is ``n``)."""
        return translate_plural(self.lang, singular, plural, n, **params)

    @property
    def admin(self) -> bool:
        """A tenant or group admin: told the scoring terms beside the plain words (``_parts_line``)."""
        return self.tenant_admin or self.group_admin

    @property
    def chat(self):
        return self.msg.chat

    @property
    def now(self) -> datetime:
        return self.msg.timestamp

    @property
    def tenant_admin(self) -> bool:
        return self.privileged and (self.subject in self.t.admins or self.own.subject in self.t.admins)

    @property
    def group_admin(self) -> bool:
        return self.privileged and self.chat.is_group and (self.msg.sender_role or "").lower() in GROUP_ADMIN_ROLES


@dataclass(frozen=True, slots=True)
class _Scope:
    """Whose memories (``ns``), restricted to what group ``group_key`` may see
    when set; ``actor`` is the audit actor; ``token`` how the target was named."""

    ns: Namespace
    group_key: str | None
    own: bool
    actor: str
    token: str | None = None


CONSOLIDATE_WAIT_S = 600.0
"""Longest a ``/memory consolidate`` waits for its run (seconds)."""


async def run_command(core, tenant: str, t: TenantSettings, msg: InboundMessage, own: Namespace,
                      lang: str, *, privileged: bool = True, consolidate=None) -> CommandReply:
    """Run the ``/memory`` command in ``msg`` for its sender (namespace ``own``)
    in a worker thread (the store and index are synchronous). Never raises for
    a person's input; a store failure answers a localised apology.
    ``privileged`` False: the sender gets no admin powers (a member API key).
    ``consolidate``: an async ``(Namespace) -> ConsolidationReport`` (the
    pipeline's ``consolidate`` of this tenant) for ``/memory consolidate``; it is
    run on this event loop while the command's thread waits."""
    sync = None
    if consolidate is not None:
        loop = asyncio.get_running_loop()

        def sync(ns: Namespace):
            return asyncio.run_coroutine_threadsafe(consolidate(ns), loop).result(CONSOLIDATE_WAIT_S)

    return await asyncio.to_thread(execute, core, tenant, t, msg, own, lang, privileged=privileged, consolidate=sync)


def execute(core, tenant: str, t: TenantSettings, msg: InboundMessage, own: Namespace, lang: str, *,
            privileged: bool = True, consolidate=None) -> CommandReply:
    """Synchronous ``run_command``; ``consolidate`` here is a synchronous
    ``(Namespace) -> ConsolidationReport`` (None: ``/memory consolidate`` is unavailable)."""
    parts = msg.text.split(maxsplit=2)
    cmd = parts[0].split("@")[0] if parts else COMMAND_NAMES[0]
    c = _Caller(tenant, t, msg, own, platform_subject(msg.platform, msg.sender_id), lang, cmd, privileged,
                consolidate)
    word = parts[1] if len(parts) > 1 else "help"
    rest = parts[2] if len(parts) > 2 else ""
    sub = SUBCOMMANDS.get(word.casefold())
    if sub is None and (joined := _joined_subcommand(word)) is not None:  # 「/记忆 为什么没有咖啡」
        sub, more = joined
        rest = f"{more} {rest}".strip()
    if sub is None:
        try:
            helped = _help(c, core)
        except CoreError:
            helped = _help(c)
        return CommandReply(_fit(c.say("Unknown command: {word}", word=_snip(word, 30)) + "\n\n" + helped), "unknown")
    try:
        return _HANDLERS[sub](core, c, rest)
    except _Stop as stop:
        return CommandReply(_fit(stop.text), stop.action)
    except NamespaceError:
        return CommandReply(_fit(_usage(c, sub)), "usage")
    except CoreError:
        log.exception("/memory %s failed for %s", sub, own)
        return CommandReply(c.say("Memory is not available right now. Please try again later."), "error")


# -- helpers -------------------------------------------------------------------


#: the Chinese names of subcommands, longest first: Chinese is written without spaces, so 「为什么没有咖啡」
#: is 为什么 + 没有咖啡
_CJK_NAMES = sorted((w for w in SUBCOMMANDS if re.match(r"[\u4e00-\u9fff]", w)), key=len, reverse=True)


def _joined_subcommand(word: str) -> tuple[str, str] | None:
    """``(subcommand, the rest of word)`` when ``word`` starts with a Chinese
    subcommand name followed by more Chinese with no space (「为什么没有」,
    「忘记最近」); None otherwise (an unknown word stays unknown)."""
    for name in _CJK_NAMES:
        if word.startswith(name) and len(word) > len(name):
            return SUBCOMMANDS[name], word[len(name):]
    return None



def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _fit(text: str, limit: int = MAX_REPLY_UTF16) -> str:
    """``text`` cut at a line boundary (else mid-line) so it fits ``limit`` UTF-16 units."""
    if _utf16(text) <= limit:
        return text
    out: list[str] = []
    used = 2  # the "\n…" marker
    for line in text.split("\n"):
        cost = _utf16(line) + (1 if out else 0)
        if used + cost > limit:
            if not out:  # one huge line: cut it
                units = line.encode("utf-16-le")[: 2 * (limit - 2)]
                out.append(units.decode("utf-16-le", errors="ignore"))
            break
        out.append(line)
        used += cost
    return "\n".join(out) + "\n…"


def _snip(text: str, n: int = SNIPPET_CHARS) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _usage(c: _Caller, sub: str) -> str:
    forms = {
        "list": "list [@person|platform:id] [page] [--all]", "show": "show <id>", "search": "search <query>",
        "edit": "edit <id> <new text>", "forget": "forget <id> | forget all | forget last <duration>", "history": "history <id>",
        "why": "why <id>", "export": "export", "link": "link <platform:id> [<platform:id>]", "stats": "stats",
        "consolidate": "consolidate [@person|platform:id]", "pause": "pause [duration, e.g. 2h]",
        "resume": "resume", "mood": "mood [@person|platform:id] [weeks, e.g. 8]",
        "followups": "followups [on|off]",
    }
    return c.say("Usage: {usage}", usage=f"{c.cmd} {c.say(forms[sub]) if sub in forms else 'help'}")


def _help(c: _Caller, core=None) -> str:
    text = c.say(
        "Memory commands (/memory or /记忆):\n"
        "{cmd} list [page] — what I remember about you\n"
        "{cmd} show <id> — one memory in full\n"
        "{cmd} search <words> — search your memories\n"
        "{cmd} edit <id> <new text> — correct a memory\n"
        "{cmd} forget <id> — forget one memory\n"
        "{cmd} forget all — forget everything (asks to confirm)\n"
        "{cmd} history <id> — earlier versions of a memory\n"
        "{cmd} why <id> — why it was or was not recalled last time\n"
        "{cmd} export — all your memories as a file (private chat only)",
        cmd=c.cmd)
    text += "\n" + c.say("{cmd} list --all — also long-term memories resting now\n"
                         "{cmd} consolidate — sort recent fragments into long-term memories now", cmd=c.cmd)
    text += "\n" + c.say("{cmd} pause [2h] — off the record in this chat: I learn nothing from what you say here "
                         "(until resumed, or for the time given)\n"
                         "{cmd} resume — learn from this chat again\n"
                         "{cmd} forget last 10m — take back what I learned from you here in the last 10 minutes",
                         cmd=c.cmd)
    text += "\n" + c.say("{cmd} mood [weeks] — how the last weeks felt, from what you told me", cmd=c.cmd)
    if c.t.followups.enabled:
        text += "\n" + c.say("{cmd} followups on|off — may I ask how your plans went, once they are past "
                             "(at most once a day; off unless you turn it on)", cmd=c.cmd)
    pause = core.store.paused(c.own, pause_key(c.chat), c.now) if core is not None else None
    if pause is not None:
        text += "\n" + _paused_line(c, pause)
    text += "\n" + c.say("{cmd} why not <id or words> — what kept a memory out of the last reply", cmd=c.cmd)
    if c.tenant_admin or c.group_admin:
        text += "\n" + c.say("Admins: put @person or platform:id (e.g. tg:123) after the subcommand to manage "
                             "someone else's memories; group admins only those learned in their group.")
    if c.tenant_admin:
        text += "\n" + c.say("{cmd} link <platform:id> [<platform:id>] — the same person on two platforms\n"
                             "{cmd} stats — numbers of this bot", cmd=c.cmd)
    return text


_TARGET_RE = re.compile(rf"@\S+|{SUBJECT_RE.pattern}")


def _split_target(rest: str) -> tuple[str | None, str]:
    """(target token, the rest) when the first argument names a person."""
    words = rest.strip().split(maxsplit=1)
    if words and _TARGET_RE.fullmatch(words[0]):
        return words[0], words[1] if len(words) > 1 else ""
    return None, rest.strip()


def _mention_id(c: _Caller, token: str) -> str | None:
    """The platform user id an ``@…`` argument stands for, or None when unknown.

    ``@<id>`` that the platform reported as a mention is that id (OneBot renders
    an ``at`` without a name so). Otherwise the one mentioned user id besides the
    bot's, when there is exactly one (Telegram ``text_mention``); an ``@username``
    alone names no id."""
    ids = [m for m in c.msg.mentions if m != "all" and ID_RE.fullmatch(m) and m != c.t.telegram_bot_id]
    if token[1:] in ids:
        return token[1:]
    if c.msg.mentions_bot and c.msg.platform != "tg":
        return None  # the bot's own id is among them and unknown here
    return ids[0] if len(ids) == 1 else None


def _scope(core, c: _Caller, token: str | None, sub: str) -> _Scope:
    """Whose memories the command is about, and may the caller touch them. The
    recall marks this process holds for them are written first (``MemoryCore.flush_marks``),
    so that a listing right after a recall says when it was (「上次想起」), not "never"."""
    scope = _scope_of(core, c, token, sub)
    core.flush_marks(ns=scope.ns)
    return scope


def _scope_of(core, c: _Caller, token: str | None, sub: str) -> _Scope:
    """``_scope`` before the marks."""
    group_key = c.chat.group_key if c.chat.is_group else None
    own = _Scope(c.own, group_key, True, f"self:{c.subject}")
    if token is None:
        return own
    if token.startswith("@"):
        uid = _mention_id(c, token)
        if uid is None:
            raise _not_a_person(c, token)
        subject = platform_subject(c.msg.platform, uid)
    else:
        subject = token
    try:
        ns = resolve_subject(core.store, c.tenant, subject)
    except NamespaceError:  # tg:None, tg:0, person:null…: nobody in particular
        raise _not_a_person(c, token) from None
    if ns == c.own:
        return own
    if c.tenant_admin:
        return _Scope(ns, group_key, False, f"admin:{c.subject}", token)
    if c.group_admin:
        return _Scope(ns, group_key, False, f"group_admin:{c.subject}", token)
    core.store.audit(ns, "command_denied", f"user:{c.subject}", command=sub, chat=c.chat.key)
    log.info("/memory %s by %s on %s denied", sub, c.subject, ns)
    raise _Stop(c.say("You can only manage your own memories."), "denied")


def _who(c: _Caller, scope: _Scope) -> str:
    """How a reply names whose memories these are: "you", else the subject — beside
    the name the admin typed when that resolves to another one (``tg:42`` linked to
    ``person:…``: "tg:42 (linked as person:…)"; ``@ann``: "@ann (tg:42)"), so the
    reply names the person they meant as well as the one it is about."""
    if scope.own:
        return c.say("you")
    if scope.token and scope.token != scope.ns.subject:
        if scope.ns.subject.startswith(f"{PERSON}:"):
            return c.say("{named} (linked as {subject})", named=scope.token, subject=scope.ns.subject)
        return c.say("{named} ({subject})", named=scope.token, subject=scope.ns.subject)
    return scope.ns.subject


def _audit_view(core, c: _Caller, scope: _Scope, sub: str, memory_id: str | None = None) -> None:
    if not scope.own:
        core.store.audit(scope.ns, "admin_view", scope.actor, memory_id, command=sub, chat=c.chat.key)


def _count(core, scope: _Scope, include_dormant: bool = True) -> int:
    """How many memories ``_page`` (same ``include_dormant``) can return: exactly what this chat may see."""
    if scope.group_key:
        return core.store.count_in_group(scope.ns, scope.group_key, include_dormant=include_dormant)
    return core.store.count(scope.ns, include_dormant=include_dormant)


def _page(core, scope: _Scope, limit: int, offset: int, include_dormant: bool = True) -> list[Memory]:
    """One page of the scope's memories, newest first; dormant consolidated ones are
    left out in SQL when ``include_dormant`` is False, so the offset counts only what is shown."""
    if scope.group_key:
        return core.store.list_in_group(scope.ns, scope.group_key, limit=limit, offset=offset,
                                        include_dormant=include_dormant)
    return core.store.list(scope.ns, limit=limit, offset=offset, include_dormant=include_dormant)


def _conflict_marks(core, c: _Caller, scope: _Scope, ids: list[str]) -> dict[str, list[str]]:
    """Memory id → the ids of its conflict partners (``memory.store.Conflicts``) that
    this chat may see (DESIGN rule 6: a private partner is not even named in a group)."""
    links = core.store.conflicts(scope.ns, ids)
    if not links:
        return {}
    wanted = set(ids)
    others = core.store.get_many(scope.ns, sorted({link.other(side) for link in links
                                                    for side in (link.older_id, link.newer_id) if side in wanted}))
    marks: dict[str, list[str]] = {}
    for link in links:
        for side in (link.older_id, link.newer_id):
            other = others.get(link.other(side)) if side in wanted else None
            if other is not None and visible_in(other, c.chat) and other.id not in marks.get(side, []):
                marks.setdefault(side, []).append(other.id)
    return marks


def _all_ids(core, scope: _Scope) -> list[str]:
    ids: list[str] = []
    while True:
        batch = _page(core, scope, 500, len(ids))
        if not batch:
            return ids
        ids += [m.id for m in batch]


def _viewed(core, c: _Caller, sub: str, rest: str) -> tuple[_Scope, Memory]:
    """The scope and memory a read-only subcommand (show, history, why) names in
    ``rest``, with the view audited; raises what _take_id/_scope/_memory raise."""
    token, mid, _ = _take_id(c, sub, rest)
    scope = _scope(core, c, token, sub)
    m = _memory(core, c, scope, mid, sub)
    _audit_view(core, c, scope, sub, m.id)
    return scope, m


def _memory(core, c: _Caller, scope: _Scope, memory_id: str, sub: str) -> Memory:
    """The memory ``memory_id`` of the scope, if this chat may show it."""
    if not ID_RE.fullmatch(memory_id):
        raise _Stop(_usage(c, sub), "usage")
    try:
        m = core.get(scope.ns, memory_id)
    except NotFoundError:
        raise _Stop(c.say("No memory {id} found.", id=memory_id), "not_found") from None
    if scope.group_key and not visible_in(m, c.chat):
        raise _Stop(c.say("Memory {id} is not shown in this group. Ask me in a private chat: {command}",
                          id=memory_id, command=c.spell(sub, memory_id)), "private")
    return m


def _take_id(c: _Caller, sub: str, rest: str) -> tuple[str | None, str, str]:
    token, rest = _split_target(rest)
    words = rest.split(maxsplit=1)
    if not words:
        raise _Stop(_usage(c, sub), "usage")
    return token, words[0], words[1] if len(words) > 1 else ""


def _tz(c: _Caller):
    try:
        return ZoneInfo(c.t.tz)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _at(c: _Caller, dt: datetime | None) -> str:
    if dt is None:
        return "-"
    tz = _tz(c)
    return (dt.astimezone(tz) if tz else dt).strftime("%Y-%m-%d %H:%M")


def _at_zoned(c: _Caller, dt: datetime) -> str:
    """``dt`` in the tenant's zone with that zone named: ``2026-12-06 20:30 (Asia/Shanghai, UTC+08:00)``;
    UTC (``… (UTC)``) when the tenant's zone is none or unknown. For a moment a person acts on (a pause's end)."""
    return zoned_time(c.t.tz, dt)


def zoned_time(zone: str | None, dt: datetime) -> str:
    """``dt`` (aware) in the IANA zone ``zone`` with the zone named: ``2026-12-06 20:30
    (Asia/Shanghai, UTC+08:00)``; ``2026-12-06 12:30 (UTC)`` when ``zone`` is UTC, None or unknown."""
    try:
        tz = ZoneInfo(zone) if zone else None
    except (ZoneInfoNotFoundError, ValueError):
        tz = None
    if tz is None or str(tz) in ("UTC", "Etc/UTC"):
        return f"{dt.astimezone(timezone.utc):%Y-%m-%d %H:%M} (UTC)"
    local = dt.astimezone(tz)
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} ({tz}, UTC{offset[:3]}:{offset[3:]})"


def _category(c: _Caller, m: Memory) -> str:
    return c.say(m.category.value)


def _emotion(c: _Caller, m: Memory) -> str:
    return c.say(m.emotion or "neutral")


def _last_recalled(c: _Caller, m: Memory) -> str:
    times = [t for t in m.access_times if m.created_at is None or t > m.created_at]
    return when_text(max(times), c.now, c.lang, _tz(c) or "UTC") if times else c.say("never")


def _parts_line(c: _Caller, parts: ScoreParts | None, ranks: dict[str, int] | None) -> str:
    """A recall's score parts in a person's words: how well the memory is still
    kept (retention, in [0, 1]), how much it came up lately (ACT-R activation, a
    log, may be negative), the emotion and importance factors, and where the word
    search, the meaning search and related memories ranked it (or "not found").
    Admins (``_Caller.admin``) also get the scoring terms in parentheses."""
    ranks = ranks or {}
    p = parts or ScoreParts(rrf=0.0)

    def rank(channel: str) -> str:
        r = ranks.get(channel)
        return c.say("not found") if r is None else c.say("#{rank}", rank=r)

    values = dict(retention=f"{p.retention:.2f}", activation=f"{p.activation:.2f}", emotion=f"{p.emotion:.2f}",
                  importance=f"{p.importance:.2f}", bm25=rank("bm25"), vector=rank("vector"), assoc=rank("assoc"))
    if c.admin:
        return c.say("still kept {retention} of 1 (retention), came up lately {activation} (activation), "
                     "feeling ×{emotion}, importance ×{importance}; by its words {bm25} (BM25 rank), "
                     "by its meaning {vector} (vector rank), through related memories {assoc} (association rank)",
                     **values)
    return c.say("still kept {retention} of 1, came up lately {activation}, feeling ×{emotion}, "
                 "importance ×{importance}; by its words {bm25}, by its meaning {vector}, "
                 "through related memories {assoc}", **values)


def _origin(c: _Caller, m: Memory) -> str:
    o = m.origin
    if o is None:
        return c.say("unknown")
    if not o.is_group:
        return c.say("a private chat")
    return c.say("group {chat}", chat=f"{o.platform}:{o.chat_id}")


# -- subcommands ---------------------------------------------------------------


def _cmd_help(core, c: _Caller, rest: str) -> CommandReply:
    return CommandReply(_fit(_help(c, core)), "help")


def _cmd_list(core, c: _Caller, rest: str) -> CommandReply:
    token, page, everything = _list_args(c, rest)
    scope = _scope(core, c, token, "list")
    total = _count(core, scope, include_dormant=everything)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(max(page, 1), pages)
    _audit_view(core, c, scope, "list")
    who = _who(c, scope)
    if total == 0:
        if scope.group_key:
            return CommandReply(c.say("I don't remember anything about {who} from this group.", who=who), "list")
        return CommandReply(c.say("I don't remember anything about {who} yet.", who=who), "list")
    lines = [c.say("What I remember about {who} ({total}), page {page}/{pages}:", who=who, total=total, page=page,
                   pages=pages)]
    shown = _page(core, scope, PAGE_SIZE, (page - 1) * PAGE_SIZE, include_dormant=everything)
    marks = _conflict_marks(core, c, scope, [m.id for m in shown])
    consolidated = core.store.consolidated(scope.ns, [m.id for m in shown])
    for m in shown:
        line = c.say("{id} [{category}, {emotion}] {text} · recalled {when}", id=m.id,
                     category=_category(c, m), emotion=_emotion(c, m), text=_snip(m.text),
                     when=_last_recalled(c, m))
        if m.id in consolidated:
            line += " · " + _consolidated_mark(c, consolidated[m.id])
        if m.id in marks:
            line += " · " + c.say("⚡ conflicts with {ids}", ids=", ".join(marks[m.id]))
        lines.append(line)
    if page < pages:
        target = (token,) if token else ()
        more = ("--all",) if everything else ()
        lines.append(c.say("Next page: {command}", command=c.spell("list", *target, str(page + 1), *more)))
    if scope.group_key:
        lines.append(c.say("Only what was said in this group is listed here; ask me in private for the rest."))
    return CommandReply(_fit("\n".join(lines)), "list")


def _list_args(c: _Caller, rest: str) -> tuple[str | None, int, bool]:
    """``list``'s arguments in any order: (target token or None, page ≥ 1, ``--all``
    given). A word that is neither a target, a page number nor an all-flag is
    refused (``_not_a_person``) rather than ignored: the list would be the speaker's."""
    token, page, everything = None, None, False
    for word in rest.split():
        if word.casefold() in LIST_ALL_WORDS:
            everything = True
        elif page is None and word.isascii() and word.isdigit():
            page = max(1, int(word))
        elif token is None and _TARGET_RE.fullmatch(word):
            token = word
        else:
            raise _not_a_person(c, word)
    return token, page or 1, everything


def _not_a_person(c: _Caller, word: str) -> _Stop:
    """The refusal of an argument that names no person (the same words as an unknown @mention)."""
    return _Stop(c.say("I can't tell who {who} is. Name them by platform id instead, e.g. {example}.",
                       who=_snip(word, 40), example=f"{c.msg.platform}:123456"), "usage")


def _consolidated_mark(c: _Caller, row) -> str:
    """How ``list`` and ``show`` mark a consolidated memory: type, confidence, hits (and dormancy)."""
    mark = c.say_n("🧩 long-term {ctype}, confidence {confidence}, {n} hit",
                   "🧩 long-term {ctype}, confidence {confidence}, {n} hits", row.hits, ctype=c.say(row.ctype),
                   confidence=f"{row.confidence:.2f}")
    if row.dormant:
        mark += " · " + c.say("💤 resting since {when}", when=_at(c, row.dormant_since))
    return mark


def _cmd_show(core, c: _Caller, rest: str) -> CommandReply:
    scope, m = _viewed(core, c, "show", rest)
    vis = (c.say("shown only in private chats") if m.visibility is Visibility.PRIVATE
           else c.say("shown in that group and in private chats"))
    lines = [
        c.say("{id} · version {version} · {category} · {emotion}", id=m.id, version=m.version,
              category=_category(c, m), emotion=_emotion(c, m)),
        m.text,
        *([c.say("In reply to {context}", context=m.context)] if m.context else []),
        c.say("Learned in {origin} ({visibility}).", origin=_origin(c, m), visibility=vis),
        c.say("Valid since {since}; said {created}.", since=_at(c, m.valid_from), created=_at(c, m.created_at)),
    ]
    marks = _conflict_marks(core, c, scope, [m.id])
    if m.id in marks:
        lines.append(c.say("Said differently in {ids}: both kept, recalled as a change.", ids=", ".join(marks[m.id])))
    row = core.store.consolidated(scope.ns, [m.id]).get(m.id)
    if row is not None:
        cited = core.store.get_many(scope.ns, list(row.sources))
        seen = [s for s in row.sources if s in cited and visible_in(cited[s], c.chat)]
        lines.append(_consolidated_mark(c, row))
        lines.append(c.say("Drawn from {ids}.", ids=", ".join(seen) or "-"))
    trace = core.store.last_recall(scope.ns)
    entry = trace.entry(m.id) if trace else None
    if trace is not None and not trace_visible_in(trace, c.chat):
        lines.append(c.say("The last recall was in another chat; ask me in a private chat for its details."))
    elif entry is None:
        lines.append(c.say("Not among the candidates of the last recall."))
    else:
        lines.append(c.say("Last recall ({when}): #{position}, score {score}.", when=_at(c, trace.at),
                           position=entry.position, score=f"{entry.score:.4f}"))
        lines.append(_parts_line(c, entry.parts, entry.ranks))
    return CommandReply(_fit("\n".join(lines)), "show")


def _cmd_search(core, c: _Caller, rest: str) -> CommandReply:
    from memory.recall import RecallParams

    token, query = _split_target(rest)
    if not query.strip():
        raise _Stop(_usage(c, "search"), "usage")
    scope = _scope(core, c, token, "search")
    _audit_view(core, c, scope, "search")
    # a look-up lists what matches: the query's words, or nearly its meaning (the embedder's strict floor,
    # not the lower one a turn uses once a word matches); no memory only linked to a match
    hits = core.recall(scope.ns, [query], chat=c.chat if scope.group_key else None,
                       params=RecallParams(k=PAGE_SIZE, matched_vector_floor=1.0, assoc_weight=0.0), tz=_tz(c))
    who = _who(c, scope)
    if not hits:
        return CommandReply(c.say("Nothing about {who} matches “{query}”.", who=who, query=_snip(query, 40)), "search")
    lines = [c.say("Memories of {who} matching “{query}”:", who=who, query=_snip(query, 40))]
    for h in hits:
        line = c.say("{id} score {score} (words {bm25}, meaning {vector}) {text}",
                     id=h.memory.id, score=f"{h.score:.4f}", bm25=h.ranks.get("bm25", "-"),
                     vector=h.ranks.get("vector", "-"), text=_snip(h.memory.text))
        # found only through the line it answered (Hit.via_context): it says what it answered, or 「叫煤球」
        # would seem listed for 「猫」 at random; never in a group, where a private chat's line is not shown
        if h.via_context and not c.chat.is_group:
            line += " " + c.say("(in reply to {context})", context=_snip(h.memory.context))
        lines.append(line)
    return CommandReply(_fit("\n".join(lines)), "search")


def _cmd_edit(core, c: _Caller, rest: str) -> CommandReply:
    token, mid, text = _take_id(c, "edit", rest)
    text = " ".join(text.split())
    if not text:
        raise _Stop(_usage(c, "edit"), "usage")
    scope = _scope(core, c, token, "edit")
    m = _memory(core, c, scope, mid, "edit")
    try:  # the category and key follow the new text (memory.capture.edit)
        live = edit(core, scope.ns, m.id, text[:MAX_EDIT_CHARS], actor=scope.actor, tz=c.t.tz)
    except KeyTakenError as taken:
        holder = core.store.get_many(scope.ns, [taken.holder]).get(taken.holder) if taken.holder else None
        if holder is None or not visible_in(holder, c.chat):  # a memory this chat may not see is not named here
            return CommandReply(c.say("Another memory already says that, one not shown here; {id} is unchanged.",
                                      id=m.id), "edit")
        return CommandReply(c.say("Memory {other} already says that; edit or forget {other} instead. {id} is "
                                  "unchanged.", other=taken.holder, id=m.id), "edit")
    return CommandReply(c.say("Updated {id}; it is now version {version}. The old text stays in its history.",
                              id=live.id, version=live.version), "edit")


#: what a receipt tells, in order: (ForgetReceipt field, catalogue entry with {n}); a count of 0 is left out,
#: except the tombstones, which are the point of the receipt
RECEIPT_WORDS = (("memories", "memories {n}"), ("versions", "older versions {n}"),
                 ("index_rows", "search index rows {n}"), ("cache_entries", "cache entries {n}"),
                 ("bm25_postings", "BM25 postings {n}"), ("chat_lines", "chat-log lines that said or retold it {n}"),
                 ("contexts", "contexts of other memories that retold it {n}"),
                 ("derived", "long-term memories derived from it {n}"), ("links", "association links {n}"),
                 ("conflicts", "conflicts {n}"), ("events", "memory.forgotten events queued {n} (to {receivers} receivers)"),
                 ("tombstones", "tombstones {n}, so it is not learned again from messages older than this"))


def receipt_text(lang: str, receipt: ForgetReceipt) -> str:
    """A forget's receipt (``memory.types.ForgetReceipt``) in ``lang``: "Purged: …"
    with each count that is not 0, in ``RECEIPT_WORDS``' order ("Purged: nothing."
    when all are); the change events name how many webhook receivers they go to.
    A withdrawal (``forget last``) has no tombstones and says none."""
    parts = [translate(lang, msgid, n=getattr(receipt, name), **({"receivers": receipt.receivers}
                                                                  if name == "events" else {}))
             for name, msgid in RECEIPT_WORDS if getattr(receipt, name)]
    if not parts:
        return translate(lang, "Purged: nothing.")
    return translate(lang, "Purged: {items}.", items=translate(lang, ", ").join(parts))


def _cmd_forget(core, c: _Caller, rest: str) -> CommandReply:
    token, mid, more = _take_id(c, "forget", rest)
    scope = _scope(core, c, token, "forget")
    if mid.casefold() in ALL_WORDS:
        return _forget_all(core, c, scope, more.split())
    if mid.casefold() in LAST_WORDS:
        return _forget_last(core, c, scope, more)
    m = _memory(core, c, scope, mid, "forget")
    receipt = core.forget(scope.ns, m.id, actor=scope.actor)
    return CommandReply(c.say("{sentence} {then}", sentence=c.say(
        "Forgotten: {id}. I won't learn it again from earlier messages.", id=m.id),
        then=receipt_text(c.lang, receipt)), "forget")


def _forget_all(core, c: _Caller, scope: _Scope, args: list[str]) -> CommandReply:
    key = f"forget_all|{scope.actor}|{c.chat.key}|{scope.group_key or '*'}"
    target = (scope.token,) if scope.token else ()
    again = c.spell("forget", *target, "all")
    if args and args[0].casefold() in CONFIRM_WORDS:
        asked = core.store.take_pending(scope.ns, key)
        if asked is None:
            return CommandReply(c.say("There is nothing to confirm. Send {command} first.", command=again),
                                "forget_all")
        if not (asked - timedelta(seconds=5) <= c.now <= asked + CONFIRM_WINDOW):
            return CommandReply(c.say("That confirmation has expired. Send {command} again.", command=again),
                                "forget_all")
        # first the tombstone, so that captures still queued or running store nothing
        core.forget_everything_said_before_now(scope.ns, scope.group_key)
        queued = core.store.pending_capture_count(scope.ns, scope.group_key)
        ids = _all_ids(core, scope)
        receipt = ForgetReceipt(tombstones=1)  # the one of everything said before now
        for mid in ids:
            try:
                receipt += core.forget(scope.ns, mid, actor=scope.actor)
            except NotFoundError:
                continue  # forgotten meanwhile
        # what they said stays out of later prompts too (the conversation tail)
        lines = core.store.redact_speaker(scope.ns, scope.group_key)
        receipt += ForgetReceipt(chat_lines=lines)
        if scope.group_key is None:  # everything is gone: the next consolidation starts afresh
            core.store.clear_consolidation(scope.ns)
        core.store.scrub()
        core.store.audit(scope.ns, "forget_all", scope.actor, count=len(ids), queued=queued, chat_lines=lines,
                         chat=c.chat.key, group=scope.group_key)
        return CommandReply(c.say("{sentence} {then}", sentence=c.say_n(
            "Forgotten {n} memory of {who}.", "Forgotten {n} memories of {who}.", len(ids) + queued,
            who=_who(c, scope)), then=receipt_text(c.lang, receipt)), "forget_all")
    # facts whose capture is still queued count: they are about to become memories
    n = _count(core, scope) + core.store.pending_capture_count(scope.ns, scope.group_key)
    if n == 0:
        return CommandReply(c.say("There is nothing to forget."), "forget_all")
    core.store.put_pending(scope.ns, key, c.now)
    minutes = int(CONFIRM_WINDOW.total_seconds() // 60)
    text = c.say_n("This forgets {n} memory of {who} for good.", "This forgets {n} memories of {who} for good.", n,
                   who=_who(c, scope))
    then = c.say_n("To go ahead, send within {n} minute: {command}", "To go ahead, send within {n} minutes: {command}",
                   minutes, command=c.spell("forget", *target, "all", "confirm"))
    text = c.say("{sentence} {then}", sentence=text, then=then)  # two counts, two plural entries
    if scope.group_key:
        text += "\n" + c.say("Only what was said in this group is affected.")
    return CommandReply(text, "forget_all")


def _duration(c: _Caller, text: str):
    """The duration ``text`` names (``gateway.durations``); a ``_Stop`` saying
    nothing changed when it names none, or one saying it is too long (more than
    MAX_DURATION) with the longest allowed."""
    try:
        span = parse_duration(text) if text.strip() else None
    except DurationTooLong:
        raise _Stop(c.say("“{text}” is too long; nothing changed. At most {longest}.", text=_snip(text, 30),
                          longest=_span_text(c, MAX_DURATION)), "usage") from None
    if span is None:
        raise _Stop(c.say("I can't read “{text}” as a length of time; nothing changed. Try e.g. 10m, 2h, 1d, "
                          "30分钟 (at most {longest}).", text=_snip(text, 30) or "-",
                          longest=_span_text(c, MAX_DURATION)),
                    "usage")
    return span


def _span_text(c: _Caller, span: timedelta) -> str:
    """A duration in the person's words: whole days, hours or minutes (the largest that divides it)."""
    minutes = int(span.total_seconds() // 60)
    if minutes and minutes % 1440 == 0:
        return c.say_n("{n} day", "{n} days", minutes // 1440)
    if minutes and minutes % 60 == 0:
        return c.say_n("{n} hour", "{n} hours", minutes // 60)
    return c.say_n("{n} minute", "{n} minutes", max(1, minutes))


def _forget_last(core, c: _Caller, scope: _Scope, rest: str) -> CommandReply:
    """``forget last <duration>``: what the scope's subject said in this chat since
    then is withdrawn, with what it taught (``gateway.withdrawals.withdraw_since``);
    answered with the count and the receipt."""
    if not rest.strip():  # no length given: how the command is said, not "can't read '-'"
        raise _Stop(_usage(c, "forget"), "usage")
    span = _duration(c, rest)
    author = Namespace(scope.ns.tenant, c.subject) if scope.own else scope.ns
    done = withdraw_since(core, scope.ns, [author], pause_key(c.chat), c.now - span, actor=scope.actor,
                          private=not c.chat.is_group, seconds=int(span.total_seconds()))
    return CommandReply(c.say("{sentence} {then}", sentence=c.say_n(
        "Taken back what I learned from {who} in this chat in the last {span}: {n} memory, and the messages of "
        "that time.",
        "Taken back what I learned from {who} in this chat in the last {span}: {n} memories, and the messages of "
        "that time.", len(done.ids), who=_who(c, scope), span=_span_text(c, span)),
        then=receipt_text(c.lang, done.receipt)), "forget_last")


def pause_key(chat: ChatRef) -> str:
    """The chat a pause (and ``forget last``) is about: a group's key (every topic
    of it), else the chat's own key."""
    return chat.group_key if chat.is_group else chat.key


def _paused_line(c: _Caller, pause) -> str:
    if pause.until is None:
        return c.say("⏸ Off the record in this chat until you send {command}.", command=c.spell("resume"))
    return c.say("⏸ Off the record in this chat until {when}.", when=_at_zoned(c, pause.until))


def _cmd_pause(core, c: _Caller, rest: str) -> CommandReply:
    token, text = _split_target(rest)
    if token is not None:  # a pause is the speaker's own: nobody pauses learning for another person
        raise _Stop(_usage(c, "pause"), "usage")
    until = c.now + _duration(c, text) if text else None
    pause = pause_learning(core, c.own, pause_key(c.chat), c.now, until, f"self:{c.subject}")
    return CommandReply(_paused_line(c, pause) + "\n" + c.say(
        "Nothing you say here is learned, sorted into long-term memories or kept after my reply; other chats "
        "go on as before. I still remember what you told me before and can use it."), "pause")


def _cmd_resume(core, c: _Caller, rest: str) -> CommandReply:
    if rest.strip():
        raise _Stop(_usage(c, "resume"), "usage")
    if resume_learning(core, c.own, pause_key(c.chat), c.now, f"self:{c.subject}") is None:
        return CommandReply(c.say("Learning was not paused in this chat; nothing changed."), "resume")
    return CommandReply(c.say("Back on the record in this chat: I learn from what you say here again. What you "
                              "said while it was paused was not kept."), "resume")


def _cmd_followups(core, c: _Caller, rest: str) -> CommandReply:
    """``followups [on|off]``: the speaker's own choice (no target); without a
    word, says where it stands. The tenant may have follow-ups off for everyone."""
    word = rest.strip().casefold()
    if not c.t.followups.enabled:
        return CommandReply(c.say("Follow-ups are turned off for this bot."), "followups")
    if word and word not in ON_WORDS | OFF_WORDS:
        raise _Stop(_usage(c, "followups"), "usage")
    if not word:
        pref = core.store.followup_pref(c.own)
        on = pref is not None and pref.enabled
        if on:
            return CommandReply(c.say("Follow-ups are on: once a plan you told me is past, I may ask how it went "
                                      "(at most once a day, {hours}).", hours=c.t.followups.waking_hours), "followups")
        return CommandReply(c.say("Follow-ups are off: I never ask about your plans on my own. "
                                  "Turn them on with {cmd} followups on.", cmd=c.cmd), "followups")
    on = word in ON_WORDS
    core.store.set_followups(c.own, on, lang=c.lang, bot_id=c.msg.bot_id or "", now=c.now)
    core.store.audit(c.own, "followups_on" if on else "followups_off", f"self:{c.subject}")
    if on:
        return CommandReply(c.say("Follow-ups on: once a plan you told me is past, I may ask how it went, in the "
                                  "chat where you told me (at most once a day, {hours}). Turn them off any time "
                                  "with {cmd} followups off.", hours=c.t.followups.waking_hours, cmd=c.cmd),
                            "followups")
    return CommandReply(c.say("Follow-ups off: I will not ask about your plans on my own."), "followups")


def _cmd_history(core, c: _Caller, rest: str) -> CommandReply:
    scope, m = _viewed(core, c, "history", rest)
    # each version discloses as the chat its own text was said in (DESIGN rule 6)
    versions = core.history(scope.ns, m.id)
    shown = [v for v in versions if visible_in(v, c.chat)]
    hidden = len(versions) - len(shown)
    lines = [c.say("Versions of {id} ({n}):", id=m.id, n=len(shown))]
    if len(shown) > HISTORY_SHOWN:
        lines.append(c.say("(the latest {n} shown)", n=HISTORY_SHOWN))
    for v in shown[-HISTORY_SHOWN:]:
        until = c.say("now") if v.valid_to is None else _at(c, v.valid_to)
        lines.append(c.say("v{version} {start} → {end}: {text}", version=v.version, start=_at(c, v.valid_from),
                           end=until, text=_snip(v.text, 160)))
    if hidden:
        lines.append(c.say("Versions said elsewhere are not shown in this group. Ask me in a private chat: {command}",
                           command=c.spell("history", m.id)))
    return CommandReply(_fit("\n".join(lines)), "history")


#: "why not recalled", per verdict of ``memory.explain.explain``: (plain words, the recall's own term with its
#: numbers, which admins get in parentheses); {id}, {when}, {position}, {k}, {score}, {cutoff}, {retention}
WHY_NOT = {
    "recalled": ("{id} was recalled in the last turn ({when}).",
                 "recalled: rank {position} of {k}, score {score}"),
    "below_cutoff": ("{id} fit the last turn ({when}), but others fit better and only the first {k} are used.",
                     "cut at rank k: rank {position}, k {k}, score {score}, cut-off {cutoff}"),
    "hidden_in_chat": ("{id} is not shown in the chat the last turn was in ({when}).",
                       "not disclosed in this chat"),
    "dormant": ("{id} is a long-term memory that has not come up for a long time, so it counts for less.",
                "dormant: score halved"),
    "decayed": ("{id} has faded with time.", "decayed: retention {retention}"),
    "not_ranked": ("{id} had nothing to do with what was said in the last turn ({when}).",
                   "below the relevance floor: no channel ranked it"),
    "newer": ("Memory {id} was saved or changed after the last recall ({when}).", "newer than the last recall"),
    "no_trace": ("Nothing has been recalled yet, so {id} was not left out of anything.", "no recall yet"),
    "forgotten": ("{id} was forgotten; it will not come back from earlier messages.", "forgotten: tombstone"),
}


#: the plain words of ``WHY_NOT`` for a turn named by its id (``GET …/why?turn=``), which need not be the last
WHY_NOT_THAT_TURN = {
    "recalled": "{id} was recalled in that turn ({when}).",
    "below_cutoff": "{id} fit that turn ({when}), but others fit better and only the first {k} are used.",
    "hidden_in_chat": "{id} is not shown in the chat that turn was in ({when}).",
    "not_ranked": "{id} had nothing to do with what was said in that turn ({when}).",
    "newer": "Memory {id} was saved or changed after that turn ({when}).",
}


#: below the relevance floor, with the floor it missed (``memory.explain.Miss``): per channel, the admin's term
FLOOR_TERMS = {
    "vector": "below the relevance floor: meaning similarity {score}, floor {floor}",
    "bm25": "below the relevance floor: word score {score}, floor {floor}",
    "standout": "below the relevance floor: its meaning did not stand out from the rest ({score}, bar {floor})",
    None: "below the relevance floor: no channel ranked it (floors: words {bm25}, meaning {vector})",
}


def why_not_text(lang: str, why, memory_id: str, *, admin: bool, when: str = "-", that_turn: bool = False) -> str:
    """The stage that dropped ``memory_id`` (``memory.explain.Why``) in plain words
    in ``lang`` ("the last turn", or with ``that_turn`` "that turn": a turn named by
    its id, ``WHY_NOT_THAT_TURN``; ``when`` its local time); ``admin`` adds the recall's own term and numbers in parentheses
    (rank, k, score, cut-off, retention; below the relevance floor, the score and
    the floor it missed, ``FLOOR_TERMS``). One text for the chat, ``/v1`` and the console."""
    e, tr, p, miss = why.entry, why.trace, why.parts, getattr(why, "miss", None)
    values = dict(id=memory_id, when=when, position=e.position if e else "-", k=tr.k if tr else "-",
                  score=f"{e.score:.4f}" if e else "-",
                  cutoff="-" if tr is None or tr.cutoff is None else f"{tr.cutoff:.4f}",
                  retention="-" if p is None else f"{p.retention:.3f}")
    plain, term = WHY_NOT.get(why.verdict, WHY_NOT["not_ranked"])
    if that_turn:
        plain = WHY_NOT_THAT_TURN.get(why.verdict, plain)
    if why.verdict == "not_ranked" and miss is not None:
        term = FLOOR_TERMS[miss.channel]
        values.update(score=f"{miss.score:.4f}", floor=f"{miss.floor:.4f}")
    elif why.verdict == "not_ranked" and tr is not None and tr.floors:
        term = FLOOR_TERMS[None]
        values.update(bm25=f"{tr.floors.get('bm25', 0.0):.4f}", vector=f"{tr.floors.get('vector', 0.0):.4f}")
    text = translate(lang, plain, **values)
    return translate(lang, "{sentence} ({term})", sentence=text, term=translate(lang, term, **values)) if admin \
        else text


#: the word after ``why`` that asks why a memory was *not* recalled
NOT_WORDS = {"not", "没", "没有", "不", "沒", "沒有"}
_CJK_NOT_WORDS = ("没有", "沒有", "没", "沒")  # longest first; 不 is left out: 「不」 starts many words (不喜欢…)


def _why_not(core, c: _Caller, rest: str) -> CommandReply:
    """``/memory why not <id or words>``: the stage that dropped the memory named by
    its id (a forgotten one too) or by words of it (the best match among those this
    chat may show), from the namespace's last recall (``memory.explain.explain``)."""
    token, text = _split_target(rest)
    text = " ".join(text.split())
    if not text:
        raise _Stop(c.say("Usage: {usage}", usage=c.spell("why", "not", "<id | words>")), "usage")
    scope = _scope(core, c, token, "why")
    trace = core.store.last_recall(scope.ns)
    if trace is not None and not trace_visible_in(trace, c.chat):
        return CommandReply(c.say("The last recall was in another chat; ask me in a private chat for its details."),
                            "why")
    m = None
    if ID_RE.fullmatch(text):
        try:
            m = core.get(scope.ns, text)
        except NotFoundError:
            if core.store.was_forgotten(scope.ns, text):
                return CommandReply(why_not_text(c.lang, Why.forgotten(trace), text, admin=c.admin), "why")
    if m is None:
        m = _best_match(core, scope, c, text)
    if m is None:
        return CommandReply(c.say("No memory of {who} matches that.", who=_who(c, scope)), "why")
    if scope.group_key and not visible_in(m, c.chat):
        raise _Stop(c.say("Memory {id} is not shown in this group. Ask me in a private chat: {command}",
                          id=m.id, command=c.spell("why", "not", m.id)), "private")
    _audit_view(core, c, scope, "why", m.id)
    row = core.store.consolidated(scope.ns, [m.id]).get(m.id)
    why = explain(trace, m, dormant=row is not None and row.dormant)
    when = _at(c, why.trace.at) if why.trace is not None else "-"
    return CommandReply(why_not_text(c.lang, why, m.id, admin=c.admin, when=when), "why")


def _best_match(core, scope: _Scope, c: _Caller, words: str) -> Memory | None:
    """The memory of the scope this chat may show whose text holds most of ``words``'
    terms (``memory.text.tokens``), newest first on a tie; None when none holds any."""
    from memory.text import tokens

    wanted = set(tokens(words))
    if not wanted:
        return None
    best, share = None, 0.0
    for m in _all_memories(core, scope):
        got = len(wanted & set(tokens(m.text))) / len(wanted)
        if got > share:
            best, share = m, got
    return best


def _all_memories(core, scope: _Scope) -> list[Memory]:
    """The live memories of the scope (in a group: learned and shown there), newest first."""
    if scope.group_key:
        return core.store.list_in_group(scope.ns, scope.group_key, limit=2000)
    return core.list(scope.ns, limit=2000)


def _cmd_why(core, c: _Caller, rest: str) -> CommandReply:
    first = rest.split(maxsplit=1)
    if first and first[0].casefold() in NOT_WORDS:
        return _why_not(core, c, first[1] if len(first) > 1 else "")
    joined = next((w for w in _CJK_NOT_WORDS if first and first[0].startswith(w)), None)
    if joined is not None:  # 「没有咖啡」: Chinese puts no space after 没有
        return _why_not(core, c, rest.strip()[len(joined):])
    scope, m = _viewed(core, c, "why", rest)
    trace = core.store.last_recall(scope.ns)
    if trace is not None and not trace_visible_in(trace, c.chat):
        return CommandReply(c.say("The last recall was in another chat; ask me in a private chat for its details."),
                            "why")
    row = core.store.consolidated(scope.ns, [m.id]).get(m.id)
    why = explain(trace, m, dormant=row is not None and row.dormant)
    tr = why.trace
    if why.verdict == "no_trace":
        return CommandReply(c.say("Nothing has been recalled for {who} yet.", who=_who(c, scope)), "why")
    when = _at(c, tr.at)
    if why.verdict == "newer":
        text = c.say("Memory {id} was saved or changed after the last recall ({when}).", id=m.id, when=when)
        return CommandReply(text, "why")
    if why.verdict == "recalled":
        head = c.say("Recalled in the last turn ({when}): #{position} of {k}, score {score}.", when=when,
                     position=why.entry.position, k=tr.k, score=f"{why.entry.score:.4f}")
    elif why.verdict == "below_cutoff":
        cutoff = "-" if tr.cutoff is None else f"{tr.cutoff:.4f}"
        head = c.say("Not recalled in the last turn ({when}): it ranked #{position}, after the top {k} "
                     "(score {score}, cut-off {cutoff}).", when=when, position=why.entry.position, k=tr.k,
                     score=f"{why.entry.score:.4f}", cutoff=cutoff)
    elif why.verdict == "hidden_in_chat":
        head = c.say("Not recalled in the last turn ({when}): that turn was in a group where this memory is "
                     "not shown.", when=when)
    elif why.verdict in ("dormant", "decayed"):
        head = why_not_text(c.lang, why, m.id, admin=c.admin, when=when)
    else:
        head = c.say("Not recalled in the last turn ({when}): neither the word search nor the meaning search "
                     "found it relevant to that message.", when=when)
        if c.admin and (why.miss is not None or tr.floors):  # the floor it missed, with its score there
            full = why_not_text(c.lang, why, m.id, admin=True, when=when)
            head += full[len(why_not_text(c.lang, why, m.id, admin=False, when=when)):]
    return CommandReply(_fit(head + "\n" + _parts_line(c, why.parts, why.entry.ranks if why.entry else None)),
                        "why")


def _cmd_export(core, c: _Caller, rest: str) -> CommandReply:
    token, _ = _split_target(rest)
    if c.chat.is_group:
        raise _Stop(c.say("For privacy I only send exports in a private chat. Send me {command} there.",
                          command=c.spell("export")), "private")
    scope = _scope(core, c, token, "export")
    doc = export_document(core, scope.ns, c.chat, c.now, ids=_all_ids(core, scope))
    memories = doc["memories"]
    if not memories:  # an empty file says nothing the reply does not
        core.store.audit(scope.ns, "export", scope.actor, count=0, chat=c.chat.key)
        return CommandReply(c.say("I don't remember anything about {who} yet.", who=_who(c, scope)), "export")
    name = f"huiyi-memories-{scope.ns.subject.replace(':', '-')}-{c.now:%Y%m%d}.json"
    data = json.dumps(doc, ensure_ascii=False, indent=2).encode("utf-8")
    core.store.audit(scope.ns, "export", scope.actor, count=len(memories), chat=c.chat.key)
    text = c.say_n("Here is the {n} memory I keep about {who}, as the file {filename}.",
                   "Here are the {n} memories I keep about {who}, as the file {filename}.", len(memories),
                   who=_who(c, scope), filename=name)
    return CommandReply(text, "export", Attachment(filename=name, mime_type="application/json", data=data))


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def export_document(core, ns: Namespace, chat, now: datetime, *, ids: list[str] | None = None) -> dict:
    """The ``huiyi.memories.v1`` document of ``ns``: every live memory (of ``ids``
    when given, else all) with the earlier versions that may be shown in
    ``chat`` (a ChatRef, or None for the person's own view), and the identities
    linked to the subject. In a group ``chat`` only memories learned in that
    group, without contexts (companions' lines of private chats), and only the
    identities on the group's platform. The shape ``/memory export`` sends and
    ``POST /v1/subjects/{subject}/import`` reads."""
    group = chat if chat is not None and chat.is_group else None
    memories = []
    if ids is None:
        ids = []
        while batch := core.list(ns, limit=500, offset=len(ids)):
            ids += [m.id for m in batch]
    for mid in ids:
        try:
            versions = core.history(ns, mid)
        except NotFoundError:
            continue
        live = versions[-1]
        # per version: a text said in private or in another group stays out of a
        # group's export even where a later version was said there
        if not visible_in(live, chat):
            continue
        older = [v for v in versions[:-1] if visible_in(v, chat)]
        memories.append({
            "id": live.id, "text": live.text, "category": live.category.value, "key": live.key,
            "importance": live.importance, "valence": live.valence, "arousal": live.arousal,
            "emotion": live.emotion, "origin": live.origin.key if live.origin else None,
            "visibility": live.visibility.value, "version": live.version,
            "created_at": _iso(live.created_at), "updated_at": _iso(live.updated_at),
            "valid_from": _iso(live.valid_from), "event_time": _iso(live.event_time),
            "recalled_at": [_iso(t) for t in live.access_times],
            # a context is a companion's line of a private chat: no group sees it
            "context": live.context if group is None else "",
            # the caller's tags: the person's own view only, as the context
            "metadata": dict(live.metadata) if group is None else {},
            "history": [{"version": v.version, "text": v.text, "category": v.category.value,
                         "origin": v.origin.key if v.origin else None, "visibility": v.visibility.value,
                         "valid_from": _iso(v.valid_from), "valid_to": _iso(v.valid_to)} for v in older],
        })
    identities = core.store.identities(ns)
    if group is not None:  # a group knows the person by their id on its own platform, not their other accounts
        identities = [i for i in identities if i.startswith(f"{group.platform}:")]
    return {"format": "huiyi.memories.v1", "tenant": ns.tenant, "subject": ns.subject,
            "identities": identities, "exported_at": _iso(now), "memories": memories}


def _admin_only(core, c: _Caller, sub: str) -> None:
    if not c.tenant_admin:
        core.store.audit(c.own, "command_denied", f"user:{c.subject}", command=sub, chat=c.chat.key)
        log.info("/memory %s by %s denied (not a tenant admin)", sub, c.subject)
        raise _Stop(c.say("Only admins of this bot can use {command}.", command=c.spell(sub)), "denied")


def _cmd_link(core, c: _Caller, rest: str) -> CommandReply:
    _admin_only(core, c, "link")
    args = rest.split()
    if len(args) not in (1, 2) or not all(is_platform_subject(a) for a in args):
        raise _Stop(_usage(c, "link"), "usage")
    subjects = args if len(args) == 2 else [c.subject, args[0]]
    if len(set(subjects)) < 2:
        raise _Stop(_usage(c, "link"), "usage")
    authority = admin.Authority(actor=f"admin:{c.subject}", tenant=c.tenant)
    result = admin.link(core, authority, c.tenant, subjects)
    return CommandReply(c.say_n("Linked {identities} as one person ({person}); {n} memory merged.",
                                "Linked {identities} as one person ({person}); {n} memories merged.", result.moved,
                                identities=", ".join(result.identities), person=result.person.subject), "link")


def _cmd_stats(core, c: _Caller, rest: str) -> CommandReply:
    _admin_only(core, c, "stats")
    s = admin.stats(core, admin.Authority(actor=f"admin:{c.subject}", tenant=c.tenant), c.tenant)
    counts = dict(tenant=s.tenant, memories=c.say_n("{n} memory", "{n} memories", s.memories),
                  people=c.say_n("{n} person", "{n} people", s.people),
                  chats=c.say_n("{n} chat", "{n} chats", s.chats), turns=c.say_n("{n} turn", "{n} turns", s.turns))
    # without a chat model (or with retelling off) every recollection is the template: a rate of
    # 100% would read as a fault, so say why instead
    if not c.t.llm.configured:
        return CommandReply(c.say("{tenant}: {memories}, {people}, {chats}, {turns}; no chat model is configured, "
                                  "so recollections are not retold: each is the plain list of memories.", **counts),
                            "stats")
    if not c.t.reconstruction.enabled:
        return CommandReply(c.say("{tenant}: {memories}, {people}, {chats}, {turns}; retelling is turned off, "
                                  "so each recollection is the plain list of memories.", **counts), "stats")
    rate = "-" if s.fallback_rate is None else f"{100 * s.fallback_rate:.1f}%"
    return CommandReply(c.say("{tenant}: {memories}, {people}, {chats}, {turns}; recollection fallback rate {rate} "
                              "(each person's latest turn).", rate=rate, **counts), "stats")


def _cmd_consolidate(core, c: _Caller, rest: str) -> CommandReply:
    token, extra = _split_target(rest)
    if extra:  # a word that names nobody must not run it for the speaker instead
        raise _not_a_person(c, extra)
    scope = _scope(core, c, token, "consolidate")
    if not scope.own and not c.tenant_admin:  # a run reads everything of the person, not only this group
        core.store.audit(scope.ns, "command_denied", f"user:{c.subject}", command="consolidate", chat=c.chat.key)
        raise _Stop(c.say("Only admins of this bot can use {command}.", command=c.spell("consolidate")), "denied")
    if c.consolidate is None:
        return CommandReply(c.say("Consolidation is not available here."), "consolidate")
    try:
        report = c.consolidate(scope.ns)  # type: ignore[operator]
    except TimeoutError:
        return CommandReply(c.say("Consolidation is still running; ask again later."), "consolidate")
    if not scope.own:
        core.store.audit(scope.ns, "consolidate", scope.actor, chat=c.chat.key)
    if report.skipped == "token_cap":
        return CommandReply(c.say("Today's model budget of this bot is spent; sorting out the memories of {who} "
                                  "waits until tomorrow.", who=_who(c, scope)), "consolidate")
    if report.skipped is not None:
        return CommandReply(c.say("Nothing new to sort out for {who}.", who=_who(c, scope)), "consolidate")
    return CommandReply(_fit("\n".join(_consolidation_lines(core, c, scope, report))), "consolidate")


def _consolidation_lines(core, c: _Caller, scope: _Scope, report) -> list[str]:
    """What ``/memory consolidate`` says about a run that ran: the counts, then the
    long-term memories this chat may see, or why none was written — no chat model
    (``model_calls`` 0 with clusters: kept as links) or every model call failed
    (``model_errors``: the fragments are tried again later)."""
    n = report.fragments
    counts = dict(who=_who(c, scope), clusters=c.say_n("{n} group", "{n} groups", len(report.clusters)))
    if not report.abstractions:
        if report.clusters and report.model_calls == 0:
            return [c.say_n("Sorted {n} recent memory of {who} into {clusters} and kept them as links; no long-term "
                            "memory written (no chat model is configured).",
                            "Sorted {n} recent memories of {who} into {clusters} and kept them as links; no "
                            "long-term memory written (no chat model is configured).", n, **counts)]
        if report.model_errors:
            return [c.say_n("Sorted {n} recent memory of {who} into {clusters}, but the chat model failed, so no "
                            "long-term memory was written; they will be tried again later.",
                            "Sorted {n} recent memories of {who} into {clusters}, but the chat model failed, so no "
                            "long-term memory was written; they will be tried again later.", n, **counts)]
        return [c.say_n("Sorted {n} recent memory of {who} into {clusters}; no long-term memory written.",
                        "Sorted {n} recent memories of {who} into {clusters}; no long-term memory written.", n,
                        **counts)]
    written = c.say_n("{n} long-term memory", "{n} long-term memories", len(report.abstractions))
    lines = [c.say_n("Sorted {n} recent memory of {who} into {clusters}; {written}:",
                     "Sorted {n} recent memories of {who} into {clusters}; {written}:", n, written=written,
                     **counts)]
    shown = core.store.get_many(scope.ns, [a.memory_id for a in report.abstractions])
    for a in report.abstractions:
        m = shown.get(a.memory_id)
        if m is not None and visible_in(m, c.chat):
            lines.append(c.say("{id} [{ctype}] {text}", id=a.memory_id, ctype=c.say(a.ctype), text=_snip(m.text)))
    if len(lines) == 1:  # none may be shown in this group
        lines.append(c.say("Only what was said in this group is listed here; ask me in private for the rest."))
    if report.model_errors:
        lines.append(c.say_n("The chat model failed for {n} group; it will be tried again later.",
                             "The chat model failed for {n} groups; they will be tried again later.",
                             report.model_errors))
    return lines


#: ``/memory mood``: weeks told by default and at most; moments and anniversaries shown
MOOD_WEEKS = 4
MOOD_WEEKS_MAX = 12
MOMENTS_SHOWN = 3
ANNIVERSARIES_SHOWN = 3


#: ``/memory mood 3 weeks``, 「/记忆 心情 三个星期」: a count (``durations.read_count``), optionally 个, then
#: optionally a unit of weeks; spaces are dropped first, so "3 weeks" and 「3 周」 read as one
_WEEKS_RE = re.compile(r"(?:last|past|最近|过去|過去)?(?P<n>.+?)[个個]?(?:w|wks?|weeks?|周|週|星期|礼拜|禮拜)?")


def _mood_weeks(c: _Caller, text: str) -> int:
    """How many weeks ``text`` asks for (``"8"``, ``"3w"``, ``"3 weeks"``, ``"２"``,
    「三」, 「十二周」, 「三个星期」), in 1…MOOD_WEEKS_MAX. A number outside that
    (0, -1, 53, 1e9, 2.5) is refused with the range; text that is no number
    ("last month", "abc") with how the command is said — a ``_Stop`` either way."""
    import unicodedata

    from gateway.durations import read_count

    plain = re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).casefold()
    m = _WEEKS_RE.fullmatch(plain)
    n = read_count(m.group("n")) if m else None
    example = c.spell("mood", "8")
    if n is None:
        raise _Stop(c.say("I can't read “{text}” as a number of weeks; nothing shown. Try e.g. {command} "
                          "(1 to {most} weeks).", text=_snip(text, 30), command=example, most=MOOD_WEEKS_MAX),
                    "usage")
    if n != int(n) or not 1 <= n <= MOOD_WEEKS_MAX:
        raise _Stop(c.say("The mood covers 1 to {most} weeks; “{text}” is outside that. Try e.g. {command}.",
                          text=_snip(text, 30), command=example, most=MOOD_WEEKS_MAX), "usage")
    return int(n)


def _mood_args(c: _Caller, rest: str) -> tuple[str | None, int]:
    """``mood``'s arguments in any order: (target token or None, weeks in
    1…MOOD_WEEKS_MAX, MOOD_WEEKS when none is given). The words that name no person
    (``platform:id``, ``@…``) are read together as the weeks (``_mood_weeks``: "3
    weeks" is two words); a second person is refused, never read as the speaker."""
    token, other = None, []
    for word in rest.split():
        if _TARGET_RE.fullmatch(word):
            if token is not None:
                raise _not_a_person(c, word)
            token = word
        else:
            other.append(word)
    return token, _mood_weeks(c, " ".join(other)) if other else MOOD_WEEKS


def mood_fragments(core, ns: Namespace, group_key: str | None) -> list[Memory]:
    """The memories a mood is read from: the live fragments of ``ns`` — in a group
    (``group_key``) only those learned and shown there (DESIGN rule 6) — without the
    consolidated abstractions (their time is the consolidation's, and they restate
    their sources)."""
    memories = _all_memories(core, _Scope(ns, group_key, True, ""))
    made = core.store.consolidated(ns, [m.id for m in memories]) if memories else {}
    return [m for m in memories if m.id not in made]


def _md(d) -> str:
    return f"{d.month:02d}-{d.day:02d}"


def anniversary_line(lang: str, years: int, text: str, who: str | None = None) -> str:
    """「一年前的今天你跟我说过：「…」」 / "A year ago today you told me: “…”" (``who``: another
    person's name or id, for an admin's view), in ``lang``."""
    if who is None:
        if years == 1:
            return translate(lang, "A year ago today you told me: “{text}”", text=text)
        return translate_plural(lang, "{n} year ago today you told me: “{text}”",
                                "{n} years ago today you told me: “{text}”", years, text=text)
    return translate_plural(lang, "{n} year ago today {who} told me: “{text}”",
                            "{n} years ago today {who} told me: “{text}”", years, text=text, who=who)


def _cmd_mood(core, c: _Caller, rest: str) -> CommandReply:
    from memory.mood import anniversaries, moments, mood_word, trend, weekly

    token, n_weeks = _mood_args(c, rest)
    scope = _scope(core, c, token, "mood")
    _audit_view(core, c, scope, "mood")
    tz = _tz(c) or ZoneInfo("UTC")
    today = c.now.astimezone(tz).date()
    memories = mood_fragments(core, scope.ns, scope.group_key)
    weeks = weekly(memories, today, n_weeks, tz)
    since = datetime.combine(weeks[0].first, datetime.min.time(), tzinfo=tz)
    top = moments(memories, since, MOMENTS_SHOWN, tz)
    who = _who(c, scope)
    lines = []
    if not any(w.n for w in weeks):
        if scope.own:
            lines.append(c.say_n("You haven't told me anything with feeling in the last {n} week.",
                                 "You haven't told me anything with feeling in the last {n} weeks.", n_weeks))
        else:
            lines.append(c.say_n("{who} hasn't told me anything with feeling in the last {n} week.",
                                 "{who} hasn't told me anything with feeling in the last {n} weeks.", n_weeks, who=who))
    else:
        if scope.own:
            lines.append(c.say_n("How the last {n} week felt, from what you told me:",
                                 "How the last {n} weeks felt, from what you told me:", n_weeks))
        else:
            lines.append(c.say_n("How the last {n} week felt for {who}, from what they told me:",
                                 "How the last {n} weeks felt for {who}, from what they told me:", n_weeks, who=who))
        for w in weeks:
            span = f"{_md(w.first)}~{_md(w.last)}"
            if w.valence is None:
                lines.append(c.say("{span}: nothing told with feeling", span=span))
            else:
                lines.append(c.say_n("{span}: {mood} ({n} moment)", "{span}: {mood} ({n} moments)", w.n, span=span,
                                     mood=c.say(f"mood: {mood_word(w.valence)}")))
        told = [w for w in weeks if w.valence is not None]
        overall = sum(w.valence * w.n for w in told) / sum(w.n for w in told)
        mood, way = c.say(f"mood: {mood_word(overall)}"), trend(weeks)
        lines.append(c.say("Overall: {mood}.", mood=mood) if way is None else
                     c.say("Overall: {mood}. {trend}", mood=mood, trend=c.say(f"mood trend: {way}")))
        if top:
            lines.append(c.say("What moved you most:") if scope.own else
                         c.say("What moved {who} most:", who=who))
            for m in top:
                lines.append(c.say("· {day} “{text}” ({emotion})", day=_md(m.day), text=_snip(m.memory.text),
                                   emotion=_emotion(c, m.memory)))
    for a in anniversaries(memories, today, tz)[:ANNIVERSARIES_SHOWN]:
        lines.append(anniversary_line(c.lang, a.years, _snip(a.memory.text), None if scope.own else who))
    if scope.group_key:
        lines.append(c.say("Only what was said in this group is listed here; ask me in private for the rest."))
    return CommandReply(_fit("\n".join(lines)), "mood")


_HANDLERS = {
    "help": _cmd_help, "list": _cmd_list, "show": _cmd_show, "search": _cmd_search, "edit": _cmd_edit,
    "forget": _cmd_forget, "history": _cmd_history, "why": _cmd_why, "export": _cmd_export, "link": _cmd_link,
    "stats": _cmd_stats, "consolidate": _cmd_consolidate, "pause": _cmd_pause, "resume": _cmd_resume,
    "mood": _cmd_mood,
    "followups": _cmd_followups,
}
