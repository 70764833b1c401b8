#!/usr/bin/env bash
# meshinfer under mpirun, as a user runs it: every planner on 2, 3 and 5 ranks
# (somegather on 2, 3 and 6, the ranks that divide stories15M's 6 heads)
# prints the single-device greedy continuation; shared memory and TCP give the
# same text; --weights scatter works; the trace has one track per rank; fresh
# processes hold about their shard in memory; bad distributed input fails on
# every rank with one error line and no hang; memory-triggered re-placement
# keeps the text and fails cleanly when nothing fits; calibrate measures every
# device and link, hybrid and auto on a calibrated heterogeneous cluster keep
# the text, and a calibration from another rank count or host is refused.
# usage: cli_mpi.sh MESHINFER MODEL.h5 HOSTFILES_DIR [all|main|timing]
#   timing: only the checks that measure (calibrate and what it feeds, Voltron's
#   run-time scaling and energy), which ctest runs alone; main: the others,
#   which can share the cores (default all)
set -u
bin=$1 model=$2 hosts=$3 part=${4:-all}
part_is() { [[ $part == all || $part == "$1" ]]; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
run() { timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "$@"; }
expect_error() {
    local what=$1 re=$2; shift 2
    run "$@" >/dev/null 2>"$tmp/err"; local rc=$?
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then bad "$what: exit $rc (124 = hang)"; cat "$tmp/err"; return; fi
    if [[ $(grep -c . "$tmp/err") -ne 1 ]] || ! grep -Eq -- "^meshinfer: error: .*($re)" "$tmp/err"; then
        bad "$what: want one error line matching /$re/, got:"; sed 's/^/    /' "$tmp/err"; return; fi
    ok "$what -> $(cat "$tmp/err")"
}

# an importance file that ranks FFN shards differently per layer (pruning; Voltron's scaling)
node -e 'const L = []; for (let l = 0; l < 6; l++) L.push({layer: l, q8_0: 0.01 * (6 - l), q4_0: 0.02 * (6 - l),
    prune: Array.from({length: 12}, (_, j) => (j * 5 + l * 7) % 12)});
  require("fs").writeFileSync(process.argv[1], JSON.stringify({model: "stories15M", synthetic: false, n_layers: 6,
    dim: 288, hidden_dim: 768, ffn_shard: 64, layers: L}))' "$tmp/imp-prune.json"
prompt="Once upon a time, there was a little girl named Lily"
want="$prompt. She loved to play outside in the sunshine. One day, she saw a big, red ball in the sky. It was the sun! She thought it was so pretty."
if part_is main; then
for np in 2 3 5; do
    for p in layerwise roundrobin random greedy tp; do
        out=$(run -np $np --mca btl self,vader "$bin" generate -m "$model" -p "$prompt" -n 38 --planner $p 2>"$tmp/err")
        if [[ "$out" == "$want" ]]; then ok "$p on $np ranks (shared memory): known continuation"
        else bad "$p on $np ranks: got '$out' ($(tail -1 "$tmp/err"))"; fi
    done
done
for np in 2 3 6; do
    out=$(run -np $np --mca btl self,vader "$bin" generate -m "$model" -p "$prompt" -n 38 --planner somegather 2>"$tmp/err")
    if [[ "$out" == "$want" ]]; then ok "somegather on $np ranks (shared memory): known continuation"
    else bad "somegather on $np ranks: got '$out' ($(tail -1 "$tmp/err"))"; fi
done
for p in greedy somegather; do
    out=$(run -np 3 --mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt "$bin" generate -m "$model" \
          -p "$prompt" -n 38 --planner $p 2>"$tmp/err")
    [[ "$out" == "$want" ]] && ok "$p on 3 ranks over TCP (osc pt2pt): same text" || bad "TCP run ($p): '$out' $(cat "$tmp/err")"
done
out=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 38 --planner roundrobin --weights scatter 2>"$tmp/err")
[[ "$out" == "$want" ]] && ok "--weights scatter: same text" || bad "scatter: '$out' $(cat "$tmp/err")"

