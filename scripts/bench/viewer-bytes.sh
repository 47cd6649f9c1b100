#!/usr/bin/env bash
# Bytes and frames per second that one viewer receives while the page is
# idle, while the user types and while they scroll (the reading benchmark
# app, scripts/bench/apps). Starts `cloudbrowser up` with one Chromium worker.
#
#   scripts/bench/viewer-bytes.sh            # PHASE=10s per phase
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PHASE=${PHASE:-10s}
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/viewerbytes)
start_up "$ROOT/scripts/bench/apps"
"$TMP/bin/viewerbytes" -public "http://$PUBLIC" -phase "$PHASE" -focus="${FOCUS:-true}"
