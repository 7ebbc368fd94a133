package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// ncclLevel ranks an NCCL_P2P_LEVEL value on TopoRank's scale (0 for LOC and the
// NVLink levels); ok is false for a value NCCL would not take.
func ncclLevel(v string) (int, bool) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "LOC", "0":
		return 0, true
	case "NVL", "NVB", "C2C":
		return 0, true
	case "PIX", "1":
		return selftest.TopoRank(selftest.TopoPIX), true
	case "PXB", "2", "P2C", "PXN":
		return selftest.TopoRank(selftest.TopoPXB), true
	case "PHB", "3":
		return selftest.TopoRank(selftest.TopoPHB), true
	case "SYS", "4", "5":
		return selftest.TopoRank(selftest.TopoSYS), true
	}
	return 0, false
}

// ncclCovers says whether P2P level covers a topology class; NCCL counts NODE as PHB.
func ncclCovers(level, topo string) bool {
	lv, ok := ncclLevel(level)
	if !ok {
		lv = selftest.TopoRank(selftest.TopoPXB)
	}
	t := selftest.TopoRank(topo)
	if topo == selftest.TopoNODE {
		t = selftest.TopoRank(selftest.TopoPHB)
	}
	return t <= lv
}

// ncclEnv is the value NCCL ran with (NCCL.Env), else what the recipe sets.
func (j *judge) ncclEnv(key string) (string, bool) {
	if n := j.r.NCCL; n != nil && n.Env != nil {
		v, ok := n.Env[key]
		return v, ok
	}
	if j.e != nil {
		v, ok := j.e.Env[key]
		return v, ok
	}
	return "", false
}

// nccl judges the all-reduce phase: its error, its data check, its bus bandwidth and
// the transport of every channel between two GPUs.
func (j *judge) nccl() {
	n := j.r.NCCL
	if n == nil {
		return
	}
	if n.Error != "" && !j.ncclArch(n) {
		hint := "see the NCCL log (log_file, NCCL_DEBUG=INFO) for the failing call"
		if strings.Contains(n.Error, "/dev/shm") {
			hint = "NCCL needs /dev/shm: the init must mount a tmpfs there"
		}
		j.add(selftest.SevFail, "nccl.error", "nccl", "NCCL all-reduce failed: "+n.Error, n.Error, hint)
	}
	for _, s := range n.Sizes {
		if s.Wrong > 0 {
			j.add(selftest.SevFail, "nccl.data", fmt.Sprintf("nccl %s", selftest.HumanBytes(s.Bytes)), fmt.Sprintf("all-reduce of %s over %d ranks: %d element(s) differ from the exact sum", selftest.HumanBytes(s.Bytes), n.Ranks, s.Wrong),
				fmt.Sprintf("bytes=%d wrong=%d", s.Bytes, s.Wrong), "NCCL moved wrong data: peer mappings are broken (compare copy.corrupt); rerun with NCCL_P2P_DISABLE=1 to confirm")
		}
	}
	busbw, at := n.BusBWAtMax, int64(0)
	if len(n.Sizes) > 0 {
		last := n.Sizes[len(n.Sizes)-1]
		at = last.Bytes
		if busbw <= 0 {
			busbw = last.BusBW
		}
	}
	nonP2P := 0
	for _, t := range n.Transports {
		if !t.P2P && t.From != t.To {
			nonP2P++
		}
	}
	if j.e != nil && j.e.MinBusBWGBps > 0 && busbw > 0 && busbw < j.e.MinBusBWGBps {
		hint := "a slow pair drags the whole ring: compare the copy bandwidth matrix and pcie.link"
		if nonP2P > 0 {
			hint = "NCCL is not using P2P on every channel (see nccl.transport): fix that first"
		}
		j.add(selftest.SevFail, "nccl.busbw", "nccl busbw", fmt.Sprintf("all-reduce bus bandwidth %.1f GB/s at %s, below selftest.min_busbw_gbps = %.1f", busbw, selftest.HumanBytes(at), j.e.MinBusBWGBps),
			fmt.Sprintf("busbw_at_max=%.2f bytes=%d", busbw, at), hint)
	}
	// NCCL ran over several GPUs but its log named no channel: which transport it took
	// is unknown, so P2P is unproven (the log was not written, not read, or not parsed).
	if n.Error == "" && n.Ranks > 1 && len(n.Sizes) > 0 && len(n.Transports) == 0 {
		sev := selftest.SevWarn
		if j.e != nil && j.e.RequireP2P {
			sev = selftest.SevFail
		}
		j.add(sev, "nccl.transport", "nccl", fmt.Sprintf("NCCL ran over %d ranks but its log (%s) names no channel connection: the transports are unknown", n.Ranks, orDefault(n.LogFile, "NCCL_DEBUG_FILE")),
			"transports=0 ranks="+fmt.Sprint(n.Ranks), "p2pcheck runs NCCL with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,P2P,SHM; check that the log file is writable and that this NCCL prints \"Channel ... via\" lines")
	}
	j.transports(n)
}

