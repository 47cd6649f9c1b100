#!/usr/bin/env bash
# Time from a fault to users live again, per fault kind (issue #33), each
# run RUNS times in the same session under the same load: the end-to-end
# tests that drive a real client engine through each fault log
# "fault-to-live <kind>: <duration>".
#
#   kill-9         TestFailover        kill -9 of the room's worker (two users, 50 messages)
#   stall          TestStallE2E        SIGSTOP of the room's worker (10 s)
#   quick-restart  TestQuickRestartE2E kill -9 and restart under the same id at once
#   double-fault   TestDoubleFaultE2E  kill -9 of the room's worker and of the master, master restarted
#   partition      TestPartitionE2E    the room's worker, in a network namespace, cut off for 10 s (root)
#   up-quick-restart TestUpAndStatus   kill -9 of a worker under `cloudbrowser up`, which restarts it
#
# Then the text a typing user loses per move ("text-lost <kind>"):
# TestFormStateSurvivesMoves (drain with migration, SIGTERM: must be 0) and
# TestTextLostOnCrash (kill -9: what was typed after the last snapshot).
#
# kill-9 is the baseline: the others are also given as its multiple.
#
#   scripts/bench/faults.sh            # 3 runs each
#   RUNS=5 scripts/bench/faults.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
log=$(mktemp)
full=${FULL_LOG:-$(mktemp)}
trap 'rm -f "$log"' EXIT
CI=${CI:-true} go test ./internal/e2e -count "$RUNS" -v -timeout 60m \
	-run '^(TestFailover|TestStallE2E|TestQuickRestartE2E|TestDoubleFaultE2E|TestPartitionE2E|TestUpAndStatus|TestFormStateSurvivesMoves|TestTextLostOnCrash)$' >"$full" 2>&1 || true
grep 'fault-to-live' "$full" >"$log" || true
if grep -E '^--- FAIL' "$full"; then echo "(failed runs: the whole log is in $full)"; fi
grep -E 'fault-to-live' "$log" | sed -E 's/.*fault-to-live ([a-z0-9-]+): ([0-9.]+)(ms|s).*/\1 \2 \3/' |
	awk '{ v = ($3 == "ms") ? $2 / 1000 : $2; print $1, v }' | sort -k1,1 -k2,2n | awk '
  { k = $1; n[k]++; v[k, n[k]] = $2 }
  END {
    any = 0
    for (k in n) any = 1
    if (!any) { print "no runs"; exit 1 }
    base = 0
    if ("kill-9" in n) { c = n["kill-9"]; base = (c % 2) ? v["kill-9", (c + 1) / 2] : (v["kill-9", c / 2] + v["kill-9", c / 2 + 1]) / 2 }
    printf "%-16s %5s %8s %8s %8s  %s\n", "fault", "runs", "min s", "p50 s", "max s", "p50 / kill-9"
    for (k in n) {
      c = n[k]; p50 = (c % 2) ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2
      ratio = "-"
      if (base > 0) ratio = sprintf("%.2fx", p50 / base)
      printf "%-16s %5d %8.2f %8.2f %8.2f  %s\n", k, c, v[k, 1], p50, v[k, c], ratio
    }
  }'
echo
echo "text lost per move (characters):"
grep -oE 'text-lost [A-Za-z0-9-]+: [0-9]+ of [0-9]+' "$full" | sort | awk '{ print "  " $0 }' || echo "  no runs"
