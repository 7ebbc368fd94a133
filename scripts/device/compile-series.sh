#!/bin/bash
# compile-series.sh CARRY OUT VERSION...: compile (never load) NVIDIA's kernel-open
# modules with peerboot's P2P series applied, on a GPU host, as a compile proof on
# kernels other than the recipes' own 6.12 kernel stage (issue 27).
#
# CARRY holds, copied there by hand (git-ignored, `run`'s carry):
#   VERSION.tar.zst   the release tree (../shared/inputs/open-gpu-kernel-modules/)
#   *.deb             optional: Debian's prepared headers of one kernel
#                     (linux-headers-R-common, linux-headers-R-amd64, linux-kbuild-R)
#   zstd              optional: a zstd binary, where the host has none
# The series is driver/patches/VERSION/series of this checkout (SERIES_REPO: another
# checkout's root, for a copy of this script run from CARRY).
#
# Targets, each a separate build tree:
#   host     the running kernel's own headers (/lib/modules/$(uname -r)/build), when the
#            host has them; for the first VERSION only (device time is short);
#   debian   Debian's split headers from CARRY: SYSSRC is the -common directory (the
#            kernel source headers), SYSOUT the -amd64 one (.config, Module.symvers,
#            generated headers). Kbuild needs both, and the -amd64 Makefile includes the
#            -common one by absolute path, so that include is pointed at where they were
#            unpacked. CC=gcc: the headers name gcc-12, the compiler Debian built with.
#
# Output: one line per check (lib.sh), OUT/compile-VERSION-TARGET.log, a summary line.
set -u
carry=$(cd "$1" && pwd) out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
repo=${SERIES_REPO:-$(cd "$here/../.." && pwd)}
. "$here/lib.sh"
mkdir -p "$out"
jobs=$(nproc)
work=$(mktemp -d)

echo "host: $(uname -r), $(gcc --version | head -1), $jobs cores"
ZSTD=zstd
command -v zstd >/dev/null || ZSTD="$carry/zstd"

# Debian headers, if carried.
deb_src= deb_out=
if ls "$carry"/linux-headers-*-common_*.deb >/dev/null 2>&1; then
	mkdir -p "$work/hdr"
	for d in "$carry"/*.deb; do dpkg -x "$d" "$work/hdr"; done
	deb_src=$(ls -d "$work"/hdr/usr/src/linux-headers-*-common | head -1)
	deb_out=$(ls -d "$work"/hdr/usr/src/linux-headers-*-amd64 | head -1)
	sed -i "s|^include .*/Makefile$|include $deb_src/Makefile|" "$deb_out/Makefile"
	echo "debian headers: $(basename "$deb_out") (SYSSRC=$deb_src SYSOUT=$deb_out)"
fi
host_build=/lib/modules/$(uname -r)/build
if [ -e "$host_build/Makefile" ]; then
	echo "host headers: $host_build -> $(readlink -f "$host_build")"
else
	echo "host headers: none at $host_build; /usr/src holds: $(ls /usr/src 2>/dev/null | tr '\n' ' ')"
	host_build=
fi

# apply TREE PATCH: exactly (no fuzz), with patch(1) or, where it is missing, git.
apply() {
	if command -v patch >/dev/null; then
		patch -d "$1" -p1 --fuzz=0 --no-backup-if-mismatch -s <"$2"
	else
		(cd "$1" && git apply -p1 "$2")
	fi
}

# build VERSION TARGET SYSSRC SYSOUT [MAKEARGS...]
build() {
	v=$1 target=$2 src=$3 obj=$4
	shift 4
	tree=$work/$v-$target
	log=$out/compile-$v-$target.log
	mkdir -p "$tree"
	"$ZSTD" -dc "$carry/$v.tar.zst" | tar -x -C "$tree" --strip-components=1
	for p in $(grep -v '^#' "$repo/driver/patches/$v/series"); do
		if ! apply "$tree" "$repo/driver/patches/$v/$p" >>"$log" 2>&1; then
			result "apply-$v-$target" FAIL "$p"
			return
		fi
	done
	result "apply-$v-$target" ok "$(grep -cv '^#' "$repo/driver/patches/$v/series") patches"
	start=$(date +%s)
	make -C "$tree" -j"$jobs" modules SYSSRC="$src" SYSOUT="$obj" "$@" >>"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - start))
	kos=$(cd "$tree/kernel-open" && ls *.ko 2>/dev/null | tr '\n' ' ')
	if [ $rc -ne 0 ]; then
		result "compile-$v-$target" FAIL "make exit $rc after ${secs}s; last errors:"
		grep -E 'error|Error' "$log" | tail -15
		return
	fi
	result "compile-$v-$target" ok "${secs}s: $kos"
	# The series is in the binary: its mode line's format string is in nvidia.ko.
	if grep -aq 'peerboot-p2p: bar1-mode' "$tree/kernel-open/nvidia.ko"; then
		result "series-in-$v-$target" ok "$(modinfo -F vermagic "$tree/kernel-open/nvidia.ko" 2>/dev/null)"
	else
		result "series-in-$v-$target" FAIL "no peerboot-p2p string in nvidia.ko"
	fi
	warn=$(grep -c 'warning:' "$log")
	echo "warnings in $v-$target: $warn"
	grep 'warning:' "$log" | sort | uniq -c | sort -rn | head -5
}

first=$1
for v in "$@"; do
	if [ -n "$deb_src" ]; then
		build "$v" debian "$deb_src" "$deb_out" CC=gcc
	fi
	if [ -n "$host_build" ] && [ "$v" = "$first" ]; then
		# A split header package (Debian, Ubuntu) has the sources behind .../source.
		host_src=$(readlink -f "${host_build%/build}/source" 2>/dev/null || true)
		[ -d "$host_src" ] || host_src=$(readlink -f "$host_build")
		build "$v" host "$host_src" "$(readlink -f "$host_build")"
	fi
done
rm -rf "$work"
summary
