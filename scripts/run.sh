#!/usr/bin/env bash
# make run: what pier can show today: the driver performance table and plot
# when pier-run and pier-perf are built, else pier-info.
set -euo pipefail
build=${1:-build/release}
if [ -x "$build/tools/pier-perf/pier-perf" ] && [ -x "$build/tools/pier-run/pier-run" ]; then
  exec bash scripts/perf_table.sh "$build"
fi
exec "$build/tools/pier-info/pier-info"
