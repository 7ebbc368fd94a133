package cuda

import (
	"context"
	"errors"
	"fmt"

	"github.com/peerboot/peerboot/selftest"
)

// engine holds the copy phase's per-GPU resources: a source and a destination
// buffer, a non-blocking stream and two timing events each, and one host flag that
// gates every stream's start.
type engine struct {
	d     *Driver
	o     Options
	r     *Result
	n     int
	words int64
	gpus  []gpuRes
	flag  *HostFlag
	// spinClocks is the gate's timeout in each GPU's clocks.
	spinClocks []uint64
	corrupted  bool
}

type gpuRes struct {
	src, dst    Ptr
	stream      Stream
	start, stop Event
}

func newEngine(d *Driver, o Options, r *Result, n int) (*engine, error) {
	e := &engine{d: d, o: o, r: r, n: n, words: o.CopyBytes / 4, gpus: make([]gpuRes, n), spinClocks: make([]uint64, n)}
	fail := func(err error) (*engine, error) {
		return nil, errors.Join(err, e.free())
	}
	var err error
	if e.flag, err = d.NewHostFlag(0); err != nil {
		return fail(err)
	}
	for i := range e.gpus {
		g := &e.gpus[i]
		khz, err := d.ClockKHz(i)
		if err != nil {
			return fail(err)
		}
		e.spinClocks[i] = uint64(khz) * 1000 * uint64(o.SpinTimeout.Milliseconds()) / 1000
		if g.stream, err = d.NewStream(i); err != nil {
			return fail(err)
		}
		if g.start, err = d.NewEvent(i); err != nil {
			return fail(err)
		}
		if g.stop, err = d.NewEvent(i); err != nil {
			return fail(err)
		}
		if g.src, err = d.Alloc(i, o.CopyBytes); err != nil {
			return fail(err)
		}
		if g.dst, err = d.Alloc(i, o.CopyBytes); err != nil {
			return fail(err)
		}
		// Sources keep their pattern for the whole phase: copies only read them.
		if err := d.Fill(i, g.stream, g.src, e.words, e.srcSeed(i)); err != nil {
			return fail(err)
		}
	}
	for i := range e.gpus {
		if err := d.StreamSync(i, e.gpus[i].stream); err != nil {
			return fail(err)
		}
	}
	return e, nil
}

// free releases everything newEngine made; safe on a half-built engine.
func (e *engine) free() error {
	var errs []error
	for i := range e.gpus {
		g := &e.gpus[i]
		if g.stream != 0 {
			errs = append(errs, e.d.StreamSync(i, g.stream))
		}
		errs = append(errs,
			e.d.Free(i, g.src), e.d.Free(i, g.dst),
			e.d.DestroyEvent(g.start), e.d.DestroyEvent(g.stop),
			e.d.DestroyStream(i, g.stream))
		*g = gpuRes{}
	}
	if e.flag != nil {
		errs = append(errs, e.flag.Free())
		e.flag = nil
	}
	return errors.Join(errs...)
}

// leg is one stream of copies: issued on GPU issuer, from srcGPU's source buffer to
// dstGPU's destination buffer.
type leg struct {
	issuer, srcGPU, dstGPU int
	sm                     bool
}

func (e *engine) legSrc(l leg) Ptr { return e.gpus[l.srcGPU].src }
func (e *engine) legDst(l leg) Ptr { return e.gpus[l.dstGPU].dst }