# trace: valid Chrome trace JSON with one named track per rank
run -np 4 "$bin" generate -m "$model" -n 10 --planner greedy --trace "$tmp/trace.json" >/dev/null 2>&1
tracks=$(node -e 'const t = JSON.parse(require("fs").readFileSync(process.argv[1]));
  const names = t.traceEvents.filter(e => e.ph === "M").map(e => e.args.name);
  const x = t.traceEvents.filter(e => e.ph === "X" && e.dur >= 0);
  console.log(names.length + " " + new Set(x.map(e => e.tid)).size)' "$tmp/trace.json" 2>&1)
[[ "$tracks" == "4 4" ]] && ok "trace: 4 named tracks with events" || bad "trace tracks: $tracks"

# stdout and stderr travel apart under mpirun: the summary must still start a
# line of its own when both go to one terminal (mixed in 2 of 10 runs before)
glued=0
for _ in 1 2 3 4 5 6; do
    run -np 2 "$bin" generate -m "$model" -n 6 > "$tmp/both" 2>&1
    grep -q '^generate: ' "$tmp/both" || glued=$((glued + 1))
done
[[ $glued == 0 ]] && ok "summary line on its own line in 6 of 6 runs under mpirun" ||
    bad "summary glued to the text in $glued of 6 runs"

# memory: a fresh process holds about its shard (resident growth within 10%),
# fp32 and q4_0 (0.5625 bytes a weight; a stories110M-shaped synthetic model,
# so shards are tens of MB)
"$bin" synth --shape stories110M --dtype q4_0 --out "$tmp/q4.h5" >/dev/null 2>&1 || bad "synth q4_0 model"
for m in "$model" "$tmp/q4.h5"; do
    for p in layerwise tp somegather; do
        run -np 3 "$bin" generate -m "$m" -n 5 --planner $p --json > "$tmp/m.json" 2>/dev/null
        res=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
          for (const r of j.ranks) if (r.weight_bytes >= 8e6)
            console.log(r.rank, r.weight_bytes, r.rss_growth_bytes, r.predicted_weight_bytes,
                        Math.abs(r.rss_growth_bytes - r.weight_bytes) <= 0.1 * r.weight_bytes &&
                        r.weight_bytes === r.predicted_weight_bytes ? "ok" : "BAD")' "$tmp/m.json")
        if [[ -n "$res" ]] && ! grep -q BAD <<<"$res"; then
            ok "$p, $(basename "$m"): resident weights within 10% of each shard: $(tr '\n' ';' <<<"$res")"
        else bad "$p, $(basename "$m") memory: $res"; fi
    done
done

# bad input: one error line (mpirun -q adds nothing), non-zero exit, no hang
printf '{"devices": [{"mem_mb": 4000}, {"mem_mb": 4000}]}' > "$tmp/two.json"
printf '{"devices": [{"mem_mb": 4000}, {"mem_mb": 4000},]}' > "$tmp/syntax.json"
printf '{"devices": [{"mem_mb": 4000, "name": "big"}, {"mem_mb": 12, "name": "tiny"}, {"mem_mb": 12, "name": "tiny2"}]}' > "$tmp/small.json"
printf '{"devices": [{"mem_mb": 4000}, {"mem_mb": "lots"}]}' > "$tmp/type.json"
"$bin" synth --shape tiny-gqa --out "$tmp/gqa.h5" >/dev/null 2>&1
"$bin" plan -m "$tmp/gqa.h5" --ranks 2 --out "$tmp/gqa-plan.json" >/dev/null
"$bin" plan -m "$model" --ranks 3 --out "$tmp/plan3.json" >/dev/null
expect_error "cluster file lists 2 devices, job has 3" "lists 2 devices but the job has 3" \
    -np 3 "$bin" generate -m "$model" --cluster "$tmp/two.json"
expect_error "malformed cluster file" "syntax error at byte" -np 2 "$bin" generate -m "$model" --cluster "$tmp/syntax.json"
expect_error "non-numeric memory budget" "mem_mb" -np 2 "$bin" generate -m "$model" --cluster "$tmp/type.json"
expect_error "budgets too small" "tiny.*short by [0-9]+ bytes" -np 3 "$bin" generate -m "$model" --cluster "$tmp/small.json"
expect_error "budgets too small (layerwise)" "device tiny.*short by [0-9]+ bytes" \
    -np 3 "$bin" generate -m "$model" --cluster "$tmp/small.json" --planner layerwise
expect_error "plan for another model" "layers|KV heads" -np 2 "$bin" generate -m "$model" --plan-file "$tmp/gqa-plan.json"
expect_error "plan for another rank count" "for 3 ranks but the job has 2" \
    -np 2 "$bin" generate -m "$model" --plan-file "$tmp/plan3.json"
expect_error "model missing on every rank" "cannot open model file" -np 3 "$bin" generate -m "$tmp/none.h5"
expect_error "model missing, --weights scatter" "cannot open model file" \
    -np 3 "$bin" generate -m "$tmp/none.h5" --weights scatter
expect_error "unknown planner" "unknown planner 'best'" -np 2 "$bin" generate -m "$model" --planner best
expect_error "ranks started as different commands" "rank 1 was started as another command than rank 0's 'generate'" \
    -np 1 "$bin" generate -m "$model" -n 3 : -np 1 "$bin" perplexity -m "$model" --text "$model"
expect_error "prompt past the context on 3 ranks" "context is 256 tokens" \
    -np 3 "$bin" generate -m "$model" -p "$(for i in $(seq 300); do printf 'word '; done)"
expect_error "steps past the context on 3 ranks" "exceeds the context" -np 3 "$bin" generate -m "$model" -n 1000
# memory-triggered re-placement (HeadSplit): workers whose budgets hold the KV
# cache for the whole context only once heads move to the big device
tight="$(dirname "$0")/cluster-tight.json"
want200=$("$bin" generate -m "$model" -n 200 --ignore-eos --json 2>/dev/null |
          node -e 'console.log(JSON.parse(require("fs").readFileSync(0)).tokens.join(" "))')
out=$(run -np 4 "$bin" generate -m "$model" -n 200 --ignore-eos --cluster "$tight" --kv-positions 32 --replan \
      --json 2>"$tmp/err")
summary=$(node -e 'const j = JSON.parse(process.argv[1]);
  const moved = j.replans.filter(e => e.moved), kv = j.ranks.reduce((s, r) => s + r.kv_bytes_moved_sent, 0);
  const recv = j.ranks.reduce((s, r) => s + r.kv_bytes_moved_recv, 0);
  const order = j.replans.every(e => e.kv_positions >= e.position);
  console.log([j.replans.length >= 2, moved.length >= 1, kv > 0 && kv === recv, order, j.kv_positions === 256].join(" "));
  console.error(j.tokens.join(" "))' "$out" 2>"$tmp/text")
[[ "$summary" == "true true true true true" ]] && ok "--replan: placements re-made as the KV cache grows, KV heads moved" \
    || bad "--replan: $summary $(tail -3 "$tmp/err")"
[[ -n "$want200" && "$(cat "$tmp/text")" == "$want200" ]] && ok "--replan: same 200 tokens as one rank after moving KV heads" \
    || bad "--replan text differs: $(head -c 200 "$tmp/text")"
grep -q "re-placement at position [0-9]*: .*new placement" "$tmp/err" && ok "--replan: progress line per re-placement" \
    || bad "--replan: no progress line"
# which small device fills first depends on the placement, and the placement on the round trips measured at start-up
expect_error "static placement outgrows a budget" "memory: at position [0-9]+ device small[0-9] .*over its budget.*--replan" \
    -np 4 "$bin" generate -m "$model" -n 200 --ignore-eos --cluster "$tight" --kv-positions 32
sed 's/"mem_mb": 20/"mem_mb": 9.2/' "$tight" > "$tmp/tooshort.json"
# (progress lines of the re-placements before it, then one error line)
run -np 4 "$bin" generate -m "$model" -n 200 --ignore-eos --cluster "$tmp/tooshort.json" --kv-positions 32 --replan \
    >/dev/null 2>"$tmp/err"; rc=$?
if ((rc != 0 && rc != 124)) && [[ $(grep -c "error" "$tmp/err") == 1 ]] &&
   tail -1 "$tmp/err" | grep -Eq "^meshinfer: error: memory: at position [0-9]+ no placement fits.*short by" &&
   ! grep -qv "^meshinfer: \(re-placement\|error\)" "$tmp/err"; then
    ok "no placement fits the grown cache -> $(tail -1 "$tmp/err")"
else bad "no placement fits: exit $rc"; sed 's/^/    /' "$tmp/err"; fi
expect_error "--replan with a fixed plan file" "--replan needs a planner" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/plan3.json" --replan
expect_error "a one-device command under mpirun" "profile runs on one device; start it without mpirun" \
    -np 2 "$bin" profile -m "$model" --text "$tmp/two.json" --out "$tmp/prof.json"
expect_error "--plan-file with a planner" "--plan-file fixes the placement" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/plan3.json" --planner roundrobin
expect_error "--kv-positions past the context" "kv-positions 300 is more than the model's context" \
    -np 2 "$bin" generate -m "$model" --kv-positions 300
# environment faults named: a transport without a one-sided component, too little /dev/shm
expect_error "TCP without --mca osc pt2pt" "one-sided window.*--mca osc pt2pt" \
    -np 3 --mca btl self,tcp --mca btl_tcp_if_include lo "$bin" generate -m "$model" -n 2 --planner greedy
if unshare -m true 2>/dev/null; then
    unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$@"' sh \
        timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        -np 3 "$bin" generate -m "$model" -n 2 --planner greedy > /dev/null 2> "$tmp/shm.err"; rc=$?
    if [[ $rc -ne 0 && $rc -ne 124 && $(grep -c . "$tmp/shm.err") == 1 ]] && grep -q "/dev/shm has [0-9]* KB free" "$tmp/shm.err"; then
        ok "64 KB /dev/shm -> $(cat "$tmp/shm.err")"
    else bad "64 KB /dev/shm: exit $rc: $(cat "$tmp/shm.err")"; fi
else
    echo "skip: 64 KB /dev/shm (no unshare -m here)"
fi
# CATS somegather
expect_error "somegather on 4 ranks of 6 heads" "4 does not divide the model's 6 heads.*run on 1, 2, 3, 6 ranks" \
    -np 4 "$bin" generate -m "$model" --planner somegather
expect_error "somegather on 7 ranks of 6 heads" "the model has only 6 heads.*run on 1, 2, 3, 6 ranks" -np 7 "$bin" generate -m "$model" --planner somegather
expect_error "--prune 1" "outside \\[0, 1\\)" -np 2 "$bin" generate -m "$model" --planner somegather --prune 1
expect_error "--prune negative" "--prune" -np 2 "$bin" generate -m "$model" --planner somegather --prune -0.1
expect_error "--prune unknown exchange" "unknown exchange 'qkv'" -np 2 "$bin" generate -m "$model" --planner somegather --prune qkv=0.5
expect_error "--prune-mode unknown" "not aware or magnitude" -np 2 "$bin" generate -m "$model" --planner somegather --prune-mode best
expect_error "--loss above 1" "--loss" -np 2 "$bin" generate -m "$model" --planner somegather --loss 1.5
expect_error "--loss-mode unknown" "not link, receiver or sender" -np 2 "$bin" generate -m "$model" --planner somegather --loss-mode all
expect_error "--prune with a head-level planner" "apply to --planner somegather" -np 2 "$bin" generate -m "$model" --prune 0.5
expect_error "--loss with a head-level planner" "apply to somegather" -np 2 "$bin" generate -m "$model" --loss 0.1
expect_error "--speculate with somegather" "--speculate needs a head-level planner" \
    -np 2 "$bin" generate -m "$model" --planner somegather --speculate
"$bin" plan -m "$model" --ranks 3 --planner somegather --out "$tmp/sg3.json" >/dev/null
node -e 'const f = process.argv[1], p = JSON.parse(require("fs").readFileSync(f));
  p.somegather.send = [{layer: 0, exchange: "heads", rank: 1, columns: [0, 1]}];
  require("fs").writeFileSync(process.argv[2], JSON.stringify(p));
  p.somegather.send = [{layer: 9, exchange: "heads", rank: 1, columns: []}];
  require("fs").writeFileSync(process.argv[3], JSON.stringify(p));
  p.somegather.send = [{layer: 0, exchange: "qkv", rank: 1, columns: []}];
  require("fs").writeFileSync(process.argv[4], JSON.stringify(p));' \
  "$tmp/sg3.json" "$tmp/sg-col.json" "$tmp/sg-layer.json" "$tmp/sg-xch.json"
out=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 38 --plan-file "$tmp/sg3.json" 2>"$tmp/err")
[[ "$out" == "$want" ]] && ok "somegather plan file: same text" || bad "somegather plan file: '$out' $(cat "$tmp/err")"
# a hand-edited plan: its stated ratio without the send lists that implement it
"$bin" plan -m "$model" --ranks 3 --planner somegather --prune 0.5 --out "$tmp/sg-half.json" > /dev/null
node -e 'const fs = require("fs"), p = JSON.parse(fs.readFileSync(process.argv[1]));
  delete p.somegather.send; fs.writeFileSync(process.argv[2], JSON.stringify(p));' "$tmp/sg-half.json" "$tmp/sg-nosend.json"
run -np 3 "$bin" generate -m "$model" -n 3 --plan-file "$tmp/sg-nosend.json" --json > "$tmp/ns.json" 2> "$tmp/ns.err"
ns=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
  console.log(j.somegather.prune.hidden, j.somegather.unsent_fraction.hidden)' "$tmp/ns.json" 2>&1)
if [[ "$ns" == "0.5 0" ]] && grep -q "prune.ratio disagrees with the send lists, which are what runs" "$tmp/ns.err"; then
    ok "plan file whose ratio disagrees with its send lists: warned, --json reports what ran ($ns)"
else bad "plan file ratio vs send lists: $ns $(cat "$tmp/ns.err")"; fi
expect_error "send list with another rank's columns" "rank 1's send list has column 0, outside its columns" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/sg-col.json"
node -e 'const fs = require("fs"), p = JSON.parse(fs.readFileSync(process.argv[1]));
  p.somegather.send = [{layer: 0, exchange: "heads", rank: 1, columns: [96, 96]}];
  fs.writeFileSync(process.argv[2], JSON.stringify(p));' "$tmp/sg3.json" "$tmp/sg-dup.json"
expect_error "send list naming a column twice" "rank 1's send list has column 96 twice" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/sg-dup.json"
expect_error "send list for a layer the model lacks" "layer must be a layer of the model" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/sg-layer.json"
expect_error "send list for an unknown exchange" "exchange must be attn_in, heads, ffn_in or hidden" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/sg-xch.json"
expect_error "--prune with a plan file" "--plan-file fixes the placement" \
    -np 3 "$bin" generate -m "$model" --plan-file "$tmp/sg3.json" --prune 0.5
fi
if part_is timing; then
# Voltron: calibrate on 3 ranks, then hybrid (prefill and decode
# placed apart on a tight heterogeneous cluster) and auto give the one-rank text
# (its own timeout: it now times every dtype of the ladder, k-quants included, which takes over two minutes
# in the gcov-instrumented build of CI)
if timeout 480 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 3 \
    "$bin" calibrate -m "$model" --seconds 0.01 --link-bytes 65536 -o "$tmp/cal3.json" > "$tmp/cal.out" 2>"$tmp/err"; then
    calok=$(node -e 'const c = JSON.parse(require("fs").readFileSync(process.argv[1]));
      const d = c.devices;
      const good = d.length === 3 && c.calibration.n_ranks === 3 && d.every(x => x.compute && x.compute.pass_ns.fp32 > 0 &&
        x.compute.pos_ns.q4_0 > 0 && x.compute.kv_ns > 0 && x.hwloc && x.hwloc.cores >= 1 && x.hwloc.kernel_mem_bytes > 0) &&
        c.links.latency_ms.length === 3 && c.links.bandwidth_mbit[0][1] > 0;
      console.log(good ? "ok" : "bad")' "$tmp/cal3.json" 2>&1)
    [[ $calok == ok ]] && ok "calibrate on 3 ranks: every device measured and described, every link" ||
        bad "calibrate output: $calok $(head -c 300 "$tmp/cal3.json")"
else bad "calibrate on 3 ranks: $(cat "$tmp/err")"; fi
# a tight heterogeneous cluster from that calibration: fast rank 0 with room for the embeddings and
# a third of the layers, ranks 1 and 2 two and four times slower with less
node -e 'const fs = require("fs"), c = JSON.parse(fs.readFileSync(process.argv[1]));
  const k = [1, 2, 4], mem = [46, 13, 13];
  c.devices.forEach((d, i) => { d.mem_mb = mem[i]; for (const t in d.compute.pass_ns) { d.compute.pass_ns[t] = c.devices[0].compute.pass_ns[t] * k[i]; d.compute.pos_ns[t] = c.devices[0].compute.pos_ns[t] * k[i]; } });
  fs.writeFileSync(process.argv[2], JSON.stringify(c));' "$tmp/cal3.json" "$tmp/tight3.json"
out=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 38 --cluster "$tmp/tight3.json" --planner hybrid \
      --phase-plans both --json 2>"$tmp/err")
hy=$(node -e 'const j = JSON.parse(process.argv[1]); console.log(j.text === process.argv[2] ? "same" : "differs", j.phase_switches)'      "$out" "${want#"$prompt"}" 2>&1)
[[ $hy == "same"* ]] && ok "hybrid on 3 ranks of a tight heterogeneous cluster: one-rank text (phase switches: ${hy#same })" ||
    bad "hybrid: $hy $(tail -2 "$tmp/err")"
out=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 38 --cluster "$tmp/tight3.json" --planner auto 2>"$tmp/err")
if [[ "$out" == "$want" ]] && grep -q "planner auto: [a-z]* (predicted TTFT" "$tmp/err"; then
    ok "--planner auto: $(grep -o 'planner auto: [a-z]*' "$tmp/err"), one-rank text"
