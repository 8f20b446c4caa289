"""Never-store categories through the real bridges: Telegram Update and OneBot
v11 payloads → parser → Pipeline.handle → capture, on SQLite and PostgreSQL."""

from __future__ import annotations

from gateway.config import load_settings
from gateway.pipeline import Pipeline
from memory.types import Namespace
from test_commands import Clock, ob, tg, turn


async def test_through_the_bridges_zh_and_en(core):
    """Telegram (en) and QQ (zh) messages through the pipeline: the tenant's never-store clauses are not learned."""
    settings = load_settings(tenants={"default": {"never_store": ["health", "politics", "minors"]}})
    pipe = Pipeline(settings, core)
    clock = Clock()
    en = await turn(pipe, tg(clock, "I voted for Labour in the last election, and I love green tea."))
    zh = await turn(pipe, ob(clock, "我儿子今年八岁，我对青霉素过敏，我下个月去成都出差。", user=10001))
    texts = [m.text for m in core.list(Namespace.parse(en.namespace)) + core.list(Namespace.parse(zh.namespace))]
    assert any("green tea" in t for t in texts) and any("成都" in t for t in texts)
    assert not any(w in t for t in texts for w in ("Labour", "八岁", "青霉素"))


async def test_a_secret_told_is_not_kept_in_the_chat_log_either(core):
    """A password or an ID number told in a line (Telegram en, QQ zh) is cut from the line the chat log keeps,
    so no later turn's prompt and no capture reads it; the rest of the line is kept, and learned."""
    pipe = Pipeline(load_settings(), core)
    clock = Clock()
    en = await turn(pipe, tg(clock, "My password is Hunter2Secret! and I love surfing 🏄"))
    zh = await turn(pipe, ob(clock, "我的身份證號是110101199003074578，我喜欢吃火锅", user=10001))
    await pipe.drain(30)
    from memory.types import ChatRef

    lines = [ln.text for r in (en, zh) for ln in core.store.chat_tail("default", ChatRef.parse(r.chat), 8)]
    assert lines and not any(w in t for t in lines for w in ("Hunter2Secret", "110101199003074578"))
    assert any("surfing" in t for t in lines) and any("火锅" in t for t in lines)
    texts = [m.text for r in (en, zh) for m in core.list(Namespace.parse(r.namespace))]
    assert not any(w in t for t in texts for w in ("Hunter2Secret", "110101199003074578"))
