#!/usr/bin/env bash
# llama.cpp's own k-quants through our import: the 256-wide llama3 fixture of
# families_import (tests/families/import_check.py kquant_config: dim 256,
# hidden 512, 2 layers, Llama 3's tokenizer, seeded weights) written as an
# F32 GGUF, quantized to Q4_K_M by llama-quantize, converted by meshinfer;
# its logits (16 positions) against a float64 pass (tests/families/
# independent.py) over the GGUF's tensors dequantized, the activations of
# each k-quant product rounded to int8 blocks as our kernels do (family.h),
# and against the same pass without that rounding. Also checks that every
# Q4_K/Q5_K/Q6_K tensor was stored byte for byte. A by-hand check: needs a
# llama.cpp build and the tokenizers (jobs/dev/fetch_tokenizers.sh).
#
# usage: jobs/experiments/kquant_import.sh [--llama DIR]   (default /tmp/llama.cpp)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
llama=/tmp/llama.cpp
while (($#)); do
    case "$1" in
        --llama) need_value "$@"; llama=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
[[ -x $llama/build/bin/llama-quantize ]] || fail "$llama/build/bin/llama-quantize is missing: build llama.cpp there first"
meshinfer_bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$root" "$bin" "$llama/build/bin/llama-quantize" "$tmp" <<'PY'
import os, subprocess, sys
import numpy as np
root, mi, quant, tmp = sys.argv[1:5]
sys.path.insert(0, os.path.join(root, "tests/families"))
import import_check as ic, families as fm, ggml_quants as gq, gguf_file as gf, hf_to_gguf as h2g
import independent, vocab, test_families as tf
tf._TYPE_NAME.update({12: "Q4_K", 13: "Q5_K", 14: "Q6_K"})
ic.stage_tokenizers(os.path.join(root, "models/cache/tokenizers"), os.path.join(tmp, "tok"))
cfg = ic.kquant_config()
arrays = h2g.gguf_arrays(cfg, fm.make_weights(cfg, 3))
src, q = os.path.join(tmp, "f32.gguf"), os.path.join(tmp, "q4_K_M.gguf")
gf.write(src, h2g.gguf_params(cfg, "f32", "llama3-256") + vocab.tokenizer_kvs(os.path.join(tmp, "tok", "llama3"), cfg),
         [gf.Tensor(n, a.shape, "F32", gq.encode(a, "F32")) for n, a in arrays])
subprocess.run([quant, src, q, "Q4_K_M"], check=True, capture_output=True)
_, tensors, _ = tf.read_gguf(q)
shapes = dict(arrays)
deq, plain, types = {}, {}, {}
for name, (ne, t, off, raw) in tensors.items():
    shape = shapes[name].shape
    v = gq.decode(np.frombuffer(raw, np.uint8), t, int(np.prod(ne))).astype(np.float64).reshape(shape)
    types[t] = types.get(t, 0) + 1
    plain[name] = v
    deq[name] = ic.ActQ8(v) if t != "F32" else v
h5 = os.path.join(tmp, "q4_K_M.h5")
subprocess.run([mi, "convert", "--input", q, "--out", h5], check=True, capture_output=True)
toks = [int(t) for t in ic.TOKENS.split(",")]
got = ic.logits(mi, h5)
for what, G in (("activations rounded as the kernels do", deq), ("plain float64", plain)):
    ref = independent.forward(cfg, G, toks)
    print("Q4_K_M by llama-quantize (%s): max |logit - reference| / max |reference| = %.3g (%s)"
          % (", ".join("%s x%d" % kv for kv in sorted(types.items())), np.abs(got - ref).max() / np.abs(ref).max(), what))
import h5py
ours = {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo_t", "ffn_gate": "w1", "ffn_up": "w3", "ffn_down": "w2_t"}
same = 0
with h5py.File(h5, "r") as f:
    for name, (ne, t, off, raw) in tensors.items():
        if t == "F32":
            continue
        shape = shapes[name].shape
        ds = f["tok_embeddings"] if name == "token_embd.weight" else f["layers/%03d/%s" % (int(name.split(".")[1]), ours[name.split(".")[2]])]
        want = np.frombuffer(raw, np.uint8).reshape(shape[0], -1)
        if ds.name.endswith("_t"):
            bb = gq.BLOCK_BYTES[t][1]
            want = want.reshape(shape[0], -1, bb).transpose(1, 0, 2).reshape(-1, shape[0] * bb)
        same += int((ds["qs"][...] == want).all())
print("k-quant tensors stored byte for byte: %d of %d" % (same, sum(n for t, n in types.items() if t != "F32")))
PY