else bad "--planner auto: '$out' $(cat "$tmp/err")"; fi
printf '{"model": "stories15M", "n_layers": 6, "dim": 288, "ranks": 3, "points": [{"r": 0, "perplexity": 3.58}, {"r": 0.02, "perplexity": 3.6}, {"r": 0.05, "perplexity": 55.2}]}' > "$tmp/sgq.json"
out=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 38 --cluster "$tmp/tight3.json" --planner auto \
      --ppl-budget 5 --somegather-quality "$tmp/sgq.json" 2>"$tmp/err")
grep -q "planner auto: [a-z]* (predicted .* somegather at r = 0.02 (measured perplexity 3.600, +0.6%; budget 5%)" "$tmp/err" &&
    [[ -n "$out" ]] && ok "--planner auto --ppl-budget 5: somegather judged at r = 0.02, $(grep -o 'planner auto: [a-z]*' "$tmp/err") run" ||
    bad "--planner auto --ppl-budget: $(head -2 "$tmp/err")"
fi
if part_is main; then
# a soak in one job -- the same generation 6 times on 4 ranks whose budgets force
# re-placements: each generation starts from the first placement again (a re-placement) and re-places
# as it grows, every repeat gives the first run's tokens, no rank's resident memory grows by 1 MB
run -np 4 "$bin" generate -m "$model" -n 120 --ignore-eos --repeat 6 --cluster "$(dirname "$0")/cluster-tight.json" \
    --kv-positions 32 --replan --json > "$tmp/soak.json" 2> "$tmp/soak.err"
