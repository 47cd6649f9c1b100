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
echo "$out" | sed -E 's/.*messages: ([0-9.]+)(ms|s)$/\1 \2/' | awk '
  { v = ($2 == "ms") ? $1 / 1000 : $1; a[NR] = v }
  END {
    if (NR == 0) { print "no runs"; exit 1 }
    n = asort(a); p50 = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    printf "runs %d  p50 %.2f s  max %.2f s\n", n, p50, a[n]
  }'
