package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/selftest"
)

// openPTY gives a pseudo-terminal's controller and its terminal side, the latter in
// the kernel's default mode (canonical, echo) as a console is: whole lines only.
func openPTY(t *testing.T) (ctl, term int) {
	t.Helper()
	ctl, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { unix.Close(ctl) })
	if err := unix.IoctlSetPointerInt(ctl, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(ctl, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(term) })
	return ctl, term
}

// The console read: the first whole line on any console within the timeout, over
// real pseudo-terminals (canonical mode: a key without Enter is no answer) and pipes.
func TestReadAnswer(t *testing.T) {
	const wait = 400 * time.Millisecond
	type console struct{ typed, at string } // typed into it, and when: "now", "late" (after the timeout), "" never
	for _, tt := range []struct {
		name     string
		pty      bool
		consoles []console
		want     string
		early    bool // answered before the timeout
	}{
		{"pty: b Enter", true, []console{{"b\n", "now"}}, "b", true},
		{"pty: Enter as a terminal sends it (CR)", true, []console{{"b\r", "now"}}, "b", true},
		{"pty: b without Enter", true, []console{{"b", "now"}}, "", false},
		{"pty: nothing", true, []console{{"", ""}}, "", false},
		{"pty: too late", true, []console{{"b\n", "late"}}, "", false},
		{"pty: the second console answers", true, []console{{"", ""}, {"yes\n", "now"}}, "yes", true},
		{"pipe: b Enter", false, []console{{"b\n", "now"}}, "b", true},
		{"pipe: no line end", false, []console{{"b", "now"}, {"", ""}}, "", false},
		{"pipe: closed without a line", false, []console{{"b", "close"}}, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fds, writers []int
			for range tt.consoles {
				if tt.pty {
					ctl, term := openPTY(t)
					fds, writers = append(fds, term), append(writers, ctl)
					continue
				}
				var p [2]int
				if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
				fds, writers = append(fds, p[0]), append(writers, p[1])
			}
			for i, c := range tt.consoles {
				switch c.at {
				case "now", "close":
					unix.Write(writers[i], []byte(c.typed))
					if c.at == "close" {
						unix.Close(writers[i])
					}
				case "late":
					w, typed := writers[i], c.typed
					timer := time.AfterFunc(2*wait, func() { unix.Write(w, []byte(typed)) })
					t.Cleanup(func() { timer.Stop() })
				}
			}
			start := time.Now()
			got, err := readAnswer(fds, wait, time.Now)
			took := time.Since(start)
			if err != nil || got != tt.want {
				t.Errorf("readAnswer = %q, %v; want %q", got, err, tt.want)
			}
			if tt.early && took >= wait || !tt.early && took < wait {
				t.Errorf("returned after %s with a timeout of %s; want it early: %v", took, wait, tt.early)
			}
		})
	}
}

// activeConsoles reads the kernel's console list; a name that would leave /dev is dropped.
func TestActiveConsoles(t *testing.T) {
	dir := t.TempDir()
	testfs.Write(t, filepath.Join(dir, "active"), "tty0 ttyS0 ../sda\n")
	if got := strings.Join(activeConsoles(filepath.Join(dir, "active")), ","); got != "tty0,ttyS0" {
		t.Errorf("activeConsoles = %q", got)
	}
	if got := activeConsoles(filepath.Join(dir, "missing")); got != nil {
		t.Errorf("missing file: %q", got)
	}
}

