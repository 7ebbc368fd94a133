package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/selftest"
)

// chooseSoak offers the recipe's burn-in at the console when nothing chose yet
// (planBoot's offer), then records in the report what made the boot soak. A USB
// stick or ISO boots the UKI with no boot loader, and under Secure Boot the stub
// ignores any command line a loader would give: this prompt is their boot menu.
// Typing at the box's console is the same trust as picking a boot-menu entry.
func (m *machine) chooseSoak(st *bootState) {
	if offer := st.plan.offer; offer > 0 && m.askConsole != nil {
		wait := bootproto.MenuTimeout
		prompt := fmt.Sprintf("peerboot: press %s then Enter for burn-in (%s); booting the self-test in %d s", bootproto.ConsoleBurnIn, offer, int(wait/time.Second))
		answer, err := m.askConsole(prompt, wait)
		if err != nil {
			m.say("burn-in prompt: %v", err)
		}
		st.plan = st.plan.answered(answer)
		if st.plan.soak == 0 {
			m.say("no burn-in chosen: booting the self-test")
		}
	}
	if st.plan.soak <= 0 {
		return
	}
	// The evidence starts with what chose (cmdline, recipe, console): a reader of
	// the report knows why the box soaked.
	var msg, evidence string
	switch st.plan.soakBy {
	case soakByConsole:
		msg = fmt.Sprintf("burn-in of %s chosen on the console (%s typed at the prompt)", st.plan.soak, bootproto.ConsoleBurnIn)
		evidence = soakByConsole + ": " + bootproto.ConsoleBurnIn
	case soakByCmdline:
		msg = fmt.Sprintf("burn-in of %s asked for on the kernel command line", st.plan.soak)
		evidence = soakByCmdline + ": " + bootproto.Arg(bootproto.ArgSoak, parseCmdline(st.kernel.Cmdline)[bootproto.ArgSoak])
	default:
		msg = fmt.Sprintf("burn-in of %s set by the recipe's selftest.soak.duration: every boot of this image soaks", st.plan.soak)
		evidence = soakByRecipe + ": selftest.soak.duration = " + st.plan.soak.String()
	}
	st.finding(selftest.SevInfo, "init.soak", msg, "")
	st.record.Findings[len(st.record.Findings)-1].Evidence = evidence
}

// askConsoles is the real askConsole: the prompt goes to every console the kernel
// writes to (console= may name a serial port and the screen; /dev/console is only
// the last), and the first line typed on any of them is the answer.
func askConsoles(prompt string, timeout time.Duration) (string, error) {
	names := activeConsoles("/sys/class/tty/console/active")
	var fds []int
	for _, n := range names {
		fd, err := unix.Open(filepath.Join("/dev", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == nil {
			fds = append(fds, fd)
		}
	}
	if len(fds) == 0 {
		// No list (no sysfs) or no nodes: the one console PID 1 has.
		fd, err := unix.Dup(0)
		if err != nil {
			return "", fmt.Errorf("no console to ask on: %w", err)
		}
		fds = append(fds, fd)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, fd := range fds {
		// Keys pressed before the question are not its answer.
		_ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH)
		_, _ = unix.Write(fd, []byte(prompt+"\n"))
	}
	return readAnswer(fds, timeout, time.Now)
}

// activeConsoles lists the kernel's consoles (e.g. "tty0 ttyS0") from sysfs; nil
// when it cannot be read.
func activeConsoles(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range strings.Fields(string(b)) {
		// Names come from the kernel, but they become paths: keep them plain.
		if n != "" && !strings.ContainsAny(n, "/.") {
			out = append(out, n)
		}
	}
	return out
}

// answerMax bounds a console answer: the prompt wants one letter.
const answerMax = 256

// readAnswer waits up to timeout for a line on any of fds and returns it without
// its line end; "" when the time ran out first or every fd reached its end. A
// terminal in canonical mode (the console's default) hands over whole lines, so a
// key typed without Enter is no answer.
func readAnswer(fds []int, timeout time.Duration, now func() time.Time) (string, error) {
	deadline := now().Add(timeout)
	bufs := make([][]byte, len(fds))
	open := make([]bool, len(fds))
	for i := range open {
		open[i] = true
	}
	for {
		left := deadline.Sub(now())
		if left <= 0 {
			return "", nil
		}
		var pfds []unix.PollFd
		var idx []int
		for i, fd := range fds {
			if open[i] {
				pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
				idx = append(idx, i)
			}
		}
		if len(pfds) == 0 {
			return "", nil
		}
		ms := int((left + time.Millisecond - 1) / time.Millisecond)
		n, err := unix.Poll(pfds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("waiting for the console: %w", err)
		}
		if n == 0 {
			continue
		}
		for j, p := range pfds {
			i := idx[j]
			if p.Revents == 0 {
				continue
			}
			var b [answerMax]byte
			k, err := unix.Read(fds[i], b[:])
			if k <= 0 || (err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)) {
				open[i] = false // hung up, end of input, or unreadable
				continue
			}
			bufs[i] = append(bufs[i], b[:k]...)
			if line, _, ok := strings.Cut(string(bufs[i]), "\n"); ok {
				return strings.TrimRight(line, "\r"), nil
			}
			if len(bufs[i]) > answerMax {
				bufs[i] = bufs[i][:0] // no answer is this long: start over
			}
		}
	}
}
