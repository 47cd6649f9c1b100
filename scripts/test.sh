#!/usr/bin/env bash
# The test command: formatting, vet, every test with the race detector
# (unit tests and the end-to-end tests that start the real binary), and a
# short run of each fuzz target.
#
#   scripts/test.sh                 # everything
#   FUZZTIME=0 scripts/test.sh      # skip fuzzing
#   FUZZTIME=30s scripts/test.sh    # fuzz each target for a time instead of a count
set -euo pipefail
cd "$(dirname "$0")/.."

# Fuzzing budgets are execution counts (about 10 s each here): a -fuzztime
# duration races Go's fuzzing coordinator at the deadline and fails with a
# bare "context deadline exceeded" on a loaded machine (seen in CI; a known
# Go issue), which a count cannot.
FUZZTIME=${FUZZTIME:-}

# The browser tests need Chromium. In CI (CI set to anything but false/0/no)
# a missing Chromium is a failure, here and in every test that needs it;
# elsewhere those tests are skipped.
case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
"" | false | 0 | no)
	scripts/install-chromium.sh || echo "continuing without Chromium: its tests will be skipped" >&2
	scripts/install-clients.sh || echo "continuing without Playwright and Puppeteer: their tests will be skipped" >&2 ;;
*)
	scripts/install-chromium.sh
	scripts/install-clients.sh
	export CB_REQUIRE_CHROMIUM=1 CB_REQUIRE_CLIENTS=1 ;;
esac

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-ed:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
# Pinned, fetched from the Go module proxy; //lint:ignore marks the few
# deliberate exceptions.
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

step "go test -race (unit)"
# The end-to-end package runs on its own afterwards, so the timing of its
# failure-detection test does not depend on the other packages' load.
go test -race -timeout 20m $(go list ./... | grep -v /internal/e2e)

step "allocation checks (without -race, whose sync.Pool drops at random)"
go test -count=1 -run 'Allocations$' ./internal/hop

step "go test -race (end-to-end: real binary, processes, sockets)"
# -count=1: the binary under test is built by the tests themselves, so Go's
# test cache cannot see when it changed. The binary is race-built too, and a
# race any of its processes reports fails the run.
go test -race -count=1 -timeout 45m ./internal/e2e

if [ "$FUZZTIME" != "0" ]; then
	step "fuzz (${FUZZTIME:-execution budgets})"
	go test -run '^$' -fuzz '^FuzzDecodeFrame$' -fuzztime "${FUZZTIME:-200000x}" ./rmi
	go test -run '^$' -fuzz '^FuzzClassify$' -fuzztime "${FUZZTIME:-800000x}" ./internal/urlkind
	go test -run '^$' -fuzz '^FuzzEdgeRequest$' -fuzztime "${FUZZTIME:-200000x}" ./proxy
fi
step "all tests passed"
