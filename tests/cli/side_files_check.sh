#!/usr/bin/env bash
# Side files that would say one thing and run another are refused: one
# "meshinfer: error:" line naming the file, the field and the reason, exit 1.
# Duplicate device names in a cluster file; rates out of range (one rule, one
# message for 0 and 1e-300 alike); a device idle for its budget says so; integer fields holding
# non-integral numbers (model file attributes, cluster, plan, quality and
# speculation-profile files); a speculation profile for another model or
# weights, with unknown keys or values out of range or disagreeing; tokenizer
# id attributes that disagree with the tokenizer; an importance file's tokens
# or base perplexity out of range; a plan file whose layout is not its
# planner's or that works rank 0 against controller_works; a plan file's empty send list (pruning ratio 1,
# which --prune refuses). Damaged files are made in a temporary directory from
# copies; the model itself is only read.
# usage: side_files_check.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

. "$(dirname "$0")/refusals.sh"
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }
# json FILE JS: rewrite FILE with d = its JSON after the statement JS
json() { node -e 'const fs=require("fs"); const d=JSON.parse(fs.readFileSync(process.argv[1])); '"$2"'; fs.writeFileSync(process.argv[1], JSON.stringify(d))' "$1"; }

# --- cluster files: names identify devices; eager_bytes is a byte count
printf '{"devices": [{"name": "pi", "mem_mb": 4000}, {"name": "pi", "mem_mb": 4000}]}\n' > "$tmp/dup.json"
refused "cluster: two devices named alike" "cluster file .*dup.json: devices\[1\].name 'pi' is also devices\[0\]'s" \
    "$bin" plan -m "$model" --cluster "$tmp/dup.json"
# a default name ("dev<i>") counts: device 1 unnamed is dev1, as device 0 is called
printf '{"devices": [{"name": "dev1", "mem_mb": 4000}, {"mem_mb": 4000}]}\n' > "$tmp/dup2.json"
refused "cluster: a name equal to another device's default" "devices\[1\].name 'dev1' is also devices\[0\]'s" \
    "$bin" plan -m "$model" --cluster "$tmp/dup2.json"
printf '{"eager_bytes": 100.5, "devices": [{"name": "a", "mem_mb": 4000}]}\n' > "$tmp/eager.json"
refused "cluster: eager_bytes not whole" "cluster file .*eager.json: eager_bytes must be a whole number of bytes \(got 100.5\)" \
    "$bin" plan -m "$model" --cluster "$tmp/eager.json"
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}]}\n' > "$tmp/two.json"
"$bin" plan -m "$model" --cluster "$tmp/two.json" > /dev/null 2>&1 && ok "cluster with distinct names plans" ||
    bad "a cluster file with distinct names was refused"

