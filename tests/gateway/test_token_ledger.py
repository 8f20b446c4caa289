"""The token ledger and the daily cap: every model call's usage lands in SQL per
tenant, person, purpose and day (one row per combination, summed by an upsert),
in /metrics, `huiyi stats` and the console; a reached cap sends the memory down
its paths without a model and never fails the turn. Real SQLite and PostgreSQL,
the real openai client against the fake server reporting usage."""

from __future__ import annotations

import json
import logging
from datetime import date, datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from bridges.contract import InboundMessage
from gateway.config import ModelPrice, load_settings
from gateway.ledger import today
from gateway.pipeline import Pipeline
from memory.types import ChatKind, Namespace

T0 = datetime.now(timezone.utc) - timedelta(hours=1)
NS = Namespace("default", "tg:1001")

#: lang: (a fact, a question about it, the consolidate command, words of its "cap reached" answer)
SAID = {"zh_CN": ("我养了一只叫煤球的黑猫，它三岁了！", "你还记得煤球吗？", "/记忆 整理", "额度已经用完"),
        "en": ("I adopted a black cat called Mochi last spring.", "Do you remember Mochi?", "/memory consolidate",
               "budget of this bot is spent")}


MORE = {"zh_CN": ("煤球最喜欢趴在窗台上晒太阳", "煤球是我从救助站领养的"),
        "en": ("Mochi loves sleeping on the windowsill.", "Mochi came from the rescue shelter.")}


def msg(text: str, mid: str, at: datetime, sender: str = "1001") -> InboundMessage:
    return InboundMessage(platform="tg", message_id=mid, sender_id=sender, sender_name="阿杰",
                          chat_kind=ChatKind.PRIVATE, chat_id=sender, text=text, timestamp=at,
                          is_command=text.startswith("/"))


