"""Two replicas: two real ``huiyi serve`` processes on loopback, one fresh
PostgreSQL database and one shared data root, take concurrent deliveries of the
same and of different messages — each delivery is processed once, each line
captured once, no memory stored twice, and what one replica learnt the other
recalls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from conftest import PG_URL, ROOT
from fake_openai import free_port

START_TIMEOUT_S = 90.0
TENANT = "default"
PERSON = "1001"


@pytest.fixture
def database(pg_schema):
    """A fresh PostgreSQL database (the gateway has no schema setting; a database of
    its own is what an operator gives it), dropped afterwards."""
    import psycopg

    name = f"huiyi_replicas_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_URL.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def replicas(database, tmp_path):
    """Two gateway processes (``python -m gateway.cli serve``) on their own free
    ports, one database, one data root; yields their base URLs once both are ready."""
    data = tmp_path / "shared-data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUIYI_") and k != "DATABASE_URL"}
    env.update(HUIYI_DATA_DIR=str(data), HUIYI_DATABASE_URL=database, PYTHONPATH=str(ROOT))
    procs, urls = [], []
    try:
        for n in range(2):
            port = free_port()
            log = open(tmp_path / f"replica-{n}.log", "wb")
            procs.append(subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)],
                                          cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + START_TIMEOUT_S
        for proc, url in zip(procs, urls):
            while True:
                assert proc.poll() is None, _tail(tmp_path)
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "replica not ready\n" + _tail(tmp_path)
                time.sleep(0.3)
        yield urls
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _tail(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(tmp_path.glob("replica-*.log")))


def _turn(url: str, mid: str, text: str, at: datetime) -> dict:
    body = {"tenant": TENANT, "message": {"platform": "tg", "message_id": mid, "sender_id": PERSON,
                                          "chat_kind": "private", "chat_id": PERSON, "text": text,
                                          "timestamp": at.isoformat()}}
    r = httpx.post(url + "/v1/turns", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _at_once(calls) -> list[dict]:
    """Run the calls in threads released together (a barrier); their answers in order."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def run(i, fn):
        barrier.wait()
        try:
            out[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not [o for o in out if not isinstance(o, dict)], out
    return out


def _rows(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_two_replicas_process_each_delivery_once_and_store_no_memory_twice(replicas, database):
    """Same message id to both replicas at once → one processed, the other answered
    ``duplicate``; different messages of one person spread over both at once (two
    of them stating one fact in the same words) → every line captured exactly once,
    that fact stored once; a memory captured by one replica is recalled by the
    other; the database agrees (deliveries, chat log, memories, captures due)."""
    a, b = replicas
    now = datetime.now(timezone.utc) - timedelta(minutes=5)
    # 1. one message delivered to both replicas at the same instant (a platform retry)
    same = [(f"dup{i}", text) for i, text in enumerate(["我养了一只猫，叫 Mochi 🐱", "I work at a bakery in Tainan，每天五點起床",
                                                        "我最喜歡的電影是《千與千尋》", "My sister lives in Berlin."])]
    answers = _at_once([lambda u=u, m=m, t=t, k=k: _turn(u, m, t, now + timedelta(seconds=k))
                        for k, (m, t) in enumerate(same) for u in (a, b)])
    for k in range(len(same)):
        pair = answers[2 * k: 2 * k + 2]
        assert sorted(p["duplicate"] for p in pair) == [False, True], pair
        processed = next(p for p in pair if not p["duplicate"])
        assert processed["captured"], processed  # the one processed captured its line
    # 2. different messages of the same person, alternating replicas, all at once;
    #    m-tea-1 and m-tea-2 say one fact in the same words (a person repeating themself)
    facts = ["我住在杭州西湖边", "I'm allergic to peanuts，花生过敏", "我的生日是五月三号",
             "My favourite colour is teal.", "我在学日语，准备去大阪", "我每天早上跑步五公里",
             "我喜欢喝乌龙茶", "我喜欢喝乌龙茶"]
    mids = [f"m{i}" for i in range(len(facts) - 2)] + ["m-tea-1", "m-tea-2"]
    later = now + timedelta(minutes=1)
    answers = _at_once([lambda u=(a, b)[i % 2], m=m, t=t, i=i: _turn(u, m, t, later + timedelta(seconds=i))
                        for i, (m, t) in enumerate(zip(mids, facts))])
    assert not any(p["duplicate"] for p in answers)
    tea = [p for p in answers if p["message_id"].startswith("m-tea")]
    assert len({tuple(p["captured"]) for p in tea if p["captured"]}) <= 1  # never two tea memories
    # 3. what replica A captures now, replica B recalls at once (shared index; B has
    #    written nothing since, so only its read-time version check can show it)
    dog = _turn(a, "m-dog", "我的狗叫旺财，是一只柴犬", later + timedelta(minutes=1))["captured"]
    assert dog
    asked = _turn(b, "q1", "我的狗叫什么名字？What is my dog called?", later + timedelta(minutes=2))
    assert set(dog) & set(asked["recalled"]), asked["recalled"]
    # 4. the database: one delivery row per message, one chat line each, no capture left,
    #    no memory text twice in the namespace
    keys = [k for (k,) in _rows(database, f"SELECT key FROM deliveries WHERE key LIKE '{TENANT}|tg|%'")]
    assert len(keys) == len(set(keys)) == len(same) + len(facts) + 2
    lines = _rows(database, f"SELECT message_id, count(*) FROM chat_log WHERE role = 'user' AND sender_id = '{PERSON}' "
                            "GROUP BY message_id")
    assert sorted(m for m, _ in lines) == sorted([m for m, _ in same] + mids + ["m-dog", "q1"])
    assert all(n == 1 for _, n in lines)
    assert _rows(database, "SELECT count(*) FROM chat_log WHERE capture_ns <> ''") == [(0,)]
    texts = [t for (t,) in _rows(database, f"SELECT text FROM memories WHERE namespace = '{TENANT}/tg:{PERSON}'")]
    assert texts and len(texts) == len(set(texts)), texts
    assert sum("乌龙茶" in t for t in texts) == 1, texts
