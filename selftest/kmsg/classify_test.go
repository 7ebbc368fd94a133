package kmsg

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peerboot/peerboot/selftest"
)

// The prefixes message strips and the ones it leaves: journalctl's "DATE HOST
// kernel: " only when something precedes " kernel: " within 64 bytes, and a
// /dev/kmsg header only when its flags field is one the kernel writes.
func TestClassifyPrefixes(t *testing.T) {
	const rm = "NVRM: RmInitAdapter failed! (0x26:0xffff:1464)"
	for line, want := range map[string]string{
		"Nov 29 14:01:33 node7 kernel: " + rm:      rm,
		strings.Repeat("h", 63) + " kernel: " + rm: rm,
		strings.Repeat("h", 64) + " kernel: " + rm: strings.Repeat("h", 64) + " kernel: " + rm,
		" kernel: " + rm: "kernel: " + rm,
		"4,1,2,-;" + rm:  rm,
		"4,1,2,c;" + rm:  rm,
		"4,1,2,+;" + rm:  rm,
		"4,1,2,x;" + rm:  "4,1,2,x;" + rm,
		"4,1,2;" + rm:    "4,1,2;" + rm,
		"4,a,2,-;" + rm:  "4,a,2,-;" + rm,
	} {
		ev, ok := Classify(line)
		if !ok || ev.Kind != selftest.KEventNVRM || ev.Line != want {
			t.Errorf("Classify(%q) = %+v %v, want an NVRM event with the line %q", line, ev, ok, want)
		}
	}
}

// An NVRM line about firmware is a firmware event when it says "firmware" or
// "GSP" (either will do) and a failure.
func TestClassifyFirmwareWords(t *testing.T) {
	for line, kind := range map[string]string{
		"NVRM: GPU 0000:01:00.0: loading firmware failed": selftest.KEventFirmware,
		"NVRM: GPU 0000:01:00.0: GSP boot failed":         selftest.KEventFirmware,
		"NVRM: GPU 0000:01:00.0: RmInitAdapter failed!":   selftest.KEventNVRM,
	} {
		if ev, ok := Classify(line); !ok || ev.Kind != kind {
			t.Errorf("Classify(%q) = %+v %v, want a %s event", line, ev, ok, kind)
		}
	}
}

// A line longer than maxLine is cut to at most maxLine bytes, before a
// character, never through one; one of exactly maxLine bytes stays whole; a
// line of no character starts before the cut becomes empty rather than cut
// through (or past) its bytes.
func TestClassifyCutsLongLines(t *testing.T) {
	const xid = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus."
	exact := xid + strings.Repeat("x", maxLine-len(xid))
	euro := xid + strings.Repeat("x", maxLine-len(xid)-1) + "€ and more" // "€" is 3 bytes, at maxLine-1
	for _, c := range []struct {
		name, line, want string
	}{
		{"exactly maxLine bytes", exact, exact},
		{"a character across the cut", euro, euro[:maxLine-1]},
		{"one byte more, ASCII", exact + "y", exact},
		{"no character start before the cut", strings.Repeat("\x80", maxLine+10) + " " + xid, ""},
	} {
		ev, ok := Classify(c.line)
		if !ok || ev.Kind != selftest.KEventXid {
			t.Errorf("%s: not an Xid: %+v %v", c.name, ev, ok)
			continue
		}
		if ev.Line != c.want || len(ev.Line) > maxLine || !utf8.ValidString(ev.Line) && c.want != "" {
			t.Errorf("%s: line of %d bytes %q..., want %d bytes", c.name, len(ev.Line), ev.Line[:min(len(ev.Line), 40)], len(c.want))
		}
	}
}

