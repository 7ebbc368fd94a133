package build

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/store"
)

// The image stage reads only vmlinuz of the kernel's output (stage.Reads):
// a damaged header file there, which only the driver and modules stages
// read, does not rebuild the kernel for an image; a damaged vmlinuz does.
func TestImageChecksOnlyTheKernelFilesItReads(t *testing.T) {
	p, _, ins := planOf(t, "")
	st, _ := store.Open(t.TempDir())
	commit := func(stage StageName, files map[string]string) string {
		out := t.TempDir()
		for name, body := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(out, name)), 0o755)
			os.WriteFile(filepath.Join(out, name), []byte(body), 0o644)
		}
		if err := st.CommitOutput(p.Stage(stage).Key, out); err != nil {
			t.Fatal(err)
		}
		return st.OutputDir(p.Stage(stage).Key)
	}
	kdir := commit(StageKernel, map[string]string{kernel.ImageFile: "kernel image", "build/include/linux/x.h": "#define X 1"})
	commit(StageInitramfs, map[string]string{initrdFile: "initrd"})
	build := func() string {
		t.Helper()
		var log bytes.Buffer
		// The build stops before any stage runs: the first stage to run lacks
		// its inputs in this store, and the error names that stage.
		_, err := Run(context.Background(), p, Options{Store: st, Inputs: ins, Until: StageImage, Log: &log})
		if err == nil {
			t.Fatalf("the image stage ran without an EFI stub:\n%s", log.String())
		}
		return log.String() + err.Error()
	}
	if got := build(); !strings.Contains(got, "stage image: input") {
		t.Fatalf("intact kernel output:\n%s", got)
	}
	os.WriteFile(filepath.Join(kdir, "build/include/linux/x.h"), []byte("#define X 12345"), 0o644)
	if got := build(); !strings.Contains(got, "stage image: input") {
		t.Fatalf("a damaged header the image does not read rebuilt the kernel:\n%s", got)
	}
	if err := st.CheckOutput(p.Stage(StageKernel).Key); err == nil {
		t.Fatal("the whole check missed the damaged header")
	}
	os.WriteFile(filepath.Join(kdir, kernel.ImageFile), []byte("kernel"), 0o644)
	if got := build(); !strings.Contains(got, "stage kernel: input") {
		t.Fatalf("a damaged vmlinuz was reused:\n%s", got)
	}
}
