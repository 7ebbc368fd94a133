#!/bin/sh
# peermem.sh: issue 27's self-test proof on a GPU host (one GPU: the local forms). In
# one command:
#   - p2pcheck over every phase, the peermem phase included (managed, VMM and
#     exported-handle memory, selftest/cuda/peermem.go); it must pass with every
#     peer_mem check verified (ipc and cudaipc import in a second process);
#   - p2pcheck --inject-corruption=managed (and =vmm, =ipc, =cudaipc) must exit 9 with a
#     peermem.corrupt finding on that form and test.injected;
#   - the kernel log's peerboot-p2p mode lines, if the driver prints them (a stock
#     driver does not: then no GPU has a p2p_mode);
#   - the CUDA-C reference peermem_ref.cu (nvcc): the same three forms.
# One line per check, then one summary line; non-zero exit when any check failed.
# Results go to $OUT (or /tmp/peermem). P2PCHECK names the binary [./bin/p2pcheck].
#
#   make && <device> sh scripts/device/peermem.sh
here=$(dirname "$0")
. "$here/lib.sh"
out=${OUT:-/tmp/peermem}
p2p=${P2PCHECK:-./bin/p2pcheck}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader

nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2

# pm FILE FORM: "ok N" when every check of FORM in the report is verified (N checks),
# else the first problem.
pm() {
	python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ms = [m for m in r.get("peer_mem") or [] if m["kind"] == sys.argv[2]]
bad = [m for m in ms if not m["verified"]]
if not ms:
    print("none")
elif bad:
    m = bad[0]
    print("bad", m.get("step"), m.get("refused") or m.get("error") or m.get("mismatch"))
else:
    print("ok", len(ms), "bytes", ms[0]["bytes"], "calls:", "; ".join(ms[0]["calls"]))
PY
}

echo "== p2pcheck (NCCL: $nccl)"
"$p2p" --nccl-lib "$nccl" --log-dir "$out" --out "$out/report.json" >"$out/report.txt" 2>"$out/p2pcheck.stderr"
rc=$?
tail -3 "$out/p2pcheck.stderr"
sed -n '/^P2P mode/,/^$/p; /^Peer memory/,/^$/p; /^Durations/,/^$/p' "$out/report.txt"
result p2pcheck-exit-0 "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc"
for f in managed vmm ipc cudaipc; do
	v=$(pm "$out/report.json" $f)
	result "peermem-$f-verified" "$(case $v in ok*) echo ok ;; *) echo FAIL ;; esac)" "$v"
done

for f in managed vmm ipc cudaipc; do
	echo "== p2pcheck --inject-corruption=$f"
	"$p2p" --json --nccl-lib "$nccl" --no-nccl --no-sm --inject-corruption=$f --copy-size 64MiB \
		--out "$out/corrupt-$f.json" >/dev/null 2>"$out/corrupt-$f.stderr"
	rc=$?
	got=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" | ".join(f["status"]+" "+f["id"]+": "+f["message"] for f in r["findings"] if f["id"] in ("peermem.corrupt","test.injected","test.undetected")))' "$out/corrupt-$f.json")
	echo "$got"
	ok=FAIL
	[ $rc = 9 ] && case $got in *"fail peermem.corrupt"*"info test.injected"* | *"info test.injected"*"fail peermem.corrupt"*) ok=ok ;; esac
	result "corrupt-$f-exit-9" $ok "exit $rc"
done

echo "== kernel log: peerboot-p2p lines"
dmesg 2>/dev/null | grep 'peerboot-p2p: bar1-mode' | tail -8 || true
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("p2p_mode per GPU:", [(g["bdf"], g.get("p2p_mode","")) for g in r["gpus"]])' "$out/report.json"

echo "== CUDA-C reference"
if nvcc -O2 -o /tmp/peermem_ref "$here/peermem_ref.cu" -lcuda; then
	/tmp/peermem_ref $((32 << 20)) | tee "$out/ref.txt"
	while read -r _ form pair st rest; do
		result "ref-$form" "$([ "$st" = ok ] && echo ok || echo FAIL)" "$pair $rest"
	done <"$out/ref.txt"
else
	result nvcc FAIL "peermem_ref.cu did not build"
fi
summary