sk=$(node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1])), j = d.repeat;
  const g = j.rss_mb_after_last.map((x, r) => x - j.rss_mb_after_first_repeat[r]);
  console.log(j.runs, j.same_tokens, d.replans_moved >= 2 * (j.runs + 1) - 1 ? "re-placed" : `only ${d.replans_moved} moves`,
              Math.max(...g).toFixed(3), g.every(x => x < 1) ? "flat" : "grew")' "$tmp/soak.json" 2>&1)
[[ $sk =~ ^5\ 5\ re-placed\ .*\ flat$ ]] && grep -q "re-placement at position 0: .*the first placement again" "$tmp/soak.err" &&
    ok "--repeat 6 on 4 ranks, re-placed in every generation: every repeat the first run's tokens, RSS growth at most ${sk#5 5 re-placed } MB" ||
    bad "--repeat soak: $sk $(tail -2 "$tmp/soak.err")"
expect_error "--repeat with a journal" "--repeat runs one generation again and again" \
    -np 2 "$bin" generate -m "$model" --repeat 3 --journal "$tmp/j.json"
# Voltron shard-wise pruning: a model with 3 of every layer's 12 FFN shards pruned (hidden_dim 576; an
# importance file that ranks shards differently per layer) gives the one-rank text on 3 ranks, per scheme
"$bin" quantize -m "$model" --prune-ffn 3 --importance "$tmp/imp-prune.json" --out "$tmp/pruned.h5" > /dev/null 2>&1
one=$("$bin" generate -m "$tmp/pruned.h5" -p "$prompt" -n 30 2>/dev/null)
for pl in greedy tp somegather; do
    got=$(run -np 3 "$bin" generate -m "$tmp/pruned.h5" -p "$prompt" -n 30 --planner $pl 2>"$tmp/err")
    [[ -n "$one" && "$got" == "$one" ]] && ok "pruned model (hidden_dim 576) on 3 ranks, $pl: one-rank text" ||
        bad "pruned model, $pl: '$got' against one rank's '$one' $(tail -1 "$tmp/err")"
