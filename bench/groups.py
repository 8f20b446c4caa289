"""Group-chat attribution benchmark, Chinese first (issue 38 item 5): who said
what, and where it may be shown.

Real Chinese dialogue lines (``<data>/zh``: DuLeMon, MemoryBank-CN, LCCC,
KdConv) are laid out as QQ groups (OneBot v11 group message events) and
Telegram groups (Bot API Updates, as aiogram reads them) of 4–8 members, plus
each member's private chat with the bot, and sent through the real bridges'
parsers (``bridges.qq.parse.parse_event``; ``bridges.telegram.parse.parse_update``
with the bot identity ``TelegramRuntime.identity`` gives) into the real turn
(``gateway.pipeline.Pipeline``, no chat model, SQLite + LanceDB + the gateway's
offline embedder in a temporary data root). As in ``huiyi eval recall --mode
turn``, the turns' recall marks are not written (``evals.recall.Probe``): each
question is a probe, and marks flushed by the wall clock would move the ranks of
the questions after it differently from run to run. Nothing leaves the process.

**The generator (deterministic, ``SEED``; the rule the labels follow).**

- *People.* Member *i* of the layout takes DuLeMon dialogue *i* (cycling when
  there are fewer) as their persona: its user facts (``user_said_persona`` and
  ``user_no_said_persona``, despaced), less a fact naming the person (我叫…)
  and less a fact the tenant's never-store classifier would cut before capture
  (``memory.never_store``: it is not the group's to lose). A member has a QQ or
  Telegram id, a nickname and a group card (QQ ``sender.card``) or a first name and
  sometimes a username (Telegram); two members of the published layout's first group share a nickname
  (小王: a display name is never an id).
- *Chats.* ``LAYOUT``: two QQ groups and two Telegram groups; the first of each
  platform holds two bots (小忆, the bot asked; 阿花, a second tenant of the same
  gateway that captures every group line), and two of its members are also in the
  second group. Each member has a private chat with 小忆 of their platform.
- *Where a fact is told.* A member's facts alternate: even ones in a group (the
  member's groups taking turns), odd ones in private. A fact in a group is said to
  the bot (@小忆 as an ``at`` segment / a ``mention`` entity); every second one
  replies to (quotes) the previous member's fact. In private the member also tells
  two MemoryBank-CN lines (private memories no group may see).
- *Talk around the facts.* LCCC chit-chat between members, not addressed; each
  member telling the bot about the next member (「小王养猫」: the other's group fact
  with its 我 replaced by their nickname) — what A says about B is A's; the bots
  speaking (DuLeMon bot lines grounded in the bot's own persona, KdConv travel
  lines), every second line @-mentioning the other bot — on QQ another bot is an
  account like a member's, on Telegram bots never see each other's messages;
  members replying to a bot's line (quoting it) and to each other, and @-ing 阿花
  (not said to 小忆); the bot's own
  lines echoed back to it (OneBot ``message_sent``); ``/记忆 列表`` (QQ) and
  ``/memory@xiaoyi_bot list`` (Telegram) in every group.
- *Questions.* DuLeMon's labels: a ``Bot:`` line grounded in a user fact makes the
  ``Usr:`` line before it a question whose gold is that fact (the recipe of
  ``evals.recall``). Each member asks theirs in private and, addressed, in each of
  their groups, two days later. In private every told fact is answerable; in a group
  only the facts told in that group — a fact told elsewhere is a probe that must not
  come back there.

**What is measured.** Per member: recall@3 and @6 (6 = the tenant's ``recall_k``)
of the answerable questions, a hit being a memory captured from the gold fact's
message among the turn's recalled ids. And four counts that should be 0:

- *speaker confusions*: (1) a fact of B recalled for A — a recalled memory of another
  namespace, captured from a message A did not send, or holding B's fact without
  naming B; (2) something A said stored as B's — a memory in B's namespace whose
  source message someone else sent (about B or not); (3) a bot's line stored as a
  member's — a memory captured from a bot's message, or holding a bot's line;
  (4) A's words about B stored as A's own — a memory from an about-B line that no
  longer names B;
- *disclosure breaches*: a memory recalled in a group, or listed there, that was not
  learned in that group (in private, or in another group: DESIGN rule 6).

Run ``python -m bench groups [--quick]`` (``--quick``: groups of 4). Prints the
per-member table, the totals and every confusion or breach with its kind and ids
(never the texts at INFO; the table prints the member nicknames, which are made up).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

__all__ = ["BREACH", "CONFUSIONS", "FILES", "LAYOUT", "QUICK_LAYOUT", "SEED", "DataMissing", "GroupPlan", "Observed",
           "Report", "Sources", "Turn", "World", "build", "check_shapes", "drive", "holds", "load", "run", "score",
           "tables", "tenants_settings"]

log = logging.getLogger(__name__)

SEED = 38
FILES = {"dulemon": Path("zh") / "dulemon_samples.jsonl", "memorybank": Path("zh") / "memorybank_cn_memory_bank.json",
         "lccc": Path("zh") / "cdialgpt_lccc_toy_valid200.json", "kdconv": Path("zh") / "kdconv_travel_test_first40.json"}
"""The four sets read, under the data directory (``bench.DATA_DIR``)."""

K = (3, 6)
T0 = datetime(2026, 11, 2, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
BOT_NAMES = {"xiaoyi": "小忆", "ahua": "阿花"}
QQ_BOTS = {"xiaoyi": 10001, "ahua": 10002}
TG_BOTS = {"xiaoyi": 7001, "ahua": 7002}
TG_USERNAMES = {"xiaoyi": "xiaoyi_bot", "ahua": "ahua_bot"}
NICKNAMES = ("小王", "小李", "阿青", "老张", "小雨", "小王", "阿杰", "小美", "胖虎", "晓晓", "阿文", "小林", "老周",
             "小七", "木木", "阿东", "小鹿", "豆豆", "老陈", "小宇")
CARDS = ("篮球-{n}", "{n}@上海", "【管理】{n}", "{n}🏀", "读书-{n}", "{n}（周末有空）")


@dataclass(frozen=True)
class GroupPlan:
    """One group of the layout: platform (``qq``/``tg``), title, size (4–8), how
    many members it shares with the previous group of its platform, and whether
    the second bot (阿花) is in it."""

    platform: str
    title: str
    size: int
    shared: int = 0
    two_bots: bool = False


LAYOUT = (GroupPlan("qq", "周末篮球群", 6, two_bots=True), GroupPlan("qq", "读书会", 5, shared=2),
          GroupPlan("tg", "城市漫步", 7, two_bots=True), GroupPlan("tg", "夜跑小分队", 4, shared=2))
"""The published layout: 18 people, 4 groups, 2 of them with two bots."""
QUICK_LAYOUT = (GroupPlan("qq", "周末篮球群", 4, two_bots=True), GroupPlan("qq", "读书会", 4, shared=2),
                GroupPlan("tg", "城市漫步", 4, two_bots=True), GroupPlan("tg", "夜跑小分队", 4, shared=2))


class DataMissing(FileNotFoundError):
    """The data directory lacks one of ``FILES``; the message names it."""


# -- the sources -----------------------------------------------------------------------


_CJK_GAP = re.compile(r"(?<=[^\x00-\x7f])\s+|\s+(?=[^\x00-\x7f])")


def _despace(text: str) -> str:
    """DuLeMon's and LCCC's word-tokenised text as written: no space beside a
    non-ASCII character, the spaces inside Latin/digit runs kept."""
    return _CJK_GAP.sub("", text).strip()


@dataclass(frozen=True)
class Persona:
    """One DuLeMon dialogue's user: ``facts`` (first person, despaced) and
    ``questions`` as (user line, index into ``facts``); ``bot_lines``: the dialogue's
    bot lines grounded in the bot's own persona."""

    facts: tuple[str, ...]
    questions: tuple[tuple[str, int], ...]
    bot_lines: tuple[str, ...]


