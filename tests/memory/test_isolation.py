"""Isolation: a person's memories never reach anyone else — BM25, vector and
fused, on SQLite and PostgreSQL with a real LanceDB index."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime, timezone

import pytest
from sqlalchemy import text
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memory.admin import Authority, reindex
from memory.errors import NamespaceError, NotFoundError
from memory.recall import EXACT_MAX, RecallParams
from memory.explain import visible_in
from memory.types import ChatKind, ChatRef, Namespace, Visibility

TEXTS = ["我养了一只叫煤球的黑猫", "我喜欢喝美式咖啡", "I love hiking in the Alps", "我的WiFi密码忘了",
         "My sister lives in Paris 🗼", "我在上海做程序员", "我對花生過敏", "週末我常去爬山"]
FRAGMENTS = [("今天又加班到十点", "这周又加班到十点，好累"), ("老板又改需求了", "老板今天又改需求了😩"),
             ("I worked late again tonight", "Worked late again, until ten tonight")]
"""Pairs of related fragments a person says before a consolidation step (one cluster each)."""


PATHS = pytest.mark.parametrize("exact_max", [0, EXACT_MAX], ids=["index", "exact"])
"""Recall through the LanceDB index (0) and the exact in-process search of small namespaces."""


@PATHS
@pytest.mark.parametrize("channels", [("bm25",), ("vector",), ("bm25", "vector")])
def test_near_identical_texts_never_cross(core, channels, exact_max):
    """Two subjects store near-identical texts; each recall returns only the asker's rows."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    with core.batch():  # one index write for both: what is pinned is what recall returns
        for t in TEXTS:
            core.add(a, core.new(a, t))
            core.add(b, core.new(b, t + "。"))
    for q in ["猫", "煤球", "咖啡", "hiking", "Paris", "過敏", "爬山"]:
        for ns in (a, b):
            hits = core.recall(ns, [q], params=RecallParams(k=20, channels=channels, exact_max=exact_max))
            assert hits, f"{q} found nothing in {ns}"
            assert {h.memory.namespace for h in hits} == {ns}


@PATHS
def test_empty_namespace_recalls_nothing(core, exact_max):
    """A namespace with no memories gets [] even when others match the query exactly."""
    a = Namespace("default", "tg:1")
    core.add(a, core.new(a, "我养了一只叫煤球的黑猫"))
    params = RecallParams(exact_max=exact_max)
    assert core.recall(Namespace("default", "tg:999"), ["我养了一只叫煤球的黑猫"], params=params) == []
    assert core.recall(Namespace("other", "tg:1"), ["煤球"], params=params) == []


def test_get_update_forget_history_refuse_other_namespaces(core):
    """Reads and writes naming another person's memory id behave as if it did not exist."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    m = core.add(a, core.new(a, "我养了一只叫煤球的黑猫")).memory
    for op in (lambda: core.get(b, m.id), lambda: core.update(b, m.id, "x"), lambda: core.forget(b, m.id),
               lambda: core.history(b, m.id)):
        with pytest.raises(NotFoundError):
            op()
    assert core.get(a, m.id).text == "我养了一只叫煤球的黑猫"


def test_a_read_of_many_namespaces_finds_each_id_only_in_its_own(core):
    """The index write pass's one read for many people (Store.get_many_of) finds an id only in the namespace
    it belongs to: asked for in another person's namespace it is absent there, as get_many's."""
    a, b, c = Namespace("default", "tg:1"), Namespace("default", "tg:2"), Namespace("default", "tg:3")
    ma = core.add(a, core.new(a, "我养了一只叫煤球的黑猫")).memory
    mb = core.add(b, core.new(b, "I moved to Leeds last spring")).memory
    got = core.store.get_many_of({a: [ma.id, mb.id], b: [mb.id], c: [ma.id, mb.id, "nonesuch"]})
    assert set(got[a]) == {ma.id} and got[a][ma.id].text == "我养了一只叫煤球的黑猫"
    assert set(got[b]) == {mb.id} and got[b][mb.id].namespace == b
    assert got[c] == {}
    assert got[a][ma.id] == core.store.get_many(a, [ma.id])[ma.id]


def test_same_key_in_two_namespaces_never_merges(core):
    """Dedupe and latest-wins are per namespace: equal keys in two namespaces stay two rows."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    ra = core.add(a, core.new(a, "我的猫叫煤球", key="pet.name"))
    rb = core.add(b, core.new(b, "我的猫叫煤球", key="pet.name"))
    assert ra.action == rb.action == "stored" and ra.memory.id != rb.memory.id
    rb2 = core.add(b, core.new(b, "我的猫叫雪球", key="pet.name"))
    assert rb2.action == "superseded"
    assert core.get(a, ra.memory.id).text == "我的猫叫煤球"


