package kmsg

import (
	"bufio"
	"io"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// scanLineMax bounds one line read by Scan; the rest of a longer line is dropped.
const scanLineMax = 64 << 10

// Scan classifies every line of a saved kernel log (dmesg output, a copy of /dev/kmsg
// records, a journal) and returns the events in log order, never nil. A read error
// ends the scan with what was found up to it: a truncated log still has evidence.
func Scan(r io.Reader) []selftest.KEvent {
	var c collector
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := readLine(br)
		c.add(line)
		if err != nil {
			return c.events()
		}
	}
}

// readLine returns the next line without its ending, at most scanLineMax bytes of it.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if room := scanLineMax - len(b); room > 0 {
			if len(chunk) > room {
				chunk = chunk[:room]
			}
			b = append(b, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return strings.TrimRight(string(b), "\r\n"), err
	}
}

// collector turns lines into events, folding Intel VT-d's two-line fault report: the
// header "DMAR: DRHD: handling fault status reg 2" and the record after it
// ("DMAR: [DMA Write] Request device [1b:00.0] ...") are one fault, kept as the record,
// which names the device. A header with no record after it stays an event.
type collector struct {
	out         []selftest.KEvent
	pendingDRHD bool // the last event is a DRHD header not yet matched with a record
}

func (c *collector) add(line string) {
	ev, ok := Classify(line)
	if !ok {
		return
	}
	header := ev.Kind == selftest.KEventIOMMU && ev.BDF == "" && strings.Contains(ev.Line, "DRHD: handling fault status")
	record := ev.Kind == selftest.KEventIOMMU && strings.Contains(ev.Line, "DMAR: [") && strings.Contains(ev.Line, "Request device")
	if record && c.pendingDRHD {
		c.out[len(c.out)-1] = ev
		c.pendingDRHD = false
		return
	}
	c.out = append(c.out, ev)
	c.pendingDRHD = header
}

// events returns what was collected so far, never nil, and starts over. A DRHD header
// handed out by one call is not folded into a record that arrives for the next: the
// caller has it already, so the two stay separate events.
func (c *collector) events() []selftest.KEvent {
	out := c.out
	if out == nil {
		out = []selftest.KEvent{}
	}
	c.out = nil
	c.pendingDRHD = false
	return out
}
