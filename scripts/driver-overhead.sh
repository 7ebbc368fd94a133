#!/bin/sh
# peerboot's overhead on the driver stage: times `peerboot build --stage driver`
# (unpack, patch, make, strip, checks, store commit) against the bare `make` of
# the same patched tree by hand, in one run. Needs a store whose kernel stage is
# built. Usage: scripts/driver-overhead.sh CACHE [RECIPE]
set -eu
cache=$1
recipe=${2:-recipes/default.toml}
top=$(cd "$(dirname "$0")/.." && pwd)
bin="$top/bin/peerboot"
cd "$top"
key() { "$bin" --cache "$cache" plan --json "$recipe" | jq -r --arg s "$1" '.stages[] | select(.name == $s) | .key'; }
kout="$cache/out/$(key kernel)"
dout="$cache/out/$(key driver)"
[ -f "$kout/MANIFEST" ] || { echo "kernel stage not built in $cache" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$dout" ] && mv "$dout" "$work/driver-out-saved"

t0=$(date +%s.%N)
"$bin" --cache "$cache" build --stage driver "$recipe" >/dev/null 2>&1
t1=$(date +%s.%N)

deb=$(ls "$cache"/blobs/sha256/*/* | while read -r f; do dpkg-deb -f "$f" Package 2>/dev/null | grep -qx nvidia-open-kernel-source && echo "$f"; done | head -1)
dpkg-deb -x "$deb" "$work/deb"
mkdir "$work/src"
tar -xf "$work"/deb/usr/src/*.tar* -C "$work/src"
src=$(find "$work/src" -name Kbuild -maxdepth 3 | head -1 | xargs dirname)
for p in driver/patches/535.261.03/0*.patch; do patch -s -p1 -d "$src" < "$p"; done
t2=$(date +%s.%N)
make -s -C "$src" -j"$(nproc)" modules SYSSRC="$kout/build" SYSOUT="$kout/build" >/dev/null 2>&1
t3=$(date +%s.%N)
echo "peerboot build --stage driver: $(echo "$t1 - $t0" | bc) s"
echo "make modules by hand:          $(echo "$t3 - $t2" | bc) s"
echo "overhead: $(echo "scale=1; (($t1 - $t0) / ($t3 - $t2) - 1) * 100" | bc) %"
