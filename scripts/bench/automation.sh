#!/usr/bin/env bash
# The automation endpoint (issue #36), each figure against a baseline
# measured in the same run, rounds alternated. Starts `cloudbrowser up` with
# one Chromium worker, the reading benchmark app (scripts/bench/apps: no
# pool) and the pooldemo sample app (a warm pool whose init sequence signs
# its browsers in); the worker keeps no blank browser ready
# (--general-pool-min 0), so a session of the reading app gets a browser
# made on demand (cold); --egress-allow 127.0.0.1 lets its browsers load
# the local page of the Playwright rounds.
#
#   1. cdpbench (scripts/bench/cmd/cdpbench), vs CDP straight to a headless
#      shell it starts: a command's round trip, pipelined throughput
#      (DEPTHS in flight), session start cold (reading) and warm
#      (pooldemo) vs a new context + page in that Chromium;
#   2. Playwright goto + screenshot per second (playwright-shots.cjs), on a
#      session vs on a Chromium Playwright launches itself (the worker's
#      binary, CHROMIUM to change);
#   3. idle automated sessions per GiB: IDLE sessions connected and idle,
#      the worker tree's PSS against none (cdpbench -idle).
#
#   scripts/bench/automation.sh     # ROUNDS=5 N=300 DEPTHS=16,64 PIPE_N=5000 PW_ROUNDS=4 PW_N=30 IDLE=10,20 SETTLE=15s
#   SKIP_PW=1 SKIP_IDLE=1 scripts/bench/automation.sh   # only cdpbench's rounds
#   ROUNDS=0 SKIP_IDLE=1 scripts/bench/automation.sh     # only the Playwright rounds
#   CB_BIN=/path/to/cloudbrowser scripts/bench/automation.sh   # another build (e.g. of git archive HEAD)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-5} N=${N:-300} DEPTHS=${DEPTHS:-16,64} PIPE_N=${PIPE_N:-5000}
PW_ROUNDS=${PW_ROUNDS:-4} PW_N=${PW_N:-30} IDLE=${IDLE:-10,20} SETTLE=${SETTLE:-15s}
CHROMIUM=${CHROMIUM:-/usr/lib/chromium/chromium-headless-shell}
[ -x "$CHROMIUM" ] || CHROMIUM=$(command -v chromium-headless-shell || command -v chromium)

log "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
# CB_BIN=path: measure that cloudbrowser binary (e.g. another commit's) instead of this tree's.
(cd "$ROOT" && go build -o "$TMP/bin/" ./scripts/bench/cmd/cdpbench)
[ -n "${CB_BIN:-}" ] || (cd "$ROOT" && go build -o "$TMP/bin/" ./cmd/cloudbrowser)
if [ "${SKIP_PW:-0}" != 1 ]; then "$ROOT/scripts/install-clients.sh"; fi
mkdir -p "$TMP/apps"
cp -r "$ROOT/scripts/bench/apps/reading" "$ROOT/apps/pooldemo" "$TMP/apps/"
# The idle rounds keep max(IDLE) sessions open at once, all the automation
# token's: above the default 10 sessions per token, and the quotas of
# instances and browsers per user and per address (10, 10, 50, 30; 0 = no limit).
export CB_GENERAL_POOL_MIN=0 CB_EGRESS_ALLOW=127.0.0.1 CB_AUTOMATION_MAX_SESSIONS=64 \
	CB_QUOTA_INSTANCES_PER_USER=0 CB_QUOTA_BROWSERS_PER_USER=0 CB_QUOTA_INSTANCES_PER_IP=0 CB_QUOTA_BROWSERS_PER_IP=0
start_up "$TMP/apps"
ATOKEN=$(cat "$TMP/data/automation.token")

[ "$ROUNDS" = 0 ] || "$TMP/bin/cdpbench" -public "http://$PUBLIC" -token-file "$TMP/data/automation.token" -app reading -warm-app pooldemo \
	-chromium "$CHROMIUM" -rounds "$ROUNDS" -n "$N" -depths "$DEPTHS" -pipe-n "$PIPE_N" -up-pid "$UP_PID"

if [ "${SKIP_PW:-0}" != 1 ]; then
	: >"$TMP/pw.jsonl"
	session() {
		curl -fsS -H "Authorization: Bearer $ATOKEN" -H 'Content-Type: application/json' \
			-d '{"app":"reading","viewport":{"width":1280,"height":720}}' "http://$PUBLIC/api/v1/sessions" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["cdpUrl"])'
	}
	pw_cluster() { node "$ROOT/scripts/bench/playwright-shots.cjs" cdp "$(session)" "$PW_N" | tee -a "$TMP/pw.jsonl" >&2; }
	pw_local() { node "$ROOT/scripts/bench/playwright-shots.cjs" launch "$CHROMIUM" "$PW_N" | tee -a "$TMP/pw.jsonl" >&2; }
	for r in $(seq 1 "$PW_ROUNDS"); do
		log "Playwright round $r"
		if [ $((r % 2)) = 1 ]; then pw_cluster && pw_local; else pw_local && pw_cluster; fi
	done
	echo
	python3 - "$TMP/pw.jsonl" "$PW_ROUNDS" "$PW_N" "$CHROMIUM" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [r for r in rows if "error" in r]
if bad:
    sys.exit("playwright-shots failed: " + bad[0]["error"])
by = {m: [r for r in rows if r["mode"] == m] for m in ("cdp", "launch")}
med = {m: statistics.median(r["perSecond"] for r in v) for m, v in by.items()}
p50 = {m: statistics.median(r["p50Ms"] for r in v) for m, v in by.items()}
print(f"Playwright goto + screenshot, {sys.argv[2]} rounds of {sys.argv[3]} alternated (medians; the local Chromium: {sys.argv[4]})")
print(f"{'':34} {'local':>10} {'session':>10} {'ratio':>8}")
print(f"{'per second':34} {med['launch']:10.2f} {med['cdp']:10.2f} {med['cdp'] / med['launch']:7.2f}x")
print(f"{'p50 goto+screenshot (ms)':34} {p50['launch']:10.1f} {p50['cdp']:10.1f} {p50['cdp'] / p50['launch']:7.2f}x")
for k, name in (("gotoP50Ms", "of which goto p50 (ms)"), ("screenshotP50Ms", "of which screenshot p50 (ms)")):
    v = {m: statistics.median(r[k] for r in by[m]) for m in by}
    print(f"{name:34} {v['launch']:10.1f} {v['cdp']:10.1f} {v['cdp'] / v['launch']:7.2f}x")
for m, name in (("launch", "local"), ("cdp", "session")):
    v = by[m]
    print(f"  {name}: per second {' '.join(str(r['perSecond']) for r in v)}; screenshots {v[0]['width']}x{v[0]['height']}, ~{v[0]['shotBytes'] // 1024} KiB; ready in {' '.join(str(r['readyMs']) for r in v)} ms")
PY
fi

if [ "${SKIP_IDLE:-0}" != 1 ]; then
	"$TMP/bin/cdpbench" -public "http://$PUBLIC" -token-file "$TMP/data/automation.token" -app reading \
		-rounds 0 -idle "$IDLE" -up-pid "$UP_PID" -settle "$SETTLE"
fi
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
