package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// diskWithReport writes a small peerboot disk whose PEERBOOT partition holds one report.
func diskWithReport(t *testing.T, verdict string) string {
	t.Helper()
	r := selftest.New()
	r.Verdict, r.StartedAt = verdict, "2025-06-01T12:00:00Z"
	r.Recipe.Name = "default"
	js, err := selftest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const seed = "cli"
	err = image.WriteDisk(f, image.Disk{DiskGUID: image.DeriveGUID(seed, "disk"), Epoch: 1700000000,
		ESP:     image.Partition{Size: 34 << 20, GUID: image.DeriveGUID(seed, "esp"), Label: "ESP"},
		Reports: image.Partition{Size: 32 << 20, GUID: image.DeriveGUID(seed, "reports"), Label: "PEERBOOT", Files: map[string][]byte{"report-20250601T120000Z.json": js}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlashAndReportsExitCodes(t *testing.T) {
	dir := t.TempDir()
	pass, fail := diskWithReport(t, selftest.Pass), diskWithReport(t, selftest.Fail)
	empty := filepath.Join(dir, "empty.img")
	os.WriteFile(empty, nil, 0o644)
	cases := []struct {
		args []string
		code int
		text string // in stdout or stderr
	}{
		{[]string{"flash", pass, pass, "--yes"}, 10, "not a block device"},
		{[]string{"flash", filepath.Join(dir, "absent.img"), "/dev/null"}, 2, "no such file"},
		// IMAGE is an OUTDIR without disk.img, or an empty file: the image argument
		// is wrong (2), not the device (10).
		{[]string{"flash", dir, "/dev/null"}, 2, dir + ": no disk.img: not a build output"},
		{[]string{"flash", empty, "/dev/null"}, 2, empty + ": not a disk image: an empty file"},
		{[]string{"flash", pass}, 2, "want 2 argument(s)"},
		{[]string{"reports", pass}, 0, "report-20250601T120000Z.json"},
		{[]string{"reports", fail, "--brief"}, 9, "is not a pass"},
		{[]string{"reports", filepath.Join(dir, "absent")}, 2, filepath.Join(dir, "absent") + ": no such file or device"},
		{[]string{"reports", dir}, 2, dir + ": no disk.img: not a build output"},
		{[]string{"publish", dir, "oci://x"}, 2, "not an OCI reference"},
		{[]string{"pull", "oci://127.0.0.1:1/a/b:c", pass}, 2, "not a peerboot output"},
	}
	for _, c := range cases {
		out, errs, code := run(t, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.text) {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", c.args, code, out+errs, c.code, c.text)
		}
	}
}

// flash through the binary on a loop device: the device line and the
// question on stderr, "no" refuses with exit 10 and writes nothing, "yes"
// writes and prints the image's sha256.
func TestFlashPromptOnLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		testguard.Skip(t, "flash needs root (losetup)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		testguard.Skip(t, "losetup not installed (peerboot doctor --packages)")
	}
	img := diskWithReport(t, selftest.Pass)
	backing := filepath.Join(t.TempDir(), "stick.raw")
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 128<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", backing).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v\n%s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })

	flash := func(answer string) (string, string, int) {
		cmd := exec.Command(peerboot, "flash", img, dev, "--force")
		cmd.Stdin = strings.NewReader(answer)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return o.String(), e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}
	gpt := func() string {
		b := make([]byte, 8)
		f, err := os.Open(backing)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.ReadAt(b, 512)
		return string(b)
	}

	o, e, code := flash("no\n")
	if code != 10 || !strings.Contains(e, "loop device backed by "+backing) || !strings.Contains(e, "Type yes to continue") || !strings.Contains(e, "not confirmed") {
		t.Errorf("answer no: exit %d\nstdout %s\nstderr %s", code, o, e)
	}
	if gpt() == "EFI PART" {
		t.Fatal("answer no: the device was written")
	}
	o, e, code = flash("yes\n")
	sum, _ := exec.Command("sha256sum", img).Output()
	if code != 0 || !strings.Contains(o, "wrote") || !strings.Contains(o, "sha256 "+strings.Fields(string(sum))[0]) {
		t.Errorf("answer yes: exit %d\nstdout %s\nstderr %s", code, o, e)
	}
	if gpt() != "EFI PART" {
		t.Error("answer yes: no GPT on the device")
	}
}

// report list --save into a directory that already holds a report of the
// same name from another stick (two boxes whose clocks said the same second,
// or were stuck at the epoch) keeps both: the earlier copy is not replaced.
func TestReportSaveKeepsEarlierCopy(t *testing.T) {
	pass, fail := diskWithReport(t, selftest.Pass), diskWithReport(t, selftest.Fail)
	dir := t.TempDir()
	if _, errs, code := run(t, "report", "list", pass, "--brief", "--save", dir); code != 0 {
		t.Fatalf("saving the first stick: exit %d\n%s", code, errs)
	}
	first, err := os.ReadFile(filepath.Join(dir, "report-20250601T120000Z.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, errs, _ := run(t, "report", "list", fail, "--brief", "--save", dir)
	if again, err := os.ReadFile(filepath.Join(dir, "report-20250601T120000Z.json")); err != nil || !bytes.Equal(again, first) {
		t.Errorf("the first stick's saved report was replaced by the second's\n%s%s", out, errs)
	}
	second, err := os.ReadFile(filepath.Join(dir, "report-20250601T120000Z-1.json"))
	if err != nil || !bytes.Contains(second, []byte(`"fail"`)) {
		t.Errorf("the second stick's report is not saved beside it: %v\n%s%s", err, out, errs)
	}
	if !strings.Contains(out, "report-20250601T120000Z-1.json") {
		t.Errorf("output does not say where the second copy went:\n%s", out)
	}
	// Saving the same stick again changes nothing.
	run(t, "report", "list", pass, "--brief", "--save", dir)
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("after saving the first stick again: %d files, want 2", len(ents))
	}
}
