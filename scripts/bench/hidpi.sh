#!/usr/bin/env bash
# HiDPI: bytes per second to one viewer at device pixel ratio 1 and 2, in
# the same run (viewer-bytes' phases: idle, typing, scrolling; the reading
# benchmark app). Starts `cloudbrowser up` with one Chromium worker.
#
#   scripts/bench/hidpi.sh            # PHASE=10s per phase
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PHASE=${PHASE:-10s}
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/viewerbytes)
start_up "$ROOT/scripts/bench/apps"
for scale in 1 2; do
	"$TMP/bin/viewerbytes" -public "http://$PUBLIC" -phase "$PHASE" -scale "$scale" | tee "$TMP/scale$scale.txt"
done
# typing KiB/s at 2 over at 1
awk '/^typing/ { kib[FILENAME] = $5 } END { a = kib[ARGV[1]]; b = kib[ARGV[2]]; if (a > 0) printf "\ntyping viewer, KiB/s at scale 2 over scale 1: %.2fx\n", b / a }' "$TMP/scale1.txt" "$TMP/scale2.txt"
