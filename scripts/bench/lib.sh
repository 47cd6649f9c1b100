# Shared helpers for the proxy benchmark scripts (sourced, not executed).
# Everything binds loopback addresses; every process started here is
# tracked by PID and stopped on exit.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cb-bench.XXXXXX")
PIDS=()

cleanup() {
	local pid i
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	# KEEP_LOG=path keeps the cluster's log (start_up's; LOG_LEVEL= sets its level).
	[ -z "${KEEP_LOG:-}" ] || [ ! -f "$TMP/up.log" ] || cp "$TMP/up.log" "$KEEP_LOG"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '%s\n' "$*" >&2; }

# apt_install PKG...: install Debian packages if we are root (waits for a
# concurrent apt run instead of fighting over the lock).
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		log "missing $*; install it (apt-get install $*) and rerun"
		return 1
	fi
	while pgrep -x apt-get >/dev/null || pgrep -x dpkg >/dev/null; do log "waiting for apt..."; sleep 5; done
	DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "$@" >&2
}

build_bins() {
	log "building bench programs..."
	(cd "$ROOT" && go build -o "$TMP/bin/" ./scripts/bench/cmd/...)
}

wait_file() { # wait_file PATH [SECONDS]: up to 10s (or SECONDS) for a non-empty file
	local i
	for i in $(seq 1 $((${2:-10} * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
	log "timed out waiting for $1"
	return 1
}

wait_port() { # wait_port PORT: up to 10s for a loopback listener
	local i
	for i in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	log "timed out waiting for 127.0.0.1:$1"
	return 1
}

start_worker() {
	WORKER_SOCK=$TMP/worker.sock # handed-over connections (start_proxy with HANDOFF=1)
	WORKER_UNIX=$TMP/worker-http.sock # plain HTTP (nginx with NGINX_UPSTREAM=unix:$WORKER_UNIX)
	"$TMP/bin/benchworker" -addr 127.0.0.1:0 -addr-file "$TMP/worker.addr" -handoff "$WORKER_SOCK" -unix "$WORKER_UNIX" 2>"$TMP/worker.log" &
	PIDS+=($!)
	wait_file "$TMP/worker.addr"
	WORKER=$(cat "$TMP/worker.addr")
}

# start_proxy: PROXIES benchproxy processes (default 1) sharing one port
# (SO_REUSEPORT, as the Reverse Proxy Manager starts them), each with
# PROXY_GOMAXPROCS if set (PROXY_BIN: another build); HANDOFF=1 hands WebSockets to the worker's
# socket instead of relaying them (a worker on the proxy's host, as in
# production). PROXY is the address, PROXY_PIDS their PIDs.
start_proxy() {
	local i addr=127.0.0.1:0 flags=(${PROXY_FLAGS:-}) # the first takes a port, the others join it
	[ "${HANDOFF:-0}" = 1 ] && flags+=(-handoff "$WORKER_SOCK")
	rm -f "$TMP"/proxy*.addr # a second call's must not be read for the first's
	PROXY_PIDS=()
	for i in $(seq 1 "${PROXIES:-1}"); do
		GOMAXPROCS=${PROXY_GOMAXPROCS:-} "${PROXY_BIN:-$TMP/bin/benchproxy}" "${flags[@]}" -addr "$addr" -addr-file "$TMP/proxy$i.addr" -worker "$WORKER" 2>>"$TMP/proxy.log" &
		PIDS+=($!) PROXY_PIDS+=($!)
		wait_file "$TMP/proxy$i.addr"
		addr=$(cat "$TMP/proxy$i.addr")
	done
	PROXY=$addr
}

# start_loop NAME MODE: the looproxy baseline (an epoll event loop per CPU,
# scripts/bench/cmd/looproxy) in MODE in front of $WORKER; appends
# "NAME ADDR PID" to targets.
start_loop() {
	"$TMP/bin/looproxy" -to "$WORKER" -mode "$2" -addr-file "$TMP/$1.addr" 2>"$TMP/$1.log" &
	PIDS+=($!)
	wait_file "$TMP/$1.addr"
	targets+=("$1 $(cat "$TMP/$1.addr") ${PIDS[-1]}")
}

# start_nginx [DIR [EXTRA [UPSTREAM]]]: a foreground nginx (daemon off)
# proxying to UPSTREAM (default $WORKER; unix:PATH for a unix socket) with
# the usual WebSocket Upgrade/Connection headers and upstream keepalive, its
# files in $TMP/DIR (default nginx); EXTRA is more directives for its
# location (e.g. more proxy_set_header lines).
# nginx cannot report a port-0 binding, so a port is picked first; if
# something takes it in between, nginx exits and another port is tried.
start_nginx() {
	local attempt
	for attempt in 1 2 3 4 5; do
		try_nginx "$("$TMP/bin/benchworker" -free-port)" "${1:-nginx}" "${2:-}" "${3:-$WORKER}" && return 0
		log "nginx could not take its port (attempt $attempt); trying another"
	done
	return 1
}

try_nginx() { # try_nginx PORT DIR EXTRA UPSTREAM
	nginx_conf "$2" "$4" "listen 127.0.0.1:$1;" "" "$3"
	run_nginx "$2" "$1" || return 1
	NGINX=127.0.0.1:$1
}

# nginx_conf DIR UPSTREAM LISTENS HTTP_EXTRA LOCATION_EXTRA: writes
# $TMP/DIR/nginx.conf, one server with the LISTENS directives proxying to
# UPSTREAM (WebSocket Upgrade/Connection headers, upstream keepalive);
# HTTP_EXTRA goes in the http block (e.g. ssl_certificate), LOCATION_EXTRA
# in the location (e.g. more proxy_set_header lines).
nginx_conf() {
	local dir=$TMP/$1 user=""
	mkdir -p "$dir/logs" "$dir/tmp"
	# As root nginx's workers would run as nobody, who cannot reach a unix
	# socket in $TMP (0700).
	[ "$(id -u)" != 0 ] || user="user root;"
	cat >"$dir/nginx.conf" <<CONF
daemon off;
$user
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
    upstream worker { server $2; keepalive 64; }
    $4
    server {
        $3
        location / {
            proxy_pass http://worker;
            proxy_http_version 1.1;
            proxy_set_header Host \$host;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_set_header X-Forwarded-For \$remote_addr;
            $5
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }
    }
}
CONF
}

# run_nginx DIR PORT...: starts nginx on $TMP/DIR/nginx.conf in the
# background; succeeds (NGINX_PID set, the pid in PIDS) once every PORT
# listens, else kills it and fails (a port was taken in between).
run_nginx() {
	local dir=$TMP/$1 pid p
	shift
	nginx -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" &
	pid=$!
	for p in "$@"; do
		if ! wait_port "$p" || ! kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			return 1
		fi
	done
	PIDS+=("$pid")
	NGINX_PID=$pid
}

# start_up APPS [LISTEN [UP_ARGS...]]: `cloudbrowser up` ($CB_BIN, else
# $TMP/bin/cloudbrowser built by the caller) with one worker and the app
# bundles in APPS ("" = the sample apps), its public port bound on LISTEN
# (default 127.0.0.1:0) and reported through its ready file; UP_ARGS go to
# `up` as they are. Sets UP_PID, PUBLIC (host:port), TOKEN (admin token) and
# WORKER (the worker's HTTP address). Environment variables set on the call
# (CB_...) reach the cluster's processes.
start_up() {
	local apps=$1 listen=${2:-127.0.0.1:0} i
	shift $(($# < 2 ? $# : 2))
	local args=(--workers 1)
	[ -n "$apps" ] && args+=(--apps "$apps")
	command -v chromium >/dev/null || apt_install chromium
	"${CB_BIN:-$TMP/bin/cloudbrowser}" --log-level "${LOG_LEVEL:-warn}" --ready-file "$TMP/up.ready" up --data-dir "$TMP/data" --listen "$listen" \
		"${args[@]}" "$@" >"$TMP/up.out" 2>"$TMP/up.log" &
	UP_PID=$!
	PIDS+=("$UP_PID")
	wait_file "$TMP/up.ready" 120 || { cat "$TMP/up.log" >&2; return 1; } # up writes it once a worker serves
	PUBLIC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["addrs"]["public"])' "$TMP/up.ready")
	TOKEN=$(cat "$TMP/data/admin.token")
	WORKER=""
	for i in $(seq 1 100); do
		WORKER=$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://$PUBLIC/api/v1/cluster" |
			python3 -c 'import json,sys; w=[x for x in (json.load(sys.stdin)["workers"] or []) if x["state"]=="connected"]; print(w[0]["httpAddr"] if w else "")')
		[ -n "$WORKER" ] && return 0
		sleep 0.2
	done
	log "no worker registered"
	cat "$TMP/up.log" >&2
	return 1
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# median: the median of the numbers on stdin, one a line ("n/a" if none).
median() {
	sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) { print "n/a"; exit }
		print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
	}'
}

# bench_metric FILE NAME: the values of a custom benchmark metric NAME
# (b.ReportMetric) in go test -bench output, one a line.
bench_metric() {
	awk -v m="$2" '/^Benchmark/ { for (i = 4; i <= NF; i++) if ($i == m) print $(i - 1) }' "$1"
}

# ws_echo TITLE [PREFIX...]: wsload against every "NAME ADDR" of targets
# (SIZES, CONNS, DURATION, ROUNDS, WS_PATH), targets alternated in rounds,
# run under PREFIX (e.g. ip netns exec NS); prints medians and ratios to
# the target named direct.
ws_echo() {
	local title=$1 round size t name addr out k
	shift
	declare -A MBS MPS
	for round in $(seq 1 "$ROUNDS"); do
		for size in $SIZES; do
			for t in "${targets[@]}"; do
				read -r name addr _ <<<"$t"
				log "round $round: wsload $name size=$size conns=$CONNS ${DURATION}s"
				out=$(timeout $((DURATION + 30)) "$@" "$TMP/bin/wsload" -url "ws://$addr$WS_PATH" -conns "$CONNS" \
					-size "$size" -duration "${DURATION}s" -label "$name")
				MBS[$name,$size]+="$(sed -n 's/.*MB_per_s=\([0-9.]*\).*/\1/p' <<<"$out") "
				MPS[$name,$size]+="$(sed -n 's/.*msgs_per_s=\([0-9.]*\).*/\1/p' <<<"$out") "
			done
		done
	done
	for k in "${!MBS[@]}"; do
		MBS[$k]=$(tr ' ' '\n' <<<"${MBS[$k]}" | grep . | median)
		MPS[$k]=$(tr ' ' '\n' <<<"${MPS[$k]}" | grep . | median)
	done
	printf '\n%s (%s conns, %ss each, %s rounds alternated, medians, %s CPUs)\n' "$title" "$CONNS" "$DURATION" "$ROUNDS" "$(nproc)"
	printf '%-10s %9s %10s %12s %10s\n' target msg_bytes MB/s msgs/s vs_direct
	for size in $SIZES; do
		for t in "${targets[@]}"; do
			read -r name _ <<<"$t"
			printf '%-10s %9s %10s %12s %10s\n' "$name" "$size" "${MBS[$name,$size]}" "${MPS[$name,$size]}" \
				"$(ratio "${MBS[$name,$size]}" "${MBS[direct,$size]}")"
		done
	done
}
