"""Sleep consolidation (issue 17): what it costs in model calls and tokens per 100
messages, what it makes, and that no phantom or foreign citation reaches a
stored abstraction.

Two people, one Chinese and one English, each say ``messages`` messages: the
user lines of DuLeMon's conversations (zh) and speaker A's turns of LoCoMo's
conv-26 (en) when the evaluation data is there (``bench.DATA_DIR``), else
built-in sample sentences. Two ways to get fragments from them:

- ``captured``: every message goes through the real pipeline without a chat
  model (heuristic capture), so the fragments are what capture keeps;
- ``every msg``: every message is stored as a fragment (the upper bound: what an
  extractor keeping one fact per message would leave).

Then one consolidation run per person (``memory.consolidate.Consolidator``, no
thresholds) against ``tests/fake_openai.py``'s loopback server through the real
``openai`` client; its responder abstracts each cluster into one grounded line
and adds, on purpose, one sentence citing an invented id and one citing the
other person's memory. Tokens are estimated (no tokenizer is installed): one
per CJK character plus one per four other non-space characters. Printed: the
run's fragments, clusters, abstractions, model calls and estimated prompt and
answer tokens, each also per 100 messages, the sentences the validator removed
for bad citations, and how many stored abstractions hold a phantom or foreign
citation's words or cite a fragment that is not the person's own (must be 0;
the run fails otherwise).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import bench
from bench import table

__all__ = ["run", "estimate_tokens"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SAMPLE_ZH = ["今天又加班到十点，工作压力好大", "老板又改需求了，今晚又要加班", "这周天天加班，好累", "我养了一只叫煤球的黑猫",
              "煤球今天去看兽医了，打了疫苗", "周末我常去爬山", "我最近在学吉他", "我喜欢喝美式咖啡", "下个月要去成都出差",
              "我妈妈做的红烧肉最好吃"]
_SAMPLE_EN = ["I worked late again until ten tonight", "My boss changed the requirements again",
              "I have a black cat named Coal", "Coal went to the vet today for a vaccine", "I go hiking most weekends",
              "I'm learning the guitar these days", "I love oat lattes", "I'm flying to Berlin next month for work",
              "My sister lives in Paris", "I run every morning at six"]


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: one per CJK character plus one per four other
    non-space characters (rounded up) — the usual rule of thumb for BPE
    tokenizers of GPT-class models; no tokenizer is installed here."""
    cjk = len(_CJK.findall(text))
    other = len(re.sub(r"\s", "", text)) - cjk
    return cjk + math.ceil(other / 4)


