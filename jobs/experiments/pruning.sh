#!/usr/bin/env bash
# Voltron's shard-wise pruning on stories15M: what pruning
# FFN shards costs in perplexity when the least important go first, against
# pruning the same number without looking (each layer's first shards), and
# the precision search on a cluster where even every layer in q4_0 does not
# fit, so it must prune.
#   importance: `meshinfer importance --ffn-shard 64` on 8 stories the fp32
#     model samples (seeds 201-208), held apart from the scored text
#   scored text: 16 other sampled stories (seeds 101-116, as
#     jobs/experiments/precision_quality.sh's)
#   cluster: 4 devices with 39 / 1.5 / 1.5 / 1.4 MB (hybrid planner, the KV
#     cache of the whole context budgeted); the chosen file is run on 4 ranks
#     and its tokens compared with one rank's
# Embeddings stay fp32 in every file (36.9 MB of stories15M's 61.4).
# Then the same shards pruned at run time (generate --prune-ffn): TPOT against
# the unpruned model, and the tokens against the pruned file's.
# Writes DIR/pruning.csv, pruning.md and pruning.png (perplexity against
# shards pruned); the texts, importance file and models it makes stay under
# DIR/cache-MODEL-SIZE/ and are reused.
#
# usage: jobs/experiments/pruning.sh [--model models/cache/stories15M.h5] [--out results/pruning]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model=""
out="$root/results/pruning"
while (($#)); do
    case "$1" in
        --model|--out) need_value "$@" ;;&
        --model) model=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
[[ -z $model ]] || opt_file --model "$model"
meshinfer_bin
real_model
out_dir "$out"
cache="$out/cache-$(basename "$model" .h5)-$(stat -c %s "$model")"
mkdir -p "$cache"

scored="$cache/own-stories.txt"
imptext="$cache/importance-stories.txt"
"$root/jobs/lib/sample_stories.sh" "$bin" "$model" "$scored" 101 116
"$root/jobs/lib/sample_stories.sh" "$bin" "$model" "$imptext" 201 208

imp="$cache/importance.json"
if [[ ! -s "$imp" ]]; then
    say "measuring importance (layers and FFN shards of 64 channels; about a minute)..."
    "$bin" importance -m "$model" --text "$imptext" --ffn-shard 64 --out "$imp" > /dev/null 2>"$cache/err" ||
        fail "importance: $(tail -1 "$cache/err")"
fi
# the blind baseline: every shard equally important, so each layer loses its first shards
blind="$cache/importance-blind.json"
node -e 'const fs = require("fs"); const j = JSON.parse(fs.readFileSync(process.argv[1]));
  for (const l of j.layers) l.prune = l.prune.map(() => 0);
  fs.writeFileSync(process.argv[2], JSON.stringify(j))' "$imp" "$blind"
n_shards=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(j.hidden_dim / j.ffn_shard)' "$imp")

ppl() { # model file -> perplexity on the scored text
    "$bin" perplexity -m "$1" --text "$scored" --json 2>"$cache/err" | json - j.perplexity ||
        fail "perplexity of $1: $(tail -1 "$cache/err")"
}
mk() { # name quantize-options... -> the file (made once)
    local f="$cache/$1.h5"; shift
    [[ -f "$f" ]] || "$bin" quantize -m "$model" "$@" --out "$f" >/dev/null 2>"$cache/err" ||
        fail "quantize $*: $(tail -1 "$cache/err")"
    echo "$f"
}

