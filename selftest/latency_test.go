package selftest

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// The subject a latency finding carries (selftest/verdict's rules) names GPUs by their
// index in the report, not by CUDA ordinal, so the console matrix can mark its cell
// and report diff can match it across boots.
func TestLatencySubject(t *testing.T) {
	r := New()
	r.GPUs = []GPU{{BDF: "0000:01:00.0"}, {BDF: "0000:02:00.0"}}
	if got := LatencySubject(r, &Latency{Src: 0, Dst: 1}); got != "GPU0->GPU1 latency" {
		t.Errorf("subject %q", got)
	}
	// CUDA sees only the second GPU, as its ordinal 0.
	r.CUDA.Devices = []CUDADevice{{Ordinal: 0, BDF: "0000:02:00.0"}}
	if got := LatencySubject(r, &Latency{Src: 0, Dst: 0}); got != "GPU1->GPU1 latency" {
		t.Errorf("subject %q", got)
	}
}

// latencyGrid renders r's latency matrix and reads it back: the title and each
// row's cells by GPU ("" for a report without latencies).
func latencyGrid(t *testing.T, r *Report) (string, map[string][]string) {
	t.Helper()
	var b strings.Builder
	renderLatencies(&b, r, 200)
	if b.Len() == 0 {
		return "", nil
	}
	lines := strings.Split(strings.TrimPrefix(b.String(), "\n"), "\n")
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], "GPU") && strings.HasPrefix(l, "  GPU") {
			rows[f[0]] = f[1:]
		}
	}
	if !strings.Contains(b.String(), "legend: diagonal = local write;") {
		t.Errorf("no legend:\n%s", b.String())
	}
	return lines[0], rows
}

// The console's latency matrix: row the writer, column the GPU written to; a write
// that failed reads "error", one whose bytes came back wrong "corrupt", a pair not
// measured "-", and a cell whose measurement has a fail or warn finding is marked "!"
// (an info finding is not). The title gives the write size.
func TestRenderLatencies(t *testing.T) {
	r := New()
	r.GPUs = []GPU{{BDF: "0000:01:00.0"}, {BDF: "0000:02:00.0"}, {BDF: "0000:03:00.0"}}
	r.Latencies = []Latency{
		{Src: 0, Dst: 0, Bytes: 4, US: 2},
		{Src: 0, Dst: 1, Bytes: 4, US: 0.5},
		{Src: 2, Dst: 2, Bytes: 8, US: 1.999},
		{Src: 1, Dst: 0, Bytes: 4, Error: "CUDA_ERROR_LAUNCH_FAILED"},
		{Src: 1, Dst: 1, Bytes: 4, US: 3, Mismatch: &Mismatch{Words: 1}},
		{Src: 2, Dst: 0, Bytes: 4, US: 14.2},
	}
	r.Findings = []Finding{
		{ID: "latency.slow", Status: SevWarn, Subject: "GPU0->GPU1 latency"},
		{ID: "latency.failed", Status: SevFail, Subject: "GPU1->GPU0 latency"},
		{ID: "latency.note", Status: SevInfo, Subject: "GPU2->GPU0 latency"},
		{ID: "no.subject", Status: SevFail},
	}
	title, rows := latencyGrid(t, r)
	if want := "Latency of 8-byte writes, µs (row: writer, column: written to; median)"; title != want {
		t.Errorf("title %q, want %q", title, want)
	}
	want := map[string][]string{
		"GPU0": {"2.00", "0.50!", "-"},
		"GPU1": {"error!", "corrupt", "-"},
		"GPU2": {"14.20", "-", "2.00"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}

	// A report that lists no GPUs still shows every GPU its latencies name.
	r = New()
	r.Latencies = []Latency{{Src: 1, Dst: 0, Bytes: 4, US: 0.6}, {Src: 0, Dst: 2, Bytes: 4, US: 0.7}}
	_, rows = latencyGrid(t, r)
	want = map[string][]string{
		"GPU0": {"-", "-", "0.70"},
		"GPU1": {"0.60", "-", "-"},
		"GPU2": {"-", "-", "-"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}

	// An ordinal p2pcheck never writes (negative, or so large that one more wraps
	// around) is left out, not a panic: Render also shows reports nobody validated.
	r.Latencies = append(r.Latencies, Latency{Src: -1, Dst: 0, Bytes: 4, US: 9}, Latency{Src: 0, Dst: -1, Bytes: 4, US: 9},
		Latency{Src: math.MaxInt, Dst: 0, Bytes: 4, US: 9}, Latency{Src: 0, Dst: math.MaxInt, Bytes: 4, US: 9})
	if _, got := latencyGrid(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}

	if title, _ := latencyGrid(t, New()); title != "" {
		t.Errorf("a report without latencies has a latency section %q", title)
	}
}

// Latencies are compared per ordered GPU pair: local writes first, then the pairs by
// writer and target. A side that failed (its error, or "corrupt" for wrong bytes) has
// no percentage.
func TestDiffLatencies(t *testing.T) {
	a, b := New(), New()
	a.Latencies = []Latency{
		{Src: 2, Dst: 0, US: 0.5},
		{Src: 1, Dst: 0, US: 0.5},
		{Src: 0, Dst: 2, US: 0.5, Error: "CUDA_ERROR_X", Mismatch: &Mismatch{Words: 1}},
		{Src: 1, Dst: 1, US: 2},
		{Src: 0, Dst: 1, US: 0.5},
		{Src: 0, Dst: 0, US: 2},
	}
	b.Latencies = []Latency{
		{Src: 0, Dst: 0, US: 2.2},
		{Src: 0, Dst: 1, US: 0.5, Mismatch: &Mismatch{Words: 1}},
		{Src: 0, Dst: 2, US: 0.4},
		{Src: 2, Dst: 2, US: 2},
		{Src: 1, Dst: 0, US: 0.4},
	}
	want := []LatencyChange{
		{Src: 0, Dst: 0, A: 2, B: 2.2, Percent: 10},
		{Src: 1, Dst: 1, A: 2, Only: "a"},
		{Src: 2, Dst: 2, B: 2, Only: "b"},
		{Src: 0, Dst: 1, A: 0.5, B: 0.5, ErrorB: "corrupt"},
		{Src: 0, Dst: 2, A: 0.5, B: 0.4, ErrorA: "CUDA_ERROR_X"}, // the error, over the mismatch
		{Src: 1, Dst: 0, A: 0.5, B: 0.4, Percent: -20},
		{Src: 2, Dst: 0, A: 0.5, Only: "a"},
	}
	if got := Diff(a, b).Latencies; !reflect.DeepEqual(got, want) {
		t.Errorf("Latencies:\n got %+v\nwant %+v", got, want)
	}
}
