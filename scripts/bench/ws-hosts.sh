#!/usr/bin/env bash
# WebSocket throughput across hosts: three network namespaces joined by a
# bridge stand for the user's machine, host A (a proxy only) and host B
# (the worker, with a proxy beside it). The same wsload client echoes
#   direct     to the worker on host B;
#   relay      through host A's proxy, which relays to host B (a page served
#              by host A, its socket at the page's origin);
#   socket-url through host B's proxy, which hands the socket to the worker
#              (a worker started with --socket-url pointing at that proxy).
# Targets alternate for ROUNDS rounds; medians. Needs root (ip netns).
#
#   scripts/bench/ws-hosts.sh              # SIZES="65536 1024" CONNS=4 DURATION=5 ROUNDS=3
#
# The namespaces share this machine's CPUs: a relay's CPU is taken from the
# client and the worker, as on one host; what differs from loopback is the
# path (veth and a bridge, as between machines).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZES=${SIZES:-65536 1024}
CONNS=${CONNS:-4}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
WS_PATH=${WS_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/ws}
NS=cbh$$ # namespaces cbh<pid>{u,a,b}, bridge cbh<pid>
NET=10.231.$(($$ % 250)).0

[ "$(id -u)" = 0 ] || { log "needs root (ip netns)"; exit 1; }
netns_down() {
	local n
	for n in u a b; do ip netns del "$NS$n" 2>/dev/null || true; done
	ip link del "$NS" 2>/dev/null || true
}
trap 'cleanup; netns_down' EXIT

ip link add "$NS" type bridge
ip link set "$NS" up
i=1
for n in u a b; do
	ip netns add "$NS$n"
	ip link add "$NS$n" type veth peer name eth0 netns "$NS$n"
	ip link set "$NS$n" master "$NS" up
	ip -n "$NS$n" addr add "${NET%.0}.$((i + 1))/24" dev eth0
	ip -n "$NS$n" link set eth0 up
	ip -n "$NS$n" link set lo up
	i=$((i + 1))
done
A=${NET%.0}.3 B=${NET%.0}.4

build_bins
ip netns exec "${NS}b" "$TMP/bin/benchworker" -addr "$B:0" -addr-file "$TMP/worker.addr" -handoff "$TMP/worker.sock" 2>"$TMP/worker.log" &
PIDS+=($!)
wait_file "$TMP/worker.addr"
WORKER=$(cat "$TMP/worker.addr")
ip netns exec "${NS}a" "$TMP/bin/benchproxy" -addr "$A:0" -addr-file "$TMP/relay.addr" -worker "$WORKER" 2>>"$TMP/proxy.log" &
PIDS+=($!)
ip netns exec "${NS}b" "$TMP/bin/benchproxy" -addr "$B:0" -addr-file "$TMP/socket.addr" -worker "$WORKER" -handoff "$TMP/worker.sock" 2>>"$TMP/proxy.log" &
PIDS+=($!)
wait_file "$TMP/relay.addr"
wait_file "$TMP/socket.addr"
targets=("direct $WORKER" "relay $(cat "$TMP/relay.addr")" "socket-url $(cat "$TMP/socket.addr")")

ws_echo "WebSocket echo across namespaces" ip netns exec "${NS}u"