// transports reports every GPU pair with a channel NCCL did not connect through P2P.
func (j *judge) transports(n *selftest.NCCL) {
	type agg struct {
		a, b     int
		channels []int
		vias     []string
	}
	var order []*agg
	byPair := map[[2]int]*agg{}
	for _, t := range n.Transports {
		if t.P2P || t.From == t.To {
			continue
		}
		a, b := j.r.GPUIndex(t.From), j.r.GPUIndex(t.To)
		if a > b {
			a, b = b, a
		}
		g := byPair[[2]int{a, b}]
		if g == nil {
			g = &agg{a: a, b: b}
			byPair[[2]int{a, b}] = g
			order = append(order, g)
		}
		g.channels = append(g.channels, t.Channel)
		if !contains(g.vias, t.Via) {
			g.vias = append(g.vias, t.Via)
		}
	}
	sev := selftest.SevWarn
	if j.e != nil && j.e.RequireP2P {
		sev = selftest.SevFail
	} else if j.e != nil && j.e.P2P == P2POff {
		sev = selftest.SevInfo
	}
	for _, g := range order {
		topo := j.r.PairTopology(g.a, g.b)
		level, set := j.ncclEnv("NCCL_P2P_LEVEL")
		var hint string
		switch {
		case isTrue(j.envOr("NCCL_P2P_DISABLE")):
			hint = "NCCL_P2P_DISABLE is set: remove it from the recipe's env"
		case topo != "" && selftest.TopoRank(topo) > selftest.TopoRank(selftest.TopoPXB) && !(set && ncclCovers(level, topo)):
			hint = fmt.Sprintf("set NCCL_P2P_LEVEL=SYS: the pair is %s, beyond NCCL's default level PXB", topo)
			if set {
				hint = fmt.Sprintf("set NCCL_P2P_LEVEL=SYS: the pair is %s, beyond NCCL_P2P_LEVEL=%s", topo, level)
			} else if v, ok := j.recipeEnv("NCCL_P2P_LEVEL"); ok && j.r.NCCL.Env != nil {
				hint = fmt.Sprintf("the recipe sets NCCL_P2P_LEVEL=%s but NCCL ran without it: check the env reaches p2pcheck", v)
			}
		default:
			hint = "NCCL takes P2P only where NVML reports P2P OK for read and write: check p2p.status for this pair"
		}
		p := j.r.PairOf(g.a, g.b)
		ev := fmt.Sprintf("channels %v via %s; topology %s", g.channels, strings.Join(g.vias, ", "), orDefault(topo, "?"))
		if p != nil && (p.P2PRead != "" || p.P2PWrite != "") {
			ev += fmt.Sprintf("; nvml p2p r=%s w=%s", orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?"))
		}
		if set {
			ev += "; NCCL_P2P_LEVEL=" + level
		}
		j.add(sev, "nccl.transport", pairSubject(g.a, g.b), fmt.Sprintf("%s-%s: NCCL connected %d channel(s) via %s, not P2P", j.gpuLabel(g.a), j.gpuLabel(g.b), len(g.channels), strings.Join(g.vias, ", ")), ev, hint)
	}
}

func (j *judge) recipeEnv(key string) (string, bool) {
	if j.e == nil {
		return "", false
	}
	v, ok := j.e.Env[key]
	return v, ok
}

func (j *judge) envOr(key string) string {
	v, _ := j.ncclEnv(key)
	return v
}

func isTrue(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && v != "0"
}
