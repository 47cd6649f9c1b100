#!/usr/bin/env bash
# Prints the product's package graph (who imports whom; internal/ and the
# benchmark programs left out: everything may import internal/, and it
# imports none of these) as a mermaid diagram for docs/architecture.md.
# Go forbids import cycles, so every arrow points one way.
#
#   scripts/archgraph.sh > /tmp/graph.md
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
echo '```mermaid'
echo 'graph LR'
go list -f '{{.ImportPath}}|{{join .Imports ","}}' ./cmd/... ./master/... ./worker/... ./proxy/... ./rmi/... ./web/... ./apps/... |
	awk -F'|' -v mod="$mod/" '
	{
		from = $1; sub(mod, "", from)
		if (from ~ /test$/) next
		n = split($2, imps, ",")
		for (i = 1; i <= n; i++) {
			if (index(imps[i], mod) != 1) continue
			to = imps[i]; sub(mod, "", to)
			if (to ~ /^internal\// || to ~ /test$/) continue
			printf "  %s --> %s\n", q(from), q(to)
		}
	}
	function q(p) { gsub(/\//, "_", p); return p "[" "\"" p2(p) "\"" "]" }
	function p2(p) { gsub(/_/, "/", p); return p }' | sort -u
echo '```'
