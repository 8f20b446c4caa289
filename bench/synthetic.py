"""The speed benchmark's synthetic store, built in bulk and kept between runs.

A store of ``total`` memories over ``namespaces`` namespaces: one namespace of
``sizes[0]`` memories (the heavy user), one of ``sizes[1]``, the rest spread
evenly; rows are written in shuffled order, as many users' captures interleave
(so one namespace's rows lie scattered through SQLite's and LanceDB's files, as
they do in a real store). Texts are mixed Chinese/English/code-switched
sentences from a pool of distinct base sentences; a namespace holds each text
at most once (a repeat gets a date prefix, ``3月4日：…``).

Built in bulk, not through ``Store.add``: SQL rows by core ``executemany`` in
blocks of ``SQL_BLOCK`` (every column a real capture writes, ``norm`` and
``access_times`` included; a ``namespace_state`` row per namespace with its live
count), and the LanceDB table written as one stream of Arrow record batches
(one fragment), its scalar and full-text indices built once at the end. Only
the pool's sentences are embedded (``PooledEmbedder``): a memory reuses its
base sentence's vector, and its tokens are the date's and the sentence's
tokens joined (checked against ``memory.text.fts_text`` on a sample before use;
computed row by row when they differ). What the bulk path skips is per-row
work that recall never reads: the outbox, the audit log, tombstone checks.

Kept under ``cache_root`` (``/tmp/huiyi-bench-speed``), one directory per
configuration (``store_key``: the sizes, the pool, the schema head and this
module's ``BUILD``), one index directory per embedder (``index_key``); a
``built.json`` beside each records how long it took. A rerun with the same
configuration reuses it; a run that writes into it (the capture measurements)
removes the marker first and puts it back after undoing its writes, so a
crash in between makes the next run rebuild rather than read a changed store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from memory.types import Category, Namespace

__all__ = ["StoreConfig", "Layout", "PooledEmbedder", "sentences", "queries", "layout", "build_sql", "build_index",
           "store_key", "index_key", "CACHE_ROOT", "BUILD", "MONTHS"]

log = logging.getLogger(__name__)

BUILD = 1
"""Version of this module's build: a change to what a built store holds bumps it,
so stores kept from an older build are not reused."""
CACHE_ROOT = Path("/tmp/huiyi-bench-speed")
SQL_BLOCK = 20_000
"""SQL rows per ``executemany`` (one transaction each)."""
ARROW_BLOCK = 50_000
"""Index rows per Arrow record batch of the one LanceDB write."""
MARKER = "built.json"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """What a synthetic store holds: ``total`` memories over ``namespaces``
    namespaces, the two measured ones of ``sizes`` = (big, mid) memories, texts
    from a pool of ``pool`` distinct sentences; ``seed`` fixes the layout."""

    total: int
    namespaces: int
    sizes: tuple[int, int]
    pool: int
    seed: int = 3


# -- synthetic text -------------------------------------------------------------

_SLOTS = {
    "food": ["火锅", "寿司", "麻辣烫", "小笼包", "拉面", "披萨", "煎饼果子", "螺蛳粉", "烤鸭", "pho", "ramen",
             "tacos", "dumplings", "bubble tea", "奶茶", "咖喱饭", "酸菜鱼", "bagels", "pad thai", "羊肉串"],
    "pet": ["猫", "狗", "仓鼠", "兔子", "鹦鹉", "金鱼", "柯基", "布偶猫", "cat", "golden retriever", "乌龟"],
    "pet_name": ["布玛", "豆豆", "Lucky", "咪咪", "旺财", "Mochi", "年糕", "Oscar", "花花", "Pepper"],
    "person": ["妈妈", "爸爸", "哥哥", "姐姐", "弟弟", "妹妹", "男朋友", "女朋友", "老公", "老婆", "室友",
               "同事", "老板", "奶奶", "best friend", "roommate", "sister", "boss"],
    "name": ["小丽", "阿杰", "王磊", "Emma", "Jake", "李娜", "陈晨", "Sophie", "张伟", "Mia", "刘洋", "Leo"],
    "city": ["北京", "上海", "成都", "杭州", "深圳", "广州", "西安", "重庆", "Tokyo", "London", "Seattle",
             "大理", "厦门", "Berlin", "青岛", "长沙"],
    "hobby": ["跑步", "弹吉他", "画画", "打篮球", "游泳", "瑜伽", "摄影", "做饭", "看动漫", "打游戏", "爬山",
              "钓鱼", "rock climbing", "knitting", "chess", "羽毛球", "滑雪", "写小说"],
    "job": ["程序员", "护士", "老师", "设计师", "产品经理", "会计", "律师", "学生", "software engineer",
            "barista", "研究生", "销售", "医生", "外卖骑手"],
    "time": ["上周", "昨天", "前天", "上个月", "去年", "周末", "今天早上", "last week", "yesterday",
             "last summer", "春节的时候", "国庆期间"],
    "feeling": ["很开心", "有点难过", "特别焦虑", "很累", "超级兴奋", "有点紧张", "挺失落的", "so happy",
                "really stressed", "kind of lonely", "很感动"],
    "thing": ["新手机", "一本书", "一双跑鞋", "耳机", "机械键盘", "一把吉他", "a new laptop", "相机",
              "一盆绿萝", "a bike", "电动牙刷", "平板"],
    "show": ["甄嬛传", "武林外传", "三体", "进击的巨人", "Friends", "The Office", "繁花", "狂飙",
             "Breaking Bad", "海贼王", "鬼灭之刃", "庆余年"],
    "weekday": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "num": [str(n) for n in range(2, 40)],
}

TEMPLATES = [
    "我最喜欢吃{food}，尤其是{city}的",
    "我养了一只{pet}，叫{pet_name}",
    "我的{person}叫{name}，住在{city}",
    "我在{city}当{job}，已经{num}年了",
    "{time}和{person}去{city}玩了，{feeling}",
    "我每个{weekday}都去{hobby}",
    "我不吃{food}，小时候吃坏过肚子",
    "{time}买了{thing}，{feeling}",
    "最近在追{show}，看到第{num}集了",
    "我{person}下个月要来{city}看我",
    "我对{pet}过敏，但是很想养一只",
    "我和{name}吵架了，{feeling}",
    "我打算明年去{city}读书",
    "我今年{num}岁，是{job}",
    "I love {food}, especially the place near my flat in {city}",
    "My {person} {name} just moved to {city}",
    "I have been doing {hobby} every {weekday} for {num} weeks",
    "I work as a {job} in {city}",
    "{time} I bought {thing} and I feel {feeling}",
    "My {pet} {pet_name} is {num} months old",
    "I'm watching {show} again, it helps me relax",
    "周末想和 {name} 一起去 {hobby}，不过 {feeling}",
    "我最近在学 {hobby}，teacher 是 {name}",
    "{time}在 {city} 吃了 {food}，味道一般",
    "我的 dream job 是当{job}",
    "我{person}最近{feeling}，因为工作的事",
    "我怕黑，晚上睡觉要开灯",
    "我生日是{num}号，想要{thing}",
    "我在{city}租房子，和{person}一起住",
    "每天下班都会{hobby}半小时，{feeling}",
]

_QUERY_TEMPLATES = [
    "你还记得我喜欢吃什么吗",
    "我上次跟你说的{pet}的事你记得吗",
    "我{person}叫什么名字来着",
    "推荐一个{city}好玩的地方吧",
    "今天又去{hobby}了，好累",
    "what should I eat tonight? maybe {food}",
    "我最近心情{feeling}",
    "你觉得{show}好看吗",
    "do you remember where my {person} lives?",
    "周末要不要一起去{city}",
    "我想换工作，不想当{job}了",
    "帮我想想送{person}什么礼物，{thing}怎么样",
]

MONTHS = [f"{m}月{d}日" for m in range(1, 13) for d in range(1, 29)]
"""Date prefixes of repeated texts (336)."""
_DATED = re.compile(r"^(\d{1,2}月\d{1,2}日)：(.*)$", re.S)


def _fill(template: str, rng: random.Random) -> str:
    out = template
    for slot, values in _SLOTS.items():
        while "{" + slot + "}" in out:
            out = out.replace("{" + slot + "}", rng.choice(values), 1)
    return out


def sentences(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct synthetic memory sentences (zh, en and code-switched)."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(_fill(rng.choice(TEMPLATES), rng))
    return list(seen)


def queries(n: int, seed: int = 11) -> list[str]:
    """``n`` synthetic user messages used as one-line recall tails."""
    rng = random.Random(seed)
    return [_fill(rng.choice(_QUERY_TEMPLATES), rng) for _ in range(n)]


class PooledEmbedder:
    """Wraps a real embedder: a document whose text is a pool sentence, or a pool
    sentence behind a date prefix (``3月4日：…``), reuses that sentence's vector
    (``vectors[i]`` for ``pool[i]``; with fewer vectors than sentences, sentence
    ``i`` borrows vector ``i mod len(vectors)``); anything else (queries, new
    captures) is embedded for real, counted in ``real``. ``name``, ``dim`` and
    the relevance floors are the inner embedder's."""

    def __init__(self, inner, pool: Sequence[str], vectors: np.ndarray) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        for attr in ("min_similarity", "matched_min_similarity", "symmetric"):
            if hasattr(inner, attr):
                setattr(self, attr, getattr(inner, attr))
        self._row = {s: i % len(vectors) for i, s in enumerate(pool)}
        self._vectors = np.asarray(vectors, dtype=np.float32)
        self.real = 0

    def pooled(self, text: str) -> np.ndarray | None:
        """The pool vector of ``text`` (float32 ``(dim,)``), None when it has none."""
        i = self._row.get(text)
        if i is None:
            m = _DATED.match(text)
            i = self._row.get(m.group(2)) if m else None
        return None if i is None else self._vectors[i]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        miss = []
        for i, t in enumerate(texts):
            v = self.pooled(t)
            if v is None:
                miss.append(i)
            else:
                out[i] = v
        if miss:
            out[miss] = self.inner.embed_documents([texts[i] for i in miss])
            self.real += len(miss)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


