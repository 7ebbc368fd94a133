"""compare_local.py OUT: p2pcheck's local figures on GPU0 against the CUDA-C
references d2d_ref wrote into OUT (selftest.sh). Prints the figures, then one line
per check, "ok NAME DETAIL" or "FAIL NAME DETAIL", for lib.sh's `results`.

Goals (issue 21): copy-engine D2D within 3 % of the reference; the SM copy at least
90 % of the copy engine and within 5 % of the reference kernel of the same shape;
the 16-byte write latency within 10 % of the reference; the corrupted run fails with
copy.corrupt."""
import json
import os
import sys

out = sys.argv[1]
checks = []


def check(name, ok, detail):
    checks.append("%s %s %s" % ("ok" if ok else "FAIL", name, detail))


def lines(name):
    """The lines of OUT/name; none when a step before did not write it (its checks
    then fail on missing figures instead of the script stopping)."""
    path = os.path.join(out, name)
    return open(path).read().splitlines() if os.path.exists(path) else []


r = json.load(open(out + "/report.json"))
print("verdict", r["verdict"], "| phases", [(d["phase"], d["ms"]) for d in r["durations"]])
for f in r["findings"]:
    if f["status"] != "info":
        print("  %s %s: %s" % (f["status"], f["id"], f["message"][:200]))
print("copies", [(c["method"], c["direction"], round(c["gbps"], 1), c["verified"]) for c in r["copies"]])
print("latencies", [(l["src"], l["dst"], l["direction"], round(l["us"], 3), l["verified"]) for l in r.get("latencies") or []])
print("high_mem", [(h["gpu"], h["ballast_mib"], h["verified"], h.get("error", "")) for h in r["high_mem"]])
n = r.get("nccl") or {}
print("nccl", n.get("version"), "ranks", n.get("ranks"), "sizes", len(n.get("sizes") or []),
      "wrong", sum(s["wrong"] for s in n.get("sizes") or []), "error", n.get("error", ""))
check("verdict-pass", r["verdict"] == "pass", "verdict %s" % r["verdict"])

ref = {}
for line in lines("ref.txt"):
    p = line.split()
    if len(p) > 3 and p[0] == "d2d_ref" and p[-2] == "median":
        ref[p[1]] = float(p[-1])


def local(method):
    for c in r["copies"]:
        if c["src"] == 0 and c["dst"] == 0 and c["direction"] == "local" and c["method"] == method:
            return c
    return None


def rel(a, b):
    return a / b - 1 if b else float("inf")


ce, sm = local("ce"), local("sm")
lat = [l for l in r.get("latencies") or [] if l["src"] == 0 and l["dst"] == 0]
if ce and "ce" in ref:
    d = rel(ce["gbps"], ref["ce"])
    check("ce-vs-ref", abs(d) <= 0.03 and ce["verified"], "p2pcheck %.1f GB/s, CUDA-C %.1f GB/s, %+.1f%% (goal 3%%), verified %s" % (ce["gbps"], ref["ce"], 100 * d, ce["verified"]))
else:
    check("ce-vs-ref", False, "missing: p2pcheck %s, reference %s" % (ce is not None, "ce" in ref))
if ce and sm:
    q = sm["gbps"] / ce["gbps"] if ce["gbps"] else 0
    check("sm-vs-ce", q >= 0.90 and sm["verified"], "SM %.1f GB/s / CE %.1f GB/s = %.1f%% (goal 90%%), verified %s" % (sm["gbps"], ce["gbps"], 100 * q, sm["verified"]))
else:
    check("sm-vs-ce", False, "missing local copies: ce %s, sm %s" % (ce is not None, sm is not None))
if sm and "sm" in ref:
    d = rel(sm["gbps"], ref["sm"])
    check("sm-vs-ref", abs(d) <= 0.05, "p2pcheck %.1f GB/s, CUDA-C kernel of the same shape %.1f GB/s, %+.1f%% (goal 5%%)" % (sm["gbps"], ref["sm"], 100 * d))
else:
    check("sm-vs-ref", False, "missing: p2pcheck %s, reference %s" % (sm is not None, "sm" in ref))
for api in ("latency-peer-api", "latency-driver-api"):
    if api in ref and lat:
        print("%s: CUDA-C %.3f us; p2pcheck %.3f us, %+.1f%%" % (api, ref[api], lat[0]["us"], 100 * rel(lat[0]["us"], ref[api])))
if lat and "latency" in ref:
    l = lat[0]
    d = rel(l["us"], ref["latency"])
    ok = abs(d) <= 0.10 and l["verified"] and not l.get("mismatch") and not l.get("error")
    check("latency-vs-ref", ok, "p2pcheck %.3f us, CUDA-C %.3f us, %+.1f%% (goal 10%%), verified %s, samples %s" % (l["us"], ref["latency"], 100 * d, l["verified"], [round(x, 3) for x in l["samples"]]))
else:
    check("latency-vs-ref", False, "missing: p2pcheck %s, reference %s" % (bool(lat), "latency" in ref))

c = json.loads("\n".join(lines("corrupt.json")) or '{"verdict": "missing", "findings": []}')
cc = [f for f in c["findings"] if f["id"] == "copy.corrupt"]
check("corrupt-finding", c["verdict"] == "fail" and bool(cc), "verdict %s, copy.corrupt: %s" % (c["verdict"], cc[0]["message"][:160] if cc else "none"))
for line in checks:
    print(line)
