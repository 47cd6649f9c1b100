#!/usr/bin/env bash
# Set up and run a whole CloudBrowser cluster on this machine: installs
# Chromium if it is missing (Debian), builds the binary, and runs
# `cloudbrowser up` (master + embedded proxy + workers + sample apps).
#
#   scripts/up.sh                          # http://127.0.0.1:8080/
#   scripts/up.sh --listen :9000 --workers 3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-chromium.sh
mkdir -p bin
go build -o bin/cloudbrowser ./cmd/cloudbrowser
exec bin/cloudbrowser --log-format console --log-level warn up "$@"
