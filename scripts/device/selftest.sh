#!/bin/sh
# selftest.sh: issue 21's proof on a GPU host with one GPU (more work too: only GPU0's
# local figures are compared). In one command:
#   - ptxas (nvcc's) assembles every hand-written PTX module for sm_90 and sm_89;
#   - the real p2pcheck (CGO_ENABLED=0, from `make`) over every phase the GPUs allow,
#     NCCL from the machine's PyTorch wheel; it must pass;
#   - p2pcheck --inject-corruption must exit 9 with a copy.corrupt finding;
#   - the CUDA-C references d2d_ref.cu (built here with nvcc): the local copy-engine
#     copy, a copy kernel of the SM copy's shape, the 16-byte write latency;
#   - compare_local.py: CE within 3 % of the reference, SM copy at least 90 % of the
#     copy engine and within 5 % of the reference kernel, latency within 10 %.
# One line per check, then one summary line; the exit status is non-zero when any
# check failed. SWEEP=1 also times the reference SM kernel over several shapes.
# Results (reports, console, logs) go to $OUT (or /tmp/selftest).
#
#   make && CGO_ENABLED=0 go build -o bin/cudaprobe ./selftest/cuda/internal/cudaprobe
#   <device> sh scripts/device/selftest.sh
here=$(dirname "$0")
. "$here/lib.sh"
out=${OUT:-/tmp/selftest}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader

echo "== ptxas"
ptxok() {
	./bin/cudaprobe -dump-ptx "$out" || return 1
	for m in cuda nccl; do
		for arch in sm_90 sm_89; do
			echo "-- $m.ptx $arch"
			ptxas -arch=$arch -v "$out/$m.ptx" -o /dev/null || return 1
		done
	done
}
check ptxas ptxok >"$out/ptxas.txt" 2>&1
tail -1 "$out/ptxas.txt"
grep -A4 "entry function 'pb_copy_v4'" "$out/ptxas.txt" | grep -E 'registers'

nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2
echo "== p2pcheck --json (NCCL: $nccl)"
# The H200's BAR1 (256 GiB) covers its memory; --high-mem-bar1 runs the above-BAR1
# probe as if BAR1 were 32 GiB, the 48 GB RTX 4090's size.
./bin/p2pcheck --json --nccl-lib "$nccl" --high-mem-bar1 32GiB --log-dir "$out" \
	--out "$out/report.json" >/dev/null 2>"$out/p2pcheck.stderr"
rc=$?
tail -3 "$out/p2pcheck.stderr"
result p2pcheck-exit-0 "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc"

echo "== p2pcheck --inject-corruption"
./bin/p2pcheck --json --nccl-lib "$nccl" --no-nccl --inject-corruption --copy-size 64MiB \
	--out "$out/corrupt.json" >/dev/null 2>"$out/corrupt.stderr"
rc=$?
result corrupt-exit-9 "$([ $rc = 9 ] && echo ok || echo FAIL)" "exit $rc"

echo "== CUDA-C references"
if nvcc -O2 -o /tmp/d2d_ref "$here/d2d_ref.cu" -lcuda; then
	/tmp/d2d_ref | tee "$out/ref.txt"
	[ "${SWEEP:-0}" = 1 ] && /tmp/d2d_ref sweep | tee "$out/sweep.txt"
else
	result nvcc FAIL "d2d_ref.cu did not build"
fi
python3 "$here/compare_local.py" "$out" >"$out/compare.txt" 2>"$out/compare.stderr"
grep -v '^ok \|^FAIL ' "$out/compare.txt"
cat "$out/compare.stderr"
grep '^ok \|^FAIL ' "$out/compare.txt" >"$out/results.txt"
results "$out/results.txt"
summary
