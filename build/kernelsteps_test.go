package build

import (
	"testing"

	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/store"
)

// The progress total of a kernel compile comes from the last compile of the same
// config, else of the same base; another config's count is not taken for this one.
func TestKernelStepsHint(t *testing.T) {
	root, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := []kernel.Fragment{{Name: "base.config", Data: []byte("CONFIG_A=y\n")}}
	b := []kernel.Fragment{{Name: "base.config", Data: []byte("CONFIG_B=y\n")}}
	if n := kernelStepsHint(root, "tinyconfig", a); n != 0 {
		t.Fatalf("empty store: hint %d, want 0", n)
	}
	saveKernelSteps(root, "tinyconfig", a, 2500)
	saveKernelSteps(root, "tinyconfig", b, 2650)
	if n := kernelStepsHint(root, "tinyconfig", a); n != 2500 {
		t.Errorf("config a: hint %d, want its own 2500", n)
	}
	if n := kernelStepsHint(root, "tinyconfig", b); n != 2650 {
		t.Errorf("config b: hint %d, want 2650", n)
	}
	c := []kernel.Fragment{{Name: "base.config", Data: []byte("CONFIG_C=y\n")}}
	if n := kernelStepsHint(root, "tinyconfig", c); n != 2650 {
		t.Errorf("an unseen config: hint %d, want the base's last count 2650", n)
	}
	if n := kernelStepsHint(root, "x86_64_defconfig", a); n != 0 {
		t.Errorf("another base: hint %d, want 0", n)
	}
}
