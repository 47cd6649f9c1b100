#!/usr/bin/env bash
# Politeness of the job queue: 1,000 URLs over 5 hosts with different
# per-host limits (concurrency, starts/s, class interval) through the real
# master/jobs queue on a fake clock (SimulatePoliteness: 4 workers x 8
# slots, each attempt lasts its host's duration). Per host: peak
# concurrency and most starts in any one-second window vs the limits (must
# never exceed), time vs the ideal schedule for those limits (efficiency,
# goal >= 0.9); and the scheduler's own cost per run. COUNT runs, medians.
#
# REAL=1 also runs CHECKS checks (default 200) over 5 local hosts on a real
# cluster (the cloudbrowser binary, one chromium worker with SLOTS job
# slots, pages answered after DELAY) and measures what the site saw.
#
#   scripts/bench/politeness.sh                       # COUNT=3
#   REAL=1 CHECKS=200 scripts/bench/politeness.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-3}
REAL=${REAL:-0}
CHECKS=${CHECKS:-200}
SLOTS=${SLOTS:-8}
DELAY=${DELAY:-200ms}

(cd "$ROOT" && go test ./master/jobs -run '^TestPolitenessSchedule$' -count 1 -v) | grep -E 'host [0-9]|makespan|^(ok|FAIL|---)' | tee "$TMP/test"
(cd "$ROOT" && go test ./master/jobs -run '^$' -bench '^BenchmarkPolitenessSchedule$' -benchtime 3x -count "$COUNT") | tee "$TMP/bench"
echo
echo "== simulated, 1,000 URLs over 5 hosts (median of $COUNT) =="
for m in efficiency worst-host-efficiency sim-s ideal-s; do
	printf '%s\t%s\n' "$m" "$(bench_metric "$TMP/bench" "$m" | median)"
done
printf 'scheduler ms/run\t%s\n' "$(awk '/^BenchmarkPolitenessSchedule/ { print $3 / 1e6 }' "$TMP/bench" | median)"

if [ "$REAL" = 1 ]; then
	command -v chromium >/dev/null || [ -n "${CB_CHROMIUM:-}" ] || apt_install chromium
	log "building cloudbrowser and jobsbench..."
	(cd "$ROOT" && go build -o "$TMP/bin/cloudbrowser" ./cmd/cloudbrowser && go build -o "$TMP/bin/jobsbench" ./scripts/bench/cmd/jobsbench)
	echo
	echo "== real cluster, $CHECKS checks over 5 local hosts =="
	"$TMP/bin/jobsbench" -bin "$TMP/bin/cloudbrowser" -mode politeness -checks "$CHECKS" -slots "$SLOTS" -delay "$DELAY" |
		column -t -s $'\t'
fi
