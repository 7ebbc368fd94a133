package ncclinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/fatbin"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/ncclinfo"
	"github.com/peerboot/peerboot/ncclinfo/nccltest"
)

func TestReadSyntheticLibrary(t *testing.T) {
	so := filepath.Join(t.TempDir(), "libnccl.so.2.29.7")
	nccltest.Build(t, so, "2.29.7", "12.4", []fatbin.Entry{{Kind: fatbin.Cubin, SM: 80}, {Kind: fatbin.Cubin, SM: 90}})
	info, err := ncclinfo.Read(so)
	if err != nil {
		t.Fatal(err)
	}
	if info.String() != "NCCL 2.29.7 (built with CUDA 12.4)" || len(info.Fatbins) != 1 {
		t.Fatalf("got %s, %d fatbins", info, len(info.Fatbins))
	}
	if !info.Check(89).OK() || !info.Check(90).OK() || info.Check(120).OK() {
		t.Errorf("coverage: sm_89 %v sm_90 %v sm_120 %v", info.Check(89), info.Check(90), info.Check(120))
	}
}

func TestReadRefusesOtherLibraries(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		testguard.Skip(t, "no C compiler (build-essential)")
	}
	dir := t.TempDir()
	src, so := filepath.Join(dir, "x.c"), filepath.Join(dir, "libx.so")
	os.WriteFile(src, []byte("int x = 1;\n"), 0o644)
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if _, err := ncclinfo.Read(so); err == nil || !strings.Contains(err.Error(), "not an NCCL library") {
		t.Errorf("plain library: %v", err)
	}
	if _, err := ncclinfo.Read(filepath.Join(dir, "absent.so")); err == nil {
		t.Error("absent file read")
	}
}

func TestParseVersionString(t *testing.T) {
	if v, c, ok := ncclinfo.ParseVersionString("2.29.7+cuda12.4"); !ok || v != "2.29.7" || c != "12.4" {
		t.Errorf("got %q %q %v", v, c, ok)
	}
	if _, _, ok := ncclinfo.ParseVersionString("2.29.7"); ok {
		t.Error("accepted a version without +cuda")
	}
}
