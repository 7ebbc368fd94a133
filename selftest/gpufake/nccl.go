package gpufake

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/peerboot/peerboot/selftest/cuda"
)

// ncclResult_t values (nccl.h).
const (
	ncclSuccess         = 0
	ncclSystemError     = 2
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
)

type ncclState struct {
	comms   map[uintptr]int // comm -> rank
	ranks   int
	group   int
	pending []pendingReduce
}

type pendingReduce struct {
	rank      int
	send, rcv uint64
	count     uint64
	st        *stream
}

// NCCL is the box's FAKE libnccl. It shares the box's device memory and streams with
// the FAKE libcuda, as libnccl shares libcuda's.
func (b *FakeBox) NCCL() *FakeLibrary {
	return &FakeLibrary{name: NCCLName, syms: map[string]any{
		"ncclGetVersion":     b.ncclGetVersion,
		"ncclCommInitAll":    b.ncclCommInitAll,
		"ncclCommDestroy":    b.ncclCommDestroy,
		"ncclGroupStart":     b.ncclGroupStart,
		"ncclGroupEnd":       b.ncclGroupEnd,
		"ncclAllReduce":      b.ncclAllReduce,
		"ncclGetErrorString": b.ncclGetErrorString,
		"ncclGetLastError":   func(uintptr) string { return b.cfg.NCCLLastError },
	}}
}

func (b *FakeBox) ncclGetVersion(v *int32) int32 {
	if rc := b.fault("ncclGetVersion"); rc != 0 {
		return rc
	}
	*v = int32(b.cfg.NCCLVersion)
	return 0
}

// DefaultNCCLLog is what a single-process NCCL with P2P on logs for a ring over n
// ranks (one channel each way), in libnccl's own line format.
func DefaultNCCLLog(n int) []string {
	var out []string
	for r := 0; r < n && n > 1; r++ {
		next := (r + 1) % n
		out = append(out, fmt.Sprintf("fakehost:4242:4243 [%d] NCCL INFO Channel 00/0 : %d[%d] -> %d[%d] via P2P/direct pointer", r, r, r, next, next))
		out = append(out, fmt.Sprintf("fakehost:4242:4243 [%d] NCCL INFO Channel 01/0 : %d[%d] -> %d[%d] via P2P/direct pointer", next, next, next, r, r))
	}
	return out
}

func (b *FakeBox) ncclCommInitAll(comms *uintptr, ndev int32, devlist *int32) int32 {
	if rc := b.fault("ncclCommInitAll"); rc != 0 {
		return rc
	}
	if !b.inited || ndev <= 0 || int(ndev) > len(b.cfg.GPUs) {
		return ncclInvalidArgument
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		return ncclSystemError // as libnccl's init does
	}
	lines := b.cfg.NCCLLog
	if lines == nil {
		lines = DefaultNCCLLog(int(ndev))
	}
	if path := os.Getenv("NCCL_DEBUG_FILE"); path != "" && os.Getenv("NCCL_DEBUG") == "INFO" {
		head := fmt.Sprintf("fakehost:4242:4243 [0] NCCL INFO NCCL version %d.%d.%d+FAKE", b.cfg.NCCLVersion/10000, b.cfg.NCCLVersion/100%100, b.cfg.NCCLVersion%100)
		text := head + "\n" + strings.Join(lines, "\n") + "\nfakehost:4242:4243 [0] NCCL INFO ncclCommInitAll COMPLETE\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return ncclSystemError
		}
	}
	b.nccl = &ncclState{comms: map[uintptr]int{}, ranks: int(ndev)}
	out := unsafe.Slice(comms, int(ndev))
	var devs []int32
	if devlist != nil {
		devs = unsafe.Slice(devlist, int(ndev))
	}
	for r := range out {
		if devs != nil && int(devs[r]) != r {
			return ncclInvalidUsage // the self-test passes 0..n-1; nothing else is emulated
		}
		h := b.newHandle()
		b.nccl.comms[h] = r
		out[r] = h
	}
	return 0
}

func (b *FakeBox) ncclCommDestroy(comm uintptr) int32 {
	if rc := b.fault("ncclCommDestroy"); rc != 0 {
		return rc
	}
	if b.nccl == nil {
		return ncclInvalidArgument
	}
	if _, ok := b.nccl.comms[comm]; !ok {
		return ncclInvalidArgument
	}
	delete(b.nccl.comms, comm)
	return 0
}

