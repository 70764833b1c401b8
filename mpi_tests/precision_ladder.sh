#!/usr/bin/env bash
# Voltron's precision ladder over the k-quants (fp16, q8_0, q6_K, q5_K, q4_K, q4_0) on a model whose
# every matrix axis is whole super-blocks of 256 (synth --shape tiny-kquant, dim 256, hidden 768):
# `plan --importance` under a memory budget chooses q6_K for the one layer whose step adds least (that
# mix, written by `quantize --layer-dtype`, gives the one-rank tokens on 2 ranks, layer-wise and tp), and
# runtime scaling, when the KV cache outgrows a device, lowers that layer on through q6_K, q5_K and
# q4_K (re-encoded in memory), with the same tokens on 1 and 2 ranks.
# The importances are hand-made (synthetic weights have none worth measuring): the choices, not the
# encoder's figures, are what is checked.
# usage: precision_ladder.sh MESHINFER
set -u
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
run() { timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "$@"; }

"$bin" synth --shape tiny-kquant --out "$tmp/k.h5" > /dev/null 2>&1 || bad "synth tiny-kquant"
"$bin" synth --shape tiny-kquant --dtype q8_0 --out "$tmp/k8.h5" > /dev/null 2>&1 || bad "synth tiny-kquant q8_0"
# layer 1 is the least important at every k-quant rung; the others' q6_K steps add 0.29
node -e 'const L = []; for (let l = 0; l < 4; l++) L.push(l == 1 ?
    {layer: l, fp16: 0.001, q8_0: 0.01, q6_K: 0.02, q5_K: 0.03, q4_K: 0.04, q4_0: 0.5} :
    {layer: l, fp16: 0.001, q8_0: 0.01, q6_K: 0.3, q5_K: 1, q4_K: 2, q4_0: 3});
  require("fs").writeFileSync(process.argv[1], JSON.stringify({model: "tiny-kquant", version: 2, synthetic: true,
    n_layers: 4, dim: 256, hidden_dim: 768, layers: L}))' "$tmp/imp.json"

# 4.5 MB each: every layer at q8_0 (8 downgrades) misses it by a few hundred KB, one q6_K layer fits
printf '{"devices": [{"name": "a", "mem_mb": 4.5}, {"name": "b", "mem_mb": 4.5}]}' > "$tmp/two.json"
got=$("$bin" plan -m "$tmp/k.h5" --cluster "$tmp/two.json" --planner layerwise --importance "$tmp/imp.json" --json \
      2> "$tmp/err" |
      node -e 'const j = JSON.parse(require("fs").readFileSync(0)); console.log(j.layer_dtype, j.downgrades, j.kquant_layers)' 2>&1)
[[ $got == "0:q8_0,1:q6_K,2:q8_0,3:q8_0 9 4" ]] &&
    ok "plan --importance: the least important layer to q6_K, the others q8_0 ($got)" ||
    bad "plan --importance on tiny-kquant: '$got' $(tail -1 "$tmp/err")"
# the search's choice as a file: its k-quant layer runs on 2 ranks (layer-wise, and tp's column shards on
# whole super-blocks) with the one-rank tokens
"$bin" quantize -m "$tmp/k.h5" --layer-dtype "${got%% *}" --out "$tmp/mix.h5" > /dev/null 2> "$tmp/q.err" ||
    bad "quantize --layer-dtype ${got%% *}: $(tail -1 "$tmp/q.err")"
gen=(generate -m "$tmp/mix.h5" -n 24 --ignore-eos -p "hello" --json)
tok='console.log(JSON.parse(require("fs").readFileSync(0)).tokens.join(","))'
t1=$("$bin" "${gen[@]}" 2> /dev/null | node -e "$tok" 2>&1)
for planner in layerwise tp; do
    t2=$(run -np 2 "$bin" "${gen[@]}" --planner $planner 2> "$tmp/mix.err" | node -e "$tok" 2>&1)
    [[ -n $t1 && $t2 == "$t1" ]] && ok "the search's mix (${got%% *}) as a file: $planner on 2 ranks, the one-rank tokens" ||
        bad "mix on 2 ranks ($planner): '$t2' against '$t1' $(grep -m1 error "$tmp/mix.err")"
