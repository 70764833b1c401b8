"""ggml's F16, Q8_0 and Q4_0 encodings in numpy, bit-exact with llama.cpp's reference quantizers;
Q4_K, Q5_K and Q6_K in ggml's layouts by a simple encoder of our own.

Written from ggml/src/ggml-quants.c (quantize_row_q8_0_ref, quantize_row_q4_0_ref), evaluated as
the C source says with float32 arithmetic (no fused multiply-add):

  Q8_0, blocks of 32 -> 34 bytes: d = amax / 127; id = d ? 1/d : 0; q[j] = roundf(x[j] * id)
        (roundf: halves away from zero); bytes = fp16(d) then 32 int8.
  Q4_0, blocks of 32 -> 18 bytes: max = the first value of largest |x|; d = max / -8;
        id = d ? 1/d : 0; q[j] = min(15, (int8)(x[j] * id + 8.5f)) (truncation);
        bytes = fp16(d) then 16 bytes, byte j = q[j] | q[j + 16] << 4.

Q4_K, Q5_K, Q6_K (super-blocks of 256 -> 144, 176, 210 bytes) in ggml's byte layouts
(block_q4_K, block_q5_K, block_q6_K), encoded here by a plain min/max fit per sub-block (not
llama.cpp's search: any valid encoding serves an import test, which checks the bytes are kept):
  Q4_K/Q5_K: d, dmin (fp16), 12 bytes of 6-bit scales/mins of 8 sub-blocks of 32, [Q5_K: 32 bytes
        of fifth bits], 128 bytes of nibbles (byte l of group g: element 64g+l low, 64g+32+l high);
        x = d*sc*q - dmin*m.
  Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales of sub-blocks of 16,
        fp16 d; x = d*sc*(q - 32).

fp16(d) is round-to-nearest-even (F16C's _cvtss_sh(x, 0) and ggml's scalar fallback alike), which
numpy's float32 -> float16 cast also is. Note: a compiler that contracts x*id + 8.5f into one FMA
(llama.cpp's own gguf-py quants.py warns Q4_0 "depends on FMA") can differ from this in the rare
block where x*id rounds across a .5 boundary; quantize_q4_0(..., fma=True) gives that variant.
"""

import numpy as np

