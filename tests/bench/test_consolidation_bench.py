"""The consolidation bench's parts: the token estimate (zh, en, mixed) and its message sets."""

from __future__ import annotations

from bench import consolidation


def test_token_estimate_counts_cjk_characters_and_quarters_of_the_rest():
    """One token per CJK character, one per four other non-space characters (rounded up)."""
    assert consolidation.estimate_tokens("今天又加班到十点") == 8
    assert consolidation.estimate_tokens("I worked late") == 3  # 11 non-space characters
    assert consolidation.estimate_tokens("我养了猫 Coal 🐈，") == 4 + 2  # Coal🐈， is six characters
    assert consolidation.estimate_tokens("") == 0


def test_message_sets_have_the_asked_size_in_both_languages(tmp_path, monkeypatch):
    """With the data or without it (built-in samples), each person says exactly n messages."""
    import bench

    for root in (bench.DATA_DIR, tmp_path):
        monkeypatch.setattr(bench, "DATA_DIR", root)
        sets = consolidation._messages(30)
        assert [len(sets["zh"]), len(sets["en"])] == [30, 30]
        assert all(m.strip() for m in sets["zh"] + sets["en"])
        assert any("\u4e00" <= ch <= "\u9fff" for ch in sets["zh"][0])
