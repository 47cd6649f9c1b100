#!/usr/bin/env bash
# Render cache on a real cluster (the cloudbrowser binary: a master with
# --proxies 0 and one chromium worker; a local page that counts its
# requests), in one run: p50 of synchronous GET /api/v1/render misses (a new
# URL each) vs hits (the same URL again, right after), the ratio; then
# CONCURRENT identical requests for a new URL at once: page requests the
# site got (must be 1) and the p50/max latency. RUNS runs, medians.
#
#   scripts/bench/render-cache.sh                     # REQUESTS=15 CONCURRENT=100 RUNS=3
#   REQUESTS=30 RUNS=5 scripts/bench/render-cache.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REQUESTS=${REQUESTS:-15}
CONCURRENT=${CONCURRENT:-100}
RUNS=${RUNS:-3}

command -v chromium >/dev/null || [ -n "${CB_CHROMIUM:-}" ] || apt_install chromium
log "building cloudbrowser and jobsbench..."
(cd "$ROOT" && go build -o "$TMP/bin/cloudbrowser" ./cmd/cloudbrowser && go build -o "$TMP/bin/jobsbench" ./scripts/bench/cmd/jobsbench)
for i in $(seq 1 "$RUNS"); do
	log "run $i of $RUNS"
	"$TMP/bin/jobsbench" -bin "$TMP/bin/cloudbrowser" -mode cache -requests "$REQUESTS" -concurrent "$CONCURRENT" | tee "$TMP/run$i"
done
echo
echo "== summary (median of $RUNS runs) =="
for m in miss_p50 hit_p50 hit/miss concurrent_requests concurrent_site_requests concurrent_p50 concurrent_max concurrent_max/miss_p50; do
	printf '%s\t%s\n' "$m" "$(cat "$TMP"/run* | awk -v m="$m" '$1 == m { print $2 }' | median)"
done
printf 'concurrent_site_requests (every run)\t%s\n' "$(cat "$TMP"/run* | awk '$1 == "concurrent_site_requests" { printf "%s ", $2 }')"
