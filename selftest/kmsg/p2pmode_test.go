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
		// driver/patches/README.md's example and variations the grammar allows
		{"6,812,4123456,-;NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:41:00.0 chip=AD102 bar1_mib=32768 fb_mib=49140 mode=dynamic why=bar1-below-fb", "0000:41:00.0", "dynamic"},
		{"[   12.5] NVRM: kbusInitBar1_GM107: peerboot-p2p: bar1-mode gpu=1 pci=0000:C1:00.0 chip=GB202 bar1_mib=32768 fb_mib=32607 mode=static why=forced", "0000:c1:00.0", "static"},
		{"<6>NVRM: peerboot-p2p: bar1-mode mode=none why=small-bar1 pci=00000000:02:00.0 gpu=2 newkey=x", "0000:02:00.0", "none"},
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 mode=turbo why=auto", "", ""}, // unknown mode
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 chip=AD102 mode=static why=auto", "", ""},      // no pci
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00 mode=static", "", ""},           // no function
		{"NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 chip=AD102", "", ""},          // no mode
		{"NVRM: peerboot-p2p: GPU0 BAR1 P2P mode static (auto)", "", ""},                     // the older prose line
		{"NVRM: GPU 0000:01:00.0 mode=static", "", ""},                                       // no tag
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
		"6,1,100,-;NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 mode=static why=auto",
		"6,2,101,-;NVRM: peerboot-p2p: bar1-mode gpu=1 pci=0000:02:00.0 mode=dynamic why=bar1-below-fb",
		" SUBSYSTEM=pci",
		"6,3,200,-;NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 mode=dynamic why=regkey-off",
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
		m["0000:01:00.0"].Line != "NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:01:00.0 mode=dynamic why=regkey-off" {
		t.Errorf("modes %+v", m)
	}
	if _, err := Backlog(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("Backlog of a missing file: no error")
	}
}

func FuzzP2PMode(f *testing.F) {
	for _, s := range []string{
		"6,812,4123456,-;NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:41:00.0 chip=AD102 bar1_mib=32768 fb_mib=49140 mode=dynamic why=bar1-below-fb",
		"NVRM: peerboot-p2p: bar1-mode pci=0000:01:00.0 mode=none",
		"peerboot-p2p: bar1-mode ",
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
		if mode != selftest.P2PModeStatic && mode != selftest.P2PModeDynamic && mode != selftest.P2PModeNone {
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
