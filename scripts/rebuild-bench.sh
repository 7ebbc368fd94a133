#!/bin/sh
# Incremental rebuild figures, all in one run against the warm store:
#  1. edit one overlay file, rebuild; the reference is what the edit must cost at
#     least: packing the config layer's tree (find | cpio -o -H newc | zstd -T0 -3)
#     plus writing the bytes of disk.img and peerboot.efi that changed (dd, in
#     1 MiB blocks); prints the ratio (goal <= 1.2);
#  2. edit description, rebuild; 3. edit kernel.cmdline, rebuild;
#  4. a no-op rebuild (goal < 0.1 s).
# Only `peerboot build` is timed: an overlay edit also needs `go build` of
# peerboot (the overlay is embedded), done untimed before. Works in a clone of
# HEAD so the checkout is untouched; the store ($PEERBOOT_CACHE) must hold a
# build of the default recipe (`make image`).
# Usage: scripts/rebuild-bench.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/peerboot-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q "$top" "$work/src"
cd "$work/src"
make -s >/dev/null
pb="$work/src/bin/peerboot"
recipe=recipes/default.toml
now() { date +%s.%N; }
timed() { # timed LABEL: runs peerboot build, prints and returns its seconds
	t0=$(now)
	"$pb" build "$recipe" --out "$work/out" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
	t1=$(now)
	echo "$t1 - $t0" | bc
}

"$pb" fetch "$recipe" >/dev/null
"$pb" build "$recipe" --out "$work/out" >/dev/null 2>&1
cp --sparse=always "$work/out/default/disk.img" "$work/disk.old"
cp "$work/out/default/peerboot.efi" "$work/efi.old"

# 1. One overlay file.
echo "# bench $(date +%s)" >>overlay/etc/hosts
make -s >/dev/null
t_overlay=$(timed)
built=$(awk '$2 == "built" {printf "%s%s", sep, $1; sep=","}' "$work/build.log")
config=$("$pb" plan "$recipe" | awk '$2 == "config" {print $NF}')
tree="${PEERBOOT_CACHE:-$HOME/.cache/peerboot}/out/$config/root"
t0=$(now)
(cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | zstd -T0 -3 -q >"$work/ref.cpio.zst")
python3 - "$work" <<'PY'
import os, sys
w = sys.argv[1]
# The changed 1 MiB blocks of each output, written into the old copy as dd would.
for old, new in (("disk.old", "out/default/disk.img"), ("efi.old", "out/default/peerboot.efi")):
    a, b = open(os.path.join(w, old), "r+b"), open(os.path.join(w, new), "rb")
    n = 0
    while True:
        x, y = a.read(1 << 20), b.read(1 << 20)
        if not y:
            break
        if x != y:
            a.seek(-len(x), 1)
            a.write(y)
            n += 1
    a.truncate()
    a.flush()
    print(f"{new}: {n} MiB changed", file=sys.stderr)
PY
t1=$(now)
t_ref=$(echo "$t1 - $t0" | bc)
echo "overlay edit: rebuild ${t_overlay}s (stages built: $built); reference (pack config layer + write changed blocks) ${t_ref}s; ratio $(echo "scale=2; $t_overlay / $t_ref" | bc)"

# 2. description, 3. kernel.cmdline.
sed -i 's/^description = "/description = "bench: /' "$recipe"
echo "description edit: rebuild $(timed)s"
sed -i 's/^cmdline = "\(.*\)"/cmdline = "\1 quiet"/' "$recipe"
echo "kernel.cmdline edit: rebuild $(timed)s"
# 4. Nothing changed.
echo "no-op rebuild: $(timed)s"
