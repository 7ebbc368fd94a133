package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "p2pcheck")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func baseForTest() *selftest.Report {
	r := selftest.New()
	r.StartedAt = "2025-06-01T12:00:00Z"
	r.Modules = []selftest.Module{{Name: "nvidia", Result: selftest.ModENODEV, Errno: 19}}
	return r
}

func TestReportFrom(t *testing.T) {
	good := selftest.New()
	good.Verdict = selftest.Fail
	good.Add(selftest.SevFail, "cuda.load", "x", "y")
	goodJSON, _ := selftest.Encode(good)
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	os.WriteFile(jsonFile, goodJSON, 0o644)

	tests := []struct {
		name     string
		body     string
		limit    time.Duration
		check    string // the fail finding expected
		deadline string
	}{
		{"report and exit 9", "cat " + jsonFile + "; exit 9", time.Minute, "cuda.load", ""},
		{"exit disagrees with verdict", "cat " + jsonFile + "; exit 0", time.Minute, "p2pcheck.exit", ""},
		{"panic", "echo 'panic: runtime error: index out of range' >&2; echo 'goroutine 1 [running]:' >&2; exit 2", time.Minute, "p2pcheck.crash", ""},
		{"garbage on stdout", "echo '{not json'; exit 9", time.Minute, "p2pcheck.crash", ""},
		{"killed by a signal", "kill -SEGV $$", time.Minute, "p2pcheck.crash", ""},
		{"hang", "echo 'cuInit...' >&2; exec sleep 60", 500 * time.Millisecond, "deadline", selftest.PhaseTotal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var console bytes.Buffer
			start := time.Now()
			run := runP2PCheck(script(t, tt.body), nil, checkEnv(nil), tt.limit, &console, nil)
			if time.Since(start) > 20*time.Second {
				t.Errorf("took %s", time.Since(start))
			}
			r := reportFrom(run, baseForTest(), tt.limit)
			if r.Verdict != selftest.Fail || r.DeadlineExceeded != tt.deadline {
				t.Errorf("verdict %s deadline %q", r.Verdict, r.DeadlineExceeded)
			}
			found := false
			for _, f := range r.Findings {
				if f.Status == selftest.SevFail && f.ID == tt.check {
					found = true
				}
			}
			if !found {
				t.Errorf("no fail finding %s in %+v", tt.check, r.Findings)
			}
			if tt.name == "panic" {
				if !strings.Contains(r.Findings[len(r.Findings)-1].Hint, "index out of range") {
					t.Errorf("stderr tail missing from %+v", r.Findings)
				}
				if len(r.Modules) != 1 {
					t.Errorf("init's modules lost: %+v", r.Modules)
				}
			}
		})
	}
}

func TestRunP2PCheckMissingBinary(t *testing.T) {
	run := runP2PCheck("/nonexistent/p2pcheck", nil, nil, time.Second, io.Discard, nil)
	r := reportFrom(run, baseForTest(), time.Second)
	if r.Verdict != selftest.Fail || r.Findings[len(r.Findings)-1].ID != "p2pcheck.start" {
		t.Errorf("%+v", r.Findings)
	}
}

func TestCheckEnv(t *testing.T) {
	got := checkEnv(map[string]string{"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "INFO"})
	if strings.Join(got[3:], " ") != "NCCL_DEBUG=INFO NCCL_P2P_LEVEL=SYS" || !strings.HasPrefix(got[0], "PATH=") {
		t.Errorf("checkEnv = %v", got)
	}
}