// A stick boot of the default recipe (selftest.soak.menu = 8h, no menu on the disk):
// the init asks at the console; b soaks for 8h (recorded in the report as chosen on
// the console), anything else or nothing boots the self-test alone. A boot whose
// command line chose (peerboot.soak=0, the PXE menu's peerboot.entry=) is not asked.
func TestBootSoakPrompt(t *testing.T) {
	for _, tt := range []struct {
		name, cmdline, answer string
		asked                 bool
		soak                  string // p2pcheck's --soak, "" none
		by                    string // what init.soak's evidence says chose
	}{
		{"b", "console=ttyS0", "b", true, "8h0m0s", soakByConsole},
		{"timeout", "console=ttyS0", "", true, "", ""},
		{"other key", "console=ttyS0", "x", true, "", ""},
		{"automated boot", "console=ttyS0 peerboot.soak=0", "b", false, "", ""},
		{"PXE menu chose normal", "console=ttyS0 peerboot.entry=normal", "b", false, "", ""},
		{"PXE menu chose burn-in", "console=ttyS0 peerboot.entry=burnin peerboot.soak=8h0m0s", "", false, "8h0m0s", soakByCmdline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBox(t, tt.cmdline, &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
			var prompts []string
			var waited time.Duration
			b.m.askConsole = func(prompt string, timeout time.Duration) (string, error) {
				prompts, waited = append(prompts, prompt), timeout
				return tt.answer, nil
			}
			b.m.run(&bootState{})
			r := b.onlyReport(t)
			console := b.console.String()
			if tt.asked != (len(prompts) == 1) || len(prompts) > 1 {
				t.Fatalf("prompts %q, want asked: %v", prompts, tt.asked)
			}
			if tt.asked && (prompts[0] != "peerboot: press b then Enter for burn-in (8h0m0s); booting the self-test in 5 s" || waited != 5*time.Second) {
				t.Errorf("prompt %q for %s", prompts[0], waited)
			}
			args, _ := os.ReadFile(b.p("/args"))
			f := findingWith(r, "init.soak")
			if tt.soak == "" {
				if strings.Contains(string(args), "--soak") || f != nil || strings.Contains(console, "burn-in: soaking") {
					t.Errorf("soaked: args %q, init.soak %+v", args, f)
				}
				if tt.asked && !strings.Contains(console, "peerboot: no burn-in chosen: booting the self-test\n") {
					t.Errorf("console does not say the boot goes on:\n%s", console)
				}
				return
			}
			if !strings.Contains(string(args), "--soak "+tt.soak) {
				t.Errorf("p2pcheck args %q lack --soak %s", args, tt.soak)
			}
			if f == nil || f.Status != selftest.SevInfo || !strings.HasPrefix(f.Evidence, tt.by+": ") {
				t.Fatalf("init.soak %+v, want info whose evidence starts %q; findings %+v", f, tt.by+": ", r.Findings)
			}
			want := map[string]string{
				soakByConsole: "burn-in: soaking for 8h0m0s after the self-test (chosen on the console)",
				soakByCmdline: "burn-in: soaking for 8h0m0s after the self-test (peerboot.soak)",
			}[tt.by]
			if !strings.Contains(console, want) {
				t.Errorf("console lacks %q:\n%s", want, console)
			}
			if tt.by == soakByCmdline && f.Evidence != "cmdline: peerboot.soak=8h0m0s" || tt.by == soakByConsole && f.Message != "burn-in of 8h0m0s chosen on the console (b typed at the prompt)" {
				t.Errorf("init.soak %+v", f)
			}
			if s := findingWith(r, "soak.skipped"); s == nil {
				t.Errorf("the GPU-less soak did not say it was skipped: %+v", r.Findings)
			}
		})
	}
}

// A recipe whose every boot soaks says so in the report, and asks nothing.
func TestBootSoakFromRecipe(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	rc, err := os.ReadFile(b.p(recipePath))
	if err != nil {
		t.Fatal(err)
	}
	testfs.Write(t, b.p(recipePath), strings.Replace(string(rc), "duration = \"0s\"", "duration = \"2s\"", 1))
	b.m.askConsole = func(string, time.Duration) (string, error) {
		t.Error("asked at the console although the recipe chose")
		return "", nil
	}
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	args, _ := os.ReadFile(b.p("/args"))
	f := findingWith(r, "init.soak")
	if !strings.Contains(string(args), "--soak 2s") || f == nil || f.Evidence != "recipe: selftest.soak.duration = 2s" {
		t.Errorf("args %q, init.soak %+v", args, f)
	}
}

// A burn-in with a report URL and no network (no DHCP lease): the final report,
// soak findings and all, is still on the stick's report partition; the POST's
// failure is on the console and stops nothing.
func TestBootSoakNoNetworkSavesReport(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0 peerboot.report_url=http://10.0.2.2:9/r peerboot.soak=2s", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.lease, b.netErr = nil, errors.New("eth0: no DHCP offer: no answer within 10s")
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	files, _ := filepath.Glob(b.p(reportsMount + "/" + bootproto.ReportsDir + "/report-*.json"))
	if len(files) != 1 {
		t.Fatalf("report files on the partition: %v", files)
	}
	saved, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := selftest.Decode(saved)
	if err != nil || fromFile.StartedAt != r.StartedAt || findingWith(fromFile, "init.soak") == nil || findingWith(fromFile, "soak.skipped") == nil {
		t.Errorf("saved report: %v; findings %+v", err, fromFile)
	}
	// The last POST is the report's (progress POSTs to .../progress may come first).
	if len(b.posts) == 0 || b.posts[len(b.posts)-1] != "http://10.0.2.2:9/r token=" || !strings.Contains(b.console.String(), "report POST to http://10.0.2.2:9/r failed") || len(b.actions) != 1 {
		t.Errorf("posts %v, actions %v; console:\n%s", b.posts, b.actions, b.console.String())
	}
}
