#!/usr/bin/env bash
# A generation journal is trusted only as the record of one run of this
# model: generate --resume refuses, whole, a journal whose token lines were
# swapped or repeated, whose last sampler state was replaced, that was written
# with another model file of the same shape, whose prompt text or prompt
# tokens were changed, whose request was edited, or of an earlier version --
# exit non-zero, one error line naming the journal's line and the reason,
# nothing printed and the journal byte for byte as it was. An untouched journal
# cut short resumes to the uninterrupted run's text, greedy and sampled
# (temperature 0.7, a seed), and the journal it goes on writing, read back, is
# the uninterrupted run's journal. One process, no MPI.
# usage: journal_check.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
steps=40 cut=16 # the request and 15 token lines kept

# refused NAME JOURNAL REGEX [generate options]: --resume JOURNAL fails with one error line matching
# REGEX, prints nothing and leaves JOURNAL as it was
refused() {
    local what=$1 j=$2 re=$3; shift 3
    cp "$j" "$tmp/before"
    timeout 120 "$bin" generate --resume "$j" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    local rc=$?
    if ((rc == 0 || rc > 2)); then bad "$what: exit $rc"; sed 's/^/    /' "$tmp/err" | tail -3; return; fi
    sed -i '/has synthetic weights (seeded random)/d' "$tmp/err" # (a note, not an error: said at load)
    if [[ $(grep -c . "$tmp/err") -ne 1 ]] || ! grep -Eq -- "^meshinfer: error: .*$re" "$tmp/err"; then
        bad "$what: want one error line matching /$re/, got:"; sed 's/^/    /' "$tmp/err"; return
    fi
    if [[ -s $tmp/out ]] || ! cmp -s "$j" "$tmp/before" || compgen -G "$j.partial*" > /dev/null; then
        bad "$what: refused, but something was written (stdout $(wc -c < "$tmp/out") bytes; journal changed or a .partial left)"
        return
    fi
    ok "$what -> $(cat "$tmp/err")"
}

for mode in greedy sampled; do
    opts=(); [[ $mode == sampled ]] && opts=(-t 0.7 -s 11)
    full="$tmp/$mode.json"
    "$bin" generate -m "$model" -n $steps --ignore-eos "${opts[@]}" --journal "$full" > "$tmp/$mode.txt" 2> "$tmp/err" ||
        { bad "$mode: the uninterrupted run failed: $(tail -1 "$tmp/err")"; continue; }
    n=$(grep -c '^t [0-9]* [0-9a-f]\{16\} [0-9a-f]\{16\}$' "$full")
    if ((n == steps)) && [[ $(tail -1 "$full") =~ ^done\ [0-9a-f]{16}$ ]]; then ok "$mode: $n token lines 't TOKEN STATE CHECK' and 'done CHECK'"
    else bad "$mode: $n token lines of $steps, last line '$(tail -1 "$full")'"; fi
    states=$(awk '/^t / {print $3}' "$full" | sort -u | wc -l)
    if [[ $mode == greedy ]]; then ((states == 1)) && ok "greedy: the sampler state never advances" || bad "greedy: $states states"
    else ((states == steps)) && ok "sampled: a new sampler state per token" || bad "sampled: $states states of $steps"; fi

    # an untouched journal cut short goes on to the uninterrupted text, and becomes its journal
    head -n $cut "$full" > "$tmp/cut.json"
    if "$bin" generate --resume "$tmp/cut.json" > "$tmp/resumed.txt" 2> "$tmp/err" && cmp -s "$tmp/resumed.txt" "$tmp/$mode.txt"; then
        ok "$mode: resumed after $((cut - 1)) tokens, the uninterrupted run's text"
    else
        bad "$mode: resumed text differs or the run failed: $(tail -1 "$tmp/err")"
    fi
    if cmp -s "$tmp/cut.json" "$full"; then
        ok "$mode: the resumed journal read back: its request, $steps token lines and 'done' are the uninterrupted run's"
    else
        bad "$mode: the resumed journal differs from the uninterrupted run's: $(diff "$tmp/cut.json" "$full" | head -4 | tr '\n' ' ')"
    fi

    # lines 5 and 6 (tokens 4 and 5) swapped; line 5 repeated (in the journal cut short: the whole
    # one would hold a token more than asked for); the last state replaced
    sed '5{h;d};6G' "$full" > "$tmp/swap.json"
    head -n $cut "$full" | sed '5p' > "$tmp/repeat.json"
    sed '5p' "$full" > "$tmp/repeat-all.json"
    last=$(grep -n '^t ' "$full" | tail -1 | cut -d: -f1)
    awk -v n="$last" 'NR == n {$3 = substr($3, 1, 15) (substr($3, 16, 1) == "0" ? "1" : "0")} {print}' "$full" > "$tmp/state.json"
    if [[ $mode == greedy ]]; then
        refused "greedy: two token lines swapped" "$tmp/swap.json" "line 5: its check value is not that of its token and state"
        refused "greedy: a token line repeated" "$tmp/repeat.json" "line 6: its check value is not that of its token and state"
        refused "greedy: the last sampler state changed" "$tmp/state.json" \
            "line $last: sampler state [0-9a-f]{16} differs from .* a greedy run .* never advances the sampler"
    else
        refused "sampled: two token lines swapped" "$tmp/swap.json" "line 5: sampler state [0-9a-f]{16} is not the one step"
        refused "sampled: a token line repeated" "$tmp/repeat.json" "line 6: sampler state [0-9a-f]{16} is not the one step"
        refused "sampled: the last sampler state changed" "$tmp/state.json" "line $last: sampler state [0-9a-f]{16} is not the one step"
    fi
    if [[ $mode == greedy ]]; then re="line $((steps + 2)): a token past the $steps asked for"
    else re="line 6: sampler state [0-9a-f]{16} is not the one step"; fi
    refused "$mode: a token line repeated in a finished journal" "$tmp/repeat-all.json" "$re"
    # a token changed, its state and check value left: the check value tells
    awk '/^t / && ++k == 7 {$2 = ($2 == 13 ? 14 : 13)} {print}' "$full" > "$tmp/token.json"
    refused "$mode: a token changed" "$tmp/token.json" "line 8: its check value is not that of its token and state"
