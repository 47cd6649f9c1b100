#!/usr/bin/env bash
# HTTP requests/s and p99 latency of a tiny handler, measured with wrk
# directly against the worker and through the CloudBrowser proxy (and
# through nginx when it is installed), in one run.
#
#   scripts/bench/proxy-http.sh            # DURATION=10 CONNS=32 THREADS=1
#   DURATION=5 CONNS=64 scripts/bench/proxy-http.sh
#
# On small machines wrk, the proxy and the worker share the CPUs: compare
# ratios within a run, not absolute numbers across machines.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
REQ_PATH=${REQ_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/r}

command -v wrk >/dev/null || apt_install wrk
build_bins
start_worker
start_proxy
targets=("direct $WORKER" "proxy $PROXY")
if command -v nginx >/dev/null; then
	start_nginx
	targets+=("nginx $NGINX")
fi

# to_ms converts wrk latency strings (812.00us, 1.23ms, 1.01s) to ms.
to_ms() { awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v*=1000 } printf "%.3f", v }' <<<"$1"; }

declare -A RPS P99
for t in "${targets[@]}"; do
	read -r name addr <<<"$t"
	url="http://$addr$REQ_PATH"
	if command -v curl >/dev/null; then curl -fsS -o /dev/null --max-time 5 "$url"; fi # fail early, not after a run
	log "wrk $name: $url (${DURATION}s, $CONNS conns, $THREADS threads)"
	out=$(timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$url")
	if grep -q "Non-2xx" <<<"$out"; then log "$out"; log "non-2xx answers from $name"; exit 1; fi
	RPS[$name]=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
	P99[$name]=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
done

printf '\nHTTP GET %s  (wrk -t%s -c%s -d%ss, %s CPUs)\n' "$REQ_PATH" "$THREADS" "$CONNS" "$DURATION" "$(nproc)"
printf '%-8s %12s %10s %12s %10s\n' target req/s p99_ms rps_vs_direct p99_vs_direct
for t in "${targets[@]}"; do
	read -r name _ <<<"$t"
	printf '%-8s %12.0f %10.3f %12s %10s\n' "$name" "${RPS[$name]}" "${P99[$name]}" \
		"$(ratio "${RPS[$name]}" "${RPS[direct]}")" "$(ratio "${P99[$name]}" "${P99[direct]}")"
done
