#!/usr/bin/env bash
# Installs the automation clients the end-to-end tests drive the CDP
# endpoint with (Playwright and Puppeteer, from npm, pinned by
# internal/e2e/clients/package-lock.json), and Node if it is missing (as
# root, or with sudo, from Debian).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
cd "$root/../internal/e2e/clients"
if ! command -v npm >/dev/null 2>&1; then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "Node/npm is missing and this is not a Debian-like system: install Node 18 or later" >&2
		exit 1
	fi
	source "$root/as-root.sh"
	echo "installing nodejs and npm (Debian packages)" >&2
	export DEBIAN_FRONTEND=noninteractive
	as_root apt-get update -qq
	as_root apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# Installed already from this very lock file: nothing to do.
stamp=node_modules/.cloudbrowser-lock.sha256
if [ -f "$stamp" ] && sha256sum -c --status "$stamp" 2>/dev/null; then
	exit 0
fi
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
sha256sum package-lock.json >"$stamp"