@dataclass(frozen=True)
class Sources:
    """What the generator draws from: DuLeMon personas, MemoryBank-CN lines (one
    list per user), LCCC chit-chat lines and KdConv travel lines."""

    personas: tuple[Persona, ...]
    private_lines: tuple[tuple[str, ...], ...]
    chitchat: tuple[str, ...]
    travel: tuple[str, ...]


def load(root: Path, never_store: tuple[str, ...] | None = None) -> Sources:
    """Read the four sets under ``root`` (``FILES``). ``never_store``: the categories
    whose facts are left out (default: the tenant default). Raises DataMissing
    naming the first file that is absent, ValueError when no persona is usable."""
    from memory.never_store import DEFAULT_NEVER_STORE, without_never_store

    root = Path(root)
    for name, rel in FILES.items():
        if not (root / rel).is_file():
            raise DataMissing(f"no {name} set at {root / rel}")
    cats = tuple(DEFAULT_NEVER_STORE if never_store is None else never_store)
    personas = []
    for line in (root / FILES["dulemon"]).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        facts: dict[str, str] = {}
        for raw in d.get("user_said_persona", []) + d.get("user_no_said_persona", []):
            label, _, text = raw.partition(":")
            text = _despace(text)
            if not text or "我叫" in text or "名字" in text or without_never_store(text, cats)[1]:
                continue
            facts[label.strip()] = text
        order = list(facts)
        questions, bot_lines, prev_user = [], [], ""
        for utt in d.get("conversation", []):
            body, _, label = utt.partition("\t")
            who, _, text = body.partition(":")
            text = _despace(text)
            if who.strip() == "Usr":
                prev_user = text
            elif label.startswith("U") and label in facts and prev_user:
                questions.append((prev_user, order.index(label)))
            elif label.startswith("B") and text:
                bot_lines.append(text)
        if len(order) >= 2 and questions:
            personas.append(Persona(tuple(facts[k] for k in order), tuple(dict.fromkeys(questions)), tuple(bot_lines)))
    if not personas:
        raise ValueError(f"no DuLeMon dialogue under {root} has two usable facts and a labelled question")
    mb = json.loads((root / FILES["memorybank"]).read_text(encoding="utf-8"))
    private = [tuple(t["query"].strip() for day in u.get("history", {}).values() for t in day
                     if 6 <= len(t.get("query", "").strip()) <= 60 and "我" in t["query"]) for u in mb.values()]
    lccc = json.loads((root / FILES["lccc"]).read_text(encoding="utf-8"))["valid"]
    chit = [t for d in lccc for x in d if 2 <= len(t := _despace(x)) <= 30]
    kd = json.loads((root / FILES["kdconv"]).read_text(encoding="utf-8"))
    travel = [m["message"].strip() for d in kd for m in d.get("messages", [])[1:2] if 4 <= len(m["message"]) <= 60]
    return Sources(tuple(personas), tuple(p for p in private if p), tuple(dict.fromkeys(chit)),
                   tuple(dict.fromkeys(travel)))