csv="$out/pruning.csv.partial"
trap 'rm -f "$csv"' EXIT
echo "config,weights,shards_pruned,hidden_dim,file_mb,perplexity,expected_rise" > "$csv"
base=$(ppl "$model")
echo "fp32,fp32,0,$(json - j.hidden_dim < "$imp"),$(file_mb "$model"),$base,0" >> "$csv"
for k in $(seq 1 $((n_shards / 2))); do
    say "pruning $k of $n_shards shards per layer..."
    for how in importance blind; do
        file=$imp; [[ $how == blind ]] && file=$blind
        f=$(mk "prune-$how-$k" --prune-ffn "$k" --importance "$file")
        rise=""
        [[ $how == importance ]] && rise=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
          const k = +process.argv[2]; let s = 0;
          for (const l of j.layers) s += [...l.prune].sort((a, b) => a - b).slice(0, k).reduce((a, b) => a + b, 0);
          console.log(s.toFixed(4))' "$imp" "$k")
        echo "prune $how,fp32,$k,$(json - j.hidden_dim < "$imp" | awk -v k="$k" -v n="$n_shards" '{print $1 - k * $1 / n}'),$(file_mb "$f"),$(ppl "$f"),$rise" >> "$csv"
    done
done
n_layers=$(json - j.n_layers < "$imp")
for dt in q8_0 q4_0; do # layers only: embeddings stay fp32, as in every other row
    f=$(mk "layers-$dt" --layer-dtype "0-$((n_layers - 1)):$dt")
    echo "every layer $dt,$dt,0,$(json - j.hidden_dim < "$imp"),$(file_mb "$f"),$(ppl "$f"),0" >> "$csv"
done

# the precision search on a cluster that every-layer-q4_0 does not fit
cl="$cache/cluster-tight.json"
cat > "$cl" <<'EOF'
{"description": "jobs/experiments/pruning.sh: 4 devices whose budgets hold stories15M only with every layer q4_0 and FFN shards pruned",
 "devices": [{"name": "big", "mem_mb": 39}, {"name": "small-a", "mem_mb": 1.5},
             {"name": "small-b", "mem_mb": 1.5}, {"name": "small-c", "mem_mb": 1.4}]}
EOF
say "precision search on the tight cluster..."
noprune="$cache/importance-layers.json"
node -e 'const fs = require("fs"); const j = JSON.parse(fs.readFileSync(process.argv[1]));
  delete j.ffn_shard; for (const l of j.layers) delete l.prune; fs.writeFileSync(process.argv[2], JSON.stringify(j))' "$imp" "$noprune"
without=$("$bin" plan -m "$model" --cluster "$cl" --planner hybrid --importance "$noprune" 2>&1 >/dev/null | tail -1 || true)
[[ $without == *error* ]] || fail "the search without pruning was expected to fail on $cl: $without"
search=$("$bin" plan -m "$model" --cluster "$cl" --planner hybrid --importance "$imp" --json 2>"$cache/err") ||
    fail "search: $(tail -1 "$cache/err")"
spec=$(json - j.layer_dtype <<<"$search")
k=$(json - j.prune_ffn_shards <<<"$search")
search_ms=$(json - j.search_ms <<<"$search")
f=$(mk "chosen-$k" --layer-dtype "$spec" --prune-ffn "$k" --importance "$imp")
echo "chosen by the search,${spec//,/ },$k,$(json - j.hidden_dim <<<"$search"),$(file_mb "$f"),$(ppl "$f"),$(json - j.expected_perplexity_rise <<<"$search")" >> "$csv"
one=$("$bin" generate -m "$f" -n 60 --json 2>"$cache/err" | json - j.tokens) || fail "one rank: $(tail -1 "$cache/err")"
four=$(mpi -np 4 "$bin" generate -m "$f" --cluster "$cl" --planner hybrid -n 60 --json 2>"$cache/err") ||
    fail "4 ranks: $(tail -1 "$cache/err")"
same=$([[ "$(json - j.tokens <<<"$four")" == "$one" ]] && echo "the same 60 tokens as one rank" || echo "DIFFERENT tokens from one rank")
mv "$csv" "$out/pruning.csv"
trap - EXIT

