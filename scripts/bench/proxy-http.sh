#!/usr/bin/env bash
# HTTP requests/s, p99 latency and CPU per request of a tiny handler,
# measured with wrk directly against the worker, through the CloudBrowser
# proxy and through nginx (installed if missing), alternating targets for
# ROUNDS rounds and reporting medians.
#
#   scripts/bench/proxy-http.sh            # DURATION=6 CONNS=32 THREADS=1 ROUNDS=3
#   DURATION=5 CONNS=64 scripts/bench/proxy-http.sh
#   PROXIES=2 PROXY_GOMAXPROCS=1 scripts/bench/proxy-http.sh  # two proxy processes on one port
#   LOOP=1 scripts/bench/proxy-http.sh   # + the looproxy baselines (event loop; with net/http's parsers)
#   NETHTTP=1 scripts/bench/proxy-http.sh  # + the proxy without its event-loop edge (net/http alone)
#   NGINX_SAME=1 scripts/bench/proxy-http.sh  # + nginx also sending X-Forwarded-Proto and X-Request-Id
#   NGINX_UNIX=1 scripts/bench/proxy-http.sh  # + nginx reaching the worker over a unix socket
#   DELAY_MS=2 scripts/bench/proxy-http.sh  # each connection waits 2 ms between requests
#   AA=1 scripts/bench/proxy-http.sh     # + a second, identical nginx: the noise floor of a ratio
#   PIN=1 scripts/bench/proxy-http.sh    # wrk alone on the last CPU, every server on the others
#   BASE_REV=fee6039 scripts/bench/proxy-http.sh  # + "proxy-base": the proxy of another commit
#   ONLY="proxy nginx" ROUNDS=30 DURATION=3 scripts/bench/proxy-http.sh  # these (and direct) only
#
# AA=1 compares nginx with itself: how far apart two identical hops land
# round by round on this machine is the resolution of every other ratio.
# PIN=1 keeps the load generator off the CPUs of what it measures, as a
# second machine would (it needs 2 CPUs or more).
#
# Without DELAY_MS every connection sends its next request as soon as the
# answer is in: the machine is saturated, and a target that serves more
# requests/s keeps the CPUs busier, which its own p99 pays for. DELAY_MS
# (wrk's delay()) holds every target to about the same offered load, below
# what any of them can serve, so their p99s compare latency at equal load.
#
# The worker is on the proxy's host, as with `cloudbrowser up`: the proxy
# reaches it over a unix socket pair handed to its handoff socket. proxy-tcp
# is the same proxy over loopback TCP, as to a worker on another host.
#
# On small machines wrk, the proxy and the worker share the CPUs: compare
# ratios within a run, not absolute numbers across machines. CPU per
# request (from /proc, the proxy's process or nginx's workers; the worker
# behind them apart) is the figure least disturbed by other load.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-6}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-3}
REQ_PATH=${REQ_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/r}
WRK_SCRIPT=
if [ -n "${DELAY_MS:-}" ]; then
	WRK_SCRIPT=$TMP/delay.lua
	printf 'function delay()\n\treturn %d\nend\n' "$DELAY_MS" >"$WRK_SCRIPT"
fi

