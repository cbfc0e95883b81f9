#!/usr/bin/env bash
# perf_table.sh <build dir> [pier-perf options]: measure every usable driver
# through the driver interface, Portals 4 puts and the GM-style ports, print
# one table per driver with the three side by side, and plot latency and
# bandwidth against message size, one line per driver and API.
#   driver level:  pier-run -n 2 --bind core pier-perf
#   ports:         pier-run -n 2 --bind core pier-perf --api port
#   Portals puts:  pier-run -n 2 --bind core pier-perf --api portals --driver D
#                  (one run per driver: PtlInit joins the job once per process;
#                  PIER_CAPI_PROGRESS_THREAD=0, docs/launching.md says why)
#   self driver:   pier-perf --driver self (two threads of one process)
# Sizes: 1 B to 16 MiB in powers of 8 unless options say otherwise
# (e.g. --min 1 --max 16M for every power of two, --verify), so that make run
# stays near 3 minutes on a loaded 2-core host. Portals runs cover the drivers
# in PERF_TABLE_PORTALS (default "shm tcp"; "all" for every usable driver:
# ofi through Portals alone took 130 s here).
# Leaves <build dir>/perf/{driver,port,portals-D,self}.{json,csv}, *.log, perf.png.
set -euo pipefail
build=${1:?usage: perf_table.sh <build dir> [pier-perf options]}
shift
run="$build/tools/pier-run/pier-run"
perf="$build/tools/pier-perf/pier-perf"
for tool in "$run" "$perf"; do
  [ -x "$tool" ] || { echo "perf_table.sh: $tool is not built" >&2; exit 1; }
