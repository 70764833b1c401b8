#!/usr/bin/env bash
# meshinfer simulate and cluster-gen from the command line (no MPI, no model
# file: the stories15M shape). Bad input is one "meshinfer: error:" line and
# exit 1: a zero or negative device speed, budgets no placement fits, more
# tokens than the context, a link matrix of the wrong size, a shared medium
# with per-pair bandwidths, a range running downwards. Good runs: a
# one-device simulation's decode passes are plan's prediction; --json,
# --csv and --plot hold every token and device; re-placement at the
# position the plan's horizon says; cluster-gen is seeded.
# usage: simulate_check.sh MESHINFER
set -u
bin=$1
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

. "$(dirname "$0")/refusals.sh"
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }
S=("$bin" simulate --shape stories15M)

# --- bad input: one line each
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000, "speed": 0}]}\n' > "$tmp/zero.json"
refused "a device of speed 0" "devices\[1\].speed must be a number from 1e-6 to 1e9 \(got 0\)" \
    "${S[@]}" --cluster "$tmp/zero.json"
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000, "speed": -2}]}\n' > "$tmp/neg.json"
refused "a device of negative speed" "devices\[1\].speed must be a number from 1e-6 to 1e9 \(got -2\)" \
    "${S[@]}" --cluster "$tmp/neg.json"
printf '{"devices": [{"name": "a", "mem_mb": 1}, {"name": "b", "mem_mb": 1}, {"name": "c", "mem_mb": 2}]}\n' > "$tmp/tiny.json"
refused "budgets smaller than any placement" "simulate: plan does not fit: .* short by [0-9]+ bytes" \
    "${S[@]}" --cluster "$tmp/tiny.json"
refused "more tokens than the context" "--prompt-tokens 32 plus --tokens 300 is 332 positions, more than the model's context \(256\)" \
    "${S[@]}" --ranks 3 -n 300
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}], "links": {"latency_ms": [[0, 1], [1, 0], [2, 2]]}}\n' > "$tmp/matrix.json"
refused "a link matrix of the wrong size" "links.latency_ms must be 2 rows of 2 numbers" \
    "${S[@]}" --cluster "$tmp/matrix.json"
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}], "links": {"bandwidth_mbit": [[0, 1, 2], [1, 0, 2]]}}\n' > "$tmp/row.json"
refused "a link matrix row of the wrong size" "links.bandwidth_mbit\\[0\\] must be a row of 2 numbers" \
    "${S[@]}" --cluster "$tmp/row.json"
printf '{"link": {"shared_medium": true}, "devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}], "links": {"bandwidth_mbit": [[0, 1], [1, 0]]}}\n' > "$tmp/shared.json"
refused "a shared medium with per-pair bandwidths" "link.shared_medium puts every transfer on one medium.*contradicts" \
    "${S[@]}" --cluster "$tmp/shared.json"
printf '{"link": {"loss_pct": 100}, "devices": [{"name": "a", "mem_mb": 4000}]}\n' > "$tmp/loss.json"
refused "a loss of 100%" "link.loss_pct must be below 100" "${S[@]}" --cluster "$tmp/loss.json"
refused "--acceptance without --speculate" "--acceptance .*give --speculate" "${S[@]}" --ranks 3 --acceptance 0.8
refused "--rto-ms without loss" "--rto-ms is the time a lost message costs" "${S[@]}" --ranks 3 --rto-ms 50
refused "--replan with a plan file" "--plan-file fixes the placement" "${S[@]}" --ranks 3 --plan-file /dev/null --replan
refused "cluster-gen: a range running downwards" "speed range 3:1 runs downwards" \
    "$bin" cluster-gen --speed 3:1 --out "$tmp/c.json"
refused "cluster-gen: no devices" "--devices" "$bin" cluster-gen --devices 0 --out "$tmp/c.json"

# --- one device: each decode pass is plan's prediction at its context
want=$("$bin" plan --shape stories15M --ranks 1 --ctx 40 | sed -n 's/.*predicted \([0-9.]*\) ms\/token.*/\1/p')
got=$("${S[@]}" --ranks 1 --prompt-tokens 40 -n 5 --json | $py -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["token_ms"][1])')
[[ -n $want && $got == "$want" ]] && ok "one device: decode pass at context 40 is plan's $want ms" ||
    bad "one device: simulated $got ms, plan predicts $want ms"

# --- JSON, CSV, figures: every token and device
"$bin" cluster-gen --devices 6 --seed 3 --out "$tmp/g1.json" > /dev/null && "$bin" cluster-gen --devices 6 --seed 3 --out "$tmp/g2.json" > /dev/null &&
    cmp -s "$tmp/g1.json" "$tmp/g2.json" && ok "cluster-gen: the same seed gives the same file" || bad "cluster-gen is not reproducible"
