#!/usr/bin/python3
"""The checks and the report of jobs/experiments/bench_gguf.sh (called by it; not a tool of its own).

  bench_gguf_report.py check LOGS IDS           llama.cpp against meshinfer: prompt tokens, logits,
                                                greedy tokens; prints checks.json, exits 1 on a mismatch
  bench_gguf_report.py check-dllama LOGS CHECKS TOKENIZER_DIR   distributed-llama's greedy text against
                                                the texts of meshinfer's and llama.cpp's greedy tokens; adds
                                                "dllama" to CHECKS, exits 1 when they differ at once
  bench_gguf_report.py report OUT META CMDS LABELS ROOT   OUT/gguf.md and gguf.json from OUT/gguf.csv,
                                                OUT/convert.csv and OUT/checks.json; prints the table
"""
import csv
import json
import os
import re
import statistics
import sys

import numpy as np

MIN_AGREE = 4  # greedy tokens that must agree before anything is timed


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def check(logs, ids):
    """llama.cpp (llama_greedy) against meshinfer (logits, generate) on the same prompt ids."""
    ids = [int(x) for x in ids.split(",")]
    lc = load(os.path.join(logs, "check-llamacpp.json"))
    ml = load(os.path.join(logs, "check-meshinfer-logits.json"))
    mg = load(os.path.join(logs, "check-meshinfer-greedy.json"))
    a = np.array(lc["logits"], dtype=np.float64)
    b = np.array(ml["logits"][-1], dtype=np.float64)
    out = {"prompt_ids": ids, "llamacpp_prompt_ids": lc.get("text_tokens"), "llamacpp_model": lc["desc"],
           "llamacpp_n_params": lc["n_params"], "n_vocab": [lc["n_vocab"], ml["n_vocab"]]}
    errors = []
    info = load(os.path.join(logs, "check-meshinfer-info.json"))
    # llama.cpp counts rope_freqs (head_dim / 2 values) among the parameters, meshinfer does not
    mesh_params = info["params"] + (info["head_dim"] // 2 if info["traits"]["rope_freqs"] else 0)
    out["meshinfer_params"] = info["params"]
    if lc["n_params"] != mesh_params:
        errors.append("llama.cpp loads %d parameters, meshinfer's file holds %d (+ rope_freqs)"
                      % (lc["n_params"], info["params"]))
    if lc.get("text_tokens") != ids:
        errors.append("llama.cpp tokenizes the prompt into %s, meshinfer into %s" % (lc.get("text_tokens"), ids))
    if a.shape != b.shape:
        errors.append("logits of %d and %d entries" % (a.size, b.size))
    else:
        d = np.abs(a - b)
        top_a, top_b = np.argsort(-a)[:10], np.argsort(-b)[:10]
        srt = np.sort(a)[::-1]
        out["logits"] = {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                         "max_abs_logit": float(np.abs(a).max()), "std_logit": float(a.std()),
                         "rel_max_diff": float(d.max() / np.abs(a).max()),
                         "argmax": [int(top_a[0]), int(top_b[0])], "top10_common": len(set(top_a) & set(top_b)),
                         "top1_top2_gap": float(srt[0] - srt[1])}
        if top_a[0] != top_b[0]:
            errors.append("the prompt's argmax differs: llama.cpp %d, meshinfer %d" % (top_a[0], top_b[0]))
    g_lc, g_m = lc["greedy"], mg["tokens"]
    n = common_prefix(g_lc, g_m)
    out["greedy"] = {"llamacpp": g_lc, "meshinfer": g_m, "agree": n, "of": min(len(g_lc), len(g_m)),
                     "llamacpp_top2_gaps": lc.get("gaps")}
    if n < min(MIN_AGREE, len(g_lc)):
        errors.append("greedy tokens agree on only %d: llama.cpp %s, meshinfer %s" % (n, g_lc, g_m))
    div = ""
    dpath = os.path.join(logs, "check-meshinfer-logits-diverge.json")
    if n < out["greedy"]["of"] and os.path.exists(dpath):
        # where they part: both programs' logits of their two picks after the common tokens
        m = np.array(load(dpath)["logits"][-1])
        a_pick, m_pick = g_lc[n], g_m[n]
        out["greedy"]["diverge"] = {"token": n + 1, "llamacpp_gap": lc["gaps"][n],
                                    "meshinfer_gap": float(m[m_pick] - m[a_pick])}
        div = (" (at token %d the two best logits are %.3g apart in llama.cpp and %.3g apart, in the other order, "
               "in meshinfer: a near tie)" % (n + 1, lc["gaps"][n], m[m_pick] - m[a_pick]))
    lg = out.get("logits", {})
    out["summary"] = ("llama.cpp loads the GGUF (\"%s\", %d parameters with the %d of rope_freqs) and meshinfer's "
                      "conversion holds the same %d weights; they tokenize the prompt alike (%d ids); the prompt's logits "
                      "differ by at most %.3g (%.2g of the largest |logit| %.3g; mean %.2g), same argmax, %d of the top "
                      "10 shared; greedy tokens agree on %d of %d%s"
                      % (lc["desc"], lc["n_params"], lc["n_params"] - info["params"], info["params"], len(ids), lg.get("max_abs_diff", float("nan")), lg.get("rel_max_diff", float("nan")),
                         lg.get("max_abs_logit", float("nan")), lg.get("mean_abs_diff", float("nan")),
                         lg.get("top10_common", 0), n, out["greedy"]["of"], div))
    out["errors"] = errors
    json.dump(out, sys.stdout, indent=1)
    print()
    for e in errors:
        print("bench_gguf: check: %s" % e, file=sys.stderr)
    return 1 if errors else 0


def dllama_text(path):
    """The text distributed-llama printed after the prompt (one "🔶 Pred" line per piece; "~" when
    the bytes so far are no whole UTF-8 character), without U+FFFD."""
    with open(path, encoding="utf-8", errors="replace") as f:
        out = f.read()
    segs = re.findall(r"🔶 Pred[^|]*\|[^|]*\| (.*?)\n(?=🔶 Pred|\nEvaluation)", out, re.S)
    return "".join(s for s in segs if s != "~").replace("\ufffd", "")


def tokens_agreeing(text, ids, piece):
    """How many of the first ids have their text (pieces joined, decoded, U+FFFD removed) at the start
    of text: byte-level pieces may split a character, which the programs print differently."""
    n = 0
    for k in range(1, len(ids) + 1):
        t = b"".join(piece[i] for i in ids[:k]).decode("utf-8", "replace").replace("\ufffd", "")
        if not text.startswith(t):
            break
        n = k
    return n


def check_dllama(logs, checks_path, tok_dir):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from to_dllama import read_tokenizer_json
    piece = read_tokenizer_json(tok_dir)[0]
    ch = load(checks_path)
    dl = dllama_text(os.path.join(logs, "check-dllama.txt"))
    g = ch["greedy"]
    n_m, n_l = tokens_agreeing(dl, g["meshinfer"], piece), tokens_agreeing(dl, g["llamacpp"], piece)
    ch["dllama"] = {"text": dl, "agree_meshinfer": n_m, "agree_llamacpp": n_l,
                    "summary": "distributed-llama's greedy text is the text of the first %d of meshinfer's %d greedy "
                               "tokens and of the first %d of llama.cpp's" % (n_m, len(g["meshinfer"]), n_l)}
    with open(checks_path, "w") as f:
        json.dump(ch, f, indent=1)
    return 0 if max(n_m, n_l) >= min(MIN_AGREE, len(g["meshinfer"])) else 1


def median_or_none(v):
    return statistics.median(v) if v else None


def decode_tables(rows, cmd, label):
    """(markdown lines, json entries) of the decode comparisons."""
    comps = list(dict.fromkeys(r["comparison"] for r in rows))
    md = ["| comparison | program | tokens/s (median) | rounds | ratio meshinfer / reference (per-round range) | command |",
          "|---|---|---:|---:|---|---|"]
    entries = []
    for c in comps:
        rs = [r for r in rows if r["comparison"] == c]
        specs = list(dict.fromkeys(r["spec"] for r in rs))

        def vals(s):
            return {int(r["round"]): float(r["tokens_per_s"]) for r in rs if r["spec"] == s and r["status"] == "ok"}
        refv = vals(specs[0])
        entry = {"id": c, "label": label.get(c, c), "sides": []}
        for s in specs:
            v = vals(s)
            name = next(r["program"] for r in rs if r["spec"] == s)
            bad = [r["status"] for r in rs if r["spec"] == s and r["status"] != "ok"]
            med = median_or_none(list(v.values()))
            side = {"program": name, "command": cmd.get(s, ""), "status": bad[0] if bad else "ok",
                    "rounds": len(v), "median_tokens_per_s": med, "tokens_per_s": [v[k] for k in sorted(v)]}
            ratio = ""
            if s != specs[0]:
                per = [v[k] / refv[k] for k in v if k in refv]
                if per:
                    side["ratio"] = med / statistics.median(refv.values())
                    side["ratio_per_round_min"], side["ratio_per_round_max"] = min(per), max(per)
                    ratio = "**%.2fx** (%.2f-%.2f)" % (side["ratio"], min(per), max(per))
                else:
                    ratio = "n/a"
            tps = "%.2f" % med if med is not None else "could not run: " + side["status"]
            first = "%s: %s" % (c, label.get(c, c)) if s == specs[0] else c
            md.append("| %s | %s | %s | %d | %s | `%s` |" % (first, name, tps, len(v), ratio, side["command"]))
            entry["sides"].append(side)
        entries.append(entry)
    return md, entries


def convert_table(path, n_params):
    rows = list(csv.DictReader(open(path)))
    md, out = [], []
    for k in dict.fromkeys(r["input"] for r in rows):
        rs = [r for r in rows if r["input"] == k]
        s = [float(r["seconds"]) for r in rs if r["status"] == "ok"]
        gb = int(rs[0]["gguf_bytes"]) / 1e9
        e = {"input": k, "gguf_gb": gb, "seconds": s, "median_seconds": median_or_none(s),
             "status": next((r["status"] for r in rs if r["status"] != "ok"), "ok")}
        out.append(e)
        med = "%.1f" % e["median_seconds"] if s else "failed: " + e["status"]
        rng = "%.1f-%.1f" % (min(s), max(s)) if s else ""
        md.append("| %s GGUF, %.2f GB, %.2fB parameters | %s | %s | %d |" % (k.upper().replace("_", "_"), gb,
                                                                             n_params / 1e9, med, rng, len(s)))
    if md:
        md = ["| input | seconds (median) | range | runs |", "|---|---:|---|---:|"] + md
    return md, out


SHAPES = {"llama3.2-1b": "Llama 3.2 1B", "tinyllama-1.1b": "TinyLlama 1.1B"}


def quant_words(meta):
    """How llama-quantize made the file: every tensor one type (--pure), or llama.cpp's own mix."""
    t = meta.get("type", "Q4_0")
    if meta.get("pure", 1):
        return "every tensor %s (`llama-quantize --pure`)" % t
    return "llama.cpp's %s mix (`llama-quantize IN OUT %s`)" % (t, t)


def report(out_dir, meta, cmds, labels, root):
    meta = json.loads(meta)
    cmd = {k: v.replace(root + "/", "") for k, v in (l.split("\t", 1) for l in cmds.splitlines() if l)}
    label = dict(l.split("\t", 1) for l in labels.splitlines() if l)
    rows = list(csv.DictReader(open(os.path.join(out_dir, "gguf.csv"))))
    checks = load(os.path.join(out_dir, "checks.json"))
    dmd, entries = decode_tables(rows, cmd, label)
    cmd_, conv = convert_table(os.path.join(out_dir, "convert.csv"), checks["llamacpp_n_params"])
    head = ["# An imported GGUF model against llama.cpp%s (%s)" % (" and distributed-llama" if meta["dllama_commit"]
                                                                  else "", meta["date_utc"]), "",
            "One run on one machine: %s, %d cores (%.0f%% busy with other work just before timing); %d s in all. "
            "llama.cpp %s%s, meshinfer %s. Model: %s shape, **synthetic weights** (seed %d: speed only), "
            "the real %s tokenizer, %s, `%s`; meshinfer runs it "
            "after `meshinfer convert`. Each comparison alternates its programs round by round (order reversed "
            "every other round); medians over %d rounds; one thread per process, each on its own core."
            % (meta["cpu"], meta["cores"], 100 * meta["cpu_busy_before_timing"], meta["seconds"],
               meta["llamacpp_commit"], ", distributed-llama " + meta["dllama_commit"] if meta["dllama_commit"] else "",
               meta["meshinfer_commit"], SHAPES.get(meta.get("shape"), "Llama 3.2 1B"), meta["seed"],
               {"llama2": "Llama 2", "llama3": "Llama 3"}.get(meta.get("tokenizer"), "Llama 3"), quant_words(meta),
               os.path.basename(meta["gguf"]), meta["rounds"]), "",
            "Checks before timing: " + checks["summary"] + "." +
            (" " + checks["dllama"]["summary"] + "." if "dllama" in checks else ""), ""]
    tail = ["", "How tokens/s are counted: llama-bench's avg_ts is %d tokens / the wall time of %d single-token "
            "decodes at positions 0..%d (random tokens, no sampling; f16 KV cache); meshinfer bench's "
            "decode_tokens_per_s is (steps - prompt tokens) / the decode loop's wall time after a batched prefill of "
            "\"%s\" (%d tokens; %d positions in all, argmax included; fp32 KV cache); distributed-llama's "
            "\"Prediction tokens/s\" is decoded tokens / summed executor time after a batched prefill, over the same "
            "%d positions." % (meta["gen"], meta["gen"], meta["gen"] - 1, meta["prompt"], meta["prompt_tokens"],
                               meta["positions"], meta["positions"])]
    if meta.get("prefill"):
        n = meta["prefill"]
        tail = ["", "How tokens/s are counted (prompt processing): llama-bench's avg_ts of pp%d is %d tokens / the wall "
                "time of one llama_decode of %d random tokens (logits of the last position only), after a warm-up "
                "run; meshinfer bench's is its prompt tokens / its TTFT: the prompt \"the the the ...\" (%d tokens, "
                "BOS included) in forward passes of 64 positions (logits of the last position) and the argmax of the "
                "first token. Both on one thread." % (n, n, n, n)]
    conv_md = []
    if cmd_:
        conv_md = ["", "`meshinfer convert --input X.gguf --out X.h5` wall time (the GGUF in the page cache; "
                   "%d runs of each, alternating):" % meta["convert_rounds"], ""] + cmd_
    text = "\n".join(head + dmd + tail + conv_md) + "\n"
    with open(os.path.join(out_dir, "gguf.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "gguf.json"), "w") as f:
        json.dump({"meta": meta, "checks": checks, "comparisons": entries, "convert": conv}, f, indent=1)
    sys.stdout.write(text)
    print(summary(entries, conv))


def summary(entries, conv):
    """One line: every ratio and the conversion times."""
    parts = []
    for e in entries:
        for s in e["sides"][1:]:
            if "ratio" in s:
                parts.append("%s %s %.2fx" % (e["id"], s["program"], s["ratio"]))
    parts += ["convert %s %.1f s" % (c["input"], c["median_seconds"]) for c in conv if c["median_seconds"]]
    return "bench_gguf: " + "; ".join(parts)


def main(argv):
    if len(argv) == 3 and argv[0] == "check":
        return check(argv[1], argv[2])
    if len(argv) == 4 and argv[0] == "check-dllama":
        return check_dllama(argv[1], argv[2], argv[3])
    if len(argv) == 6 and argv[0] == "report":
        return report(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