# -- layout ---------------------------------------------------------------------


@dataclass
class Layout:
    """A synthetic store's rows in write order, as columns: row ``r`` is memory
    ``f"{r:012x}"`` of namespace ``spaces[ns[r]]``, text ``text(r)`` (pool
    sentence ``base[r]``, behind date ``MONTHS[date[r]]`` when ``date[r] >= 0``),
    canonical key ``syn:{key[r]}``, category ``CATS[cat[r]]``, importance in [0, 1].
    ``big``/``mid``: the measured namespaces; ``typical``: ten of the rest."""

    pool: list[str]
    spaces: list[Namespace]
    ns: np.ndarray
    base: np.ndarray
    date: np.ndarray
    key: np.ndarray
    cat: np.ndarray
    importance: np.ndarray

    @property
    def big(self) -> Namespace:
        return self.spaces[0]

    @property
    def mid(self) -> Namespace:
        return self.spaces[1]

    @property
    def typical(self) -> list[Namespace]:
        return self.spaces[2:12]

    def __len__(self) -> int:
        return len(self.ns)

    def text(self, r: int) -> str:
        s = self.pool[int(self.base[r])]
        d = int(self.date[r])
        return s if d < 0 else f"{MONTHS[d]}：{s}"

    def texts(self) -> set[str]:
        """Every distinct text of the store (for choosing capture texts it lacks)."""
        return {self.text(r) for r in range(len(self))}


