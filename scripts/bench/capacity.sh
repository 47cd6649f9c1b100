#!/usr/bin/env bash
# Capacity of one worker: N clients (stepped up), each a new user on their
# own virtual browser of the typing test app, connected through the proxy
# like a client engine (every frame acknowledged), each typing KEYRATE
# keys/s. Per step: input→frame latency p50/p95, frames/s per client, the
# worker's CPU (Go process vs its Chromium children) and PSS. Stops when p95
# crosses KNEE, prints a markdown table and the knee, then (PERF=1, perf
# installed) profiles the worker's tree at that load. Starts `cloudbrowser
# up` with one Chromium worker, the per-address quotas off (every client
# comes from 127.0.0.1).
#
#   nice -n 19 scripts/bench/capacity.sh    # STEPS=1,2,4,6,8,12,16,24,32,48 KEYRATE=5 WINDOW=20s KNEE=100ms PERF=1
#   PERF_DIR=/tmp/cap-perf …                  # keeps perf.data and the reports
#   STEPS=15 VIEWERS=2 WORKERS=3 PERF=0 …     # 15 browsers × 2 typing viewers over 3 workers
#                                             # (CPU and PSS columns add up all the workers)
#   CB_RENDER_SCALE=0.5 …                     # the worker draws pages at half their pixels (--render-scale)
#   CB_FRAME_SCALE_MIN=1 …                    # no graded frames: the baseline
#   TILES=1 …                                 # every client asks for tile updates ({"t":"caps","tiles":true}),
#                                             # as engine.js does; the worker sends them with --frame-tiles (its
#                                             # default, CB_FRAME_TILES). Without TILES, clients send no caps
#                                             # and get whole frames from the same worker: the baseline
#   KEEP_LOG=/tmp/cap.log LOG_LEVEL=info …    # keeps the cluster's log
set -euo pipefail
source "$(dirname "$0")/lib.sh"
STEPS=${STEPS:-1,2,4,6,8,12,16,24,32,48}
KEYRATE=${KEYRATE:-5}
WINDOW=${WINDOW:-20s}
KNEE=${KNEE:-100ms}
AFTER_KNEE=${AFTER_KNEE:-0}
PERF=${PERF:-1}
VIEWERS=${VIEWERS:-1}
TILES=${TILES:-0}
WORKERS=${WORKERS:-1}
(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/capacity)
PERF_ARGS=()
if [ "$PERF" = 1 ]; then
	if command -v perf >/dev/null || apt_install linux-perf; then
		PERF_ARGS=(-perf-dir "${PERF_DIR:-$TMP/perf}")
	else
		log "no perf: the profile is skipped"
	fi
fi
CB_QUOTA_BROWSERS_PER_IP=0 CB_QUOTA_INSTANCES_PER_IP=0 CB_QUOTA_SOCKETS_PER_IP=0 CB_QUOTA_NEW_IDENTITIES_BURST=0 \
	start_up "$ROOT/internal/e2e/testdata/apps" 127.0.0.1:0 --workers "$WORKERS"
log "cluster at $PUBLIC, worker $WORKER; TILES=$TILES; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$TMP/bin/capacity" -public "http://$PUBLIC" -up-pid "$UP_PID" -steps "$STEPS" -rate "$KEYRATE" -window "$WINDOW" \
	-knee "$KNEE" -after-knee "$AFTER_KNEE" -viewers "$VIEWERS" -workers "$WORKERS" \
	-tiles="$([ "$TILES" = 1 ] && echo true || echo false)" "${PERF_ARGS[@]}"
log "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
