"""Beyond one host (issue 30): the search index on object storage, shared by
gateways on separate data roots with no shared directory, their index writes
ordered by PostgreSQL (``Store.index_write_lock``).

Real parts: an S3-compatible server on loopback (moto's server mode, started
here), LanceDB's own object store, a fresh PostgreSQL schema, the offline
embedder. Recall runs through the index path (``exact_max=0``): what the other
gateway serves comes from the object store, not from its own SQL scan."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import PG_URL, ROOT
from memory.recall import RecallParams
from memory.types import Namespace

INDEX = RecallParams(k=10, exact_max=0)
"""Recall through the LanceDB index, whatever the namespace's size."""


@pytest.fixture(scope="module")
def s3_endpoint():
    """An S3-compatible server on a free loopback port for this module (moto)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint):
    """A fresh bucket; yields (index URI, LanceDB storage options)."""
    import boto3

    name = "huiyi-" + uuid.uuid4().hex[:10]
    boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket=name)
    opts = {"endpoint": s3_endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "region": "us-east-1", "allow_http": "true"}
    return f"s3://{name}/index", opts


@pytest.fixture
def shared_schema(pg_schema):
    """One PostgreSQL schema name for every gateway of a test (dropped afterwards)."""
    import psycopg

    name = f"{pg_schema}_{uuid.uuid4().hex[:6]}"
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _gateway(root: Path, uri: str, opts: dict, schema: str, embedder):
    """One gateway's core: its own data root (nothing of the index in it), the
    shared PostgreSQL schema, the index on object storage ordered by the store's lock."""
    from memory.core import MemoryCore
    from memory.index import SearchIndex
    from memory.store import Store

    root.mkdir(parents=True, exist_ok=True)
    store = Store(PG_URL, schema=schema)
    return MemoryCore(store, SearchIndex(uri, embedder, storage_options=opts, write_lock=store.index_write_lock))


@pytest.fixture
def two_gateways(tmp_path, bucket, shared_schema, embedder):
    """Gateways A and B: separate data roots, one PostgreSQL schema, one index on S3."""
    uri, opts = bucket
    a = _gateway(tmp_path / "a", uri, opts, shared_schema, embedder)
    b = _gateway(tmp_path / "b", uri, opts, shared_schema, embedder)
    yield a, b
    a.close()
    b.close()


def test_an_object_store_index_keeps_its_rows_when_reopened(bucket, tmp_path, embedder):
    """The index records its embedder in the table's own schema metadata, which
    travels to the object store: reopening it keeps its rows (before, an s3://
    index had no index_meta.json and was dropped as another embedder's at every
    start)."""
    from memory.index import SearchIndex

    uri, opts = bucket
    ns = Namespace("default", "tg:3001")
    first = SearchIndex(uri, embedder, storage_options=opts)
    assert first.remote and first.created
    from memory.types import Memory

    first.upsert([Memory(id=uuid.uuid4().hex[:12], namespace=ns, text="我家的猫叫煤球 🐈")])
    again = SearchIndex(uri, embedder, storage_options=opts)
    assert not again.needs_rebuild and not again.created
    assert again.count() == 1
    assert not any(tmp_path.iterdir())  # nothing of the index on local disk


def test_a_write_on_one_gateway_is_recalled_on_the_other(two_gateways):
    """What gateway A learns, gateway B recalls through the shared index at its
    next search (read consistency 0), in Chinese, English and mixed text."""
    a, b = two_gateways
    ns = Namespace("default", "tg:3002")
    for text, query in [("我家的猫叫煤球", "猫"), ("My sister lives in Lisbon 🇵🇹", "sister"),
                        ("周末去Costco买牛排", "Costco")]:
        stored = a.add(ns, a.new(ns, text)).memory
        assert stored.id in {h.memory.id for h in b.recall(ns, [query], params=INDEX)}
    other = Namespace("default", "tg:3003")
    assert b.recall(other, ["猫"], params=INDEX) == []  # the namespace holds on the other gateway too


def test_a_forget_on_one_gateway_is_never_served_by_the_other(two_gateways):
    """Twelve rounds: A stores a fact, B recalls it, A forgets it, and B's very
    next recall (index path) never returns it — nor does A's."""
    a, b = two_gateways
    ns = Namespace("default", "tg:3004")
    for n in range(12):
        text = f"我的第{n}个秘密是喜欢吃榴莲" if n % 2 else f"Secret number {n}: I hum in the lift"
        query = "榴莲" if n % 2 else "lift"
        m = a.add(ns, a.new(ns, text)).memory
        assert m.id in {h.memory.id for h in b.recall(ns, [query], params=INDEX)}
        a.forget(ns, m.id, purge=n % 4 == 0)
        assert m.id not in {h.memory.id for h in b.recall(ns, [query], params=INDEX)}
        assert m.id not in {h.memory.id for h in a.recall(ns, [query], params=INDEX)}
    assert b.index.ids(ns) == set() or b.store.outbox_depth() > 0  # the rest are deletes still owed


