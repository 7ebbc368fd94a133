package selftest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
)

// ErrNotJSON is wrapped by Decode's errors for input that is not one JSON value
// (serve answers 400 for it, 422 for a JSON value that is no valid report).
var ErrNotJSON = errors.New("not JSON")

// PosError is a decoding error at a place in the input: Line and Col are 1-based.
// Its text starts "line:col: ", so a caller that knows the file name prefixes it the
// way editors jump to ("report.json:19:2: ...").
type PosError struct {
	Line, Col int
	Err       error
}

func (e *PosError) Error() string { return fmt.Sprintf("%d:%d: %v", e.Line, e.Col, e.Err) }
func (e *PosError) Unwrap() error { return e.Err }

// Bounds a report must keep: no box has more GPUs, no link or GPU moves more GB/s.
const (
	MaxGPUs = 64
	maxGBps = 1e4
)

// Validate checks that a report is one p2pcheck could have written: a settled verdict,
// known severities, GPU indexes and ordinals inside the report's GPUs, offsets inside
// their copies, rates inside physics. Every problem is listed (one per line), each
// under the key that holds it ("copies[3].src: 2000, want 0..7"). Decode calls it; so
// every reader of a report — report show, serve's POST, flash reports — refuses the
// same reports.
func Validate(r *Report) error {
	v := &validator{}
	if r.Verdict != Pass && r.Verdict != Fail {
		v.add("verdict", "%q, want \"pass\" or \"fail\"", r.Verdict)
	}
	failed := false
	for i, f := range r.Findings {
		switch f.Status {
		case SevFail:
			failed = true
		case SevWarn, SevInfo:
		default:
			v.add(fmt.Sprintf("findings[%d].status", i), "%q, want \"fail\", \"warn\" or \"info\"", f.Status)
		}
		if f.ID == "" {
			v.add(fmt.Sprintf("findings[%d].id", i), "empty, want a finding id such as \"copy.corrupt\"")
		}
	}
	if failed && r.Verdict == Pass {
		v.add("verdict", "\"pass\" with a fail finding, want \"fail\"")
	}
	n := len(r.GPUs)
	if n > MaxGPUs {
		v.add("gpus", "%d GPUs, want at most %d", n, MaxGPUs)
	}
	// Copies and latencies are between CUDA ordinals; without CUDA's list the GPUs
	// sysfs shows are the ordinals.
	ords := max(n, len(r.CUDA.Devices))
	for i, p := range r.Pairs {
		if p.A < 0 || p.B <= p.A || p.B >= n {
			v.add(fmt.Sprintf("pairs[%d]", i), "GPUs %d and %d, want 0 <= a < b < %d (the report has %d GPUs)", p.A, p.B, n, n)
		}
	}
	for i, d := range r.CUDA.Devices {
		v.index(fmt.Sprintf("cuda.devices[%d].ordinal", i), d.Ordinal, MaxGPUs, "")
	}
	for i := range r.Copies {
		c := &r.Copies[i]
		k := fmt.Sprintf("copies[%d]", i)
		v.ordinal(k+".src", c.Src, ords)
		v.ordinal(k+".dst", c.Dst, ords)
		v.rate(k+".gbps", c.GBps)
		v.rate(k+".link_gbps", c.LinkGBps)
		for s, g := range c.Samples {
			v.rate(fmt.Sprintf("%s.samples[%d]", k, s), g)
		}
		if c.Bytes < 0 {
			v.add(k+".bytes", "%d, want 0 or more", c.Bytes)
		}
		v.mismatch(k+".mismatch", c.Mismatch, c.Bytes)
		v.checked(k, c.Verified, c.Mismatch)
	}
	for i := range r.Latencies {
		l := &r.Latencies[i]
		k := fmt.Sprintf("latencies[%d]", i)
		v.ordinal(k+".src", l.Src, ords)
		v.ordinal(k+".dst", l.Dst, ords)
		if l.Bytes < 0 || l.Writes < 0 || l.US < 0 {
			v.add(k, "bytes %d, writes %d, us %g: want 0 or more", l.Bytes, l.Writes, l.US)
		}
		v.mismatch(k+".mismatch", l.Mismatch, l.Bytes)
		v.checked(k, l.Verified, l.Mismatch)
	}
	for i := range r.HighMem {
		h := &r.HighMem[i]
		k := fmt.Sprintf("high_mem[%d]", i)
		v.ordinal(k+".gpu", h.GPU, ords)
		if h.Peer != -1 {
			v.ordinal(k+".peer", h.Peer, ords)
		}
		if h.BAR1Bytes < 0 || h.VRAMBytes < 0 || h.BallastMiB < 0 {
			v.add(k, "bar1_bytes %d, vram_bytes %d, ballast_mib %d: want 0 or more", h.BAR1Bytes, h.VRAMBytes, h.BallastMiB)
		}
		v.mismatch(k+".mismatch", h.Mismatch, 0)
		v.checked(k, h.Verified, h.Mismatch)
	}
	for i := range r.PeerMem {
		m := &r.PeerMem[i]
		k := fmt.Sprintf("peer_mem[%d]", i)
		v.ordinal(k+".owner", m.Owner, ords)
		v.ordinal(k+".peer", m.Peer, ords)
		switch m.Kind {
		case MemManaged, MemVMM, MemIPC, MemCUDAIPC:
		default:
			v.add(k+".kind", "%q, want managed, vmm, ipc or cudaipc", m.Kind)
		}
		if m.Bytes < 0 {
			v.add(k+".bytes", "%d, want 0 or more", m.Bytes)
		}
		v.mismatch(k+".mismatch", m.Mismatch, m.Bytes)
		v.checked(k, m.Verified, m.Mismatch)
	}
	for i, g := range r.GPUs {
		k := fmt.Sprintf("gpus[%d]", i)
		switch g.P2PMode {
		case "", P2PModeStatic, P2PModeDynamic, P2PModeNone:
		default:
			v.add(k+".p2p_mode", "%q, want static, dynamic, none or empty", g.P2PMode)
		}
		if g.BAR1Bytes < 0 || (g.VRAMBytes != nil && *g.VRAMBytes < 0) {
			v.add(k, "negative BAR1 or VRAM size")
		}
		if b := g.NVML; b != nil && (b.BAR1Total < 0 || b.BAR1Used < 0 || b.FBTotal < 0 || (b.BAR1Total > 0 && b.BAR1Used > b.BAR1Total)) {
			v.add(k+".nvml", "bar1_used %d, bar1_total %d, fb_total %d: want 0 <= used <= total", b.BAR1Used, b.BAR1Total, b.FBTotal)
		}
	}
	for i, b := range r.BAR1 {
		k := fmt.Sprintf("bar1[%d]", i)
		v.indexOrZero(k+".gpu", b.GPU, n, " GPUs")
		for _, u := range []struct {
			what string
			used *int64
		}{{"used_before", &b.UsedBefore}, {"used_after", b.UsedAfter}} {
			if u.used != nil && (*u.used < 0 || (b.Total > 0 && *u.used > b.Total)) {
				v.add(k+"."+u.what, "%d, want 0..%d (total)", *u.used, b.Total)
			}
		}
		if b.Total < 0 {
			v.add(k+".total", "%d, want 0 or more", b.Total)
		}
	}
	if nc := r.NCCL; nc != nil {
		if nc.Ranks < 0 || nc.Ranks > MaxGPUs {
			v.add("nccl.ranks", "%d, want 0..%d", nc.Ranks, MaxGPUs)
		}
		for i, sz := range nc.Sizes {
			if sz.Bytes <= 0 {
				v.add(fmt.Sprintf("nccl.sizes[%d].bytes", i), "%d, want more than 0", sz.Bytes)
			}
			v.rate(fmt.Sprintf("nccl.sizes[%d].busbw", i), sz.BusBW)
			v.rate(fmt.Sprintf("nccl.sizes[%d].algbw", i), sz.AlgBW)
			if sz.Wrong < 0 {
				v.add(fmt.Sprintf("nccl.sizes[%d].wrong", i), "%d, want 0 or more", sz.Wrong)
			}
		}
		v.rate("nccl.busbw_at_max", nc.BusBWAtMax)
		for i, t := range nc.Transports {
			v.indexOrZero(fmt.Sprintf("nccl.transports[%d].from", i), t.From, nc.Ranks, " ranks")
			v.indexOrZero(fmt.Sprintf("nccl.transports[%d].to", i), t.To, nc.Ranks, " ranks")
		}
	}
	for i, d := range r.Durations {
		if d.MS < 0 {
			v.add(fmt.Sprintf("durations[%d].ms", i), "%d, want 0 or more", d.MS)
		}
	}
	if s := r.Stall; s != nil && s.AfterMS < 0 {
		v.add("stall.after_ms", "%d, want 0 or more", s.AfterMS)
	}
	return v.err()
}