def test_forget_in_one_namespace_does_not_block_another(core):
    """A tombstone in one namespace never refuses the same text in another."""
    a, b = Namespace("default", "tg:1"), Namespace("default", "tg:2")
    m = core.add(a, core.new(a, "我养了一只叫煤球的黑猫")).memory
    core.forget(a, m.id)
    assert core.add(b, core.new(b, "我养了一只叫煤球的黑猫")).action == "stored"


@PATHS
def test_group_disclosure_private_memories_stay_out_of_groups(core, exact_max):
    """A memory learned in private is never recalled in a group; a group memory is
    recalled in its group and in private, not in another group."""
    from memory.types import Visibility

    a = Namespace("default", "tg:1")
    g1 = ChatRef("tg", ChatKind.GROUP, "-100111")
    g2 = ChatRef("tg", ChatKind.GROUP, "-100222")
    dm = ChatRef("tg", ChatKind.PRIVATE, "1")
    p = core.add(a, core.new(a, "我养了一只叫煤球的黑猫", origin=dm, visibility=Visibility.PRIVATE)).memory
    g = core.add(a, core.new(a, "我家的猫喜欢晒太阳", origin=g1, visibility=Visibility.GROUP)).memory
    ids = lambda chat: {h.memory.id for h in core.recall(a, ["猫"], chat=chat,  # noqa: E731
                                                        params=RecallParams(exact_max=exact_max))}
    assert ids(dm) == {p.id, g.id}
    assert ids(g1) == {g.id}
    assert ids(g2) == set()


@pytest.mark.parametrize("bad", ["default/tg:1' OR '1'='1", "default/tg:1 OR 1=1", "x/y", "default/tg:1\x00"])
def test_malformed_namespace_strings_rejected_before_any_query(bad):
    """Namespace strings with quotes, SQL or filter syntax never reach a filter."""
    with pytest.raises(NamespaceError):
        Namespace.parse(bad)


#: Chats the machine speaks in: each person's private chat (None: resolved per
#: namespace) and two groups.
GROUPS = [ChatRef("tg", ChatKind.GROUP, "-100111"), ChatRef("tg", ChatKind.GROUP, "-100222")]
_VERSION_LINE = re.compile(r"^v(\d+) ", re.MULTILINE)


def _history_in_chat(core, tenant: str, asker: str, chat: ChatRef, memory_id: str, target: str | None,
                     role: str | None) -> str:
    """The reply of ``/memory history [target] <id>`` sent by tg:``asker`` in ``chat`` (the real command path)."""
    from gateway.commands import execute
    from gateway.config import TenantSettings
    from bridges.contract import InboundMessage

    text = f"/memory history {target + ' ' if target else ''}{memory_id}"
    msg = InboundMessage(platform="tg", message_id=uuid.uuid4().hex[:12], sender_id=asker, chat_kind=chat.kind,
                         chat_id=chat.chat_id, text=text, timestamp=datetime.now(timezone.utc), is_command=True,
                         sender_role=role)
    own = Namespace(tenant, f"tg:{asker}")
    return execute(core, tenant, TenantSettings(), msg, own, "en").text


