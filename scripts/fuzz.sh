#!/bin/sh
# fuzz.sh [TIME]: a short run of every fuzz target in the tree (every parser of outside
# bytes has one), found by name so a new target cannot be forgotten here.
set -e
t=${1:-30s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	dir=$(dirname "$f")
	for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		echo "== $dir $fn ($t)"
		go test -run='^$' -fuzz="^$fn\$" -fuzztime="$t" -fuzzminimizetime=2s "$dir"
	done
done