func (b *FakeBox) ncclGroupStart() int32 {
	if rc := b.fault("ncclGroupStart"); rc != 0 {
		return rc
	}
	if b.nccl == nil {
		return ncclInvalidUsage
	}
	b.nccl.group++
	return 0
}

func (b *FakeBox) ncclGroupEnd() int32 {
	if rc := b.fault("ncclGroupEnd"); rc != 0 {
		return rc
	}
	if b.nccl == nil || b.nccl.group == 0 {
		return ncclInvalidUsage
	}
	b.nccl.group--
	if b.nccl.group == 0 {
		return b.reduce()
	}
	return 0
}

func (b *FakeBox) ncclAllReduce(send, recv cuda.Ptr, count uintptr, dtype, op int32, comm uintptr, s cuda.Stream) int32 {
	if rc := b.fault("ncclAllReduce"); rc != 0 {
		return rc
	}
	if b.nccl == nil {
		return ncclInvalidArgument
	}
	r, ok := b.nccl.comms[comm]
	st, sok := b.streams[uintptr(s)]
	if !ok || !sok || st.gpu != r {
		return ncclInvalidArgument
	}
	if dtype != 2 || op != 0 { // ncclInt32, ncclSum: all the self-test uses
		return ncclInvalidArgument
	}
	if b.span(uint64(send), 4*uint64(count)) == nil || b.span(uint64(recv), 4*uint64(count)) == nil {
		return ncclInvalidArgument
	}
	b.nccl.pending = append(b.nccl.pending, pendingReduce{rank: r, send: uint64(send), rcv: uint64(recv), count: uint64(count), st: st})
	if b.nccl.group == 0 {
		return b.reduce()
	}
	return 0
}

// reduce runs the collective once every rank has enqueued its part: each rank's
// stream is drained first (its input was produced there), then the sums are written
// and the sum faults applied.
func (b *FakeBox) reduce() int32 {
	p := b.nccl.pending
	if len(p) < b.nccl.ranks {
		return 0
	}
	b.nccl.pending = nil
	count := p[0].count
	for _, x := range p {
		if x.count != count {
			return ncclInvalidArgument
		}
		if rc := b.flush(x.st); rc != 0 {
			return 1 // ncclUnhandledCudaError
		}
	}
	sum := make([]uint32, count)
	for _, x := range p {
		for i := range sum {
			sum[i] += b.readWord(x.rank, x.send+4*uint64(i))
		}
	}
	// The time that makes busbw = NCCLBusGBps: algbw = busbw / (2(n-1)/n).
	alg := b.cfg.NCCLBusGBps
	if n := len(p); n > 1 {
		alg /= 2 * float64(n-1) / float64(n)
	}
	dt := 4 * float64(count) / (alg * 1e9)
	for _, x := range p {
		for i, v := range sum {
			b.writeWord(x.rank, x.rcv+4*uint64(i), v)
		}
		for _, f := range b.cfg.Faults {
			if f.Kind != FaultSum || f.Rank != x.rank {
				continue
			}
			n := max(f.Count, 1)
			for i := f.Elem; i < f.Elem+n && uint64(i) < count; i++ {
				a := x.rcv + 4*uint64(i)
				b.writeWord(x.rank, a, b.readWord(x.rank, a)+1)
			}
		}
		x.st.clock += dt
	}
	return 0
}

// Now is the box's virtual host clock: the time of its furthest stream. Work runs when
// the host waits for it, so after a synchronize this is when the host would be
// released; pass it as nccl.Options.Clock.
func (b *FakeBox) Now() time.Time {
	var t float64
	for _, s := range b.streams {
		t = max(t, s.clock)
	}
	return time.Unix(0, 0).Add(time.Duration(t * 1e9))
}

var ncclErrors = map[int32]string{
	0: "no error", 1: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
	2: "unhandled system error (run with NCCL_DEBUG=INFO for details)",
	3: "internal error - please report this issue to the NCCL developers",
	4: "invalid argument (run with NCCL_DEBUG=WARN for details)",
	5: "invalid usage (run with NCCL_DEBUG=WARN for details)",
	6: "remote process exited or there was a network error", 7: "NCCL operation in progress",
}

func (b *FakeBox) ncclGetErrorString(rc int32) string {
	if s, ok := ncclErrors[rc]; ok {
		return s
	}
	return "unknown result code"
}
