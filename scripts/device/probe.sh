#!/bin/sh
# probe.sh: try selftest/cuda and selftest/nccl on a GPU host with the prebuilt
# CGO_ENABLED=0 bin/cudaprobe (no boot image, no p2pcheck phases), then the CUDA-C
# reference d2d_ref (needs nvcc), and compare our local copy figure with the
# reference's. One line per check, then one summary line; non-zero exit when any check
# failed. Results go to $OUT (or /tmp).
#   CGO_ENABLED=0 go build -o bin/cudaprobe ./selftest/cuda/internal/cudaprobe
#   sh scripts/device/probe.sh
here=$(dirname "$0")
. "$here/lib.sh"
out=${OUT:-/tmp}
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
echo "== copy + highmem + nccl (one process)"
timeout 200 ./bin/cudaprobe -highmem-force -nccl -nccl-log "$out/nccl.log" >"$out/probe.json" 2>"$out/probe.txt"
rc=$?
cat "$out/probe.txt"
result cudaprobe-exit-0 "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc"
check all-verified sh -c "! grep -q 'verified=false\|MISMATCH\|ERROR' '$out/probe.txt'"
check nccl-log grep -q 'Init COMPLETE' "$out/nccl.log"
echo "== corrupt hook"
timeout 60 ./bin/cudaprobe -corrupt -bytes 16777216 -sm=false -bidir=false >"$out/corrupt.json" 2>"$out/corrupt.txt"
cat "$out/corrupt.txt"
check corrupt-detected grep -q 'MISMATCH' "$out/corrupt.txt"
echo "== reference"
if nvcc -O2 -o /tmp/d2d_ref "$here/d2d_ref.cu" -lcuda; then
	/tmp/d2d_ref | tee "$out/ref.txt"
	ours=$(awk '/^copy ce local 0->0/ {for(i=1;i<=NF;i++) if($i=="GB/s") print $(i-1)}' "$out/probe.txt" | head -1)
	ref=$(awk '$1=="d2d_ref" && $2=="ce" {print $NF}' "$out/ref.txt")
	ratio=$(awk -v a="$ours" -v b="$ref" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print 0 }')
	result ce-vs-ref "$(awk -v r="$ratio" 'BEGIN{ print (r>=0.97 && r<=1.03) ? "ok" : "FAIL" }')" "ours $ours GB/s, reference $ref GB/s, ratio $ratio (goal 3 %)"
else
	result nvcc FAIL "d2d_ref.cu did not build"
fi
summary
