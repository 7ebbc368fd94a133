package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/node/assemble"
	"github.com/peerboot/peerboot/node/devnodes"
	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/reportpart"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// Paths inside the image: the image stage's side of them is bootproto's too.
const (
	recipePath   = bootproto.RecipePath
	p2pcheckPath = bootproto.P2PCheckPath
	reportsMount = bootproto.ReportsMount
	initRecord   = bootproto.InitRecord
	modulesRoot  = "/lib/modules" // the kernel's modprobe layout, not ours
)

// machine is everything the boot sequence does to the outside world. The real one
// makes system calls as PID 1; tests substitute recorders and run as a normal process.
type machine struct {
	root     string    // "/" for real; a temp tree in tests
	console  io.Writer // /dev/console once it is open
	mount    func(source, target, fstype string, flags uintptr, data string) error
	ifup     func(name string) error
	loader   kmod.Loader
	openKlog func() kmod.KernelLog
	mknod    func(path string, mode uint32, dev int) error
	now      func() time.Time
	sleep    func(time.Duration)
	// post sends a report; token "": no Authorization header, attestation "": no
	// Peerboot-Attestation header.
	post func(url, token string, body []byte, attestation string) error
	// postProgress sends a burn-in's progress and returns serve's answer (at most
	// bootproto.MaxProgressAnswerBytes); nil: post, with no answer read.
	postProgress func(url, token string, body []byte) ([]byte, error)
	// askConsole shows prompt on every console and returns the first line typed on
	// any within timeout ("" when none was); nil: the boot has no console to ask.
	askConsole func(prompt string, timeout time.Duration) (string, error)
	// tpmOpen opens the node's TPM (nil: the boot looks for none); askNonce asks
	// the collector for an attestation nonce.
	tpmOpen  func() (transport.TPMCloser, string, error)
	askNonce func(url, token string) (string, error)
	// netUp brings up an Ethernet interface by DHCP for the report POST; it runs only
	// when there is a report URL, beside the module loading.
	netUp func() (*dhcp.Lease, error)
	// handOff takes the final action (shell, poweroff, reboot, halt). The real one
	// never returns; a test's returns, and boot returns after it.
	handOff func(action string)
	// partitionWait bounds the search for the report partition.
	partitionWait time.Duration
	// nicWait bounds the loading of NIC drivers; zero means defaultNICLoadWait.
	nicWait time.Duration
}

func (m *machine) path(p string) string { return filepath.Join(m.root, p) }

func (m *machine) say(format string, args ...any) {
	fmt.Fprintf(m.console, "peerboot: "+format+"\n", args...)
}

// bootState is what the boot has learned so far; the panic handler reads it to make
// the best fail report it can and to follow the right on_fail.
type bootState struct {
	start    time.Time
	kernel   selftest.Kernel
	recipe   *recipe.Resolved
	plan     bootPlan
	record   selftest.InitRecord
	reported bool // the report line is out: a later panic must not print a second one
	tpm      *nodeTPM
}

