#!/bin/sh
# soak.sh: issue 32's burn-in proof on a GPU host. In one command:
#   - p2pcheck --soak $SOAK [2m]: must pass, every round's copies verified, every
#     all-reduce element checked; prints the per-copy start/end figures and how far
#     the end is from the start (steady within a few percent on a healthy card);
#   - every NVML sample has temperature, SM clock and power, and ECC (mode, volatile
#     counts, row remapping); the PCIe AER counters of the GPU and the ports above it
#     were read before and after (or a soak.aer info says why not); no ECC, remap or
#     AER warning or failure;
#   - --soak-progress: a copy taken mid-run says running with fewer rounds than the
#     end; the last one says finished, every round counted, a plot series, no fault;
#   - p2pcheck --soak 1m --soak-inject-corruption 3: must exit 9 with soak.corrupt
#     naming round 3 and the soak stopped there.
# One line per check, then one summary line; non-zero exit when any check failed.
# Results go to $OUT (or /tmp/soak). P2PCHECK names the binary [./bin/p2pcheck].
#
#   make && <device> sh scripts/device/soak.sh
here=$(dirname "$0")
. "$here/lib.sh"
out=${OUT:-/tmp/soak}
p2p=${P2PCHECK:-./bin/p2pcheck}
dur=${SOAK:-2m}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version,temperature.gpu,power.draw --format=csv,noheader

nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] || nccl=libnccl.so.2

echo "== p2pcheck --soak $dur (NCCL: $nccl)"
"$p2p" --soak "$dur" --soak-progress "$out/progress.json" --nccl-lib "$nccl" --log-dir "$out" --out "$out/soak.json" >"$out/soak.txt" 2>"$out/soak.stderr" &
pid=$!
# The progress file as serve would receive it mid-run (the init POSTs it every few minutes).
sleep 45
cp "$out/progress.json" "$out/progress-mid.json" 2>/dev/null
wait $pid
rc=$?
head -3 "$out/soak.stderr"; echo "..."; tail -3 "$out/soak.stderr"
sed -n '/^Soak (burn-in)/,/^$/p' "$out/soak.txt"
result soak-exit-0 "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc"
python3 - "$out/soak.json" <<'PY' >"$out/soak.checks"
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("soak") or {}
series = s.get("series") or []
bad = [(x["round"], c) for x in series for c in x["copies"] if not c["verified"]]
ar = [x.get("all_reduce") for x in series if x.get("all_reduce")]
print("ok" if s.get("rounds", 0) >= 3 and s.get("stopped") == "duration" else "FAIL", "soak-rounds",
      s.get("rounds"), "rounds in", s.get("elapsed_ms"), "ms, stopped", s.get("stopped"), s.get("stopped_at", ""))
print("ok" if series and not bad else "FAIL", "soak-every-copy-verified",
      sum(len(x["copies"]) for x in series), "copies,", len(bad), "not verified", bad[:1])
print("ok" if ar and all(a["wrong"] == 0 and not a.get("error") for a in ar) else "FAIL", "soak-allreduce-checked",
      len(ar), "sweeps,", sum(a["sizes"] for a in ar), "sizes,", sum(a["wrong"] for a in ar), "wrong")
worst, n = 0.0, 0
for p in s.get("pairs") or []:
    if p["end_gbps"] > 0:
        d = abs(p["end_gbps"] - p["start_gbps"]) / p["start_gbps"] * 100
        print("   ", p["src"], p["dst"], p["method"], p["direction"], p["bytes"], "start %.1f end %.1f min %.1f" % (p["start_gbps"], p["end_gbps"], p["min_gbps"]), "(%.1f %%)" % d, file=sys.stderr)
        worst, n = max(worst, d), n + 1