class IsolationMachine(RuleBasedStateMachine):
    """Random add / keyed add (latest wins) / tag, filtered list and recall, batch
    forget naming another namespace's ids, an admin's forget of one group / restating a keyed fact in a private
    chat or one of two groups / update / history / history shown in a chat /
    recall (with the association channel off, on, and dominant) / links made from
    ids of two namespaces / ids recalled together (with a foreign one) / reindex /
    forget / consolidation (the fake model, which also cites an invented id and
    another person's memory) across 5 namespaces of a fresh tenant. Every hit and
    every history version belongs to the asking namespace and to the model's live
    ids and versions; another namespace's id is NotFound for every verb;
    ``/memory history`` shown in a chat (by the person, or by a group admin in a
    group) lists exactly the versions whose own text was said where that chat may
    see it (DESIGN rule 6, per version); no association link ever joins two
    namespaces or names a forgotten memory; every consolidated memory and each of
    its sources is a live memory of its own namespace, no phantom or foreign
    citation reaches its text, and forgetting a source takes every abstraction
    citing it along."""

    core = None  # set by the test
    llm = None  # the fake model server, set by the test
    made = 0  # abstractions the consolidation steps wrote over the whole run

    @initialize()
    def setup(self):
        from gateway.maintenance import OPTIMIZE_AFTER_WRITES

        # every program shares the one index: compact it as the gateway's maintenance task does (after
        # OPTIMIZE_AFTER_WRITES writes), so the programs also run across compactions and each search and
        # merge does not open one fragment per write of all the programs before (a quarter of the run)
        if self.core.index.writes_since_optimize >= OPTIMIZE_AFTER_WRITES:
            self.core.index.optimize()
        self.tenant = "t" + uuid.uuid4().hex[:10]
        self.spaces = [Namespace(self.tenant, f"tg:{i}") for i in range(1, 6)]  # tg:0 is a placeholder id, refused (issue 13 item 1)
        self.live: dict[Namespace, set[str]] = {ns: set() for ns in self.spaces}
        self.versions: dict[str, int] = {}
        # memory id → the chat key each version's text was said in, by version
        # (None: unknown, e.g. added with no origin — shown in no group)
        self.said_in: dict[str, list[str | None]] = {}
        self.cites: dict[str, set[str]] = {}  # consolidated memory id → the fragment ids it cites
        self.tags: dict[str, str] = {}  # memory id → its metadata "tag" (issue 26 item 17)

    def _stored(self, ns, r, chat: ChatRef | None = None):
        if r.action == "rejected":  # said in the same instant as a forget of the same text
            return
        assert r.memory.namespace == ns
        where = chat.key if chat is not None else None
        if r.action == "stored":
            self.versions[r.memory.id] = 1
            self.said_in[r.memory.id] = [where]
        elif r.action == "superseded":
            self.versions[r.memory.id] += 1
            # new evidence with an origin moves the text's chat; none keeps the old one
            self.said_in[r.memory.id].append(where if chat is not None else self.said_in[r.memory.id][-1])
        assert r.memory.version == self.versions[r.memory.id]
        self.live[ns].add(r.memory.id)

    def _private(self, ns: Namespace) -> ChatRef:
        return ChatRef("tg", ChatKind.PRIVATE, ns.subject.split(":", 1)[1])

    @rule(i=st.integers(0, 4), t=st.sampled_from(TEXTS), suffix=st.sampled_from(["", "!", " 😀", "呀", "。"]))
    def add(self, i, t, suffix):
        ns = self.spaces[i]
        self._stored(ns, self.core.add(ns, self.core.new(ns, t + suffix)))

    @rule(i=st.integers(0, 4), t=st.sampled_from(TEXTS), slot=st.sampled_from(["pet.cat.name", "home.city"]))
    def add_keyed(self, i, t, slot):
        ns = self.spaces[i]
        r = self.core.add(ns, self.core.new(ns, t, key=slot))
        if r.action == "superseded":
            assert r.memory.id in self.live[ns]
        self._stored(ns, r)

    def _say(self, ns: Namespace, t: str, slot: str, where) -> str | None:
        """``ns`` states a keyed fact in their private chat or group ``where``; the memory id (None if refused)."""
        chat = self._private(ns) if where == "private" else GROUPS[where]
        vis = Visibility.GROUP if chat.is_group else Visibility.PRIVATE
        r = self.core.add(ns, self.core.new(ns, t, key=slot, origin=chat, visibility=vis,
                                            source_message_id=uuid.uuid4().hex[:8]))
        self._stored(ns, r, chat)
        return r.memory.id if r.memory is not None and r.action != "rejected" else None

    def _check_history_shown(self, ns: Namespace, mid: str, where, admin: bool) -> None:
        """``/memory history`` in a chat lists exactly the versions that chat may see."""
        chat = self._private(ns) if where == "private" else GROUPS[where]
        by_admin = admin and chat.is_group  # a group admin (another person) asks about ns in their group
        asker = "9" + ns.subject.split(":", 1)[1] if by_admin else ns.subject.split(":", 1)[1]
        reply = _history_in_chat(self.core, self.tenant, asker, chat, mid, ns.subject if by_admin else None,
                                 "administrator" if by_admin else None)
        said = self.said_in[mid]

        def may_see(key: str | None) -> bool:
            if not chat.is_group:
                return True
            return key is not None and ChatRef.parse(key).group_key == chat.group_key

        expected = {n for n, key in enumerate(said, start=1) if may_see(key)} if may_see(said[-1]) else set()
        shown = {int(n) for n in _VERSION_LINE.findall(reply)}
        assert shown == expected, (chat.key, said, reply)
        for v in self.core.history(ns, mid):  # and the store's own per-version verdict agrees
            assert visible_in(v, chat) == may_see(said[v.version - 1]), (v, chat.key)

    @rule(i=st.integers(0, 4), t=st.sampled_from(TEXTS), slot=st.sampled_from(["pet.dog.name", "home.city"]),
          where=st.sampled_from(["private", 0, 1]))
    def say_in_chat(self, i, t, slot, where):
        self._say(self.spaces[i], t, slot, where)

    @rule(i=st.integers(0, 4), slot=st.sampled_from(["pet.dog.name", "home.city"]),
          said=st.lists(st.tuples(st.sampled_from(TEXTS), st.sampled_from(["private", 0, 1])), min_size=2,
                        max_size=4))
    def restate_across_chats(self, i, slot, said):
        """One fact restated in other chats, then its history shown in every chat, by the person and by a group admin."""
        ns = self.spaces[i]
        mid = None
        for t, where in said:
            mid = self._say(ns, t, slot, where) or mid
        if mid is None or mid not in self.live[ns]:
            return
        for where in ("private", 0, 1):
            for admin in (False, True):
                self._check_history_shown(ns, mid, where, admin)

    @rule(i=st.integers(0, 4), pick=st.integers(0, 50), where=st.sampled_from(["private", 0, 1]),
          admin=st.booleans())
    def history_shown_in_chat(self, i, pick, where, admin):
        ns = self.spaces[i]
        if self.live[ns]:
            self._check_history_shown(ns, sorted(self.live[ns])[pick % len(self.live[ns])], where, admin)

    @rule(i=st.integers(0, 4), pick=st.integers(0, 50), t=st.sampled_from(TEXTS))
    def update(self, i, pick, t):
        ns = self.spaces[i]
        if not self.live[ns]:
            return
        mid = sorted(self.live[ns])[pick % len(self.live[ns])]
        live = self.core.update(ns, mid, t + " (edited)")
        self.versions[mid] += 1
        self.said_in[mid].append(self.said_in[mid][-1])  # an edit keeps where the fact was said
        assert live.namespace == ns and live.id == mid and live.version == self.versions[mid]

    @rule(i=st.integers(0, 4), j=st.integers(0, 4), pick=st.integers(0, 50))
    def history(self, i, j, pick):
        ns, other = self.spaces[i], self.spaces[j]
        if not self.live[ns]:
            return
        mid = sorted(self.live[ns])[pick % len(self.live[ns])]
        versions = self.core.history(ns, mid)
        assert [v.version for v in versions] == list(range(1, self.versions[mid] + 1))
        assert {v.namespace for v in versions} == {ns} and {v.id for v in versions} == {mid}
        assert versions[-1].valid_to is None and all(v.valid_to is not None for v in versions[:-1])
        if other != ns:
            for op in (lambda: self.core.history(other, mid), lambda: self.core.get(other, mid),
                       lambda: self.core.update(other, mid, "x"), lambda: self.core.forget(other, mid, purge=False)):
                with pytest.raises(NotFoundError):
                    op()

    @rule(i=st.integers(0, 4), q=st.sampled_from(["猫", "咖啡", "hiking", "密码", "Paris", "花生", "山", "我", "edited"]),
          channels=st.sampled_from([("bm25",), ("vector",), ("bm25", "vector")]),
          exact_max=st.sampled_from([0, EXACT_MAX]), assoc_weight=st.sampled_from([0.0, 0.5, 5.0]))
    def recall(self, i, q, channels, exact_max, assoc_weight):
        ns = self.spaces[i]
        hits = self.core.recall(ns, [q], params=RecallParams(k=10, channels=channels, exact_max=exact_max,
                                                             assoc_weight=assoc_weight, assoc_seeds=5))
        for h in hits:
            assert h.memory.namespace == ns
            assert h.memory.id in self.live[ns]
            assert h.memory.version == self.versions[h.memory.id]
        if not self.live[ns]:
            assert hits == []

    @rule(i=st.integers(0, 4), pick=st.integers(0, 50))
    def forget_one(self, i, pick):
        ns = self.spaces[i]
        if self.live[ns]:
            mid = sorted(self.live[ns])[pick % len(self.live[ns])]
            self.core.forget(ns, mid, purge=False)  # the index purge is covered by test_lifecycle
            gone = [mid] + [c for c, sources in self.cites.items() if mid in sources]  # abstractions go along
            for m in gone:
                self.live[ns].discard(m)
                del self.versions[m]
                del self.said_in[m]
                self.cites.pop(m, None)
            with pytest.raises(NotFoundError):
                self.core.history(ns, mid)

    @rule(i=st.integers(0, 4), j=st.integers(0, 4), pair=st.sampled_from(FRAGMENTS), said=st.booleans())
    def consolidate(self, i, j, pair, said):
        """Consolidate ``ns`` now with the fake model; it also cites an id of namespace ``j``.
        With ``said``, the person first says a pair of related fragments (a day's
        worth of small talk before the night), so that clusters form in every run."""
        from fake_openai import consolidation_responder
        from gateway.config import LLMSettings
        from gateway.llm import ChatModel
        from memory.consolidate import ConsolidationParams, Consolidator

        ns, other = self.spaces[i], self.spaces[j]
        if said:
            for t in pair:
                self._stored(ns, self.core.add(ns, self.core.new(ns, t)))
        foreign = sorted(self.live[other])[0] if other != ns and self.live[other] else "f0f0f0f0f0f0"
        self.llm.responder = consolidation_responder(foreign_id=foreign)

        async def run():
            model = ChatModel(LLMSettings(base_url=self.llm.base_url, model="fake-chat", max_retries=0, timeout=5))
            try:
                return await Consolidator(self.core, ConsolidationParams(min_new=1, min_interval_s=0)).run(
                    ns, model.complete, lang="en", force=True)
            finally:
                await model.close()

        report = asyncio.run(run())
        for a in report.abstractions:
            assert set(a.sources) <= self.live[ns]
            if a.memory_id not in self.live[ns]:
                live = self.core.get(ns, a.memory_id)
                self.live[ns].add(a.memory_id)
                self.versions[a.memory_id] = 1
                self.said_in[a.memory_id] = [live.origin.key if live.origin else None]
            self.cites.setdefault(a.memory_id, set()).update(a.sources)
            IsolationMachine.made += 1

    @rule(i=st.integers(0, 4), j=st.integers(0, 4), picks=st.lists(st.integers(0, 50), min_size=2, max_size=5),
          reason=st.sampled_from(["recalled", "cluster", "entity"]))
    def strengthen(self, i, j, picks, reason):
        """Link ids drawn from two namespaces in namespace i: only i's live ones are paired."""
        ns, other = self.spaces[i], self.spaces[j]
        pool = sorted(self.live[ns]) + sorted(self.live[other])
        ids = list(dict.fromkeys(pool[p % len(pool)] for p in picks)) if pool else []
        mine = [m for m in ids if m in self.live[ns]]
        assert self.core.store.strengthen_links(ns, ids, reason=reason) == len(mine) * (len(mine) - 1) // 2

    @rule(i=st.integers(0, 4), picks=st.lists(st.integers(0, 50), min_size=2, max_size=4))
    def recalled_together(self, i, picks):
        """What went into one prompt of namespace i (its ids, plus a foreign one) is linked in i only."""
        ns = self.spaces[i]
        foreign = [m for other in self.spaces if other != ns for m in sorted(self.live[other])][:1]
        mine = sorted(self.live[ns])
        self.core.mark_recalled(ns, [mine[p % len(mine)] for p in picks] + foreign if mine else foreign)

    # -- metadata filters, batches and scoped forgets (issue 26 item 17) --

    def _gone(self, ns: Namespace, ids) -> None:
        """``ids`` of ``ns`` forgotten, with the abstractions citing one of them (they go along)."""
        gone = set(ids)
        gone |= {c for c, sources in self.cites.items() if sources & gone}
        for m in gone:
            self.live[ns].discard(m)
            self.versions.pop(m, None)
            self.said_in.pop(m, None)
            self.cites.pop(m, None)
            self.tags.pop(m, None)

    @rule(i=st.integers(0, 4), j=st.integers(0, 4), pick=st.integers(0, 50), tag=st.sampled_from(["a", "b"]))
    def tag(self, i, j, pick, tag):
        """Tag one memory of ``ns``; tagging it through another namespace is NotFound and changes nothing."""
        ns, other = self.spaces[i], self.spaces[j]
        if not self.live[ns]:
            return
        mid = sorted(self.live[ns])[pick % len(self.live[ns])]
        if other != ns:
            with pytest.raises(NotFoundError):
                self.core.set_metadata(other, mid, {"tag": "x"})
        assert self.core.set_metadata(ns, mid, {"tag": tag}).metadata["tag"] == tag
        self.tags[mid] = tag

    @rule(i=st.integers(0, 4), tag=st.sampled_from(["a", "b"]), q=st.sampled_from(["猫", "咖啡", "hiking", "我"]),
          exact_max=st.sampled_from([0, EXACT_MAX]))
    def filtered(self, i, tag, q, exact_max):
        """A filtered listing is exactly this namespace's memories with the tag (the same tags live in
        the other namespaces); a filtered recall returns only those."""
        ns = self.spaces[i]
        expected = {m for m in self.live[ns] if self.tags.get(m) == tag}
        assert set(self.core.filtered_ids(ns, {"tag": tag})) == expected
        total, page = self.core.find(ns, {"tag": [tag]}, limit=100)
        assert total == len(expected) and {m.id for m in page} == expected and {m.namespace for m in page} <= {ns}
        hits = self.core.recall(ns, [q], params=RecallParams(k=10, exact_max=exact_max), filters={"tag": tag})
        assert {h.memory.id for h in hits} <= expected and {h.memory.namespace for h in hits} <= {ns}

    @rule(i=st.integers(0, 4), j=st.integers(0, 4), picks=st.lists(st.integers(0, 50), min_size=1, max_size=4))
    def forget_batch(self, i, j, picks):
        """A batch forget in ``ns`` naming ids of ``ns`` and of ``other``: only the ones of ``ns`` go."""
        ns, other = self.spaces[i], self.spaces[j]
        pool = sorted(self.live[ns]) + sorted(self.live[other] if other != ns else ())
        if not pool:
            return
        ids = [pool[p % len(pool)] for p in picks]
        done = self.core.forget_many(ns, ids, purge=False)  # the index purge is covered by test_lifecycle
        for mid, receipt in done.items():
            ok = receipt is not None
            assert ok == (mid in self.live[ns]), (mid, receipt)
            if ok:
                self._gone(ns, [mid])

    @rule(i=st.integers(0, 4), where=st.sampled_from([0, 1]))
    def forget_group(self, i, where):
        """An admin forgets what ``ns`` said in one group: exactly the memories listed there go (with the
        abstractions citing them); the person's others and every other namespace stay."""
        from memory.admin import forget_scope

        ns, group = self.spaces[i], GROUPS[where].group_key
        there = {m.id for m in self.core.store.list_in_group(ns, group, limit=10_000)}
        assert there <= self.live[ns]
        n = forget_scope(self.core, ns, Authority("test", self.tenant), group).memories
        assert n <= len(there)
        self._gone(ns, there)
        assert self.core.store.list_in_group(ns, group) == []

    @rule()
    def reindex_tenant(self):
        reindex(self.core, Authority("test", self.tenant), progress=False)

    @invariant()
    def sql_matches_model(self):
        if hasattr(self, "spaces"):
            for ns in self.spaces:
                assert set(self.core.store.iter_ids(ns)) == self.live[ns]

    @invariant()
    def abstractions_rest_on_their_own_namespace(self):
        if hasattr(self, "spaces"):
            for ns in self.spaces:
                rows = self.core.store.consolidated(ns)
                assert set(rows) == {c for c in self.cites if c in self.live[ns]}
                for cid, row in rows.items():
                    assert set(row.sources) <= self.live[ns] and set(row.sources) <= self.cites[cid]
                    text = self.core.get(ns, cid).text
                    assert "火星" not in text and "Mars" not in text

    @invariant()
    def links_stay_in_their_namespace(self):
        """Every association link joins two live memories of its own namespace (read in SQL, not through
        the store's filters), and each namespace's links name only its live ids."""
        if not hasattr(self, "spaces"):
            return
        with self.core.store.engine.connect() as conn:
            stray = conn.execute(text(
                "SELECT count(*) FROM memory_links l WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE "
                "m.id = l.a_id AND m.namespace = l.namespace) OR NOT EXISTS (SELECT 1 FROM memories m "
                "WHERE m.id = l.b_id AND m.namespace = l.namespace)")).scalar_one()
        assert stray == 0
        for ns in self.spaces:
            for neighbours in self.core.store.links_of(ns, sorted(self.live[ns])).values():
                assert {o for o, _, _ in neighbours} <= self.live[ns]



