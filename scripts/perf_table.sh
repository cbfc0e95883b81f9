#!/usr/bin/env bash
# perf_table.sh <build dir>: measure every usable driver with pier-perf and
# plot latency and bandwidth against message size, one line per driver.
#   two processes, one per core:  pier-run -n 2 --bind core pier-perf
#   the in-process self driver:   pier-perf --driver self --pin-threads (two threads)
# Leaves <build dir>/perf/{perf.json,perf.csv,self.json,self.csv,perf.png}.
# Extra arguments go to pier-perf (e.g. --max 1M, --verify).
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

echo "== between two processes (pier-run -n 2 --bind core) =="
status=0
"$run" -n 2 --bind core --timeout 600 "$perf" --json "$out/perf.json" --csv "$out/perf.csv" "$@" ||
  status=$?
echo
echo "== within one process (self driver, two threads) =="
"$perf" --driver self --pin-threads --json "$out/self.json" --csv "$out/self.csv" "$@" || status=$?

# One data file per driver: size, median latency (us), median bandwidth (MB/s).
drivers=()
for csv in "$out/perf.csv" "$out/self.csv"; do
  [ -s "$csv" ] || continue
  for d in $(tail -n +2 "$csv" | cut -d, -f1 | sort -u); do
    awk -F, -v d="$d" 'NR > 1 && $1 == d { print $2, $4, $6 }' "$csv" > "$out/$d.dat"
    drivers+=("$d")
  done
done
if [ ${#drivers[@]} -eq 0 ]; then
  echo "perf_table.sh: no driver produced results" >&2
  exit 1
fi
if ! command -v gnuplot > /dev/null; then
  echo "perf_table.sh: gnuplot not found; results in $out/perf.csv and $out/self.csv"
  exit "$status"
fi
lat_plot="" bw_plot=""
for d in "${drivers[@]}"; do
  lat_plot+="${lat_plot:+, }'$out/$d.dat' using 1:2 with linespoints title '$d'"
  bw_plot+="${bw_plot:+, }'$out/$d.dat' using 1:3 with linespoints title '$d'"
done
gnuplot <<GNUPLOT
set terminal pngcairo size 1400,560 noenhanced font ',10'
set output '$out/perf.png'
set multiplot layout 1,2 title 'pier-perf, driver level (median over repetitions), $(hostname)'
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
echo
echo "plot: $out/perf.png"
exit "$status"
