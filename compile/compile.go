// Package compile runs the long compiles of the kernel and driver stages: one
// environment (one clock, one identity, C locale), the full output in a log file,
// a progress meter fed by the build's step lines, and on failure the last lines of
// output and the log's path.
package compile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/progress"
)

// TailLines is how much compiler output a failure shows.
const TailLines = 50

// Env is the environment of every build command: the recipe's clock, a fixed
// build user and host, UTC and the C locale, plus PATH/HOME/TMPDIR.
func Env(epoch int64) []string {
	env := []string{
		// Kbuild prints this string verbatim in the kernel's version banner.
		"KBUILD_BUILD_TIMESTAMP=" + time.Unix(epoch, 0).UTC().Format("Mon Jan 2 15:04:05 UTC 2006"),
		"KBUILD_BUILD_USER=peerboot",
		"KBUILD_BUILD_HOST=peerboot",
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(epoch, 10),
		"LC_ALL=C", "TZ=UTC",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "TMPDIR":
			env = append(env, kv)
		}
	}
	return env
}

// Runner runs commands in one directory for one stage.
type Runner struct {
	Stage   string    // named in errors: "kernel", "driver"
	Dir     string    // working directory
	Env     []string  // see Env
	Log     io.Writer // every output line
	LogPath string    // the log's path, named in errors
	// Meter, when set, advances by one for each line IsStep accepts.
	Meter  *progress.Meter
	IsStep func(line string) bool
	Steps  int64 // step lines seen so far
}

// Run runs name with args, streaming its output to the log.
func (r *Runner) Run(ctx context.Context, what, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.Dir
	cmd.Env = r.Env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(r.Log, "\n$ %s %s\n", name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s %s: starting %s: %w", r.Stage, what, name, err)
	}
	last := &tail{n: TailLines}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(r.Log, line)
			last.add(line)
			if r.Meter != nil && r.IsStep != nil && r.IsStep(line) {
				r.Steps++
				r.Meter.Add(1)
			}
		}
		io.Copy(io.Discard, pr) // a line over 1 MiB stops the scanner; keep the build from blocking
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		where := ""
		if r.LogPath != "" {
			where = "\nfull log: " + r.LogPath
		}
		return fmt.Errorf("%s %s step failed (%s %s): %w\nlast lines of output:\n%s%s",
			r.Stage, what, name, strings.Join(args, " "), err, last, where)
	}
	return nil
}

// Output runs a short command and returns its trimmed standard output.
func (r *Runner) Output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.Dir
	cmd.Env = r.Env
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// KbuildStep recognises kbuild's quiet-mode lines ("  CC [M]  fs/fat/inode.o").
func KbuildStep(line string) bool {
	if len(line) < 4 || line[0] != ' ' || line[1] != ' ' {
		return false
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return false
	}
	switch f[0] {
	case "CC", "AS", "LD", "AR", "HOSTCC", "HOSTLD":
		return true
	}
	return false
}

type tail struct {
	lines []string
	n     int
}

func (t *tail) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[1:]
	}
}

func (t *tail) String() string { return strings.Join(t.lines, "\n") }
