"""A GGUF version 3 writer (little-endian), as gguf-py's GGUFWriter lays a file out.

File: magic "GGUF", u32 version 3, u64 tensor count, u64 key-value count; the key-values
(u64-length string key, u32 value type, value; arrays are u32 element type, u64 count, elements);
the tensor infos (name, u32 n_dims, u64 ne[0..n_dims) with ne[0] the contiguous row length, u32
ggml type, u64 offset from the start of the data section); zero padding to the alignment (32);
the tensor data, each tensor padded to the alignment.
"""

import struct

import numpy as np

import ggml_quants as gq

MAGIC = 0x46554747  # "GGUF" read as a little-endian u32
VERSION = 3
ALIGNMENT = 32
# value types (gguf-py constants.py GGUFValueType)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
_NUMPY = {UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
          FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8"}


def _string(s):
    b = s if isinstance(s, (bytes, bytearray)) else s.encode("utf-8")
    return struct.pack("<Q", len(b)) + bytes(b)


def pack_value(vtype, value, elem_type=None):
    """Bytes of one value (without its type tag); arrays take elem_type and a sequence."""
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        head = struct.pack("<IQ", elem_type, len(value))
        if elem_type == STRING:
            return head + b"".join(_string(s) for s in value)
        if elem_type == ARRAY:
            raise ValueError("gguf: nested arrays are not written here")
        return head + np.asarray(value).astype(_NUMPY[elem_type]).tobytes()
    return struct.pack(_SCALAR[vtype], value)


class Tensor:
    """One tensor to write: name, numpy-order shape (ne = reversed shape), ggml type name, and its
    raw bytes, or a function making them when the file is written (raw=None, make=f), so that a
    file of several GB is written with one tensor in memory at a time."""

    def __init__(self, name, shape, ggml_type, raw=None, make=None):
        self.name, self.shape, self.ggml_type = name, tuple(int(s) for s in shape), ggml_type
        n = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = gq.nbytes(ggml_type, n)
        self._make = make
        self.raw = None if raw is None else self._checked(raw)

    def _checked(self, raw):
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        if raw.size != self.nbytes:
            raise ValueError("gguf: tensor %s: %d bytes for %s of %s (%d bytes)"
                             % (self.name, raw.size, self.shape, self.ggml_type, self.nbytes))
        return raw

    def data(self):
        """The raw bytes (uint8 array), made now when the tensor was given a function."""
        return self.raw if self.raw is not None else self._checked(self._make())

    @property
    def ne(self):
        return list(reversed(self.shape))


def write(path, kvs, tensors, alignment=ALIGNMENT):
    """Write a GGUF v3 file. kvs: [(key, vtype, value) or (key, ARRAY, values, elem_type)]; tensors: [Tensor]."""
    seen = set()
    for kv in kvs:
        if kv[0] in seen:
            raise ValueError("gguf: duplicated key %s" % kv[0])
        seen.add(kv[0])
    out = [struct.pack("<IIQQ", MAGIC, VERSION, len(tensors), len(kvs))]
    for kv in kvs:
        key, vtype, value = kv[0], kv[1], kv[2]
        out.append(_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value, kv[3] if len(kv) > 3 else None))
    offset = 0
    for t in tensors:
        out.append(_string(t.name) + struct.pack("<I", len(t.ne)) + struct.pack("<%dQ" % len(t.ne), *t.ne)
                   + struct.pack("<IQ", gq.GGML_TYPE[t.ggml_type], offset))
        offset += t.nbytes + (-t.nbytes % alignment)
    head = b"".join(out)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * (-len(head) % alignment))
        for t in tensors:
            t.data().tofile(f)
            f.write(b"\0" * (-t.nbytes % alignment))