# -- the world -------------------------------------------------------------------------


@dataclass
class Member:
    """One person on one platform: ``key`` (``m03``), platform id ``uid``, the
    names a platform shows, their persona and groups."""

    key: str
    platform: str
    uid: int
    name: str
    card: str
    username: str | None
    persona: Persona
    private_lines: tuple[str, ...]
    groups: list[str] = field(default_factory=list)

    @property
    def subject(self) -> str:
        return f"{self.platform}:{self.uid}"


@dataclass
class Group:
    """A group chat: ``key`` (``g1``), platform chat id, title, member keys and the
    bots (tenant suffixes, ``xiaoyi`` first) in it."""

    key: str
    platform: str
    chat_id: int
    title: str
    members: list[str]
    bots: list[str]


@dataclass(frozen=True)
class Question:
    """A labelled question: asked by ``member`` in ``chat`` (a group key, or
    ``private``); gold is fact ``fact`` of that member; ``answerable`` when the
    fact was told in that chat's reach (private sees all, a group its own)."""

    member: str
    chat: str
    text: str
    fact: int
    answerable: bool


@dataclass
class Event:
    """One message as the platform would deliver it: ``deliveries`` is
    [(tenant, payload)], one per bot that receives it. ``sender`` is a member key
    or ``bot:<name>``; ``chat`` a group key or ``private``; ``kind`` says what the
    generator meant (fact, about, chat, bot, quote, question, list, private); ``fact``
    the told fact's index, ``about`` the member talked about, ``question`` the
    label."""

    platform: str
    mid: int
    sender: str
    chat: str
    kind: str
    text: str
    deliveries: list[tuple[str, dict]]
    fact: int | None = None
    about: str | None = None
    question: Question | None = None


@dataclass
class World:
    """The generated benchmark: members, groups, events in time order, and where
    each fact was told (``told[(member, fact)] = (chat, message id)``)."""

    members: dict[str, Member]
    groups: dict[str, Group]
    events: list[Event]
    told: dict[tuple[str, int], tuple[str, int]]

    def tenant(self, platform: str, bot: str) -> str:
        return f"{platform}_{bot}"


