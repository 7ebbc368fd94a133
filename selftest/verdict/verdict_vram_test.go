package verdict

import "testing"

// A GPU's memory is the report's when it has a figure, else the recipe's
// platform.vram when that says one, else unknown.
func TestGPUVRAM(t *testing.T) {
	const recipeVRAM = 48 << 30
	for _, c := range []struct {
		name    string
		known   bool  // the report has a figure
		e       int64 // the recipe's platform.vram; -1: no recipe
		want    int64
		wantSrc string
	}{
		{"the report's", true, recipeVRAM, testVRAM, "NVML"},
		{"the recipe's", false, recipeVRAM, recipeVRAM, "recipe"},
		{"the recipe says none", false, 0, 0, ""},
		{"no recipe", false, -1, 0, ""},
	} {
		r := healthyReport(2)
		if !c.known {
			g := &r.GPUs[1]
			g.NVML.FBTotal, g.VRAMBytes, g.CUDA = 0, nil, nil
			r.CUDA.Devices = nil
			if v, _ := r.GPUVRAM(1); v != 0 {
				t.Fatalf("%s: the fixture still has GPU1's memory: %d", c.name, v)
			}
		}
		var e *Expect
		if c.e >= 0 {
			e = &Expect{VRAMBytes: c.e}
		}
		got, src := gpuVRAM(r, e, 1)
		if got != c.want || src != c.wantSrc {
			t.Errorf("%s: %d (%q), want %d (%q)", c.name, got, src, c.want, c.wantSrc)
		}
	}
}
