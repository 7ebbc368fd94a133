#!/bin/sh
# multigpu.sh: issue 10's run on a host with several GPUs (works on one, comparing the
# local copy only). In one command: p2pcheck --json over every GPU (NCCL from the
# machine's PyTorch wheel, NVLink multicast off as the machine sets it), the CUDA-C
# peer-copy reference (p2p_ref.cu, nvbandwidth's method, built here with nvcc), the
# PyTorch all-reduce reference (one process per GPU), a comparison (goal: ±3 % per pair,
# ±5 % busbw), the transport classification checked against NCCL's own log, and a run
# with one corrupted peer copy that must fail. Results go to $OUT (or /tmp/multigpu).
#
#   make && <device> sh scripts/device/multigpu.sh
out=${OUT:-/tmp/multigpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -20
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2
echo "== p2pcheck --json (NCCL $nccl)"
./bin/p2pcheck --json --nccl-lib "$nccl" --log-dir "$out" --out "$out/report.json" >/dev/null 2>"$out/p2pcheck.stderr"
echo "exit $?"; tail -3 "$out/p2pcheck.stderr"
echo "== p2pcheck --inject-corruption (must exit 9)"
./bin/p2pcheck --json --nccl-lib "$nccl" --no-nccl --no-sm --inject-corruption --copy-size 67108864 \
	--out "$out/corrupt.json" >/dev/null 2>"$out/corrupt.stderr"
echo "exit $?"
echo "== CUDA-C peer-copy reference"
nvcc -O2 -o /tmp/p2p_ref scripts/device/p2p_ref.cu && /tmp/p2p_ref | tee "$out/p2p_ref.txt"
echo "== PyTorch all-reduce reference"
python3 scripts/device/allreduce_ref.py 1073741824 2>"$out/allreduce_ref.stderr" | tee "$out/allreduce_ref.txt"
tail -3 "$out/allreduce_ref.stderr"
python3 scripts/device/compare.py "$out"
