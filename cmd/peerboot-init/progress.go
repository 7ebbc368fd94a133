package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/selftest"
)

// While p2pcheck soaks (a burn-in), its progress file (bootproto.SoakProgressFile,
// written by p2pcheck --soak-progress) is POSTed to serve's progress endpoint beside
// the report URL, every bootproto.DefaultSoakProgressEvery or peerboot.soak_progress=,
// with the report's token (docs/burn-in.md). A POST that fails is said on the console
// and tried again at the next interval, and the final report is written to the stick
// and POSTed as on every boot. The one thing serve can do to the soak is answer a
// POST with "stop": true (peerboot rollout burn-in-stop): the poster then
// closes halt, once, and the init sends p2pcheck the SIGTERM it ends a soak on.

// progressEvery is the interval peerboot.soak_progress= asks for, else the default;
// a value that is no positive duration is ignored with a console line.
func progressEvery(cmdline map[string]string) (time.Duration, string) {
	v, ok := cmdline[bootproto.ArgSoakProgress]
	if !ok {
		return bootproto.DefaultSoakProgressEvery, ""
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return bootproto.DefaultSoakProgressEvery, fmt.Sprintf("%s=%s ignored: want a duration such as 30s or 5m; progress goes every %s", bootproto.ArgSoakProgress, v, bootproto.DefaultSoakProgressEvery)
	}
	return d, ""
}

// lockedWriter serialises writes to the console: p2pcheck's stderr and the progress
// poster write to it from different goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// progressPoster sends the progress file when it changed since the last POST.
type progressPoster struct {
	post    func(url, token string, body []byte) ([]byte, error)
	url     string
	token   string
	file    string
	console io.Writer
	last    []byte // the body last POSTed
	posted  int
	failed  bool // the last POST failed
	// halt is closed when serve first answers stop; stopped is that answer.
	halt    chan struct{}
	stopped *bootproto.ProgressAnswer
	badAns  bool // an answer that was not serve's was said once
}

func (p *progressPoster) say(format string, args ...any) {
	fmt.Fprintf(p.console, "peerboot: "+format+"\n", args...)
}

// once POSTs the file if it holds a progress document other than the last one sent.
func (p *progressPoster) once() {
	body, err := readProgress(p.file)
	if err != nil {
		if !os.IsNotExist(err) {
			p.say("burn-in progress: %v", err)
		}
		return
	}
	if bytes.Equal(body, p.last) {
		return
	}
	ans, err := p.post(p.url, p.token, body)
	if err != nil {
		p.failed = true
		p.say("burn-in progress POST to %s failed: %v; the soak goes on", p.url, err)
		return
	}
	p.last, p.failed = body, false
	p.posted++
	if prog, err := selftest.DecodeSoakProgress(body); err == nil {
		p.say("burn-in progress POSTed to %s: %s, %d rounds, %d faulty", p.url, prog.State, prog.Rounds, prog.FaultyRounds)
	}
	p.answer(ans)
}

// answer reads serve's answer to a progress POST (nil: none was read). A stop is
// acted on once; an answer that is not serve's JSON is said once and ignored (the
// soak goes on: only serve's explicit stop ends it).
func (p *progressPoster) answer(ans []byte) {
	if ans == nil || p.stopped != nil {
		return
	}
	var a bootproto.ProgressAnswer
	if len(ans) > bootproto.MaxProgressAnswerBytes {
		if !p.badAns {
			p.say("burn-in: serve's answer to the progress is over %d bytes; ignored", bootproto.MaxProgressAnswerBytes)
		}
		p.badAns = true
		return
	}
	if err := json.Unmarshal(ans, &a); err != nil {
		if !p.badAns {
			p.say("burn-in: serve's answer to the progress is not its JSON (%v); ignored", err)
		}
		p.badAns = true
		return
	}
	if !a.Stop {
		return
	}
	p.stopped = &a
	why := ""
	if a.StopReason != "" {
		why = ": " + a.StopReason
	}
	p.say("burn-in: serve asks this burn-in to stop (requested by %s at %s%s); ending the soak after this round, the report follows",
		a.StopBy, a.StopAt.UTC().Format(time.RFC3339), why)
	if p.halt != nil {
		close(p.halt)
	}
}

// readProgress reads the progress file, bounded, and checks it with serve's parser:
// a torn or foreign file is not sent.
func readProgress(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, selftest.MaxSoakProgressBytes+1))
	if err != nil {
		return nil, err
	}
	if _, err := selftest.DecodeSoakProgress(body); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return body, nil
}

// watch POSTs the file every interval until stop is called; stop then POSTs its
// final state (the soak's end, or why it was skipped) and returns how many went out.
// p.stopped is read only after stop returned.
func (p *progressPoster) watch(every time.Duration) (stop func() int) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.once()
			}
		}
	}()
	return func() int {
		close(done)
		<-finished
		if p.failed {
			// The network failed the last time: another try (with its retries) would
			// only hold up the report, which carries everything.
			p.say("burn-in: the last progress is not sent (the POST before it failed); the report follows")
			return p.posted
		}
		p.once()
		return p.posted
	}
}

// soakProgress asks p2pcheck for its progress file and starts POSTing it: the
// arguments to run p2pcheck with, the console it and the poster share, the channel
// closed when serve asks the soak to stop, and the function that ends the posting
// after p2pcheck (with one last POST) and returns serve's stop answer (nil: none).
func (m *machine) soakProgress(st *bootState, args []string) ([]string, io.Writer, <-chan struct{}, func() *bootproto.ProgressAnswer) {
	every, warn := progressEvery(parseCmdline(st.kernel.Cmdline))
	if warn != "" {
		m.say("%s", warn)
	}
	file := m.path(bootproto.SoakProgressFile)
	os.Remove(file) // a file of an earlier run (a test's root) is no progress of this one
	console := &lockedWriter{w: m.console}
	post := m.postProgress
	if post == nil {
		post = func(url, token string, body []byte) ([]byte, error) { return nil, m.post(url, token, body, "") }
	}
	p := &progressPoster{post: post, url: bootproto.ProgressURL(st.plan.reportURL), token: st.plan.reportToken, file: file, console: console, halt: make(chan struct{})}
	m.say("burn-in: progress goes to %s every %s", p.url, every)
	stop := p.watch(every)
	return append(args, "--soak-progress", file), console, p.halt, func() *bootproto.ProgressAnswer {
		if n := stop(); n == 0 {
			m.say("burn-in: no progress was POSTed (p2pcheck wrote none, or the POSTs failed)")
		}
		return p.stopped
	}
}