done
# the same shards pruned at run time (--prune-ffn: packed out of the loaded weights, not computed):
# the pruned file's text, on one rank bit for bit (same products over the same kept units) and on
# 3 ranks per scheme, also with q4_0 weights (w2's columns packed in whole blocks)
pr=(--prune-ffn 3 --importance "$tmp/imp-prune.json")
got=$("$bin" generate -m "$model" -p "$prompt" -n 30 "${pr[@]}" 2>"$tmp/err")
[[ -n "$one" && "$got" == "$one" ]] && ok "--prune-ffn 3 at run time on one rank: the pruned file's text" ||
    bad "--prune-ffn 3 at run time: '$got' against the pruned file's '$one' $(tail -1 "$tmp/err")"
for pl in layerwise tp somegather; do
    got=$(run -np 3 "$bin" generate -m "$model" -p "$prompt" -n 30 --planner $pl "${pr[@]}" 2>"$tmp/err")
    [[ -n "$one" && "$got" == "$one" ]] && ok "--prune-ffn 3 at run time on 3 ranks, $pl: the pruned file's text" ||
        bad "--prune-ffn 3 at run time, $pl: '$got' against '$one' $(tail -1 "$tmp/err")"
done
"$bin" quantize -m "$model" --dtype q4_0 --out "$tmp/q4s.h5" > /dev/null 2>&1
"$bin" quantize -m "$model" --dtype q4_0 "${pr[@]}" --out "$tmp/q4p.h5" > /dev/null 2>&1
# tp sums partial products in another order, and q4_0 rounds activations to int8: a near tie may
# pick another word, so the pruned q4_0 file's mean NLL over its own text is compared instead
# (1% apart at most, measured 0.25%; a misplaced block of w2's columns moves it by whole nats)
one4=$("$bin" generate -m "$tmp/q4p.h5" -p "$prompt" -n 60 2>/dev/null)
printf '%s\n' "$one4" > "$tmp/one4.txt"
nll1=$("$bin" perplexity -m "$tmp/q4p.h5" --text "$tmp/one4.txt" 2>/dev/null | awk '/^tokens/ {print $4}')
nll3=$(run -np 3 "$bin" perplexity -m "$tmp/q4s.h5" --text "$tmp/one4.txt" --planner tp "${pr[@]}" 2>"$tmp/err" |
       awk '/^tokens/ {print $4}')
