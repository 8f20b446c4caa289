"""Normalisation and full-text tokens on Chinese, English and mixed text."""

from __future__ import annotations

from memory.text import fingerprint, normalise, tokens


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
