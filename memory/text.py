"""Text normalisation and full-text tokens for Chinese, English and mixed text.

``normalise(text)`` is used for canonical keys, fingerprints and matching:

1. Unicode NFKC (full-width Latin/digits/punctuation become half-width);
2. zero-width and control characters removed (U+200D ZWJ is kept between
   two emoji so that sequences like 👨‍👩‍👧 stay whole);
3. traditional Chinese folded to simplified with OpenCC's ``t2s`` table
   (the OpenCC project's own dictionaries, Apache-2.0), so that 養貓 matches 养猫;
4. case folding and whitespace collapsed.

``tokens(text)`` is the one tokenizer for documents *and* queries: jieba
``cut_for_search`` tokens of the normalised text (punctuation, whitespace and
stopwords dropped), English words reduced to their Snowball (Porter2) stem,
plus every CJK character as a unigram. The unigrams are what make "猫" find
"黑猫" and "养猫" find "养了一只猫": ``cut_for_search`` alone misses both (黑猫
is one token, 养猫 another). The stems make "paint" find "I painted a sunset"
(LoCoMo dev, BM25 channel any@10 +0.0XX, see ``TOKENS_VERSION``).

``split_sentences(text)`` splits zh, en and mixed text into sentences; capture
(user messages into candidate facts) and reconstruct (model output into cited
sentences) both use it.

``initialise()`` loads jieba's dictionary (about 0.8 s) and OpenCC once; call
it at start-up. Everything here is thread-safe after that.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from functools import lru_cache

__all__ = ["initialise", "normalise", "to_simplified", "tokens", "search_tokens", "fts_text", "is_cjk", "fingerprint",
           "split_sentences", "stem", "retells", "RETELL_SHARE", "TOKENS_VERSION", "token_tuple"]

TOKENS_VERSION = 2
"""Version of what ``tokens`` produces; an index whose full-text column was
written by another version is rebuilt from SQL (2: English words stemmed)."""

log = logging.getLogger(__name__)

_ZERO_WIDTH = {"\u200b", "\u200c", "\u2060", "\ufeff", "\u00ad", "\u180e"}
_ZWJ = "\u200d"
_WS_RE = re.compile(r"\s+")

# Function words that carry no recall signal. Kept short on purpose: BM25's
# IDF already discounts common words; this list only removes the noise that
# would otherwise dominate short queries.
STOPWORDS_ZH = frozenset(
    "的 了 着 过 是 在 和 与 及 或 也 都 就 还 又 很 吗 呢 吧 啊 呀 哦 嗯 哈 么 嘛 啦 呗 "
    "这 那 这个 那个 这些 那些 一个 一些 有点 什么 怎么 为什么 我们 你们 他们 她们 它们 "
    "个 把 被 让 给 对 从 到 向 为 而 但 但是 因为 所以 如果 然后 之 其 以 于 上 下 "
    "我 你 他 她 它 您 咱 自己".split()
)
STOPWORDS_EN = frozenset(
    "a an the and or but if then so of to in on at by for with from as is am are was were be been being "
    "do does did have has had i me my mine you your yours he him his she her hers it its we us our they them their "
    "this that these those there here what which who whom whose when where why how not no yes "
    "can could will would shall should may might must just very too also than about into over "
    "up down out off again once only own same some such any all each both few more most other "
    "s t d ll m re ve".split()
)
STOPWORDS = STOPWORDS_ZH | STOPWORDS_EN

# Tokens of a line that only laughs, acknowledges or thanks (「哈哈」「好的」「收到」
# "lol", "ok", "thanks"): such a line says nothing to recall by. Not greetings
# (「晚上好」 "hi"): a greeting may be answered with what is known of the person.
FILLER_TOKENS = frozenset(
    "好 好的 好吧 好哒 好滴 好嘞 滴 哒 嘞 哼 可以 可 行 收到 收 知道 知 道 了解 谢谢 谢 多谢 感谢 "
    "ok okay okey okk k kk lol lmao lmfao rofl hmm hm yeah yep yup yea thank thx ty np".split()
)
_FILLER_RUN = re.compile(r"[哈呵嘿嘻嘎嗯哦噢喔哇呀啊呃额唉]+|a?(?:ha|he|hi|ja|xi){2,}h?|a?ha|2333*|666+")


def is_filler(token: str) -> bool:
    """True when ``token`` (one of ``tokens``' output: simplified, case-folded,
    English stemmed) is laughter, an acknowledgement or thanks (``FILLER_TOKENS``;
    runs such as 「哈哈哈」, "hahaha", "233", "666"), which recall does not search by."""
    return token in FILLER_TOKENS or _FILLER_RUN.fullmatch(token) is not None

_init_lock = threading.Lock()
_initialised = False
_converter_lock = threading.Lock()
_converter = None


def _t2s():
    """The one OpenCC ``t2s`` converter of the process, loaded on first use
    (thread-safe; ``convert`` may be called from any thread)."""
    global _converter
    if _converter is None:
        with _converter_lock:
            if _converter is None:
                import opencc

                _converter = opencc.OpenCC("t2s")
    return _converter


def initialise() -> None:
    """Load jieba's dictionary and OpenCC's t2s table once (about 0.8 s).

    Idempotent and thread-safe; later calls return at once.
    """
    global _initialised
    if _initialised:
        return
    with _init_lock:
        if _initialised:
            return
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        _t2s()
        _initialised = True
        log.info("text: jieba and OpenCC t2s loaded")


def is_cjk(ch: str) -> bool:
    """True for a CJK unified ideograph (basic block and extension A, compatibility)."""
    cp = ord(ch)
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x2FA1F


def _is_emojiish(ch: str) -> bool:
    return unicodedata.category(ch) == "So" or 0x1F000 <= ord(ch) <= 0x1FAFF or ch == "\ufe0f"


def _strip_invisible(text: str) -> str:
    if text.isprintable():
        # nothing to strip: every character removed below (zero-width, ZWJ, Cc, Cf, Co, Cs)
        # is non-printable, and most texts have none (a character-by-character pass was
        # a tenth of a capture's CPU beside the embedding)
        return text
    out: list[str] = []
    n = len(text)
    for i, ch in enumerate(text):
        if ch in _ZERO_WIDTH:
            continue
        if ch == _ZWJ:
            # keep only inside an emoji sequence
            if out and _is_emojiish(out[-1]) and i + 1 < n and _is_emojiish(text[i + 1]):
                out.append(ch)
            continue
        cat = unicodedata.category(ch)
        if cat == "Cc" and ch not in "\t\n\r":
            continue
        if cat in ("Cf", "Co", "Cs") and not _is_emojiish(ch):
            continue
        out.append(ch)
    return "".join(out)


def to_simplified(text: str) -> str:
    """``text`` with traditional characters as simplified ones (OpenCC t2s) and
    nothing else changed: what the extractor's zh patterns and the emotion
    lexicon are written against. Loads OpenCC (not jieba) on first use."""
    if not text:
        return ""
    return _t2s().convert(text)


def normalise(text: str) -> str:
    """Canonical form of ``text`` for keys, fingerprints and matching.

    NFKC, invisible characters removed (emoji kept whole), traditional → simplified
    (OpenCC t2s), case folded, whitespace collapsed and stripped. Pure; accepts any
    string (the empty string gives the empty string).
    """
    if not text:
        return ""
    initialise()
    s = unicodedata.normalize("NFKC", text)
    s = _strip_invisible(s)
    s = _t2s().convert(s)
    s = s.casefold()
    return _WS_RE.sub(" ", s).strip()


_stem_lock = threading.Lock()
_ASCII_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer: the Snowball English (Porter2) stemmer in C

    return Stemmer.Stemmer("english", 0)  # 0: no cache of its own, stem() has one


@lru_cache(maxsize=32_768)  # the words and CJK characters of the active chats: 8.8k words in a 6-min 50-chat soak
def stem(word: str) -> str:
    """Snowball English (Porter2) stem of a lower-case ASCII word (painted →
    paint, worries → worri, loved → love); any other string is returned as is
    (Porter, "An algorithm for suffix stripping", 1980; Snowball's English
    stemmer). Thread-safe (a Stemmer instance holds state). Cached: the string
    returned for a word is the same object every time it is held, so the tokens
    of every text (and recall's views that keep them) share one string a word."""
    if not _ASCII_WORD_RE.fullmatch(word):
        return word
    with _stem_lock:
        return _stemmer().stemWord(word)


def _is_noise(token: str) -> bool:
    return all(unicodedata.category(c)[0] in "PZC" for c in token)


def _emoji_runs(norm: str) -> list[tuple[bool, str]]:
    """Split into (is_emoji, piece) runs; a ZWJ/VS16 sequence is one emoji piece."""
    runs: list[tuple[bool, str]] = []
    buf: list[str] = []
    emoji = False
    for i, ch in enumerate(norm):
        glue = ch in (_ZWJ, "\ufe0f") or 0x1F3FB <= ord(ch) <= 0x1F3FF
        is_e = _is_emojiish(ch) or (glue and emoji)
        if is_e and emoji and not glue and buf and buf[-1] != _ZWJ:
            runs.append((True, "".join(buf)))  # two adjacent emoji are two tokens
            buf = []
        if is_e != emoji and buf:
            runs.append((emoji, "".join(buf)))
            buf = []
        emoji = is_e
        buf.append(ch)
    if buf:
        runs.append((emoji, "".join(buf)))
    return runs


@lru_cache(maxsize=8192)
def _block_words(block: str) -> tuple[str, ...]:
    """The words of one block of jieba's (a run of ``jieba.re_han_default``, or a
    run between two): ``cut_for_search`` without punctuation, whitespace and
    stopwords, English stemmed. jieba cuts a text block by block (``Tokenizer.cut``
    splits it on that pattern first, and ``cut_for_search`` adds each word's
    sub-words), so a text's words are its blocks' words in order; a fact is
    sentences of its line, and a memory's context is a line of the chat, so their
    blocks were cut before: 8,192 blocks held."""
    import jieba

    out: list[str] = []
    for tok in jieba.cut_for_search(block):
        tok = tok.strip()
        if tok and not _is_noise(tok) and tok not in STOPWORDS:
            out.append(stem(tok))
    return tuple(out)


@lru_cache(maxsize=256)  # a message's facts share its context (search_tokens): 44% hits at 64 as at 4,096
def _token_parts(norm: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The two parts of ``tokens`` of the normalised ``norm``: its jieba words (and
    emoji), and its distinct CJK characters that are no stopword, in order (the
    unigram candidates; ``tokens`` keeps those that are not a word already)."""
    import jieba

    words: list[str] = []
    for is_emoji, piece in _emoji_runs(norm):
        if is_emoji:
            words.append(piece)
            continue
        for block in jieba.re_han_default.split(piece):
            if block:
                words += _block_words(block)
    # a CJK character taken from a text is a new 80-byte string each time (Python shares only
    # Latin-1 ones): through stem's cache, as the words, each is one string while it is held there
    return tuple(words), tuple(dict.fromkeys(stem(ch) for ch in norm if is_cjk(ch) and ch not in STOPWORDS))


def _joined(words: tuple[str, ...], unigrams: tuple[str, ...]) -> tuple[str, ...]:
    # a unigram that is already a jieba token is not repeated
    have = set(words)
    return words + tuple(ch for ch in unigrams if ch not in have)


def tokens(text: str) -> list[str]:
    """Full-text tokens of ``text`` (documents and queries alike).

    Returns jieba ``cut_for_search`` tokens of ``normalise(text)`` without
    punctuation, whitespace and stopwords (English words as their ``stem``),
    followed by each distinct CJK
    character as a unigram. Tokens never contain whitespace. An input with
    no content gives ``[]``.
    """
    return list(_text_tokens(text))


def token_tuple(text: str) -> tuple[str, ...]:
    """``tokens(text)`` as the tuple the tokenizer's cache holds (shared: never
    changed), so that a recall view keeping a memory's tokens holds no copy of
    them while the cache does."""
    return _text_tokens(text)


def words(text: str) -> list[str]:
    """The jieba words of ``tokens(text)`` without the CJK unigrams it adds (a
    single character that jieba cut as a word of its own, 「猫」 in 「我的猫」, is
    one; 「猫」 of 「养猫」 is not): simplified, case-folded, English stemmed, no
    stopwords, in order."""
    norm = normalise(text)
    return list(_token_parts(norm)[0]) if norm else []


RETELL_SHARE = 0.5
"""The share of a text's words another line must hold to retell it (``retells``)."""


def retells(line: str, text: str, share: float = RETELL_SHARE) -> bool:
    """True when ``line`` holds at least ``share`` (in [0, 1]) of ``text``'s distinct
    words, or two of them (``tokens``; a CJK text's multi-character words when it
    has any, so that its single characters do not count twice): the companion's
    「记住啦，你对花生过敏，一定要小心」 retells 「我对花生过敏，上次吃了一口就进了急诊室」.
    Errs towards True: it decides what a forget removes. False for a text without words."""
    words = set(tokens(text))
    multi = {w for w in words if not (len(w) == 1 and is_cjk(w))}
    words = multi or words
    if not words:
        return False
    common = len(words & set(tokens(line)))
    return common >= min(2, len(words)) or common >= share * len(words)


@lru_cache(maxsize=8192)
def _text_tokens(text: str) -> tuple[str, ...]:
    # keyed by the raw text: a line is tokenised again on each turn it stays in its
    # chat's tail and by its capture (up to MAX_QUEUED turns later), and a memory's
    # text on each recall it is a hit of; normalising them again cost more than the
    # search. 8,192 lines: 84.6% hits in a 50-chat soak (20,000: 86.5%, 4,096: 78.7%)
    norm = normalise(text)
    return _joined(*_token_parts(norm)) if norm else ()


def search_tokens(text: str, context: str = "") -> list[str]:
    """``tokens(memory.types.search_text(text, context))`` — what BM25 indexes of
    a memory, its text with the line it answered — computed from the tokens of
    the two parts, each kept (``_token_parts``): the facts of one message share
    its context, and capture has just tokenised each fact's text. Equal by
    construction: ``search_text`` joins them with " (" and ")", which jieba never
    joins into a word (it cuts at every character outside its word pattern) and
    which yield no token, normalisation changes nothing across them, and a
    unigram of the context is left out when either part holds it as a word
    (tests/memory/test_text.py checks it on the public chat logs' lines)."""
    if not context:
        return tokens(text)
    a, c = normalise(text), normalise(context)
    if not a or not c:
        return tokens(f"{text} ({context})")
    (wa, ua), (wc, uc) = _token_parts(a), _token_parts(c)
    return list(_joined(wa + wc, tuple(dict.fromkeys(ua + uc))))


def fts_text(text: str) -> str:
    """``tokens(text)`` joined by single spaces: the column indexed by LanceDB's
    whitespace tokenizer."""
    return " ".join(tokens(text))


def fingerprint(text: str) -> str:
    """SHA-256 hex digest of ``normalise(text)``: the tombstone key of a forgotten
    memory (holds no readable text)."""
    import hashlib

    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


_CLOSERS = "”’」』\"')）"
# A boundary: CJK/!? terminators always (a run such as "!?" is one); a full stop
# only before space, end, a non-ASCII character (CJK) or a closing quote (keeps
# 3.5, example.com and J.K whole); newlines. Closing quotes stay with the sentence.
_BOUNDARY = rf"[。！？!?]+[{_CLOSERS}]*|\.+(?=[\s{_CLOSERS}]|$|[^\x00-\x7f])[{_CLOSERS}]*|\n+"
_BOUNDARY_RE = re.compile(_BOUNDARY)
_BOUNDARY_SEMICOLON_RE = re.compile(rf"[；;]+[{_CLOSERS}]*|{_BOUNDARY}")
_CLAUSE_RE = re.compile(r"(?<=[，,、：:])")


#: words whose full stop ends no sentence ("St. Petersburg", "Dr. Li", "e.g. a cat"), lower case, without
#: the final stop; a single letter (an initial: "J. K. Rowling") counts as one too. "etc." and "No." are
#: left out: they end sentences as often as not.
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "mt", "ft", "prof", "sr", "jr", "rev", "gen", "capt",
                           "lt", "sgt", "vs", "approx", "e.g", "i.e", "cf", "ca"})