def _cq(text: str) -> str:
    return text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class _Builder:
    """Writes the payloads; one message id counter for the whole world (ids are
    unique per platform, so a memory's ``source_message_id`` names one event)."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.mid = 5000
        self.clock = T0

    def tick(self, minutes: float = 1.0) -> int:
        self.clock += timedelta(minutes=minutes)
        return int(self.clock.timestamp())

    # QQ -------------------------------------------------------------------------
    def _qq(self, self_id: int, uid: int, name: str, card: str, segs: list[dict], group: Group | None,
            ts: int, mid: int, post_type: str = "message") -> dict:
        raw = "".join(_cq(s["data"]["text"]) if s["type"] == "text" else
                      f"[CQ:{s['type']}," + ",".join(f"{k}={_cq(str(v))}" for k, v in s["data"].items()) + "]"
                      for s in segs)
        e = {"time": ts, "self_id": self_id, "post_type": post_type, "message_id": mid, "user_id": uid,
             "message": segs, "raw_message": raw, "font": 0}
        if group is None:
            e.update(message_type="private", sub_type="friend",
                     sender={"user_id": uid, "nickname": name, "sex": "unknown", "age": 0})
        else:
            e.update(message_type="group", sub_type="normal", group_id=group.chat_id, anonymous=None,
                     sender={"user_id": uid, "nickname": name, "card": card, "sex": "unknown", "age": 0, "area": "",
                             "level": "1", "role": "member", "title": ""})
        return e

    # Telegram --------------------------------------------------------------------
    def _tg_user(self, m: Member | None, bot: str | None = None) -> dict:
        if bot is not None:
            return {"id": TG_BOTS[bot], "is_bot": True, "first_name": BOT_NAMES[bot], "username": TG_USERNAMES[bot]}
        u = {"id": m.uid, "is_bot": False, "first_name": m.name, "language_code": "zh-hans"}
        if m.username:
            u["username"] = m.username
        return u

    def _tg(self, sender: dict, chat: dict, text: str, entities: list[dict], ts: int, mid: int,
            reply: dict | None = None) -> dict:
        msg = {"message_id": mid, "from": sender, "chat": chat, "date": ts, "text": text}
        if entities:
            msg["entities"] = entities
        if reply is not None:
            msg["reply_to_message"] = reply
        return {"update_id": 900000 + mid, "message": msg}

    def _tg_chat(self, group: Group | None, m: Member | None) -> dict:
        if group is None:
            c = {"id": m.uid, "first_name": m.name, "type": "private"}
            if m.username:
                c["username"] = m.username
            return c
        return {"id": group.chat_id, "title": group.title, "type": "supergroup"}

    # one message -------------------------------------------------------------------
    def say(self, sender: str, chat: str, text: str, kind: str, *, to_bot: bool = False, mention: str | None = None,
            quote: Event | None = None, command: bool = False, fact: int | None = None, about: str | None = None,
            question: Question | None = None, minutes: float = 1.0) -> Event:
        """``sender`` (a member key or ``bot:<name>``) says ``text`` in ``chat``;
        ``to_bot``: @小忆 before it; ``mention``: @ this member or ``bot:<name>``
        instead; ``quote``: a reply to that event."""
        w = self.w
        self.mid += 1
        mid, ts = self.mid, self.tick(minutes)
        group = w.groups.get(chat)
        bot_sender = sender.removeprefix("bot:") if sender.startswith("bot:") else None
        m = None if bot_sender else w.members[sender]
        platform = group.platform if group else m.platform
        receivers = group.bots if group else ["xiaoyi"]
        target = "bot:xiaoyi" if to_bot else mention
        deliveries = []
        for bot in receivers:
            tenant = w.tenant(platform, bot)
            if platform == "qq":
                uid = QQ_BOTS[bot_sender] if bot_sender else m.uid
                segs: list[dict] = []
                if quote is not None:
                    segs.append({"type": "reply", "data": {"id": str(quote.mid)}})
                if target is not None:
                    tq = QQ_BOTS[target[4:]] if target.startswith("bot:") else w.members[target].uid
                    segs += [{"type": "at", "data": {"qq": str(tq)}}, {"type": "text", "data": {"text": " "}}]
                segs.append({"type": "text", "data": {"text": text}})
                own = bot_sender == bot
                name = BOT_NAMES[bot_sender] if bot_sender else m.name
                card = "" if bot_sender else m.card
                deliveries.append((tenant, self._qq(QQ_BOTS[bot], uid, name, card, segs, group, ts, mid,
                                                    "message_sent" if own else "message")))
            else:
                if bot_sender:  # Telegram never shows a bot another bot's messages
                    continue
                body, entities = text, []
                if target is not None:
                    if target.startswith("bot:"):
                        handle = "@" + TG_USERNAMES[target[4:]]
                        entities.append({"type": "mention", "offset": 0, "length": _utf16(handle)})
                    else:
                        other = w.members[target]
                        handle = "@" + other.username if other.username else other.name
                        entities.append({"type": "mention", "offset": 0, "length": _utf16(handle)} if other.username
                                        else {"type": "text_mention", "offset": 0, "length": _utf16(handle),
                                              "user": self._tg_user(other)})
                    body = f"{handle} {text}"
                if command:
                    cmd = text.split()[0]
                    entities = [{"type": "bot_command", "offset": 0, "length": _utf16(cmd)}]
                reply = None
                if quote is not None:
                    qsender = quote.sender
                    qfrom = (self._tg_user(None, qsender[4:]) if qsender.startswith("bot:")
                             else self._tg_user(w.members[qsender]))
                    reply = {"message_id": quote.mid, "from": qfrom, "chat": self._tg_chat(group, m),
                             "date": ts - 60, "text": quote.text}
                deliveries.append((tenant, self._tg(self._tg_user(m), self._tg_chat(group, m), body, entities, ts,
                                                    mid, reply)))
        ev = Event(platform, mid, sender, chat, kind, text, deliveries, fact=fact, about=about, question=question)
        if bot_sender and platform == "tg":
            ev.deliveries = []  # kept as an event: members may still quote it
        w.events.append(ev)
        return ev


def _third_person(fact: str, name: str) -> str:
    """「我养猫」 said about 小王: 「小王养猫」 (the first 我 becomes the name; 我的 → 小王的)."""
    return fact.replace("我", name, 1) if fact.startswith("我") else f"{name}说{fact}"


def build(sources: Sources, seed: int = SEED, layout: tuple[GroupPlan, ...] = LAYOUT) -> World:
    """The world the module docstring describes, from ``sources``, ``seed`` and
    ``layout``. Deterministic for equal arguments. Raises ValueError for a group
    outside 4–8 members or sharing more members than the previous group has."""
    rng = random.Random(seed)
    w = World({}, {}, [], {})
    b = _Builder(w)
    prev: dict[str, Group] = {}
    n = 0
    for gi, plan in enumerate(layout):
        if not 4 <= plan.size <= 8:
            raise ValueError(f"group {plan.title}: {plan.size} members, not 4-8")
        before = prev.get(plan.platform)
        if plan.shared > (len(before.members) if before else 0) or plan.shared > plan.size:
            raise ValueError(f"group {plan.title} shares {plan.shared} members with a smaller group")
        keys = list(before.members[-plan.shared:]) if plan.shared else []
        while len(keys) < plan.size:
            persona = sources.personas[n % len(sources.personas)]
            name = NICKNAMES[n % len(NICKNAMES)] + ("" if n < len(NICKNAMES) else str(n))
            uid = (30000 + 37 * n) if plan.platform == "qq" else (500000 + 41 * n)
            key = f"m{n:02d}"
            w.members[key] = Member(key, plan.platform, uid, name, CARDS[n % len(CARDS)].format(n=name),
                                    f"walker{n}" if plan.platform == "tg" and n % 2 == 0 else None, persona,
                                    sources.private_lines[n % len(sources.private_lines)][:2])
            keys.append(key)
            n += 1
        gid = (700000 + gi) if plan.platform == "qq" else -(1001000000000 + gi)
        g = Group(f"g{gi + 1}", plan.platform, gid, plan.title, keys, ["xiaoyi", "ahua"] if plan.two_bots else ["xiaoyi"])
        w.groups[g.key] = g
        for k in keys:
            w.members[k].groups.append(g.key)
        prev[plan.platform] = g

    # where each fact is told: even facts in a group (the member's groups in turn), odd ones in private
    where: dict[tuple[str, int], str] = {}
    for m in w.members.values():
        evens = 0
        for i in range(len(m.persona.facts)):
            if i % 2 == 0:
                where[(m.key, i)] = m.groups[evens % len(m.groups)]
                evens += 1
            else:
                where[(m.key, i)] = "private"

    chit = list(sources.chitchat)
    rng.shuffle(chit)
    bot_pool = [line for p in sources.personas for line in p.bot_lines] + list(sources.travel)
    rng.shuffle(bot_pool)
    pick = {"chit": 0, "bot": 0}

    def draw(pool: list[str], name: str) -> str:
        line = pool[pick[name] % len(pool)]
        pick[name] += 1
        return line

    # day 1: the groups
    for g in w.groups.values():
        b.clock = max(b.clock, T0)
        last_fact: Event | None = None
        bot_turn = 0
        for j, k in enumerate(g.members):
            m = w.members[k]
            b.say(k, g.key, draw(chit, "chit"), "chat")  # chit-chat, nobody addressed
            for i, fact in enumerate(m.persona.facts):
                if where[(k, i)] != g.key:
                    continue
                quote = last_fact if (last_fact is not None and last_fact.sender != k and i % 4 == 2) else None
                ev = b.say(k, g.key, fact, "fact", to_bot=True, quote=quote, fact=i)
                w.told[(k, i)] = (g.key, ev.mid)
                last_fact = ev
            if len(g.bots) > 1:  # the bots talk too, every second line to the other bot
                for bot in g.bots:
                    other = next(x for x in g.bots if x != bot)
                    bot_line = b.say(f"bot:{bot}", g.key, draw(bot_pool, "bot"), "bot",
                                     mention=f"bot:{other}" if bot_turn % 2 else None)
                    bot_turn += 1
                # a member answers the other bot's line, quoting it, to 小忆; and talks to 阿花
                b.say(k, g.key, draw(chit, "chit"), "quote", to_bot=True, quote=bot_line)
                b.say(k, g.key, draw(chit, "chit"), "chat", mention="bot:ahua")
            if j % 2 == 1 and last_fact is not None and last_fact.sender != k:
                b.say(k, g.key, draw(chit, "chit"), "quote", quote=last_fact)  # a reply between members
        # each member tells the bot about the next one (one of the other's facts told in this group)
        for j, k in enumerate(g.members):
            other = w.members[g.members[(j + 1) % len(g.members)]]
            facts = [i for i in range(len(other.persona.facts)) if where[(other.key, i)] == g.key]
            if not facts:
                continue
            line = _third_person(other.persona.facts[facts[0]], other.name)
            b.say(k, g.key, line, "about", to_bot=True, about=other.key)
            if j % 3 == 0:  # and sometimes to the other one, @-ing them
                b.say(k, g.key, line, "about", mention=other.key, about=other.key)
        for k in g.members[:2]:
            text = "/记忆 列表" if g.platform == "qq" else "/memory@xiaoyi_bot list"
            b.say(k, g.key, text, "list", to_bot=g.platform == "qq", command=True)

    # day 1 evening: the private chats
    b.clock = T0 + timedelta(hours=10)
    for m in w.members.values():
        for i, fact in enumerate(m.persona.facts):
            if where[(m.key, i)] == "private":
                ev = b.say(m.key, "private", fact, "fact", fact=i)
                w.told[(m.key, i)] = ("private", ev.mid)
        for line in m.private_lines:
            b.say(m.key, "private", line, "private")

    # day 3: the questions, in private and in each group
    b.clock = T0 + timedelta(days=2)
    for m in w.members.values():
        for text, i in m.persona.questions:
            if (m.key, i) not in w.told:
                continue
            told_in = w.told[(m.key, i)][0]
            for chat in ["private"] + m.groups:
                q = Question(m.key, chat, text, i, chat == "private" or told_in == chat)
                b.say(m.key, chat, text, "question", to_bot=chat != "private", question=q)
    return w


# -- driving it through the bridges and the turn -----------------------------------------


@dataclass
class Turn:
    """One delivery that became a turn: the event, the tenant, the namespace and
    chat key the pipeline used, the recalled memories as (id, namespace, origin
    chat key, text, source message id) in rank order, and the reply."""

    event: Event
    tenant: str
    namespace: str
    chat: str
    recalled: list[tuple[str, str, str, str, str | None]]
    reply: str | None


@dataclass
class Observed:
    """What the run left: the turns, the deliveries the parsers ignored (by kind),
    and every live memory at the end as {tenant: {subject: [Memory]}}."""

    turns: list[Turn] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    memories: dict[str, dict[str, list]] = field(default_factory=dict)
    seconds: float = 0.0


def tenants_settings(world: World) -> dict:
    """The gateway's tenants for ``world``: per platform 小忆 (the bot asked) and
    阿花 (the second bot, capturing every group line)."""
    from gateway.config import TenantSettings

    out = {}
    for platform in sorted({g.platform for g in world.groups.values()} | {m.platform for m in world.members.values()}):
        for bot in ("xiaoyi", "ahua"):
            extra: dict = {"persona_name": BOT_NAMES[bot], "capture_all_group_messages": bot == "ahua"}
            if platform == "qq":
                extra["qq"] = {"self_ids": [str(QQ_BOTS[bot])]}
            else:
                extra["telegram"] = {"bot_username": TG_USERNAMES[bot]}
                extra["telegram_bot_id"] = str(TG_BOTS[bot])
            out[world.tenant(platform, bot)] = TenantSettings(**extra)
    return out


async def drive(world: World, pipeline) -> Observed:
    """Send every delivery of ``world`` through the real parser of its platform and
    ``pipeline.handle`` (capture inline), in order; returns what was observed.
    ``pipeline``: a ``gateway.pipeline.Pipeline`` whose settings hold
    ``tenants_settings(world)``."""
    from bridges.qq.parse import parse_event
    from bridges.telegram.parse import parse_update
    from bridges.telegram.runtime import TelegramRuntime
    from memory.errors import NotFoundError
    from memory.types import Namespace

    core = pipeline.core
    tg = TelegramRuntime(pipeline)
    obs = Observed()
    t0 = time.perf_counter()
    for ev in world.events:
        for tenant, payload in ev.deliveries:
            if ev.platform == "qq":
                msg = parse_event(payload)
            else:
                bot_id, username = tg.identity(tenant)
                msg = parse_update(payload, bot_id=bot_id, bot_username=username)
            if msg is None:
                obs.ignored[ev.kind] += 1
                continue
            res = await pipeline.handle(tenant, msg)
            if res.duplicate:
                continue
            ns = Namespace.parse(res.namespace)
            recalled = []
            for mid in res.recalled:
                try:
                    mem = core.get(ns, mid)
                except NotFoundError:
                    continue
                recalled.append((mem.id, str(mem.namespace), mem.origin.key if mem.origin else "",
                                 mem.text, mem.source_message_id))
            obs.turns.append(Turn(ev, tenant, res.namespace, res.chat, recalled, res.reply))
    await pipeline.drain()
    obs.seconds = time.perf_counter() - t0
    subjects = {m.subject for m in world.members.values()}
    subjects |= {f"qq:{v}" for v in QQ_BOTS.values()} | {f"tg:{v}" for v in TG_BOTS.values()}
    for tenant in pipeline.settings.tenants:
        obs.memories[tenant] = {}
        for subject in sorted(subjects):
            mems = core.list(Namespace(tenant, subject), limit=10_000)
            if mems:
                obs.memories[tenant][subject] = mems
    return obs


# -- scoring ---------------------------------------------------------------------------


_PUNCT = re.compile(r"[\s\W_]+", re.UNICODE)


def _norm(text: str) -> str:
    return _PUNCT.sub("", text).lower()


def _core(fact: str) -> str:
    """A fact's content: normalised, a leading 我 dropped."""
    n = _norm(fact)
    return n.removeprefix("我")


