#!/usr/bin/env bash
# HTTPS on the public listener (--tls-cert) against nginx with the same
# certificate, in one run, targets alternated for ROUNDS rounds, medians:
#
#   1. HTTPS keep-alive: wrk's requests/s and p99 on a tiny handler, and
#      the server's CPU per request (the proxy's process, nginx's workers);
#   2. new TLS connections per second: scripts/bench/cmd/tlshs, one
#      request per connection, full handshakes (with the client's default
#      key exchange, and with X25519 only) and resumed ones;
#   3. WebSocket echo throughput over TLS (wss), and what a TLS WebSocket
#      costs the proxy: it is relayed (a TLS session cannot be handed to a
#      worker), where a plain one to a worker on the same host is handed
#      over. CPU is counted for the proxy and the worker together (per
#      MB echoed), since a handoff moves the work to the worker.
#
#   scripts/bench/tls.sh                 # DURATION=5 CONNS=32 ROUNDS=3
#   ROUNDS=5 DURATION=8 scripts/bench/tls.sh
#   SIZES="65536 1024" WS_CONNS=4 scripts/bench/tls.sh
#
# The certificate is an ECDSA P-256 one made here with openssl, used by
# both servers. nginx runs `worker_processes auto`, the proxy with every
# CPU; on a small machine the load generators share the CPUs with them:
# compare ratios within a run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-5}
CONNS=${CONNS:-32}
HS_CONNS=${HS_CONNS:-8}
WS_CONNS=${WS_CONNS:-4}
SIZES=${SIZES:-65536}
ROUNDS=${ROUNDS:-3}
REQ_PATH=${REQ_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/r}
WS_PATH=${WS_PATH:-/bench/a/w-bench.aaaaaaaaaaaa/b/baaaaaaaaaaa/ws}

command -v wrk >/dev/null || apt_install wrk || { log "no wrk: cannot measure"; exit 1; }
if ! command -v nginx >/dev/null; then
	apt_install nginx || apt_install nginx-light || true
fi
if ! command -v nginx >/dev/null; then
	log "SKIP: nginx is not installed and could not be (apt-get install nginx); the comparison needs it"
	exit 0
fi
command -v openssl >/dev/null || apt_install openssl

# The certificate both servers serve.
CERT=$TMP/tls/server.crt KEY=$TMP/tls/server.key
mkdir -p "$TMP/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$KEY" -out "$CERT" 2>/dev/null

build_bins
start_worker
WORKER_PID=${PIDS[-1]}
# The proxy as in production with a worker on its host: plain WebSockets
# handed over. With -tls-cert the same proxy relays them.
HANDOFF=1 start_proxy
PROXY_PLAIN=$PROXY PROXY_PLAIN_PID=${PROXY_PIDS[0]}
HANDOFF=0 start_proxy
PROXY_RELAY=$PROXY PROXY_RELAY_PID=${PROXY_PIDS[0]}
HANDOFF=1 PROXY_FLAGS="-tls-cert $CERT -tls-key $KEY" start_proxy
PROXY_TLS=$PROXY PROXY_TLS_PID=${PROXY_PIDS[0]}
# The TLS proxy serves through net/http (the event-loop edge parses plain
# text only): the same proxy in plain text without its edge tells what
# TLS itself adds.
HANDOFF=1 PROXY_FLAGS="-edge=false" start_proxy
PROXY_NETHTTP=$PROXY PROXY_NETHTTP_PID=${PROXY_PIDS[0]}

# start_nginx_tls: nginx serving $CERT on one port (ssl) and plain HTTP on
# another, proxying both to $WORKER as start_nginx does; sets NGINX_TLS,
# NGINX_HTTP and NGINX_PID.
start_nginx_tls() {
	local attempt p1 p2
	for attempt in 1 2 3 4 5; do
		p1=$("$TMP/bin/benchworker" -free-port) p2=$("$TMP/bin/benchworker" -free-port)
		nginx_conf nginx-tls "$WORKER" "listen 127.0.0.1:$p1 ssl; listen 127.0.0.1:$p2;" \
			"ssl_certificate $CERT; ssl_certificate_key $KEY; ssl_protocols TLSv1.2 TLSv1.3;" \
			'proxy_set_header X-Forwarded-Proto $scheme;'
		if run_nginx nginx-tls "$p1" "$p2"; then
			NGINX_TLS=127.0.0.1:$p1 NGINX_HTTP=127.0.0.1:$p2
			return 0
		fi
		log "nginx could not take its ports (attempt $attempt); trying another pair"
	done
	return 1
}
start_nginx_tls