done

full="$tmp/sampled.json"
# the prompt's text or its tokens changed (the first prompt token after BOS here)
sed '1s/"prompt":"Once upon a time"/"prompt":"Once upon a tide"/' "$full" > "$tmp/text.json"
grep -q '"prompt":"Once upon a tide"' "$tmp/text.json" || bad "the prompt edit did not apply"
refused "the prompt text changed" "$tmp/text.json" "line 1: prompt_tokens \\(5\\) are not what the tokenizer makes of the prompt text"
sed '1s/"prompt_tokens":\[1,\([0-9]*\),/"prompt_tokens":[1,2499,/' "$full" > "$tmp/ptok.json"
cmp -s "$full" "$tmp/ptok.json" && bad "the prompt token edit did not apply"
refused "a prompt token changed" "$tmp/ptok.json" "line 1: prompt_tokens \\(5\\) are not what the tokenizer makes"
# another request field (the temperature) edited: the request's check value tells
sed '1s/"temperature":0.7,/"temperature":0.8,/' "$full" > "$tmp/temp.json"
refused "the temperature edited" "$tmp/temp.json" "line 1: its check value is not that of its fields"
sed '1s/"seed":"11"/"seed":"12"/' "$full" > "$tmp/seed.json"
refused "the seed edited" "$tmp/seed.json" "line 1: sampler_state 000000000000000b is not the state seed 12 starts"
sed '1s/"meshinfer_journal":6,/"meshinfer_journal":5,/' "$full" > "$tmp/v5.json"
refused "a journal of version 5 (a 'done' without a check value)" "$tmp/v5.json" \
    "line 1: journal version 5, written by an earlier meshinfer .*: rerun the generation"

# "done" ends a journal only where the run stopped: after the tokens asked for, or at an end token;
# cut short and ended by hand (bare, or with a check value) it is refused, naming the line
"$bin" generate -m "$model" -p "One day" -n 20 -t 0.8 -s 7 --journal "$tmp/j20.json" > /dev/null 2>&1
head -11 "$tmp/j20.json" > "$tmp/early.json"; echo done >> "$tmp/early.json"
refused "'done' without its check value after 10 of 20 tokens" "$tmp/early.json" "line 12 is not 'done CHECK'"
head -11 "$tmp/j20.json" > "$tmp/early.json"; tail -1 "$tmp/j20.json" >> "$tmp/early.json"
refused "the finished run's 'done' moved up after 10 of 20 tokens" "$tmp/early.json" \
    "line 12: 'done' after 10 of 20 tokens and no end token \\(BOS or EOS\\) where the run would stop"
head -21 "$tmp/j20.json" > "$tmp/early.json"; echo "done 0000000000000000" >> "$tmp/early.json"
refused "'done' after all 20 tokens with a wrong check value" "$tmp/early.json" "line 22: its check value is not that of its 'done' line"
# a run that stops at EOS journals the end token it stopped at, then 'done': accepted as finished
"$bin" generate -m "$model" -p "The end" -n 200 -t 1 -s 3 --journal "$tmp/eos.json" > "$tmp/eos.txt" 2>/dev/null
nt=$(grep -c '^t ' "$tmp/eos.json")
if ((nt < 200)) && [[ $(sed -n "$((nt + 1))p" "$tmp/eos.json" | cut -d' ' -f2) =~ ^[12]$ ]] &&
   "$bin" generate --resume "$tmp/eos.json" > "$tmp/eos2.txt" 2> "$tmp/err" && cmp -s "$tmp/eos.txt" "$tmp/eos2.txt" &&
   grep -q "already finished ($((nt - 1)) tokens)" "$tmp/err"; then
    ok "a run stopped at EOS after $((nt - 1)) tokens: the end token journaled before 'done', the journal finished"
