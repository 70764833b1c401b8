#!/usr/bin/env bash
# Our k-quant encoders (src/tensor/kquants.c) against llama.cpp's reference
# quantizers (quantize_row_q4_K_ref, _q5_K_ref, _q6_K_ref) on the same data:
# RMSE of dequantize(quantize(x)) - x for both, on a seeded Gaussian matrix
# (N(0, 1), 256 x 4096) and on every layer matrix of stories15M (each
# matrix's values taken in runs of 256, in the product's row order: w2 and wo
# transposed back). A by-hand check (needs a llama.cpp build): src/tensor is
# built as a shared library, llama.cpp's libggml-base.so is loaded as it is,
# both through Python's ctypes.
#
# usage: jobs/experiments/kquant_error.sh [--llama DIR] [--model models/cache/stories15M.h5]
#   --llama  a llama.cpp checkout built in DIR/build (default /tmp/llama.cpp)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
llama=/tmp/llama.cpp
model="$root/models/cache/stories15M.h5"
while (($#)); do
    case "$1" in
        --llama|--model) need_value "$@" ;;&
        --llama) llama=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
ggml="$llama/build/bin/libggml-base.so"
[[ -f $ggml ]] || fail "$ggml is missing: build llama.cpp there first"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -shared -fPIC -I"$root/include" "$root"/src/tensor/*.c -lm -o "$tmp/libmi_tensor.so"
/usr/bin/python3 - "$tmp/libmi_tensor.so" "$ggml" "$model" <<'PY'
import ctypes, sys
import numpy as np
import h5py

mi, gg, model = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2]), sys.argv[3]
class Params(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]
gg.ggml_init.restype = ctypes.c_void_p
gg.ggml_init(Params(1 << 20, None, False))  # fills ggml's fp16 table, which its dequantizers read
BYTES = {"q4_K": 144, "q5_K": 176, "q6_K": 210}
OURS = {"q4_K": 4, "q5_K": 5, "q6_K": 6}
P = ctypes.c_void_p

def ptr(a):
    return a.ctypes.data_as(P)

def rmse(kind, who, x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    q = np.zeros(x.size // 256 * BYTES[kind], np.uint8)
    y = np.zeros_like(x)
    if who == "ours":
        for r in range(0, x.size, 1 << 16):  # rows of up to 65536 values
            n = min(1 << 16, x.size - r)
            mi.mi_quantize_row(OURS[kind], P(x.ctypes.data + 4 * r), ctypes.c_int(n), P(q.ctypes.data + r // 256 * BYTES[kind]), None)
        for r in range(0, x.size, 1 << 16):
            n = min(1 << 16, x.size - r)
            mi.mi_dequantize_row(OURS[kind], P(q.ctypes.data + r // 256 * BYTES[kind]), None, ctypes.c_int(n), P(y.ctypes.data + 4 * r))
    else:
        getattr(gg, "quantize_row_%s_ref" % kind)(ptr(x), ptr(q), ctypes.c_int64(x.size))
        getattr(gg, "dequantize_row_%s" % kind)(ptr(q), ptr(y), ctypes.c_int64(x.size))
    return float(np.sqrt(np.mean((y.astype(np.float64) - x) ** 2)))

gauss = np.random.default_rng(20250301).standard_normal((256, 4096)).astype(np.float32)
mats = []
with h5py.File(model, "r") as f:
    for l in sorted(f["layers"]):
        for m in ("wq", "wk", "wv", "wo_t", "w1", "w2_t", "w3"):
            a = f["layers"][l][m][...]
            mats.append(a.T.copy() if m.endswith("_t") else a)
real = np.concatenate([m.reshape(-1) for m in mats])
print("| data | dtype | meshinfer RMSE | llama.cpp RMSE | ratio |")
print("|---|---|---|---|---|")
for name, x in (("Gaussian N(0,1), 256 x 4096", gauss), ("stories15M layer matrices (%d values)" % real.size, real)):
    for kind in ("q4_K", "q5_K", "q6_K"):
        a, b = rmse(kind, "ours", x), rmse(kind, "llama", x)
        print("| %s | %s | %.6g | %.6g | %.4f |" % (name, kind, a, b, a / b))
PY