_WORD_BEFORE_STOP_RE = re.compile(r"(?<![A-Za-z.])([A-Za-z](?:[A-Za-z]|\.(?=[A-Za-z]))*)$")


def _abbreviation_before(text: str, stop: int) -> bool:
    """Does the full stop at ``text[stop]`` end an abbreviation (``ABBREVIATIONS``, or a single letter)?"""
    m = _WORD_BEFORE_STOP_RE.search(text, 0, stop)
    if m is None:
        return False
    word = m.group(1).lower()
    return len(word) == 1 or word in ABBREVIATIONS


def _ends_sentence(text: str, m: re.Match) -> bool:
    """Is the boundary match ``m`` in ``text`` a sentence end? Every one is, except a single full stop
    ending an abbreviation (``_abbreviation_before``)."""
    mark = m.group()
    return not (mark.startswith(".") and not mark.startswith("..") and _abbreviation_before(text, m.start()))


def sentence_starts(text: str) -> list[int]:
    """Offsets into ``text`` at which a sentence begins, ascending: the first
    non-space character of ``text`` and the first after each end that
    ``split_sentences`` finds (。！？!?, a full stop before space, the end, a
    non-ASCII character or a closing quote, newlines) — except a single full stop
    ending an abbreviation ("St. Petersburg", "Dr. Li", "Mr.", "e.g.", an
    initial), where no sentence begins. ``""`` gives ``[]``. Used to cut a
    line's beginning at a sentence (``memory.types.clip_line``)."""
    text = text or ""
    starts = []
    first = len(text) - len(text.lstrip())
    if first < len(text):
        starts.append(first)
    for m in _BOUNDARY_RE.finditer(text):
        if not _ends_sentence(text, m):
            continue
        rest = text[m.end():]
        at = m.end() + len(rest) - len(rest.lstrip())
        if at < len(text) and (not starts or at > starts[-1]):
            starts.append(at)
    return starts


