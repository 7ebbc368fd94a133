"""compare.py OUT: p2pcheck's report against the CUDA-C and PyTorch references written
by multigpu.sh into OUT; prints one line per compared figure and a summary."""
import json
import re
import sys

out = sys.argv[1]
r = json.load(open(out + "/report.json"))
print("verdict", r["verdict"], "| phases", [(d["phase"], d["ms"]) for d in r["durations"]])
for f in r["findings"]:
    if f["status"] != "info":
        print("  %s %s: %s" % (f["status"], f["id"], f["message"][:200]))

ref = {}
for line in open(out + "/p2p_ref.txt"):
    m = re.match(r"ce (local|write|bidir) (\d+)(?:->|<->)(\d+) ([\d.]+)", line)
    if m:
        ref[(m.group(1), int(m.group(2)), int(m.group(3)))] = float(m.group(4))
worst = 0.0
for c in r["copies"]:
    if c["method"] != "ce":
        continue
    key = (c["direction"], c["src"], c["dst"])
    if key not in ref or c.get("error"):
        continue
    d = c["gbps"] / ref[key] - 1
    worst = max(worst, abs(d))
    print("copy ce %-5s %d->%d  p2pcheck %7.1f  reference %7.1f  %+5.1f%%  verified %s" % (
        key[0], key[1], key[2], c["gbps"], ref[key], 100 * d, c["verified"]))
print("copies: worst difference %.1f%% (goal 3%%)" % (100 * worst))

tref = {}
for line in open(out + "/allreduce_ref.txt"):
    p = line.split()
    if len(p) == 4:
        tref[int(p[0])] = (float(p[1]), float(p[2]), int(p[3]))
n = r.get("nccl") or {}
worst = 0.0
for s in n.get("sizes") or []:
    b = s["bytes"]
    if b not in tref:
        continue
    alg, bus, wrong = tref[b]
    if b >= 64 << 20 and bus > 0:  # below that, latency and launch noise dominate
        d = s["busbw"] / bus - 1
        worst = max(worst, abs(d))
        print("nccl %10d  p2pcheck busbw %7.2f  torch %7.2f  %+5.1f%%  wrong %d/%d" % (b, s["busbw"], bus, 100 * d, s["wrong"], wrong))
print("busbw (>= 64 MiB): worst difference %.1f%% (goal 5%%)" % (100 * worst))

# Transports: the report's classification against NCCL's own log lines.
log = open(n["log_file"]).read() if n.get("log_file") else ""
log_p2p = len(set(re.findall(r"Channel (\d+)/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\].* via P2P", log)))
log_all = len(set(re.findall(r"Channel (\d+)/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\].* via ", log)))
rep_p2p = sum(1 for t in n.get("transports") or [] if t["p2p"])
print("transports: report %d P2P of %d; NCCL log %d P2P of %d channel connections" % (
    rep_p2p, len(n.get("transports") or []), log_p2p, log_all))

c = json.load(open(out + "/corrupt.json"))
print("corrupted copy run:", c["verdict"], [f["message"][:160] for f in c["findings"] if f["id"] == "copy.corrupt"])
