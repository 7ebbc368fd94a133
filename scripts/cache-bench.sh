#!/bin/sh
# The remote stage cache's figure, in one command (docs/remote-cache.md):
#  builder A: a store that holds RECIPE's whole build (the warm store,
#    $PEERBOOT_CACHE or ~/.cache/peerboot; only read) seeds a registry on
#    loopback (Debian's docker-registry) with `peerboot store push`, signed with
#    a throwaway artifact key;
#  builder B: an empty store builds RECIPE with --cache-from that registry and
#    the key; its published output is compared byte for byte with A's
#    (REF_OUT, default out/<recipe>);
#  the reference: A's cold build of RECIPE, read from the build log A_LOG (its
#    last "done in" line, as `make image` prints it), or with --cold measured
#    here: fetch (untimed) and build from an empty store.
# Prints B's wall time over A's cold build time (the issue's goal: under 10 %).
# A's store must hold every stage as this tree plans it: when A's build used
# other image tools (peerboot-init, p2pcheck) than bin/ holds now, point
# PEERBOOT_TOOLS_DIR at the ones it used.
# Usage: [A_LOG=FILE] [REF_OUT=DIR] scripts/cache-bench.sh [--cold] [RECIPE]
set -eu
cold=0
if [ "${1:-}" = --cold ]; then cold=1; shift; fi
recipe=${1:-recipes/default.toml}
top=$(cd "$(dirname "$0")/.." && pwd)
pb="$top/bin/peerboot"
store_a=${PEERBOOT_CACHE:-$HOME/.cache/peerboot}
name=$(basename "$recipe" .toml)
ref_out=${REF_OUT:-$top/out/$name}
work=$(mktemp -d /tmp/peerboot-cache-bench.XXXXXX)
reg_pid=""
cleanup() {
	[ -z "$reg_pid" ] || kill "$reg_pid" 2>/dev/null || true
	[ "${BENCH_KEEP:-}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
secs() { # seconds of a Go duration (1h2m3.4s, 41m3.2s, 950ms)
	echo "$1" | awk '{
		s = 0; d = $0
		while (match(d, /^[0-9.]+(h|ms|us|µs|ns|m|s)/)) {
			tok = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
			n = tok + 0; u = tok; sub(/^[0-9.]+/, "", u)
			if (u == "h") s += n * 3600; else if (u == "m") s += n * 60; else if (u == "s") s += n
			else if (u == "ms") s += n / 1000; else s += n / 1e6
		}
		printf "%.1f", s }'
}
cd "$top"
[ -x "$pb" ] || { echo "cache-bench: $pb is missing: run make" >&2; exit 2; }
command -v docker-registry >/dev/null || { echo "cache-bench: docker-registry is not installed (apt-get install docker-registry)" >&2; exit 2; }

# A must hold the whole build as this tree plans it (same recipe, lock and image
# tools), else B's figure measures something else.
if ! "$pb" --cache "$store_a" plan --json "$recipe" | jq -e '[.stages[] | select(.status != "cached")] | length == 0' >/dev/null; then
	echo "cache-bench: $store_a does not hold every stage of $recipe as this tree plans it ($("$pb" --cache "$store_a" plan --json "$recipe" | jq -r '[.stages[] | select(.status != "cached") | .name] | join(", ")') not cached): build it first" >&2
	exit 1
fi
[ -f "$ref_out/SHA256SUMS" ] || { echo "cache-bench: $ref_out is not A's published output (no SHA256SUMS)" >&2; exit 1; }

# The registry, on loopback, in the work directory.
port=$(awk 'BEGIN { srand(); print 20000 + int(rand() * 20000) }')
cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$port
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
reg_pid=$!
i=0
until curl -sf "http://127.0.0.1:$port/v2/" >/dev/null; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "cache-bench: docker-registry did not start:" >&2; cat "$work/registry.log" >&2; exit 1; }
	sleep 0.1
done
ref="oci://127.0.0.1:$port/peerboot/stages"
"$pb" keys init "$work/keys" >/dev/null

# Builder A seeds the cache from its store (read only).
t0=$(now)
"$pb" --cache "$store_a" store push "$recipe" --cache-to "$ref" --artifact-key "file:$work/keys/artifact.key" --json >"$work/push.json" 2>"$work/push.log" ||
	{ cat "$work/push.log" >&2; exit 1; }
t1=$(now)
t_push=$(echo "$t1 - $t0" | bc)

# Builder B: an empty store, the cache and the public key.
mkdir "$work/b"
t0=$(now)
"$pb" --cache "$work/b/store" build "$recipe" --out "$work/b/out" --cache-from "$ref" --cache-key "$work/keys/cosign.pub" --cache-strict --json \
	>"$work/b.json" 2>"$work/b.log" || { cat "$work/b.log" >&2; exit 1; }
t1=$(now)
t_b=$(echo "$t1 - $t0" | bc)
same=yes
diff -r "$work/b/out/$name" "$ref_out" >"$work/diff.txt" 2>&1 || same=no

# A's cold build.
if [ $cold = 1 ]; then
	"$pb" --cache "$work/a-cold" fetch "$recipe" >/dev/null
	t0=$(now)
	"$pb" --cache "$work/a-cold" build "$recipe" --out "$work/a-out" >"$work/a-cold.log" 2>&1 || { tail "$work/a-cold.log" >&2; exit 1; }
	t1=$(now)
	t_a=$(echo "$t1 - $t0" | bc)
	a_from="measured here (--cold)"
else
	log=${A_LOG:-}
	[ -n "$log" ] && [ -f "$log" ] || { echo "cache-bench: set A_LOG to the log of A's cold build (its 'done in' line), or pass --cold" >&2; exit 2; }
	d=$(grep -E '^done in [0-9]' "$log" | tail -1 | awk '{print $3}')
	[ -n "$d" ] || { echo "cache-bench: $log has no 'done in' line" >&2; exit 1; }
	t_a=$(secs "$d")
	a_from="from $log (done in $d)"
fi

jq -r '"A push: \(.pushed) stages sent (\(.pushed_bytes) bytes), \(.local_hits) held"' "$work/push.json"
jq -r '"B: \([.stages[] | select(.state == "fetched") | .stage] | join(",")) fetched (\(.cache.pulled_bytes) bytes), \(.cache.built) built, \(.cache.refused | length) refused; states: \([.stages[] | .stage + "=" + .state] | join(" "))"' "$work/b.json"
printf 'A seeding the cache (store push): %.1f s\n' "$t_push"
printf 'B (empty store, --cache-from): %.1f s\n' "$t_b"
printf 'A cold build: %.1f s, %s\n' "$t_a" "$a_from"
printf "B's outputs byte-identical to %s: %s\n" "$ref_out" "$same"
printf 'B / A cold = %.2f %%\n' "$(echo "100 * $t_b / $t_a" | bc -l)"
[ $same = yes ] || { cat "$work/diff.txt"; exit 1; }
