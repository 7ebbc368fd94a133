#!/bin/sh
# probe.sh: try selftest/cuda and selftest/nccl on a GPU host with the prebuilt
# CGO_ENABLED=0 bin/cudaprobe, then the CUDA-C reference d2d_ref (needs nvcc), and
# print our local copy figure next to the reference's. Results go to $OUT (or /tmp).
#   CGO_ENABLED=0 go build -o bin/cudaprobe ./selftest/cuda/internal/cudaprobe
#   sh scripts/device/probe.sh
out=${OUT:-/tmp}
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
echo "== copy + highmem + nccl (one process)"
timeout 200 ./bin/cudaprobe -highmem-force -nccl -nccl-log "$out/nccl.log" >"$out/probe.json" 2>"$out/probe.txt"
echo "rc=$?"; cat "$out/probe.txt"
echo "== nccl log: $(wc -l <"$out/nccl.log") lines"; grep -E 'NCCL version|Init COMPLETE| via ' "$out/nccl.log" | head -5
echo "== corrupt hook"
timeout 60 ./bin/cudaprobe -corrupt -bytes 16777216 -sm=false -bidir=false >"$out/corrupt.json" 2>"$out/corrupt.txt"
echo "rc=$?"; cat "$out/corrupt.txt"; grep '"injected"' "$out/corrupt.json"
echo "== reference"
if nvcc -O2 -o /tmp/d2d_ref scripts/device/d2d_ref.cu; then
	/tmp/d2d_ref | tee "$out/ref.txt"
	ours=$(awk '/^copy ce local 0->0/ {sub(/:/,"",$0); for(i=1;i<=NF;i++) if($i=="GB/s") print $(i-1)}' "$out/probe.txt" | head -1)
	ref=$(awk '{print $NF}' "$out/ref.txt")
	echo "local d2d GPU0: ours $ours GB/s, reference $ref GB/s, ratio $(awk -v a="$ours" -v b="$ref" 'BEGIN{ if (b>0) printf "%.3f", a/b }')"
fi