def _messages(n: int) -> dict[str, list[str]]:
    """``{"zh": [...], "en": [...]}``, ``n`` messages each (data when present, else samples)."""
    zh: list[str] = []
    en: list[str] = []
    dulemon = bench.DATA_DIR / "zh" / "dulemon_samples.jsonl"
    locomo = bench.DATA_DIR / "memory" / "locomo10.json"
    if dulemon.is_file():
        for line in dulemon.read_text(encoding="utf-8").splitlines():
            for turn in json.loads(line)["conversation"]:
                if turn.startswith("Usr:"):
                    text = turn[4:].split("\t")[0].strip()
                    zh.append(re.sub(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])", "", text))  # the set is word-segmented
    if locomo.is_file():
        conv = json.loads(locomo.read_text(encoding="utf-8"))[0]["conversation"]
        a = conv["speaker_a"]
        for k in range(1, 40):
            en += [t["text"] for t in conv.get(f"session_{k}", []) if t["speaker"] == a]
    zh = (zh or _SAMPLE_ZH * (n // len(_SAMPLE_ZH) + 1))[:n]
    en = (en or _SAMPLE_EN * (n // len(_SAMPLE_EN) + 1))[:n]
    return {"zh": zh, "en": en}


def run(messages: int = 100) -> int:
    """Run the benchmark and print its table; returns the number of stored
    abstractions holding a phantom or foreign citation (0, or the bench fails)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fake_openai import FakeLLM, consolidation_responder

    from bridges.contract import InboundMessage
    from gateway.config import LLMSettings, load_settings
    from gateway.llm import ChatModel
    from gateway.service import build_pipeline
    from memory.consolidate import ConsolidationParams, Consolidator
    from memory.types import ChatKind, Namespace

    texts = _messages(messages)
    root = Path(tempfile.mkdtemp(prefix="huiyi-bench-consolidation-"))
    fake = FakeLLM().start()
    rows: list[list[object]] = []
    leaked = 0
    try:
        pipeline = build_pipeline(load_settings(data_dir=root))
        core = pipeline.core
        t0 = datetime(2026, 11, 1, 9, 0, tzinfo=timezone.utc)
        spaces: dict[tuple[str, str], Namespace] = {}

        async def capture_all() -> None:
            for n, (lang, said) in enumerate(texts.items()):
                uid = str(5000 + n)
                spaces[(lang, "captured")] = Namespace("default", f"tg:{uid}")
                for i, text in enumerate(said):
                    msg = InboundMessage(platform="tg", message_id=str(i), sender_id=uid, sender_name="bench",
                                         chat_kind=ChatKind.PRIVATE, chat_id=uid, text=text,
                                         timestamp=t0 + timedelta(minutes=i))
                    await pipeline.handle("default", msg)

        asyncio.run(capture_all())
        with core.batch():
            for n, (lang, said) in enumerate(texts.items()):
                ns = spaces[(lang, "every msg")] = Namespace("default", f"tg:{6000 + n}")
                for text in dict.fromkeys(said):
                    core.add(ns, core.new(ns, text))
        worker = Consolidator(core, ConsolidationParams(min_new=1, min_interval_s=0))
        for (lang, mode), ns in spaces.items():
            other = next(o for (l2, m2), o in spaces.items() if m2 == mode and l2 != lang)
            foreign = core.list(other, limit=1)
            fake.responder = consolidation_responder(foreign_id=foreign[0].id if foreign else "f0f0f0f0f0f0")
            tokens = {"prompt": 0, "answer": 0}

            async def one() -> object:
                model = ChatModel(LLMSettings(base_url=fake.base_url, model="fake-chat", max_retries=0, timeout=10))

                async def complete(msgs):
                    tokens["prompt"] += sum(estimate_tokens(m["content"]) for m in msgs)
                    out = await model.complete(msgs, temperature=0.2)
                    tokens["answer"] += estimate_tokens(out)
                    return out

                try:
                    return await worker.run(ns, complete, lang="zh_CN" if lang == "zh" else "en", force=True)
                finally:
                    await model.close()

            started = time.perf_counter()
            report = asyncio.run(one())
            seconds = time.perf_counter() - started
            live = set(core.store.iter_ids(ns))
            bad = 0
            for mid, row in core.store.consolidated(ns).items():
                text = core.get(ns, mid).text
                if "火星" in text or "Mars" in text or not set(row.sources) <= live:
                    bad += 1
            leaked += bad
            per = 100 / len(texts[lang])
            rows.append([lang, mode, len(texts[lang]), report.fragments, len(report.clusters),
                         len(report.abstractions), report.model_calls, round(report.model_calls * per, 1),
                         round(tokens["prompt"] * per), round(tokens["answer"] * per),
                         report.removed_sentences, bad, round(seconds, 2)])
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(table("consolidation with the fake model server (tokens estimated; per 100 = per 100 messages)",
                ["lang", "fragments from", "msgs", "frags", "clusters", "abstractions", "calls", "calls/100",
                 "prompt tok/100", "answer tok/100", "bad cites removed", "phantom stored", "run s"],
                rows), flush=True)
    print(f"phantom or foreign citations reaching a stored abstraction: {leaked} (must be 0)", flush=True)
    return leaked