print("ok" if n and worst < 5 else "FAIL", "soak-steady", n, "copies with start and end figures; largest start->end change %.1f %%" % worst)
# NVML sensors, ECC / row remapping and PCIe AER (issue 32's later readings).
gpus = [g for x in series for g in x.get("gpus") or []]
sens = [g for g in gpus if all(k in g for k in ("temperature_c", "sm_clock_mhz", "power_mw"))]
print("ok" if gpus and len(sens) == len(gpus) else "FAIL", "soak-nvml-sensors", len(gpus), "samples,", len(sens), "with temperature, SM clock and power;",
      "temp %s..%s C, power %s..%s W" % (min((g["temperature_c"] for g in sens), default="-"), max((g["temperature_c"] for g in sens), default="-"),
      min((g["power_mw"] // 1000 for g in sens), default="-"), max((g["power_mw"] // 1000 for g in sens), default="-")))
ecc = [g["ecc"] for g in gpus if g.get("ecc")]
first, last = (ecc[0], ecc[-1]) if ecc else ({}, {})
print("ok" if ecc and len(ecc) == len(gpus) else "FAIL", "soak-ecc-read", len(ecc), "of", len(gpus), "samples with ECC; mode", last.get("mode"),
      "uncorrected", first.get("uncorrected"), "->", last.get("uncorrected"), "corrected", first.get("corrected"), "->", last.get("corrected"),
      "remap pending", last.get("remap_pending"), "failure", last.get("remap_failure"), "rows corr/unc", last.get("remapped_correctable"), last.get("remapped_uncorrectable"))
aer = s.get("aer") or []
why = [f["message"] for f in r["findings"] if f["id"] == "soak.aer" and f["status"] == "info"]
print("ok" if aer or why else "FAIL", "soak-aer-read", len(aer), "devices:",
      "; ".join("%s %s cor %d->%d nonfatal %d->%d fatal %d->%d" % (a["bdf"], a["of"], a["start"]["correctable"], a["end"]["correctable"], a["start"]["nonfatal"], a["end"]["nonfatal"], a["start"]["fatal"], a["end"]["fatal"]) for a in aer) or (why[0] if why else ""))
bad = [f["status"] + " " + f["id"] + ": " + f["message"] for f in r["findings"] if f["id"] in ("soak.ecc", "soak.row_remap", "soak.aer", "soak.aer_uncorrectable") and f["status"] != "info"]
import os
def progress(name):
    f = os.path.join(os.path.dirname(sys.argv[1]), name)
    return json.load(open(f)) if os.path.exists(f) else {}
mid, end = progress("progress-mid.json"), progress("progress.json")
print("ok" if mid.get("state") == "running" and 0 < mid.get("rounds", 0) < s.get("rounds", 0) else "FAIL", "soak-progress-mid",
      "state", mid.get("state"), "rounds", mid.get("rounds"), "elapsed", mid.get("elapsed_ms"), "ms, plot points", len((mid.get("plot") or {}).get("points") or []))
pts = (end.get("plot") or {}).get("points") or []
print("ok" if end.get("state") == "finished" and end.get("rounds") == s.get("rounds") and pts and end.get("faulty_rounds") == 0 else "FAIL", "soak-progress-final",
      "state", end.get("state"), "rounds", end.get("rounds"), "of", s.get("rounds"), "faulty", end.get("faulty_rounds"), "plot points", len(pts), "stride", (end.get("plot") or {}).get("stride"))
print("ok" if not bad else "FAIL", "soak-no-memory-or-link-errors", "; ".join(bad) or "no soak.ecc / soak.row_remap / soak.aer warnings or failures")
PY
results "$out/soak.checks"

echo "== p2pcheck --soak 1m --soak-inject-corruption 3"
"$p2p" --json --soak 1m --soak-inject-corruption 3 --no-nccl --no-peer-mem --nccl-lib "$nccl" --out "$out/corrupt.json" >/dev/null 2>"$out/corrupt.stderr"
rc=$?
got=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r.get("soak") or {}; print(s.get("rounds"), s.get("stopped"), "|", " | ".join(f["status"]+" "+f["id"]+": "+f["message"] for f in r["findings"] if f["id"].startswith("soak.")))' "$out/corrupt.json")
echo "$got"
result soak-corrupt-exit-9 "$([ $rc = 9 ] && echo ok || echo FAIL)" "exit $rc"
result soak-corrupt-round-3 "$(case $got in "3 failure |"*"fail soak.corrupt"*"in round 3 ("*) echo ok ;; *) echo FAIL ;; esac)" "$got"
summary