[[ -n "$nll1" && -n "$nll3" ]] && awk -v a="$nll1" -v b="$nll3" 'BEGIN {d = a - b; exit !((d < 0 ? -d : d) <= 0.01 * a)}' &&
    ok "--prune-ffn 3 on q4_0 weights, tp on 3 ranks: the pruned q4_0 file's mean NLL ($nll3 against $nll1)" ||
    bad "--prune-ffn 3 on q4_0, tp: mean NLL '$nll3' against the pruned file's '$nll1' $(tail -1 "$tmp/err")"
expect_error "--prune-ffn over half the shards" "at most half of the 12 FFN shards" \
    -np 2 "$bin" generate -m "$model" --prune-ffn 7 --importance "$tmp/imp-prune.json"
expect_error "--prune-ffn without shard measurements" "--prune-ffn needs --importance FILE with FFN shard measurements" \
    -np 2 "$bin" generate -m "$model" --prune-ffn 2
fi
if part_is timing; then
expect_error "calibration from another rank count" "calibrated on 3 ranks but the job has 2" \
    -np 2 "$bin" generate -m "$model" --cluster "$tmp/cal3.json"
sed 's/"host":[[:space:]]*"[^"]*"/"host": "pi-elsewhere"/' "$tmp/cal3.json" > "$tmp/cal-other.json"
expect_error "calibration from another machine" "calibrated with rank 0 on host 'pi-elsewhere'" \
    -np 3 "$bin" generate -m "$model" --cluster "$tmp/cal-other.json"
