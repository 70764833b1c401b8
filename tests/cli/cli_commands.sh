#!/usr/bin/env bash
# The commands that no other test runs to a checked result,
# on the real model: info (stories15M's config, parameter count and weight
# bytes from its shape), tokenize (known ids, from the model and from
# tokenizer.bin), profile (positions per window, percentiles, acceptance at its
# tolerance; --json prints the file), generate --spec-profile on 3 ranks (only
# the transitions the profile accepts speculate, and fewer bytes move) with
# --metrics (the table agrees with the --json metrics), bench on 1 rank (text:
# TTFT, TPOT, tokens/s, bandwidth and the sgemv baseline consistent) and on 2
# (--json: single-device baseline and speedup), plan --memory-model (table,
# CSV and PNG) and plan --planner all (the comparison table's arithmetic).
# usage: cli_commands.sh MESHINFER MODEL.h5 TOKENIZER.bin
set -u
bin=$1 model=$2 tokbin=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }
mpi=(timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
     --mca btl self,vader)
# js FILE 'expression of j (the file's JSON object)': prints the expression's value
js() { node -e 'const s = require("fs").readFileSync(process.argv[1], "utf8");
                const j = JSON.parse(s.slice(s.indexOf("{"))); console.log(eval(process.argv[2]))' "$1" "$2" 2>&1; }

# --- --version: the release, the commit it was built from and the kernels in use, on stdout, exit 0
got=$("$bin" --version 2>&1); rc=$?
[[ $rc -eq 0 && "$got" =~ ^meshinfer\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-z-]+\;\ kernels\ [a-z0-9-]+\)$ ]] &&
    ok "--version: $got" || bad "--version (exit $rc): $got"

# --- stdout and stderr into one pipe: whole lines (plan --planner all writes its table to stdout and
# "skipped" lines to stderr; a block-buffered stdout put one in the middle of a row)
"$bin" plan -m "$model" --cluster "$(dirname "$0")/../../hostfiles/cluster-hetero.json" --planner all > "$tmp/all.txt" 2>&1
n_skip=$(grep -c 'skipped' "$tmp/all.txt"); n_start=$(grep -c '^plan: [a-z]* skipped' "$tmp/all.txt")
[[ $n_skip -ge 1 && $n_skip -eq $n_start ]] && ok "plan --planner all 2>&1: $n_skip 'skipped' lines, each a line of its own" ||
    bad "plan --planner all 2>&1: $n_start of $n_skip 'skipped' messages start a line"

# --- info: stories15M's shape, and the counts that follow from it
"$bin" info -m "$model" > "$tmp/info.json" 2>&1 || bad "info exited $?"
got=$(js "$tmp/info.json" '[j.name, j.synthetic, j.dim, j.hidden_dim, j.n_layers, j.n_heads, j.n_kv_heads, j.head_dim,
                           j.vocab_size, j.seq_len, j.shared_classifier, j.dtypes, j.layer_dtypes.length,
                           j.layer_dtypes.every(l => Object.values(l).every(d => d == "fp32"))].join(" ")')
[[ "$got" == "stories15M false 288 768 6 6 6 48 32000 256 true fp32 6 true" ]] &&
    ok "info: stories15M, dim 288, hidden 768, 6 layers, 6 heads (6 KV, 48 each), vocab 32000, context 256, fp32" ||
    bad "info: $got"
# parameters: embeddings (shared classifier), per layer 4 dim^2 + 3 dim hidden + 2 norms, the final norm;
# a decoded token reads every matrix once (fp32), norms aside
d=288 h=768 L=6 V=32000
params=$((V * d + L * (4 * d * d + 3 * d * h + 2 * d) + d)) dbytes=$((4 * (V * d + L * (4 * d * d + 3 * d * h))))
got=$(js "$tmp/info.json" '[j.params, j.decode_weight_bytes].join(" ")')
[[ "$got" == "$params $dbytes" ]] && ok "info: $params parameters, $dbytes weight bytes per decoded token" ||
    bad "info: params and decode bytes '$got', want '$params $dbytes'"

