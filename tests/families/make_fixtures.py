#!/usr/bin/python3
"""Write the synthetic family fixtures as Hugging Face folders and GGUF files.

  /usr/bin/python3 tests/families/make_fixtures.py OUTDIR [--family F ...] [--tokenizers DIR]
        [--dtype f32|bf16|f16] [--gguf-types f32,f16,q8_0,q4_0] [--seed N]

F is a fixture (llama3, tinyllama, qwen2, qwen3, gemma3, gpt2, qwen2moe, qwen3moe) or "llama" (both llama ones);
default all. For each fixture F it writes
  OUTDIR/F/hf/config.json, model.safetensors (+ tokenizer.json, tokenizer_config.json from
      DIR/F/ or DIR/<the tokenizer it uses>/ when --tokenizers is given and has them)
  OUTDIR/tinyllama/hf-sharded/  the same weights as model-0000{1,2}-of-00002.safetensors + index
  OUTDIR/F/model-<type>.gguf   one per --gguf-types entry (tokenizer.* keys only with a tokenizer)
  OUTDIR/F/fixture.json        what was written: family, dtype, seed, tokenizer folder, files
The GGUF files are made from the values stored in the HF folder (after bf16/f16 rounding).
"""

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families as fm  # noqa: E402
import gguf_file as gf  # noqa: E402
import hf_to_gguf as h2g  # noqa: E402
import safetensors_io as st  # noqa: E402
import vocab  # noqa: E402

DTYPES = {"f32": ("F32", "float32"), "bf16": ("BF16", "bfloat16"), "f16": ("F16", "float16")}
SHARDED = "tinyllama"  # the fixture also written as two shards


def find_tokenizer(tok_root, name):
    """The folder under tok_root holding tokenizer.json for a fixture, or None."""
    if not tok_root:
        return None
    for cand in [name] + [c for c in fm.FIXTURES[name][1] if c != name]:
        d = os.path.join(tok_root, cand)
        if os.path.isfile(os.path.join(d, "tokenizer.json")):
            return d
    return None


def write_fixture(outdir, name, dtype="f32", gguf_types=("f32",), tok_root=None, seed=0, log=print):
    """Write one fixture's folders and files; returns the fixture.json dict."""
    st_dtype, torch_dtype = DTYPES[dtype]
    cfg = fm.config(name, torch_dtype)
    base = os.path.join(outdir, name)
    hf = os.path.join(base, "hf")
    os.makedirs(hf, exist_ok=True)
    weights = fm.make_weights(cfg, seed)
    meta = {"format": "pt", "synthetic": "seeded random weights (seed %d), not a trained model" % seed}
    stored = st.write(os.path.join(hf, "model.safetensors"), weights, st_dtype, meta)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    files = ["hf/config.json", "hf/model.safetensors"]
    if name == SHARDED:
        sh = os.path.join(base, "hf-sharded")
        os.makedirs(sh, exist_ok=True)
        st.write_sharded(sh, weights, st_dtype, 2, meta)
        shutil.copy(os.path.join(hf, "config.json"), sh)
        files.append("hf-sharded/")
    tok_dir = find_tokenizer(tok_root, name)
    tok_kvs = []
    if tok_dir:
        for fname in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(tok_dir, fname)):
                shutil.copy(os.path.join(tok_dir, fname), hf)
                files.append("hf/" + fname)
                if name == SHARDED:
                    shutil.copy(os.path.join(tok_dir, fname), os.path.join(base, "hf-sharded"))
        tok_kvs = vocab.tokenizer_kvs(tok_dir, cfg)
    for t in gguf_types:
        path = os.path.join(base, "model-%s.gguf" % t)
        gf.write(path, h2g.gguf_params(cfg, t, name) + tok_kvs, h2g.gguf_tensors(cfg, stored, t))
        files.append(os.path.basename(path))
    info = {"fixture": name, "family": fm.family(cfg), "dtype": dtype, "seed": seed,
            "tokenizer": os.path.abspath(tok_dir) if tok_dir else None, "files": files, "synthetic": True}
    with open(os.path.join(base, "fixture.json"), "w") as f:
        json.dump(info, f, indent=2)
    log("%-10s %s" % (name, " ".join(files)))
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--family", action="append", default=[], help="fixture or family (repeatable); default all")
    ap.add_argument("--tokenizers", help="folder with <fixture or tokenizer name>/tokenizer.json")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="safetensors dtype (default f32)")
    ap.add_argument("--gguf-types", default="f32,f16,q8_0,q4_0", help="comma-separated GGUF file types")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    types = [t for t in args.gguf_types.split(",") if t]
    bad = [t for t in types if t not in h2g.FILE_TYPE]
    try:
        if bad:
            raise ValueError("unknown GGUF type(s) %s (f32, f16, q8_0, q4_0)" % ",".join(bad))
        names = fm.fixture_names(args.family)
        t0 = time.time()
        for name in names:
            write_fixture(args.outdir, name, args.dtype, types, args.tokenizers, args.seed)
    except (KeyError, ValueError, OSError) as e:
        print("make_fixtures.py: %s" % (e.args[0] if isinstance(e, KeyError) else e), file=sys.stderr)
        return 1
    print("wrote %d fixture(s) in %.1f s under %s" % (len(names), time.time() - t0, args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