QK = 32
QK_K = 256
GGML_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30}
BLOCK_BYTES = {"F32": (1, 4), "F16": (1, 2), "Q4_0": (32, 18), "Q8_0": (32, 34), "BF16": (1, 2),
               "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


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


# ---- k-quants: super-blocks of 256 ----

def _super(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size % QK_K:
        raise ValueError("quantize: %d values are not a whole number of %d-super-blocks" % (x.size, QK_K))
    return x.reshape(-1, QK_K)


def _f16(v):
    return np.asarray(v, dtype=np.float32).astype(np.float16)


def _pack_scales(sc, m):
    """[nb, 8] 6-bit scales and mins -> [nb, 12] bytes (ggml's get_scale_min_k4 inverse)."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    return out


def _unpack_scales(s):
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), dtype=np.int32)
    m = np.empty_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def _quantize_q45(x, nmax):
    b = _super(x).reshape(-1, 8, 32)
    lo = np.minimum(b.min(axis=2), 0).astype(np.float32)
    hi = np.maximum(b.max(axis=2), 0).astype(np.float32)
    scale = (hi - lo) / np.float32(nmax)
    mins = -lo
    d16 = _f16(scale.max(axis=1) / np.float32(63))
    m16 = _f16(mins.max(axis=1) / np.float32(63))
    d = d16.astype(np.float32)[:, None]
    dm = m16.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d > 0, np.clip(np.rint(scale / d), 0, 63), 0).astype(np.int32)
        m = np.where(dm > 0, np.clip(np.rint(mins / dm), 0, 63), 0).astype(np.int32)
        ds = (d * sc)[:, :, None]
        q = np.where(ds > 0, np.clip(np.rint((b + (dm * m)[:, :, None]) / ds), 0, nmax), 0).astype(np.uint8)
    q = q.reshape(-1, 4, 2, 32)  # group g, low/high half, l
    nib = (q[:, :, 0, :] & 15) | ((q[:, :, 1, :] & 15) << 4)
    head = np.concatenate([d16.view(np.uint8).reshape(-1, 2), m16.view(np.uint8).reshape(-1, 2),
                           _pack_scales(sc, m)], axis=1)
    if nmax == 15:
        return np.concatenate([head, nib.reshape(-1, 128)], axis=1).reshape(-1)
    hb = (q >> 4) & 1  # [nb, 4, 2, 32]: bit 2g + half of byte l
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for g in range(4):
        for h in range(2):
            qh |= (hb[:, g, h, :] << (2 * g + h)).astype(np.uint8)
    return np.concatenate([head, qh, nib.reshape(-1, 128)], axis=1).reshape(-1)


def quantize_q4_k(x):
    """Q4_K bytes (144 per 256 values) of float32 values."""
    return _quantize_q45(x, 15)


def quantize_q5_k(x):
    """Q5_K bytes (176 per 256 values) of float32 values."""
    return _quantize_q45(x, 31)


def quantize_q6_k(x):
    """Q6_K bytes (210 per 256 values) of float32 values."""
    b = _super(x).reshape(-1, 16, 16)
    idx = np.abs(b).argmax(axis=2)
    mx = np.take_along_axis(b, idx[:, :, None], axis=2)[:, :, 0]
    scale = mx / np.float32(-32)
    big = np.take_along_axis(scale, np.abs(scale).argmax(axis=1)[:, None], axis=1)[:, 0]
    d16 = _f16(big / np.float32(-128))
    d = d16.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d != 0, np.clip(np.rint(scale / d), -128, 127), 0).astype(np.int32)
        ds = (d * sc)[:, :, None]
        q = (np.where(ds != 0, np.clip(np.rint(b / ds), -32, 31), 0) + 32).astype(np.uint8)
    q = q.reshape(-1, 2, 4, 32)  # half n, quarter k (elements 32k + l of the half), l
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                         (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=2)  # [nb, 2, 64]
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.astype(np.int8).view(np.uint8),
                           d16.view(np.uint8).reshape(-1, 2)], axis=1).reshape(-1)


def dequantize_q45_k(raw, n, five):
    bb = 176 if five else 144
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, bb)
    d = blk[:, 0:2].copy().view(np.float16).astype(np.float64).reshape(-1)
    dm = blk[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1)
    sc, m = _unpack_scales(blk[:, 4:16])
    qs = blk[:, bb - 128:].reshape(-1, 4, 32).astype(np.int32)
    q = np.stack([qs & 15, qs >> 4], axis=2)  # [nb, 4, 2, 32]
    if five:
        qh = blk[:, 16:48].astype(np.int32)
        for g in range(4):
            for h in range(2):
                q[:, g, h, :] |= ((qh >> (2 * g + h)) & 1) << 4
    q = q.reshape(-1, 8, 32)
    return (d[:, None, None] * sc[:, :, None] * q - dm[:, None, None] * m[:, :, None]).reshape(-1)[:n]


def dequantize_q6_k(raw, n):
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, 210)
    ql = blk[:, :128].reshape(-1, 2, 2, 32).astype(np.int32)  # half, first/second 32 bytes, l
    qh = blk[:, 128:192].reshape(-1, 2, 32).astype(np.int32)
    q = np.empty((blk.shape[0], 2, 4, 32), dtype=np.int32)
    q[:, :, 0] = (ql[:, :, 0] & 15) | ((qh & 3) << 4)
    q[:, :, 1] = (ql[:, :, 1] & 15) | (((qh >> 2) & 3) << 4)
    q[:, :, 2] = (ql[:, :, 0] >> 4) | (((qh >> 4) & 3) << 4)
    q[:, :, 3] = (ql[:, :, 1] >> 4) | (((qh >> 6) & 3) << 4)
    sc = blk[:, 192:208].copy().view(np.int8).astype(np.float64)
    d = blk[:, 208:210].copy().view(np.float16).astype(np.float64).reshape(-1)
    return (d[:, None, None] * sc[:, :, None] * (q.reshape(-1, 16, 16) - 32)).reshape(-1)[:n]


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
    if ggml_type in ("Q4_K", "Q5_K", "Q6_K"):
        return {"Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}[ggml_type](x)
    raise ValueError("ggml type %r is not written here (F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)" % ggml_type)


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
    if ggml_type in ("Q4_K", "Q5_K"):  # float64: the products as the decoder forms them
        return dequantize_q45_k(raw, n, ggml_type == "Q5_K")
    if ggml_type == "Q6_K":
        return dequantize_q6_k(raw, n)
    raise ValueError("ggml type %r is not read here" % ggml_type)


def nbytes(ggml_type, n):
    blk, size = BLOCK_BYTES[ggml_type]
    return n // blk * size