done
# no k-quant for dims that are not whole 256s: said, not an error
printf '{"devices": [{"name": "a", "mem_mb": 400}, {"name": "b", "mem_mb": 400}]}' > "$tmp/big.json"
"$bin" synth --shape tiny-gqa --out "$tmp/gqa.h5" > /dev/null 2>&1
node -e 'const L = []; for (let l = 0; l < 4; l++) L.push({layer: l, q8_0: 0.01, q6_K: null, q5_K: null, q4_K: null, q4_0: 0.1});
  require("fs").writeFileSync(process.argv[1], JSON.stringify({model: "tiny-gqa", version: 2, synthetic: true,
    n_layers: 4, dim: 128, hidden_dim: 320, layers: L}))' "$tmp/imp-gqa.json"
"$bin" plan -m "$tmp/gqa.h5" --cluster "$tmp/big.json" --planner layerwise --importance "$tmp/imp-gqa.json" \
    > "$tmp/gqa.txt" 2>&1 && grep -q "no k-quant: dim 128, n_heads x head_dim 128 and hidden_dim 320 must all be multiples of 256" "$tmp/gqa.txt" &&
    ok "plan --importance on dim 128: no k-quant, and it says why" || bad "dim 128: $(cat "$tmp/gqa.txt")"

# runtime scaling: rank 1 holds every layer (q8_0 in the file, 3629056 bytes); its KV cache outgrows
# 4.2 MB at position 70, and each lowering buys some 13 to 25 positions: layer 1 steps q6_K, q5_K,
# q4_K, then layer 0 q6_K, leaving 3629056 - 851968 x (1.0625 - 0.5625) - 851968 x (1.0625 - 0.8203125)
# = 2996736 bytes. One rank with rank 0's 279552 bytes more budget lowers at the same positions:
# the same tokens.
printf '{"devices": [{"name": "a", "mem_mb": 40}, {"name": "b", "mem_mb": 4.2}]}' > "$tmp/tight.json"
printf '{"devices": [{"name": "b", "mem_mb": 4.479552}]}' > "$tmp/tight1.json"
sc=(generate -m "$tmp/k8.h5" --planner layerwise --kv-positions 32 -n 118 --ignore-eos --tpot-ms 1000
    --importance "$tmp/imp.json" -p "hello" --json)
run -np 2 "$bin" "${sc[@]}" --cluster "$tmp/tight.json" > "$tmp/sc.json" 2> "$tmp/sc.err"
"$bin" "${sc[@]}" --cluster "$tmp/tight1.json" > "$tmp/sc1.json" 2> "$tmp/sc1.err"
summary='const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
  console.log(j.generated_tokens, j.scaling.decisions.filter(d => d.kind === "weights").map(d => d.change.replace(/ /g, "")).join(" "),
              j.ranks[j.ranks.length - 1].weight_bytes, j.tokens.join(","))'
two=$(node -e "$summary" "$tmp/sc.json" 2>&1) one=$(node -e "$summary" "$tmp/sc1.json" 2>&1)
[[ $two =~ ^118\ layers1-\>q6_K\ layers1-\>q5_K\ layers1-\>q4_K\ layers0-\>q6_K\ 2996736\  ]] &&
    grep -q "scaling at position 109: the KV cache .* -> lowered layers 1 -> q4_K" "$tmp/sc.err" &&
    ok "runtime scaling under KV pressure: layer 1 lowered q8_0 -> q6_K -> q5_K -> q4_K, then layer 0 to q6_K; rank 1 holds 2996736 bytes" ||
    bad "scaling into the k-quants: '${two:0:200}' $(grep -m3 "scaling\|error" "$tmp/sc.err")"
[[ ${one#* * * * * * } == "${two#* * * * * * }" && ${one#118 } =~ ^layers1-\>q6_K ]] &&
    ok "the same lowerings on one rank give the 2-rank tokens" ||
    bad "one rank '${one:0:200}' against 2 ranks '${two:0:200}' $(grep -m3 "scaling\|error" "$tmp/sc1.err")"

echo "precision_ladder: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