def _bigrams(s: str) -> set[str]:
    return {s[i:i + 2] for i in range(len(s) - 1)}


def holds(text: str, fact_core: str, at_least: float = 0.7) -> bool:
    """Does ``text`` hold a fact whose content is ``fact_core`` (``_core``)? Contained
    whole, or at least ``at_least`` of its character bigrams in the text; cores under
    3 characters never match (too short to say whose they are)."""
    if len(fact_core) < 3:
        return False
    t = _norm(text)
    if fact_core in t:
        return True
    grams = _bigrams(fact_core)
    return bool(grams) and len(grams & _bigrams(t)) / len(grams) >= at_least


@dataclass
class Finding:
    """One confusion or breach: its kind, the tenant, the namespace it is in, the
    memory id, and a short why (ids and keys, no text)."""

    kind: str
    tenant: str
    namespace: str
    memory_id: str
    why: str


CONFUSIONS = ("fact of B recalled for A", "A's line stored as B's", "bot line stored as a member's",
              "about B stored as A's own")
BREACH = "disclosure breach"


@dataclass
class Report:
    """Per member: {member key: {"answerable", "hits@3", "hits@6", "probes",
    "facts", "stored"}}; ``findings``: every confusion and breach; ``turns`` and
    ``ignored``: deliveries that became turns and that the parsers ignored."""

    members: dict[str, dict[str, int]]
    findings: list[Finding]
    turns: int
    ignored: dict[str, int]
    stored: dict[tuple[str, str], int] = field(default_factory=dict)
    """Live memories at the end by (tenant, kind of the line they were captured from)."""

    def count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind)

    @property
    def confusions(self) -> int:
        return sum(self.count(k) for k in CONFUSIONS)

    @property
    def breaches(self) -> int:
        return self.count(BREACH)