// boot is the appliance's whole life after the kernel hands over.
func (m *machine) boot(st *bootState) {
	st.start = m.now()
	st.plan = planBoot(actShell, actShell, "", 0, 0, nil)
	st.record = selftest.InitRecord{Modules: []selftest.Module{}, Findings: []selftest.Finding{}, Durations: []selftest.Duration{}}

	for _, err := range m.mountAll() {
		st.finding(selftest.SevWarn, "init.mount", err.Error(), "the kernel needs PROC_FS, SYSFS, DEVTMPFS, TMPFS, UNIX98_PTYS")
	}
	if err := m.ifup("lo"); err != nil {
		st.finding(selftest.SevWarn, "init.loopback", fmt.Sprintf("bringing up lo: %v", err), "")
	}
	st.kernel = selftest.ReadKernel(m.path("/proc"))
	m.say("peerboot-init on %s", orUnknown(st.kernel.Release))

	cmdline := parseCmdline(st.kernel.Cmdline)
	modules, params, env := recipe.DefaultModules(), map[string]map[string]string{}, map[string]string{}
	defaults, err := recipe.Defaults()
	if err != nil {
		st.finding(selftest.SevWarn, "recipe.defaults", err.Error(), "a peerboot-init bug: report it with the console log")
	}
	total := defaults.Selftest.Deadlines.Total.Std()
	rc, err := recipe.Load(m.path(recipePath))
	if err != nil {
		st.finding(selftest.SevFail, "recipe", fmt.Sprintf("cannot load %s: %v", recipePath, err), "the rootfs stage writes the resolved recipe there; rebuild the image")
		st.plan = planBoot(actShell, actShell, "", 0, 0, cmdline)
	} else {
		st.recipe = rc
		modules, params, env = rc.Driver.Modules, rc.Driver.Params, rc.Env
		if d := rc.Selftest.Deadlines.Total.Std(); d > 0 {
			total = d
		}
		st.plan = planBoot(rc.Boot.OnPass, rc.Boot.OnFail, rc.Boot.ReportURL, rc.Selftest.Soak.Duration.Std(), rc.Selftest.Soak.Menu.Std(), cmdline)
		m.say("recipe %s (%s)", rc.Name, rc.Digest)
	}
	for _, w := range st.plan.warnings {
		m.say("%s", w)
	}
	if want, ok := cmdline[bootproto.ArgInitrdSHA256]; ok {
		switch bad, err := checkInitrd(m.path(bootproto.InitrdSysfs), want); {
		case errors.Is(err, errNoKeptInitrd):
			st.finding(selftest.SevInfo, "init.initrd", "initrd not checked on the node: "+err.Error(), "serve hashed the mirror's copy before sending this node there; a kernel of 6.9 or later lets the init check the bytes it booted too")
		case err != nil:
			st.finding(selftest.SevFail, "init.initrd", err.Error(), "boot files from a mirror are checked here: without the kept initrd nothing vouches for them")
		case bad != "":
			st.finding(selftest.SevFail, "init.initrd", bad, "peerboot publish --http DIR rewrites the mirror's entry; serve hashes it again within a minute")
		default:
			m.say("initrd sha256 %s: as the boot script names it", want[:16])
		}
	}

	st.tpm = m.openTPM()
	if st.plan.reportURL != "" {
		// The DHCP client needs a driver bound to the NIC, and server NICs are modules.
		m.loadNICDrivers(st)
	}
	network := m.startNetwork(st)
	// The prompt's wait overlaps the DHCP exchange begun just above.
	m.chooseSoak(st)

	t := m.now()
	st.record.Modules = append(st.record.Modules, m.loadDriver(st, modules, params)...)
	st.record.Durations = append(st.record.Durations, selftest.Duration{Phase: selftest.PhaseModules, MS: m.now().Sub(t).Milliseconds()})

	partition := m.mountReports(st)
	m.joinNetwork(st, network)

	r := m.selftest(st, env, total)
	m.finish(st, r, partition)
	if r.Verdict == selftest.Pass {
		m.handOff(st.plan.onPass)
	} else {
		m.handOff(st.plan.onFail)
	}
}

func (st *bootState) finding(sev, check, msg, hint string) {
	st.record.Findings = append(st.record.Findings, selftest.Finding{Status: sev, ID: check, Message: msg, Hint: hint})
}

