#!/usr/bin/env bash
# Chromium density: PSS per idle virtual browser at several browser counts,
# and cold creation time (browser context + page + first painted frame,
# p50/p95 over all browsers created), once with the runtime's default flags
# and once with the densest flags found (see docs/chromium.md).
#
#   scripts/bench/chromium-density.sh                 # COUNTS=1,10,30
#   COUNTS=1,5 CB_CHROMIUM=/usr/lib/chromium/chromium scripts/bench/chromium-density.sh
#
# per_browser_MiB = (PSS with N browsers - PSS with none) / N, where PSS sums
# Chromium's main process and all its descendants. Each browser shows a small
# styled page with a script; memory is sampled after SETTLE of idling.
# With REST=1 (the default) each count is measured again with every browser
# resting (hidden, as the worker does to browsers nobody watches), and then
# each is woken: wake_p50/p95 is the time until its first frame.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNTS=${COUNTS:-1,10,30}
SETTLE=${SETTLE:-3s}
REST=${REST:-1}
DENSE_FLAGS=${DENSE_FLAGS:-"--disable-features=SpareRendererForSitePerProcess,BackForwardCache --in-process-gpu --enable-low-end-device-mode --js-flags=--optimize-for-size"}
DENSE_RENDERER_LIMIT=${DENSE_RENDERER_LIMIT:-1}

log "building chromiumdensity..."
(cd "$ROOT" && go build -o "$TMP/bin/chromiumdensity" ./scripts/bench/cmd/chromiumdensity)

log "chromium: ${CB_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}"
log "default flags, counts $COUNTS"
"$TMP/bin/chromiumdensity" -header -name default -counts "$COUNTS" -settle "$SETTLE" -rest="$([ "$REST" = 1 ] && echo true || echo false)" | tee "$TMP/out"
log "dense flags: $DENSE_FLAGS --renderer-process-limit=$DENSE_RENDERER_LIMIT"
"$TMP/bin/chromiumdensity" -name dense -counts "$COUNTS" -settle "$SETTLE" \
	-renderer-limit "$DENSE_RENDERER_LIMIT" -flags "$DENSE_FLAGS" | tee -a "$TMP/out"

echo
echo "== summary =="
column -t -s $'\t' "$TMP/out" 2>/dev/null || cat "$TMP/out"
