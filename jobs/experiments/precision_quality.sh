#!/usr/bin/env bash
# What a precision costs: stories15M's perplexity on two texts and its greedy
# continuation of the reference prompt, for every weight dtype (fp32, fp16,
# q8_0, q4_0, q4_0 with q8_0 embeddings, a per-layer mix) and for lossy
# messages between ranks (fp16, q8_0 on 2 ranks with the tp planner, which
# sends every kind of message: residuals, partial sums, logits).
#   in-distribution text: stories the fp32 model samples itself (16 of 250
#     tokens, seeds 101-116, temperature 1, top-p 0.95; held out from nothing,
#     but the only children's stories reachable here)
#   out-of-distribution text: Moby Dick chapters 1-3 (models/cache/moby-dick.txt)
# Writes results/precision/quality.csv and quality.md, and prints the table;
# the text it samples and the quantized models it makes are kept under
# results/precision/cache-MODEL-SIZE/ and reused by later runs on that model.
#
# usage: jobs/experiments/precision_quality.sh [--model models/cache/stories15M.h5] [--out DIR]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model=""
out="$root/results/precision"
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
moby="$root/models/cache/moby-dick.txt"
[[ -f "$moby" ]] || "$root/jobs/dev/fetch_references.sh" >/dev/null
out_dir "$out"
# what depends on the model is kept apart per model file (name and size)
cache="$out/cache-$(basename "$model" .h5)-$(stat -c %s "$model")"
mkdir -p "$cache"

stories="$cache/own-stories.txt"
"$root/jobs/lib/sample_stories.sh" "$bin" "$model" "$stories" 101 116

# name | quantize options ("" = the fp32 file) | wire dtype (2 ranks, tp) or "-" (1 rank)
configs=(
    "fp32||-"
    "fp16|--dtype fp16|-"
    "q8_0|--dtype q8_0|-"
    "q8_0, fp16 embeddings|--dtype q8_0 --embeddings-dtype fp16|-"
    "q4_0|--dtype q4_0|-"
    "q4_0, q8_0 embeddings|--dtype q4_0 --embeddings-dtype q8_0|-"
    "layers 0-1 q8_0, 2-5 q4_0|--layer-dtype 0-1:q8_0,2-5:q4_0 --embeddings-dtype q8_0|-"
    "fp32, fp16 messages||fp16"
    "fp32, q8_0 messages||q8_0"
    "q4_0, q8_0 messages|--dtype q4_0|q8_0"
)
prompt="Once upon a time, there was a little girl named Lily"
csv="$out/quality.csv.partial"
trap 'rm -f "$csv"' EXIT
echo "config,weights_mb,wire,ppl_stories,ppl_moby,stories_tokens,moby_tokens,same_tokens_as_fp32,text" > "$csv"
ref_tokens=""
for c in "${configs[@]}"; do
    IFS='|' read -r name qopts wire <<<"$c"
    file="$model"
    if [[ -n "$qopts" ]]; then
        # a file name from the options: "--dtype q4_0 --embeddings-dtype q8_0" -> dtype-q4_0-embeddings-dtype-q8_0.h5
        file="$cache/$(sed -E 's/(^| )--/\1/g; s/[^A-Za-z0-9_.]+/-/g; s/-+$//' <<<"$qopts").h5"
        [[ -f "$file" ]] || "$bin" quantize -m "$model" $qopts --out "$file" >/dev/null 2>"$cache/err" ||
            fail "quantize $qopts: $(tail -1 "$cache/err")"
    fi
    run=("$bin")
    opts=()
    if [[ "$wire" != "-" ]]; then
        run=(mpi -np 2 "$bin")
        opts=(--planner tp --wire-dtype "$wire")
    fi
    say "$name..."
    p1=$("${run[@]}" perplexity -m "$file" --text "$stories" "${opts[@]}" --json 2>"$cache/err") ||
        fail "$name: perplexity: $(tail -1 "$cache/err")"
    p2=$("${run[@]}" perplexity -m "$file" --text "$moby" "${opts[@]}" --json 2>"$cache/err") ||
        fail "$name: perplexity: $(tail -1 "$cache/err")"
    g=$("${run[@]}" generate -m "$file" -p "$prompt" -n 100 "${opts[@]}" --json 2>"$cache/err") ||
        fail "$name: generate: $(tail -1 "$cache/err")"
    toks=$(printf '%s' "$g" | json - 'j.tokens.join(" ")')
    [[ -n "$ref_tokens" ]] || ref_tokens="$toks"
    same=$(node -e 'const a = process.argv[1].split(" "), b = process.argv[2].split(" "); let n = 0;
                    while (n < a.length && n < b.length && a[n] === b[n]) n++; console.log(n + "/" + a.length)' \
           "$ref_tokens" "$toks")
    mb=$(file_mb "$file")
    text=$(printf '%s' "$g" | json - j.text | tr '\n"' " '" | cut -c1-120)
    echo "\"$name\",$mb,${wire/-/fp32},$(printf '%s' "$p1" | json - j.perplexity),$(printf '%s' "$p2" | json - j.perplexity),$(printf '%s' "$p1" | json - j.tokens),$(printf '%s' "$p2" | json - j.tokens),$same,\"$text\"" >> "$csv"
done
mv "$csv" "$out/quality.csv"
trap - EXIT
node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1);
  const rows = lines.map(l => l.match(/("[^"]*"|[^,]+)/g).map(x => x.replace(/^"|"$/g, "")));
  const b1 = +rows[0][3], b2 = +rows[0][4];
  let md = `stories15M, ${rows[0][5]} tokens of its own stories and ${rows[0][6]} of Moby Dick; messages on 2 ranks (tp) where not fp32\n\n`;
  md += "| weights | file MB | messages | perplexity, own stories | vs fp32 | perplexity, Moby Dick | vs fp32 | greedy tokens as fp32 |\n";
  md += "|---|---|---|---|---|---|---|---|\n";
  for (const r of rows)
    md += `| ${r[0]} | ${r[1]} | ${r[2]} | ${(+r[3]).toFixed(4)} | ${((r[3] / b1 - 1) * 100).toFixed(2)}% | ` +
          `${(+r[4]).toFixed(1)} | ${((r[4] / b2 - 1) * 100).toFixed(2)}% | ${r[7]} |\n`;
  md += "\nGreedy continuation of \"Once upon a time, there was a little girl named Lily\" (first 120 characters):\n\n";
  for (const r of rows) md += `- ${r[0]}: ${r[8]}\n`;
  require("fs").writeFileSync(process.argv[2], md);
  process.stdout.write(md);
' "$out/quality.csv" "$out/quality.md"
say "wrote $out/quality.csv and $out/quality.md"
