#!/usr/bin/env bash
# A new user's first painted frame: Application URL → first screencast frame
# drawn on the client engine's canvas, in one already-running headless
# Chromium (a fresh incognito context per visit), with a breakdown by step.
# Starts `cloudbrowser up` (one proxy embedded in the master, one Chromium
# worker, the sample apps).
#
#   scripts/bench/first-frame.sh            # N=20 visits of /notes, RUNS=1
#   RUNS=3 N=20 APP=notes CB_BIN=/path/to/cloudbrowser scripts/bench/first-frame.sh
#   LOG_LEVEL=debug LOG_OUT=/tmp/ff.log scripts/bench/first-frame.sh  # keeps run i's cluster log in /tmp/ff.log.i
#
# CB_BIN runs another build of cloudbrowser (e.g. main's, for a baseline in
# the same session); the driver always comes from this tree.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${N:-20}
RUNS=${RUNS:-1}
APP=${APP:-notes}
CHROMIUM=${CHROMIUM:-$(command -v chromium || true)}
[ -n "$CHROMIUM" ] || { apt_install chromium; CHROMIUM=$(command -v chromium); }
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/firstframe)
BIN=${CB_BIN:-$TMP/bin/cloudbrowser}
for run in $(seq 1 "$RUNS"); do
	rm -rf "$TMP/data" "$TMP/up.ready"
	"$BIN" --log-level "${LOG_LEVEL:-warn}" --ready-file "$TMP/up.ready" up --data-dir "$TMP/data" --listen 127.0.0.1:0 --workers 1 \
		>"$TMP/up.out" 2>"$TMP/up.log" &
	UP=$!
	PIDS+=("$UP")
	wait_file "$TMP/up.ready" 120 # up writes it once a worker serves
	PUBLIC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addrs"]["public"])' "$TMP/up.ready")
	log "run $run/$RUNS: cluster at $PUBLIC"
	"$TMP/bin/firstframe" -public "http://$PUBLIC" -app "$APP" -n "$N" -chromium "$CHROMIUM" | tee "$TMP/run$run.txt"
	kill "$UP"
	wait "$UP" 2>/dev/null || true
	[ -z "${LOG_OUT:-}" ] || cp "$TMP/up.log" "$LOG_OUT.$run"
done
if [ "$RUNS" -gt 1 ]; then
	for q in p50 p95 max; do
		printf '%s of the %d runs: median %s ms\n' "$q" "$RUNS" \
			"$(sed -n "s/^summary.*${q}_ms=\([0-9.]*\).*/\1/p" "$TMP"/run*.txt | median)"
	done
fi