// loadDriver loads the modules and creates the device nodes the driver does not.
func (m *machine) loadDriver(st *bootState, modules []string, params map[string]map[string]string) []selftest.Module {
	dir := m.path(filepath.Join(modulesRoot, st.kernel.Release))
	ix, err := kmod.LoadIndex(dir)
	if err != nil {
		st.finding(selftest.SevFail, "init.modules", err.Error(), "the rootfs stage installs modules under /lib/modules/<kernel release>")
		ix = kmod.EmptyIndex(dir)
	}
	results := kmod.Load(ix, m.loader, m.openKlog(), modules, params)
	loaded := map[string]bool{}
	for _, r := range results {
		m.say("module %s: %s%s", r.Name, r.Result, suffix(r.Error))
		if r.Result == selftest.ModLoaded {
			loaded[kmod.Name(r.Name)] = true
		}
	}
	nodes, err := devnodes.Nvidia(m.path("/proc"), loaded)
	if err == nil || len(nodes) > 0 {
		if merr := devnodes.Make(m.path("/dev"), nodes, m.mknod); merr != nil {
			err = errors.Join(err, merr)
		}
	}
	if err != nil {
		st.finding(selftest.SevWarn, "init.devnodes", err.Error(), "CUDA opens /dev/nvidiactl, /dev/nvidia<N> and /dev/nvidia-uvm")
	}
	return results
}

// mountReports finds the PEERBOOT partition, mounts it and returns its reports
// directory (bootproto.ReportsDir, made when a stick formatted elsewhere lacks it);
// "" if there is none (PXE).
func (m *machine) mountReports(st *bootState) string {
	list := func() ([]string, error) { return reportpart.BlockDevices(m.path("/proc"), m.path("/dev")) }
	dev, err := reportpart.Wait(list, bootproto.ReportsLabel, m.partitionWait, m.sleep)
	if err != nil {
		st.finding(selftest.SevInfo, "report.partition", err.Error()+"; the report is on the console only", "")
		return ""
	}
	mnt := m.path(reportsMount)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		st.finding(selftest.SevWarn, "report.partition", err.Error(), "")
		return ""
	}
	if err := m.mount(dev, mnt, "vfat", msNoSuidNoDevNoExec, ""); err != nil {
		st.finding(selftest.SevWarn, "report.partition", fmt.Sprintf("mounting %s: %v", dev, err), "the kernel needs VFAT_FS, NLS_CODEPAGE_437 and NLS_ISO8859_1")
		return ""
	}
	dir := filepath.Join(mnt, bootproto.ReportsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		st.finding(selftest.SevWarn, "report.partition", err.Error(), "")
		return ""
	}
	m.say("reports go to %s (%s)", strings.TrimPrefix(dev, m.root), filepath.Join(reportsMount, bootproto.ReportsDir))
	return dir
}

// selftest runs p2pcheck with the init's record and returns the boot's report.
func (m *machine) selftest(st *bootState, env map[string]string, total time.Duration) *selftest.Report {
	recPath := m.path(initRecord)
	// NCCL's debug log lands beside the init record, so a failed boot keeps the
	// transport lines the verdict judged.
	args := []string{"--json", "--modules-json", recPath, "--log-dir", filepath.Dir(recPath)}
	if st.recipe != nil {
		args = append(args, "--recipe", m.path(recipePath))
	}
	// p2pcheck's own deadline fires first so it can name the phase that stalled; ours
	// is the backstop for a process stuck where it cannot even do that.
	margin := min(10*time.Second, total/10)
	args = append(args, "--deadline", (total - margin).String())
	if err := writeJSON(recPath, &st.record); err != nil {
		st.finding(selftest.SevWarn, "init.record", err.Error(), "")
	}
	limit := total
	if st.plan.soak > 0 {
		// A burn-in (peerboot.soak=, the recipe's selftest.soak): p2pcheck runs its rounds after the self-test and
		// extends its own bound by the soak's length; ours grows by the same. Each
		// round's progress line goes to the console.
		args = append(args, "--soak", st.plan.soak.String())
		limit += st.plan.soak
		m.say("burn-in: soaking for %s after the self-test (%s)", st.plan.soak, st.plan.soakSource())
	}
	console, stopProgress := m.console, func() *bootproto.ProgressAnswer { return nil }
	var halt <-chan struct{}
	if st.plan.soak > 0 && st.plan.reportURL != "" {
		args, console, halt, stopProgress = m.soakProgress(st, args)
	}
	m.say("self-test: %s %s", p2pcheckPath, strings.Join(args, " "))
	run := runP2PCheck(m.path(p2pcheckPath), args, checkEnv(env), limit, console, halt)
	halted := stopProgress()
	r := reportFrom(run, m.baseReport(st), limit)
	if halted != nil {
		r.Add(selftest.SevInfo, "init.soak_halt", haltMessage(halted, r.Soak), "")
	}
	return r
}

