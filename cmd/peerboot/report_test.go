package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/verdict"
)

// sampleReport is a judged two-GPU report; corrupt breaks one peer copy.
func sampleReport(corrupt bool) *selftest.Report {
	r := selftest.New()
	r.Recipe = selftest.RecipeRef{Name: "epyc-4gpu", Digest: "sha256:" + strings.Repeat("ab", 32)}
	r.Kernel = selftest.Kernel{Release: "6.12.9-peerboot"}
	r.Modules = []selftest.Module{{Name: "nvidia", Result: selftest.ModLoaded}}
	r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &selftest.Status{Name: "CUDA_SUCCESS"}, DriverVersion: 12040}
	r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS"}, DriverVersion: "550.163.01"}
	link := selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}
	for _, bdf := range []string{"0000:01:00.0", "0000:02:00.0"} {
		r.GPUs = append(r.GPUs, selftest.GPU{BDF: bdf, Vendor: "0x10de", Device: "0x2684", Link: link, BAR1Bytes: 32 << 30})
	}
	r.Pairs = []selftest.Pair{{A: 0, B: 1, Topology: selftest.TopoPHB, P2PRead: "OK", P2PWrite: "OK"}}
	for _, c := range [][2]int{{0, 1}, {1, 0}} {
		r.Copies = append(r.Copies, selftest.Copy{Src: c[0], Dst: c[1], Method: selftest.MethodCE, Direction: selftest.DirWrite,
			Bytes: 256 << 20, GBps: 24.1, LinkGBps: 31.5, Verified: true})
	}
	if corrupt {
		r.Copies[1].Verified = false
		r.Copies[1].Mismatch = &selftest.Mismatch{Offset: 4096, Want: 1, Got: 0, Words: 3}
		r.Copies[0].GBps = 20.0
	}
	r.StartedAt = "2026-11-29T12:00:00Z"
	verdict.Judge(r, verdict.FromRecipe(&recipe.Recipe{
		Platform: recipe.Platform{GPUs: 2},
		Driver:   recipe.Driver{Version: "550.163.01", P2P: recipe.P2PDynamicBAR1},
		Selftest: recipe.Selftest{RequireP2P: true},
	}))
	return r
}