def _run_machine(core, examples: int, llm, *, require_abstractions: bool = True) -> None:
    """Run ``examples`` programs of the machine on ``core``; with
    ``require_abstractions`` the run must have written at least one abstraction
    (a budget too small to reach one says so instead of passing vacuously)."""
    IsolationMachine.core = core
    IsolationMachine.llm = llm
    IsolationMachine.made = 0
    test = IsolationMachine.TestCase
    test.settings = settings(max_examples=examples, stateful_step_count=6, deadline=None,
                             suppress_health_check=list(HealthCheck), derandomize=True)
    test("runTest").runTest()
    assert IsolationMachine.made > 0 or not require_abstractions  # the consolidation steps really wrote abstractions


def test_isolation_state_machine_sqlite(sqlite_core, llm):
    """240 random add/update/history/recall/forget/reindex/consolidate programs on
    SQLite: no hit, version or abstraction ever leaves its namespace (the programs
    also run on PostgreSQL, with the recall cache, and across two gateways on
    object storage below)."""
    _run_machine(sqlite_core, 240, llm)


@pytest.mark.parametrize("core", ["postgres"], indirect=True)
def test_isolation_state_machine_postgres(core, llm):
    """The same property on PostgreSQL (fewer examples: the SQL layer is the difference)."""
    _run_machine(core, 200, llm)


