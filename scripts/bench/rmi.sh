#!/usr/bin/env bash
# Benchmarks the rmi package over loopback TCP and prints calls/s plus p50/p99
# round-trip latency, and what frame sealing costs (BenchmarkSealing: the same
# calls with plaintext and sealed frames, as sealed÷plaintext ratios).
#
#   scripts/bench/rmi.sh                 # defaults: BENCHTIME=2s COUNT=3
#   BENCHTIME=5s COUNT=5 scripts/bench/rmi.sh
set -euo pipefail

cd "$(dirname "$0")/../.."
BENCHTIME="${BENCHTIME:-2s}"
COUNT="${COUNT:-3}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

go test ./rmi -run='^$' \
	-bench='^(BenchmarkTCPEchoBaseline|BenchmarkCallRoundTrip|BenchmarkCallParallel|BenchmarkCallLatency|BenchmarkSealing|BenchmarkFrameSealOpen)$' \
	-benchtime="$BENCHTIME" -count="$COUNT" -benchmem | tee "$out"

echo
echo "== summary (median of $COUNT runs, benchtime $BENCHTIME) =="
# Each result line is: name iters v1 unit1 v2 unit2 ...; pick values by unit.
awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i += 2) vals[name, $(i+1)] = vals[name, $(i+1)] " " $i
	names[name] = 1
}
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	if (n == 0) return "-"
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return a[int((n + 1) / 2)]
}
END {
	base = median(vals["BenchmarkTCPEchoBaseline", "ns/op"])
	printf "%-26s %12s %12s %12s %12s %14s\n", "benchmark", "calls/s", "ns/op", "p50", "p99", "ns/op÷TCPecho"
	for (n in names) {
		p50 = median(vals[n, "p50-ns"]); p99 = median(vals[n, "p99-ns"])
		if (p50 != "-") p50 = sprintf("%.1fus", p50 / 1000)
		if (p99 != "-") p99 = sprintf("%.1fus", p99 / 1000)
		op = median(vals[n, "ns/op"])
		printf "%-26s %12.0f %12.0f %12s %12s %14.2f\n", n, median(vals[n, "calls/s"]), op, p50, p99, op / base
	}
	printf "\n%-26s %14s %14s %10s\n", "sealing cost", "plaintext ns", "sealed ns", "ratio"
	for (n in names) {
		if (n !~ /^BenchmarkSealing\/.*\/sealed$/) continue
		p = n; sub(/sealed$/, "plaintext", p)
		s = median(vals[n, "ns/op"]); q = median(vals[p, "ns/op"])
		label = substr(n, 18); sub(/\/sealed$/, "", label)
		printf "%-26s %14.0f %14.0f %10.2f\n", label, q, s, s / q
	}
}' "$out"
