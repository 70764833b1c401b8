#!/usr/bin/env bash
# Cross-compile the kernel unit test (tests/unit/test_kernels.c, test_kernel_tiles.c) for aarch64 and
# run it under qemu-aarch64 twice: as a Raspberry Pi 4 (-cpu cortex-a72: NEON,
# no int8 dot product: the neon family is tested, neon-dotprod skipped) and
# with every extension qemu has (-cpu max: both tested; a Pi 5's Cortex-A76
# has the dot product). Prints one line per CPU; exits 0 only if both pass.
#
# Installs what is missing (root, or passwordless sudo): the cross compiler,
# qemu-user, cmake, and CUnit for arm64 through Debian multiarch (adds the
# arm64 architecture to dpkg). The test is linked statically, so qemu needs no
# aarch64 sysroot. A second run installs nothing and rebuilds only what changed.
#
# usage: jobs/dev/cross_kernels.sh BUILD_DIR
#        BUILD_DIR: the cross build (ctest passes <build>/aarch64); the qemu
#        output is kept there as test_kernels.<cpu>.log
# exit:  0 both runs pass; 1 a build or test failure; 77 (skip) the packages
#        cannot be installed (neither root nor passwordless sudo, or Debian's
#        mirrors cannot be reached)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    usage
    exit 0
fi
if [[ $# -ne 1 || -z "$1" ]]; then
    usage >&2
    exit 2
fi
mkdir -p "$1"
build="$(cd "$1" && pwd)"
say() { echo "cross_kernels: $*"; }
skip() {
    say "SKIP: $*"
    exit 77
}

# ------------------------------------------------------------- packages
# Host tools, then CUnit built for arm64 (its static library is what the
# test links; Debian ships no cross-built CUnit, but multiarch installs the
# arm64 package next to the amd64 one without conflict).
host_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user cmake make pkg-config)
target_pkgs=(libcunit1-dev:arm64)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${host_pkgs[@]}" "${target_pkgs[@]}"; do
    installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || skip "need ${missing[*]}: not root and no sudo"
        sudo -n true 2>/dev/null || skip "need ${missing[*]}: not root and sudo asks for a password"
        sudo=(sudo -n)
    fi
    say "installing ${missing[*]}"
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    # Unreachable Debian mirrors show as fetch or name-resolution errors
    # (apt-get update only warns about most of them): then the test is
    # skipped, not failed. Other repositories' errors do not count.
    offline() {
        grep -Eiq "(Failed to fetch|Could not resolve|Temporary failure resolving|Unable to connect to|Could not connect to).*debian" "$log"
    }
    if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        "${sudo[@]}" dpkg --add-architecture arm64
    fi
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
    # The update's status is not decisive (a third-party repository may fail
    # alone); whether the install succeeds is.
    "${sudo[@]}" "${apt[@]}" update -qq >"$log" 2>&1 || true
    if ! "${sudo[@]}" "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
        tail -n 30 "$log" >&2
        offline && skip "cannot download ${missing[*]}: the Debian mirrors cannot be reached"
        say "apt-get install ${missing[*]} failed"
        exit 1
    fi
fi

# ---------------------------------------------------------------- build
# Release (-O3) like the host build: the kernels are tested as they ship.
# The host's compiler flags from the environment would break a cross build.
env -u CFLAGS -u CPPFLAGS -u LDFLAGS cmake -S "$root" -B "$build" -DMESHINFER_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DAARCH64_STATIC=ON >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; say "cmake configure failed"; exit 1; }
cmake --build "$build" --target test_kernels -j "$(nproc)" >"$build/build.log" 2>&1 ||
    { cat "$build/build.log" >&2; say "build failed"; exit 1; }
bin="$build/test_kernels"
# A dynamically linked binary (one with a program interpreter) would need an
# aarch64 sysroot under qemu.
if aarch64-linux-gnu-readelf -l "$bin" | grep -q "INTERP"; then
    say "$bin is dynamically linked (expected static)"
    exit 1
fi

# ----------------------------------------------------------------- runs
# run CPU LABEL EXPECT...: each EXPECT is a line the test must print (which
# families it tested or skipped, and for how many dtypes each has row and
# tile kernels of its own rather than the scalar fallback), so that a family
# silently not tested, or a dtype silently left to the scalar kernels, fails.
fails=0
run() {
    local cpu="$1" label="$2" out="$build/test_kernels.$1.log" rc=0 t0 secs
    shift 2
    t0=$(date +%s.%N)
    qemu-aarch64 -cpu "$cpu" "$bin" >"$out" 2>&1 || rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    # CUnit's summary row: "tests  total  ran  passed  failed  inactive"
    local tests
    tests=$(awk '$1 == "tests" && NF == 6 {printf "%s/%s tests passed", $4, $3}' "$out")
    local why=""
    ((rc == 0)) || why="exit code $rc"
    for e in "$@"; do
        grep -qF "$e" "$out" || why="${why:+$why; }no line '$e'"
    done
    local fam
    fam=$(grep -E '^ +(neon|neon-dotprod): ([0-9]+ dtypes against|not supported)' "$out" |
        sed -E 's/^ +//; s/: [0-9]+ dtypes against.*/ tested/; s/: not supported.*/ skipped/' |
        paste -sd, - | sed 's/,/, /g' || true)
    if [[ -z "$why" ]]; then
        say "PASS qemu -cpu $cpu ($label): ${tests:-?}; $fam (${secs}s)"
    else
        fails=$((fails + 1))
        cat "$out" >&2
        say "FAIL qemu -cpu $cpu ($label): $why; ${tests:-?}; ${fam:-no family lines} (log: $out)"
    fi
}
tiles="dtypes with tile kernels of its own, T = 1..9 bit-identical to T = 1"
run cortex-a72 "Pi 4: NEON" "neon: 7 dtypes against the scalar reference, 7 its own kernels" \
    "neon: 7 $tiles" "neon-dotprod: not supported by this CPU, skipped"
run max "Pi 5 class: NEON + dot product" "neon: 7 dtypes against the scalar reference, 7 its own kernels" \
    "neon-dotprod: 7 dtypes against the scalar reference, 7 its own kernels" "neon: 7 $tiles" \
    "neon-dotprod: 7 $tiles"
((fails == 0))