expect_error "calibrate over its own input" "same file" \
    -np 2 "$bin" calibrate -m "$model" -o "$model"
expect_error "--phase-plans without hybrid" "--phase-plans applies to --planner hybrid" \
    -np 2 "$bin" generate -m "$model" --planner tp --phase-plans decode
node -e 'const fs = require("fs"), c = JSON.parse(fs.readFileSync(process.argv[1]));
  c.devices.forEach(d => d.mem_mb = 5); fs.writeFileSync(process.argv[2], JSON.stringify(c));' "$tmp/cal3.json" "$tmp/none3.json"
expect_error "--planner auto where nothing fits" "--planner auto: no scheme fits" \
    -np 3 "$bin" generate -m "$model" --cluster "$tmp/none3.json" --planner auto
# Voltron communication scaling: an unreachable --tpot-ms, no device's compute to blame, lowers
# the messages twice (fp32 -> fp16 -> q8_0), each decision logged with its cost, and the run goes on
run -np 3 "$bin" generate -m "$model" -n 60 --planner tp --tpot-ms 0.01 --json > "$tmp/sc.json" 2> "$tmp/sc.err"
sc=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); const d = j.scaling.decisions;
  console.log(d.map(x => x.kind + ":" + x.wire_from + ">" + x.wire_to).join(" "), j.scaling.token_ms.length,
              j.generated_tokens, d.every(x => x.decide_us > 0 && x.apply_ms > 0 && x.poll_ms > 0) ? "costed" : "uncosted")' \
     "$tmp/sc.json" 2>&1)
[[ $sc == "wire:fp32>fp16 wire:fp16>q8_0 59 60 costed" ]] && grep -q "scaling: baseline after token 16" "$tmp/sc.err" &&
    grep -q "scaling after token [0-9]*: TPOT .* over the 0.01 ms target; no device's compute explains it" "$tmp/sc.err" &&
    ok "--tpot-ms: messages lowered fp32 -> fp16 -> q8_0, each decision diagnosed and costed, 60 tokens" ||
    bad "--tpot-ms: $sc $(head -3 "$tmp/sc.err")"
# Voltron computation scaling: rank 1 (every layer) becomes 20x slower once the baseline is taken
# (measured well over 1.5x even on a busy machine: the diagnosis needs 1.3x);
# the controller blames it and lowers layers it holds (the least important, the last, first), and
# as every layer at q4_0 is still too slow at 20x, then prunes their FFN shards; the run goes on
echo 1 > "$tmp/slow"
gen=(generate -m "$model" -n 240 --ignore-eos --planner layerwise --tpot-ms 8 --json --importance "$tmp/imp-prune.json")
timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    -np 1 "$bin" "${gen[@]}" : -np 1 env MESHINFER_SLOWDOWN_FILE="$tmp/slow" "$bin" "${gen[@]}" \
    > "$tmp/cs.json" 2> "$tmp/cs.err" &
