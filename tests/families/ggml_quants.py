"""ggml's F16, Q8_0 and Q4_0 encodings in numpy, bit-exact with llama.cpp's reference quantizers.

Written from ggml/src/ggml-quants.c (quantize_row_q8_0_ref, quantize_row_q4_0_ref), evaluated as
the C source says with float32 arithmetic (no fused multiply-add):

  Q8_0, blocks of 32 -> 34 bytes: d = amax / 127; id = d ? 1/d : 0; q[j] = roundf(x[j] * id)
        (roundf: halves away from zero); bytes = fp16(d) then 32 int8.
  Q4_0, blocks of 32 -> 18 bytes: max = the first value of largest |x|; d = max / -8;
        id = d ? 1/d : 0; q[j] = min(15, (int8)(x[j] * id + 8.5f)) (truncation);
        bytes = fp16(d) then 16 bytes, byte j = q[j] | q[j + 16] << 4.

fp16(d) is round-to-nearest-even (F16C's _cvtss_sh(x, 0) and ggml's scalar fallback alike), which
numpy's float32 -> float16 cast also is. Note: a compiler that contracts x*id + 8.5f into one FMA
(llama.cpp's own gguf-py quants.py warns Q4_0 "depends on FMA") can differ from this in the rare
block where x*id rounds across a .5 boundary; quantize_q4_0(..., fma=True) gives that variant.
"""

import numpy as np

QK = 32
GGML_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "BF16": 30}
BLOCK_BYTES = {"F32": (1, 4), "F16": (1, 2), "Q4_0": (32, 18), "Q8_0": (32, 34), "BF16": (1, 2)}


def _blocks(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size % QK:
        raise ValueError("quantize: %d values are not a whole number of %d-blocks" % (x.size, QK))
    return x.reshape(-1, QK)


def _roundf(v):
    """C's roundf on float32 values: nearest integer, halves away from zero. rint (halves to even)
    then the exact halves moved away from zero; all in float32, where v - trunc(v) is exact."""
    r = np.rint(v)
    t = np.trunc(v)
    tie = np.abs(v - t) == np.float32(0.5)
    r[tie] = t[tie] + np.sign(v[tie])
    return r


def quantize_q8_0(x):
    """Q8_0 bytes (uint8 array, 34 per 32 values) of float32 values; x.size % 32 == 0."""
    b = _blocks(x)
    amax = np.abs(b).max(axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _roundf(b * idv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize_q4_0(x, fma=False):
    """Q4_0 bytes (uint8 array, 18 per 32 values) of float32 values; x.size % 32 == 0.

    fma=True rounds x*id + 8.5 once, as fmaf in an FMA-contracted build (and gguf-py) does."""
    b = _blocks(x)
    imax = np.abs(b).argmax(axis=1)  # the first of equal |x|, as the C loop's strict '<'
    # the C loop starts from max = +0.0f, so an all-zero block (even of -0.0) gives d = -0.0
    mx = np.where(np.abs(b).max(axis=1) > 0, b[np.arange(b.shape[0]), imax], np.float32(0)).astype(np.float32)
    d = mx / np.float32(-8)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    if fma:
        # fmaf rounds the exact x*id + 8.5 once to float32 (the float64 product is exact)
        t = (b.astype(np.float64) * idv[:, None].astype(np.float64) + 8.5).astype(np.float32)
    else:
        t = (b * idv[:, None]) + np.float32(8.5)
    q = np.minimum(np.trunc(t), 15).astype(np.uint8)  # values are >= 0, so (int8) truncates down
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return out.reshape(-1)


def dequantize_q8_0(raw, n):
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)
    d = blk[:, :2].copy().view(np.float16).astype(np.float32)
    return (blk[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)[:n]


def dequantize_q4_0(raw, n):
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, 18)
    d = blk[:, :2].copy().view(np.float16).astype(np.float32)
    lo = (blk[:, 2:] & 0x0F).astype(np.int8) - 8
    hi = (blk[:, 2:] >> 4).astype(np.int8) - 8
    return (np.concatenate([lo, hi], axis=1).astype(np.float32) * d).reshape(-1)[:n]


def encode(x, ggml_type):
    """Raw bytes (uint8 array) of a float32 array in a ggml type (F32, F16, Q8_0, Q4_0)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if ggml_type == "F32":
        return x.reshape(-1).view(np.uint8)
    if ggml_type == "F16":
        return x.astype(np.float16).reshape(-1).view(np.uint8)
    if ggml_type == "Q8_0":
        return quantize_q8_0(x)
    if ggml_type == "Q4_0":
        return quantize_q4_0(x)
    raise ValueError("ggml type %r is not written here (F32, F16, Q8_0, Q4_0)" % ggml_type)


def decode(raw, ggml_type, n):
    """float32 values of n elements stored in a ggml type."""
    raw = np.asarray(raw, dtype=np.uint8)
    if ggml_type == "F32":
        return raw.view(np.float32)[:n].copy()
    if ggml_type == "F16":
        return raw.view(np.float16)[:n].astype(np.float32)
    if ggml_type == "Q8_0":
        return dequantize_q8_0(raw, n)
    if ggml_type == "Q4_0":
        return dequantize_q4_0(raw, n)
    raise ValueError("ggml type %r is not read here" % ggml_type)


def nbytes(ggml_type, n):
    blk, size = BLOCK_BYTES[ggml_type]
    return n // blk * size
