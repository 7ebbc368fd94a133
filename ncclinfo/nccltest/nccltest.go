// Package nccltest builds SYNTHETIC NCCL libraries for tests: a real ELF shared object
// (made with the host's C compiler) that carries NCCL's version string and a .nv_fatbin
// section with one module of the given code entries, and no GPU code at all.
package nccltest

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/fatbin"
	"github.com/peerboot/peerboot/internal/testguard"
)

// Build writes path, a shared object that reads as "NCCL version <version>+cuda<cuda>"
// with one fatbin module of entries (8-byte stand-in payloads).
func Build(t testing.TB, path, version, cuda string, entries []fatbin.Entry) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		testguard.Skip(t, "no C compiler (build-essential)")
		return
	}
	le := binary.LittleEndian
	var body []byte
	for _, e := range entries {
		h := make([]byte, 32+8)
		le.PutUint16(h[0:], uint16(e.Kind))
		le.PutUint32(h[4:], 32)
		le.PutUint64(h[8:], 8)
		le.PutUint32(h[28:], uint32(e.SM))
		body = append(body, h...)
	}
	fb := make([]byte, 16, 16+len(body))
	le.PutUint32(fb[0:], 0xBA55ED50)
	le.PutUint16(fb[4:], 1)
	le.PutUint16(fb[6:], 16)
	le.PutUint64(fb[8:], uint64(len(body)))
	fb = append(fb, body...)
	var bytes []string
	for _, b := range fb {
		bytes = append(bytes, fmt.Sprint(b))
	}
	src := fmt.Sprintf(`const char banner[] = "NCCL version %s+cuda%s";
__attribute__((section(".nv_fatbin"), used, aligned(8)))
const unsigned char fb[%d] = {%s};
`, version, cuda, len(fb), strings.Join(bytes, ","))
	dir := t.TempDir()
	c := filepath.Join(dir, "nccl.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", path, c).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
}
