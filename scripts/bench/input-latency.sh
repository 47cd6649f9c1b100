#!/usr/bin/env bash
# Input-to-frame latency (p50/p95) and frames/s while typing, through the
# proxy and directly against the worker, in one run. Starts `cloudbrowser up`
# with one Chromium worker and the typing test app.
#
#   scripts/bench/input-latency.sh          # N=200 key presses per target
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${N:-200}
command -v chromium >/dev/null || apt_install chromium
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/inputlatency)
"$TMP/bin/cloudbrowser" --log-level warn --ready-file "$TMP/up.ready" up --data-dir "$TMP/data" --listen 127.0.0.1:0 --workers 1 \
	--apps "$ROOT/internal/e2e/testdata/apps" >"$TMP/up.out" 2>"$TMP/up.log" &
PIDS+=($!)
wait_file "$TMP/up.ready" 120 # up writes it once a worker serves
PUBLIC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addrs"]["public"])' "$TMP/up.ready")
TOKEN=$(cat "$TMP/data/admin.token")
WORKER=""
for i in $(seq 1 100); do
	WORKER=$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://$PUBLIC/api/v1/cluster" |
		python3 -c 'import json,sys; w=[x for x in (json.load(sys.stdin)["workers"] or []) if x["state"]=="connected"]; print(w[0]["httpAddr"] if w else "")')
	[ -n "$WORKER" ] && break
	sleep 0.2
done
[ -n "$WORKER" ] || { log "no worker registered"; cat "$TMP/up.log" >&2; exit 1; }
"$TMP/bin/inputlatency" -public "http://$PUBLIC" -worker "$WORKER" -secret-file "$TMP/data/cluster.secret" -n "$N"
