#!/usr/bin/env bash
# Input-to-frame latency (p50/p95) and frames/s while typing, through the
# proxy and directly against the worker, in one run. Starts `cloudbrowser up`
# with one Chromium worker and the typing test app.
#
#   scripts/bench/input-latency.sh          # N=200 key presses per target
#   TILES=1 scripts/bench/input-latency.sh  # whole frames and tile updates
#                                           # alternated, ROUNDS=2, one worker
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${N:-200}
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/inputlatency)
start_up "$ROOT/internal/e2e/testdata/apps"
if [ -z "${TILES:-}" ]; then
	"$TMP/bin/inputlatency" -public "http://$PUBLIC" -worker "$WORKER" -secret-file "$TMP/data/cluster.secret" -n "$N"
	exit 0
fi
for r in $(seq 1 "${ROUNDS:-2}"); do
	for mode in false true; do
		echo "round $r, tiles=$mode"
		"$TMP/bin/inputlatency" -public "http://$PUBLIC" -worker "$WORKER" -secret-file "$TMP/data/cluster.secret" -n "$N" -tiles="$mode"
	done
done