def _pipeline(core, llm, monkeypatch, lang: str = "zh_CN", cap: int = 0) -> Pipeline:
    monkeypatch.setenv("HUIYI_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("HUIYI_LLM_MODEL", "fake-chat")
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__LANGUAGE", lang)
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__MODEL_CAP_DAILY", str(cap))
    monkeypatch.setenv("HUIYI_MODEL_PRICES", json.dumps({"fake-chat": {"input": 2.0, "output": 8.0}}))
    return Pipeline(load_settings(), core)


def _extraction(text: str) -> str:
    return json.dumps({"facts": [{"text": text, "category": "fact", "importance": 0.8}]}, ensure_ascii=False)


def test_the_ledger_sums_calls_into_one_row_per_day_person_purpose_and_model(core):
    """Two calls of one person and purpose make one row (calls 2, tokens summed); another purpose, person or day
    a row of its own; the day total counts every row of the tenant that day and no other tenant's."""
    store = core.store
    d = date(2026, 12, 1)
    assert store.record_tokens("default", "tg:1", "reply", "m", 100, 20, d) == 120
    assert store.record_tokens("default", "tg:1", "reply", "m", 50, 5, d) == 175
    assert store.record_tokens("default", "qq:2", "extract", "m", 10, 1, d) == 186
    assert store.record_tokens("default", "tg:1", "reply", "m", 7, 7, d + timedelta(days=1)) == 14
    assert store.record_tokens("other", "tg:1", "reply", "m", 1000, 1000, d) == 2000
    rows = store.token_usage("default", d, d)
    assert [(r.subject, r.purpose, r.input_tokens, r.output_tokens, r.calls) for r in rows] == [
        ("qq:2", "extract", 10, 1, 1), ("tg:1", "reply", 150, 25, 2)]
    assert store.tokens_spent("default", d) == 186 and store.tokens_spent("default", d - timedelta(days=1)) == 0
    assert len(store.token_usage("default", d)) == 3


def test_an_unknown_purpose_is_refused_and_records_nothing(core):
    """A purpose that is not one of the four is a ValueError, not a row."""
    store = core.store
    with pytest.raises(ValueError, match="purpose"):
        store.record_tokens("default", "tg:1", "translate", "m", 1, 1, date(2026, 12, 1))
    assert store.token_usage("default", date(2026, 1, 1)) == []


@pytest.mark.parametrize("lang", SAID)
async def test_each_model_call_of_a_turn_is_recorded_by_purpose_and_person(core, llm, monkeypatch, lang):
    """A fact, then a question: extraction, recollection and reply each record the usage the server reported,
    under the person's subject and today's UTC day; /metrics counts them per tenant and purpose with the
    estimated cost at the operator's prices."""
    fact, question, _, _ = SAID[lang]
    p = _pipeline(core, llm, monkeypatch, lang)
    llm.usage = (120, 30)
    llm.enqueue_extraction(_extraction(fact))
    await p.handle("default", msg(fact, "1", T0))
    assert await p.drain(30)
    for more in MORE[lang]:  # enough to retell: the recollection asks the model
        core.add(NS, core.new(NS, more))
    llm.enqueue_extraction(json.dumps({"facts": []}))
    await p.handle("default", msg(question, "2", T0 + timedelta(minutes=1)))
    assert await p.drain(30)
    rows = {r.purpose: r for r in core.store.token_usage("default", today())}
    assert set(rows) == {"extract", "reply", "reconstruct"}, rows
    assert (rows["reconstruct"].calls, rows["reconstruct"].output_tokens) == (1, 30)
    assert all(r.subject == "tg:1001" and r.model == "fake-chat" for r in rows.values())
    assert (rows["extract"].calls, rows["extract"].input_tokens, rows["extract"].output_tokens) == (2, 240, 60)
    assert (rows["reply"].calls, rows["reply"].input_tokens) == (2, 240)
    metrics = p.metrics.render().decode()
    assert 'huiyi_model_tokens_total{direction="input",purpose="reply",tenant="default"} 240.0' in metrics
    assert 'huiyi_model_tokens_total{direction="output",purpose="extract",tenant="default"} 60.0' in metrics
    # 240 in at 2.0 and 60 out at 8.0 per million
    assert 'huiyi_model_cost_total{purpose="reply",tenant="default"} 0.00096' in metrics


async def test_an_answer_without_usage_records_nothing_and_still_replies(core, llm, monkeypatch):
    """A server that reports no usage: the reply comes back, the ledger stays empty (nothing is guessed)."""
    p = _pipeline(core, llm, monkeypatch)
    llm.usage = None
    llm.enqueue("你好呀")
    r = await p.handle("default", msg("今天好累呀😮‍💨", "1", T0))
    assert r.reply == "你好呀"
    assert core.store.token_usage("default", today()) == []


@pytest.mark.parametrize("lang", SAID)
async def test_a_reached_cap_degrades_to_the_paths_without_a_model(core, llm, monkeypatch, caplog, lang):
    """Cap 100 tokens a day, each answer 120: after the first turn the memory stops calling the model — the
    recollection is the template (reason token_cap), the capture heuristic, consolidation does not run and
    says why — while the turn still answers; one WARNING and a metric per call not made."""
    fact, question, consolidate, words = SAID[lang]
    p = _pipeline(core, llm, monkeypatch, lang, cap=100)
    llm.usage = (100, 20)
    llm.enqueue_extraction(_extraction(fact))
    await p.handle("default", msg(fact, "1", T0))
    assert await p.drain(30)
    assert core.store.tokens_spent("default", today()) >= 120
    asked = len(llm.extraction_requests)
    second = fact.replace("黑猫", "白猫").replace("black", "white")
    caplog.set_level(logging.WARNING, logger="gateway.ledger")
    llm.enqueue("😺 " + ("记得" if lang == "zh_CN" else "Sure"))
    r = await p.handle("default", msg(question, "2", T0 + timedelta(minutes=1)))
    assert r.reply and r.reply.startswith("😺")  # the reply is the bot's own: never capped
    assert r.fallback_reason == "token_cap"
    await p.handle("default", msg(second, "3", T0 + timedelta(minutes=2)))
    assert await p.drain(30)
    assert len(llm.extraction_requests) == asked  # heuristic capture: no extraction call
    assert any(second[:6] in m.text for m in core.list(NS)), [m.text for m in core.list(NS)]
    reply = (await p.handle("default", msg(consolidate, "4", T0 + timedelta(minutes=3)))).reply
    assert words in reply, reply
    assert sum("daily token cap" in rec.getMessage() for rec in caplog.records) == 1
    metrics = p.metrics.render().decode()
    assert 'huiyi_token_cap_reached_total{purpose="extract",tenant="default"}' in metrics
    assert 'huiyi_token_cap_reached_total{purpose="consolidate",tenant="default"} 1.0' in metrics


async def test_the_recollection_under_the_cap_is_the_template_with_its_reason(core, llm, monkeypatch):
    """With memories to retell and the cap reached, the recollection's fallback reason is token_cap (not
    no_model) and the model gets one request only: the reply's."""
    p = _pipeline(core, llm, monkeypatch, cap=10)
    for t in ("我住在杭州西湖边", "我在杭州做程序员", "我喜欢杭州的龙井茶"):
        core.add(NS, core.new(NS, t))
    core.store.record_tokens("default", "tg:1001", "reply", "fake-chat", 50, 50, today())
    llm.enqueue("好的")
    r = await p.handle("default", msg("杭州最近怎么样？", "1", T0))
    assert r.fallback_reason == "token_cap" and "杭州" in r.recollection
    chats = [q for q in llm.requests if "messages" in q]
    assert len(chats) == 1 and chats[0]["messages"][-1]["content"] == "杭州最近怎么样？"
    assert 'huiyi_reconstruction_fallbacks_total{reason="token_cap"} 1.0' in p.metrics.render().decode()


def test_model_price_estimates_per_million_tokens():
    """Prices are per million tokens, input and output apart; a negative price is a config error."""
    assert ModelPrice(input=2.0, output=8.0).cost(1_000_000, 500_000) == pytest.approx(6.0)
    with pytest.raises(ValueError):
        ModelPrice(input=-1)


def test_huiyi_stats_prints_the_days_tokens_per_purpose_and_person(tmp_path, monkeypatch):
    """`huiyi stats` prints each tenant's tokens that day (per purpose, the persons who spent most, the cost at
    the configured prices, the cap); --json carries the same numbers."""
    from typer.testing import CliRunner

    from gateway.cli.main import app
    from memory.store import Store

    monkeypatch.setenv("HUIYI_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HUIYI_MODEL_PRICES", json.dumps({"deepseek-chat": {"input": 1.0, "output": 2.0}}))
    monkeypatch.setenv("HUIYI_TENANTS__DEFAULT__MODEL_CAP_DAILY", "50000")
    d = date(2026, 11, 1)
    store = Store(f"sqlite:///{tmp_path / 'huiyi.db'}")
    store.record_tokens("default", "qq:42", "extract", "deepseek-chat", 1000, 200, d)
    store.record_tokens("default", "tg:7", "reply", "deepseek-chat", 3000, 500, d)
    store.close()
    runner = CliRunner()
    out = runner.invoke(app, ["stats", "--day", "2026-11-01"])
    assert out.exit_code == 0, out.output
    assert "tokens of tenant default: 4000 in, 700 out in 2 calls, estimated cost 0.0054, daily cap 50000" \
        in out.stdout
    assert "person tg:7: 3500 tokens" in out.stdout and "person qq:42: 1200 tokens" in out.stdout
    js = json.loads(runner.invoke(app, ["stats", "--day", "2026-11-01", "--json"]).stdout)
    (default,) = [t for t in js["tokens"] if t["tenant"] == "default"]
    assert default["tokens"] == 4700 and default["by_purpose"]["extract"]["input"] == 1000


@pytest.mark.parametrize("lang,words", [("en", ("Model tokens per day", "fact extraction", "Daily cap: 900 tokens")),
                                        ("zh_CN", ("每天的模型 token 用量", "提取记忆", "每日上限：900 个 token"))])
def test_the_console_stats_page_shows_the_tokens(core, lang, words):
    """The console's stats page shows the tenant's tokens per purpose and person, the cost and the cap, in the
    page's language; another tenant's tokens are not on it."""
    import sys
    from pathlib import Path

    from gateway.config import TenantSettings
    from gateway.http.app import create_app

    sys.path.insert(0, str(Path(__file__).parent / "console"))
    from console_helpers import REMOTE, login

    s = load_settings(tenants={"default": TenantSettings(language="en", model_cap_daily=900),
                               "other": TenantSettings(language="zh_CN")},
                      model_prices={"fake-chat": ModelPrice(input=1.0, output=1.0)})
    app = create_app(s, pipeline=Pipeline(s, core))
    core.store.record_tokens("default", "tg:1001", "extract", "fake-chat", 400, 100, today())
    core.store.record_tokens("other", "tg:666", "reply", "fake-chat", 99999, 1, today())
    with TestClient(app, client=REMOTE):
        key = core.store.create_api_key("default", "admin", label="ops")[1]
        page = login(app, key).get("/console/stats", params={"lang": lang}).text
    for w in words:
        assert w in page, w
    assert "tg:1001" in page and "tg:666" not in page and "99999" not in page
