package compile

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/progress"
)

func TestEnvIsTheRecipesClockAndIdentity(t *testing.T) {
	env := strings.Join(Env(1795713176), "\n")
	for _, want := range []string{"KBUILD_BUILD_TIMESTAMP=Thu Nov 26 17:12:56 UTC 2026", "KBUILD_BUILD_USER=peerboot",
		"KBUILD_BUILD_HOST=peerboot", "SOURCE_DATE_EPOCH=1795713176", "LC_ALL=C", "TZ=UTC"} {
		if !strings.Contains(env, want+"\n") && !strings.HasSuffix(env, want) {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	t.Setenv("LANG", "zh_CN.UTF-8")
	if strings.Contains(strings.Join(Env(1), " "), "LANG=") {
		t.Error("the caller's locale leaked into the build environment")
	}
}

func TestRunCountsStepsAndShowsTheTailOnFailure(t *testing.T) {
	var log, prog bytes.Buffer
	r := &Runner{Stage: "kernel", Dir: t.TempDir(), Log: &log, LogPath: "/tmp/k.log",
		Meter: progress.New(&prog, "kernel compile", "steps", 0), IsStep: KbuildStep}
	script := `for i in 1 2 3; do echo "  CC      kernel/f$i.o"; done; echo "  HOSTCC  scripts/x"; echo noise`
	if err := r.Run(context.Background(), "compile", "sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	if r.Steps != 4 {
		t.Errorf("steps %d, want 4", r.Steps)
	}
	err := r.Run(context.Background(), "compile", "sh", "-c", `for i in $(seq 1 80); do echo line$i; done; exit 2`)
	if err == nil {
		t.Fatal("a failing command passed")
	}
	msg := err.Error()
	if !strings.Contains(msg, "line80") || !strings.Contains(msg, "line31") || strings.Contains(msg, "line30\n") || !strings.Contains(msg, "full log: /tmp/k.log") {
		t.Errorf("want the last 50 lines and the log path, got:\n%s", msg)
	}
}