def test_linking_identities_keeps_each_texts_own_disclosure(core):
    """Issue 13 A: merging a private-chat fact (newer) onto a group fact of the same key keeps where each text was
    said — the private text does not take the group row's origin, and the group text in history keeps its own."""
    from memory.admin import link

    tg, qq = Namespace("default", "tg:501"), Namespace("default", "qq:501")
    group = ChatRef("qq", ChatKind.GROUP, "5551")
    dm = ChatRef("tg", ChatKind.PRIVATE, "501")
    core.add(qq, core.new(qq, "我的狗叫旺财", key="pet.dog.name", origin=group, visibility=Visibility.GROUP,
                          source_message_id="m1"))
    core.add(tg, core.new(tg, "我的狗叫來福", key="pet.dog.name", origin=dm, visibility=Visibility.PRIVATE,
                          source_message_id="m2"))
    person = link(core, Authority("test", "default"), "default", ["tg:501", "qq:501"]).person
    (live,) = core.list(person)
    versions = core.history(person, live.id)
    assert [v.text for v in versions] == ["我的狗叫旺财", "我的狗叫來福"]
    assert [visible_in(v, group) for v in versions] == [True, False]
    assert [visible_in(v, dm) for v in versions] == [True, True]
    assert live.origin == dm and live.visibility is Visibility.PRIVATE
    assert [h.memory.id for h in core.recall(person, ["狗"], chat=group)] == []


