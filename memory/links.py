"""Associations between the memories of one namespace (issue 17): the weight
rule, where links come from, and spreading activation along them.

A link joins two live memories of one namespace that belong together: they were
recalled into one prompt together (``recalled``: ``MemoryCore.mark_recalled``;
from a turn's held marks, ``note_recalled``, once co-used in
``memory.store.pending.NEW_LINK_USES`` turns),
consolidated into one cluster (``cluster``: the consolidation), or name the same
thing (``entity``: ``link_entities`` when a memory is stored, by the cheap rule
of ``entities``). The store keeps one row per pair (``memory.store.links``);
recall's association channel spreads activation along them (``spread``).

Weight rule: a Hebbian co-use count (Hebb 1949: what fires together wires
together; the retrieval sidecar in ``../shared/background`` counts co-occurrence
edges the same way) that forgets exponentially with a half-life, the form
``memory.scoring`` uses for retention (Ebbinghaus 1885; Anderson & Schooler
1991 on the decay of need)::

    w(t)  = w(t0) · 2^(−(t − t0) / h)          decay, h = half-life in days
    w'    = min(W_MAX, w(t) + amount)           each co-use adds ``amount``

``t − t0`` is in days (negative ages count as 0: an out-of-order write never
grows a weight); ``h`` defaults to ``DEFAULT_HALF_LIFE_DAYS`` (30) and is a
setting (``RecallParams.link_half_life_days``). Weights are ≥ 0 and never above
``W_MAX`` (10): a pair recalled together daily for months saturates rather than
drowning every other link of its memories.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

__all__ = ["DEFAULT_HALF_LIFE_DAYS", "W_MAX", "MIN_STRENGTH_CHANGE", "REASONS", "meaningful", "decayed", "grown", "spread", "entities",
           "LinkParams", "link_entities", "MAX_LINKED_IDS", "MAX_ENTITIES", "ENTITY_MAX_SHARE",
           "named_things", "stored_entities", "ENTITY_SEP"]

DEFAULT_HALF_LIFE_DAYS = 30.0
"""Days after which an unused link keeps half its weight."""
W_MAX = 10.0
"""The most a link can weigh (ten fresh co-uses)."""
MIN_STRENGTH_CHANGE = 0.05
"""A co-use is written only when it moves the pair's strength ``w / (w + 1)`` (what
``spread`` reads) by at least this much, or gives it a new reason: from a decayed
weight of about 3.5 on, one more co-use (+1) changes recall's association channel
by under 5 % of a link's most and is not written (its row keeps decaying from its
last write); several co-uses in one write, or a weight decayed lower, still are."""
REASONS = ("recalled", "cluster", "entity")
"""Why two memories are linked: recalled together, consolidated together, sharing an entity."""


def _age_days(at: datetime, since: datetime) -> float:
    return max(0.0, (at - since).total_seconds() / 86400.0)


def decayed(weight: float, since: datetime, at: datetime, half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> float:
    """``weight`` (as of ``since``) at time ``at``: ``weight · 2^(−Δ/h)``, Δ the age
    in days (≥ 0), h ``half_life_days`` (> 0; ValueError otherwise). Both times aware."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be > 0")
    return max(0.0, weight) * math.pow(2.0, -_age_days(at, since) / half_life_days)


def grown(weight: float, since: datetime, at: datetime, amount: float = 1.0,
          half_life_days: float = DEFAULT_HALF_LIFE_DAYS) -> float:
    """The weight after one more co-use at ``at``: ``min(W_MAX, decayed + amount)``.
    ``amount`` > 0 (ValueError otherwise)."""
    if amount <= 0:
        raise ValueError("amount must be > 0")
    return min(W_MAX, decayed(weight, since, at, half_life_days) + amount)


def meaningful(old: float, new: float) -> bool:
    """Whether a weight going from ``old`` (decayed to now) to ``new`` moves the
    link's strength ``w / (w + 1)`` by at least ``MIN_STRENGTH_CHANGE``."""
    return abs(new / (new + 1.0) - max(old, 0.0) / (max(old, 0.0) + 1.0)) >= MIN_STRENGTH_CHANGE


