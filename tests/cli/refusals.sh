# Shared by the CLI checks (sourced): refused counts into pass and fail;
# the caller sets tmp (a scratch directory) and pass=0 fail=0.

# refused "description" "regex the error line must match" command...: exit 1,
# exactly one "meshinfer: error:" line matching the regex, nothing on stdout
refused() {
    local what=$1 re=$2; shift 2
    "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    local rc=$?
    if [[ $rc -ne 1 ]]; then
        echo "FAIL: $what: exit $rc (want 1)"; sed 's/^/    /' "$tmp/err"; fail=$((fail+1)); return
    fi
    if [[ $(grep -c . "$tmp/err") -ne 1 ]] || ! grep -q '^meshinfer: error: ' "$tmp/err"; then
        echo "FAIL: $what: want exactly one 'meshinfer: error:' line, got:"; sed 's/^/    /' "$tmp/err"
        fail=$((fail+1)); return
    fi
    if ! grep -Eq -- "$re" "$tmp/err"; then
        echo "FAIL: $what: error line does not match /$re/:"; sed 's/^/    /' "$tmp/err"; fail=$((fail+1)); return
    fi
    if [[ -s "$tmp/out" ]]; then
        echo "FAIL: $what: printed to stdout before refusing:"; sed 's/^/    /' "$tmp/out"; fail=$((fail+1)); return
    fi
    echo "ok: $what -> $(cat "$tmp/err")"; pass=$((pass+1))
}