func writeReport(t *testing.T, path string, r *selftest.Report) {
	t.Helper()
	b, err := selftest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReportShow(t *testing.T) {
	t.Setenv("COLUMNS", "")
	dir := t.TempDir()
	good := sampleReport(false)
	jsonFile := filepath.Join(dir, "good.json")
	writeReport(t, jsonFile, good)
	line, err := selftest.EncodeLine(good)
	if err != nil {
		t.Fatal(err)
	}
	consoleFile := filepath.Join(dir, "console-uefi.log")
	os.WriteFile(consoleFile, []byte("BdsDxe: loading Boot0001\r\n[    2.1] random kernel noise\r\n"+line+"\r\npeerboot: powering off\r\n"), 0o644)

	want := selftest.Render(good)
	for _, f := range []string{jsonFile, consoleFile} {
		out, errs, code := run(t, "report", "show", f)
		if code != 0 || out != want {
			t.Errorf("report show %s: exit %d\n%s\n--- want\n%s%s", filepath.Base(f), code, out, want, errs)
		}
	}
	out, _, code := run(t, "report", "show", "--json", consoleFile)
	if back, err := selftest.Decode([]byte(out)); code != 0 || err != nil || back.Verdict != selftest.Pass {
		t.Errorf("report show --json: exit %d, %v\n%s", code, err, out)
	}

	t.Setenv("COLUMNS", "160")
	if out, _, code := run(t, "report", "show", jsonFile); code != 0 || out != selftest.RenderWidth(good, 160) {
		t.Errorf("report show with COLUMNS=160: exit %d, not the 160-column view:\n%s", code, out)
	}
	if out, _, code := run(t, "report", "show", "--width", "100", jsonFile); code != 0 || out != selftest.RenderWidth(good, 100) {
		t.Errorf("report show --width 100: exit %d, not the 100-column view:\n%s", code, out)
	}
	t.Setenv("COLUMNS", "")

	junk := filepath.Join(dir, "junk.log")
	os.WriteFile(junk, []byte("no report here\n"), 0o644)
	if _, errs, code := run(t, "report", "show", junk); code != 2 || !strings.Contains(errs, "neither a report JSON nor a console log") {
		t.Errorf("report show junk: exit %d, want 2\n%s", code, errs)
	}
	if _, errs, code := run(t, "report", "show", filepath.Join(dir, "missing.json")); code != 2 || !strings.Contains(errs, "reading the report") {
		t.Errorf("report show missing file: exit %d, want 2\n%s", code, errs)
	}
}

func TestReportDiff(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	writeReport(t, a, sampleReport(false))
	writeReport(t, b, sampleReport(true))

	out, errs, code := run(t, "report", "diff", a, a)
	if code != 0 || !strings.Contains(out, "verdict: pass (unchanged)") || !strings.Contains(out, "same verdict, no fail finding added") {
		t.Errorf("diff a a: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = run(t, "report", "diff", a, b)
	for _, want := range []string{"verdict: pass -> fail", "findings added (1)", "FAIL  copy.corrupt [GPU1->GPU0 ce write]", "GPU0->GPU1 ce write  24.10  -> 20.00  -17.0%"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff a b lacks %q", want)
		}
	}
	if code != 1 || !strings.Contains(errs, "reports differ: verdict pass -> fail") {
		t.Errorf("diff a b: exit %d, want 1\n%s%s", code, out, errs)
	}
	// A fixed box: the verdict changes, so the exit is 1 as well.
	if _, _, code := run(t, "report", "diff", b, a); code != 1 {
		t.Errorf("diff b a: exit %d, want 1", code)
	}
	out, _, code = run(t, "report", "diff", "--json", a, b)
	var d selftest.ReportDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 1 || d.Clean || !d.FailAdded || len(d.Copies) != 2 {
		t.Errorf("diff --json: exit %d, %v: %+v\n%s", code, err, d, out)
	}
	if _, _, code := run(t, "report", "diff", a); code != 2 {
		t.Errorf("diff with one file: exit %d, want 2", code)
	}
}

// report show refuses what serve refuses, with the key and without Go's type names
// (issue 20: a copy from GPU 2000 printed 34 MB of dashes, verdict "maybe" exited 0).
func TestReportShowRefusesInvalid(t *testing.T) {
	t.Setenv("COLUMNS", "")
	dir := t.TempDir()
	good, err := selftest.Encode(sampleReport(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"copy from GPU 2000", `"src": 1,`, `"src": 2000,`, "copies[1].src: 2000, want 0..1 (the report has 2 GPUs)"},
		{"verdict maybe", `"verdict": "pass"`, `"verdict": "maybe"`, `verdict: "maybe", want "pass" or "fail"`},
		{"wrong type", `"gbps": 24.1,`, `"gbps": "fast",`, "copies.gbps: want a number, got a string"},
		{"bytes after the report", "", "", "bytes follow the report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := string(good) + "{}"
			if tc.from != "" {
				body = strings.Replace(string(good), tc.from, tc.to, 1)
				if body == string(good) {
					t.Fatalf("%q not in the report", tc.from)
				}
			}
			f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			os.WriteFile(f, []byte(body), 0o644)
			out, errs, code := run(t, "report", "show", f)
			if code != 2 || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("exit %d, want 2 with %q and no output\nstdout %d bytes\nstderr %s", code, tc.want, len(out), errs)
			}
			if tc.from != "" && !regexp.MustCompile(regexp.QuoteMeta(f)+`:\d+:\d+: `).MatchString(errs) && tc.name == "wrong type" {
				t.Errorf("a JSON error does not start with FILE:LINE:COL: %s", errs)
			}
			for _, goName := range []string{"Go struct", "float64", "selftest.", "json: cannot"} {
				if strings.Contains(errs, goName) {
					t.Errorf("error names Go internals (%q): %s", goName, errs)
				}
			}
		})
	}
}

func TestConsoleWidth(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	var buf strings.Builder
	for _, tc := range []struct {
		flag    int
		columns string
		want    int
	}{{0, "", 80}, {0, "132", 132}, {0, "junk", 80}, {0, "-5", 80}, {100, "132", 100}} {
		if got := consoleWidth(&buf, tc.flag, env(tc.columns)); got != tc.want {
			t.Errorf("flag %d COLUMNS %q: %d, want %d", tc.flag, tc.columns, got, tc.want)
		}
	}
}
