package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// checkRun is how one p2pcheck run ended.
type checkRun struct {
	stdout   []byte
	tail     string // the end of its stderr, for a crash report
	exitCode int    // -1: killed or never started
	timedOut bool
	err      error // start failure, or how it ended if not a normal exit
}

// tailWriter keeps the last max bytes written to it. It is locked because an abandoned
// child's output may still be copied into it while the init reads the tail.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// killGrace is how long a killed p2pcheck gets to be reaped before it is abandoned: a
// process in uninterruptible sleep inside the driver ignores SIGKILL, and PID 1 must not
// wait on it forever.
const killGrace = 5 * time.Second

// runP2PCheck runs the self-test binary under limit. Its stderr goes to the console as
// it happens (a person watching sees progress) and its tail is kept for the report;
// stdout is the report JSON. On timeout the process is killed: a hang is a verdict.
// When halt closes (serve asked the burn-in to stop) p2pcheck gets one SIGTERM, the
// signal it ends a soak on cleanly (after the round, writing everything).
func runP2PCheck(bin string, args, env []string, limit time.Duration, console io.Writer, halt <-chan struct{}) checkRun {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stdout bytes.Buffer
	tail := &tailWriter{max: 4096}
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(console, tail)
	cmd.WaitDelay = time.Second // a grandchild holding the pipes must not block Wait
	if err := cmd.Start(); err != nil {
		return checkRun{exitCode: -1, err: err}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-halt:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			halt = nil // once
		case <-timer.C:
			_ = cmd.Process.Kill()
			select {
			case <-done:
			case <-time.After(killGrace):
			}
			return checkRun{tail: tail.String(), exitCode: -1, timedOut: true}
		}
	}
	run := checkRun{stdout: stdout.Bytes(), tail: tail.String(), exitCode: -1, err: err}
	var ee *exec.ExitError
	if err == nil {
		run.exitCode = 0
	} else if errors.As(err, &ee) && ee.Exited() {
		run.exitCode = ee.ExitCode()
	}
	return run
}

// checkEnv is p2pcheck's environment: a fixed base plus the recipe's [env] (sorted, so
// the environment is the same on every boot), e.g. NCCL_P2P_LEVEL=SYS.
func checkEnv(recipeEnv map[string]string) []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	keys := make([]string, 0, len(recipeEnv))
	for k := range recipeEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+recipeEnv[k])
	}
	return env
}

// reportFrom turns a p2pcheck run into the boot's report. A run that exited 0 or 9 with
// a decodable report is taken as is; anything else (killed at the deadline, crashed,
// panicked, printed garbage, missing) becomes a fail report built here from what the
// init knows, so every boot still ends with exactly one verdict.
func reportFrom(run checkRun, base *selftest.Report, limit time.Duration) *selftest.Report {
	if !run.timedOut && (run.exitCode == 0 || run.exitCode == 9) {
		if r, err := selftest.Decode(run.stdout); err == nil {
			wantPass := run.exitCode == 0
			if (r.Verdict == selftest.Pass) != wantPass {
				r.Add(selftest.SevFail, "p2pcheck.exit", fmt.Sprintf("p2pcheck exited %d but its report says %s", run.exitCode, r.Verdict), "a p2pcheck bug: report it with this JSON")
				r.Settle()
			}
			return r
		}
	}
	r := base
	switch {
	case run.timedOut:
		r.DeadlineExceeded = selftest.PhaseTotal
		r.Add(selftest.SevFail, "deadline", fmt.Sprintf("p2pcheck did not finish within selftest.deadlines.total (%s) and was killed", limit),
			"its own per-phase deadlines should have fired first: the process is stuck in the kernel (D state); check dmesg for Xid errors"+tailHint(run.tail))
	case run.exitCode == -1 && run.err != nil && strings.Contains(run.err.Error(), "signal"):
		r.Add(selftest.SevFail, "p2pcheck.crash", "p2pcheck died: "+run.err.Error(), "stderr tail:\n"+run.tail)
	case run.exitCode == -1:
		r.Add(selftest.SevFail, "p2pcheck.start", fmt.Sprintf("p2pcheck could not run: %v", run.err), "the image needs /usr/bin/p2pcheck and the dynamic loader it names (ld-linux-x86-64.so.2, libc6)")
	default:
		r.Add(selftest.SevFail, "p2pcheck.crash", fmt.Sprintf("p2pcheck exited %d without a report", run.exitCode), "stderr tail:\n"+run.tail)
	}
	r.Settle()
	return r
}

func tailHint(tail string) string {
	if tail == "" {
		return ""
	}
	return "; stderr tail:\n" + tail
}
