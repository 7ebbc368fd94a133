package netboot

import (
	"strings"
	"testing"
	"time"
)

// A bundle's boot.ipxe with a burn-in entry (image.IPXEScript with the recipe's
// selftest.soak.menu) gives the build its burn-in length; the first kernel line
// stays the build's command line.
func TestBurnInFromBundle(t *testing.T) {
	menu := []byte("#!ipxe\nmenu peerboot || goto normal\nitem normal boot || goto normal\n:normal\nkernel vmlinuz console=ttyS0 peerboot.entry=normal\ninitrd initrd.img\nboot\n\n:burnin\nkernel vmlinuz console=ttyS0 peerboot.entry=burnin peerboot.soak=8h0m0s\ninitrd initrd.img\nboot\n")
	for _, tt := range []struct {
		name   string
		script []byte
		want   time.Duration
	}{
		{"menu", menu, 8 * time.Hour},
		{"plain", []byte("#!ipxe\nkernel vmlinuz console=ttyS0\ninitrd initrd.img\nboot\n"), 0},
		{"bad-value", []byte("kernel vmlinuz peerboot.soak=eight\n"), 0},
	} {
		if got := burnIn(tt.script); got != tt.want {
			t.Errorf("%s: burnIn %s, want %s", tt.name, got, tt.want)
		}
	}
	if got := kernelArgs(menu); got != "console=ttyS0" {
		t.Errorf("kernelArgs of a menu: %q, want the normal entry's without its peerboot.entry=", got)
	}
}

// serve's script for a build with a burn-in entry is a menu: the normal boot (the
// default) and the burn-in, each with the node's report URL and token.
func TestBootScriptBurnInMenu(t *testing.T) {
	e := inventoryEnv(t, Options{})
	x := e.build(t, "xeon-8gpu")
	x.BurnIn = 12 * time.Hour
	resp, body := e.get(t, "/boot.ipxe?mac=52:54:00:12:34:56")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for _, want := range []string{
		"item burnin burn-in (12 h): self-test, then soak || goto normal\n",
		"choose --default normal --timeout 5000 entry || goto normal\n",
		":normal\nkernel " + e.http.URL + "/builds/xeon-8gpu/" + x.ID + "/pxe/vmlinuz ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("script lacks %q:\n%s", want, body)
		}
	}
	var kernels []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "kernel ") {
			kernels = append(kernels, l)
		}
	}
	if len(kernels) != 2 || strings.Contains(kernels[0], "peerboot.soak=") || !strings.HasSuffix(kernels[0], " peerboot.entry=normal") ||
		!strings.HasSuffix(kernels[1], " peerboot.entry=burnin peerboot.soak=12h0m0s") || strings.Count(kernels[1], "peerboot.entry=") != 1 ||
		!strings.Contains(kernels[1], "peerboot.token=") || !strings.Contains(kernels[1], "peerboot.report_url=") {
		t.Errorf("kernel lines %q: want the normal boot (peerboot.entry=normal), then the same with peerboot.entry=burnin peerboot.soak=12h0m0s", kernels)
	}
	// A build without one: no menu, one kernel line, as before.
	if _, body := e.get(t, "/boot.ipxe?mac=52:54:00:00:00:02&host=gpu-b-07"); strings.Contains(body, "menu") || strings.Count(body, "\nkernel ") != 1 {
		t.Errorf("a build without a burn-in entry got a menu:\n%s", body)
	}
}
