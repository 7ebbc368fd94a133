package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image/fat"
	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// fakeBox is a temp root laid out like the appliance: /proc and /lib/modules files, the
// resolved recipe, a FAT "disk" labelled PEERBOOT, and /usr/bin/p2pcheck — the real one,
// built here, behind a wrapper that records its arguments and environment.
type fakeBox struct {
	root    string
	console bytes.Buffer
	mounts  []string
	posts   []string
	actions []string
	// netUp's answer, and how often it was asked
	lease    *dhcp.Lease
	netErr   error
	netCalls int
	m        *machine
}

const release = "6.1.0-test"

func newFakeBox(t *testing.T, cmdline string, loader kmod.Loader) *fakeBox {
	t.Helper()
	b := &fakeBox{root: t.TempDir()}
	testfs.Write(t, b.p("/proc/sys/kernel/osrelease"), release+"\n")
	testfs.Write(t, b.p("/proc/cmdline"), cmdline+"\n")
	testfs.Write(t, b.p("/proc/devices"), "Character devices:\n195 nvidia\n")
	testfs.Write(t, b.p("/proc/partitions"), "major minor  #blocks  name\n\n 254 0 4096 vda\n 254 1 2048 vda1\n")
	testfs.Write(t, b.p("/dev/vda"), strings.Repeat("\x00", 1024))
	testfs.Write(t, b.p("/dev/vda1"), "")
	part, err := os.OpenFile(b.p("/dev/vda1"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fat.Write(part, fat.Params{Size: 16 << 20, Label: bootproto.ReportsLabel, VolumeID: 1, Epoch: 1700000000}); err != nil {
		t.Fatal(err)
	}
	part.Close()
	for _, f := range []string{"nvidia.ko", "nvidia-uvm.ko", "nvidia-modeset.ko", "nvidia-drm.ko", "nvidia-peermem.ko"} {
		testfs.Write(t, b.p("/lib/modules/"+release+"/updates/"+f), "x")
	}
	r, err := recipe.Load(filepath.Join("..", "..", "recipes", "default.toml"))
	if err != nil {
		t.Fatal(err)
	}
	testfs.Write(t, b.p(recipePath), string(r.Canonical()))

	bin := filepath.Join(t.TempDir(), "p2pcheck.real")
	build := exec.Command("go", "build", "-o", bin, "../p2pcheck")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building p2pcheck: %v\n%s", err, out)
	}
	testfs.Write(t, b.p(p2pcheckPath), "#!/bin/sh\necho \"$@\" > "+b.p("/args")+"\nenv > "+b.p("/env")+"\nexec "+bin+" --root "+b.root+" \"$@\"\n")
	os.Chmod(b.p(p2pcheckPath), 0o755)

	b.m = &machine{
		root:    b.root,
		console: &b.console,
		mount: func(src, target, fstype string, flags uintptr, data string) error {
			b.mounts = append(b.mounts, fstype+" "+strings.TrimPrefix(target, b.root))
			return nil
		},
		ifup:     func(string) error { return nil },
		loader:   loader,
		openKlog: func() kmod.KernelLog { return &kmodtest.Klog{} },
		mknod:    func(string, uint32, int) error { return nil },
		now:      time.Now,
		sleep:    func(time.Duration) {},
		post: func(url, token string, body []byte, attestation string) error {
			b.posts = append(b.posts, url+" token="+token)
			return errors.New("network unreachable")
		},
		handOff:       func(a string) { b.actions = append(b.actions, a) },
		partitionWait: 0,
		netUp: func() (*dhcp.Lease, error) {
			b.netCalls++
			return b.lease, b.netErr
		},
	}
	b.lease = &dhcp.Lease{Iface: "eth0", Index: 2, Addr: net.ParseIP("10.0.2.15").To4(), Mask: net.CIDRMask(24, 32), Router: net.ParseIP("10.0.2.2").To4(),
		DNS: []net.IP{net.ParseIP("10.0.2.3").To4()}, Server: net.ParseIP("10.0.2.2").To4(), Time: 24 * time.Hour}
	return b
}

func (b *fakeBox) p(path string) string { return filepath.Join(b.root, path) }

// onlyReport is the boot's report, from its one PEERBOOT-REPORT line: a second line,
// or none, fails the test.
func (b *fakeBox) onlyReport(t *testing.T) *selftest.Report {
	t.Helper()
	lines := b.reportLines()
	if len(lines) != 1 {
		t.Fatalf("%d report lines, want 1:\n%s", len(lines), b.console.String())
	}
	r, err := selftest.DecodeLine(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reportLines returns every PEERBOOT-REPORT line on the console.
func (b *fakeBox) reportLines() []string {
	var out []string
	for _, l := range strings.Split(b.console.String(), "\n") {
		if strings.Contains(l, selftest.Marker) {
			out = append(out, l)
		}
	}
	return out
}

// The whole sequence on a GPU-less box without libcuda (this machine): modules ENODEV
// and skipped, p2pcheck runs and fails on the missing libcuda, one report line, a file
// on the partition, the POST attempted, on_fail from the command line.
func TestBootSequence(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0 peerboot.on_fail=poweroff peerboot.report_url=http://10.0.2.2:9/r peerboot.token=0123456789abcdef.t0k", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.m.run(&bootState{})

	r := b.onlyReport(t)
	if r.Verdict != selftest.Fail || r.Recipe.Name != "default" || r.Kernel.Release != release {
		t.Errorf("report header: %s %+v %+v", r.Verdict, r.Recipe, r.Kernel)
	}
	if len(r.Modules) != 5 || r.Modules[0].Result != selftest.ModENODEV || r.Modules[1].Result != selftest.ModSkipped {
		t.Errorf("modules: %+v", r.Modules)
	}
	if r.CUDA.Library != "libcuda.so.1" || r.Durations[0].Phase != selftest.PhaseModules {
		t.Errorf("cuda %+v durations %+v", r.CUDA, r.Durations)
	}
	if !strings.Contains(b.console.String(), "peerboot self-test: FAIL") {
		t.Errorf("no summary on the console:\n%s", b.console.String())
	}
	if strings.Join(b.actions, ",") != "poweroff" {
		t.Errorf("actions %v", b.actions)
	}
	if len(b.posts) != 1 || b.posts[0] != "http://10.0.2.2:9/r token=0123456789abcdef.t0k" || !strings.Contains(b.console.String(), "report POST to http://10.0.2.2:9/r failed: network unreachable") {
		t.Errorf("posts %v", b.posts)
	}
	nf := findingWith(r, "init.network")
	if nf == nil || nf.Status != selftest.SevInfo || nf.Message != "eth0: 10.0.2.15/24 from DHCP server 10.0.2.2, router 10.0.2.2, DNS 10.0.2.3, lease 24h0m0s" {
		t.Errorf("network finding %+v", nf)
	}
	if !strings.Contains(b.console.String(), "peerboot: network: eth0: 10.0.2.15/24") || r.Durations[1].Phase != phaseNetwork {
		t.Errorf("network: durations %+v, console:\n%s", r.Durations, b.console.String())
	}
	if rc, _ := os.ReadFile(b.p("/etc/resolv.conf")); !strings.Contains(string(rc), "\nnameserver 10.0.2.3\n") {
		t.Errorf("resolv.conf: %q", rc)
	}
	wantMounts := "proc /proc,sysfs /sys,devtmpfs /dev,devpts /dev/pts,tmpfs /dev/shm,tmpfs /run,tmpfs /tmp,vfat /run/peerboot/reports"
	if strings.Join(b.mounts, ",") != wantMounts {
		t.Errorf("mounts %v", b.mounts)
	}
	files, _ := filepath.Glob(b.p(reportsMount + "/" + bootproto.ReportsDir + "/report-*.json"))
	if len(files) != 1 {
		t.Fatalf("report files %v", files)
	}
	saved, _ := os.ReadFile(files[0])
	if fromFile, err := selftest.Decode(saved); err != nil || fromFile.StartedAt != r.StartedAt {
		t.Errorf("saved report: %v", err)
	}
	env, _ := os.ReadFile(b.p("/env"))
	for _, kv := range []string{"NCCL_P2P_LEVEL=SYS", "NCCL_DEBUG=INFO", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"} {
		if !strings.Contains(string(env), kv+"\n") {
			t.Errorf("p2pcheck env lacks %s", kv)
		}
	}
	args, _ := os.ReadFile(b.p("/args"))
	for _, a := range []string{"--json", "--recipe " + b.p(recipePath), "--modules-json " + b.p(initRecord), "--deadline 4m50s"} {
		if !strings.Contains(string(args), a) {
			t.Errorf("p2pcheck args %q lack %q", args, a)
		}
	}
}

// A broken recipe is a fail finding; the modules still load (default list) and the
// boot still ends in one report and on_fail (shell by default).
func TestBootBadRecipe(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	testfs.Write(t, b.p(recipePath), "name = 3\n")
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	if r.Verdict != selftest.Fail || r.Findings[0].ID != "recipe" || len(r.Modules) != 5 {
		t.Errorf("report %+v", r)
	}
	if strings.Join(b.actions, ",") != "shell" {
		t.Errorf("actions %v", b.actions)
	}
	if b.netCalls != 0 || findingWith(r, "init.network") != nil {
		t.Errorf("no report URL, yet the network was brought up")
	}
}

// peerboot.soak= reaches p2pcheck as --soak, with the console told; on this GPU-less
// box under the GPU-less default recipe there is nothing to soak, which the report
// says (soak.skipped) while the self-test's verdict stands.
func TestBootSoak(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0 peerboot.soak=2s", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	args, _ := os.ReadFile(b.p("/args"))
	if !strings.Contains(string(args), "--soak 2s") || !strings.Contains(b.console.String(), "burn-in: soaking for 2s after the self-test (peerboot.soak)") {
		t.Errorf("p2pcheck args %q; console:\n%s", args, b.console.String())
	}
	if f := findingWith(r, "soak.skipped"); f == nil || f.Status != selftest.SevInfo || findingWith(r, "soak.start") != nil {
		t.Errorf("verdict %s, soak.skipped %+v; findings %+v", r.Verdict, f, r.Findings)
	}
}

// No lease: a warning finding that says why, and the boot goes on to its report.
func TestBootNoNetwork(t *testing.T) {
	b := newFakeBox(t, "peerboot.report_url=http://10.0.2.2:9/r", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.lease, b.netErr = nil, errors.New("eth0: no DHCP offer: no answer within 10s")
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	f := findingWith(r, "init.network")
	if f == nil || f.Status != selftest.SevWarn || f.Message != "no network for the report POST: eth0: no DHCP offer: no answer within 10s" || !strings.Contains(f.Hint, "DHCP server") {
		t.Errorf("finding %+v", f)
	}
	if !strings.Contains(b.console.String(), "peerboot: network: no DHCP lease: eth0: no DHCP offer") {
		t.Errorf("console:\n%s", b.console.String())
	}
}

// A panic in the bring-up's goroutine is its error, not the end of PID 1.
func TestBootNetworkPanic(t *testing.T) {
	b := newFakeBox(t, "peerboot.report_url=http://10.0.2.2:9/r", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.m.netUp = func() (*dhcp.Lease, error) { panic("netlink exploded") }
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	if f := findingWith(r, "init.network"); f == nil || !strings.Contains(f.Message, "panicked: netlink exploded") {
		t.Errorf("finding %+v", f)
	}
}

func findingWith(r *selftest.Report, id string) *selftest.Finding {
	for i := range r.Findings {
		if r.Findings[i].ID == id {
			return &r.Findings[i]
		}
	}
	return nil
}

type panicLoader struct{}

func (panicLoader) Load(string, string) error { panic("loader exploded") }

// A panic in the init is caught: the console gets the panic, one fail report, and the
// command line's on_fail is followed.
func TestBootPanic(t *testing.T) {
	b := newFakeBox(t, "peerboot.on_fail=halt", panicLoader{})
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	if r.Verdict != selftest.Fail || r.Findings[len(r.Findings)-1].ID != "init.panic" || r.Recipe.Name != "default" {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(b.console.String(), "PANIC in peerboot-init: loader exploded") {
		t.Errorf("console:\n%s", b.console.String())
	}
	if strings.Join(b.actions, ",") != "halt" {
		t.Errorf("actions %v", b.actions)
	}
}
