"""Normalisation and full-text tokens on Chinese, English and mixed text."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.text import fingerprint, normalise, split_sentences, tokens


def test_normalise_folds_full_width_case_and_traditional():
    """Full-width Latin, case and traditional characters fold to one canonical form."""
    assert normalise("ＷｉＦｉ密碼") == normalise("wifi密码") == "wifi密码"
    assert normalise("我養了一隻貓") == "我养了一只猫"


def test_normalise_removes_zero_width_and_control_but_keeps_emoji_whole():
    """Zero-width and control characters vanish; a ZWJ emoji family survives intact."""
    family = "👨\u200d👩\u200d👧"
    s = normalise("煤\u200b球\x07 " + family)
    assert s == "煤球 " + family


def test_unigrams_make_single_characters_findable():
    """'猫' is a token of '黑猫' and '养猫' shares tokens with '养了一只猫'."""
    doc = set(tokens("我养了一只叫煤球的黑猫"))
    assert "猫" in doc and "煤球" in doc
    assert {"养", "猫"} <= set(tokens("养猫")) & set(tokens("养了一只猫"))


def test_tokens_drop_punctuation_whitespace_and_stopwords():
    """Punctuation (half- and full-width), whitespace and stopwords produce no tokens."""
    toks = tokens("我的，WiFi密码！！忘了。 the  password")
    assert "wifi" in toks and "密码" in toks and "password" in toks
    for junk in ("，", "！", "。", " ", "的", "the", "我"):
        assert junk not in toks


def test_tokens_mixed_emoji_and_empty_input():
    """Emoji are tokens of their own; empty or invisible input gives no tokens."""
    assert "🐱" in tokens("我的猫🐱叫Mochi")
    assert "mochi" in tokens("我的猫🐱叫Mochi")
    assert tokens("") == [] and tokens("\u200b\u200c") == [] and tokens("，。！") == []


def test_fingerprint_is_stable_across_scripts_and_widths():
    """The tombstone fingerprint ignores script (trad/simp), width and case."""
    assert fingerprint("我養貓") == fingerprint("我养猫")
    assert fingerprint("I like ＣＯＦＦＥＥ") == fingerprint("i like coffee")
    assert fingerprint("我养猫") != fingerprint("我养狗")


def test_split_sentences_keeps_terminator_runs_and_closing_quotes_whole():
    """"!!" / "!?" / 。。 end one sentence, and a closing quote stays with its sentence
    (capture's old splitter left "!" and "”然后…" fragments)."""
    assert split_sentences("Lucky you!! Mine is plain brown.") == ["Lucky you!!", "Mine is plain brown."]
    assert split_sentences("Right!? I don't want to hurt them 🐶") == ["Right!?", "I don't want to hurt them 🐶"]
    assert split_sentences("他说“好。”然后走了") == ["他说“好。”", "然后走了"]
    assert split_sentences("我喜歡《瓦爾登湖》。。") == ["我喜歡《瓦爾登湖》。。"]
    assert split_sentences('I called it "Finding Home." It is a script') == ['I called it "Finding Home."', "It is a script"]


def test_split_sentences_ends_no_sentence_at_an_abbreviation():
    """"Dr. Li", "St. Petersburg", "e.g." and initials keep their sentence whole (capture made
    "I met Dr." a fact of its own); a stop after a whole word, an ellipsis and 3.5 are as before."""
    assert split_sentences("I met Dr. Li in St. Petersburg. 我們去了上海。Then J. K. Rowling wrote 📚.") == [
        "I met Dr. Li in St. Petersburg.", "我們去了上海。", "Then J. K. Rowling wrote 📚."]
    assert split_sentences("我住上海；I love pets, e.g. cats. Ok... fine", semicolons=True) == [
        "我住上海；", "I love pets, e.g. cats.", "Ok...", "fine"]
    assert split_sentences("Version 3.5 is out. Mine is plain brown.") == ["Version 3.5 is out.", "Mine is plain brown."]


def test_split_sentences_semicolons_only_when_asked():
    """；/; end a sentence only with semicolons=True (capture: one fact per clause)."""
    assert split_sentences("我养猫；我住上海; I like tea") == ["我养猫；我住上海; I like tea"]
    assert split_sentences("我养猫；我住上海; I like tea", semicolons=True) == ["我养猫；", "我住上海;", "I like tea"]


def test_split_sentences_max_chars_splits_at_clause_breaks_then_hard():
    """No part is longer than max_chars: split at ，,、：: first, then hard; nothing lost."""
    clauses = "，".join(["我去了西湖散步"] * 10) + "。"
    parts = split_sentences(clauses, max_chars=20)
    assert all(len(p) <= 20 for p in parts) and "".join(parts) == clauses and len(parts) > 1
    solid = "好" * 45
    assert split_sentences(solid, max_chars=20) == ["好" * 20, "好" * 20, "好" * 5]
    assert split_sentences("", max_chars=20) == [] and split_sentences("   \n ") == []


def test_english_words_are_stemmed_so_inflections_meet():
    """'paint' finds 'painted', 'dogs' finds 'dog': English words become their
    Snowball stem on both sides, in English and mixed zh/en text; CJK, numbers
    and emoji are left as they are."""
    doc = set(tokens("Caroline: I PAINTED two sunsets 🌅 and loved running with my dogs"))
    query = set(tokens("What did Caroline paint? Does she love to run with her dog?"))
    assert {"paint", "sunset", "love", "run", "dog"} <= doc
    assert {"paint", "love", "run", "dog", "carolin"} <= doc & query
    mixed = tokens("我上周 painted 了一幅油畫，Apple123 很喜歡")
    assert "paint" in mixed and "apple123" in mixed and "油画" in mixed and "喜欢" in mixed
    assert "🌅" in doc


_TEXT = st.lists(st.sampled_from(
    list("我养了一只猫叫煤球養貓的黑今天好累呀，。！？ ()（）-._") + ["I'm", "Mochi", "painted", "e.g.", "WiFi", "Ａ",
                                                              "🙂", "👨\u200d👩\u200d👧", "\u200d", "\ufe0f", "\u200b",
                                                              "\u0301", "\t", "\n", "\u3000", "\x07", "\ud7ff"]),
    max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT, _TEXT)
def test_search_tokens_of_the_parts_are_the_tokens_of_the_search_text(text, context):
    """What the index's full-text column holds of a memory, computed from its text's and its context's tokens
    (search_tokens), is exactly tokens(search_text(text, context)) — zh, en, emoji, zero-width, combining and
    control characters at either edge."""
    from memory.text import search_tokens
    from memory.types import search_text

    if not text.strip():
        return
    assert search_tokens(text, context) == tokens(search_text(text, context))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_normalise_of_printable_text_skips_nothing_it_would_strip(text):
    """The printable shortcut of the invisible-character pass strips what the character-by-character pass
    strips (every character it removes is non-printable)."""
    from memory import text as t

    def slow(s: str) -> str:
        out = []
        for i, ch in enumerate(s):
            if ch in t._ZERO_WIDTH:
                continue
            if ch == t._ZWJ:
                if out and t._is_emojiish(out[-1]) and i + 1 < len(s) and t._is_emojiish(s[i + 1]):
                    out.append(ch)
                continue
            cat = unicodedata.category(ch)
            if (cat == "Cc" and ch not in "\t\n\r") or (cat in ("Cf", "Co", "Cs") and not t._is_emojiish(ch)):
                continue
            out.append(ch)
        return "".join(out)

    assert t._strip_invisible(text) == slow(text)


def test_a_cjk_character_is_one_string_across_texts():
    """「锅」, a unigram of one line and a jieba word of another, is the same string object in both lines' tokens
    (held once by every view and cache that keeps them), not a new 80-byte string per text."""
    a, b = tokens("今天晚上吃了火锅"), tokens("火锅店的锅真大")
    ka = next(t for t in a if t == "锅")
    kb = next(t for t in b if t == "锅")
    assert ka is kb


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_words_cut_block_by_block_are_the_words_of_the_whole_text(text):
    """``tokens`` cuts each of jieba's blocks on its own (and keeps each block's words):
    the words are exactly those of ``jieba.cut_for_search`` over the whole
    normalised text, in zh, traditional, en, mixed, emoji and full-width text."""
    import jieba

    from memory import text as t

    norm = t.normalise(text + " 我在杭州西湖边跑步，Caroline painted 2 sunsets！今天好累😴")
    whole = []
    for is_emoji, piece in t._emoji_runs(norm):
        if is_emoji:
            whole.append(piece)
            continue
        whole += [t.stem(w.strip()) for w in jieba.cut_for_search(piece)
                  if w.strip() and not t._is_noise(w.strip()) and w.strip() not in t.STOPWORDS]
    assert list(t._token_parts.__wrapped__(norm)[0]) == whole
