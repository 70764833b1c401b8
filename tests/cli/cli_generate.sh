#!/usr/bin/env bash
# Greedy generation with the real stories15M model must print exactly the
# known continuation of the reference prompt (../shared/notes/model.md).
# usage: cli_generate.sh MESHINFER MODEL.h5
set -u
bin=$1 model=$2
prompt="Once upon a time, there was a little girl named Lily"
want=". She loved to play outside in the sunshine. One day, she saw a big, red ball in the sky. It was the sun! She thought it was so pretty."
fail=0
out=$("$bin" generate -m "$model" -p "$prompt" -n 38 2>/dev/null) || { echo "FAIL: generate exited $?"; exit 1; }
if [[ "$out" != "$prompt$want" ]]; then
    echo "FAIL: streamed text differs"; echo " got: $out"; echo "want: $prompt$want"; fail=1
else
    echo "ok: streamed text is the known continuation"
fi
json=$("$bin" generate -m "$model" -p "$prompt" -n 38 --json 2>/dev/null)
node_check=$(printf '%s' "$json" | node -e '
  let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
    const j = JSON.parse(s);
    process.stdout.write([j.text, j.generated_tokens, j.tokens.length, j.prompt_tokens, j.synthetic_weights].join("|"));
  });')
if [[ "$node_check" != "$want|38|38|14|false" ]]; then
    echo "FAIL: --json output: $node_check"; fail=1
else
    echo "ok: --json parses and holds the same text, 38 tokens, 14 prompt tokens"
fi
# --ignore-eos past the story's end: the model starts a new story with BOS
# (token 217 here); it must begin on a line of its own, not glued on
out=$("$bin" generate -m "$model" -n 240 --ignore-eos --json 2>/dev/null | node -e '
  const j = JSON.parse(require("fs").readFileSync(0));
  console.log(j.tokens[217], j.text.includes("sunshine.\nOnce upon a time"), j.text.includes("sunshine.Once"), j.decoding.mode)')
if [[ "$out" == "1 true false greedy" ]]; then echo "ok: a story begun mid-stream (BOS) starts on its own line"
else echo "FAIL: BOS mid-stream with --ignore-eos: $out (want: 1 true false greedy)"; fail=1; fi
line=$("$bin" generate -m "$model" -n 4 -t 0.8 --top-p 0.9 -s 7 2>&1 >/dev/null)
if [[ "$line" == "generate: 5 prompt + 4 new tokens, sampled at T 0.8, top-k 40, top-p 0.9, seed 7, on 1 rank (planner "* ]]; then
    echo "ok: the summary says the decoding mode apart from the planner"
else echo "FAIL: summary line: $line"; fail=1; fi
# the context's edge: " a" is one token, so 255 of them with BOS fill the 256 positions and leave
# none to generate in (refused, even with the default steps); 254 leave exactly one
a255=$(printf 'a %.0s' $(seq 255)) a254=$(printf 'a %.0s' $(seq 254))
err=$("$bin" generate -m "$model" -p "${a255% }" 2>&1 >/dev/null); rc=$?
if [[ $rc == 1 && $err == *"prompt is 256 tokens (with BOS) but the model's context is 256"* ]]; then
    echo "ok: a prompt filling the context is refused"
else echo "FAIL: a prompt of 256 tokens: exit $rc, $err"; fail=1; fi
out=$("$bin" generate -m "$model" -p "${a254% }" -n 1 --json 2>/dev/null | node -e 'let s = "";
  process.stdin.on("data", d => s += d).on("end", () => { const j = JSON.parse(s); console.log(j.prompt_tokens, j.generated_tokens); })')
if [[ $out == "255 1" ]]; then echo "ok: a prompt one short of the context generates its one token"
else echo "FAIL: a prompt of 255 tokens with -n 1: '$out' (want 255 prompt tokens, 1 generated)"; fail=1; fi
if ((fail)); then echo "some failed"; exit 1; fi
echo "6 passed, 0 failed"