def spread(sources: Sequence[tuple[str, float]], links: Mapping[str, Sequence[tuple[str, float, str]]]
           ) -> list[tuple[str, float]]:
    """Spreading activation, one hop, from ``sources`` along ``links``: the
    association channel's ranking. Returns ``[(id, activation)]``, activation > 0,
    strongest first (ties by id).

    ``sources``: ``[(id, source weight)]``, the top fused hits of a recall with
    their fused score relative to the best (in (0, 1]); ``links``: each source's
    neighbours as ``Store.links_of`` gives them (other id, decayed weight ≥ 0,
    reasons). A neighbour j gathers from every source i linked to it::

        A_j = Σ_i  W_i · (w_ij / (w_ij + 1)) / (1 + ln fan_i)

    Collins & Loftus 1975 (activation spreads from what is active along links,
    weaker with weaker links) in ACT-R's form (Anderson 1983: source activation
    W_i divided over i's associations; the fan effect, S_ji = S − ln fan_i, here
    as a divisor so A stays ≥ 0): ``w / (w + 1)`` saturates a link's strength
    in [0, 1) (one co-use 0.5, ten 0.91), and a memory linked to many others
    spreads thinly. Sources linked to each other gain activation too (memories
    that belong together reinforce each other). A second hop would need a
    second read per recall; it is left out."""
    act: dict[str, float] = {}
    for sid, w_src in sources:
        neighbours = links.get(sid) or ()
        live = [(o, w) for o, w, _ in neighbours if w > 0 and o != sid]
        if not live or w_src <= 0:
            continue
        fan = 1.0 + math.log(len(live))
        for other, w in live:
            act[other] = act.get(other, 0.0) + w_src * (w / (w + 1.0)) / fan
    return sorted(((m, a) for m, a in act.items() if a > 0), key=lambda x: (-x[1], x[0]))


# -- entities: what two memories name in common ---------------------------------

MAX_LINKED_IDS = 12
"""``Store.strengthen_links`` links the first this many distinct ids (at most 66 pairs)."""

MAX_ENTITIES = 6
"""``entities`` keeps at most this many per text (proper nouns first)."""
ENTITY_MAX_SHARE = 8
"""An entity already named by more than this many memories of a namespace links
no new one: it is the person's own name or an everyday word there, not a thing
that singles out a few memories (the first ones to name it stay linked)."""
_PROPER = ("nr", "ns", "nt", "nz")  # jieba (ICTCLAS) tags: person, place, organisation, other proper noun
_GENERIC_ZH = frozenset(
    "时候 东西 事情 问题 地方 时间 感觉 样子 今天 明天 昨天 晚上 早上 下午 上午 现在 以前 以后 时候 "
    "朋友 大家 人家 别人 一下 有点 真的 太棒了 哈哈 哈哈哈 谢谢".split())
_GENERIC_EN = frozenset(
    "yesterday today tomorrow tonight oh hey hi hello yeah yes no wow thanks thank sure well okay ok really "
    "great good nice awesome cool sounds glad sorry congrats congratulations absolutely definitely totally "
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july "
    "august september october november december im ive id dont cant its thats lol haha omg btw".split())


def entities(text: str) -> list[str]:
    """The named things of ``text``, normalised (``memory.text.normalise``:
    simplified, case-folded), in order of appearance, proper nouns first, at
    most ``MAX_ENTITIES``. A cheap offline rule, no model:

    - Chinese (jieba's part-of-speech tags, ICTCLAS set): person, place,
      organisation and other proper nouns (``nr``/``ns``/``nt``/``nz``…) and
      common nouns (``n``) of two or more characters — a pet called 煤球 is
      tagged a common noun — less a short list of everyday ones (时候, 东西…);
    - Latin script: capitalised words and acronyms of two or more letters
      (Mochi, Berlin, LGBTQ) that are not stopwords, weekdays, months or
      interjections (Yesterday, Wow).

    Empty for a text naming nothing. ``memory.text.initialise`` loads jieba."""
    return list(named_things(text)[:MAX_ENTITIES])


ENTITY_SEP = "\n"
"""Joins a memory's ``named_things`` in its ``memories.entities`` column (a
named thing is one jieba word: it holds no line break)."""


def stored_entities(text: str) -> str:
    """What ``memories.entities`` holds for a memory of ``text``: its
    ``named_things`` joined by ``ENTITY_SEP`` ("" when it names nothing). Written
    with the text (``Store.add``, ``Store.supersede``) so that entity linking
    reads it instead of tagging every older memory's text again."""
    return ENTITY_SEP.join(named_things(text))


@lru_cache(maxsize=4096)
def _tagged(block: str) -> tuple[tuple[str, str], ...]:
    """jieba's ``posseg`` words of one of its blocks (a run of
    ``jieba.posseg.re_han_internal``, or a run between two) as ``(word, flag)``.
    ``posseg`` tags a text block by block (``POSTokenizer.__cut_internal``), so a
    text's tags are its blocks' tags in order; the facts of one line share its
    blocks, and a memory said again repeats them: 4,096 blocks held."""
    import jieba.posseg as pseg

    return tuple((p.word, p.flag) for p in pseg.cut(block))


