#!/bin/bash
# go test with the given arguments (packages, flags), shown as plain go test shows
# it, then the list of tests that skipped and why. Under CI=true any skip fails the
# run (it is a guard CI would hit), unless the arguments ask for -short.
# `make test` runs the suite through this; so can you: scripts/skips.sh ./driver/
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/skips" ./internal/testguard/skips
short=
for a in "$@"; do
	case $a in -short | -short=true | -test.short | -test.short=true) short=-short ;; esac
done
"$GO" test -count=1 -json "$@" | "$tmp/skips" $short
