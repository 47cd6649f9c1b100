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

declare -A MBS MPS
for round in $(seq 1 "$ROUNDS"); do
	for size in $SIZES; do
		for t in "${targets[@]}"; do
			read -r name addr _ <<<"$t"
			log "round $round: wsload $name size=$size conns=$CONNS ${DURATION}s"
			out=$(timeout $((DURATION + 30)) "$TMP/bin/wsload" -url "ws://$addr$WS_PATH" -conns "$CONNS" \
				-size "$size" -duration "${DURATION}s" -label "$name")
			MBS[$name,$size]+="$(sed -n 's/.*MB_per_s=\([0-9.]*\).*/\1/p' <<<"$out") "
			MPS[$name,$size]+="$(sed -n 's/.*msgs_per_s=\([0-9.]*\).*/\1/p' <<<"$out") "
		done
	done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
for k in "${!MBS[@]}"; do MBS[$k]=$(med "${MBS[$k]}") MPS[$k]=$(med "${MPS[$k]}"); done

printf '\nWebSocket echo  (%s conns, %ss each, %s rounds alternated, medians, %s CPUs)\n' "$CONNS" "$DURATION" "$ROUNDS" "$(nproc)"
printf '%-8s %9s %10s %12s %10s\n' target msg_bytes MB/s msgs/s vs_direct
for size in $SIZES; do
	for t in "${targets[@]}"; do
		read -r name _ <<<"$t"
		printf '%-8s %9s %10s %12s %10s\n' "$name" "$size" "${MBS[$name,$size]}" "${MPS[$name,$size]}" \
			"$(ratio "${MBS[$name,$size]}" "${MBS[direct,$size]}")"
	done
done
