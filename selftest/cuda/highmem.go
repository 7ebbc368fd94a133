package cuda

import (
	"errors"
	"fmt"

	"github.com/peerboot/peerboot/selftest"
)

const (
	highMemMargin = 1 << 30 // left free beside ballast and buffer: contexts, peer mappings
	highMemAlign  = 2 << 20
	seedHigh      = 0x5EED4B1D
)

// highMem places a buffer above ballast of about the BAR1 size on t.Ordinal, frees
// the ballast, and only then enables peer access and copies into and out of the
// buffer from a peer (or, with no peer, from the same GPU), verifying both
// directions. The order keeps peer mappings small while the card holds the ballast
// (selftest.md §0 item 4, §8).
func (e *engine) highMem(t HighMemTarget) selftest.HighMem {
	g := t.Ordinal
	h := selftest.HighMem{GPU: g, Peer: -1, BAR1Bytes: t.BAR1, VRAMBytes: t.VRAM}
	if g < 0 || g >= e.n {
		h.Error = fmt.Sprintf("GPU %d is not a CUDA ordinal (%d devices)", g, e.n)
		return h
	}
	for p := 0; p < e.n; p++ {
		if p != g && e.r.CanAccess[g][p] && e.r.CanAccess[p][g] {
			h.Peer = p
			break
		}
	}
	other := g // the GPU that issues the copies and holds their other end
	if h.Peer >= 0 {
		other = h.Peer
	}
	v, err := e.highMemRun(&h, g, other)
	if err != nil {
		h.Error = err.Error()
	}
	h.Verified = v && h.Mismatch == nil
	return h
}

func (e *engine) highMemRun(h *selftest.HighMem, g, other int) (verified bool, err error) {
	d, bytes, words := e.d, e.o.CopyBytes, e.o.CopyBytes/4
	var stream, gStream Stream
	var src, dst, buf, ballast Ptr
	peerOn := false
	defer func() {
		errs := []error{err}
		if stream != 0 {
			errs = append(errs, d.StreamSync(other, stream))
		}
		if gStream != 0 {
			errs = append(errs, d.StreamSync(g, gStream))
		}
		if peerOn {
			errs = append(errs, d.DisablePeer(g, other), d.DisablePeer(other, g))
		}
		errs = append(errs, d.Free(g, ballast), d.Free(g, buf), d.Free(other, src), d.Free(other, dst),
			d.DestroyStream(other, stream))
		if gStream != stream {
			errs = append(errs, d.DestroyStream(g, gStream))
		}
		err = errors.Join(errs...)
	}()

	// 1. The other end's buffers first, so they sit low.
	if stream, err = d.NewStream(other); err != nil {
		return false, err
	}
	gStream = stream
	if other != g {
		if gStream, err = d.NewStream(g); err != nil {
			return false, err
		}
	}
	if src, err = d.Alloc(other, bytes); err != nil {
		return false, err
	}
	if dst, err = d.Alloc(other, bytes); err != nil {
		return false, err
	}

	// 2. Ballast of about the BAR1 size, bounded by what is free.
	if h.BAR1Bytes <= 0 {
		return false, fmt.Errorf("GPU %d: BAR1 size unknown, no ballast size to aim for", g)
	}
	free, _, err := d.MemInfo(g)
	if err != nil {
		return false, err
	}
	size := min(h.BAR1Bytes, free-bytes-highMemMargin) / highMemAlign * highMemAlign
	if size <= 0 {
		return false, fmt.Errorf("GPU %d has %s free: no room for ballast below a %s buffer", g, Size(free/highMemAlign*highMemAlign), Size(bytes))
	}
	if ballast, err = d.Alloc(g, size); err != nil {
		return false, err
	}
	h.BallastMiB = size >> 20

	// 3. The test buffer above it; then the ballast goes.
	if buf, err = d.Alloc(g, bytes); err != nil {
		return false, err
	}
	h.BufferVA = fmt.Sprintf("0x%x", uint64(buf))
	if err = d.Free(g, ballast); err != nil {
		return false, err
	}
	ballast = 0
	h.Guarantee = fmt.Sprintf("the buffer was allocated after %d MiB of ballast (BAR1 is %s) and the ballast was freed before peer access was enabled; "+
		"this makes a physical placement above the BAR1 size likely, but the driver does not promise where it puts memory and BufferVA is a virtual address, "+
		"so a pass shows high memory works only as far as the placement went", h.BallastMiB, Size(h.BAR1Bytes))
	if other == g {
		h.Guarantee += "; with one GPU the copies were local, so no peer path was exercised"
	}

	// 4. Peer access, now that the ballast is gone.
	if other != g {
		peerOn = true
		if err = errors.Join(d.EnablePeer(g, other), d.EnablePeer(other, g)); err != nil {
			return false, err
		}
	}

	// 5. Into the buffer: other's source -> buf, issued on other (a peer write).
	seed := seedHigh ^ uint32(other)
	if err = d.Fill(other, stream, src, words, seed); err != nil {
		return false, err
	}
	if err = d.Fill(g, gStream, buf, words, seedDst); err != nil {
		return false, err
	}
	if err = errors.Join(d.StreamSync(other, stream), d.StreamSync(g, gStream)); err != nil {
		return false, err
	}
	if err = d.CopyAsync(other, buf, src, bytes, stream); err != nil {
		return false, err
	}
	if err = d.StreamSync(other, stream); err != nil {
		return false, err
	}
	vIn, err := d.Verify(g, gStream, buf, words, seed)
	if err != nil {
		return false, err
	}
	if vIn.Wrong > 0 {
		if h.Mismatch, err = e.mismatch(g, buf, vIn, seed); err != nil {
			return false, err
		}
	}

	// 6. Out of the buffer: buf -> other's destination, issued on other (a peer read).
	if err = d.Fill(other, stream, dst, words, seedDst); err != nil {
		return false, err
	}
	if err = d.CopyAsync(other, dst, buf, bytes, stream); err != nil {
		return false, err
	}
	if err = d.StreamSync(other, stream); err != nil {
		return false, err
	}
	vOut, err := d.Verify(other, stream, dst, words, seed)
	if err != nil {
		return false, err
	}
	if vOut.Wrong > 0 {
		// A bad buffer also spoils the copy out; the first report is the informative one.
		mm, err := e.mismatch(other, dst, vOut, seed)
		if err != nil {
			return false, err
		}
		if h.Mismatch == nil {
			h.Mismatch = mm
		}
	}
	return true, nil
}
