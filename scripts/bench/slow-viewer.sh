#!/usr/bin/env bash
# A viewer on a slow link: how stale is the screen while they type? The
# viewer runs in a network namespace behind a shaped veth link (RATE toward
# the viewer, a token bucket queueing at most QUEUE; tbf, since kernels
# without netem are common in VMs); the cluster runs on this host. The same typing
# runs twice, on fresh browsers: without frame acknowledgements (frames are
# sent as fast as the socket takes them) and with them, as the client engine
# sends them (frames paced, worker/engine/pace.go). Needs root (ip netns, tc).
#
#   scripts/bench/slow-viewer.sh             # RATE=2mbit QUEUE=100ms KEYS=100 KEYRATE=5 APP=typing
#   RATE=256kbit APP=reading APPS=scripts/bench/apps scripts/bench/slow-viewer.sh   # a text page (~110 KiB frames)
#   CB_BIN=/path/to/an/older/cloudbrowser …  # the same run with another build (a baseline)
#   LINK=0 …                                   # no link hint (first frames sized before any ack)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RATE=${RATE:-2mbit}
QUEUE=${QUEUE:-100ms}
KEYS=${KEYS:-100}
KEYRATE=${KEYRATE:-5}
ROUNDS=${ROUNDS:-1}
APP=${APP:-typing}
LINK=${LINK:-auto} # the link hint on connecting: auto (measured as the engine does), 0 (none) or kbit/s
APPS=${APPS:-$ROOT/internal/e2e/testdata/apps}

[ "$(id -u)" = 0 ] || { log "needs root (ip netns, tc)"; exit 1; }
command -v tc >/dev/null || apt_install iproute2

# A /30 for the link; names stay under 15 characters.
NS=cbslow$$ VH=cbh$$ VN=cbn$$ NET=10.231.$((RANDOM % 250)).
cleanup_ns() { ip netns del "$NS" 2>/dev/null || true; ip link del "$VH" 2>/dev/null || true; }
trap 'cleanup_ns; cleanup' EXIT
ip netns add "$NS"
ip link add "$VH" type veth peer name "$VN"
ip link set "$VN" netns "$NS"
ip addr add "${NET}1/30" dev "$VH"
ip link set "$VH" up
ip netns exec "$NS" ip addr add "${NET}2/30" dev "$VN"
ip netns exec "$NS" ip link set "$VN" up
ip netns exec "$NS" ip link set lo up
tc qdisc add dev "$VH" root tbf rate "$RATE" burst 16kb latency "$QUEUE" # toward the viewer: frames

(cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser ./scripts/bench/cmd/slowviewer)
CB_GENERAL_POOL_MIN=0 start_up "$(realpath "$APPS")" "${NET}1:0"
log "viewer in netns $NS, link ${NET}1 <-> ${NET}2: $RATE toward the viewer, queue $QUEUE"
printf '\nTyping %s keys at %s/s behind a %s link, queue %s (p50/p95/max: key to the first frame painted after it)\n' \
	"$KEYS" "$KEYRATE" "$RATE" "$QUEUE"
for round in $(seq 1 "$ROUNDS"); do
	for ack in false true; do
		ip netns exec "$NS" "$TMP/bin/slowviewer" -public "http://$PUBLIC" -keys "$KEYS" -rate "$KEYRATE" -ack="$ack" -link "$LINK" \
			-app "$APP" -label "round$round"
	done
done