// copies measures every local copy, then every pair with peer access: peer access
// is enabled both ways for the pair and disabled after it, so only one pair's
// mappings exist at a time (selftest.md §0 item 4).
func (e *engine) copies(ctx context.Context) error {
	methods := []bool{false}
	if e.o.SM {
		methods = append(methods, true)
	}
	for g := 0; g < e.n; g++ {
		for _, sm := range methods {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("copy phase stopped before the local copy on GPU %d: %w", g, err)
			}
			e.add(g, g, selftest.DirLocal, []leg{{issuer: g, srcGPU: g, dstGPU: g, sm: sm}})
		}
	}
	for i := 0; i < e.n; i++ {
		for j := i + 1; j < e.n; j++ {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("copy phase stopped before GPU pair %d-%d: %w", i, j, err)
			}
			if !e.r.CanAccess[i][j] || !e.r.CanAccess[j][i] {
				for _, p := range [][2]int{{i, j}, {j, i}} {
					e.r.Copies = append(e.r.Copies, selftest.Copy{
						Src: p[0], Dst: p[1], Method: selftest.MethodCE, Direction: selftest.DirWrite,
						Bytes: e.o.CopyBytes, Samples: []float64{}, LinkGBps: e.link(p[0], p[1]),
						Error: "peer access unavailable: " + peerRefusal(e.r.CanAccess, p[0], p[1]),
					})
				}
				continue
			}
			errOn := errors.Join(e.d.EnablePeer(i, j), e.d.EnablePeer(j, i))
			if errOn != nil {
				name := "CUresult unknown"
				if c := Code(errOn); c >= 0 {
					name = e.d.Status(c).Name
				}
				for _, p := range [][2]int{{i, j}, {j, i}} {
					e.r.Copies = append(e.r.Copies, selftest.Copy{
						Src: p[0], Dst: p[1], Method: selftest.MethodCE, Direction: selftest.DirWrite,
						Bytes: e.o.CopyBytes, Samples: []float64{}, LinkGBps: e.link(p[0], p[1]),
						Error: "peer access unavailable: " + name + " (" + errOn.Error() + ")",
					})
				}
				_ = errors.Join(e.d.DisablePeer(i, j), e.d.DisablePeer(j, i))
				continue
			}
			for _, p := range [][2]int{{i, j}, {j, i}} {
				a, b := p[0], p[1]
				for _, sm := range methods {
					if err := ctx.Err(); err != nil {
						err = fmt.Errorf("copy phase stopped during GPU pair %d-%d: %w", i, j, err)
						return errors.Join(err, e.d.DisablePeer(i, j), e.d.DisablePeer(j, i))
					}
					e.add(a, b, selftest.DirWrite, []leg{{issuer: a, srcGPU: a, dstGPU: b, sm: sm}})
					e.add(a, b, selftest.DirRead, []leg{{issuer: b, srcGPU: a, dstGPU: b, sm: sm}})
					if e.o.Bidir && !sm {
						e.add(a, b, selftest.DirBidir, []leg{
							{issuer: a, srcGPU: a, dstGPU: b},
							{issuer: b, srcGPU: b, dstGPU: a},
						})
					}
				}
			}
			if err := errors.Join(e.d.DisablePeer(i, j), e.d.DisablePeer(j, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// peerRefusal names why a pair has no peer access: cuDeviceCanAccessPeer answered 0
// in the named direction, which cuCtxEnablePeerAccess would refuse with
// CUDA_ERROR_PEER_ACCESS_UNSUPPORTED. The pair is not tried, so a patched driver that
// mis-answers cannot take the phase down.
func peerRefusal(can [][]bool, a, b int) string {
	dir := fmt.Sprintf("%d->%d", a, b)
	if can[a][b] {
		dir = fmt.Sprintf("%d->%d", b, a)
	}
	return fmt.Sprintf("CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (cuDeviceCanAccessPeer(%s) = 0)", dir)
}

func (e *engine) link(a, b int) float64 {
	if a == b || e.o.LinkGBps == nil {
		return 0
	}
	return e.o.LinkGBps(a, b)
}

// add measures one copy and appends it to the result.
func (e *engine) add(src, dst int, dir string, legs []leg) {
	c := selftest.Copy{
		Src: src, Dst: dst, Method: selftest.MethodCE, Direction: dir,
		Bytes: e.o.CopyBytes, Samples: []float64{}, LinkGBps: e.link(src, dst),
	}
	if legs[0].sm {
		c.Method = selftest.MethodSM
	}
	if err := e.measure(&c, legs); err != nil {
		c.Error = err.Error()
	}
	e.r.Copies = append(e.r.Copies, c)
}

// measure fills the destinations, times the copies, and verifies.
func (e *engine) measure(c *selftest.Copy, legs []leg) error {
	// 1. Destinations get a pattern of their own, so a copy that did nothing fails.
	for _, l := range legs {
		if err := e.d.Fill(l.dstGPU, e.gpus[l.dstGPU].stream, e.legDst(l), e.words, seedDst); err != nil {
			return err
		}
		if err := e.d.StreamSync(l.dstGPU, e.gpus[l.dstGPU].stream); err != nil {
			return err
		}
	}
	// 2. Samples; bidirectional copies report the sum of both directions.
	for s := 0; s < e.o.Samples; s++ {
		per, err := e.sample(legs)
		if err != nil {
			return err
		}
		sum := 0.0
		for _, v := range per {
			sum += v
		}
		c.Samples = append(c.Samples, sum)
	}
	c.GBps = Median(c.Samples)
	// 3. The test hook: break the first eligible destination on purpose.
	if e.o.CorruptOnce && !e.corrupted && (c.Direction != selftest.DirLocal || e.n == 1) {
		if err := e.corrupt(c, legs[0]); err != nil {
			return err
		}
	}
	if !e.o.Verify {
		return nil
	}
	// 4. Verify every destination against its source's pattern, on the GPU holding it.
	for _, l := range legs {
		g := l.dstGPU
		v, err := e.d.Verify(g, e.gpus[g].stream, e.legDst(l), e.words, e.srcSeed(l.srcGPU))
		if err != nil {
			return err
		}
		if v.Wrong > 0 {
			mm, err := e.mismatch(g, e.legDst(l), v, e.srcSeed(l.srcGPU))
			if err != nil {
				return err
			}
			if c.Mismatch == nil {
				c.Mismatch = mm
			} else {
				c.Mismatch.Words += mm.Words
			}
		}
	}
	// Verified means checked and intact; a mismatch is the check's other answer.
	c.Verified = c.Mismatch == nil
	return nil
}

// mismatch reads the first bad word back for the report.
func (e *engine) mismatch(gpu int, p Ptr, v Verification, seed uint32) (*selftest.Mismatch, error) {
	got, err := e.d.ReadWords(gpu, p+Ptr(4*v.FirstBad), 1)
	if err != nil {
		return nil, err
	}
	return &selftest.Mismatch{Offset: 4 * v.FirstBad, Want: Pattern(uint64(v.FirstBad), seed), Got: got[0], Words: v.Wrong}, nil
}

// corrupt inverts one word in the middle of the leg's destination.
func (e *engine) corrupt(c *selftest.Copy, l leg) error {
	idx := e.words/2 + 7
	if idx >= e.words {
		idx = e.words - 1
	}
	p := e.legDst(l) + Ptr(4*idx)
	w, err := e.d.ReadWords(l.dstGPU, p, 1)
	if err != nil {
		return err
	}
	if err := e.d.WriteWords(l.dstGPU, p, []uint32{^w[0]}); err != nil {
		return err
	}
	e.corrupted = true
	e.r.Injected = fmt.Sprintf("CorruptOnce test hook: after the %s %s copy GPU %d -> GPU %d, the word at byte offset %d of GPU %d's destination was inverted on purpose (0x%08x -> 0x%08x); verification must report it as a mismatch",
		c.Method, c.Direction, c.Src, c.Dst, 4*idx, l.dstGPU, w[0], ^w[0])
	return nil
}

// sample runs one timed sample of all legs at once and returns each leg's GB/s.
//
// Every issuing stream first gets the spin kernel, then Warmup copies, the start
// event, Loops copies and the stop event. Only then is the host flag set, so all
// streams start together and the time to enqueue is not measured.
func (e *engine) sample(legs []leg) ([]float64, error) {
	e.flag.Set(0)
	released := false
	release := func() {
		if !released {
			e.flag.Set(1)
			released = true
		}
	}
	defer release()
	enqueue := func(l leg) error {
		g := e.gpus[l.issuer]
		if l.sm {
			return e.d.CopySM(l.issuer, g.stream, e.legDst(l), e.legSrc(l), e.o.CopyBytes)
		}
		return e.d.CopyAsync(l.issuer, e.legDst(l), e.legSrc(l), e.o.CopyBytes, g.stream)
	}
	for _, l := range legs {
		g := e.gpus[l.issuer]
		if err := e.d.Spin(l.issuer, g.stream, e.flag, e.spinClocks[l.issuer]); err != nil {
			return nil, err
		}
	}
	for _, l := range legs {
		for k := 0; k < e.o.Warmup; k++ {
			if err := enqueue(l); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range legs {
		if err := e.d.Record(l.issuer, e.gpus[l.issuer].start, e.gpus[l.issuer].stream); err != nil {
			return nil, err
		}
	}
	for _, l := range legs {
		for k := 0; k < e.o.Loops; k++ {
			if err := enqueue(l); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range legs {
		if err := e.d.Record(l.issuer, e.gpus[l.issuer].stop, e.gpus[l.issuer].stream); err != nil {
			return nil, err
		}
	}
	release()
	out := make([]float64, len(legs))
	for i, l := range legs {
		g := e.gpus[l.issuer]
		ms, err := e.d.Elapsed(l.issuer, g.start, g.stop)
		if err != nil {
			return nil, err
		}
		out[i] = GBps(e.o.CopyBytes, e.o.Loops, ms)
	}
	if e.flag.TimedOut() {
		e.r.Notes = append(e.r.Notes, fmt.Sprintf("spin kernel timed out after %s while copies were enqueued; that sample includes enqueue time", e.o.SpinTimeout))
	}
	return out, nil
}
