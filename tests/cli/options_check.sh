#!/usr/bin/env bash
# Options that would do nothing in the mode they are given in are refused
# (docs/reference/options.md): exit 1, exactly one "meshinfer: error:" line
# naming the option, nothing run. A list option given twice (--layer-dtype,
# --prune) joins the two lists. Single rank throughout: the checks that need
# several ranks are made on plan's devices, which need no MPI. --top-k past
# the vocabulary is clamped to it (llama.cpp's rule), not refused.
# usage: options_check.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

. "$(dirname "$0")/refusals.sh"
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }

G=("$bin" generate -m "$model" -n 2)
# --- session options: qualifiers without what they qualify
refused "generate --prune-mode without --prune" "--prune-mode .*give --prune too" \
    "${G[@]}" --planner somegather --prune-mode magnitude
refused "generate --loss-seed without --loss" "--loss-mode and --loss-seed .*give --loss too" \
    "${G[@]}" --planner somegather --loss-seed 3
refused "generate --tolerance without --speculate" "--tolerance, --min-acceptance and --spec-profile .*give --speculate" \
    "${G[@]}" --tolerance 0.1
refused "perplexity --min-acceptance without --speculate" "--min-acceptance.*give --speculate" \
    "$bin" perplexity -m "$model" --text /dev/null --min-acceptance 0.5
refused "generate --plan-seed with greedy" "--plan-seed seeds --planner random; --planner greedy draws nothing" \
    "${G[@]}" --plan-seed 7
refused "bench --plan-seed with tp" "--plan-seed seeds --planner random; --planner tp" \
    "$bin" bench -m "$model" --planner tp --plan-seed 7
# --- a planner that cannot speculate
refused "generate --speculate --planner tp" "generate: --speculate needs a layer's projection on one rank: --planner tp" \
    "${G[@]}" --planner tp --speculate
refused "generate --speculate --planner somegather" "--speculate needs a head-level planner" \
    "${G[@]}" --planner somegather --speculate
"$bin" plan -m "$model" --ranks 1 --planner tp --out "$tmp/tp.json" > /dev/null 2>&1 || bad "plan --planner tp --out"
refused "generate --speculate with a tp plan file" "--speculate needs a layer's projection on one rank: the placement that runs \(tp, from the plan file\)" \
    "${G[@]}" --plan-file "$tmp/tp.json" --speculate
# --- options that need several ranks, on one
refused "generate --weights scatter on 1 rank" "--weights scatter .*no workers" "${G[@]}" --weights scatter
refused "generate --controller-works no on 1 rank" "--controller-works no .*only the controller" \
    "${G[@]}" --controller-works no
refused "forecast --split-vocab on 1 rank" "forecast: --split-vocab .*a one-rank job has none" \
    "$bin" forecast -m "$model" --series /dev/null --at 0 --planner layerwise --split-vocab
# --- sampling options under greedy decoding; runtime scaling where there is none
refused "generate --seed with greedy" "--top-k, --top-p and --seed shape sampling: greedy" "${G[@]}" --seed 5
refused "generate --top-k with -t 0" "--top-k, --top-p and --seed shape sampling" "${G[@]}" -t 0 --top-k 5
refused "chat --top-p with greedy" "chat: --top-k, --top-p and --seed shape sampling" \
    "$bin" chat -m "$model" --top-p 0.5
refused "chat --tpot-ms" "chat: --tpot-ms.*apply to generate" "$bin" chat -m "$model" --tpot-ms 5
# sampling options with -t > 0 act: accepted
"${G[@]}" -t 0.8 --seed 5 --top-k 5 > /dev/null 2>&1 && ok "generate -t 0.8 --seed --top-k runs" ||
    bad "generate -t 0.8 --seed 5 --top-k 5 was refused"

# --- --prune: a bare ratio that no exchange takes; two --prune join
refused "--prune bare ratio applying to none" "--prune: .* the bare ratio applies to none" \
    "$bin" plan -m "$model" --ranks 3 --planner somegather --prune 0.5,attn_in=0.1,heads=0.1,ffn_in=0.1,hidden=0.1
refused "--prune twice, two bare ratios" "--prune: '0.5,0.6' gives two ratios for all exchanges" \
    "$bin" plan -m "$model" --ranks 3 --planner somegather --prune 0.5 --prune 0.6