# rates: one rule (0 refused, 1e-6 to 1e9 accepted) and one message for every value that breaks it
for key in speed bandwidth_mbit; do
    for vg in 0:0 1e-300:1e-300 -1:-1 2e9:2e\\+09; do
        v=${vg%%:*} got=${vg#*:}
        if [[ $key == speed ]]; then printf '{"devices": [{"name": "a", "mem_mb": 4000, "speed": %s}]}\n' $v
        else printf '{"link": {"bandwidth_mbit": %s}, "devices": [{"name": "a", "mem_mb": 4000}]}\n' $v; fi > "$tmp/rate.json"
        refused "cluster: $key $v" "rate.json: (devices\[0\]|link)\.$key must be a number from 1e-6 to 1e9 \(got $got\)" \
            "$bin" plan -m "$model" --cluster "$tmp/rate.json"
    done
done
# a device left empty by its budget says so (not "more ranks than units")
printf '{"devices": [{"name": "a", "mem_mb": 4000}, {"name": "b", "mem_mb": 4000}, {"name": "c", "mem_mb": 0.001}]}\n' > "$tmp/tiny.json"
for pl in greedy hybrid; do
    row=$("$bin" plan -m "$model" --cluster "$tmp/tiny.json" --planner $pl 2>&1 | grep -E '^ +2  c ')
    [[ "$row" =~ "idle (its budget, 0.001 MB, is below a unit's size here, about "[0-9.]+" MB)" ]] &&
        ok "plan --planner $pl: a 0.001 MB device is idle for its budget" || bad "plan --planner $pl: rank 2 row: '$row'"
done

# --- plan files: an empty send list; integer fields
"$bin" plan -m "$model" --ranks 1 --planner somegather --prune 0.5 --out "$tmp/sg.json" > /dev/null 2>&1 ||
    bad "plan --planner somegather --prune 0.5 --out"
"$bin" generate -m "$model" -n 2 --plan-file "$tmp/sg.json" > /dev/null 2>&1 && ok "the somegather plan file runs" ||
    bad "the unmodified somegather plan file was refused"
cp "$tmp/sg.json" "$tmp/sg-empty.json"
json "$tmp/sg-empty.json" 'd.somegather.send[0].columns = []'
refused "plan file: an empty send list" "plan file .*sg-empty.json: somegather.send of layer [0-9]+ exchange [a-z_]+ rank [0-9]+ is empty: .*pruning ratio 1, which --prune refuses" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/sg-empty.json"
# the command line cannot make one either: a ratio below 1 keeps a column of every rank
"$bin" plan -m "$model" --ranks 3 --planner somegather --prune 0.999 --out "$tmp/sg999.json" > /dev/null 2>&1 ||
    bad "plan --prune 0.999 --out"
n0=$(node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(d.somegather.send.filter(e => e.columns.length == 0).length)' "$tmp/sg999.json")
[[ "$n0" == 0 ]] && ok "--prune 0.999 keeps a column of every rank (no empty send list)" ||
    bad "--prune 0.999 wrote $n0 empty send lists"
cp "$tmp/sg.json" "$tmp/sg-ranks.json"
json "$tmp/sg-ranks.json" 'd.n_ranks = 1.5'
refused "plan file: n_ranks not whole" "plan file .*sg-ranks.json: 'n_ranks' must be an integer" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/sg-ranks.json"

# a layout under another planner's name, rank 0 working against controller_works, the planner list
"$bin" plan -m "$model" --ranks 3 --planner greedy --out "$tmp/greedy.json" > /dev/null 2>&1 || bad "plan --planner greedy --out"
cp "$tmp/greedy.json" "$tmp/as-tp.json"; json "$tmp/as-tp.json" 'd.planner = "tp"'
refused "plan file: a greedy layout named tp" "as-tp.json: layers\[0\].proj_rank is [0-9]+, but tp splits every layer's projection with its heads" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/as-tp.json"
cp "$tmp/greedy.json" "$tmp/as-lw.json"; json "$tmp/as-lw.json" 'd.planner = "layerwise"'
refused "plan file: a greedy layout named layerwise" "as-lw.json: layers\[0\] is split over ranks, but a layerwise plan places every layer whole" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/as-lw.json"
"$bin" plan -m "$model" --ranks 3 --planner tp --out "$tmp/tp.json" > /dev/null 2>&1 || bad "plan --planner tp --out"
cp "$tmp/tp.json" "$tmp/as-greedy.json"; json "$tmp/as-greedy.json" 'd.planner = "greedy"'
refused "plan file: a tp layout named greedy" "as-greedy.json: layers\[0\] splits its projection \(proj_rank -1\), but greedy places" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/as-greedy.json"
cp "$tmp/greedy.json" "$tmp/kv0.json"; json "$tmp/kv0.json" 'd.layers[2].kv_rank[0] = 0'
refused "plan file: a KV head on rank 0 with controller_works false" "kv0.json: layers\[2\].kv_rank\[0\] is rank 0, but 'controller_works' is false" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/kv0.json"
cp "$tmp/greedy.json" "$tmp/smart.json"; json "$tmp/smart.json" 'd.planner = "smart"'
refused "plan file: an unknown planner lists every planner" "'planner' must be one of layerwise, roundrobin, random, greedy, tp, somegather, hybrid, exact$" \
    "$bin" generate -m "$model" -n 2 --plan-file "$tmp/smart.json"
cp "$tmp/greedy.json" "$tmp/hy.json"; json "$tmp/hy.json" 'd.planner = "hybrid"'
"$bin" generate -m "$model" -n 2 --plan-file "$tmp/hy.json" 2>&1 | grep -q "is for 3 ranks but the job has 1" &&
    ok "a greedy layout named hybrid (which mixes per layer) loads (then wants its 3 ranks)" ||
    bad "a greedy layout named hybrid was refused"

# --- somegather quality file: tokens is a count
printf '{"model": "stories15M", "n_layers": 6, "dim": 288, "ranks": 1, "tokens": 10.5, "points": [{"r": 0, "perplexity": 5}]}\n' \
    > "$tmp/q.json"
refused "quality file: tokens not whole" "q.json: 'text' must be a string and 'tokens' a count \(a whole number\)" \
    "$bin" plan -m "$model" --ranks 1 --planner auto --ppl-budget 5 --somegather-quality "$tmp/q.json"

# --- speculation profiles: n_layers 6.5 is not the model's 6; the model, its weights, unknown keys,
# the transition count and the values (percentiles, and the mean and acceptance derived from them)
printf 'Once upon a time there was a little girl named Lily. She liked to play in the park with her dog.\n' > "$tmp/corpus.txt"
"$bin" profile -m "$model" --text "$tmp/corpus.txt" --tolerance 0.8 --out "$tmp/prof0.json" > /dev/null 2>&1 ||
    bad "profile --out"
"$bin" generate -m "$model" -n 2 --speculate --spec-profile "$tmp/prof0.json" > /dev/null 2>&1 &&
    ok "the unmodified speculation profile is accepted" || bad "the unmodified speculation profile was refused"
# prof NAME JS WANT: a copy of the profile after JS must be refused with an error line matching WANT
prof() {
    cp "$tmp/prof0.json" "$tmp/$1.json"; json "$tmp/$1.json" "$2"
    refused "speculation profile: $1" "speculation profile .*$1.json$3" \
        "$bin" generate -m "$model" -n 2 --speculate --spec-profile "$tmp/$1.json"
}
prof layers65 'd.n_layers = 6.5' " is for stories15M \(6.5 layers\) but the model is stories15M \(6 layers\)"
prof other 'd.model = "tinyllama-1.1b"' " is for tinyllama-1.1b \(6 layers\) but the model is stories15M"
prof synth 'd.synthetic_weights = true' " was measured on synthetic weights but the model's are real"
prof unknown 'd.bogus_key = 1' ": unknown key 'bogus_key' at the top level"
prof unknown_t 'd.transitions[3].bogus = 1' ": unknown key 'bogus' in transitions\[3\]"
prof two 'd.transitions = d.transitions.slice(0, 2)' ": 'transitions' holds 2 entries but a model of 6 layers has 5 transitions"
prof zeros 'd.transitions.forEach(t => t.ratio_percentiles = Array(101).fill(0))' ": transitions\[0\].ratio_percentiles are all 0"
prof negative 'd.transitions[1].ratio_percentiles[0] = -1' ": transitions\[1\].ratio_percentiles\[0\] must be a finite number >= 0"
prof decreasing 'd.transitions[2].ratio_percentiles[60] = 0' ": transitions\[2\].ratio_percentiles\[60\] \(0\) is below ratio_percentiles\[59\]"
prof mean 'd.transitions[0].mean_ratio = 1e6' ": transitions\[0\].mean_ratio 1e\+06 is outside its percentiles' range"
prof acceptance 'd.transitions[4].ratio_percentiles = Array(101).fill(100); d.transitions[4].mean_ratio = 100' \
    ": transitions\[4\].acceptance [0-9.e-]+ disagrees with its percentiles at tolerance 0.8"
prof from 'd.transitions[1].from_layer = 3' ": transitions\[1\].from_layer must be 1$"
prof positions 'd.positions = 0' ": positions must be a whole number from 1 to"

# --- model file attributes: whole numbers, never truncated
cp "$model" "$tmp/m.h5"
$py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["n_layers"]; f.attrs["n_layers"] = np.float64(6.5)' "$tmp/m.h5" || bad "h5py could not edit the copy"
refused "model file: n_layers 6.5 (check)" "m.h5: attribute 'n_layers' is 6.5, not a whole number" \
    "$bin" check -m "$tmp/m.h5"
refused "model file: n_layers 6.5 (generate)" "m.h5: attribute 'n_layers' is 6.5, not a whole number" \
    "$bin" generate -m "$tmp/m.h5" -n 2
cp "$model" "$tmp/m6.h5"
$py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["n_layers"]; f.attrs["n_layers"] = np.float64(6.0)' "$tmp/m6.h5"
"$bin" check -m "$tmp/m6.h5" > /dev/null 2>&1 && ok "n_layers stored as the float 6.0 reads as 6" ||
    bad "n_layers 6.0 (a float holding an integer) was refused"
cp "$model" "$tmp/big.h5"
$py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["dim"]; f.attrs["dim"] = np.int64(1 << 40)' "$tmp/big.h5"
refused "model file: dim past an int" "big.h5: attribute 'dim' is 1.09951e\+12, not a whole number within the range of an int" \
    "$bin" check -m "$tmp/big.h5"
# a blocked tensor's layout attributes
"$bin" quantize -m "$model" --layer-dtype 0:q8_0 --out "$tmp/q8.h5" > /dev/null 2>&1 || bad "quantize --layer-dtype 0:q8_0"
$py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    g = f["layers/000/wq"]; del g.attrs["block_size"]; g.attrs["block_size"] = np.float64(32.5)' "$tmp/q8.h5" ||
    bad "h5py could not edit layers/000/wq"
refused "model file: block_size 32.5" "q8.h5: tensor 'layers/000/wq' \(q8_0\) must have block_size 32" \
    "$bin" check -m "$tmp/q8.h5"

# --- tokenizer id attributes: the reader takes the ids from the tokenizer, so one that says otherwise is refused
for kv in bos_id:99999 eos_id:-1 byte_fallback_first_id:4; do
    k=${kv%%:*} v=${kv#*:}
    cp "$model" "$tmp/tok-$k.h5"
    $py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    g = f["tokenizer"]; del g.attrs[sys.argv[2]]; g.attrs[sys.argv[2]] = np.int32(int(sys.argv[3]))' "$tmp/tok-$k.h5" $k $v ||
        bad "h5py could not edit tokenizer/$k"
    refused "model file: tokenizer $k $v" "tok-$k.h5: attribute 'tokenizer/$k' is $v but the tokenizer's .* is [0-9]+ \(a llama2.c tokenizer has BOS 1, EOS 2" \
        "$bin" check -m "$tmp/tok-$k.h5"
done

# --- importance files: the measurement's tokens and base perplexity in range
"$bin" importance -m "$model" --text "$tmp/corpus.txt" --out "$tmp/imp0.json" > /dev/null 2>&1 || bad "importance --out"
"$bin" plan -m "$model" --ranks 2 --planner hybrid --importance "$tmp/imp0.json" > /dev/null 2>&1 &&
    ok "the unmodified importance file is accepted" || bad "the unmodified importance file was refused"
imp() {
    cp "$tmp/imp0.json" "$tmp/$1.json"; json "$tmp/$1.json" "$2"
    refused "importance file: $1" "importance file .*$1.json: $3" \
        "$bin" plan -m "$model" --ranks 2 --planner hybrid --importance "$tmp/$1.json"
}
imp ppl_negative 'd.base_perplexity = -5' "'base_perplexity' must be a perplexity, a finite number of at least 1"
imp ppl_below1 'd.base_perplexity = 0.5' "'base_perplexity' must be a perplexity"
imp tokens0 'd.tokens = 0' "'tokens' must be the whole number of tokens scored, at least 2"
imp tokens_frac 'd.tokens = 10.5' "'tokens' must be the whole number of tokens scored"

echo "side_files_check: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
