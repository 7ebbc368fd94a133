#!/bin/sh
# multigpu.sh: issue 10's and 21's run on a host with several GPUs (it also runs on
# one, comparing the local figures only). In one command: p2pcheck --json over every
# GPU (NCCL from the machine's PyTorch wheel, NVLink multicast off as the machine sets
# it), the CUDA-C peer-copy and latency reference (p2p_ref.cu, built here with nvcc),
# the PyTorch all-reduce reference (one process per GPU), the comparison (compare.py:
# copies within 3 %, latency within 10 %, busbw within 5 %, transports equal to NCCL's
# log) and a run with one corrupted peer copy that must exit 9 with copy.corrupt.
# One line per check, then one summary line; non-zero exit when any check failed.
# Results go to $OUT (or /tmp/multigpu).
#
#   make && <device> sh scripts/device/multigpu.sh
here=$(dirname "$0")
. "$here/lib.sh"
out=${OUT:-/tmp/multigpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -20
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2
echo "== p2pcheck --json (NCCL $nccl)"
./bin/p2pcheck --json --nccl-lib "$nccl" --log-dir "$out" --out "$out/report.json" >/dev/null 2>"$out/p2pcheck.stderr"
rc=$?
tail -3 "$out/p2pcheck.stderr"
result p2pcheck-exit-0 "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc"
echo "== p2pcheck --inject-corruption"
./bin/p2pcheck --json --nccl-lib "$nccl" --no-nccl --no-sm --inject-corruption --copy-size 64MiB \
	--out "$out/corrupt.json" >/dev/null 2>"$out/corrupt.stderr"
rc=$?
result corrupt-exit-9 "$([ $rc = 9 ] && echo ok || echo FAIL)" "exit $rc"
echo "== CUDA-C peer-copy and latency reference"
if nvcc -O2 -o /tmp/p2p_ref "$here/p2p_ref.cu"; then
	/tmp/p2p_ref | tee "$out/p2p_ref.txt"
else
	result nvcc FAIL "p2p_ref.cu did not build"
	: >"$out/p2p_ref.txt"
fi
echo "== PyTorch all-reduce reference"
python3 "$here/allreduce_ref.py" 1073741824 2>"$out/allreduce_ref.stderr" | tee "$out/allreduce_ref.txt"
tail -3 "$out/allreduce_ref.stderr"
python3 "$here/compare.py" "$out" >"$out/compare.txt" 2>"$out/compare.stderr"
grep -v '^ok \|^FAIL ' "$out/compare.txt"
cat "$out/compare.stderr"
grep '^ok \|^FAIL ' "$out/compare.txt" >"$out/results.txt"
results "$out/results.txt"
summary
