"""A small safetensors writer and reader (numpy only), and float32 -> bfloat16 as torch rounds it.

The format: an 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} (padded with
spaces to a multiple of 8 here), then the tensor bytes; offsets count from the end of the header.
"""

import json
import os
import struct

import numpy as np

NUMPY_OF = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
            "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
DTYPE_OF_TORCH = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def f32_to_bf16_bits(a):
    """bfloat16 bit patterns of float32 values, rounded to nearest even as torch (c10) does; NaN -> 0x7FC0."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    out[np.isnan(np.asarray(a, dtype=np.float32))] = 0x7FC0
    return out


def bf16_bits_to_f32(b):
    """float32 values of bfloat16 bit patterns (exact)."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def encode(a, dtype):
    """(bytes, stored float32 values) of a float32 array stored as dtype F32, F16 or BF16."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.tobytes(), a
    if dtype == "F16":
        h = a.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    if dtype == "BF16":
        b = f32_to_bf16_bits(a)
        return b.tobytes(), bf16_bits_to_f32(b).reshape(a.shape)
    raise ValueError("safetensors: unsupported dtype %r (F32, F16, BF16)" % dtype)


def write(path, tensors, dtype="F32", metadata=None):
    """Write {name: float32 array} (insertion order kept) as one safetensors file in dtype.

    Returns {name: the float32 values actually stored} (rounded when dtype is F16 or BF16)."""
    header, blobs, stored, off = {}, [], {}, 0
    for name, a in tensors.items():
        raw, vals = encode(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(a)), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        stored[name] = vals
        off += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)
    return stored


def write_sharded(folder, tensors, dtype="F32", n_shards=2, metadata=None):
    """Write model-0000i-of-0000n.safetensors shards (split by bytes, tensor order kept) and the
    model.safetensors.index.json weight map, as transformers' save_pretrained does."""
    names = list(tensors)
    sizes = [np.asarray(tensors[n]).size * ITEMSIZE[dtype] for n in names]
    total, target = sum(sizes), sum(sizes) / n_shards
    groups, acc = [[] for _ in range(n_shards)], 0
    for n, s in zip(names, sizes):
        k = min(int(acc // target), n_shards - 1) if target else 0
        groups[k].append(n)
        acc += s
    groups = [g for g in groups if g]
    weight_map, stored = {}, {}
    for i, g in enumerate(groups):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
        stored.update(write(os.path.join(folder, fname), {n: tensors[n] for n in g}, dtype, metadata))
        weight_map.update({n: fname for n in g})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return stored


def read(path):
    """{name: numpy array} of one safetensors file; BF16 and F16 come back as float32 (exact)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors header" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError("%s: header length %d runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n])
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], tuple(info["shape"])
        b, e = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if dt not in ITEMSIZE:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        if e - b != count * ITEMSIZE[dt] or base + e > len(blob) or b < 0:
            raise ValueError("%s: tensor %s: offsets %d..%d do not fit shape %s of %s" % (path, name, b, e, shape, dt))
        raw = blob[base + b:base + e]
        if dt == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype=np.uint16))
        elif dt == "F16":
            a = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        else:
            a = np.frombuffer(raw, dtype=NUMPY_OF[dt]).copy()
        out[name] = a.reshape(shape)
    return out


def read_folder(folder):
    """All tensors of a HF folder: the shards of model.safetensors.index.json, else model.safetensors."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        out = {}
        for fname in sorted(set(wm.values())):
            part = read(os.path.join(folder, fname))
            for n in part:
                if wm.get(n) != fname:
                    raise ValueError("%s: tensor %s is not listed for %s in the index" % (folder, n, fname))
            out.update(part)
        missing = sorted(set(wm) - set(out))
        if missing:
            raise ValueError("%s: the index lists tensors no shard holds: %s" % (folder, missing[:5]))
        return out
    return read(os.path.join(folder, "model.safetensors"))