def test_index_writes_of_two_gateways_wait_for_each_other(two_gateways):
    """The index write lock is PostgreSQL's: while gateway A holds it, gateway B's
    write waits and lands after A lets go (no two writers on the object store)."""
    import threading

    a, b = two_gateways
    ns = Namespace("default", "tg:3005")
    landed = threading.Event()

    def write_on_b():
        b.add(ns, b.new(ns, "I keep bees on the roof 🐝"))
        landed.set()

    with a.index.writing():
        t = threading.Thread(target=write_on_b)
        t.start()
        assert not landed.wait(1.5)  # B's SQL committed, its index write waits for A
    t.join(30)
    assert landed.is_set()
    assert len(a.index.ids(ns)) == 1


CHILD = r"""
import sys, time
from memory.core import MemoryCore
from memory.embed import Usem3Embedder
from memory.index import SearchIndex
from memory.store import Store
from memory.types import Namespace
uri, schema, endpoint = sys.argv[1:4]
opts = {"endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
        "region": "us-east-1", "allow_http": "true"}
store = Store(sys.argv[4], schema=schema)
core = MemoryCore(store, SearchIndex(uri, Usem3Embedder(), storage_options=opts, write_lock=store.index_write_lock),
                  rebuild="none")
ns = Namespace("default", "tg:3006")
with core.batch():  # SQL and the outbox now, the index write owed
    for n in range(40):
        core.add(ns, core.new(ns, f"第{n}件事：我喜欢第{n}种茶 tea #{n}"))
    with core.index.writing():  # the writer's pass: a first share of the outbox, then it dies holding the lock
        core.maintain(limit=10)
        print("partial", flush=True)
        time.sleep(120)
"""


def test_kill_9_of_the_index_writer_mid_outbox_hands_the_lock_over_and_loses_nothing(
        tmp_path, bucket, shared_schema, embedder, s3_endpoint):
    """A gateway process stores 40 memories (SQL + outbox), applies a first 10 of
    them to the index holding the write lock, and is killed with SIGKILL while it
    still holds it. PostgreSQL drops its connection and with it the lock: the
    other gateway takes it within seconds, applies the rest of the outbox, and the
    index holds exactly SQL's 40 live memories."""
    uri, opts = bucket
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, uri, shared_schema, s3_endpoint, PG_URL], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "partial", child.stderr.read()
    finally:
        child.kill()  # SIGKILL: no finally, no lock release by the process itself
        child.wait(10)
    b = _gateway(tmp_path / "b", uri, opts, shared_schema, embedder)
    try:
        ns = Namespace("default", "tg:3006")
        live = set(b.store.iter_ids(ns))
        assert len(live) == 40
        assert 0 < len(b.index.ids(ns)) < 40  # the dead writer's first share landed, the rest is owed
        t0 = time.monotonic()
        while b.store.outbox_depth():
            b.maintain()
        assert time.monotonic() - t0 < 20  # the lock came free when the server dropped the dead connection
        assert b.index.ids(ns) == live
        assert "茶" in b.recall(ns, ["我喜欢第7种茶"], params=INDEX)[0].memory.text
    finally:
        b.close()


def test_the_gateway_wires_an_s3_index_to_the_stores_lock(tmp_path, shared_schema):
    """``HUIYI_INDEX_URI=s3://…`` with PostgreSQL: the object store's options from
    ``HUIYI_INDEX_S3__*`` and the store's index write lock; with SQLite, the options
    alone; a directory: neither. Another scheme is refused at start-up."""
    import pydantic

    from gateway.config import Settings
    from gateway.service import index_writers
    from memory.store import Store

    s = Settings(data_dir=tmp_path, index_uri="s3://bucket/idx",
                 index_s3={"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "allow_http": True,
                           "access_key_id": "AK", "secret_access_key": "SK"})
    pg = Store(PG_URL, schema=shared_schema)
    try:
        kw = index_writers(s, pg)
        assert kw["storage_options"] == {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1",
                                         "aws_access_key_id": "AK", "aws_secret_access_key": "SK",
                                         "allow_http": "true"}
        assert kw["write_lock"] == pg.index_write_lock
    finally:
        pg.close()
    lite = Store(f"sqlite:///{tmp_path / 'h.db'}")
    assert set(index_writers(s, lite)) == {"storage_options"}
    assert index_writers(Settings(data_dir=tmp_path), lite) == {}
    lite.close()
    for bad in ("gs://bucket/idx", "s3://", "http://minio/idx"):
        with pytest.raises(pydantic.ValidationError, match="s3://bucket/prefix"):
            Settings(data_dir=tmp_path, index_uri=bad)