tree() { local q; for q in ${1//,/ }; do echo "$q"; pgrep -P "$q" || true; done; }
ticks() { local s=0 p; for p in $(tree "$1"); do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$s"; }
HZ=$(getconf CLK_TCK)
to_ms() { awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v*=1000 } printf "%.3f", v }' <<<"$1"; }
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
kv() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; } # kv KEY LINE

# 1. HTTPS keep-alive (and the same servers over plain HTTP, for what TLS adds).
http_targets=("proxy-tls https://$PROXY_TLS $PROXY_TLS_PID" "nginx-tls https://$NGINX_TLS $NGINX_PID"
	"proxy-http http://$PROXY_PLAIN $PROXY_PLAIN_PID" "proxy-nethttp http://$PROXY_NETHTTP $PROXY_NETHTTP_PID"
	"nginx-http http://$NGINX_HTTP $NGINX_PID")
declare -A RPS P99 CPU
for round in $(seq 1 "$ROUNDS"); do
	for t in "${http_targets[@]}"; do
		read -r name base pid <<<"$t"
		curl -kfsS -o /dev/null --max-time 5 "$base$REQ_PATH"
		a=$(ticks "$pid")
		out=$(timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$base$REQ_PATH")
		b=$(ticks "$pid")
		if grep -q "Non-2xx\|Socket errors" <<<"$out"; then log "$out"; log "errors from $name"; exit 1; fi
		n=$(awk '/requests in/ {print $1}' <<<"$out")
		RPS[$name]+="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out") "
		P99[$name]+="$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")") "
		CPU[$name]+="$(awk -v c=$((b - a)) -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }') "
		log "round $round $name: $(awk '/^Requests\/sec:/ {print $2}' <<<"$out") req/s"
	done
done

# 2. New TLS connections per second, full and resumed handshakes.
declare -A HS HSP99 HSCPU GROUP
for round in $(seq 1 "$ROUNDS"); do
	for mode in full full-x25519 resumed; do
		for t in "proxy-tls $PROXY_TLS $PROXY_TLS_PID" "nginx-tls $NGINX_TLS $NGINX_PID"; do
			read -r name addr pid <<<"$t"
			flag=""
			[ "$mode" = resumed ] && flag=-resume
			[ "$mode" = full-x25519 ] && flag=-x25519
			a=$(ticks "$pid")
			out=$(timeout $((DURATION + 30)) "$TMP/bin/tlshs" -addr "$addr" -path "$REQ_PATH" -conns "$HS_CONNS" -duration "${DURATION}s" $flag -label "$name")
			b=$(ticks "$pid")
			n=$(kv handshakes "$out")
			HS[$name,$mode]+="$(kv hs_per_s "$out") "
			HSP99[$name,$mode]+="$(kv p99_ms "$out") "
			HSCPU[$name,$mode]+="$(awk -v c=$((b - a)) -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }') "
			GROUP[$name,$mode]=$(kv group "$out")
			[ "$mode" != resumed ] || [ "$(kv resumed "$out")" -gt 0 ] || log "warning: $name resumed no session"
			log "round $round $name $mode: $(kv hs_per_s "$out") conn/s"
		done
	done
done

# 3. WebSocket echo: TLS (relayed, by necessity) against plain (handed over,
# or relayed), and nginx.
ws_targets=("proxy-wss wss://$PROXY_TLS $PROXY_TLS_PID" "nginx-wss wss://$NGINX_TLS $NGINX_PID"
	"proxy-handoff ws://$PROXY_PLAIN $PROXY_PLAIN_PID" "proxy-relay ws://$PROXY_RELAY $PROXY_RELAY_PID"
	"nginx-ws ws://$NGINX_HTTP $NGINX_PID")
declare -A MBS WSCPU
for round in $(seq 1 "$ROUNDS"); do
	for size in $SIZES; do
		for t in "${ws_targets[@]}"; do
			read -r name base pid <<<"$t"
			a=$(ticks "$pid,$WORKER_PID")
			out=$(timeout $((DURATION + 30)) "$TMP/bin/wsload" -insecure -url "$base$WS_PATH" -conns "$WS_CONNS" -size "$size" \
				-duration "${DURATION}s" -label "$name")
			b=$(ticks "$pid,$WORKER_PID")
			mbs=$(sed -n 's/.*MB_per_s=\([0-9.]*\).*/\1/p' <<<"$out")
			secs=$(sed -n 's/.*secs=\([0-9.]*\).*/\1/p' <<<"$out")
			MBS[$name,$size]+="$mbs "
			WSCPU[$name,$size]+="$(awk -v c=$((b - a)) -v mb="$mbs" -v s="$secs" -v hz="$HZ" 'BEGIN { printf "%.2f", c * 1e3 / hz / (mb * s) }') "
			log "round $round $name size=$size: $mbs MB/s"
		done
	done
