package kmsg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

func TestP2PMode(t *testing.T) {
	for _, tc := range []struct {
		line, bdf, mode string
	}{
		{"6,812,4123456,-;NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=dynamic bar1=32768MiB fb=49140MiB reason=bar1<fb", "0000:01:00.0", "dynamic"},
		{"[   12.5] NVRM: peerboot-p2p: GPU 0000:C1:00.0 mode=static bar1=32768MiB fb=32607MiB forced (AUTO refused: padding)", "0000:c1:00.0", "static"},
		{"NVRM: GPU at PCI:0000:41:00: peerboot-p2p: static (BAR1 covers FB)", "0000:41:00.0", "static"},
		{"<6>nvidia 0000:02:00.0: peerboot-p2p: mode: DYNAMIC", "0000:02:00.0", "dynamic"},
		{"NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=turbo", "", ""}, // unknown mode
		{"NVRM: peerboot-p2p: mode=static", "", ""},                 // no GPU named
		{"NVRM: GPU 0000:01:00.0 static BAR1 mode=static", "", ""},  // no tag
		{"NVRM: peerboot-p2p: GPU 0000:01:00.0 bar1=32GiB", "", ""}, // no mode
		{"NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=static", "0000:01:00.0", "static"},
	} {
		bdf, mode, msg, ok := P2PMode(tc.line)
		if bdf != tc.bdf || mode != tc.mode || ok != (tc.bdf != "") {
			t.Errorf("P2PMode(%q) = %q %q %v, want %q %q", tc.line, bdf, mode, ok, tc.bdf, tc.mode)
		}
		if ok && (!strings.Contains(msg, P2PTag) || strings.HasPrefix(msg, "6,") || strings.HasPrefix(msg, "[")) {
			t.Errorf("P2PMode(%q) line %q, want the message without its prefix", tc.line, msg)
		}
		if _, ev := Classify(tc.line); ev {
			t.Errorf("Classify(%q) made it an event; the mode line is a statement", tc.line)
		}
	}
}

// The last line of a GPU wins (the driver reloaded); Backlog reads what the log holds
// from its beginning, unlike a Watch.
func TestP2PModesBacklog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	text := strings.Join([]string{
		"6,1,100,-;NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=static",
		"6,2,101,-;NVRM: peerboot-p2p: GPU 0000:02:00.0 mode=dynamic",
		" SUBSYSTEM=pci",
		"6,3,200,-;NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=dynamic",
		"6,4,201,-;unrelated",
	}, "\n") + "\n"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := Backlog(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 4 {
		t.Fatalf("backlog %q, want the 4 messages", lines)
	}
	m := P2PModes(lines)
	if len(m) != 2 || m["0000:01:00.0"].Mode != selftest.P2PModeDynamic || m["0000:02:00.0"].Mode != selftest.P2PModeDynamic ||
		m["0000:01:00.0"].Line != "NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=dynamic" {
		t.Errorf("modes %+v", m)
	}
	if _, err := Backlog(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("Backlog of a missing file: no error")
	}
}

func FuzzP2PMode(f *testing.F) {
	for _, s := range []string{
		"6,812,4123456,-;NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=dynamic bar1=32768MiB fb=49140MiB",
		"NVRM: GPU at PCI:0000:41:00: peerboot-p2p: static",
		"peerboot-p2p:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		bdf, mode, msg, ok := P2PMode(line)
		if !ok {
			if bdf != "" || mode != "" || msg != "" {
				t.Errorf("not ok but %q %q %q", bdf, mode, msg)
			}
			return
		}
		if mode != selftest.P2PModeStatic && mode != selftest.P2PModeDynamic {
			t.Errorf("mode %q", mode)
		}
		if bdf != strings.ToLower(bdf) || strings.Count(bdf, ":") != 2 || !strings.Contains(bdf, ".") {
			t.Errorf("bdf %q", bdf)
		}
		if !strings.Contains(msg, P2PTag) {
			t.Errorf("line %q lacks the tag", msg)
		}
	})
}