def split_sentences(text: str, *, semicolons: bool = False, max_chars: int | None = None) -> list[str]:
    """Sentences of zh, en and mixed ``text``, stripped, empty ones dropped.

    A sentence ends at 。！？!? (a run of them is one end), at a full stop
    followed by space, the end, a non-ASCII character or a closing quote (so
    3.5 and example.com stay whole), and at newlines; closing quotes stay with
    their sentence. A single full stop after an abbreviation ("Dr. Li", "St.
    Petersburg", "e.g.", an initial) ends none. ``semicolons``: ；and ; end a sentence too (capture: each
    clause of "我养猫；我住上海" is its own fact). ``max_chars`` (characters,
    > 0): a longer sentence is split further at clause breaks (，,、：:) and,
    failing those, hard-split, so that no part exceeds it (the embedder's
    input limit). ``""`` gives ``[]``.
    """
    boundary = _BOUNDARY_SEMICOLON_RE if semicolons else _BOUNDARY_RE
    text = text or ""
    sentences: list[str] = []
    start = 0
    for m in boundary.finditer(text):
        if not _ends_sentence(text, m):
            continue
        piece = text[start:m.end()].strip()
        if piece:
            sentences.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    if max_chars is None:
        return sentences
    out: list[str] = []
    for sent in sentences:
        if len(sent) <= max_chars:
            out.append(sent)
            continue
        buf = ""
        for clause in _CLAUSE_RE.split(sent):
            while len(clause) > max_chars:
                if buf:
                    out.append(buf.strip())
                    buf = ""
                out.append(clause[:max_chars].strip())
                clause = clause[max_chars:]
            if len(buf) + len(clause) > max_chars:
                out.append(buf.strip())
                buf = ""
            buf += clause
        if buf.strip():
            out.append(buf.strip())
    return [s for s in out if s]
