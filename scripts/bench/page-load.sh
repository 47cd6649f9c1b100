#!/usr/bin/env bash
# Page load of the client engine: USERS users at once each load their
# Browser URL's engine page and all its assets, cold (empty cache) and warm
# (the cache a browser keeps), through the proxy and directly against the
# worker in the same run; p50/p95/p99 per load, requests and bytes per load,
# proxy÷direct. Starts `cloudbrowser up` (the proxy embedded in the master,
# one worker; RUNTIME=none by default: serving the page and its assets never
# touches the browser, and idle Chromium processes would only add noise).
#
#   scripts/bench/page-load.sh          # USERS=20 LOADS=10 ROUNDS=3 APP=notes
#   CB_BIN=/path/to/cloudbrowser scripts/bench/page-load.sh   # another build (e.g. main's, the baseline)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
USERS=${USERS:-20}
LOADS=${LOADS:-10}
ROUNDS=${ROUNDS:-3}
APP=${APP:-notes}
RUNTIME=${RUNTIME:-none}
if [ "$RUNTIME" = chromium ]; then command -v chromium >/dev/null || apt_install chromium; fi
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/pageload)
# Quotas per address are lifted: every simulated user comes from 127.0.0.1.
start_up "" 127.0.0.1:0 --rmi 127.0.0.1:0 --gossip 127.0.0.1:0 --admin "" --runtime "$RUNTIME" \
	--quota-instances-per-ip 0 --quota-browsers-per-ip 0 --quota-new-identities-burst 0
log "cluster at $PUBLIC, worker at $WORKER; $USERS users"
"$TMP/bin/pageload" -public "http://$PUBLIC" -worker "$WORKER" -secret-file "$TMP/data/cluster.secret" \
	-app "$APP" -users "$USERS" -loads "$LOADS" -rounds "$ROUNDS"