CATS = [c.value for c in Category]


def layout(cfg: StoreConfig) -> Layout:
    """The rows of ``cfg``'s store, deterministic in ``cfg`` (numpy's PCG64 seeded
    with ``cfg.seed``); texts unique within each namespace."""
    rng = np.random.default_rng(cfg.seed)
    pool = sentences(cfg.pool)
    rest = cfg.namespaces - 2
    left = cfg.total - sum(cfg.sizes)
    sizes = [cfg.sizes[0], cfg.sizes[1]] + [left // rest + (1 if i < left % rest else 0) for i in range(rest)]
    spaces = [Namespace("t0", "u:big"), Namespace("t0", "u:mid")] + [Namespace(f"t{i % 10}", f"u:{i}")
                                                                     for i in range(rest)]
    ns = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    base = rng.integers(0, cfg.pool, size=cfg.total, dtype=np.int32)
    date = np.full(cfg.total, -1, dtype=np.int16)
    key = np.concatenate([np.arange(n, dtype=np.int32) for n in sizes])
    # a text repeated within its namespace gets a (new) random date until all are distinct
    while True:
        code = (ns.astype(np.int64) * cfg.pool + base) * (len(MONTHS) + 1) + (date + 1)
        _, first = np.unique(code, return_index=True)
        dup = np.ones(cfg.total, dtype=bool)
        dup[first] = False
        if not dup.any():
            break
        date[dup] = rng.integers(0, len(MONTHS), size=int(dup.sum()), dtype=np.int16)
    order = rng.permutation(cfg.total)
    cat = rng.integers(0, len(CATS), size=cfg.total, dtype=np.int8)
    importance = rng.random(cfg.total, dtype=np.float32)
    return Layout(pool, spaces, ns[order], base[order], date[order], key[order], cat, importance)


# -- keys and markers -------------------------------------------------------------


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def store_key(cfg: StoreConfig) -> str:
    """Directory name of ``cfg``'s store: sizes, pool, seed, the SQL schema's head
    revision and ``BUILD``."""
    from memory.store.migrate import head

    return f"{cfg.total}-{cfg.namespaces}-" + _digest([asdict(cfg), head(), BUILD])


def index_key(embedder_name: str, n_pool: int) -> str:
    """Directory name of one embedder's index of a store: the embedder, the
    vectors pooled, the index's columns and token version."""
    from memory.index import SCHEMA
    from memory.text import TOKENS_VERSION

    return f"index-{embedder_name}-" + _digest([embedder_name, n_pool, SCHEMA, TOKENS_VERSION, BUILD])


def read_marker(path: Path) -> dict | None:
    """The build record beside ``path`` (``path.with_name(path.name + '.built.json')``)
    when it exists, else None."""
    m = path.with_name(path.name + "." + MARKER)
    try:
        return json.loads(m.read_text())
    except (OSError, ValueError):
        return None


def write_marker(path: Path, record: dict) -> None:
    path.with_name(path.name + "." + MARKER).write_text(json.dumps(record))


def clear_marker(path: Path) -> None:
    path.with_name(path.name + "." + MARKER).unlink(missing_ok=True)


# -- tokens and norms, composed ---------------------------------------------------


class _Composed:
    """``memory.text`` functions of a layout's texts from those of its pool
    sentences and dates: ``f(date + "：" + s) == f(date + "：") + sep + f(s)`` when
    that holds on a sample of 300 texts (else every text is computed)."""

    def __init__(self, fn, lay: Layout, sep: str, rng: random.Random) -> None:
        self.fn = fn
        self.pool = [fn(s) for s in lay.pool]
        self.dates = [fn(f"{d}：") for d in MONTHS]
        self.sep = sep
        sample = [(rng.randrange(len(MONTHS)), rng.randrange(len(lay.pool))) for _ in range(300)]
        self.exact = all(fn(f"{MONTHS[d]}：{lay.pool[b]}") == self._join(d, b) for d, b in sample)
        if not self.exact:
            log.warning("synthetic: %s of dated texts is not composable; computing it per row", fn.__name__)

    def _join(self, d: int, b: int) -> str:
        head, tail = self.dates[d], self.pool[b]
        return f"{head}{self.sep}{tail}" if head and tail else head or tail

    def __call__(self, lay: Layout, r: int) -> str:
        d = int(lay.date[r])
        if d < 0:
            return self.pool[int(lay.base[r])]
        return self._join(d, int(lay.base[r])) if self.exact else self.fn(lay.text(r))


# -- builds -------------------------------------------------------------------------


def build_sql(store, lay: Layout, now: datetime | None = None) -> float:
    """Write ``lay``'s rows into an empty ``store`` (``memory.store.Store``) in bulk:
    ``memories`` rows by core executemany, ``SQL_BLOCK`` per transaction, then one
    ``namespace_state`` row per namespace (version 1, its live count). Every
    memory is created, updated, valid from and last recalled at ``now`` (default:
    the current time). Returns seconds taken."""
    from sqlalchemy import insert

    from memory.links import stored_entities
    from memory.store.tables import _MemoryRow, _NamespaceStateRow
    from memory.text import normalise

    t0 = time.perf_counter()
    now = now or datetime.now(timezone.utc)
    access = json.dumps([now.isoformat()])
    norm = _Composed(normalise, lay, "", random.Random(1))
    named = _Composed(stored_entities, lay, "\n", random.Random(2))  # as Store.add writes them
    names = [str(ns) for ns in lay.spaces]
    tenants = [ns.tenant for ns in lay.spaces]
    memories = _MemoryRow.__table__  # type: ignore[attr-defined]
    cols = [c.name for c in memories.c]
    if store.is_sqlite:
        # a connection of its own with a bulk load's settings (a page cache the indices
        # fit in, no fsync per block), and plain DBAPI rows: SQLAlchemy's per-row
        # parameter processing cost as much as SQLite's inserts
        from sqlalchemy import create_engine

        engine = create_engine(store.url)
        stamp = memories.c.created_at.type.dialect_impl(engine.dialect).bind_processor(engine.dialect)(now)
        sql = f"INSERT INTO memories ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    else:
        engine, stamp, sql = store.engine, now, None
    try:
        for start in range(0, len(lay), SQL_BLOCK):
            rows = [dict(id=f"{r:012x}", namespace=names[lay.ns[r]], tenant=tenants[lay.ns[r]], text=lay.text(r),
                         norm=norm(lay, r), category=CATS[lay.cat[r]], key=f"syn:{lay.key[r]}",
                         importance=float(lay.importance[r]), valence=0.0, arousal=0.0, emotion="neutral",
                         origin="", visibility="private", source_message_id=None, created_at=stamp,
                         updated_at=stamp, valid_from=stamp, event_time=None, event_end=None, version=1, access_times=access,
                         source_fp="", entities=named(lay, r), context="", meta="{}")
                    for r in range(start, min(start + SQL_BLOCK, len(lay)))]
            with engine.begin() as conn:
                if sql is not None:
                    conn.exec_driver_sql("PRAGMA cache_size = -1000000")
                    conn.exec_driver_sql("PRAGMA synchronous = OFF")
                    conn.exec_driver_sql(sql, [tuple(row[c] for c in cols) for row in rows])
                else:
                    conn.execute(insert(memories), rows)
            log.info("synthetic: %d / %d SQL rows", start + len(rows), len(lay))
    finally:
        if engine is not store.engine:
            engine.dispose()
    live = np.bincount(lay.ns, minlength=len(names))
    with store.engine.begin() as conn:
        conn.execute(insert(_NamespaceStateRow.__table__),  # type: ignore[attr-defined]
                     [dict(namespace=n, version=1, live=int(c)) for n, c in zip(names, live)])
    return time.perf_counter() - t0


def _batches(lay: Layout, vectors: np.ndarray, dim: int, schema) -> Iterator:
    import pyarrow as pa

    from memory.index import text_hash
    from memory.text import fts_text

    toks = _Composed(fts_text, lay, " ", random.Random(2))
    names = [str(ns) for ns in lay.spaces]
    rows_of = np.arange(len(lay.pool)) % len(vectors)
    for start in range(0, len(lay), ARROW_BLOCK):
        rs = range(start, min(start + ARROW_BLOCK, len(lay)))
        texts = [lay.text(r) for r in rs]
        flat = vectors[rows_of[lay.base[start:rs.stop]]].astype(np.float32).reshape(-1)
        yield pa.RecordBatch.from_arrays([
            pa.array([f"{r:012x}" for r in rs]),
            pa.array([names[lay.ns[r]] for r in rs]),
            pa.array(["private"] * len(rs)),
            pa.array([""] * len(rs)),
            pa.array([toks(lay, r) for r in rs]),
            pa.array([text_hash(t) for t in texts]),
            pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim),
        ], schema=schema)
        log.info("synthetic: %d / %d index rows", rs.stop, len(lay))


def build_index(index, lay: Layout, vectors: np.ndarray) -> dict[str, float]:
    """Write ``lay``'s rows into the empty ``index`` (``memory.index.SearchIndex``)
    as one stream of Arrow record batches (``ARROW_BLOCK`` rows each; vectors:
    row ``i`` of ``vectors`` for pool sentence ``i``, ``i mod len(vectors)`` past
    its end), then build its namespace and full-text indices over all rows.
    Returns seconds per step (``write``, ``indices``)."""
    import pyarrow as pa

    schema = index._schema()
    t0 = time.perf_counter()
    with index.writing():
        reader = pa.RecordBatchReader.from_batches(schema, _batches(lay, vectors, index.embedder.dim, schema))
        index._table.add(reader)
        t1 = time.perf_counter()
        index._create_indices(index._table)
    return {"write": t1 - t0, "indices": time.perf_counter() - t1}


def fresh_dir(path: Path) -> Path:
    """``path`` emptied (removed and made again), its marker removed."""
    clear_marker(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path
