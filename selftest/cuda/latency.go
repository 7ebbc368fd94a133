package cuda

import (
	"context"
	"errors"
	"fmt"

	"github.com/peerboot/peerboot/selftest"
)

// LatencyBytes is the size of one timed write: one 16-byte vector, the smallest copy
// cuda-samples' p2pBandwidthLatencyTest times (selftest.md §1.1).
const LatencyBytes = 16

// latencies measures the write latency of every GPU locally and of every ordered pair
// with peer access, the way p2pBandwidthLatencyTest does: the spin kernel holds the
// issuing GPU's stream while the start event, LatencyWrites copies of 16 bytes and
// the stop event are queued; once released, the events time the writes back to back
// on the GPU, and one sample is that time over the count. The median of
// LatencySamples samples is reported. Pairs without peer access are not tried (the
// copies already report them), so a driver that mis-answers cannot stall here.
func (e *engine) latencies(ctx context.Context) error {
	for g := 0; g < e.n; g++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("latency stopped before GPU %d: %w", g, err)
		}
		e.r.Latencies = append(e.r.Latencies, e.latency(g, g))
	}
	for i := 0; i < e.n; i++ {
		for j := i + 1; j < e.n; j++ {
			if !e.r.CanAccess[i][j] || !e.r.CanAccess[j][i] {
				continue
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("latency stopped before GPU pair %d-%d: %w", i, j, err)
			}
			if err := errors.Join(e.d.EnablePeer(i, j), e.d.EnablePeer(j, i)); err != nil {
				// The copies of this pair already carry the refusal.
				_ = errors.Join(e.d.DisablePeer(i, j), e.d.DisablePeer(j, i))
				continue
			}
			e.r.Latencies = append(e.r.Latencies, e.latency(i, j), e.latency(j, i))
			if err := errors.Join(e.d.DisablePeer(i, j), e.d.DisablePeer(j, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// latency measures writes from src's source buffer into dst's destination buffer,
// issued on src (a peer write when src != dst), and checks that the 16 bytes arrived.
func (e *engine) latency(src, dst int) selftest.Latency {
	l := selftest.Latency{Src: src, Dst: dst, Direction: selftest.DirWrite, Bytes: LatencyBytes, Writes: e.o.LatencyWrites, Samples: []float64{}}
	if src == dst {
		l.Direction = selftest.DirLocal
	}
	if err := e.measureLatency(&l); err != nil {
		l.Error = err.Error()
	}
	return l
}

func (e *engine) measureLatency(l *selftest.Latency) error {
	from, to := e.gpus[l.Src].src, e.gpus[l.Dst].dst
	// The destination's first words get the inverse of what the writes bring, so a
	// write that went elsewhere shows.
	words := LatencyBytes / 4
	want := make([]uint32, words)
	stale := make([]uint32, words)
	for i := range want {
		want[i] = Pattern(uint64(i), e.srcSeed(l.Src))
		stale[i] = ^want[i]
	}
	if err := e.d.WriteWords(l.Dst, to, stale); err != nil {
		return err
	}
	for s := 0; s < e.o.LatencySamples; s++ {
		us, err := e.latencySample(l.Src, to, from)
		if err != nil {
			return err
		}
		l.Samples = append(l.Samples, us)
	}
	l.US = Median(l.Samples)
	got, err := e.d.ReadWords(l.Dst, to, words)
	if err != nil {
		return err
	}
	for i := range want {
		if got[i] != want[i] {
			bad := int64(0)
			for k := range want {
				if got[k] != want[k] {
					bad++
				}
			}
			l.Mismatch = &selftest.Mismatch{Offset: int64(4 * i), Want: want[i], Got: got[i], Words: bad}
			break
		}
	}
	l.Verified = l.Mismatch == nil
	return nil
}

// latencySample is one gated run of LatencyWrites copies on the issuer's stream; it
// returns microseconds per write.
func (e *engine) latencySample(issuer int, dst, src Ptr) (float64, error) {
	g := e.gpus[issuer]
	e.flag.Set(0)
	released := false
	release := func() {
		if !released {
			e.flag.Set(1)
			released = true
		}
	}
	defer release()
	if err := e.d.Spin(issuer, g.stream, e.flag, e.spinClocks[issuer]); err != nil {
		return 0, err
	}
	if err := e.d.Record(issuer, g.start, g.stream); err != nil {
		return 0, err
	}
	for k := 0; k < e.o.LatencyWrites; k++ {
		if err := e.d.CopyAsync(issuer, dst, src, LatencyBytes, g.stream); err != nil {
			return 0, err
		}
	}
	if err := e.d.Record(issuer, g.stop, g.stream); err != nil {
		return 0, err
	}
	release()
	ms, err := e.d.Elapsed(issuer, g.start, g.stop)
	if err != nil {
		return 0, err
	}
	if e.flag.TimedOut() {
		e.r.Notes = append(e.r.Notes, fmt.Sprintf("spin kernel timed out after %s while latency writes were enqueued; that sample includes enqueue time", e.o.SpinTimeout))
	}
	return ms * 1e3 / float64(e.o.LatencyWrites), nil
}