command -v wrk >/dev/null || apt_install wrk
command -v nginx >/dev/null || apt_install nginx || log "no nginx: its row is skipped"
build_bins
start_worker
WORKER_PID=${PIDS[-1]}
# add_proxy NAME: the proxies start_proxy just started, as target NAME.
add_proxy() { targets+=("$1 $PROXY $(IFS=,; echo "${PROXY_PIDS[*]}")"); }
# tree PIDS: the comma-separated PIDS and their children (nginx's workers
# are children of its master), one a line.
tree() { local q; for q in ${1//,/ }; do echo "$q"; pgrep -P "$q" || true; done; }
targets=("direct $WORKER $WORKER_PID")
HANDOFF=1 start_proxy
add_proxy proxy
HANDOFF=0 start_proxy
add_proxy proxy-tcp
if [ -n "${BASE_REV:-}" ]; then
	log "building the proxy of $BASE_REV..."
	mkdir -p "$TMP/base"
	git -C "$ROOT" archive "$BASE_REV" | tar -x -C "$TMP/base"
	(cd "$TMP/base" && go build -o "$TMP/base/bin/" ./scripts/bench/cmd/benchproxy)
	PROXY_BIN=$TMP/base/bin/benchproxy HANDOFF=1 start_proxy
	add_proxy proxy-base
fi
if [ "${NETHTTP:-0}" = 1 ]; then
	"$TMP/bin/benchproxy" -edge=false -addr 127.0.0.1:0 -addr-file "$TMP/nethttp.addr" -worker "$WORKER" 2>>"$TMP/proxy.log" &
	PIDS+=($!)
	wait_file "$TMP/nethttp.addr"
	targets+=("net/http $(cat "$TMP/nethttp.addr") ${PIDS[-1]}")
fi
if [ "${LOOP:-0}" = 1 ]; then
	start_loop loop http
	start_loop loop+parse http-parse
fi
if command -v nginx >/dev/null; then
	start_nginx
	targets+=("nginx $NGINX ${PIDS[-1]}")
	if [ "${NGINX_SAME:-0}" = 1 ]; then
		# nginx sending what the proxy sends a worker besides the hop
		# signature: the client's protocol and a request id.
		start_nginx nginx-same 'proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Request-Id $request_id;'
		targets+=("nginx+hdr $NGINX ${PIDS[-1]}")
	fi
	if [ "${AA:-0}" = 1 ]; then
		start_nginx nginx2
		targets+=("nginx2 $NGINX ${PIDS[-1]}")
	fi
	if [ "${NGINX_UNIX:-0}" = 1 ]; then
		start_nginx nginx-unix '' "unix:$WORKER_UNIX"
		targets+=("nginx-unix $NGINX ${PIDS[-1]}")
	fi
fi

if [ -n "${ONLY:-}" ]; then
	kept=()
	for t in "${targets[@]}"; do
		read -r name _ <<<"$t"
		case " direct $ONLY " in *" $name "*) kept+=("$t") ;; esac
	done
	targets=("${kept[@]}")
fi

WRK_CPU=()
if [ "${PIN:-0}" = 1 ]; then
	n=$(nproc)
	[ "$n" -ge 2 ] || { log "PIN=1 needs 2 CPUs or more"; exit 1; }
	servers="0-$((n - 2))"
	for t in "${targets[@]}"; do
		read -r _ _ pids <<<"$t"
		for p in $(tree "$pids"); do taskset -a -p -c "$servers" "$p" >/dev/null; done
	done
	WRK_CPU=(taskset -c "$((n - 1))")
	log "pinned: servers on CPUs $servers, wrk on CPU $((n - 1))"
fi

# to_ms converts wrk latency strings (812.00us, 1.23ms, 1.01s) to ms.
to_ms() { awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v*=1000 } printf "%.3f", v }' <<<"$1"; }

# ticks PIDS: CPU clock ticks used so far by the comma-separated PIDS and
# their children.
ticks() {
	local s=0 p
	for p in $(tree "$1"); do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
	echo "$s"
}
HZ=$(getconf CLK_TCK)

