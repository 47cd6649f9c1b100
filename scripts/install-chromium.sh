#!/usr/bin/env bash
# Installs Debian's Chromium if it is missing (as root, or with sudo): the
# headless shell, which the workers run (no browser UI: half the processes
# and memory per virtual browser), and full Chromium (headful debugging).
set -euo pipefail
command -v chromium >/dev/null 2>&1 && command -v chromium-headless-shell >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "Chromium is missing and this is not a Debian-like system: install Chromium or set CB_CHROMIUM" >&2
	exit 1
fi
source "$(dirname "$0")/as-root.sh"
echo "installing chromium (Debian package)" >&2
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -qq
as_root apt-get install -y -qq --no-install-recommends chromium chromium-headless-shell fonts-liberation >/dev/null