done

printf '\nTLS on the public listener vs nginx (same ECDSA P-256 certificate, %s rounds alternated, medians, %s CPUs)\n' "$ROUNDS" "$(nproc)"
printf '\nHTTPS keep-alive: wrk -t1 -c%s -d%ss %s\n' "$CONNS" "$DURATION" "$REQ_PATH"
printf '%-14s %10s %9s %18s\n' target req/s p99_ms server_cpu_us/req
for t in "${http_targets[@]}"; do
	read -r name _ <<<"$t"
	printf '%-14s %10.0f %9.3f %18s\n' "$name" "$(med "${RPS[$name]}")" "$(med "${P99[$name]}")" "$(med "${CPU[$name]}")"
done
printf 'proxy-tls vs nginx-tls: req/s %s, p99 %s, CPU per request %s\n' \
	"$(ratio "$(med "${RPS[proxy-tls]}")" "$(med "${RPS[nginx-tls]}")")" \
	"$(ratio "$(med "${P99[proxy-tls]}")" "$(med "${P99[nginx-tls]}")")" \
	"$(ratio "$(med "${CPU[proxy-tls]}")" "$(med "${CPU[nginx-tls]}")")"
printf 'TLS vs plain, proxy (net/http both): req/s %s; nginx: req/s %s\n' \
	"$(ratio "$(med "${RPS[proxy-tls]}")" "$(med "${RPS[proxy-nethttp]}")")" \
	"$(ratio "$(med "${RPS[nginx-tls]}")" "$(med "${RPS[nginx-http]}")")"

printf '\nNew TLS connections (tlshs, %s at once, one request each, %ss)\n' "$HS_CONNS" "$DURATION"
printf '%-11s %-12s %10s %9s %19s %s\n' target mode conn/s p99_ms server_cpu_us/conn key_exchange
for mode in full full-x25519 resumed; do
	for name in proxy-tls nginx-tls; do
		printf '%-11s %-12s %10.0f %9s %19s %s\n' "$name" "$mode" "$(med "${HS[$name,$mode]}")" "$(med "${HSP99[$name,$mode]}")" \
			"$(med "${HSCPU[$name,$mode]}")" "${GROUP[$name,$mode]}"
	done
	printf 'proxy-tls vs nginx-tls, %s: conn/s %s, CPU per connection %s\n' "$mode" \
		"$(ratio "$(med "${HS[proxy-tls,$mode]}")" "$(med "${HS[nginx-tls,$mode]}")")" \
		"$(ratio "$(med "${HSCPU[proxy-tls,$mode]}")" "$(med "${HSCPU[nginx-tls,$mode]}")")"
done

printf '\nWebSocket echo (wsload, %s conns, %ss)\n' "$WS_CONNS" "$DURATION"
printf '%-14s %9s %10s %22s\n' target msg_bytes MB/s proxy+worker_cpu_ms/MB
for size in $SIZES; do
	for t in "${ws_targets[@]}"; do
		read -r name _ <<<"$t"
		printf '%-14s %9s %10s %22s\n' "$name" "$size" "$(med "${MBS[$name,$size]}")" "$(med "${WSCPU[$name,$size]}")"
	done
	printf 'size %s: proxy-wss vs nginx-wss MB/s %s; proxy-wss (TLS relay) vs proxy-handoff (plain): MB/s %s, CPU per MB %s; proxy-relay vs proxy-handoff: MB/s %s\n' "$size" \
		"$(ratio "$(med "${MBS[proxy-wss,$size]}")" "$(med "${MBS[nginx-wss,$size]}")")" \
		"$(ratio "$(med "${MBS[proxy-wss,$size]}")" "$(med "${MBS[proxy-handoff,$size]}")")" \
		"$(ratio "$(med "${WSCPU[proxy-wss,$size]}")" "$(med "${WSCPU[proxy-handoff,$size]}")")" \
		"$(ratio "$(med "${MBS[proxy-relay,$size]}")" "$(med "${MBS[proxy-handoff,$size]}")")"
done