// The mode line's edges: the tag may start the message, a bare word is no
// field (a bare "mode" does not hide the mode=… after it), and pci= is at
// most 20 bytes.
func TestP2PModeEdges(t *testing.T) {
	for _, tc := range []struct {
		line, bdf, mode string
	}{
		{"peerboot-p2p: bar1-mode gpu=0 pci=0000:41:00.0 mode=dynamic", "0000:41:00.0", "dynamic"},
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 mode pci=0000:41:00.0 mode=static", "0000:41:00.0", "static"},
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0-abcdefg mode=static", "0000:01:00.0", "static"}, // 20 bytes
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0-abcdefgh mode=static", "", ""},                  // 21
	} {
		bdf, mode, _, ok := P2PMode(tc.line)
		if bdf != tc.bdf || mode != tc.mode || ok != (tc.bdf != "") {
			t.Errorf("P2PMode(%q) = %q %q %v, want %q %q", tc.line, bdf, mode, ok, tc.bdf, tc.mode)
		}
	}
}

// Scan reads at most scanLineMax bytes of a line: an Xid past them is not
// seen, and the lines after a long one still are.
func TestScanLongLine(t *testing.T) {
	const xid = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus."
	log := strings.Repeat("x", scanLineMax) + " " + xid + "\n" + strings.Replace(xid, "01:00", "02:00", 1) + "\n"
	evs := Scan(strings.NewReader(log))
	if len(evs) != 1 || evs[0].BDF != "0000:02:00.0" {
		t.Fatalf("Scan = %+v, want only the second line's Xid", evs)
	}
}

// Only a VT-d DRHD header folds into the fault record after it: an Xid, or an
// IOMMU event without a device that is no DRHD header, stays its own event.
func TestScanFoldsOnlyDRHD(t *testing.T) {
	const record = "DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr 3c8000000 [fault reason 05] PTE Write access is not set"
	for _, first := range []string{
		"NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.",
		"AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x7f0000000 flags=0x0020]",
	} {
		evs := Scan(strings.NewReader(first + "\n" + record + "\n"))
		if len(evs) != 2 || evs[0].Line != first || evs[1].BDF != "0000:1b:00.0" {
			t.Errorf("%q then a DMAR record: %+v, want both", first, evs)
		}
	}
}

// A DRHD header folds into a VT-d record only: an event of another kind after
// it, even one quoting a record's words, stays its own event.
func TestScanFoldsIntoRecordsOnly(t *testing.T) {
	const xid = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, after DMAR: [DMA Read] Request device [01:00.0]"
	evs := Scan(strings.NewReader("DMAR: DRHD: handling fault status reg 2\n" + xid + "\n"))
	if len(evs) != 2 || evs[0].Kind != selftest.KEventIOMMU || evs[1].Kind != selftest.KEventXid {
		t.Errorf("a DRHD header, then an Xid: %+v, want both", evs)
	}
}

// After Close, Events and Messages refuse (the descriptor is gone, not
// reused); a second Close is nothing.
func TestWatchClosed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Events(); err == nil || !strings.Contains(err.Error(), "the watch is closed") {
		t.Errorf("Events after Close: %v", err)
	}
	if _, err := w.Messages(); err == nil || !strings.Contains(err.Error(), "the watch is closed") {
		t.Errorf("Messages after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// A file read in 16 KiB reads: an empty line does not hold up the lines after
// it, and an unended line keeps at most scanLineMax bytes before the read
// that ends it (the reads past them are dropped, the last is kept).
func TestBacklogLineAssembly(t *testing.T) {
	const xid = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus."
	for _, c := range []struct {
		name, text string
		want       []int // the messages' lengths
	}{
		{"an empty line first", "\n" + xid + "\n", []int{len(xid)}},
		{"exactly scanLineMax bytes, then the end", strings.Repeat("x", scanLineMax) + xid + "\n", []int{scanLineMax + len(xid)}},
		{"a read more than scanLineMax", strings.Repeat("x", scanLineMax+16<<10) + xid + "\n", []int{scanLineMax + len(xid)}},
	} {
		p := filepath.Join(t.TempDir(), "kmsg")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		msgs, err := Backlog(p)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, m := range msgs {
			got = append(got, len(m))
		}
		if !slices.Equal(got, c.want) || !strings.HasSuffix(msgs[len(msgs)-1], xid) {
			t.Errorf("%s: messages of %v bytes, want %v ending in the Xid", c.name, got, c.want)
		}
	}
}