"$bin" cluster-gen --devices 6 --seed 4 --out "$tmp/g3.json" > /dev/null
cmp -s "$tmp/g1.json" "$tmp/g3.json" && bad "cluster-gen: another seed gave the same file" || ok "cluster-gen: another seed, another file"
if "${S[@]}" --cluster "$tmp/g1.json" -n 40 --json --csv "$tmp/csv" > "$tmp/run.json" 2> "$tmp/err"; then
    $py - "$tmp/run.json" "$tmp/csv" <<'PY' && ok "--json and --csv: 40 tokens, 6 devices, links conserved" || bad "--json/--csv content"
import csv, json, sys
d = json.load(open(sys.argv[1]))
assert d["tokens"] == 40 and len(d["token_ms"]) == 40 and len(d["per_device"]) == 6, d["tokens"]
assert all(len(p["busy_ms"]) == 40 and len(p["mem_bytes"]) == 40 for p in d["per_device"])
assert abs(sum(l["bytes"] for l in d["links"]) - d["bytes"]) <= 1e-6 * d["bytes"]
assert abs(sum(p["sent_bytes"] for p in d["per_device"]) - d["bytes"]) <= 1e-6 * d["bytes"]
t = list(csv.DictReader(open(sys.argv[2] + "/tokens.csv")))
dev = list(csv.DictReader(open(sys.argv[2] + "/devices.csv")))
assert len(t) == 40 and len(dev) == 240 and abs(float(t[-1]["time_s"]) - d["total_s"]) < 1e-6
PY
else
    bad "simulate --json --csv failed: $(cat "$tmp/err")"
fi
if command -v gnuplot > /dev/null; then
    "${S[@]}" --cluster "$tmp/g1.json" -n 40 --plot "$tmp/fig" > /dev/null 2> "$tmp/err" &&
        [[ -s $tmp/fig/latency.png && -s $tmp/fig/devices.png && -s $tmp/fig/links.png && -s $tmp/fig/tokens.csv ]] &&
        ok "--plot: three figures and the CSVs" || bad "--plot: $(cat "$tmp/err")"
fi

# --- re-placement: budgeted for 32 positions, the cache outgrows them at position 33 (token 33 - 16 = 17)
"${S[@]}" --ranks 4 --prompt-tokens 16 -n 100 --kv-positions 32 --replan --json > "$tmp/re.json" 2> "$tmp/err" &&
    $py -c 'import json,sys; r=json.load(open(sys.argv[1]))["replans"]; assert r[0]["position"] == 33 and r[0]["token"] == 17 and r[0]["kv_positions"] == 66, r' "$tmp/re.json" &&
    ok "re-placement at position 33 (token 17), for 66 positions" || bad "re-placement: $(cat "$tmp/err" "$tmp/re.json" | head -c 300)"

# --- the options' paths: each run must give a result (JSON with the tokens asked), each refusal one line
runs=(
  "--ranks 3 -n 8 --planner layerwise --json"
  "--ranks 3 -n 8 --planner tp --wire-dtype q8_0 --jitter-ms 1 --loss-pct 1 --rto-ms 5 --seed 3 --json"
  "--ranks 3 -n 8 --planner greedy --speculate --acceptance 0.5 --json"
  "--ranks 3 -n 8 --planner greedy --speculate --spec-draws --json"
  "--ranks 3 -n 8 --planner random --plan-seed 7 --json"
  "--ranks 3 -n 8 --shared-medium yes --controller-works no --json"
  "--ranks 3 -n 8 --mem-mb 4000 --batch 4 --every-step --json"
  "--ranks 3 -n 8 --mem-mb 4000 --batch 4 --micro-batches 2 --planner layerwise --json"
  "--ranks 2 -n 8 --split-vocab --dtype q8_0 --json"
  "--ranks 2 -n 8 --planner exact --exact-seconds 1 --json"
)
for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    if "${S[@]}" $r > "$tmp/o.json" 2> "$tmp/err" &&
        $py -c 'import json,sys; assert json.load(open(sys.argv[1]))["tokens"] == 8' "$tmp/o.json" 2> /dev/null; then
        ok "simulate $r"
    else
        bad "simulate $r: $(tail -1 "$tmp/err")"
    fi
done
# the exact planner's search in the JSON: proven on 2 equal devices, its bound then its objective, its own placement
"${S[@]}" --ranks 2 -n 8 --planner exact --exact-seconds 5 --json > "$tmp/ex.json" 2> "$tmp/err" &&
    $py -c 'import json,sys; e=json.load(open(sys.argv[1]))["exact"]; assert e["optimal"] and e["bound_ms"] == e["objective_ms"] > 0 and e["source"] == "exact", e' "$tmp/ex.json" &&
    grep -q "proven optimal.*(bound [0-9.]* ms)" "$tmp/err" &&
    ok "exact: optimal, bound and source in the JSON and on stderr" || bad "exact's JSON: $(cat "$tmp/err" | head -2; grep -o '"exact": {[^}]*}' "$tmp/ex.json")"
