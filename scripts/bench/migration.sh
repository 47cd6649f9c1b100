#!/usr/bin/env bash
# Live migration figures: a drain with migration of one chat room with 1
# and 5 browsers; migration time and each user's time from the "moved"
# notice to the first frame on the new worker (TestMigrationTiming).
set -euo pipefail
cd "$(dirname "$0")/../.."
CB_BENCH_MIGRATION=1 go test ./internal/e2e -run '^TestMigrationTiming$' -count 1 -v 2>&1 | grep 'migration of a room' 