declare -A RPS P99 HOP WRK
for round in $(seq 1 "$ROUNDS"); do
	for t in "${targets[@]}"; do
		read -r name addr pid <<<"$t"
		url="http://$addr$REQ_PATH"
		if command -v curl >/dev/null; then curl -fsS -o /dev/null --max-time 5 "$url"; fi # fail early, not after a run
		log "round $round, wrk $name: $url (${DURATION}s, $CONNS conns, $THREADS threads)"
		a=$(ticks "$pid") wa=$(ticks "$WORKER_PID")
		out=$(timeout $((DURATION + 30)) "${WRK_CPU[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency ${WRK_SCRIPT:+-s "$WRK_SCRIPT"} "$url")
		b=$(ticks "$pid") wb=$(ticks "$WORKER_PID")
		if grep -q "Non-2xx" <<<"$out"; then log "$out"; log "non-2xx answers from $name"; exit 1; fi
		n=$(awk '/requests in/ {print $1}' <<<"$out")
		RPS[$name]+="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out") "
		P99[$name]+="$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")") "
		if [ "$name" != direct ]; then HOP[$name]+="$(awk -v c=$((b - a)) -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }') "; fi
		WRK[$name]+="$(awk -v c=$((wb - wa)) -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }') "
		log "round $round $name: req/s $(awk '/^Requests\/sec:/ {print $2}' <<<"$out"), p99 $(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")") ms"
	done
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '\nHTTP GET %s  (wrk -t%s -c%s -d%ss%s, %s rounds alternated, medians, %s CPUs%s)\n' "$REQ_PATH" "$THREADS" "$CONNS" "$DURATION" "${DELAY_MS:+, ${DELAY_MS} ms between requests on a connection}" "$ROUNDS" "$(nproc)" "${WRK_CPU:+, wrk pinned apart}"
printf '%-10s %10s %9s %13s %13s %14s %15s\n' target req/s p99_ms rps_vs_direct p99_vs_direct hop_cpu_us/req worker_cpu_us/req
for t in "${targets[@]}"; do
	read -r name _ <<<"$t"
	rps=$(med "${RPS[$name]}") p99=$(med "${P99[$name]}")
	hop=n/a
	[ "$name" = direct ] || hop=$(med "${HOP[$name]}")
	printf '%-10s %10.0f %9.3f %13s %13s %14s %15s\n' "$name" "$rps" "$p99" \
		"$(ratio "$rps" "$(med "${RPS[direct]}")")" "$(ratio "$p99" "$(med "${P99[direct]}")")" "$hop" "$(med "${WRK[$name]}")"
done
# paired A B: the ratios A/B of two space-separated lists, round by round
# (the two were measured back to back, so a slower minute of the machine
# moves both), one a line.
paired() { paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) | awk '$2 > 0 { printf "%.3f\n", $1 / $2 }'; }
# above N: how many of the numbers on stdin are above N.
above() { awk -v n="$1" '$1 > n { a++ } END { printf "%d of %d", a, NR }'; }
# spread: "median (min-max)" of the numbers on stdin.
spread() { local v; v=$(cat); printf '%.2f (%.2f-%.2f)' "$(median <<<"$v")" "$(sort -g <<<"$v" | head -1)" "$(sort -g <<<"$v" | tail -1)"; }
for pair in "proxy nginx" "proxy proxy-base" "proxy-base nginx" "nginx2 nginx" "proxy nginx2" "proxy-tcp nginx" "proxy nginx+hdr" "proxy nginx-unix"; do
	read -r a b <<<"$pair"
	[ -n "${RPS[$a]:-}" ] && [ -n "${RPS[$b]:-}" ] || continue
	printf '%s vs %s: req/s %s, p99 %s, CPU per request %s\n' "$a" "$b" \
		"$(ratio "$(med "${RPS[$a]}")" "$(med "${RPS[$b]}")")" \
		"$(ratio "$(med "${P99[$a]}")" "$(med "${P99[$b]}")")" \
		"$(ratio "$(med "${HOP[$a]}")" "$(med "${HOP[$b]}")")"
	printf '  round by round: req/s %s, more in %s rounds; p99 %s, lower in %s rounds\n' \
		"$(paired "${RPS[$a]}" "${RPS[$b]}" | spread)" "$(paired "${RPS[$a]}" "${RPS[$b]}" | above 1)" \
		"$(paired "${P99[$a]}" "${P99[$b]}" | spread)" "$(paired "${P99[$b]}" "${P99[$a]}" | above 1)"
done