else
    bad "a run stopped at EOS: $nt token lines, last $(sed -n "$((nt + 1))p" "$tmp/eos.json" | cut -c1-20); $(tail -1 "$tmp/err")"
fi
# an existing file is never a new journal: refused, byte for byte as it was (an unfinished journal, a binary)
head -n $cut "$full" > "$tmp/unfinished.json"; cp "$tmp/unfinished.json" "$tmp/keep.json"
cp "$bin" "$tmp/exe"; chmod +x "$tmp/exe"
for f in unfinished.json exe; do
    "$bin" generate -m "$model" -n 4 --journal "$tmp/$f" > "$tmp/out" 2> "$tmp/err"; rc=$?
    if ((rc != 0)) && [[ $(grep -c . "$tmp/err") -eq 1 ]] && grep -q "journal .*$f exists: a new generation needs a new journal .*--resume" "$tmp/err" &&
       [[ ! -s $tmp/out ]] && { [[ $f == exe ]] && cmp -s "$bin" "$tmp/exe" || cmp -s "$tmp/keep.json" "$tmp/unfinished.json"; }; then
        ok "--journal onto an existing $f refused, nothing changed"
    else
        bad "--journal onto an existing $f: exit $rc, $(cat "$tmp/err")"
    fi
done
# --trace replaces an earlier trace only: not a text file, not an executable
"$bin" generate -m "$model" -n 2 --trace "$tmp/t.json" > /dev/null 2>&1 &&
    "$bin" generate -m "$model" -n 2 --trace "$tmp/t.json" > /dev/null 2>&1 && ok "--trace onto its earlier trace" ||
    bad "--trace twice onto one path failed"
echo "notes" > "$tmp/notes.txt"
for f in notes.txt exe; do
    "$bin" generate -m "$model" -n 2 --trace "$tmp/$f" > /dev/null 2> "$tmp/err"; rc=$?
    if ((rc != 0)) && [[ $(grep -c . "$tmp/err") -eq 1 ]] && grep -q "$f exists and is not a trace" "$tmp/err" &&
       { [[ $f == exe ]] && cmp -s "$bin" "$tmp/exe" || [[ $(cat "$tmp/notes.txt") == notes ]]; }; then
        ok "--trace onto $f refused, nothing changed"
    else
        bad "--trace onto $f: exit $rc, $(cat "$tmp/err")"
    fi
done
# a finished journal resumed: no speed figures (JSON null), said to be finished
"$bin" generate --resume "$tmp/j20.json" --json 2> "$tmp/err" > "$tmp/out.json"
if node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
    process.exit(j.ttft_ms === null && j.tpot_ms === null && j.decode_tokens_per_s === null && j.journal.already_finished === true
                 && j.generated_tokens === 20 ? 0 : 1)' "$tmp/out.json" &&
   "$bin" generate --resume "$tmp/j20.json" > /dev/null 2> "$tmp/err" && grep -q "already finished" "$tmp/err" &&
   ! grep -Eq "TTFT|TPOT|tokens/s" "$tmp/err"; then
    ok "a finished journal resumed: ttft, tpot and tokens/s null in JSON, none printed, said already finished"
else
    bad "a finished journal resumed: $(head -c 300 "$tmp/out.json"); $(cat "$tmp/err")"
fi

# another model file of this very shape: stories15M with one weight's low byte changed (its config,
# name and dtypes the same), and synthetic weights of its shape
cp "$model" "$tmp/other.h5"
size=$(stat -c %s "$model")
printf '\x5a' | dd of="$tmp/other.h5" bs=1 seek=$((size / 2)) conv=notrunc status=none
refused "another model file of the same shape (one byte of a weight)" "$full" \
    "line 1: written with another model file of this shape \\($size bytes, hash [0-9a-f]{16}\\); .*other.h5 is $size bytes" \
    -m "$tmp/other.h5"
if "$bin" synth --shape stories15M --out "$tmp/synth.h5" > /dev/null 2> "$tmp/err"; then
    refused "synthetic weights of the same shape" "$full" "line 1: written with another model file of this shape" \
        -m "$tmp/synth.h5"
else
    bad "synth --shape stories15M failed: $(tail -1 "$tmp/err")"
fi
# the same file under another path is the same model
ln -s "$(realpath "$model")" "$tmp/link.h5"
head -n $cut "$full" > "$tmp/cut.json"
if "$bin" generate --resume "$tmp/cut.json" -m "$tmp/link.h5" > "$tmp/resumed.txt" 2> "$tmp/err" &&
   cmp -s "$tmp/resumed.txt" "$tmp/sampled.txt"; then
    ok "the same model file under another path: accepted, the same text"
else
    bad "the same model under another path: $(tail -1 "$tmp/err")"
fi

echo "$pass passed, $fail failed"
((fail == 0))
