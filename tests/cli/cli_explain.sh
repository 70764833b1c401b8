#!/usr/bin/env bash
# plan --explain, the placement in plan --json and generate --json, and bytes
# per token's one definition, on stories15M:
# - plan --planner layerwise --ranks 3 --explain: layers 0-2 on rank 1 and 3-5
#   on rank 2 (the controller holds the embeddings and classifier), each rank
#   sends 1152 B per token (one 288-column fp32 residual), 3456 in all, the
#   figures plan --json gives (predicted_bytes_per_token, devices[]);
# - plan --json has the per-layer placement;
# - under mpirun on 3 ranks with a cluster file of 3 equal devices, generate
#   --json reports the same placement and the same bytes per token as plan
#   --json for that file (layerwise and tp, whose placements do not depend on
#   the round trips the run measures and adds), measured over its decode
#   passes; --metrics and --explain say the same;
# - bad combinations fail with one error line.
# usage: cli_explain.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }
mpi=(timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
     --mca btl self,vader)
# js FILE 'expression of j (the file's JSON object)'
js() { node -e 'const s = require("fs").readFileSync(process.argv[1], "utf8");
                const j = JSON.parse(s.slice(s.indexOf("{"))); console.log(eval(process.argv[2]))' "$1" "$2" 2>&1; }

# --- plan --explain on a known placement
"$bin" plan -m "$model" --planner layerwise --ranks 3 --explain > "$tmp/ex.out" 2>&1 || bad "plan --explain exit $?"
"$bin" plan -m "$model" --planner layerwise --ranks 3 --json > "$tmp/plan.json" 2>&1 || bad "plan --json exit $?"
want_layers="  layer 0: heads 0-5 on rank 1; wo on rank 1; FFN units [0,768) on rank 1
  layer 1: heads 0-5 on rank 1; wo on rank 1; FFN units [0,768) on rank 1
  layer 2: heads 0-5 on rank 1; wo on rank 1; FFN units [0,768) on rank 1
  layer 3: heads 0-5 on rank 2; wo on rank 2; FFN units [0,768) on rank 2
  layer 4: heads 0-5 on rank 2; wo on rank 2; FFN units [0,768) on rank 2
  layer 5: heads 0-5 on rank 2; wo on rank 2; FFN units [0,768) on rank 2
  classifier rows: [0,32000) on rank 0"
got_layers=$(grep -E '^  (layer [0-9]+|classifier rows):' "$tmp/ex.out")
[[ "$got_layers" == "$want_layers" ]] && ok "plan --explain: layerwise on 3 ranks holds layers 0-2 on rank 1, 3-5 on rank 2" ||
    bad "plan --explain placement: $got_layers"
# decode: each rank's sends, its first and last steps, the total
ranks=$(grep -E '^rank [0-9]' "$tmp/ex.out" | head -3 | sed 's/ (controller)//' | tr '\n' ';')
want_ranks="rank 0: 5 steps; sends 1152 B, receives 1152 B per token;rank 1: 26 steps; sends 1152 B, receives 1152 B per token;rank 2: 26 steps; sends 1152 B, receives 1152 B per token;"
[[ "$ranks" == "$want_ranks" ]] && ok "plan --explain: per-rank steps and bytes per token" || bad "per-rank lines: $ranks"
r1=$(awk '/^rank 1:/ {on=1; next} /^rank 2:/ {on=0} on' "$tmp/ex.out")
first=$(head -1 <<<"$r1"); last=$(tail -1 <<<"$r1")
[[ "$first" == *"wait        for rank 0: the residual X (all 288 columns), on its way into layer 0: 1152 B per token" &&
   "$last" == *"send        the residual X (all 288 columns), on its way into layer 3, to rank 2: 1152 B per token" ]] &&
   grep -q '   3  attention   layer 0, query heads 0-5: wq, wk, wv rows' <<<"$r1" &&
    ok "plan --explain: rank 1 waits for rank 0, computes heads 0-5, sends to rank 2" ||
    bad "rank 1's program: first '$first', last '$last'"
total=$(sed -n 's/^bytes per token: \([0-9]*\) bytes per token.*/\1/p' "$tmp/ex.out")
jtotal=$(js "$tmp/plan.json" 'j.plans[0].predicted_bytes_per_token')
jranks=$(js "$tmp/plan.json" 'j.plans[0].devices.map(d => d.bytes_sent_per_token).join(" ")')
[[ "$total" == 3456 && "$jtotal" == 3456 && "$jranks" == "1152 1152 1152" ]] &&
    ok "plan --explain's bytes per token (3456) = plan --json's, per rank 1152 1152 1152" ||
    bad "bytes per token: explain '$total', json '$jtotal', ranks '$jranks'"

# --- plan --json: the per-layer placement
got=$(js "$tmp/plan.json" 'const p = j.plans[0].placement; [p.layers.length,
      p.layers.map(l => l.kv_rank.join("")).join(","), p.layers.map(l => l.proj_rank).join(""),
      JSON.stringify(p.layers.map(l => l.ffn)), JSON.stringify(p.classifier), JSON.stringify(p.columns)].join(" ")')
[[ "$got" == '6 111111,111111,111111,222222,222222,222222 111222 [[[1,0,768]],[[1,0,768]],[[1,0,768]],[[2,0,768]],[[2,0,768]],[[2,0,768]]] [[0,0,32000]] []' ]] &&
    ok "plan --json: placement per layer (kv_rank, proj_rank, ffn, classifier)" || bad "plan --json placement: $got"
# somegather: the residual columns
"$bin" plan -m "$model" --planner somegather --ranks 3 --json > "$tmp/sg.json" 2>&1
got=$(js "$tmp/sg.json" 'JSON.stringify(j.plans[0].placement.columns) + " " + j.plans[0].placement.layers[2].kv_rank.join("")')
[[ "$got" == "[[0,0,96],[1,96,96],[2,192,96]] 001122" ]] && ok "plan --json: somegather's columns and heads" ||
    bad "somegather placement: $got"

# --- the run reports the placement and bytes per token plan --json predicts for the same cluster
cat > "$tmp/equal3.json" <<'JSON'
{"link": {"latency_ms": 0.02, "bandwidth_mbit": 40000}, "mem_bandwidth_gbs": 20,
 "devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}, {"name": "c", "mem_mb": 4000}]}
JSON
for p in layerwise tp; do
    "$bin" plan -m "$model" --planner $p --cluster "$tmp/equal3.json" --json > "$tmp/p_$p.json" 2>&1
    "${mpi[@]}" -np 3 "$bin" generate -m "$model" -p "One day" -n 8 --planner $p --cluster "$tmp/equal3.json" \
        --json --metrics > "$tmp/g_$p.json" 2> "$tmp/g_$p.err"
    got=$(node -e 'const fs = require("fs"), rd = f => { const s = fs.readFileSync(f, "utf8"); return JSON.parse(s.slice(s.indexOf("{"))); };
      const p = rd(process.argv[1]).plans[0], g = rd(process.argv[2]);
      const sum = g.ranks.reduce((a, r) => a + r.bytes_sent_per_token, 0);
      console.log([JSON.stringify(p.placement) === JSON.stringify(g.plan.placement), p.predicted_bytes_per_token,
                   g.plan.predicted_bytes_per_token, g.bytes_per_token, Math.round(sum), g.decode_passes,
                   g.plan.planned_for.startsWith("the cluster file ")].join(" "))' "$tmp/p_$p.json" "$tmp/g_$p.json" 2>&1)
    read -r same pb gpb gb gsum passes pf <<<"$got"
    if [[ "$same" == true && "$pb" -gt 0 && "$pb" == "$gpb" && "$pb" == "$gb" && "$pb" == "$gsum" && "$passes" == 7 && "$pf" == true ]]; then
        ok "$p on 3 ranks: generate --json runs plan --json's placement; bytes per token $pb planned, predicted and measured over 7 decode passes"
    else bad "$p: plan vs run: $got ($(tail -1 "$tmp/g_$p.err"))"; fi
    line=$(grep '^bytes per token (one decode pass' "$tmp/g_$p.err")
    [[ "$line" == *"measured $pb over 7 decode passes, predicted $pb;"* ]] && ok "$p: --metrics says the same ($pb)" ||
        bad "$p --metrics: '$line'"
done
[[ $(js "$tmp/p_layerwise.json" 'j.plans[0].predicted_bytes_per_token') == 3456 ]] &&
    ok "layerwise on the cluster file: 3456 bytes per token" || bad "layerwise cluster bytes"
# generate --explain: what runs, before generating, on stderr
"${mpi[@]}" -np 3 "$bin" generate -m "$model" -p "One day" -n 2 --planner layerwise --cluster "$tmp/equal3.json" \
    --explain > "$tmp/gx.out" 2> "$tmp/gx.err"
grep -q "^meshinfer: --explain: the placement below was planned for the cluster file $tmp/equal3.json" "$tmp/gx.err" &&
   [[ "$(grep -E '^  (layer [0-9]+|classifier rows):' "$tmp/gx.err")" == "$want_layers" ]] &&
   grep -q '^bytes per token: 3456 bytes per token' "$tmp/gx.err" && ! grep -q placement "$tmp/gx.out" &&
    ok "generate --explain: the placement and programs that run, on stderr" || bad "generate --explain: $(head -3 "$tmp/gx.err")"

# --- bad input: one line, non-zero exit
expect_error() {
    local what=$1 re=$2; shift 2
    "$@" > "$tmp/bad.out" 2>&1; local rc=$?
    if [[ $rc -ne 0 && $(wc -l < "$tmp/bad.out") -eq 1 ]] && grep -qE "$re" "$tmp/bad.out"; then ok "$what: one error line"
    else bad "$what: exit $rc: $(cat "$tmp/bad.out")"; fi
}
expect_error "plan --explain --json" '^meshinfer: error: plan: --explain prints text' \
    "$bin" plan -m "$model" --ranks 3 --explain --json
expect_error "plan --speculate with somegather" '^meshinfer: error: plan: --speculate needs one planner that puts a layer.s projection on one rank .*somegather' \
    "$bin" plan -m "$model" --ranks 3 --planner somegather --speculate
expect_error "plan --explain with --memory-model" 'does not apply to --memory-model' \
    "$bin" plan -m "$model" --memory-model --explain

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
