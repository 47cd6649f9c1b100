#!/usr/bin/env bash
# WebSocket throughput: the same wsload client against the echo worker
# directly, through the CloudBrowser proxy relaying (a worker on another
# host), through the proxy handing the connection to the worker (a worker
# on its host, the default there), and through nginx, in one run.
#
#   scripts/bench/ws-relay.sh                       # SIZES="65536 1024" CONNS=4 DURATION=5
#   SIZES=1048576 CONNS=8 DURATION=10 scripts/bench/ws-relay.sh
#   LOOP=1 scripts/bench/ws-relay.sh   # + the looproxy baseline (an epoll loop relaying bytes)
#   ROUNDS=3 scripts/bench/ws-relay.sh  # targets alternated 3 times, medians
#
# MB/s counts echoed payload (one direction); every byte crosses the relay
# twice. On small machines the client, relay and worker share the CPUs:
# compare ratios within a run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZES=${SIZES:-65536 1024}
CONNS=${CONNS:-4}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-1}
WS_PATH=${WS_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/ws}

command -v nginx >/dev/null || apt_install nginx-light || apt_install nginx
build_bins
start_worker
start_proxy
targets=("direct $WORKER" "relay $PROXY")
HANDOFF=1 start_proxy
targets+=("handoff $PROXY")
if [ "${LOOP:-0}" = 1 ]; then start_loop loop tcp; fi
start_nginx
targets+=("nginx $NGINX")

ws_echo "WebSocket echo"
