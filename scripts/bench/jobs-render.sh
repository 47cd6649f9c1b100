#!/usr/bin/env bash
# Render throughput of one worker's job executor on real Chromium, in one
# run: PNG renders of a small local page with general-pool browsers reused
# between jobs (reset after each, as the worker does) vs a new browser per
# job, closed after it (BenchmarkRenderReusedVsFresh; 2 job slots, 12
# renders each way per iteration, alternating). COUNT runs; jobs/s of each
# and the ratio reused/fresh (issue #38's goal: >= 1.5), median.
#
#   scripts/bench/jobs-render.sh            # ITER=2 COUNT=3
#   ITER=5 COUNT=5 scripts/bench/jobs-render.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ITER=${ITER:-2}
COUNT=${COUNT:-3}

command -v chromium >/dev/null || [ -n "${CB_CHROMIUM:-}" ] || apt_install chromium
(cd "$ROOT" && go test ./worker/jobs -run '^$' -bench '^BenchmarkRenderReusedVsFresh$' \
	-benchtime "${ITER}x" -count "$COUNT" -timeout 30m) | tee "$TMP/out"
echo
echo "== summary (median of $COUNT) =="
for m in reused-jobs/s fresh-jobs/s reused/fresh; do
	printf '%s\t%s\n' "$m" "$(bench_metric "$TMP/out" "$m" | median)"
done