def score(world: World, obs: Observed) -> Report:
    """The figures of the module docstring from ``world`` (the labels) and ``obs``."""
    sent: dict[tuple[str, str], Event] = {(ev.platform, str(ev.mid)): ev for ev in world.events}
    by_subject = {m.subject: m for m in world.members.values()}
    group_chat = {g.key: f"{g.platform}:group:{g.chat_id}" for g in world.groups.values()}
    cores = {(m.key, i): _core(f) for m in world.members.values() for i, f in enumerate(m.persona.facts)}
    bot_lines = [ev for ev in world.events if ev.kind == "bot" and len(_norm(ev.text)) >= 6]
    findings: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()

    def find(kind: str, tenant: str, ns: str, mid: str, why: str) -> None:
        if (kind, tenant, mid) not in seen:
            seen.add((kind, tenant, mid))
            findings.append(Finding(kind, tenant, ns, mid, why))

    def others_fact(member: Member, text: str, said: str) -> str | None:
        """The key of another member (same platform) whose fact ``text`` holds and
        ``said`` (what ``member`` wrote, the memory's source) does not, when the text
        does not name that member: words that came from elsewhere (a quote, a
        context line, another person)."""
        for (k, i), c in cores.items():
            other = world.members[k]
            if k == member.key or other.platform != member.platform or other.name in text:
                continue
            if holds(text, c) and not holds(said, c):
                return k
        return None

    # the stored memories
    stored_from: dict[tuple[str, str], list[str]] = defaultdict(list)  # (tenant, message id) -> memory ids
    stored_kinds: dict[tuple[str, str], int] = defaultdict(int)
    for tenant, spaces in obs.memories.items():
        platform = tenant.split("_", 1)[0]
        for subject, mems in spaces.items():
            ns = f"{tenant}/{subject}"
            owner = by_subject.get(subject)
            for mem in mems:
                src = sent.get((platform, mem.source_message_id or ""))
                stored_from[(tenant, mem.source_message_id or "")].append(mem.id)
                stored_kinds[(tenant, src.kind if src else "unknown")] += 1
                if src is None:
                    continue
                if src.sender.startswith("bot:"):
                    find(CONFUSIONS[2], tenant, ns, mem.id, f"captured from {src.sender}'s message {src.mid}")
                    continue
                if owner is None or src.sender != owner.key:
                    find(CONFUSIONS[1], tenant, ns, mem.id,
                         f"in {subject}'s namespace, captured from {src.sender}'s {src.kind} message {src.mid}")
                    continue
                for bl in bot_lines:
                    if bl.platform == platform and holds(mem.text, _norm(bl.text)):
                        find(CONFUSIONS[2], tenant, ns, mem.id, f"holds {bl.sender}'s line {bl.mid}")
                        break
                if src.kind == "about" and src.about is not None and world.members[src.about].name not in mem.text:
                    find(CONFUSIONS[3], tenant, ns, mem.id,
                         f"{owner.key}'s line {src.mid} about {src.about} stored without naming them")
                elif src.kind != "about":
                    b_key = others_fact(owner, mem.text, src.text)
                    if b_key is not None:
                        find(CONFUSIONS[1], tenant, ns, mem.id, f"holds {b_key}'s fact, from {owner.key}'s "
                                                                f"{src.kind} message {src.mid}")

    # the turns: what was recalled for whom, and where
    members = {k: {"facts": len(m.persona.facts), "stored": 0, "answerable": 0, "probes": 0,
                   **{f"hits@{k_}": 0 for k_ in K}} for k, m in world.members.items()}
    for (k, i), (chat, mid) in world.told.items():
        tenant = world.tenant(world.members[k].platform, "xiaoyi")
        members[k]["stored"] += bool(stored_from.get((tenant, str(mid))))
    for turn in obs.turns:
        ev = turn.event
        subject = turn.namespace.split("/", 1)[1]
        asker = by_subject.get(subject)
        in_group = ev.chat != "private"
        platform = ev.platform
        for rank, (mid, ns, origin, text, src_id) in enumerate(turn.recalled):
            if ns != turn.namespace:
                find(CONFUSIONS[0], turn.tenant, turn.namespace, mid, f"recalled from {ns} in message {ev.mid}")
            src = sent.get((platform, src_id or ""))
            if asker is not None and src is not None and src.sender != asker.key:
                find(CONFUSIONS[0], turn.tenant, turn.namespace, mid,
                     f"recalled for {asker.key} in message {ev.mid}, captured from {src.sender}'s message {src.mid}")
            elif asker is not None and src is not None and src.kind != "about" and \
                    (b_key := others_fact(asker, text, src.text)) is not None:
                find(CONFUSIONS[0], turn.tenant, turn.namespace, mid,
                     f"recalled for {asker.key} in message {ev.mid}, holds {b_key}'s fact")
            if in_group and origin != group_chat[ev.chat]:
                find(BREACH, turn.tenant, turn.namespace, mid,
                     f"recalled in {group_chat[ev.chat]} (message {ev.mid}), learned in {origin or 'unknown'}")
        if in_group and ev.kind == "list" and turn.reply and asker is not None:
            for mem in obs.memories.get(turn.tenant, {}).get(subject, []):
                where = mem.origin.key if mem.origin else ""
                if where != group_chat[ev.chat] and len(_norm(mem.text)) >= 4 and _norm(mem.text) in _norm(turn.reply):
                    find(BREACH, turn.tenant, turn.namespace, mem.id,
                         f"listed in {group_chat[ev.chat]} (message {ev.mid}), learned in {where or 'unknown'}")
        q = ev.question
        if q is None or not turn.tenant.endswith("_xiaoyi"):
            continue
        gold = set(stored_from.get((turn.tenant, str(world.told[(q.member, q.fact)][1])), []))
        ids = [r[0] for r in turn.recalled]
        if q.answerable:
            members[q.member]["answerable"] += 1
            for k_ in K:
                members[q.member][f"hits@{k_}"] += bool(gold & set(ids[:k_]))
        else:
            members[q.member]["probes"] += 1
    return Report(members, findings, len(obs.turns), dict(obs.ignored), dict(stored_kinds))


