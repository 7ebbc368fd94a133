package nvrun

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// BenchmarkUnpack unpacks a SYNTHETIC installer whose libcuda is 64 MiB of
// compressible bytes, against `xz -d` of the same payload to /dev/null in the
// same run (the reference: what the installer's own stub does first). The
// ratio is the figure; both depend on the machine.
func BenchmarkUnpack(b *testing.B) {
	const v = "580.142"
	rng := rand.New(rand.NewSource(1))
	words := [][]byte{[]byte("cuMemAlloc_v2"), []byte("\x00\x00\x00\x00"), []byte("libnvidia"), []byte("\x48\x89\xe5")}
	var lib bytes.Buffer
	for lib.Len() < 64<<20 {
		if rng.Intn(4) == 0 {
			lib.WriteByte(byte(rng.Intn(256)))
		} else {
			lib.Write(words[rng.Intn(len(words))])
		}
	}
	files := nvruntest.Default(v)
	files["libcuda.so."+v] = lib.Bytes()
	run, err := nvruntest.Build(nvruntest.Spec{Version: v, Files: files})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	p := filepath.Join(dir, "NVIDIA-Linux-x86_64-"+v+".run")
	os.WriteFile(p, run, 0o644)
	payload := filepath.Join(dir, "payload.xz")
	os.WriteFile(payload, run[bytes.Index(run, []byte{0xFD, '7', 'z', 'X', 'Z', 0}):], 0o644)
	b.Run("nvrun", func(b *testing.B) {
		b.SetBytes(int64(lib.Len()))
		for b.Loop() {
			u, err := Unpack(context.Background(), p, Options{Version: v, Scratch: dir})
			if err != nil {
				b.Fatal(err)
			}
			u.Close()
		}
	})
	b.Run("xz-d-reference", func(b *testing.B) {
		if _, err := exec.LookPath("xz"); err != nil {
			b.Fatal("xz(1) is the reference; install xz-utils")
		}
		b.SetBytes(int64(lib.Len()))
		for b.Loop() {
			cmd := exec.Command("sh", "-c", "xz -dc --single-stream < "+payload+" > /dev/null")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}