refused "generate --prune twice, a kind in both" "--prune: 'hidden=0.5,hidden=0.9' gives exchange hidden twice" \
    "${G[@]}" --planner somegather --prune hidden=0.5 --prune hidden=0.9
out=$("$bin" plan -m "$model" --ranks 3 --planner somegather --prune 0.5 --prune hidden=0.9 2>&1 | grep pruning)
[[ "$out" == *"attn_in 0.50, heads 0.50, ffn_in 0.50, hidden 0.90"* ]] &&
    ok "two --prune join: $out" || bad "--prune 0.5 --prune hidden=0.9 gave: $out"
refused "plan --prune-mode without --prune" "plan: --prune-mode .*give --prune too" \
    "$bin" plan -m "$model" --ranks 3 --planner somegather --prune-mode magnitude

# --- --layer-dtype twice: joined; a layer in both refused
refused "--layer-dtype twice, a layer in both" "--layer-dtype: layer 1 is given twice" \
    "$bin" plan -m "$model" --ranks 1 --layer-dtype 0-1:q8_0 --layer-dtype 1-2:q4_0
"$bin" plan -m "$model" --ranks 1 --layer-dtype 0-1:q8_0 --layer-dtype 2-5:q4_0 --json > "$tmp/ld.json" 2> "$tmp/ld.err"
"$bin" plan -m "$model" --ranks 1 --layer-dtype 0-1:q8_0,2-5:q4_0 --json > "$tmp/ld1.json" 2>> "$tmp/ld.err"
w2=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).weights)' "$tmp/ld.json" 2>&1)
w1=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).weights)' "$tmp/ld1.json" 2>&1)
[[ -n "$w2" && "$w2" == "$w1" && "$w2" == *q8_0* && "$w2" == *q4_0* ]] &&
    ok "two --layer-dtype join as one list: $w2" || { bad "--layer-dtype twice: '$w2' vs one list '$w1'"; cat "$tmp/ld.err"; }

# --- plan: options of another mode or planner
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}]}\n' > "$tmp/c2.json"
refused "plan --mem-mb with --cluster" "plan: --mem-mb is the memory of each of --ranks N devices" \
    "$bin" plan -m "$model" --cluster "$tmp/c2.json" --mem-mb 100
refused "plan --plan-seed with greedy" "plan: --plan-seed seeds --planner random" \
    "$bin" plan -m "$model" --ranks 2 --plan-seed 3
"$bin" plan -m "$model" --ranks 2 --planner random --plan-seed 3 > /dev/null 2>&1 &&
    ok "plan --planner random --plan-seed runs" || bad "plan --planner random --plan-seed 3 was refused"
refused "plan --top-k with greedy" "plan: --top-k shapes sampling" "$bin" plan -m "$model" --ranks 2 --top-k 5
refused "plan --speculate --planner tp" "plan: --speculate needs one planner .*tp splits every projection" \
    "$bin" plan -m "$model" --ranks 2 --planner tp --speculate
refused "plan --controller-works no on one device" "plan: --controller-works no .*one device" \
    "$bin" plan -m "$model" --ranks 1 --controller-works no
refused "plan --split-vocab on one device" "plan: --split-vocab .*one device has none" \
    "$bin" plan -m "$model" --ranks 1 --split-vocab
refused "plan --split-vocab with somegather" "plan: --split-vocab .*somegather already holds it" \
    "$bin" plan -m "$model" --ranks 3 --planner somegather --split-vocab

# --- --top-k past the vocabulary is clamped to it, as llama.cpp does: every token, as --top-k 32000
a=$("$bin" generate -m "$model" -n 6 -t 0.8 --top-k 99999 -s 3 -p "Once" 2>/dev/null); rc=$?
b=$("$bin" generate -m "$model" -n 6 -t 0.8 --top-k 32000 -s 3 -p "Once" 2>/dev/null)
[[ $rc -eq 0 && -n "$a" && "$a" == "$b" ]] && ok "--top-k 99999 samples as --top-k 32000 (the vocabulary)" ||
    bad "--top-k 99999: exit $rc, '$a' vs '$b'"

echo "options_check: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