def test_isolation_state_machine_across_two_gateways_on_object_storage(two_gateways, llm):
    """The isolation programs with every step sent to gateway A or B at random
    (same PostgreSQL, one index on S3): no hit, version or abstraction ever leaves
    its namespace, whichever gateway wrote and whichever serves (small budget, too
    small to reach the machine's consolidation steps: one runs after it, fragments
    said on A and consolidated on B with a model that cites another person's id)."""
    import asyncio
    import random

    from fake_openai import consolidation_responder
    from gateway.config import LLMSettings
    from gateway.llm import ChatModel
    from memory.consolidate import ConsolidationParams, Consolidator
    from test_isolation import _run_machine

    a, b = two_gateways
    pick = random.Random(30)

    class Either:
        """Each attribute read goes to one of the two gateways."""

        def __getattr__(self, name):
            return getattr(pick.choice((a, b)), name)

    _run_machine(Either(), 20, llm, require_abstractions=False)

    ns, other = Namespace("default", "tg:3007"), Namespace("default", "tg:3008")
    foreign = a.add(other, a.new(other, "我对花生过敏")).memory.id
    said = [a.add(ns, a.new(ns, t)).memory.id for t in ("今天又加班到十点", "这周又加班到十点，好累")]
    llm.responder = consolidation_responder(foreign_id=foreign)

    async def consolidate_on_b():
        model = ChatModel(LLMSettings(base_url=llm.base_url, model="fake-chat", max_retries=0, timeout=30))
        try:
            return await Consolidator(b, ConsolidationParams(min_new=1, min_interval_s=0)).run(
                ns, model.complete, lang="en", force=True)
        finally:
            await model.close()

    report = asyncio.run(consolidate_on_b())
    assert report.abstractions
    for made in report.abstractions:
        assert set(made.sources) <= set(said)
        assert a.get(ns, made.memory_id).namespace == ns  # A reads what B wrote
    assert foreign not in {h.memory.id for h in a.recall(ns, ["花生 过敏"], params=INDEX)}


@pytest.mark.parametrize("said", ["我对花生过敏，上次吃了一口就进了急诊室😱", "I'm allergic to peanuts, I carry an EpiPen."])
async def test_a_forget_on_gateway_a_holds_when_the_message_is_sent_again_to_gateway_b(two_gateways, said):
    """Through the Telegram parser and each gateway's own pipeline: a person's message is learned on A and
    forgotten there with /memory forget (the receipt counts a tombstone); the same message sent again to B —
    the platform's retry, and the same words under a new id dated before the forget (a late copy) — is not
    learned again from that older evidence, and B's recall never serves it; said again after the forget, it is
    new evidence and B learns it."""
    from datetime import UTC, datetime, timedelta

    from bridges.telegram.parse import parse_update
    from gateway.config import load_settings
    from gateway.pipeline import Pipeline

    a, b = two_gateways
    settings = load_settings()
    gate_a, gate_b = Pipeline(settings, a), Pipeline(settings, b)
    start = int((datetime.now(UTC) - timedelta(minutes=30)).timestamp())

    def update(text: str, mid: int, at: int) -> dict:
        return {"update_id": 900000 + mid, "message": {
            "message_id": mid, "date": at, "text": text, "chat": {"id": 3010, "type": "private", "first_name": "阿杰"},
            "from": {"id": 3010, "is_bot": False, "first_name": "阿杰", "language_code": "zh-hans"},
            **({"entities": [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]}
               if text.startswith("/") else {})}}

    learned = await gate_a.handle("default", parse_update(update(said, 1, start)))
    (mid,) = learned.captured
    ns = Namespace.parse(learned.namespace)
    forgot = await gate_a.handle("default", parse_update(update(f"/memory forget {mid}", 2, start + 60)))
    assert mid in forgot.reply and ("tombstones 1" in forgot.reply or "墓碑 1" in forgot.reply), forgot.reply

    retry = await gate_b.handle("default", parse_update(update(said, 1, start)))  # the platform's own retry
    late = await gate_b.handle("default", parse_update(update(said, 3, start + 30)))  # a copy dated before it
    assert retry.captured == [] and late.captured == [] and not late.duplicate, (retry, late)
    assert b.list(ns) == [] and a.list(ns) == []
    assert mid not in {h.memory.id for h in b.recall(ns, [said], params=INDEX)}
    again = await gate_b.handle("default", parse_update(update(said, 4, int(datetime.now(UTC).timestamp()) + 1)))
    assert len(again.captured) == 1 and again.captured != [mid]
    assert [m.id for m in a.list(ns)] == again.captured  # A sees what B learned: one store
