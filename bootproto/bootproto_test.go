package bootproto

import (
	"github.com/peerboot/peerboot/internal/literals"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestOneHome fails when a string literal in the module's code (not its tests) spells
// one of the protocol's values outside this package: a copy that a rename here would
// miss. A literal counts when it is the value, or key= for a kernel argument.
func TestOneHome(t *testing.T) {
	values := []string{
		ArgReportURL, ArgToken, ArgNonce, ArgOnPass, ArgOnFail, ArgSoak, ArgEntry,
		RecipePath, InImage(RecipePath), P2PCheckPath, InImage(P2PCheckPath),
		ReportsMount, InitRecord, ReportsLabel, ArgSoakProgress, SoakProgressFile, ProgressPath,
	}
	// Literals that happen to equal a value but mean something else.
	elsewhere := map[string][]string{
		ReportsLabel: {
			"image",         // ISOVolumeID: the ISO's volume identifier
			"image/iso9660", // the ISO's application identifier
		},
	}
	literals.Each(t, "bootproto", func(l literals.Lit) {
		for _, v := range values {
			if l.Value != v && !(strings.HasPrefix(v, "peerboot.") && strings.HasPrefix(l.Value, v+"=")) {
				continue
			}
			allowed := false
			for _, e := range elsewhere[v] {
				allowed = allowed || e == l.Dir
			}
			if !allowed {
				t.Errorf("%s: %s spells bootproto's %q: use the constant", l.Pos, l.Quoted, v)
			}
		}
	})
}

func TestActions(t *testing.T) {
	for _, a := range Actions() {
		if !a.Valid() {
			t.Errorf("%q: not Valid", a)
		}
	}
	for _, a := range []Action{"", "Shell", "kexec", "shell "} {
		if a.Valid() {
			t.Errorf("%q: Valid", a)
		}
	}
	if got := strings.Join(ActionNames(), ","); got != "shell,poweroff,reboot,halt" {
		t.Errorf("ActionNames() = %s", got)
	}
}

func TestBootEntries(t *testing.T) {
	for _, tt := range []struct {
		burnIn time.Duration
		want   []BootEntry
	}{
		{0, []BootEntry{{"normal", "boot and self-test", ""}}},
		{8 * time.Hour, []BootEntry{{"normal", "boot and self-test", "peerboot.entry=normal"}, {"burnin", "burn-in (8 h): self-test, then soak", "peerboot.entry=burnin peerboot.soak=8h0m0s"}}},
		{90 * time.Minute, []BootEntry{{"normal", "boot and self-test", "peerboot.entry=normal"}, {"burnin", "burn-in (1h30m0s): self-test, then soak", "peerboot.entry=burnin peerboot.soak=1h30m0s"}}},
	} {
		if got := BootEntries(tt.burnIn); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("BootEntries(%s) = %+v, want %+v", tt.burnIn, got, tt.want)
		}
	}
}

func TestProgressURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://10.0.0.1:8080/reports?node=52:54:00:12:34:56": "http://10.0.0.1:8080/progress?node=52:54:00:12:34:56",
		"http://serve/fleet/reports/":                         "http://serve/fleet/progress",
		"http://serve/collect":                                "http://serve/collect/progress",
		"https://serve/reports":                               "https://serve/progress",
	} {
		if got := ProgressURL(in); got != want {
			t.Errorf("ProgressURL(%q) = %q, want %q", in, got, want)
		}
	}
}
