#!/usr/bin/env bash
# Set up and run a whole CloudBrowser cluster on this machine: installs
# Chromium if it is missing (Debian), builds the binary, and runs
# `cloudbrowser up` (master + embedded proxy + workers + sample apps).
#
#   scripts/up.sh                          # http://127.0.0.1:8080/
#   scripts/up.sh --listen :9000 --workers 3
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
	echo "installing chromium (Debian package)"
	as_root apt-get update -qq
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
mkdir -p bin
go build -o bin/cloudbrowser ./cmd/cloudbrowser
exec bin/cloudbrowser --log-format console --log-level warn up "$@"