# --- tokenize: ids of llama-tokenizer-js (tests/data/tokenizer_expected.tsv)
lily="Once upon a time, there was a little girl named Lily"
want="1 9038 2501 263 931 29892 727 471 263 2217 7826 4257 365 2354"
a=$("$bin" tokenize -m "$model" -p "$lily" 2>&1); b=$("$bin" tokenize --tokenizer-bin "$tokbin" -p "$lily" 2>&1)
c=$("$bin" tokenize -m "$model" --no-bos -p "Hello, world!" 2>&1)
[[ "$a" == "$want" && "$b" == "$want" && "$c" == "15043 29892 3186 29991" ]] &&
    ok "tokenize: known ids from the model and from tokenizer.bin, --no-bos without 1" ||
    bad "tokenize: '$a' / '$b' / '$c'"

# --- profile over the model's own sampled text, twice over (two windows of the 256 context)
"$bin" generate -m "$model" -p "Once upon a time" -t 1.0 --top-k 0 --top-p 1 -s 7 -n 240 > "$tmp/own.txt" 2>/dev/null
cat "$tmp/own.txt" "$tmp/own.txt" > "$tmp/corpus.txt"
text=$(cat "$tmp/corpus.txt"; echo .); text=${text%.}
n=$("$bin" tokenize -m "$model" --no-bos -p "$text" | wc -w)
"$bin" profile -m "$model" --text "$tmp/corpus.txt" --tolerance 0.8 --out "$tmp/prof.json" --json > "$tmp/prof.out" 2>&1 ||
    bad "profile exited $?: $(tail -1 "$tmp/prof.out")"
# each window of the context holds BOS and up to 255 tokens of the corpus
got=$(js "$tmp/prof.json" '[j.model, j.n_layers, j.positions, j.tolerance, j.transitions.length,
                            j.transitions.every((t, l) => t.from_layer == l && t.to_layer == l + 1)].join(" ")')
[[ $n -gt 255 && "$got" == "stories15M 6 $((n + (n + 254) / 255)) 0.8 5 true" ]] &&
    ok "profile: $n corpus tokens in $(((n + 254) / 255)) windows, 5 transitions of 6 layers" || bad "profile: $got (n $n)"
# percentiles sorted and positive, the mean within them, the acceptance at 0.8 what they say (1% steps)
got=$(js "$tmp/prof.json" 'j.transitions.every(t => { const p = t.ratio_percentiles;
          const below = p.filter(x => x < 0.8).length / 101;
          return p.length == 101 && p[0] > 0 && p.every((x, i) => !i || x >= p[i - 1]) &&
                 t.mean_ratio >= p[0] && t.mean_ratio <= p[100] && Math.abs(t.acceptance - below) <= 0.02 &&
                 typeof t.speculate == "boolean"; }) + " " + j.transitions.map(t => t.acceptance).join(" ")')
[[ "$got" == "true "* ]] && ok "profile: percentiles, mean ratio and acceptance at 0.8 agree (acceptance ${got#true })" ||
    bad "profile: percentiles or acceptance: $got"
# stdout: the table (one row per transition, its median the 50th percentile), the summary, then the file
rows=$(grep -cE '^ +[0-4] -> [1-5] ' "$tmp/prof.out")
med=$(awk '$2 == "->" && $1 == 2 {print $6}' "$tmp/prof.out")
pmed=$(js "$tmp/prof.json" 'j.transitions[2].ratio_percentiles[50]')
[[ $rows == 5 && -n "$med" ]] && awk -v a="$med" -v b="$pmed" 'BEGIN {exit !(a - b < 0.00006 && b - a < 0.00006)}' && grep -q "^profile: $((n + (n + 254) / 255)) positions of " "$tmp/prof.out" &&
   [[ "$(sed -n '/^{/,$p' "$tmp/prof.out")" == "$(cat "$tmp/prof.json")" ]] &&
    ok "profile: table of 5 transitions (median $med), summary, --json prints the file" ||
    bad "profile output: $rows rows, median '$med' vs '$pmed': $(head -3 "$tmp/prof.out")"

# --- generate --spec-profile --metrics on 3 ranks (greedy, speculating, tolerance 0.8): without a
# profile every transition with a saving speculates; with it only those whose acceptance at 0.8
# reaches --min-acceptance 0.5, and fewer bytes move per token
# (a cluster file with a fixed link: placements must not follow the round trips measured at start-up)
gen=(-np 3 "$bin" generate -m "$model" -n 16 --planner greedy --speculate --tolerance 0.8 --json --metrics
     --cluster "$(dirname "$0")/../data/cluster-3equal.json")