// maxProblems bounds the list: a report broken everywhere says so in a screenful.
const maxProblems = 20

type validator struct {
	problems []string
	more     int
}

func (v *validator) add(key, format string, args ...any) {
	if len(v.problems) == maxProblems {
		v.more++
		return
	}
	v.problems = append(v.problems, key+": "+fmt.Sprintf(format, args...))
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	s := strings.Join(v.problems, "\n  ")
	if v.more > 0 {
		s += fmt.Sprintf("\n  ... and %d more", v.more)
	}
	if len(v.problems) == 1 {
		return errors.New("invalid report: " + s)
	}
	return errors.New("invalid report:\n  " + s)
}

// ordinal checks a GPU ordinal against the n the report knows (MaxGPUs when it knows none).
func (v *validator) ordinal(key string, x, n int) {
	if n == 0 {
		v.index(key, x, MaxGPUs, "")
		return
	}
	v.index(key, x, n, " GPUs")
}

func (v *validator) index(key string, x, n int, what string) {
	v.indexIn(key, x, n, n, what)
}

// indexOrZero is index taking ordinal 0 even from a list the report left empty
// (a one-GPU box need not list its GPU); the message says how many it has.
func (v *validator) indexOrZero(key string, x, have int, what string) {
	v.indexIn(key, x, max(have, 1), have, what)
}