@lru_cache(maxsize=256)  # a fact's things asked again within its capture: 50.0% hits at 256, 50.7% at 4k
def named_things(text: str) -> tuple[str, ...]:
    """Every named thing of ``text`` (``entities``' rule, uncapped), memoised."""
    import jieba.posseg as pseg

    from memory.text import STOPWORDS, initialise, normalise, to_simplified

    initialise()
    proper: list[str] = []
    common: list[str] = []
    tagged = (pair for block in pseg.re_han_internal.split(to_simplified(text)) if block for pair in _tagged(block))
    for word, flag in tagged:
        word = word.strip()
        if len(word) < 2:
            continue
        if flag == "eng":
            if not word[0].isupper() or word.casefold().replace("'", "") in _GENERIC_EN \
                    or word.casefold() in STOPWORDS:
                continue
            proper.append(normalise(word))
        elif flag.startswith(_PROPER) or flag == "n":
            w = normalise(word)
            if w in STOPWORDS or w in _GENERIC_ZH or not any("\u4e00" <= c <= "\u9fff" for c in w):
                continue
            (proper if flag != "n" else common).append(w)
    return tuple(dict.fromkeys(proper + common))


@dataclass(frozen=True, slots=True)
class LinkParams:
    """How the core makes links (``MemoryCore(links=...)``).

    ``recalled``: weight a pair gains each time its two memories go into one
    prompt together (``MemoryCore.mark_recalled``; 0 turns co-recall links off);
    ``entity``: weight a new memory's pair gains per entity it shares with an
    older memory (``MemoryCore.add``; 0 turns entity links off);
    ``half_life_days``: the decay applied to a pair's old weight before it grows
    (keep it equal to ``RecallParams.link_half_life_days``, which decays it on
    reading). Raises ValueError for a negative amount or a half-life ≤ 0."""

    recalled: float = 1.0
    entity: float = 1.0
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS

    def __post_init__(self) -> None:
        if self.recalled < 0 or self.entity < 0 or self.half_life_days <= 0:
            raise ValueError("link amounts must be ≥ 0 and the half-life > 0")


def link_entities(store, ns, new: Sequence[tuple[str, str, datetime]],
                  params: LinkParams = LinkParams()) -> int:
    """Link each memory of ``ns`` just stored (``new``: ``[(memory id, text, said
    at)]`` in the order they were stored) to the live memories of ``ns`` stored
    before it (the ones before it in ``new`` included, so a pair is linked once)
    that name one of its ``entities``: reason ``entity``, ``params.entity`` per
    shared entity; an entity already named by more than ``ENTITY_MAX_SHARE``
    other memories is skipped. Bounded: one ``Store.mentioning`` read for all
    their entities (one scan of the namespace: ``MemoryCore.batch`` links a
    block's memories with it at the block's end) and one write per memory and
    distinct number of shared entities (nearly always one). An older memory
    counts as naming an entity when its stored ``entities`` hold it (a row
    written before that column existed is tagged again). Returns the pairs
    written. Raises StoreError."""
    if params.entity <= 0 or not new:
        return 0
    last = {memory_id: k for k, (memory_id, _, _) in enumerate(new)}  # a memory stored twice links once, as last stored
    items = [(memory_id, entities(text), at) for k, (memory_id, text, at) in enumerate(new) if last[memory_id] == k]
    needles = list(dict.fromkeys(e for _, names, _ in items for e in names))
    if not needles:
        return 0
    found = store.mentioning(ns, needles, limit=ENTITY_MAX_SHARE + 1 + len(items))
    written = 0
    step = MAX_LINKED_IDS - 1  # strengthen_links takes this many others beside the memory's own id
    for k, (memory_id, names, at) in enumerate(items):
        later = {i for i, _, _ in items[k:]}
        shared: dict[str, int] = {}
        for ent in names:
            others = [i for i, t, stored in found.get(ent, ()) if i not in later
                      and ent in (named_things(t) if stored is None else stored.split(ENTITY_SEP))]
            if len(others) > ENTITY_MAX_SHARE:
                continue
            for i in others:
                shared[i] = shared.get(i, 0) + 1
        by_count: dict[int, list[str]] = {}
        for i, n in shared.items():
            by_count.setdefault(n, []).append(i)
        for n, others in sorted(by_count.items()):
            for j in range(0, len(others), step):
                written += store.strengthen_links(ns, [memory_id, *others[j:j + step]], reason="entity", at=at,
                                                  amount=params.entity * n, half_life_days=params.half_life_days,
                                                  pairs_with=memory_id)
    return written
