#!/usr/bin/env bash
# Continuous batching (serve's engine, batch.h) through `bench --batch`: sequences of mixed prompt
# lengths, greedy and seeded sampling, decoded alone and in a batch whose members join at different
# steps give the same tokens (bench exits 1 naming the first difference), and the first two equal
# generate's token loop; on 1 rank, every planner at 2 and 3 ranks, layer-wise pipelined as micro-batches
# at 3 and 4, and the MoE (sparse expert
# dispatch), Gemma 3 (sliding-window layers, one KV head) and GPT-2 (learned positions) families;
# the runtime's decode and prompt counters of a batched round (1 rank, and 3 pipelined) and of
# generate's one-sequence passes.
# The aggregate speed is printed, not judged (a benchmark's job). Bad --batch values refused.
# usage: batch_check.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
run() { timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        --mca btl self,vader "$@"; }

check() { # NP PLANNER MODEL BATCH STEPS [MICRO-BATCHES EXPECTED]
    local np=$1 pl=$2 m=$3 b=$4 st=$5 mb=${6:-} out
    out=$(run -np "$np" "$bin" bench -m "$m" --batch "$b" --repeat 1 --steps "$st" --planner "$pl" --json \
          ${mb:+--micro-batches "$mb"} 2> "$tmp/err")
    if [[ $out == *'"identical": true'* && $out == *"\"batch\": $b,"* &&
          ( -z $mb || $out == *"\"micro_batches\": $mb,"* ) ]]; then
        ok "$(basename "$m") $np rank(s) $pl, batch $b${mb:+, $mb micro-batches}: identical ($(grep -o '"ratio": [0-9.]*' <<< "$out"))"
    else
        bad "$(basename "$m") $np rank(s) $pl, batch $b: $(grep -v '^bench:' "$tmp/err" | tail -1)"
    fi
}

check 1 greedy "$model" 8 64
# the decode passes timed apart from the prompts' (decode_*; printed, not judged: a speed)
out=$(timeout 120 "$bin" bench -m "$model" --batch 8 --repeat 1 --steps 40 --json 2> "$tmp/err")
da=$(grep -o '"decode_alone_tokens_per_s": [0-9.]*' <<< "$out" | cut -d' ' -f2)
db=$(grep -o '"decode_batch_tokens_per_s": [0-9.]*' <<< "$out" | cut -d' ' -f2)
dr=$(grep -o '"decode_ratio": [0-9.]*' <<< "$out" | cut -d' ' -f2)
[[ -n $da && -n $db && -n $dr ]] && awk "BEGIN {exit !($da > 0 && $db > 0 && $dr > 0)}" &&
    ok "decode passes alone and batched timed apart: $da and $db tokens/s, ${dr}x" ||
    bad "decode-only rates missing or zero (${da:-?}, ${db:-?}, ${dr:-?}): $(tail -1 "$tmp/err")"
for pl in tp layerwise; do check 2 "$pl" "$model" 4 48; done
for pl in greedy somegather hybrid; do check 3 "$pl" "$model" 4 48; done
# layer-wise: decode passes pipelined as micro-batches through the chain of ranks (deferred sends on rank 0)
check 3 layerwise "$model" 7 48 3
check 4 layerwise "$model" 5 40 4
# the runtime's counters classify rows by what they are: a batch's decode pass (one row per running
# sequence) is a decode pass whatever its size, its rows decode rows, the prompts' rows prompt rows.
# batch 4, 40 positions: prompts of 4, 7, 10 and 13 tokens (34 rows, each in passes of its own), 20 tokens
# each, the first from the prompt's pass: 19 decode passes of 4 rows (76); on a worker each of the 3
# pipelined micro-batches is a pass (57)
counters() { # NP PLANNER MICRO-BATCHES EXPECTED
    local out
    out=$(run -np "$1" "$bin" bench -m "$model" --batch 4 --repeat 1 --steps 40 --planner "$2" --micro-batches "$3" --json 2> "$tmp/err")
    out=$(grep -o '"counters": {[^}]*}' <<< "$out")
    [[ $out == "\"counters\": {$4}" ]] && ok "counters of a batched decode, $1 rank(s) $2: $4" ||
        bad "counters of a batched decode, $1 rank(s) $2: ${out:-none: $(tail -1 "$tmp/err")}, not {$4}"
}
counters 1 greedy 1 '"decode_passes": [19], "decode_rows": [76], "prompt_rows": [34]'
counters 3 layerwise 3 '"decode_passes": [57, 57, 57], "decode_rows": [76, 76, 76], "prompt_rows": [34, 34, 34]'
# generate's decode steps are its decode rows, its prompt's chunks prompt rows even of one row: a
# prompt of 65 tokens (BOS and "the cat" 32 times) runs as chunks of 64 and 1, then 9 decode steps
prompt65=$(printf 'the cat %.0s' {1..32})
out=$(run -np 2 "$bin" generate -m "$model" -p "${prompt65% }" -n 10 --ignore-eos --planner layerwise --json 2> "$tmp/err" |
      grep -o '"forwards": [0-9]*, "positions": [0-9]*, "decode_forwards": [0-9]*, "decode_rows": [0-9]*' | sort -u)
want='"forwards": 11, "positions": 74, "decode_forwards": 9, "decode_rows": 9'
[[ $out == "$want" ]] && ok "generate's counters, 2 ranks: a one-row prompt chunk is not a decode row" ||
    bad "generate's counters, 2 ranks: ${out:-none: $(tail -1 "$tmp/err")}, not $want"
for sh in tiny-qwen2moe tiny-gemma3 tiny-gpt2; do
    "$bin" synth --shape "$sh" --dtype q8_0 --out "$tmp/$sh.h5" > /dev/null 2>&1 || bad "synth $sh"
done
check 3 greedy "$tmp/tiny-qwen2moe.h5" 4 40
check 2 tp "$tmp/tiny-gemma3.h5" 4 40
check 3 layerwise "$tmp/tiny-gpt2.h5" 3 40

for b in 0 65 x; do
    "$bin" bench -m "$model" --batch "$b" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [[ $rc -ne 0 && $(wc -l < "$tmp/err") -eq 1 && $(cat "$tmp/err") == *--batch* ]] &&
        ok "--batch $b refused: $(cat "$tmp/err")" || bad "--batch $b: exit $rc, $(head -2 "$tmp/err")"
done
"$bin" bench -m "$model" --batch 2 --no-baseline > /dev/null 2> "$tmp/err" && bad "--batch with --no-baseline ran" ||
    ok "--batch with --no-baseline refused: $(tail -1 "$tmp/err")"

echo "batch_check: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
