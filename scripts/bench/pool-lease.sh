#!/usr/bin/env bash
# Browser pools on real Chromium (see docs/pools.md), in one run: lease
# latency from a warm specific pool vs cold creation with the same
# initialization sequence (log in to a local site), p50/p95 and the ratio;
# then lease/return cycles per second through a pool with a back sequence.
#
#   scripts/bench/pool-lease.sh                       # COLD=20 WARM=200 BROWSERS=2 CLIENTS=0 (one per browser) DURATION=10s
#   COLD=50 DURATION=30s scripts/bench/pool-lease.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COLD=${COLD:-20}
WARM=${WARM:-200}
BROWSERS=${BROWSERS:-2}
CLIENTS=${CLIENTS:-0}
DURATION=${DURATION:-10s}

command -v chromium >/dev/null || [ -n "${CB_CHROMIUM:-}" ] || apt_install chromium
log "building poollease..."
(cd "$ROOT" && go build -o "$TMP/bin/poollease" ./scripts/bench/cmd/poollease)
log "chromium: ${CB_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}"
"$TMP/bin/poollease" -cold "$COLD" -warm "$WARM" -browsers "$BROWSERS" -clients "$CLIENTS" -duration "$DURATION" |
	tee "$TMP/out"
echo
echo "== summary =="
column -t -s $'\t' "$TMP/out" 2>/dev/null || cat "$TMP/out"
