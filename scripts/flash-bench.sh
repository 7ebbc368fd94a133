#!/bin/sh
# `peerboot flash` against `dd bs=4M oflag=direct conv=fsync` writing the same image
# to the same loop device, alternating, in one run. Compares write times (peerboot's
# includes its fsync; its read-back verify is timed separately and not compared).
# Needs root and losetup. Usage: scripts/flash-bench.sh [IMAGE] [ROUNDS]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
img=${1:-$top/out/default/disk.img}
rounds=${2:-3}
bin="$top/bin/peerboot"
[ -f "$img" ] || { echo "no image $img (make image)" >&2; exit 1; }
[ -x "$bin" ] || { echo "no $bin (make)" >&2; exit 1; }
work=$(mktemp -d)
dev=""
cleanup() { [ -n "$dev" ] && losetup -d "$dev"; rm -rf "$work"; }
trap cleanup EXIT
size=$(stat -c %s "$img")
truncate -s $((size + 64 * 1024 * 1024)) "$work/stick.raw"
dev=$(losetup -f --show "$work/stick.raw")
now() { date +%s.%N; }
calc() { awk "BEGIN { print $* }"; }
mib=$(calc "$size / 1048576")

# Warm-up: allocates the backing file's blocks and caches the image, for both.
dd if="$img" of="$dev" bs=4M oflag=direct conv=fsync status=none

dd_times="" pb_times="" verify_times=""
i=0
while [ $i -lt "$rounds" ]; do
	t0=$(now)
	dd if="$img" of="$dev" bs=4M oflag=direct conv=fsync status=none
	t1=$(now)
	dd_times="$dd_times $(calc "$t1 - $t0")"
	out=$("$bin" flash --force --yes "$img" "$dev" 2>/dev/null)
	# "DEV: wrote X MiB in W s (... ), verified in V s (...)"
	w=$(echo "$out" | sed -n 's/.* in \([0-9.]*\)s (.*verified in \([0-9.]*\)s.*/\1/p')
	v=$(echo "$out" | sed -n 's/.*verified in \([0-9.]*\)s.*/\1/p')
	pb_times="$pb_times $w"
	verify_times="$verify_times $v"
	i=$((i + 1))
done

median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
dd_m=$(median $dd_times)
pb_m=$(median $pb_times)
v_m=$(median $verify_times)
printf 'image %s (%.1f MiB), %s rounds, loop device %s\n' "$img" "$mib" "$rounds" "$dev"
printf 'dd bs=4M oflag=direct conv=fsync: %s s (median of%s), %.1f MiB/s\n' "$dd_m" "$dd_times" "$(calc "$mib / $dd_m")"
printf 'peerboot flash write:             %s s (median of %s), %.1f MiB/s\n' "$pb_m" "$pb_times" "$(calc "$mib / $pb_m")"
printf 'peerboot flash verify:            %s s (median of %s), %.1f MiB/s\n' "$v_m" "$verify_times" "$(calc "$mib / $v_m")"
printf 'ratio (peerboot throughput / dd): %.2fx\n' "$(calc "$dd_m / $pb_m")"
