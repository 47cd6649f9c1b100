#!/usr/bin/env bash
# Failover figures: kill -9 of the worker hosting a chat room (two users,
# 50 messages) until both users' client engines are live again on another
# worker with every message (TestFailover), RUNS times; p50 and max.
#
#   scripts/bench/failover.sh            # 5 runs
#   RUNS=10 scripts/bench/failover.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
out=$(go test ./internal/e2e -run '^TestFailover$' -count "$RUNS" -v 2>&1 | grep 'both client engines live again' || true)
echo "$out"
echo "$out" | sed -E 's/.*messages: ([0-9.]+)(ms|s)$/\1 \2/' | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }' | sort -n | awk '
  { a[NR] = $1 }
  END {
    if (NR == 0) { print "no runs"; exit 1 }
    p50 = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "runs %d  p50 %.2f s  max %.2f s\n", NR, p50, a[NR]
  }'
