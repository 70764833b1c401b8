#!/usr/bin/env bash
# Judge one libFuzzer finding (jobs/dev/fuzz.sh calls it on a harness's log):
# is it libhdf5's own fault, or a finding that fails the run?
#
# usage: jobs/dev/fuzz_finding.sh HARNESS LOG
# Prints one line and exits 0 when the finding is libhdf5's own:
#   libhdf5 <innermost frame> called from <meshinfer's frame>
# else prints `finding <ASan's or libFuzzer's error line> at <innermost frame>`
# and the first frames, and exits 1.
#
# libhdf5's own means: the hdf5 harness, an ASan SEGV, BUS, FPE, ABRT or stack
# overflow (the faults meshinfer's guard turns into one line naming the file,
# include/meshinfer/common.h mi_fault_file_enter), and the innermost frame that
# is not glibc's, the sanitizers' or libFuzzer's is in libhdf5. A timeout or an
# out-of-memory there still fails, as does any report on our own code.
# glibc frames come in two spellings: `(/lib/.../libc.so.6+0x...)` without
# glibc's debug symbols, `in __memcpy_avx512_unaligned_erms
# string/../sysdeps/...S:295` with them (a CI machine had them installed).
set -uo pipefail
. "$(dirname "$0")/../lib/common.sh"
(($# == 2)) || arg_fail "usage: fuzz_finding.sh HARNESS LOG (see --help)"
harness=$1 log=$2
opt_file LOG "$log"

# The innermost frame of the first stack that is neither glibc nor the
# sanitizers' or libFuzzer's own (any), or the innermost in meshinfer's sources (ours).
frame() {
    awk -v want="$1" '/^ *#[0-9]+ / {
        if ($0 ~ /libc\.so|libgcc|libstdc\+\+|fuzzer::|in _+(asan|interceptor|sanitizer|ubsan|msan)_?/) next
        # glibc with debug symbols: its sources are named relative to its own tree
        if ($0 ~ / (\.\/|\.\.\/)?(string|nptl|stdlib|assert|malloc|libio|stdio-common|sysdeps|signal|posix|misc|elf|csu)\/[^ ]*:[0-9]+/) next
        if ($0 ~ / in (malloc|calloc|realloc|free|memcpy|memmove|memset|strlen|memcmp|abort|raise) /) next
        if (want == "ours" && $0 !~ /\/(src|fuzz)\/[A-Za-z0-9_\/]*\.c:/) next
        sub(/^ *#[0-9]+ 0x[0-9a-f]+ +/, ""); print; exit }' "$log"
}
where=$(frame any) ours=$(frame ours)
if [[ $harness == hdf5 && $where == *libhdf5* ]] &&
   grep -q -E 'ERROR: AddressSanitizer: (SEGV|BUS|FPE|ABRT|stack-overflow)' "$log"; then
    echo "libhdf5 $where called from ${ours:-?}"
    exit 0
fi
echo "finding $(grep -m1 -E 'ERROR: |runtime error|deadly signal' "$log") at ${where:-?}"
grep -m1 -A8 -E '^ *#0 ' "$log" | sed 's/^/    /'
exit 1