node - "$out" "$without" "$spec" "$k" "$search_ms" "$same" "$(json - j.tpot_ms <<<"$four")" <<'JS'
const fs = require("fs");
const [out, without, spec, k, searchMs, same, tpot] = process.argv.slice(2);
const rows = fs.readFileSync(`${out}/pruning.csv`, "utf8").trim().split("\n").slice(1).map(l => l.split(","));
const base = +rows[0][5];
let md = "| configuration | layer weights | FFN shards pruned per layer | hidden_dim | file MB | perplexity | vs fp32 | expected rise (sum of importances) |\n|---|---|---|---|---|---|---|---|\n";
for (const r of rows)
  md += `| ${r[0]} | ${r[1]} | ${r[2]} | ${r[3]} | ${r[4]} | ${(+r[5]).toFixed(3)} | ${((r[5] / base - 1) * 100).toFixed(1)}% | ${r[6]} |\n`;
md += `\nThe search without shard importances: \`${without.replace(/^meshinfer: error: /, "")}\`. ` +
      `With them (${(+searchMs).toFixed(2)} ms): layers ${spec}, ${k} shards pruned per layer; on 4 ranks ` +
      `(hybrid) it gives ${same}, TPOT ${(+tpot).toFixed(2)} ms.\n`;
fs.writeFileSync(`${out}/pruning.md`, md);
let dat = "";
for (const how of ["importance", "blind"]) {
  dat += `0 ${base}\n`;
  for (const r of rows.filter(r => r[0] === `prune ${how}`)) dat += `${r[2]} ${r[5]}\n`;
  dat += "\n\n";
}
fs.writeFileSync(`${out}/pruning.dat`, dat);
process.stdout.write(md);
JS
plot_png "$out/pruning.png" "800,450" ",10" <<GP
set title "stories15M: perplexity on its own stories as FFN shards (64 channels) are pruned from every layer"
set xlabel "FFN shards pruned per layer (of $n_shards)"
set ylabel "perplexity"
set logscale y
set grid
set key top left
plot "$out/pruning.dat" index 0 using 1:2 with linespoints pt 7 lw 2 title "least important first (meshinfer importance)", \
     "" index 1 using 1:2 with linespoints pt 5 lw 2 title "each layer's first shards (blind)"
GP
rm -f "$out/pruning.dat"

# the same shards pruned at run time (generate --prune-ffn: not computed, no file made): TPOT on one
# rank against the unpruned run in this job (median of 3 interleaved rounds of 200 tokens), and the
# tokens against the pruned file's
say "pruning at run time..."
declare -A tpots
for round in 1 2 3; do
    for k in 0 2 4 $((n_shards / 2)); do
        pr=(); ((k)) && pr=(--prune-ffn "$k" --importance "$imp")
        t=$("$bin" generate -m "$model" -n 200 --ignore-eos "${pr[@]}" --json 2>"$cache/err" | json - j.tpot_ms) ||
            fail "generate --prune-ffn $k: $(tail -1 "$cache/err")"
        tpots[$k]+="$t "
    done
done
{
    echo
    echo "Pruning at run time (\`generate --prune-ffn K --importance\`, fp32 weights, one rank, 200 tokens, median of 3):"
    echo
    echo "| FFN shards pruned per layer | TPOT ms | vs unpruned | tokens (60) vs the pruned file's |"
    echo "|---|---|---|---|"
    for k in 0 2 4 $((n_shards / 2)); do
        med=$(tr ' ' '\n' <<<"${tpots[$k]}" | grep . | sort -g | sed -n 2p)
        base_t=$(tr ' ' '\n' <<<"${tpots[0]}" | grep . | sort -g | sed -n 2p)
        same="-"
        if ((k)); then
            a=$("$bin" generate -m "$model" -n 60 --prune-ffn "$k" --importance "$imp" --json 2>/dev/null | json - j.tokens)
            b=$("$bin" generate -m "$cache/prune-importance-$k.h5" -n 60 --json 2>/dev/null | json - j.tokens)
            same=$([[ -n "$a" && "$a" == "$b" ]] && echo same || echo DIFFERENT)
        fi
        echo "| $k | $med | $(awk -v a="$med" -v b="$base_t" 'BEGIN {printf "%.2fx", a / b}') | $same |"
    done
} >> "$out/pruning.md"
tail -8 "$out/pruning.md"
say "wrote $out/pruning.csv, pruning.md, pruning.png"