# a run that fails writes nothing: not even the --csv directory it would have made
echo '{"devices": [{"name": "a", "mem_mb": 1}, {"name": "b", "mem_mb": 1}]}' > "$tmp/tiny.json"
"${S[@]}" --cluster "$tmp/tiny.json" -n 4 --csv "$tmp/csv-failed" > /dev/null 2> "$tmp/err"
[[ $? == 1 && ! -e $tmp/csv-failed && $(grep -c . "$tmp/err") == 1 ]] &&
    ok "a run that does not fit: one line, no --csv directory made" || bad "failed run with --csv: $(head -2 "$tmp/err"); $(ls -d "$tmp/csv-failed" 2>&1)"
# plan's exact search stopped by its limit: one warning line with the best found and the bound, exit 0
# (8 devices of 10-60 MB: the program has 1418 rows, far from proven in a second)
"$bin" cluster-gen --devices 8 --seed 3 --mem-mb 10:60 --controller-mem-mb 100 --out "$tmp/c8.json" > /dev/null 2>&1
"$bin" plan --shape stories15M --cluster "$tmp/c8.json" --planner exact --exact-seconds 1 > /dev/null 2> "$tmp/err" &&
    [[ $(wc -l < "$tmp/err") == 1 ]] &&
    grep -q "^meshinfer: warning: exact planner: its best when the time limit stopped the search in 1\.[0-9]* s .*(bound [0-9.]* ms)" "$tmp/err" &&
    ok "plan --exact-seconds: the stopped search warns once, best and bound" || bad "plan --exact-seconds: $(head -2 "$tmp/err")"
refusals=(
  "--ranks 2 -n 8 --controller-works maybe"
  "--ranks 2 -n 8 --shared-medium maybe"
  "--ranks 2 -n 8 --acceptance 0.5"
  "--ranks 2 -n 8 --plan-seed 3"
  "--ranks 2 -n 8 --exact-seconds 1"
  "--ranks 2 --cluster x.json -n 8"
  "--ranks 2 -n 8 --bogus"
  "--ranks 2 -n 8 --micro-batches 2"
  "--ranks 2 -n 8 extra"
)
for r in "${refusals[@]}"; do
    # shellcheck disable=SC2086
    "${S[@]}" $r > /dev/null 2> "$tmp/err"
    rc=$?
    [[ $rc -ne 0 && $(wc -l < "$tmp/err") -eq 1 ]] && ok "refused: $r" || bad "$r: exit $rc, $(head -2 "$tmp/err")"
done
"$bin" simulate --model "$tmp/none.h5" --ranks 2 -n 8 > /dev/null 2> "$tmp/err" && bad "a missing model ran" ||
    ok "a missing model: $(tail -1 "$tmp/err")"
"$bin" simulate --help > "$tmp/help" && grep -q -- "--shared-medium" "$tmp/help" && ok "simulate --help" || bad "simulate --help"
"$bin" cluster-gen --help > "$tmp/help" && grep -q -- "--devices" "$tmp/help" && ok "cluster-gen --help" || bad "cluster-gen --help"
"$bin" cluster-gen --devices 5 --seed 2 --speed 1 --mem-mb 500:900 --controller-mem-mb 2000 --latency-ms 4:6 \
    --bandwidth-mbit 20:100 --mem-bandwidth-gbs 8 --jitter-ms 1 --loss-pct 0.5 --out "$tmp/w.json" > /dev/null 2> "$tmp/err" &&
    $py -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["devices"]) == 5 and d["devices"][0]["mem_mb"] == 2000' "$tmp/w.json" &&
    ok "cluster-gen with every distribution given" || bad "cluster-gen options: $(tail -1 "$tmp/err")"
"$bin" cluster-gen --devices 4 --shared-medium --bandwidth-mbit 50 --out "$tmp/s.json" > /dev/null 2> "$tmp/err" &&
    ok "cluster-gen --shared-medium" || bad "cluster-gen --shared-medium: $(tail -1 "$tmp/err")"
for r in "--devices 0 --out $tmp/z.json" "--devices 4" "--devices 4 --speed 2:1 --out $tmp/z.json" \
         "--devices 4 --mem-mb x --out $tmp/z.json" "--devices 4 --out $tmp/z.json extra" "--bogus"; do
    # shellcheck disable=SC2086
    "$bin" cluster-gen $r > /dev/null 2> "$tmp/err"
    rc=$?
    [[ $rc -ne 0 && $(wc -l < "$tmp/err") -eq 1 ]] && ok "cluster-gen refused: $r" || bad "cluster-gen $r: exit $rc, $(head -2 "$tmp/err")"
done
echo "$pass passed, $fail failed"
((fail == 0))
