#!/usr/bin/env bash
# Bytes and frames per second that one viewer receives while the page is
# idle, while the user types and while they scroll (the reading benchmark
# app, scripts/bench/apps). Starts `cloudbrowser up` with one Chromium worker.
#
#   scripts/bench/viewer-bytes.sh            # PHASE=10s per phase
#   TILES=1 scripts/bench/viewer-bytes.sh    # tile updates (--frame-tiles) vs whole frames,
#                                            # ROUNDS=2 alternated rounds, same worker
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PHASE=${PHASE:-10s}
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/viewerbytes)
if [ -z "${TILES:-}" ]; then
	start_up "$ROOT/scripts/bench/apps"
	"$TMP/bin/viewerbytes" -public "http://$PUBLIC" -phase "$PHASE" -focus="${FOCUS:-true}"
	exit 0
fi
# Whole frames (an engine that does not compose tiles gets exactly what
# every engine got before) and tile updates, alternated on one worker.
CB_FRAME_TILES=true start_up "$ROOT/scripts/bench/apps"
# The worker's own CPU (Go: the diff and the tiles' encoding; not
# Chromium's) per frame, per phase.
WPID=$(pgrep -P "$UP_PID" -f -- ' worker ' | head -1 || true)
for r in $(seq 1 "${ROUNDS:-2}"); do
	for mode in false true; do
		"$TMP/bin/viewerbytes" -public "http://$PUBLIC" -phase "$PHASE" -focus="${FOCUS:-true}" -tiles="$mode" -worker-pid "${WPID:-0}" | tee "$TMP/r$r-$mode.txt"
	done
done
# KiB/s per phase, tiles over whole frames, each round
for r in $(seq 1 "${ROUNDS:-2}"); do
	for phase in typing scrolling; do
		a=$(awk -v p="$phase" '$1 == p { print $5 }' "$TMP/r$r-false.txt")
		b=$(awk -v p="$phase" '$1 == p { print $5 }' "$TMP/r$r-true.txt")
		echo "round $r $phase: whole $a KiB/s, tiles $b KiB/s, ratio $(ratio "$b" "$a")"
	done
done
