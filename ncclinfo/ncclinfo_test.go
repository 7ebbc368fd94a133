package ncclinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// A shared object with NCCL's version string and a .nv_fatbin section, made with the
// host's C compiler; the fatbin holds one module of sm_80 and sm_90 cubins.
func TestReadSyntheticLibrary(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		testguard.Skip(t, "no C compiler (build-essential)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "nccl.c")
	// Fatbin header (magic, version 1, header 16, 2 entries of 32+8 bytes), then two
	// cubin entries (kind 2, header 32, payload 8, arch at 28).
	os.WriteFile(src, []byte(`
const char banner[] = "NCCL version 2.29.7+cuda12.4";
__attribute__((section(".nv_fatbin"), used, aligned(8)))
const unsigned char fb[16 + 2*40] = {
  0x50,0xed,0x55,0xba, 1,0, 16,0, 80,0,0,0,0,0,0,0,
  2,0,1,1, 32,0,0,0, 8,0,0,0,0,0,0,0, 0,0,0,0, 0,0,0,0, 0,0,0,0, 80,0,0,0,  1,2,3,4,5,6,7,8,
  2,0,1,1, 32,0,0,0, 8,0,0,0,0,0,0,0, 0,0,0,0, 0,0,0,0, 0,0,0,0, 90,0,0,0,  1,2,3,4,5,6,7,8,
};
`), 0o644)
	so := filepath.Join(dir, "libnccl.so.2.29.7")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	info, err := Read(so)
	if err != nil {
		t.Fatal(err)
	}
	if info.String() != "NCCL 2.29.7 (built with CUDA 12.4)" || len(info.Fatbins) != 1 {
		t.Fatalf("got %s, %d fatbins", info, len(info.Fatbins))
	}
	if !info.Check(89).OK() || !info.Check(90).OK() || info.Check(120).OK() {
		t.Errorf("coverage: sm_89 %v sm_90 %v sm_120 %v", info.Check(89), info.Check(90), info.Check(120))
	}
	// Not NCCL: no version string.
	os.WriteFile(src, []byte("int x = 1;\n"), 0o644)
	exec.Command(cc, "-shared", "-fPIC", "-o", so, src).Run()
	if _, err := Read(so); err == nil || !strings.Contains(err.Error(), "not an NCCL library") {
		t.Errorf("plain library: %v", err)
	}
}

func TestParseVersionString(t *testing.T) {
	if v, c, ok := ParseVersionString("2.29.7+cuda12.4"); !ok || v != "2.29.7" || c != "12.4" {
		t.Errorf("got %q %q %v", v, c, ok)
	}
	if _, _, ok := ParseVersionString("2.29.7"); ok {
		t.Error("accepted a version without +cuda")
	}
}