def test_history_rows_without_a_visibility_fail_closed_in_groups(core):
    """A version stored before versions kept their visibility (the column empty) is shown in no group, even its own."""
    from sqlalchemy import text

    ns = Namespace("default", "tg:502")
    group = ChatRef("tg", ChatKind.GROUP, "-100502")
    m = core.add(ns, core.new(ns, "I live in Hangzhou", key="home.city", origin=group, visibility=Visibility.GROUP,
                              source_message_id="1")).memory
    core.add(ns, core.new(ns, "I live in Lisbon now 🇵🇹", key="home.city", origin=group, visibility=Visibility.GROUP,
                          source_message_id="2"))
    with core.store.engine.begin() as conn:  # what an older huiyi left: no visibility on history rows
        conn.execute(text("UPDATE memory_history SET visibility = ''"))
    old, live = core.history(ns, m.id)
    assert old.origin == group and old.visibility is Visibility.PRIVATE and not visible_in(old, group)
    assert visible_in(live, group) and visible_in(old, None)


def test_isolation_state_machine_with_the_recall_cache(sqlite_core, llm):
    """The same programs with recall served from the in-process namespace cache: no
    hit leaves its namespace, and none is a forgotten memory or an old version."""
    from memory.cache import NamespaceCache

    sqlite_core.cache = NamespaceCache(64)
    _run_machine(sqlite_core, 200, llm)


def test_isolation_state_machine_with_int8_vectors(sqlite_core, llm):
    """The same programs with every cached namespace's vectors held as int8 codes and re-scored from its own
    float32 rows (``NamespaceCache(int8_from=0)``, issue 29 item 6): no hit leaves its namespace, and none is a
    forgotten memory or an old version."""
    from memory.cache import NamespaceCache

    sqlite_core.cache = NamespaceCache(64, int8_from=0)
    _run_machine(sqlite_core, 120, llm)
    assert sqlite_core.cache.loads > 0  # the programs' recalls went through int8 views