"${mpi[@]}" "${gen[@]}" > "$tmp/all.json" 2> "$tmp/all.err" || bad "generate --speculate exited $?: $(tail -1 "$tmp/all.err")"
"${mpi[@]}" "${gen[@]}" --spec-profile "$tmp/prof.json" --min-acceptance 0.5 > "$tmp/sp.json" 2> "$tmp/sp.err" ||
    bad "generate --spec-profile exited $?: $(tail -1 "$tmp/sp.err")"
all=$(js "$tmp/all.json" 'j.speculation.map(s => s.from_layer).join(",")')
sp=$(js "$tmp/sp.json" 'j.speculation.map(s => s.from_layer).join(",")')
# (the profile's transitions with acceptance >= 0.5; the plan places for them, so they need not be
# among those the plan without a profile speculates)
want=$(js "$tmp/prof.json" "j.transitions.filter(t =>
           t.ratio_percentiles.reduce((k, x, i) => x < 0.8 ? i : k, -1) / 100 >= 0.5).map(t => t.from_layer).join(\",\")")
inside=$(node -e 'const w = process.argv[2].split(","); console.log(process.argv[1].split(",").every(x => w.includes(x)))' \
         "$sp" "$want")
b_all=$(js "$tmp/all.json" 'j.plan.predicted_bytes_per_token'); b_sp=$(js "$tmp/sp.json" 'j.plan.predicted_bytes_per_token')
if [[ -n "$sp" && $inside == true && "$sp" != "$all" && "$b_sp" -lt "$b_all" ]]; then
    ok "--spec-profile: transitions $sp of $all speculate (acceptance >= 0.5 at 0.8), $b_sp instead of $b_all bytes per token"
else bad "--spec-profile: speculating '$sp' (want among '$want', nonempty, not all of '$all'); bytes $b_sp vs $b_all"; fi
# the --json metrics: every field, on every rank; each speculating transition decided once a forward
got=$(js "$tmp/sp.json" 'const f = ["rank", "weight_bytes", "kv_cache_bytes", "predicted_weight_bytes", "forwards",
          "positions", "bytes_sent", "bytes_recv", "bytes_sent_per_forward", "bytes_recv_per_forward", "seconds",
          "messages_received", "messages_lost"];
      const sec = ["attention", "projection", "ffn", "logits", "communication", "idle", "replan"];
      [j.n_ranks, j.ranks.length, j.plan.planner, j.ranks.every((r, i) => r.rank == i && f.every(k => k in r) &&
          sec.every(k => r.seconds[k] >= 0) && r.weight_bytes == r.predicted_weight_bytes && r.forwards > 0),
       j.speculation.every(s => s.decided == j.ranks[0].forwards && s.accepted <= s.decided &&
          Math.abs(s.acceptance - s.accepted / s.decided) < 1e-3),
       j.ranks.reduce((a, r) => a + r.weight_bytes, 0) >= '"$dbytes"'].join(" ")')
[[ "$got" == "3 3 greedy true true true" ]] &&
    ok "--json metrics: every field on 3 ranks, resident weights as predicted, one test per forward and transition" ||
    bad "--json metrics: $got"
