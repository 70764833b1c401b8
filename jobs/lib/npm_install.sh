# shellcheck shell=bash
# npm_install DIR NAME@VERSION...: install the packages into DIR/node_modules
# under an exclusive lock on DIR/.npm.lock, keeping every package already there.
# Why: two scripts (the tokenizer and the chat-template references) install into
# the same folder, ctest may run them at once, and `npm install --no-save` in a
# folder without package.json prunes what it was not given; so each install is
# given what is present too, and one waits for the other. Returns npm's status.
# Sourced after common.sh (needs node, npm and flock).
npm_install() {
    local dir=$1 f p
    shift
    command -v flock > /dev/null || { say "flock (util-linux) is needed"; return 1; }
    mkdir -p "$dir/node_modules"
    (
        flock -w 900 9 || { say "timed out waiting for $dir/.npm.lock"; exit 1; }
        local keep=()
        for f in "$dir"/node_modules/*/package.json "$dir"/node_modules/@*/*/package.json; do
            [[ -f "$f" ]] || continue
            p=$(node -e 'const p = require(process.argv[1]); console.log(`${p.name}@${p.version}`)' "$f")
            # a package asked for at another version is replaced, not kept
            [[ " ${*%@*} " == *" ${p%@*} "* ]] || keep+=("$p")
        done
        cd "$dir" && npm install --silent --no-save --no-audit --no-fund --no-package-lock --prefix "$dir" \
            "${keep[@]}" "$@" > /dev/null
    ) 9> "$dir/.npm.lock"
}