func (v *validator) indexIn(key string, x, limit, have int, what string) {
	if x < 0 || x >= limit {
		if what != "" {
			v.add(key, "%d, want 0..%d (the report has %d%s)", x, limit-1, have, what)
		} else {
			v.add(key, "%d, want 0..%d", x, limit-1)
		}
	}
}

func (v *validator) rate(key string, g float64) {
	if g < 0 || g > maxGBps || math.IsNaN(g) {
		v.add(key, "%g GB/s, want 0..%g", g, maxGBps)
	}
}

// mismatch checks a data-check result: a word inside the buffer (bytes 0: size unknown).
func (v *validator) mismatch(key string, m *Mismatch, bytes int64) {
	if m == nil {
		return
	}
	switch {
	case m.Offset < 0 || m.Offset%4 != 0:
		v.add(key+".offset", "%d, want a multiple of 4 from 0", m.Offset)
	case bytes > 0 && m.Offset >= bytes:
		v.add(key+".offset", "%#x, past the end of the %s copy", m.Offset, HumanBytes(bytes))
	}
	if m.Words < 1 || (bytes > 0 && m.Words > bytes/4) {
		v.add(key+".words", "%d, want 1..%d (the words in the buffer)", m.Words, max(bytes/4, 1))
	}
}

// checked refuses a measurement that says verified and corrupt at once.
func (v *validator) checked(key string, verified bool, m *Mismatch) {
	if verified && m != nil {
		v.add(key+".verified", "true with a mismatch, want false: verified means every word matched")
	}
}

// jsonError words encoding/json's errors for a user: position and key, what the
// report wants there, and no Go type names.
func jsonError(b []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		line, col := lineCol(b, syntax.Offset)
		msg := strings.TrimPrefix(syntax.Error(), "json: ")
		return &PosError{line, col, fmt.Errorf("%w: %s", ErrNotJSON, msg)}
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty input", ErrNotJSON)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := lineCol(b, int64(len(b)))
		return &PosError{line, col, fmt.Errorf("%w: the input ends inside a value", ErrNotJSON)}
	case errors.As(err, &typ):
		line, col := lineCol(b, typ.Offset)
		if typ.Field == "" {
			return &PosError{line, col, fmt.Errorf("not a self-test report: want a JSON object, got %s", jsonKind(typ.Value))}
		}
		return &PosError{line, col, fmt.Errorf("%s: want %s, got %s", typ.Field, wantKind(typ.Type), jsonKind(typ.Value))}
	}
	return err
}

// wantKind names what a Go type reads from JSON.
func wantKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number from 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another kind of value"
}

// jsonKind names what encoding/json found ("number", "string", "number -1", ...).
func jsonKind(v string) string {
	switch {
	case v == "object":
		return "an object"
	case v == "array":
		return "a list"
	case strings.HasPrefix(v, "number "):
		return v // "number 1.5": a number that does not fit
	case v == "bool":
		return "true or false"
	}
	return "a " + v
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(b []byte, off int64) (int, int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	if off < 0 {
		off = 0
	}
	pre := b[:off]
	line := bytes.Count(pre, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(pre, '\n')
	return line, col
}
