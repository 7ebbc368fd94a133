package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPlainLinesWithETA(t *testing.T) {
	var buf bytes.Buffer
	m := New(&buf, "fetch", "B", 100<<20)
	clock := m.start
	m.now = func() time.Time { return clock }
	clock = clock.Add(11 * time.Second)
	m.Add(50 << 20)
	clock = clock.Add(11 * time.Second)
	m.Add(50 << 20)
	m.Done()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want one line per interval plus the final one, got %q", lines)
	}
	if !strings.Contains(lines[0], "fetch: 50.0 MiB / 100.0 MiB (50%)") || !strings.Contains(lines[0], "ETA 11s") {
		t.Errorf("first line %q", lines[0])
	}
	if strings.Contains(lines[2], "ETA") || !strings.HasSuffix(lines[2], "22s") {
		t.Errorf("final line %q", lines[2])
	}
	if strings.Contains(buf.String(), "\r") {
		t.Error("a non-terminal got carriage returns")
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 213<<20 + 800<<10: "213.8 MiB", 3 << 30: "3.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// A compile's total is the last build's step count: lines show it with an ETA,
// and a build that does more says it is past the estimate instead of 104%.
func TestStepsPastEstimate(t *testing.T) {
	var buf bytes.Buffer
	m := New(&buf, "kernel compile", "steps", 2500)
	clock := m.start
	m.now = func() time.Time { return clock }
	clock = clock.Add(10 * time.Second)
	m.Add(1000)
	clock = clock.Add(10 * time.Second)
	m.Add(1600)
	m.Done()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	if want := "kernel compile: 1000 steps / 2500 steps (40%), 100 steps/s, ETA 15s"; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if want := "kernel compile: 2600 steps (past the estimated 2500 steps), 130 steps/s"; lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	if strings.Contains(lines[2], "%") || strings.Contains(lines[2], "ETA") {
		t.Errorf("final line %q", lines[2])
	}
}