# -- the bench -------------------------------------------------------------------------


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def tables(world: World, report: Report) -> list[str]:
    """The report as plain text tables: per member, per platform and kind, the
    totals, then each finding (kind, tenant, namespace, memory id, why)."""
    from bench import table

    rows = []
    for k, f in report.members.items():
        m = world.members[k]
        a = f["answerable"]
        rows.append([k, m.name, m.platform, ",".join(m.groups), f"{f['stored']}/{f['facts']}", a, f["probes"],
                     *(f[f"hits@{k_}"] / a if a else float("nan") for k_ in K),
                     sum(1 for x in report.findings if x.namespace.endswith("/" + m.subject) and x.kind != BREACH),
                     sum(1 for x in report.findings if x.namespace.endswith("/" + m.subject) and x.kind == BREACH)])
    out = [table("per member (小忆 is asked; recall over the questions whose fact was told within the chat's reach)",
                 ["member", "name", "platform", "groups", "stored/facts", "questions", "probes",
                  *(f"recall@{k_}" for k_ in K), "confusions", "breaches"], rows)]
    agg = []
    for platform in ("qq", "tg", "all"):
        sel = [f for k, f in report.members.items() if platform == "all" or world.members[k].platform == platform]
        a = sum(f["answerable"] for f in sel)
        agg.append([platform, len(sel), a, sum(f["probes"] for f in sel),
                    *(sum(f[f"hits@{k_}"] for f in sel) / a if a else float("nan") for k_ in K)])
    out.append(table("recall by platform", ["platform", "members", "questions", "probes",
                                             *(f"recall@{k_}" for k_ in K)], agg))
    kinds = sorted({k for _, k in report.stored})
    tenants = sorted({t for t, _ in report.stored})
    out.append(table("memories at the end, by the line they were captured from (阿花 captures every group line)",
                     ["tenant", *kinds], [[t, *(report.stored.get((t, k), 0) for k in kinds)] for t in tenants]))
    out.append(table("speaker confusions and disclosure breaches (expected 0 each)", ["kind", "count"],
                     [[k, report.count(k)] for k in (*CONFUSIONS, BREACH)]
                     + [["speaker confusions, all kinds", report.confusions], ["disclosure breaches", report.breaches]]))
    if report.findings:
        out.append(table("findings", ["kind", "tenant", "namespace", "memory", "why"],
                         [[f.kind, f.tenant, f.namespace, f.memory_id, f.why] for f in report.findings]))
    return out


