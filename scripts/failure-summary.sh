#!/usr/bin/env bash
# After a failed ctest run: prints, last, the names of the failed tests and
# the head of each sanitizer report in the run's log, so that a CI record
# that keeps only the end of the output still says what failed and where.
#   usage: scripts/failure-summary.sh <build dir>
set -uo pipefail
log=$1/Testing/Temporary/LastTest.log
failed=$1/Testing/Temporary/LastTestsFailed.log
echo "==== failure summary ($1) ===="
if [ -f "$failed" ]; then
  echo "failed tests:"
  sed 's/^/  /' "$failed"
fi
if [ -f "$log" ]; then
  # The first lines of at most four sanitizer reports: the kind of error and
  # the top frames of each stack.
  awk '
    /WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:/ {
      if (reports++ >= 4) exit
      left = 24
    }
    left > 0 { print "  " $0; left-- }
  ' "$log"
fi
echo "==== end of failure summary ===="
