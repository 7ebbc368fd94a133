package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
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
	cases := []struct {
		args []string
		code int
		text string // in stdout or stderr
	}{
		{[]string{"flash", pass, pass, "--yes"}, 10, "not a block device"},
		{[]string{"flash", filepath.Join(dir, "absent.img"), "/dev/null"}, 2, "no such file"},
		{[]string{"flash", pass}, 2, "want 2 argument(s)"},
		{[]string{"reports", pass}, 0, "report-20250601T120000Z.json"},
		{[]string{"reports", fail, "--brief"}, 9, "is not a pass"},
		{[]string{"reports", filepath.Join(dir, "absent")}, 2, "no such file"},
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
