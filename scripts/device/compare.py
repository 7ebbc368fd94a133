"""compare.py OUT: p2pcheck's report against the CUDA-C and PyTorch references written
by multigpu.sh into OUT. Prints one line per compared figure, then one line per check,
"ok NAME DETAIL" or "FAIL NAME DETAIL", for lib.sh's `results`.

Goals: every CE copy within 3 % of p2p_ref, every latency within 10 % of p2p_ref,
NCCL busbw within 5 % of PyTorch's at 64 MiB and above, the transports p2pcheck reports
equal to NCCL's own log, the corrupted run failing with copy.corrupt."""
import json
import os
import re
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
check("verdict-pass", r["verdict"] == "pass", "verdict %s" % r["verdict"])

ref, lref = {}, {}
for line in lines("p2p_ref.txt"):
    m = re.match(r"ce (local|write|bidir) (\d+)(?:->|<->)(\d+) ([\d.]+)", line)
    if m:
        ref[(m.group(1), int(m.group(2)), int(m.group(3)))] = float(m.group(4))
    m = re.match(r"latency (local|write) (\d+)->(\d+) ([\d.]+)", line)
    if m:
        lref[(int(m.group(2)), int(m.group(3)))] = float(m.group(4))
worst, n = 0.0, 0
for c in r["copies"]:
    if c["method"] != "ce":
        continue
    key = (c["direction"], c["src"], c["dst"])
    if key not in ref or c.get("error"):
        continue
    d = c["gbps"] / ref[key] - 1
    worst, n = max(worst, abs(d)), n + 1
    print("copy ce %-5s %d->%d  p2pcheck %7.1f  reference %7.1f  %+5.1f%%  verified %s" % (
        key[0], key[1], key[2], c["gbps"], ref[key], 100 * d, c["verified"]))
check("copies-vs-ref", n > 0 and worst <= 0.03, "%d compared, worst difference %.1f%% (goal 3%%)" % (n, 100 * worst))

worst, n = 0.0, 0
for l in r.get("latencies") or []:
    key = (l["src"], l["dst"])
    if key not in lref or l.get("error"):
        continue
    d = l["us"] / lref[key] - 1
    worst, n = max(worst, abs(d)), n + 1
    print("latency %d->%d  p2pcheck %6.3f us  reference %6.3f us  %+5.1f%%  verified %s" % (
        key[0], key[1], l["us"], lref[key], 100 * d, l["verified"] and not l.get("mismatch")))
check("latency-vs-ref", n > 0 and worst <= 0.10, "%d compared, worst difference %.1f%% (goal 10%%)" % (n, 100 * worst))

tref = {}
for line in lines("allreduce_ref.txt"):
    p = line.split()
    if len(p) == 4:
        tref[int(p[0])] = (float(p[1]), float(p[2]), int(p[3]))
nc = r.get("nccl") or {}
worst, n = 0.0, 0
for s in nc.get("sizes") or []:
    b = s["bytes"]
    if b not in tref:
        continue
    alg, bus, wrong = tref[b]
    if b >= 64 << 20 and bus > 0:  # below that, latency and launch noise dominate
        d = s["busbw"] / bus - 1
        worst, n = max(worst, abs(d)), n + 1
        print("nccl %10d  p2pcheck busbw %7.2f  torch %7.2f  %+5.1f%%  wrong %d/%d" % (b, s["busbw"], bus, 100 * d, s["wrong"], wrong))
if nc.get("ranks", 0) > 1:
    check("busbw-vs-ref", n > 0 and worst <= 0.05, "%d sizes >= 64 MiB compared, worst difference %.1f%% (goal 5%%)" % (n, 100 * worst))
else:
    print("busbw: one rank, no bus bandwidth to compare")

# Transports: the report's classification against NCCL's own log lines.
log = open(nc["log_file"]).read() if nc.get("log_file") else ""
log_p2p = len(set(re.findall(r"Channel (\d+)/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\].* via P2P", log)))
log_all = len(set(re.findall(r"Channel (\d+)/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\].* via ", log)))
rep = nc.get("transports") or []
rep_p2p = sum(1 for t in rep if t["p2p"])
check("transports", rep_p2p == log_p2p and len(rep) == log_all, "report %d P2P of %d; NCCL log %d P2P of %d channel connections" % (
    rep_p2p, len(rep), log_p2p, log_all))

c = json.loads("\n".join(lines("corrupt.json")) or '{"verdict": "missing", "findings": []}')
cc = [f for f in c["findings"] if f["id"] == "copy.corrupt"]
check("corrupt-finding", c["verdict"] == "fail" and bool(cc), "verdict %s, copy.corrupt: %s" % (c["verdict"], cc[0]["message"][:160] if cc else "none"))
for line in checks:
    print(line)