def check_shapes(world: World) -> tuple[int, int]:
    """Validate every delivery of ``world`` with the platforms' own client models:
    each Telegram payload as aiogram's ``Update`` and each OneBot ``message`` event as
    nonebot-adapter-onebot's ``GroupMessageEvent`` / ``PrivateMessageEvent`` (the
    bot's own ``message_sent`` echoes have no model there). Returns (Telegram, OneBot)
    counts; raises pydantic ValidationError for a payload they refuse. Imports both
    libraries (seconds)."""
    from aiogram.types import Update
    from nonebot.adapters.onebot.v11 import GroupMessageEvent, PrivateMessageEvent

    tg = ob = 0
    for ev in world.events:
        for _, payload in ev.deliveries:
            if ev.platform == "tg":
                Update.model_validate(payload)
                tg += 1
            elif payload["post_type"] == "message":
                (GroupMessageEvent if payload["message_type"] == "group" else PrivateMessageEvent).model_validate(payload)
                ob += 1
    return tg, ob


def run(data_dir: Path, *, quick: bool = False, emit=print) -> int:
    """Build the world from ``data_dir``, drive it through a fresh gateway pipeline in
    a temporary data root and print the tables. Returns 0, 1 when a confusion or a
    breach was found, 2 when the data is absent (said on stderr)."""
    try:
        sources = load(data_dir)
    except (DataMissing, ValueError) as e:
        print(f"bench groups needs the Chinese dialogue sets under {data_dir} ({', '.join(map(str, FILES.values()))}):"
              f" {e}. Set HUIYI_EVAL_DATA_DIR or --data-dir.", file=sys.stderr)
        return 2
    from evals.recall import Probe
    from gateway.config import load_settings
    from gateway.pipeline import Pipeline
    from gateway.service import build_core

    world = build(sources, SEED, QUICK_LAYOUT if quick else LAYOUT)
    n_del = sum(len(ev.deliveries) for ev in world.events)
    emit(f"group-chat attribution (issue 38): {len(world.members)} people in {len(world.groups)} groups "
         f"({', '.join(f'{g.title} {g.platform} {len(g.members)}+{len(g.bots)} bot(s)' for g in world.groups.values())}),"
         f" {len(world.events)} messages, {n_del} deliveries; seed {SEED}; data {data_dir}; load average {_load()}")
    tg, ob = check_shapes(world)
    emit(f"payloads checked by the platforms' client models: {tg} Telegram Updates (aiogram), {ob} OneBot v11 "
         f"message events (nonebot-adapter-onebot)")
    workdir = Path(tempfile.mkdtemp(prefix="huiyi-bench-groups-"))
    try:
        settings = load_settings(data_dir=workdir, database_url=f"sqlite:///{workdir / 'huiyi.db'}",
                                 index_uri=str(workdir / "index"), tenants=tenants_settings(world))
        core = build_core(settings)
        # each question is a probe: the turn's recall marks (ACT-R accesses, co-recall links, flushed
        # by the wall clock) would move later questions' ranks differently from run to run
        pipeline = Pipeline(settings, Probe(core))
        try:
            obs = asyncio.run(drive(world, pipeline))
        finally:
            core.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = score(world, obs)
    for block in tables(world, report):
        emit(block + "\n")
    emit(f"{report.turns} turns ({', '.join(f'{k} {v}' for k, v in sorted(report.ignored.items()))} deliveries ignored "
         f"by the parsers) in {obs.seconds:.0f} s; load average {_load()}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from bench import DATA_DIR

    sys.exit(run(DATA_DIR, quick="--quick" in sys.argv))