// haltMessage is the init.soak_halt finding: serve asked the burn-in to stop, who
// asked and when, and where the soak ended.
func haltMessage(a *bootproto.ProgressAnswer, soak *selftest.Soak) string {
	msg := fmt.Sprintf("serve asked this burn-in to stop (requested by %s at %s", a.StopBy, a.StopAt.UTC().Format(time.RFC3339))
	if a.StopReason != "" {
		msg += ": " + a.StopReason
	}
	msg += "); the init ended p2pcheck's soak with SIGTERM"
	if soak != nil {
		msg += fmt.Sprintf(", which stopped it after %d rounds (%s)", soak.Rounds, soak.Stopped)
	}
	return msg
}

// baseReport is the report the init can make without p2pcheck: for a crash, a
// timeout, or a panic of the init itself.
func (m *machine) baseReport(st *bootState) *selftest.Report {
	r := assemble.Base(st.start, st.kernel, st.recipe)
	r.Merge(&st.record)
	return r
}

// finish prints the summary and the one report line, then stores and sends the report.
func (m *machine) finish(st *bootState, r *selftest.Report, partition string) {
	line, err := selftest.EncodeLine(r)
	if err != nil {
		// Cannot happen for a report we built, but a boot must still end in a line.
		line = "PEERBOOT-REPORT-ERROR " + err.Error()
	}
	io.WriteString(m.console, selftest.Summary(r))
	// One write for the whole line, so kernel messages cannot land in the middle of it.
	io.WriteString(m.console, line+"\n")
	st.reported = true
	if partition != "" {
		if p, err := reportpart.Write(partition, r); err != nil {
			m.say("%v", err)
		} else {
			m.say("report saved as %s", filepath.Base(p))
		}
	}
	if st.plan.reportURL != "" {
		js, _ := selftest.Encode(r)
		if err := m.post(st.plan.reportURL, st.plan.reportToken, js, m.attestation(st, st.tpm, js)); err != nil {
			m.say("report POST to %s failed: %v", st.plan.reportURL, err)
		} else {
			m.say("report POSTed to %s", st.plan.reportURL)
		}
	}
}

// crashed handles a panic of the init itself: a fail report (once) and on_fail.
func (m *machine) crashed(st *bootState, p any, stack []byte) {
	m.say("PANIC in peerboot-init: %v\n%s", p, stack)
	if !st.reported {
		r := m.baseReport(st)
		r.Add(selftest.SevFail, "init.panic", fmt.Sprintf("peerboot-init panicked: %v", p), "a peerboot-init bug: report it with the console log")
		r.Settle()
		m.finish(st, r, "")
	}
	m.handOff(st.plan.onFail)
}

func httpPost(url, token string, body []byte, attestation string) error {
	c := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if attestation != "" {
		req.Header.Set(attest.Header, attestation)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return &statusError{resp.StatusCode, resp.Status}
	}
	return nil
}

// httpProgress POSTs a burn-in's progress and returns serve's answer, bounded.
func httpProgress(url, token string, body []byte, _ string) ([]byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, &statusError{resp.StatusCode, resp.Status}
	}
	ans, err := io.ReadAll(io.LimitReader(resp.Body, bootproto.MaxProgressAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return ans, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown kernel"
	}
	return s
}
