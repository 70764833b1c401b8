#!/usr/bin/env bash
# perplexity: the model's own sampled text scores low; English prose (Moby
# Dick, out of distribution for a TinyStories model) scores finite and high;
# q8_0 weights and q8_0 messages each stay within 1% of fp32 on the own text,
# q4_0 weights within 25%.
# usage: cli_perplexity.sh MESHINFER MODEL.h5 MOBY_DICK.txt
set -u
bin=$1 model=$2 moby=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" generate -m "$model" -p "Once upon a time" -t 1.0 --top-k 0 --top-p 1 -s 7 -n 240 > "$tmp/own.txt" 2>/dev/null ||
    { echo "FAIL: sampling text"; exit 1; }
get() { node -e 'const j = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(j[process.argv[1]])' "$1"; }
own=$("$bin" perplexity -m "$model" --text "$tmp/own.txt" --json 2>/dev/null)
mob=$("$bin" perplexity -m "$model" --text "$moby" --max-tokens 3000 --json 2>/dev/null)
p_own=$(printf '%s' "$own" | get perplexity); n_own=$(printf '%s' "$own" | get tokens)
p_mob=$(printf '%s' "$mob" | get perplexity); n_mob=$(printf '%s' "$mob" | get tokens)
echo "own sampled text: $n_own tokens, perplexity $p_own; Moby Dick: $n_mob tokens, perplexity $p_mob"
pass=0 fail=0
check() { if awk "BEGIN{exit !($1)}"; then echo "ok: $2"; pass=$((pass+1)); else echo "FAIL: $2"; fail=$((fail+1)); fi; }
check "$p_own > 1 && $p_own < 5" "own text perplexity $p_own in (1, 5)"
check "$n_own > 200" "own text scored $n_own tokens"
check "$p_mob > 50 && $p_mob < 5000" "Moby Dick perplexity $p_mob is finite and far above own text"
check "$n_mob == 3000" "--max-tokens 3000 scores exactly 3000 tokens"
# precision: the same own text with the weights in q8_0 and q4_0, and with
# q8_0 messages between 2 ranks
"$bin" quantize -m "$model" --dtype q8_0 --out "$tmp/q8.h5" >/dev/null 2>&1 || echo "FAIL: quantize q8_0"
"$bin" quantize -m "$model" --dtype q4_0 --out "$tmp/q4.h5" >/dev/null 2>&1 || echo "FAIL: quantize q4_0"
p_q8=$("$bin" perplexity -m "$tmp/q8.h5" --text "$tmp/own.txt" --json 2>/dev/null | get perplexity)
p_q4=$("$bin" perplexity -m "$tmp/q4.h5" --text "$tmp/own.txt" --json 2>/dev/null | get perplexity)
p_wq8=$(mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 2 "$bin" perplexity \
        -m "$model" --text "$tmp/own.txt" --planner tp --wire-dtype q8_0 --json 2>/dev/null | get perplexity)
echo "own text perplexity: fp32 $p_own, q8_0 $p_q8, q4_0 $p_q4, fp32 weights with q8_0 messages (tp, 2 ranks) $p_wq8"
check "$p_q8 > 0.99 * $p_own && $p_q8 < 1.01 * $p_own" "q8_0 weights: perplexity $p_q8 within 1% of fp32's $p_own"
check "$p_q4 > $p_own * 0.9 && $p_q4 < 1.25 * $p_own" "q4_0 weights: perplexity $p_q4 within 25% of fp32's"
check "$p_wq8 > 0.99 * $p_own && $p_wq8 < 1.01 * $p_own" "q8_0 messages: perplexity $p_wq8 within 1% of exact"
echo "$pass passed, $fail failed"
((fail == 0))
