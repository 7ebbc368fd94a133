// Package progress reports long steps: a redrawn line (bytes, rate, ETA) on a
// terminal, plain lines at intervals otherwise (CI logs).
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// Meter tracks one long step with a known or unknown total.
type Meter struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	label    string
	unit     string // "B" for bytes, else a count noun like "objects"
	total    int64
	done     int64
	start    time.Time
	last     time.Time
	interval time.Duration
	now      func() time.Time
}

// IsTerminal says whether w is a terminal (progress redraws in place there).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// New starts a meter. unit "B" formats bytes; anything else is printed as a count.
func New(w io.Writer, label, unit string, total int64) *Meter {
	tty := IsTerminal(w)
	interval := 10 * time.Second
	if tty {
		interval = 200 * time.Millisecond
	}
	now := time.Now()
	return &Meter{w: w, tty: tty, label: label, unit: unit, total: total, start: now, last: now, interval: interval, now: time.Now}
}

// Add records n more units done.
func (m *Meter) Add(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done += n
	if t := m.now(); t.Sub(m.last) >= m.interval {
		m.last = t
		m.print(false)
	}
}

// Set records the absolute amount done (for callers that report cumulative counts).
func (m *Meter) Set(done int64) {
	m.mu.Lock()
	delta := done - m.done
	m.mu.Unlock()
	m.Add(delta)
}

// SetTotal updates the total when it becomes known.
func (m *Meter) SetTotal(total int64) {
	m.mu.Lock()
	m.total = total
	m.mu.Unlock()
}

// Done prints the final line.
func (m *Meter) Done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.print(true)
}

func (m *Meter) print(final bool) {
	elapsed := m.now().Sub(m.start)
	line := fmt.Sprintf("%s: %s", m.label, m.amount(m.done))
	switch {
	case m.total > 0 && m.done <= m.total:
		line += fmt.Sprintf(" / %s (%d%%)", m.amount(m.total), m.done*100/m.total)
	case m.total > 0 && !final:
		// The total was an estimate (the last build's count) and this one does more.
		line += fmt.Sprintf(" (past the estimated %s)", m.amount(m.total))
	}
	if secs := elapsed.Seconds(); secs > 0.5 {
		rate := float64(m.done) / secs
		line += fmt.Sprintf(", %s/s", m.amount(int64(rate)))
		if !final && m.total > 0 && rate > 0 && m.done < m.total {
			eta := time.Duration(float64(m.total-m.done) / rate * float64(time.Second))
			line += ", ETA " + eta.Round(time.Second).String()
		}
	}
	if final {
		line += ", " + elapsed.Round(100*time.Millisecond).String()
	}
	if m.tty {
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(m.w, "\r\033[K%s%s", line, end)
		return
	}
	fmt.Fprintln(m.w, line)
}

func (m *Meter) amount(n int64) string {
	if m.unit != "B" {
		return fmt.Sprintf("%d %s", n, m.unit)
	}
	return Bytes(n)
}

// Bytes formats a byte count with binary units.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
