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
# HEAD so the checkout is untouched (under $TMPDIR, default /tmp); the store
# ($PEERBOOT_CACHE) must hold a build of the default recipe (`make image`).
# ROUNDS=N repeats step 1 (each round a new edit, its reference beside it) and
# ends with the ratios sorted, their median and how many met 1.2.
# scripts/rebuild-bench-xfs.sh runs it on XFS, where the image stage clones.
# Usage: [ROUNDS=1] scripts/rebuild-bench.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/peerboot-bench.XXXXXX")
[ "${BENCH_KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT
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
rounds=${ROUNDS:-1}
# 1. One overlay file, ROUNDS times.
for round in $(seq "$rounds"); do
	cp --sparse=always "$work/out/default/disk.img" "$work/disk.old"
	cp "$work/out/default/peerboot.efi" "$work/efi.old"

	echo "# bench $(date +%s)" >>overlay/etc/hosts
	make -s >/dev/null
	# Each side starts from a quiet file system: writeback still owed by the
	# previous round or the store copy (XFS bench) lands in whichever side
	# runs next and swung the ratio from 0.5 to 2.4 (2026-12-06).
	sync
	t_overlay=$(timed)
	built=$(awk '$2 == "built" {printf "%s%s", sep, $1; sep=","}' "$work/build.log")
	config=$("$pb" plan --json "$recipe" | jq -r '.stages[] | select(.name == "config") | .key')
	tree="${PEERBOOT_CACHE:-$HOME/.cache/peerboot}/out/$config/root"
	# Which 1 MiB blocks of each output changed (found untimed), as dd commands.
	python3 - "$work" >"$work/dd.sh" <<'PY'
import os, sys
w = sys.argv[1]
for old, new in (("disk.old", "out/default/disk.img"), ("efi.old", "out/default/peerboot.efi")):
    a, b = open(os.path.join(w, old), "rb"), open(os.path.join(w, new), "rb")
    i, n = 0, 0
    while True:
        x, y = a.read(1 << 20), b.read(1 << 20)
        if not y:
            break
        if x != y:
            print(f"dd if={w}/{new} of={w}/{old} bs=1M skip={i} seek={i} count=1 conv=notrunc status=none")
            n += 1
        i += 1
    print(f"{new}: {n} of {i} MiB changed", file=sys.stderr)
PY
	sync
	t0=$(now)
	(cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | zstd -T0 -3 -q >"$work/ref.cpio.zst")
	sh "$work/dd.sh"
	sync -f "$work/disk.old"
	t1=$(now)
	t_ref=$(echo "$t1 - $t0" | bc)
	grep -E "^((config|initramfs|image|publish) |image: )" "$work/build.log" | sed "s/^/  /"
	echo "overlay edit: rebuild ${t_overlay}s (stages built: $built); reference (pack config layer + write changed blocks) ${t_ref}s; ratio $(echo "scale=2; $t_overlay / $t_ref" | bc)"
done | tee "$work/rounds.txt"
awk -v want="$rounds" '/^overlay edit:/ { r[++n] = $NF; if ($NF <= 1.2) ok++ }
END {
	if (n != want) { printf "only %d of %d rounds finished\n", n, want; exit 1 }
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
	m = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
	printf "overlay edit over %d rounds: ratios %s", n, r[1]
	for (i = 2; i <= n; i++) printf " %s", r[i]
	printf " (sorted), median %.2f, %d of %d at or under 1.2\n", m, ok, n
}' "$work/rounds.txt"

# 2. description, 3. kernel.cmdline.
sed -i 's/^description = "/description = "bench: /' "$recipe"
echo "description edit: rebuild $(timed)s"
sed -i 's/^cmdline = "\(.*\)"/cmdline = "\1 quiet"/' "$recipe"
echo "kernel.cmdline edit: rebuild $(timed)s"
# 4. Nothing changed.
echo "no-op rebuild: $(timed)s"
