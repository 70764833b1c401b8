#!/usr/bin/env bash
# Checks what jobs/dev/fetch_series.sh wrote: for each dataset, NAME.csv has the
# header, row count and column count that NAME.split.json states, no empty or
# non-numeric field, and the splits train/val/test cover [0, rows) exactly, in
# order, none empty, the test split holding one look-back + horizon window
# (96 + 24 rows). Exits 77 (skip) when none of the files is there.
# usage: fetch_series_check.sh [CACHE]   (CACHE as MESHINFER_CACHE; default
#        models/cache of this repository; the files are in CACHE/series)
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$root/models/cache}/series"
names=(sensor_mote3 seattle_hourly sp500 us_employment)
window=$((96 + 24))

present=0
for n in "${names[@]}"; do [[ -f "$dir/$n.csv" || -f "$dir/$n.split.json" ]] && present=1; done
if ((!present)); then
    echo "skip: no series in $dir (run jobs/dev/fetch_series.sh)"; exit 77
fi

pass=0 fail=0
bad() { echo "FAIL: $1: $2"; fail=$((fail + 1)); }
# field JSON KEY: the raw value of KEY in the one-line JSON (a string unquoted,
# a number, or the inside of a list).
field() {
    sed -n -E "s/.*\"$2\": (\"([^\"]*)\"|\[([^]]*)\]|([0-9]+)).*/\2\3\4/p" <<<"$1"
}

for n in "${names[@]}"; do
    csv="$dir/$n.csv" js="$dir/$n.split.json"
    [[ -f "$csv" ]] || { bad "$n" "$csv is missing"; continue; }
    [[ -f "$js" ]] || { bad "$n" "$js is missing"; continue; }
    j=$(<"$js")
    name=$(field "$j" name) rows=$(field "$j" rows) cols=$(field "$j" columns)
    src=$(field "$j" source) fill=$(field "$j" fill)
    [[ "$name" == "$n" ]] || { bad "$n" "name is '$name'"; continue; }
    [[ -n "$src" && -n "$fill" ]] || { bad "$n" "source or fill is empty"; continue; }
    [[ "$rows" =~ ^[0-9]+$ ]] || { bad "$n" "rows is not a number"; continue; }
    read -r t0 t1 <<<"$(field "$j" train | tr -d ,)"
    read -r v0 v1 <<<"$(field "$j" val | tr -d ,)"
    read -r s0 s1 <<<"$(field "$j" test | tr -d ,)"
    if ! [[ "$t0" == 0 && "$t1" == "$v0" && "$v1" == "$s0" && "$s1" == "$rows" ]] ||
        ((t1 <= t0 || v1 <= v0 || s1 <= s0)); then
        bad "$n" "splits [$t0,$t1) [$v0,$v1) [$s0,$s1) do not cover [0,$rows) in order"; continue
    fi
    ((s1 - s0 >= window)) || { bad "$n" "test split has $((s1 - s0)) rows, less than $window"; continue; }
    header=$(sed -e 's/"//g' -e 's/, /,/g' <<<"$cols")
    ncol=$(awk -F, '{print NF}' <<<"$header")
    msg=$(awk -F, -v header="$header" -v ncol="$ncol" -v rows="$rows" '
        NR == 1 { if ($0 != header) { print "header is " $0 ", the JSON says " header; e = 1; exit } next }
        {
            if (NF != ncol) { printf "row %d has %d fields, not %d\n", NR - 1, NF, ncol; e = 1; exit }
            for (c = 1; c <= NF; c++)
                if ($c !~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/) {
                    printf "row %d column %d is \"%s\", not a number\n", NR - 1, c, $c; e = 1; exit
                }
        }
        END { if (!e && NR - 1 != rows) { printf "%d rows, the JSON says %d\n", NR - 1, rows; exit 1 } }' "$csv")
    if [[ -n "$msg" ]]; then bad "$n" "$msg"; continue; fi
    echo "ok: $n: $rows rows x $ncol columns, splits [0,$t1) [$v0,$v1) [$s0,$rows)"
    pass=$((pass + 1))
done
echo "$pass passed, $fail failed"
((fail == 0))
