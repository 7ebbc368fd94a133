#!/bin/sh
# scripts/rebuild-bench.sh with ROUNDS (default 5) and the store on XFS,
# whose reflinks let the image stage start each file as a clone of the
# previous build's and write only the blocks that changed (ext4 cannot: there
# the stage writes whole files). In one command: a sparse loop file under
# XFS_DIR (default /tmp) formatted `mkfs.xfs -m reflink=1` and mounted; into
# it a copy of the parts of the warm store ($PEERBOOT_CACHE or
# ~/.cache/peerboot, only read) the default recipe's build reads: blobs, git
# mirrors, plan records and the outputs of the stages `peerboot plan` names
# (~1.5 GiB); the bench runs there, its work dir too (publish hard-links);
# at the end the file system is unmounted and the loop file removed.
# Needs root (mount) and xfsprogs; the store must hold a build of the
# default recipe at HEAD (`make image`).
# Usage: [ROUNDS=5] [XFS_DIR=/tmp] scripts/rebuild-bench-xfs.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
src=${PEERBOOT_CACHE:-$HOME/.cache/peerboot}
rounds=${ROUNDS:-5}
dir=$(mktemp -d "${XFS_DIR:-/tmp}/peerboot-xfs.XXXXXX")
mnt="$dir/mnt"
cleanup() {
	mountpoint -q "$mnt" && umount "$mnt"
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
truncate -s 16G "$dir/xfs.img"
mkfs.xfs -q -m reflink=1 "$dir/xfs.img"
mkdir "$mnt"
mount -o loop "$dir/xfs.img" "$mnt"
make -s -C "$top" >/dev/null
store="$mnt/store"
mkdir -p "$store/out"
for d in blobs git hints plans; do
	[ ! -e "$src/$d" ] || cp -a "$src/$d" "$store/"
done
for k in $(PEERBOOT_CACHE="$src" "$top/bin/peerboot" plan --json "$top/recipes/default.toml" | jq -r '.stages[].key'); do
	[ ! -e "$src/out/$k" ] || cp -a "$src/out/$k" "$store/out/" # a missing one is built there
done
echo "# XFS store at $store: $(du -sh "$store" | cut -f1)"
PEERBOOT_CACHE="$store" TMPDIR="$mnt" ROUNDS="$rounds" "$top/scripts/rebuild-bench.sh"
