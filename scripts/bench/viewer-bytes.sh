#!/usr/bin/env bash
# Bytes and frames per second that one viewer receives while the page is
# idle, while the user types and while they scroll (the reading benchmark
# app, scripts/bench/apps). Starts `cloudbrowser up` with one Chromium worker.
#
#   scripts/bench/viewer-bytes.sh            # PHASE=10s per phase
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PHASE=${PHASE:-10s}
command -v chromium >/dev/null || apt_install chromium
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/viewerbytes)
"$TMP/bin/cloudbrowser" --log-level warn --ready-file "$TMP/up.ready" up --data-dir "$TMP/data" --listen 127.0.0.1:0 --workers 1 \
	--apps "$ROOT/scripts/bench/apps" >"$TMP/up.out" 2>"$TMP/up.log" &
PIDS+=($!)
wait_file "$TMP/up.ready" 120 # up writes it once a worker serves
PUBLIC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addrs"]["public"])' "$TMP/up.ready")
"$TMP/bin/viewerbytes" -public "http://$PUBLIC" -phase "$PHASE" -focus="${FOCUS:-true}"