done
out="$build/perf"
mkdir -p "$out"
# PERF_TABLE_REDRAW=1: no measurement, tables and plot from the last run.
redraw=${PERF_TABLE_REDRAW:-0}
[ "$redraw" = 1 ] || rm -f "$out"/*.csv "$out"/*.json "$out"/*.dat "$out"/*.log
opts=("$@")
if [[ " ${opts[*]-} " != *" --sizes "* && " ${opts[*]-} " != *" --min "* && " ${opts[*]-} " != *" --max "* ]]; then
  opts+=(--sizes 1,8,64,512,4K,32K,256K,2M,16M)
fi
status=0
start=$SECONDS

# run <name> <command...>: pier-perf's own tables go to <name>.log.
measure() {
  local name=$1
  shift
  echo "measuring: $name" >&2
  if ! "$@" --json "$out/$name.json" --csv "$out/$name.csv" "${opts[@]}" > "$out/$name.log" 2>&1; then
    echo "perf_table.sh: $name failed; see $out/$name.log:" >&2
    tail -n 5 "$out/$name.log" >&2
    status=1
  fi
}

if [ "$redraw" != 1 ]; then
  measure driver "$run" -n 2 --bind core --timeout 600 "$perf" --no-progress
  measure port "$run" -n 2 --bind core --timeout 600 "$perf" --no-progress --api port
  drivers=()
  if [ -s "$out/driver.csv" ]; then
    mapfile -t drivers < <(tail -n +2 "$out/driver.csv" | cut -d, -f1 | awk '!seen[$0]++')
  fi
  portals=${PERF_TABLE_PORTALS:-shm tcp}
  for d in "${drivers[@]}"; do
    [[ "$portals" == all || " $portals " == *" $d "* ]] || continue
    PIER_CAPI_PROGRESS_THREAD=0 measure "portals-$d" "$run" -n 2 --bind core --timeout 600 \
      "$perf" --no-progress --api portals --driver "$d"
  done
  measure self "$perf" --no-progress --driver self
fi
grep -h "skipped" "$out/driver.log" "$out/port.log" 2> /dev/null | sed 's/^/note: /' || true

# One line per (driver, api): size, median latency (us), median bandwidth (MB/s).
rm -f "$out"/*.dat
cat "$out"/*.csv 2> /dev/null | awk -F, -v dir="$out" '
  $1 == "driver" { next }
  { api = ($10 == "") ? "driver" : $10
    print $2, $4, $6 > (dir "/" $1 "-" api ".dat") }'
series=()
for f in "$out"/*.dat; do
  [ -e "$f" ] && series+=("$(basename "$f" .dat)")
done
if [ ${#series[@]} -eq 0 ]; then
  echo "perf_table.sh: no driver produced results" >&2
  exit 1
fi

# The tables: per driver, each API's median latency and bandwidth by size.
echo
echo "pier-perf on $(hostname), $(date -u '+%F %T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians; latency one-way in us, bandwidth in MB/s (10^6 B/s); 2 processes pinned to cores"
echo "(self: 2 threads of one process)"
for d in $(printf '%s\n' "${series[@]}" | sed 's/-[a-z]*$//' | awk '!seen[$0]++'); do
  apis=()
  for a in driver portals port; do
    [ -s "$out/$d-$a.dat" ] && apis+=("$a")
  done
  echo
  echo "== $d =="
  header=$(printf '%8s' size)
  for a in "${apis[@]}"; do header+=$(printf ' %11s' "lat $a"); done
  for a in "${apis[@]}"; do header+=$(printf ' %11s' "bw $a"); done
  echo "$header"
  files=()
  for a in "${apis[@]}"; do files+=("$out/$d-$a.dat"); done
  awk -v n="${#apis[@]}" '
    function human(s) {
      if (s >= 1048576 && s % 1048576 == 0) return s / 1048576 "M"
      if (s >= 1024 && s % 1024 == 0) return s / 1024 "K"
      return s
    }
    FNR == 1 { ++k }
    { lat[$1, k] = $2; bw[$1, k] = $3; if (!($1 in seen)) { seen[$1]; order[++m] = $1 } }
    END {
      for (i = 1; i <= m; ++i) {
        s = order[i]; line = sprintf("%8s", human(s))
        for (k = 1; k <= n; ++k) line = line sprintf(" %11s", ((s, k) in lat) ? sprintf("%.2f", lat[s, k]) : "-")
        for (k = 1; k <= n; ++k) line = line sprintf(" %11s", ((s, k) in bw) ? sprintf("%.1f", bw[s, k]) : "-")
        print line
      }
    }' "${files[@]}"
  for a in "${apis[@]}"; do
    case $a in
      driver) log=$([ "$d" = self ] && echo self || echo driver) ;;
      port) log=port ;;
      portals) log="portals-$d" ;;
    esac
    rate=$(awk -v d="$d" '$0 ~ "^" d "( through [a-z]+)?:" { on = 1 } on && /^message rate/ { print; exit }' \
      "$out/$log.log" 2> /dev/null || true)
    [ -n "$rate" ] && echo "  $a: $rate"
  done
done
echo
[ "$redraw" = 1 ] || echo "measured in $((SECONDS - start)) s"
echo "raw results in $out"

if ! command -v gnuplot > /dev/null; then
  echo "perf_table.sh: gnuplot not found; no plot"
  exit "$status"
fi
lat_plot="" bw_plot=""
for s in "${series[@]}"; do
  title=${s%-*}" "${s##*-}
  lat_plot+="${lat_plot:+, }'$out/$s.dat' using 1:2 with linespoints title '$title'"
  bw_plot+="${bw_plot:+, }'$out/$s.dat' using 1:3 with linespoints title '$title'"
done
gnuplot << GNUPLOT
set terminal pngcairo size 1400,600 noenhanced font ',10'
set output '$out/perf.png'
set multiplot layout 1,2 title 'pier-perf: driver interface, Portals puts and ports (medians), $(hostname)'
set logscale x 2
set format x '%.0b%B'
set grid
set key top left
set xlabel 'message size'
set logscale y 10
set ylabel 'one-way latency (us)'
set title 'latency'
plot $lat_plot
set key bottom right
set ylabel 'bandwidth (MB/s)'
set title 'streaming bandwidth'
plot $bw_plot
unset multiplot
GNUPLOT
echo "plot: $out/perf.png"
exit "$status"
