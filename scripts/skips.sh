#!/bin/bash
# go test with the given arguments (packages, flags), shown as plain go test shows
# it, then the list of tests that skipped and why. Under CI=true any skip other
# than a -short one (testguard.Short) fails the run: it is a guard CI would hit.
# `make test` runs the suite through this; so can you: scripts/skips.sh ./driver/
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/skips" ./internal/testguard/skips
"$GO" test -count=1 -json "$@" | "$tmp/skips"
