#!/usr/bin/env bash
# The automation endpoint: a CDP command's round trip and a session's
# start through the public address, the proxy and the worker's gate, vs CDP
# spoken straight to a Chromium of this host, in the same run (the reading
# benchmark app, scripts/bench/apps). Starts `cloudbrowser up` with one
# Chromium worker.
#
#   scripts/bench/automation.sh            # ROUNDS=5 N=300
set -euo pipefail
source "$(dirname "$0")/lib.sh"
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/cdpbench)
start_up "$ROOT/scripts/bench/apps"
"$TMP/bin/cdpbench" -public "http://$PUBLIC" -token-file "$TMP/data/automation.token" -rounds "${ROUNDS:-5}" -n "${N:-300}"