job=$!
for _ in $(seq 300); do grep -q "scaling: baseline" "$tmp/cs.err" 2>/dev/null && break; sleep 0.1; done
base_ms=$(grep -o "rank 1 [0-9.]* ms" "$tmp/cs.err" | head -1 | awk '{print $3}')
echo 20 > "$tmp/slow"
wait $job
cs=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); const d = j.scaling.decisions;
  const w = d.find(x => x.kind === "weights" && !x.restore);
  const p = d.some(x => x.kind === "weights" && !x.restore && /FFN shards of layers [0-9 ()]* pruned/.test(x.change));
  console.log(w ? `rank${w.rank} ${w.slowdown > 1.5 ? "slowed" : "slowdown " + w.slowdown} ${w.change}` : "none",
              p ? "pruned" : "unpruned", j.generated_tokens)' \
     "$tmp/cs.json" 2>&1)
# the target, 8 ms, is missed at 20x and met before only if rank 1's step is 0.6 to 3 ms (about 0.9
# here): say so rather than fail on a much faster or slower machine
if awk -v b="$base_ms" 'BEGIN {exit !(b >= 0.6 && b <= 3)}'; then
    [[ $cs =~ ^rank1\ slowed\ layers\ .*5[0-9\ ]*-\>\ q[48]_0.*\ pruned\ 240$ ]] &&
        ok "--tpot-ms: a slowed device's layers lowered from the least important, then FFN shards pruned ($cs; baseline $base_ms ms a step)" ||
        bad "--tpot-ms on a slowed device: $cs (baseline $base_ms ms) $(grep scaling "$tmp/cs.err" | head -3)"
else
    ok "--tpot-ms on a slowed device: skipped, rank 1's step ($base_ms ms) is not within 0.6-3 ms for an 8 ms target"
fi
# and when the KV cache outgrows a device's budget, with --tpot-ms its layers are lowered before the
# run would stop (no --replan): the run completes
run -np 4 "$bin" generate -m "$model" --cluster "$(dirname "$0")/cluster-tight.json" --planner layerwise \
    --kv-positions 64 -n 200 --tpot-ms 1000 --json > "$tmp/kv.json" 2> "$tmp/kv.err"
kv=$(node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
  console.log(j.generated_tokens, j.scaling.decisions.filter(x => x.kind === "weights" && /KV cache/.test(x.trigger)).length)' \
     "$tmp/kv.json" 2>&1)
[[ $kv =~ ^200\ [1-9] ]] && grep -q "scaling at position 105: the KV cache of 105 positions would take small1 (rank 1)" "$tmp/kv.err" &&
    ok "--tpot-ms: the KV cache past a budget lowers that device's layers instead of stopping ($kv)" ||
    bad "--tpot-ms under KV pressure: $kv $(grep -m2 "scaling\|error" "$tmp/kv.err")"
# Voltron §4.4 energy: under a generous target, --energy runs every device of a cluster whose
# dynamic power dominates at its lower level (emulated: compute stretched); the run's measured
# energy falls below the same run's at top frequency, and TPOT stays under the target
for e in top energy; do
    extra=(); [[ $e == energy ]] && extra=(--energy)
    run -np 3 "$bin" generate -m "$model" --cluster "$(dirname "$0")/cluster-dvfs.json" --planner layerwise -n 60 \
        --tpot-ms 60 "${extra[@]}" --json > "$tmp/en-$e.json" 2> "$tmp/en-$e.err"
done
en=$(node -e 'const fs = require("fs"), a = JSON.parse(fs.readFileSync(process.argv[1])), b = JSON.parse(fs.readFileSync(process.argv[2]));
  console.log(a.energy.freq.join(","), b.energy.freq.join(","), b.energy.joules < a.energy.joules ? "less" : "more",
              b.tpot_ms < 60 ? "in-target" : "over", a.energy.power, b.energy.edp_js > 0 ? "edp" : "no-edp")' \
     "$tmp/en-top.json" "$tmp/en-energy.json" 2>&1)
[[ $en == "1,1,1 0.6,0.6,0.6 less in-target cluster file edp" ]] && grep -q "energy: DVFS levels ctl 0.60" "$tmp/en-energy.err" &&
    ok "--energy: lower DVFS levels under the target, less energy measured ($en)" ||
    bad "--energy: $en $(grep -m2 "energy\|error" "$tmp/en-energy.err")"
expect_error "--energy with a target the top frequencies miss" "no margin to spend on lower frequencies" \
    -np 3 "$bin" generate -m "$model" --cluster "$(dirname "$0")/cluster-dvfs.json" --planner layerwise --tpot-ms 0.001 --energy
fi
echo "$pass passed, $fail failed"
((fail == 0))
