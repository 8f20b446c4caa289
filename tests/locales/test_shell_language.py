"""The command line's language: a POSIX shell's locale (LC_ALL, then LC_MESSAGES,
then LANG; empty counts as unset) decides, a Chinese one is zh_CN and any other
en; without one the configured language, then the default."""

from __future__ import annotations

import pytest

from locales import DEFAULT_LANGUAGE, operator_language, shell_language


@pytest.mark.parametrize(("value", "expected"), [
    ("zh_CN.UTF-8", "zh_CN"), ("zh_CN", "zh_CN"), ("zh_TW.UTF-8", "zh_CN"), ("zh_HK.Big5HKSCS", "zh_CN"),
    ("zh_CN.GB18030", "zh_CN"), ("zh-CN", "zh_CN"),
    ("en_US.UTF-8", "en"), ("en_GB", "en"), ("C", "en"), ("POSIX", "en"), ("C.UTF-8", "en"),
    ("de_DE.UTF-8", "en"), ("ja_JP.eucJP", "en"), ("xx_YY", "en"), ("not a locale!", "en"),
])
def test_a_locale_name_is_chinese_or_english(value, expected):
    """Babel parses the locale name (encoding and modifier dropped); only Chinese is zh_CN, everything set is else en."""
    assert shell_language({"LANG": value}) == expected


def test_posix_order_lc_all_then_lc_messages_then_lang():
    """LC_ALL overrides LC_MESSAGES, which overrides LANG; an empty variable counts as unset."""
    assert shell_language({"LC_ALL": "C", "LC_MESSAGES": "zh_CN.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert shell_language({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert shell_language({"LC_ALL": "", "LC_MESSAGES": " ", "LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert shell_language({"LC_CTYPE": "zh_CN.UTF-8", "LANGUAGE": "zh_CN"}) is None  # neither names messages' locale


def test_operator_language_falls_back_to_the_configured_then_the_default():
    """No locale in the shell: the tenant's language; none configured (or an unknown one): the default."""
    assert operator_language({"LANG": "en_US.UTF-8"}, "zh_CN") == "en"
    assert operator_language({"LANG": "zh_CN.UTF-8"}, "en") == "zh_CN"
    assert operator_language({}, "en") == "en"
    assert operator_language({"LANG": ""}, "zh_CN") == "zh_CN"
    assert operator_language({}, None) == DEFAULT_LANGUAGE
    assert operator_language({}, "fr", default="en") == "en"
