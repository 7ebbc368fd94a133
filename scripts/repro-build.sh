#!/bin/sh
# Reproducibility proof: builds the recipe's stages up to STAGE twice from cold
# stores, in different directories, as different users (when run as root), with
# different TZ, locale and umask, then compares every output byte (the MANIFEST of
# each stage output lists the sha256 of every file it holds).
# Usage: scripts/repro-build.sh [RECIPE] [STAGE]
set -eu
recipe=${1:-recipes/default.toml}
stage=${2:-driver}
top=$(cd "$(dirname "$0")/.." && pwd)
bin="$top/bin/peerboot"
a=$(mktemp -d /tmp/peerboot-repro-a.XXXXXX)
b=$(mktemp -d /var/tmp/peerboot-repro-b-a-longer-path.XXXXXX)
# REPRO_KEEP=1 keeps both stores (e.g. to reuse build A's as a warm cache).
[ "${REPRO_KEEP:-}" = 1 ] || trap 'rm -rf "$a" "$b"' EXIT
chmod 755 "$a" "$b"

as_other=""
if [ "$(id -u)" -eq 0 ]; then
	id peerboot-repro >/dev/null 2>&1 || useradd --system --no-create-home peerboot-repro
	chown peerboot-repro "$b"
	as_other="runuser -u peerboot-repro --"
fi

start=$(date +%s)
echo "== build A: $a, user $(id -un), TZ=UTC, LC_ALL=C, umask 022"
(umask 022; cd "$top" && TZ=UTC LC_ALL=C "$bin" --cache "$a/cache" fetch "$recipe" >/dev/null &&
	TZ=UTC LC_ALL=C "$bin" --cache "$a/cache" build --out "$a/out" --stage "$stage" "$recipe")
mid=$(date +%s)
echo "== build B: $b, user ${as_other:+peerboot-repro}${as_other:-$(id -un)}, TZ=Asia/Shanghai, LANG=zh_CN.UTF-8, umask 027"
(umask 027; cd "$top" && TZ=Asia/Shanghai LANG=zh_CN.UTF-8 $as_other "$bin" --cache "$b/cache" fetch "$recipe" >/dev/null &&
	TZ=Asia/Shanghai LANG=zh_CN.UTF-8 $as_other "$bin" --cache "$b/cache" build --out "$b/out" --stage "$stage" "$recipe")
end=$(date +%s)

fail=0
for m in "$a"/cache/out/*/MANIFEST; do
	key=$(basename "$(dirname "$m")")
	other="$b/cache/out/$key/MANIFEST"
	if [ ! -f "$other" ]; then
		echo "DIFFERENT: stage output $key exists only in build A (the action keys differ)"
		fail=1
	elif cmp -s "$m" "$other"; then
		echo "identical: $key ($(wc -l < "$m") files)"
	else
		echo "DIFFERENT: $key"
		diff "$m" "$other" | head -20
		fail=1
	fi
done
name=$(basename "$recipe" .toml)
if [ -f "$a/out/$name/SHA256SUMS" ]; then
	if cmp -s "$a/out/$name/SHA256SUMS" "$b/out/$name/SHA256SUMS"; then
		echo "identical: out/$name/SHA256SUMS ($(wc -l < "$a/out/$name/SHA256SUMS") files)"
	else
		echo "DIFFERENT: out/$name/SHA256SUMS"
		diff "$a/out/$name/SHA256SUMS" "$b/out/$name/SHA256SUMS" || true
		fail=1
	fi
fi
echo "build A $((mid - start)) s, build B $((end - mid)) s"
[ "${REPRO_KEEP:-}" = 1 ] && echo "stores kept: $a/cache $b/cache"
if [ "$fail" -ne 0 ]; then
	echo "repro-build: FAILED: the two builds differ"
	exit 1
fi
echo "repro-build: PASSED: every output byte of both builds is identical"
