#!/usr/bin/env bash
# Runs every libFuzzer target of a PIER_FUZZ build for a while, each on a
# scratch copy of its checked-in corpus (tests/fuzz/corpus/<target>), and
# fails if any target finds a crash, a leak or a timeout.
#   usage: scripts/fuzz.sh <build dir> <seconds per target>
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <build dir> <seconds per target>" >&2
  exit 2
fi
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
corpus_root=$root/tests/fuzz/corpus
fuzz_dir=$build/tests/fuzz

targets=()
for t in "$fuzz_dir"/fuzz_*; do
  [ -f "$t" ] && [ -x "$t" ] && targets+=("$t")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets in $fuzz_dir (configure with the fuzz preset)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pier-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"

failed=()
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus=$work/$name
  mkdir -p "$corpus"
  if [ -d "$corpus_root/$name" ]; then cp "$corpus_root/$name"/* "$corpus"/ 2>/dev/null; fi
  log=$work/$name.log
  "$t" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$name-" >"$log" 2>&1
  rc=$?
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$')
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed+=("$name")
    echo "fuzz: $name FAILED (exit $rc), artifacts in $artifacts; last lines:"
    tail -n 30 "$log"
  else
    echo "fuzz: $name ok: ${runs:-?} runs in ${seconds}s, ${cov:-cov: ?}"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s without a finding"
