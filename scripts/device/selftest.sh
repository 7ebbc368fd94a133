#!/bin/sh
# selftest.sh: the issue-5 proof on a GPU host. Runs the real p2pcheck (built here with
# CGO_ENABLED=0: `make` puts it in bin/) over every phase the GPUs allow, with NCCL
# taken from the machine's PyTorch wheel, then the CUDA-C reference d2d_ref built with
# nvcc in the same command, and prints our local copy figure beside the reference's.
# A second p2pcheck run injects one corrupted word and must fail with copy.corrupt.
# Results (report JSON, console, NCCL log) go to $OUT (or /tmp/selftest).
#
#   make && <device> sh scripts/device/selftest.sh
out=${OUT:-/tmp/selftest}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2
echo "== p2pcheck --json (NCCL: $nccl)"
# The H200's BAR1 (256 GiB) covers its memory; --high-mem-bar1 runs the above-BAR1
# probe as if BAR1 were 32 GiB, the 48 GB RTX 4090's size.
./bin/p2pcheck --json --nccl-lib "$nccl" --high-mem-bar1 34359738368 --log-dir "$out" \
	--out "$out/report.json" >/dev/null 2>"$out/p2pcheck.stderr"
echo "exit $?"; tail -5 "$out/p2pcheck.stderr"
./bin/p2pcheck --json --nccl-lib "$nccl" --no-nccl --inject-corruption --copy-size 67108864 \
	--out "$out/corrupt.json" >/dev/null 2>"$out/corrupt.stderr"
echo "== --inject-corruption exit $? (want 9)"
echo "== reference"
nvcc -O2 -o /tmp/d2d_ref scripts/device/d2d_ref.cu || exit 1
/tmp/d2d_ref | tee "$out/ref.txt"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/report.json"))
ref = float(open(out + "/ref.txt").read().split()[-1])
local = [c for c in r["copies"] if c["direction"] == "local" and c["method"] == "ce"][0]
print("verdict", r["verdict"], "| phases", [(d["phase"], d["ms"]) for d in r["durations"]])
for f in r["findings"]:
    if f["status"] != "info":
        print(" ", f["status"], f["id"], f["message"][:160])
print("copies", [(c["method"], c["direction"], round(c["gbps"], 1), c["verified"]) for c in r["copies"]])
print("high_mem", [(h["gpu"], h["ballast_mib"], h["verified"], h.get("error", "")) for h in r["high_mem"]])
n = r.get("nccl") or {}
print("nccl", n.get("version"), "ranks", n.get("ranks"), "sizes", len(n.get("sizes") or []),
      "wrong", sum(s["wrong"] for s in n.get("sizes") or []), "error", n.get("error", ""))
print("local d2d: p2pcheck %.1f GB/s, CUDA-C reference %.1f GB/s, ratio %.3f" % (local["gbps"], ref, local["gbps"] / ref))
c = json.load(open(out + "/corrupt.json"))
print("corrupt run verdict", c["verdict"], [f["message"][:140] for f in c["findings"] if f["id"] == "copy.corrupt"])
PY
