#!/usr/bin/env bash
# Files through a virtual browser's door: a 10 MiB upload to the page's
# file picker and a 10 MiB download of the page, through the proxy as a
# user's engine does, against plain HTTP on this host in the same run (the
# transfers benchmark app, scripts/bench/apps). Starts `cloudbrowser up`
# with one Chromium worker.
#
#   scripts/bench/files.sh            # ROUNDS=5
set -euo pipefail
source "$(dirname "$0")/lib.sh"
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/filesbench)
start_up "$ROOT/scripts/bench/apps"
"$TMP/bin/filesbench" -public "http://$PUBLIC" -rounds "${ROUNDS:-5}"