# --metrics: the table on stderr says what --json says
sp_line=$(grep '^speculation: ' "$tmp/sp.err")
want=$(js "$tmp/sp.json" '"speculation: " + j.speculation.length + " transitions, " +
           j.speculation.reduce((a, s) => a + s.accepted, 0) + " of " + j.speculation.reduce((a, s) => a + s.decided, 0) +
           " tests accepted"')
tab=$(awk '$1 ~ /^[0-9]+$/ && NF == 12 {printf "%s %s %s %s;", $1, $2, $4, $5}' "$tmp/sp.err")
# the table's rounding (MB to 2 places, bytes per forward whole) against the JSON's numbers
rows=$(js "$tmp/sp.json" 'const t = "'"$tab"'".split(";").filter(x => x).map(x => x.split(" ").map(Number));
      t.length == j.ranks.length && t.every((x, i) => { const r = j.ranks[i]; return x[0] == r.rank &&
          Math.abs(x[1] - r.weight_bytes / 1e6) < 0.0051 && Math.abs(x[2] - r.bytes_sent_per_forward) < 0.6 &&
          Math.abs(x[3] - r.bytes_recv_per_forward) < 0.6; })')
plan_ms=$(sed -n 's/^plan greedy: predicted \([0-9.]*\) ms\/token.*/\1/p' "$tmp/sp.err")
want_ms=$(js "$tmp/sp.json" 'j.plan.predicted_token_ms') # %.4f there, %.3f in the table: within 0.0011
[[ "$sp_line" == "$want ("* && "$rows" == true && -n "$plan_ms" ]] &&
   awk -v a="$plan_ms" -v b="$want_ms" 'BEGIN {exit !(b > 0 && a - b < 0.0011 && b - a < 0.0011)}' &&
    grep -q '^calibrated prediction [0-9.]* ms/token' "$tmp/sp.err" &&
    ok "--metrics: plan line, '$sp_line', and 3 rank rows agree with --json" ||
    bad "--metrics: '$sp_line' vs '$want'; rows '$tab' ($rows); plan '$plan_ms' vs '$want_ms'"

# --- bench on one rank, text: positive numbers that agree with each other
"$bin" bench -m "$model" --steps 40 --repeat 2 --stream-mb 16 > "$tmp/bench.out" 2> "$tmp/bench.err" ||
    bad "bench exited $?: $(tail -1 "$tmp/bench.err")"
got=$(awk -v want="$dbytes" '
    /^TTFT / {ttft = $2} /^TPOT / {tpot = $2} /^decode / {tps = $2} /^weights\/token / {mb = $2}
    /^positions / {pos = $2 " " $3 " " $4 " " $5 " " $6}
    /^effective BW / {bw = $3; triad = $10} /^sgemv baseline / {base = $3; x = $7; sub(/x\)/, "", x)}
    END {
        okn = ttft > 0 && tpot > 0 && tps > 0 && bw > 0 && triad > 0 && base > 0 && x > 0
        cons = (tps > 0 && tpot > 0) && (tps * tpot / 1000 > 0.99 && tps * tpot / 1000 < 1.01) &&
               (bw / (want * tps / 1e9) > 0.99 && bw / (want * tps / 1e9) < 1.01) &&
               (x / (tps / base) > 0.98 && x / (tps / base) < 1.02) && mb == sprintf("%.1f", want / 1e6)
        printf "%s|%d|%d|TTFT %s ms, TPOT %s ms, %s tokens/s, %s GB/s, sgemv %s tokens/s", pos, okn, cons, ttft, tpot, tps, bw, base
    }' "$tmp/bench.out")
[[ "$got" == "40 (prompt 5, decode 35),|1|1|"* ]] &&
    ok "bench: ${got##*|} (tokens/s = 1/TPOT, bandwidth = bytes x tokens/s, baseline ratio)" ||
    bad "bench text: $got; $(head -c 600 "$tmp/bench.out")"
grep -qE '^ +0 +60\.77 ' "$tmp/bench.err" && ok "bench: one rank holds all 60.77 MB of weights" ||
    bad "bench metrics table: $(tail -2 "$tmp/bench.err")"
# --- bench on 2 ranks, --json: the single-device baseline and the speedup over it
"${mpi[@]}" -np 2 "$bin" bench -m "$model" --steps 40 --repeat 1 --stream-mb 16 --json > "$tmp/bench2.json" 2> "$tmp/bench2.err" ||
    bad "bench on 2 ranks exited $?: $(tail -1 "$tmp/bench2.err")"
got=$(js "$tmp/bench2.json" '[j.n_ranks, j.steps, j.prompt_tokens, j.decode_tokens, j.baseline, j.ranks.length,
      j.ttft_ms > 0 && j.tpot_ms > 0 && j.baseline_tokens_per_s > 0 && j.stream_triad_gbs > 0,
      Math.abs(j.decode_tokens_per_s * j.tpot_ms / 1000 - 1) < 0.01,
      Math.abs(j.speedup_vs_baseline / (j.decode_tokens_per_s / j.baseline_tokens_per_s) - 1) < 0.01,
      j.ranks.every(r => r.forwards == j.decode_tokens + 1)].join(" ")')
[[ "$got" == "2 40 5 35 single-device 2 true true true true" ]] &&
    ok "bench on 2 ranks: --json with the single-device baseline, speedup $(js "$tmp/bench2.json" j.speedup_vs_baseline)" ||
    bad "bench on 2 ranks: $got"

# --- plan --memory-model: table, CSV and PNG for stories15M on 1-3 devices
"$bin" plan --memory-model -m "$model" --max-devices 3 --prune 0,0.9 --csv "$tmp/mm.csv" --png "$tmp/mm.png" \
    > "$tmp/mm.out" 2>&1 || bad "plan --memory-model exited $?: $(tail -1 "$tmp/mm.out")"
grep -q "^memory model (CATS Q1) for stories15M: dim 288, 6 layers, 6 heads in 6 KV groups, hidden 768, vocab 32000; weights fp32, messages fp32, 256 positions" "$tmp/mm.out" &&
   [[ $(grep -cE '^ +[1-3]  (somegather|token split|head split)' "$tmp/mm.out") == 15 ]] &&
    ok "plan --memory-model: header of stories15M, 3 devices x 5 schemes" || bad "plan --memory-model: $(head -4 "$tmp/mm.out")"
# one device holds every weight (4 bytes a parameter) and K and V of 6 layers x 256 positions x 288
# in fp32, sends nothing; somegather's pruning leaves weights unused from 2 devices on, r = 0 none
kv=$((2 * L * 256 * d * 4))
got=$(awk -F, -v w=$((4 * params)) -v kv=$kv '
    NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    {n++; D = $c["D"]; s = $c["scheme"]; r = $c["prune"]
     if (D == 1 && ($c["weights_bytes"] != w || $c["moved_bytes"] != 0 || $c["sent_max_bytes"] != 0)) e = e " D1:" s
     if (D == 1 && s != "token-split-4bit" && $c["kv_bytes"] != kv) e = e " kv:" s
     if (s == "somegather" && D > 1 && r == 0.9 && !($c["weights_needed_bytes"] < $c["weights_bytes"])) e = e " r0.9:D" D
     if (s == "somegather" && r == 0 && $c["weights_needed_bytes"] != $c["weights_bytes"]) e = e " r0:D" D}
    END {print n " rows" e}' "$tmp/mm.csv")
[[ "$got" == "15 rows" && "$(head -c 8 "$tmp/mm.png" | od -An -tx1 | tr -d ' ')" == 89504e470d0a1a0a ]] &&
    ok "plan --memory-model: CSV of 15 rows ($((4 * params)) weight bytes and $kv KV bytes on one device), a PNG" ||
    bad "plan --memory-model CSV/PNG: $got; $(file "$tmp/mm.png" 2>&1)"

# --- plan --planner all: every planner's plan, then the comparison; total = TTFT + steps x TPOT, each
# TTFT the one its plan printed, vs_best against the smallest total, which is auto's choice (as --json says)
"$bin" plan -m "$model" --ranks 3 --planner all > "$tmp/all.out" 2>&1 || bad "plan --planner all exited $?"
auto=$("$bin" plan -m "$model" --ranks 3 --planner all --json 2>/dev/null | node -e 'console.log(JSON.parse(require("fs").readFileSync(0)).auto)')
got=$(awk '/^plan [a-z]+ for stories15M / {p = $2; plans++} /^  predicted TTFT / {ttft[p] = $3}
    /^schemes compared for a 32-token prompt and 128 decoded tokens/ {on = 1; next}
    on && $1 ~ /^(layerwise|greedy|tp|somegather|hybrid)$/ {
        n++; t[n] = $4; name[n] = $1; vs[n] = $5; sub(/x$/, "", vs[n])
        if ($4 / ($2 + 128 * $3) < 0.999 || $4 / ($2 + 128 * $3) > 1.001) e = e " total:" $1
        if (ttft[$1] == "" || ttft[$1] != sprintf("%.3f", $2)) e = e " ttft:" $1
        if (/auto.s choice/) {choice = $1; nc++} }
    END {best = 1e30; for (i = 1; i <= n; i++) if (t[i] < best) {best = t[i]; b = name[i]}
         for (i = 1; i <= n; i++) if (vs[i] - t[i] / best > 0.006 || t[i] / best - vs[i] > 0.006) e = e " vs:" name[i]
         print plans " " n " " nc " " choice " " b e}' "$tmp/all.out")
[[ "$got" == "7 5 1 $auto $auto" ]] &&
    ok "plan --planner all: 7 plans, 5 compared (totals = TTFT + 128 TPOT), auto's choice $auto the fastest" ||
    bad "plan --planner all: '$got' (auto '$auto')"

echo "$pass passed, $fail failed"
((fail == 0))
