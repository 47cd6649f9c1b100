#!/usr/bin/env bash
# Render throughput of one worker's job executor on real Chromium, in one
# run: PNG renders of a small local page with browsers leased from the
# general pool (reused) vs a new browser per job, closed after it
# (BenchmarkRenderPooledVsFresh; 2 job slots, 12 renders each way per
# iteration, alternating). COUNT runs; jobs/s of each and the ratio, median.
#
#   scripts/bench/jobs-render.sh            # ITER=2 COUNT=3
#   ITER=5 COUNT=5 scripts/bench/jobs-render.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ITER=${ITER:-2}
COUNT=${COUNT:-3}

command -v chromium >/dev/null || [ -n "${CB_CHROMIUM:-}" ] || apt_install chromium
(cd "$ROOT" && go test ./worker/jobs -run '^$' -bench '^BenchmarkRenderPooledVsFresh$' \
	-benchtime "${ITER}x" -count "$COUNT" -timeout 30m) | tee "$TMP/out"
echo
echo "== summary (median of $COUNT) =="
for m in pooled-jobs/s fresh-jobs/s fresh/pooled; do
	printf '%s\t%s\n' "$m" "$(bench_metric "$TMP/out" "$m" | median)"
done
